//! CSI volumes on the node (issue 18 item 2): PVs with a `csi:` source staged once per node and
//! published per pod through the test driver `rkt-csi-hostpath` (tests/csi_driver), unpublished
//! and unstaged on teardown; a failing NodePublishVolume and a kill of rkubelet between stage
//! and publish; restart adoption; the VolumeAttachment wait of an attachable driver; inline
//! ephemeral volumes. Real apiserver, kube-controller-manager's PV binder, real bind mounts.

mod common;
#[path = "csi_driver/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use harness::{csi_driver_object, csi_pv_and_claim, Driver, DRIVER};
use serde_json::Value;
fn is_mount_point(p: &Path) -> bool {
    let want = p.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_str()))
}

/// Unmounts whatever a failed test left below the kubelet's root (and the driver's state)
/// before the Env removes its directory.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for root in &self.0 {
            let mut left = mounts_below(root);
            left.sort_by_key(|m| std::cmp::Reverse(m.len()));
            for m in left {
                let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
            }
        }
    }
}

fn sha256(s: &str) -> String {
    let out = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(s.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

fn claim_pod(name: &str, node: &str, claim: &str, script: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  volumes:
  - name: data
    persistentVolumeClaim: {{claimName: {claim}}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {script:?}]
    volumeMounts:
    - {{name: data, mountPath: /data}}
"#
    )
}

fn volumes_in_use(cp: &ControlPlane, node: &str) -> Vec<String> {
    cp.get_json(&["node", node])
        .and_then(|n| n["status"]["volumesInUse"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

/// `storage_operation_duration_seconds` (sum, count) of the CSI driver's `op`, from /metrics.
fn csi_op_seconds(env: &Env, op: &str) -> (f64, f64) {
    let (code, body) = http_get("127.0.0.1", env.ro_port, "/metrics").expect("GET /metrics");
    assert_eq!(code, 200);
    let value = |suffix: &str| {
        body.lines()
            .filter(|l| {
                l.starts_with(&format!("storage_operation_duration_seconds_{suffix}{{"))
                    && l.contains(&format!("volume_plugin=\"kubernetes.io/csi:{DRIVER}\""))
                    && l.contains(&format!("operation_name=\"{op}\""))
                    && l.contains("status=\"success\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    (value("sum"), value("count"))
}

/// What every test here starts from: a control plane running kube-controller-manager with
/// `controllers`, a node joined and registered, the test driver serving with STAGE_UNSTAGE, and
/// its CSIDriver object (`attachRequired: attach_required`, mode Persistent). Bind the result
/// as `let (cp, env, _cleanup, driver) = ...`: the driver goes first, then the mounts left
/// below the root, then the Env, then the control plane.
fn node_with_driver(
    tag: &str,
    index: u32,
    controllers: &[&str],
    attach_required: bool,
) -> (ControlPlane, Env, Cleanup, Driver) {
    let cp = ControlPlane::up(tag);
    cp.start_controller_manager(controllers);
    let mut env = Env::new(index);
    let cleanup = Cleanup(vec![env.root.clone(), env.dir.join("csi-volumes")]);
    env.join(&cp, &[]);
    wait_until(Duration::from_secs(30), "node registered", || {
        cp.get_json(&["node", &env.node])
    });
    let driver = Driver::start(&env, &format!("csi-{}", env.node), &["--stage"]);
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&csi_driver_object(attach_required, "Persistent")),
    );
    (cp, env, cleanup, driver)
}

fn pod_uid(p: &Value) -> String {
    p["metadata"]["uid"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn csi_pv_is_staged_once_published_per_pod_and_unstaged_after_the_last() {
    let (cp, env, _cleanup, driver) = node_with_driver("csiv1", 137, &PV_BINDER, false);
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&csi_pv_and_claim("data", "vol-a")),
    );
    // Bound first, so that the figure below is the kubelet's part alone.
    wait_until(Duration::from_secs(60), "claim bound", || {
        let c = cp.get_json(&["pvc", "data"])?;
        (c["status"]["phase"] == "Bound").then_some(())
    });
    let t0 = Instant::now();
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&claim_pod(
            "writer",
            &env.node,
            "data",
            &format!("echo shared > /data/a; {SLEEPER}"),
        )),
    );
    let a = cp.running_pod("writer");
    println!(
        "figure: CSI pod (stage + publish) create to Running: {:?}",
        t0.elapsed()
    );

    // Staged once at upstream's global path, with its vol_data.json; published at the pod's.
    let global = env
        .root
        .join("plugins/kubernetes.io/csi")
        .join(DRIVER)
        .join(sha256("vol-a"));
    let staging = global.join("globalmount");
    assert!(is_mount_point(&staging), "{}", tail(&env.kubelet_log(), 40));
    let gdata: Value =
        serde_json::from_slice(&std::fs::read(global.join("vol_data.json")).unwrap()).unwrap();
    assert_eq!(
        gdata,
        serde_json::json!({"driverName": DRIVER, "volumeHandle": "vol-a"})
    );
    let vol_dir = |p: &Value| {
        env.root
            .join("pods")
            .join(pod_uid(p))
            .join("volumes/kubernetes.io~csi/pv-data")
    };
    assert!(is_mount_point(&vol_dir(&a).join("mount")));
    let pdata: Value =
        serde_json::from_slice(&std::fs::read(vol_dir(&a).join("vol_data.json")).unwrap()).unwrap();
    assert_eq!(pdata["specVolID"], "pv-data");
    assert_eq!(pdata["volumeHandle"], "vol-a");
    assert_eq!(pdata["driverName"], DRIVER);
    assert_eq!(pdata["nodeName"], env.node.as_str());
    assert_eq!(pdata["volumeLifecycleMode"], "Persistent");
    assert_eq!(
        pdata["attachmentID"],
        format!("csi-{}", sha256(&format!("vol-a{DRIVER}{}", env.node))).as_str()
    );
    let stages = driver.calls("NodeStageVolume");
    assert_eq!(stages.len(), 1, "{}", driver.log());
    assert!(stages[0].contains(&format!("staging={}", staging.display())));
    assert!(
        stages[0].contains("secrets=[\"stage-key\"]"),
        "{}",
        stages[0]
    );
    assert!(stages[0].contains("\"tier\":\"gold\""), "{}", stages[0]);
    let publishes = driver.calls("NodePublishVolume");
    assert_eq!(publishes.len(), 1, "{}", driver.log());
    let p = &publishes[0];
    assert!(p.contains(&format!("staging={}", staging.display())), "{p}");
    assert!(p.contains("secrets=[\"publish-key\"]"), "{p}");
    assert!(p.contains("readonly=false"), "{p}");
    // podInfoOnMount: the pod's identity in the volume context, ephemeral false.
    for kv in [
        "\"csi.storage.k8s.io/pod.name\":\"writer\"".to_string(),
        "\"csi.storage.k8s.io/pod.namespace\":\"default\"".to_string(),
        format!("\"csi.storage.k8s.io/pod.uid\":\"{}\"", pod_uid(&a)),
        "\"csi.storage.k8s.io/ephemeral\":\"false\"".to_string(),
        "\"tier\":\"gold\"".to_string(),
    ] {
        assert!(p.contains(&kv), "{kv} in {p}");
    }
    // The data went through the bind mounts into the driver's volume.
    assert_eq!(
        std::fs::read_to_string(env.dir.join("csi-volumes/vol-a/a")).unwrap(),
        "shared\n"
    );
    // /stats/summary asks the driver (NodeGetVolumeStats): it reports the file system holding
    // its volumes, whose used bytes are far more than the 7 bytes a walk of the volume finds.
    let (code, body) = http_get("127.0.0.1", env.ro_port, "/stats/summary").unwrap();
    assert_eq!(code, 200, "{body}");
    let summary: Value = serde_json::from_str(&body).unwrap();
    let vol = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == "writer")
        .and_then(|p| {
            p["volume"]
                .as_array()?
                .iter()
                .find(|v| v["name"] == "pv-data")
                .cloned()
        })
        .unwrap_or_else(|| panic!("no CSI volume in {body}"));
    let fs = nix::sys::statvfs::statvfs(&driver.state).unwrap();
    assert_eq!(
        vol["capacityBytes"].as_u64(),
        Some(fs.blocks() * fs.fragment_size()),
        "{vol}"
    );
    assert!(vol["usedBytes"].as_u64().unwrap() > 10 << 20, "{vol}");
    assert_eq!(vol["inodes"].as_u64(), Some(fs.files()), "{vol}");
    let unique = format!("kubernetes.io/csi/{DRIVER}^vol-a");
    wait_until(Duration::from_secs(30), "volumesInUse", || {
        volumes_in_use(&cp, &env.node)
            .contains(&unique)
            .then_some(())
    });

    // A second pod on the same claim shares the staged volume: published again, not staged.
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&claim_pod("reader", &env.node, "data", SLEEPER)),
    );
    let b = cp.running_pod("reader");
    assert_eq!(
        exec_first(&env, &b, &["cat", "/data/a"]).await,
        (0, "shared".into())
    );
    assert_eq!(driver.calls("NodeStageVolume").len(), 1);
    assert_eq!(driver.calls("NodePublishVolume").len(), 2);

    // Deleting one pod unpublishes its target only; the other keeps the staged volume.
    cp.delete_pod("writer");
    wait_until(Duration::from_secs(30), "writer unpublished", || {
        (!vol_dir(&a).exists()).then_some(())
    });
    assert_eq!(driver.calls("NodeUnpublishVolume").len(), 1);
    assert!(driver.calls("NodeUnstageVolume").is_empty());
    assert!(is_mount_point(&staging));
    assert_eq!(
        exec_first(&env, &b, &["cat", "/data/a"]).await,
        (0, "shared".into())
    );

    // The last pod going unpublishes and unstages; nothing stays mounted or on disk.
    cp.delete_pod("reader");
    wait_until(Duration::from_secs(30), "unstaged", || {
        (!global.exists()).then_some(())
    });
    assert_eq!(driver.calls("NodeUnpublishVolume").len(), 2);
    let unstages = driver.calls("NodeUnstageVolume");
    assert_eq!(unstages.len(), 1, "{}", driver.log());
    assert!(unstages[0].contains(&format!("staging={}", staging.display())));
    assert_eq!(mounts_below(&env.root), Vec::<String>::new());
    wait_until(Duration::from_secs(30), "volumesInUse cleared", || {
        (!volumes_in_use(&cp, &env.node).contains(&unique)).then_some(())
    });
    let (mount_s, mounts) = csi_op_seconds(&env, "volume_mount");
    let (unmount_s, unmounts) = csi_op_seconds(&env, "volume_unmount");
    let (unstage_s, unstages) = csi_op_seconds(&env, "unmount_device");
    println!(
        "figure: CSI per volume, 1 pod at a time: mount (wait/stage/publish) {:.1} ms avg over {mounts}, unpublish {:.1} ms avg over {unmounts}, unstage {:.1} ms avg over {unstages}",
        1000.0 * mount_s / mounts.max(1.0),
        1000.0 * unmount_s / unmounts.max(1.0),
        1000.0 * unstage_s / unstages.max(1.0),
    );
    assert_eq!((mounts, unmounts, unstages), (2.0, 2.0, 1.0));
}

/// A driver failing NodePublishVolume gives FailedMount with its message; rkubelet killed
/// there (the volume staged, not published) and started again completes the publish without
/// staging twice; a restart while the pod runs adopts stage and publish (no driver call, no
/// container restart); the pod's deletion unpublishes and unstages.
#[tokio::test]
async fn failed_publish_recovers_and_restarts_adopt_stage_and_publish() {
    use nix::sys::signal::Signal;
    let (cp, mut env, _cleanup, driver) = node_with_driver("csiv2", 139, &PV_BINDER, false);
    std::fs::create_dir_all(&driver.state).unwrap();
    let fail = driver.state.join(".fail-publish");
    std::fs::write(&fail, "injected publish failure").unwrap();
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&csi_pv_and_claim("data", "vol-b")),
    );
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&claim_pod("app", &env.node, "data", SLEEPER)),
    );
    let want = "MountVolume.SetUp failed for volume \"data\" : rpc error: code = Internal desc = injected publish failure";
    cp.wait_pod_event("app", "FailedMount", Duration::from_secs(60), |m| m == want);
    let p = cp.pod_waiting("app");
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
        "ContainerCreating"
    );
    let global = env
        .root
        .join("plugins/kubernetes.io/csi")
        .join(DRIVER)
        .join(sha256("vol-b"));
    assert!(is_mount_point(&global.join("globalmount")));
    assert_eq!(driver.calls("NodeStageVolume").len(), 1);
    // A failed publish leaves no target behind to unpublish.
    let vol_dir = env
        .root
        .join("pods")
        .join(pod_uid(&p))
        .join("volumes/kubernetes.io~csi/pv-data");
    assert!(!vol_dir.join("mount").exists());

    // Killed between stage and publish; the driver recovers while rkubelet is down.
    env.stop_kubelet(Signal::SIGKILL);
    std::fs::remove_file(&fail).unwrap();
    env.join(&cp, &[]);
    let p = cp.running_pod("app");
    assert!(is_mount_point(&vol_dir.join("mount")));
    assert_eq!(
        driver.calls("NodeStageVolume").len(),
        1,
        "staged once across the restart: {}",
        driver.log()
    );
    let publishes = driver.calls("NodePublishVolume").len();
    let container = p["status"]["containerStatuses"][0]["containerID"].clone();

    // A restart while the pod runs adopts everything: no stage, no publish, same container.
    env.stop_kubelet(Signal::SIGKILL);
    env.join(&cp, &[]);
    // The new kubelet syncs the pod within a few seconds of starting (its first relist and
    // the pod's ADD from the API); give it that, then check nothing was called again.
    let unique = format!("kubernetes.io/csi/{DRIVER}^vol-b");
    wait_until(
        Duration::from_secs(30),
        "volumesInUse after restart",
        || {
            volumes_in_use(&cp, &env.node)
                .contains(&unique)
                .then_some(())
        },
    );
    std::thread::sleep(Duration::from_secs(5));
    let p = cp.running_pod("app");
    assert_eq!(
        p["status"]["containerStatuses"][0]["containerID"],
        container
    );
    assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(driver.calls("NodeStageVolume").len(), 1);
    assert_eq!(driver.calls("NodePublishVolume").len(), publishes);
    assert!(driver.calls("NodeUnpublishVolume").is_empty());

    cp.delete_pod("app");
    wait_until(Duration::from_secs(30), "unstaged", || {
        (!global.exists()).then_some(())
    });
    assert_eq!(driver.calls("NodeUnpublishVolume").len(), 1);
    assert_eq!(driver.calls("NodeUnstageVolume").len(), 1);
    assert_eq!(mounts_below(&env.root), Vec::<String>::new());
}

fn inline_pod(name: &str, node: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  nodeName: {node}
  serviceAccountName: default
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  volumes:
  - name: scratch
    csi:
      driver: {DRIVER}
      volumeAttributes: {{size: small}}
      nodePublishSecretRef: {{name: inline-secret}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", "echo hi > /scratch/f; {SLEEPER}"]
    volumeMounts:
    - {{name: scratch, mountPath: /scratch}}
"#
    )
}

/// A generic ephemeral volume: the claim `<pod>-<volume>` kube-controller-manager's
/// ephemeral volume controller creates from the template (bound here to a pre-created CSI PV).
fn generic_ephemeral_pod(name: &str, node: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: PersistentVolume
metadata: {{name: pv-geph}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  csi: {{driver: {DRIVER}, volumeHandle: vol-e}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  volumes:
  - name: work
    ephemeral:
      volumeClaimTemplate:
        spec:
          accessModes: [ReadWriteOnce]
          storageClassName: ""
          volumeName: pv-geph
          resources: {{requests: {{storage: 1Gi}}}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", "echo g > /work/g; {SLEEPER}"]
    volumeMounts:
    - {{name: work, mountPath: /work}}
"#
    )
}

/// An inline ephemeral CSI volume: refused while the CSIDriver does not list the Ephemeral
/// lifecycle mode, then published (never staged) with the pod's identity and
/// `csi.storage.k8s.io/ephemeral: "true"` in the volume context; not in volumesInUse; gone
/// with the pod. Then a generic ephemeral volume on the same driver: its claim, made by the
/// controller and owned by the pod, staged and published like any claim.
#[tokio::test]
async fn inline_and_generic_ephemeral_csi_volumes() {
    let (cp, env, _cleanup, driver) = node_with_driver(
        "csiv3",
        140,
        &[
            "--controllers",
            "persistentvolume-binder,ephemeral-volume",
            "--pvclaimbinder-sync-period=2s",
            "--feature-gates=GenericEphemeralVolume=true",
        ],
        false,
    );
    cp.kubectl(&[
        "create",
        "secret",
        "generic",
        "inline-secret",
        "--from-literal=inline-key=v",
    ]);
    cp.kubectl_stdin(&["apply", "-f", "-"], Some(&inline_pod("eph", &env.node)));
    let want = format!("MountVolume.SetUp failed for volume \"scratch\" : kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode \"Ephemeral\" not supported by driver {DRIVER} (only supports [\"Persistent\"])");
    cp.wait_pod_event("eph", "FailedMount", Duration::from_secs(60), |m| m == want);
    assert!(driver.calls("NodePublishVolume").is_empty());
    // CSIDriver's spec is immutable: replaced by one that allows inline volumes.
    cp.kubectl(&["delete", "csidriver", DRIVER]);
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&csi_driver_object(false, "Persistent, Ephemeral")),
    );
    let p = cp.running_pod("eph");
    let uid = pod_uid(&p);
    let handle = format!("csi-{}", sha256(&format!("{uid}scratch")));
    let publishes = driver.calls("NodePublishVolume");
    assert_eq!(publishes.len(), 1, "{}", driver.log());
    let call = &publishes[0];
    assert!(call.contains(&format!("volume_id={handle} ")), "{call}");
    assert!(call.contains("staging= "), "never staged: {call}");
    assert!(call.contains("secrets=[\"inline-key\"]"), "{call}");
    for kv in [
        "\"csi.storage.k8s.io/ephemeral\":\"true\"".to_string(),
        "\"csi.storage.k8s.io/pod.name\":\"eph\"".to_string(),
        format!("\"csi.storage.k8s.io/pod.uid\":\"{uid}\""),
        "\"csi.storage.k8s.io/serviceAccount.name\":\"default\"".to_string(),
        "\"size\":\"small\"".to_string(),
    ] {
        assert!(call.contains(&kv), "{kv} in {call}");
    }
    assert!(driver.calls("NodeStageVolume").is_empty());
    let dir = env
        .root
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~csi/scratch");
    assert!(is_mount_point(&dir.join("mount")));
    let data: Value =
        serde_json::from_slice(&std::fs::read(dir.join("vol_data.json")).unwrap()).unwrap();
    assert_eq!(data["volumeLifecycleMode"], "Ephemeral");
    assert_eq!(data["specVolID"], "scratch");
    assert_eq!(
        std::fs::read_to_string(driver.state.join(&handle).join("f")).unwrap(),
        "hi\n"
    );
    // Not attachable nor device-mountable: never in volumesInUse.
    std::thread::sleep(Duration::from_secs(11));
    assert!(
        !volumes_in_use(&cp, &env.node)
            .iter()
            .any(|v| v.contains(&handle)),
        "{:?}",
        volumes_in_use(&cp, &env.node)
    );

    cp.delete_pod("eph");
    wait_until(Duration::from_secs(30), "inline volume unpublished", || {
        (!dir.exists()).then_some(())
    });
    let unpublishes = driver.calls("NodeUnpublishVolume");
    assert_eq!(unpublishes.len(), 1);
    assert!(driver.calls("NodeUnstageVolume").is_empty());
    assert!(
        !driver.state.join(&handle).exists(),
        "the driver dropped it"
    );
    assert_eq!(mounts_below(&env.root), Vec::<String>::new());

    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&generic_ephemeral_pod("geph", &env.node)),
    );
    let p = cp.running_pod("geph");
    let pvc = cp
        .get_json(&["pvc", "geph-work"])
        .expect("the controller's claim");
    let owner = &pvc["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Pod");
    assert_eq!(owner["uid"], p["metadata"]["uid"]);
    assert_eq!(owner["controller"], true);
    assert_eq!(driver.calls("NodeStageVolume").len(), 1, "{}", driver.log());
    assert_eq!(
        std::fs::read_to_string(driver.state.join("vol-e/g")).unwrap(),
        "g\n"
    );
    cp.delete_pod("geph");
    wait_until(
        Duration::from_secs(30),
        "generic ephemeral volume unstaged",
        || (driver.calls("NodeUnstageVolume").len() == 1).then_some(()),
    );
    assert_eq!(mounts_below(&env.root), Vec::<String>::new());
}

/// A driver whose CSIDriver says `attachRequired: true`: the pod waits (FailedMount from
/// WaitForAttach) until the VolumeAttachment named as upstream names it is attached, and the
/// attachment's metadata reaches NodeStageVolume and NodePublishVolume as publish context.
#[tokio::test]
async fn attach_required_waits_for_the_volume_attachment() {
    let (cp, env, _cleanup, driver) = node_with_driver("csiv4", 148, &PV_BINDER, true);
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&csi_pv_and_claim("data", "vol-c")),
    );
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&claim_pod("att", &env.node, "data", SLEEPER)),
    );
    let va = format!("csi-{}", sha256(&format!("vol-c{DRIVER}{}", env.node)));
    let prefix = "MountVolume.WaitForAttach failed for volume \"data\" : ";
    cp.wait_pod_event("att", "FailedMount", Duration::from_secs(60), |m| {
        m.starts_with(prefix) && m.contains(&format!("{va:?}"))
    });
    // What the attach/detach controller creates and the external attacher marks attached.
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&format!(
            r#"apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {{name: {va}}}
spec:
  attacher: {DRIVER}
  nodeName: {node}
  source: {{persistentVolumeName: pv-data}}
"#,
            node = env.node
        )),
    );
    cp.wait_pod_event("att", "FailedMount", Duration::from_secs(60), |m| {
        m.starts_with(prefix) && m.contains("not attached yet")
    });
    assert!(driver.calls("NodeStageVolume").is_empty());
    cp.kubectl(&[
        "patch",
        "volumeattachment",
        &va,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"attached":true,"attachmentMetadata":{"devicePath":"/dev/fake0"}}}"#,
    ]);
    cp.running_pod("att");
    let stage = driver.calls("NodeStageVolume");
    assert_eq!(stage.len(), 1);
    assert!(
        stage[0].contains("publish_context={\"devicePath\":\"/dev/fake0\"}"),
        "{}",
        stage[0]
    );
    let publish = driver.calls("NodePublishVolume");
    assert!(
        publish[0].contains("publish_context={\"devicePath\":\"/dev/fake0\"}"),
        "{}",
        publish[0]
    );
    cp.delete_pod("att");
    wait_until(Duration::from_secs(30), "unstaged", || {
        (driver.calls("NodeUnstageVolume").len() == 1).then_some(())
    });
    assert_eq!(mounts_below(&env.root), Vec::<String>::new());
}
