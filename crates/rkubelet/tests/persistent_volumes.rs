//! PersistentVolumeClaims (issue 18 items 1 and 3) on a node of a real control plane whose
//! kube-controller-manager runs the PV binder: local PVs bind-mounted into pods (data kept
//! across pods, subPath, fsGroup, readOnly, node affinity), a block PV on a loop device, and a
//! restart of rkubelet that neither remounts nor leaks.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// Unmounts whatever a failed test left below the kubelet's root before the Env removes its
/// directory (which would otherwise walk into a bind-mounted PV), and detaches loop devices.
struct Cleanup {
    root: PathBuf,
    loops: Vec<String>,
    dirs: Vec<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let mut left = mounts_below(&self.root);
        left.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in left {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
        for l in &self.loops {
            let _ = Command::new("losetup").args(["-d", l]).status();
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn node_hostname(cp: &ControlPlane, node: &str) -> String {
    let n = wait_until(Duration::from_secs(30), "node registered", || {
        cp.get_json(&["node", node])
    });
    n["metadata"]["labels"]["kubernetes.io/hostname"]
        .as_str()
        .unwrap()
        .to_string()
}

fn local_pv(name: &str, path: &Path, hostname: &str, mode: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: PersistentVolume
metadata: {{name: {name}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  volumeMode: {mode}
  local: {{path: {path:?}}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {{key: kubernetes.io/hostname, operator: In, values: [{hostname:?}]}}
"#,
        path = path.display().to_string()
    )
}

fn claim(name: &str, mode: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {name}, namespace: default}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeMode: {mode}
  resources: {{requests: {{storage: 1Gi}}}}
"#
    )
}

/// A pod on `node` using claim `data` at /data (and its `sub` directory at /sub through a
/// subPath); `extra_spec` goes at pod spec level, `read_only` marks the claim readOnly.
fn pvc_pod(name: &str, node: &str, script: &str, extra_spec: &str, read_only: bool) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
{extra_spec}  volumes:
  - name: data
    persistentVolumeClaim: {{claimName: data, readOnly: {read_only}}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {script:?}]
    volumeMounts:
    - {{name: data, mountPath: /data}}
    - {{name: data, mountPath: /sub, subPath: sub}}
"#
    )
}

#[tokio::test]
async fn pvc_on_local_pv_keeps_data_across_pods_and_restarts() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let cp = ControlPlane::up("pv1");
    cp.start_controller_manager(&PV_BINDER);
    let mut env = Env::new(165);
    let data = PathBuf::from(format!("/tmp/rkt-pvdata-165-{}", std::process::id()));
    std::fs::create_dir_all(data.join("sub")).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _cleanup = Cleanup {
        root: env.root.clone(),
        loops: Vec::new(),
        dirs: vec![data.clone()],
    };
    env.join(&cp, &[]);
    let hostname = node_hostname(&cp, &env.node);

    // A claim nothing can bind yet: the pod waits with upstream's FailedMount message.
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&claim("data", "Filesystem")));
    let writer = pvc_pod(
        "writer",
        &env.node,
        "echo hello > /data/f && echo below > /sub/g && trap 'exit 0' TERM; while true; do sleep 1; done",
        "  securityContext: {fsGroup: 2345, fsGroupChangePolicy: OnRootMismatch}\n",
        false,
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&writer));
    let msg = cp.wait_pod_event("writer", "FailedMount", Duration::from_secs(60), |m| {
        m.contains("PVC is not bound")
    });
    assert_eq!(
        msg,
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[data]: error processing PVC default/data: PVC is not bound"
    );
    let p = cp.pod_waiting("writer");
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
        "ContainerCreating"
    );

    // The PV appears, the binder binds it, the pod starts on it.
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&local_pv("local-165", &data, &hostname, "Filesystem")),
    );
    let pod = cp.running_pod("writer");
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let vol = env
        .root
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~local-volume/local-165");
    wait_until(Duration::from_secs(10), "writer wrote", || {
        std::fs::read_to_string(data.join("sub/g")).ok()
    });
    assert_eq!(std::fs::read_to_string(data.join("f")).unwrap(), "hello\n");
    assert_eq!(
        std::fs::read_to_string(data.join("sub/g")).unwrap(),
        "below\n"
    );
    // The bind mount is upstream's path; the fsGroup walk gave the volume the group and setgid.
    let below = mounts_below(&env.root.join("pods").join(&uid));
    assert!(below.contains(&vol.display().to_string()), "{below:?}");
    let meta = std::fs::metadata(&data).unwrap();
    assert_eq!(meta.gid(), 2345);
    assert_eq!(meta.permissions().mode() & 0o2070, 0o2070);
    let (code, out) = exec_first(&env, &pod, &["id", "-G"]).await;
    assert_eq!(code, 0);
    assert!(out.split_whitespace().any(|g| g == "2345"), "{out}");

    // The node reports the volume in use (the attach/detach controller reads it).
    wait_until(Duration::from_secs(40), "volumesInUse", || {
        let n = cp.get_json(&["node", &env.node])?;
        (n["status"]["volumesInUse"] == serde_json::json!(["kubernetes.io/local-volume/local-165"]))
            .then_some(())
    });

    // A restarted rkubelet finds the mount and neither mounts again nor restarts the pod.
    let before = mounts_below(&env.root);
    env.stop_kubelet(nix::sys::signal::Signal::SIGKILL);
    env.join(&cp, &[]);
    wait_until(
        Duration::from_secs(30),
        "writer added again after restart",
        || {
            let log = env.kubelet_log();
            let added = log
                .lines()
                .filter(|l| l.contains("] \"pod added\"") && l.contains("writer"))
                .count();
            (added >= 2).then_some(())
        },
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(mounts_below(&env.root), before, "remounted after restart");
    let p = cp.get_json(&["pod", "writer"]).unwrap();
    assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(p["metadata"]["uid"], uid.as_str());

    // The writer goes; nothing stays mounted; a reader on the same claim, read-only, sees it.
    cp.delete_pod("writer");
    wait_until(Duration::from_secs(30), "writer's mounts gone", || {
        mounts_below(&env.root).is_empty().then_some(())
    });
    let reader = pvc_pod(
        "reader",
        &env.node,
        "trap 'exit 0' TERM; while true; do sleep 1; done",
        "",
        true,
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&reader));
    let pod = cp.running_pod("reader");
    assert_eq!(
        exec_first(&env, &pod, &["cat", "/data/f"]).await,
        (0, "hello".into())
    );
    assert_eq!(
        exec_first(&env, &pod, &["cat", "/sub/g"]).await,
        (0, "below".into())
    );
    let (code, out) = exec_first(&env, &pod, &["touch", "/data/new"]).await;
    assert_ne!(code, 0, "readOnly claim was writable: {out}");
    assert!(out.contains("Read-only file system"), "{out}");
    cp.delete_pod("reader");
    wait_until(Duration::from_secs(30), "reader's mounts gone", || {
        mounts_below(&env.root).is_empty().then_some(())
    });
    assert!(!data.join("new").exists());
    wait_until(Duration::from_secs(40), "volumesInUse cleared", || {
        let n = cp.get_json(&["node", &env.node])?;
        n["status"]["volumesInUse"].is_null().then_some(())
    });
    assert_eq!(std::fs::read_to_string(data.join("f")).unwrap(), "hello\n");
}

#[tokio::test]
async fn pv_node_affinity_fails_the_mount_and_host_path_pvs_work() {
    let cp = ControlPlane::up("pv2");
    cp.start_controller_manager(&PV_BINDER);
    let mut env = Env::new(169);
    let data = PathBuf::from(format!("/tmp/rkt-pvdata-169-{}", std::process::id()));
    std::fs::create_dir_all(&data).unwrap();
    let _cleanup = Cleanup {
        root: env.root.clone(),
        loops: Vec::new(),
        dirs: vec![data.clone()],
    };
    env.join(&cp, &[]);
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&local_pv(
            "local-169",
            &data,
            "some-other-node",
            "Filesystem",
        )),
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&claim("data", "Filesystem")));
    let pod = pvc_pod("elsewhere", &env.node, SLEEPER, "", false);
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&pod));
    let msg = cp.wait_pod_event("elsewhere", "FailedMount", Duration::from_secs(60), |m| {
        m.contains("NodeAffinity")
    });
    assert_eq!(
        msg,
        "MountVolume.NodeAffinity check failed for volume \"data\" : no matching NodeSelectorTerms"
    );
    assert!(mounts_below(&env.root).is_empty());
    cp.delete_pod("elsewhere");

    // A hostPath PV has no node affinity to check and is used in place, after its type check.
    let hp = data.join("hp");
    let pv = format!(
        r#"apiVersion: v1
kind: PersistentVolume
metadata: {{name: hostpath-169}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  claimRef: {{namespace: default, name: hp}}
  hostPath: {{path: {:?}, type: DirectoryOrCreate}}
"#,
        hp.display().to_string()
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&pv));
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&claim("hp", "Filesystem")));
    let pod = pvc_pod(
        "hostpath",
        &env.node,
        "echo there > /data/f && trap 'exit 0' TERM; while true; do sleep 1; done",
        "",
        false,
    )
    .replace("claimName: data", "claimName: hp");
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&pod));
    cp.running_pod("hostpath");
    wait_until(
        Duration::from_secs(10),
        "written through the hostPath PV",
        || std::fs::read_to_string(hp.join("f")).ok(),
    );
    assert_eq!(std::fs::read_to_string(hp.join("f")).unwrap(), "there\n");
    // The subPath is the only mount the pod has below its directory; the PV itself is in place.
    let below = mounts_below(&env.root);
    assert!(
        below.iter().all(|m| m.contains("/volume-subpaths/")),
        "{below:?}"
    );
    cp.delete_pod("hostpath");
    wait_until(
        Duration::from_secs(30),
        "hostpath pod's mounts gone",
        || mounts_below(&env.root).is_empty().then_some(()),
    );
    assert_eq!(std::fs::read_to_string(hp.join("f")).unwrap(), "there\n");
}

#[tokio::test]
async fn block_pvc_on_a_loop_device() {
    let cp = ControlPlane::up("pv3");
    cp.start_controller_manager(&PV_BINDER);
    let mut env = Env::new(168);
    let dir = PathBuf::from(format!("/tmp/rkt-pvblock-168-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let backing = dir.join("disk.img");
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    let out = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&backing)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "losetup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let _cleanup = Cleanup {
        root: env.root.clone(),
        loops: vec![dev.clone()],
        dirs: vec![dir.clone()],
    };
    env.join(&cp, &[]);
    let hostname = node_hostname(&cp, &env.node);
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&local_pv("block-168", Path::new(&dev), &hostname, "Block")),
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&claim("disk", "Block")));
    let pod = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: blk, namespace: default}}
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  volumes:
  - name: disk
    persistentVolumeClaim: {{claimName: disk}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", "printf blockdata | dd of=/dev/xvda conv=notrunc && sync && trap 'exit 0' TERM; while true; do sleep 1; done"]
    volumeDevices:
    - {{name: disk, devicePath: /dev/xvda}}
"#,
        node = env.node
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&pod));
    let p = cp.running_pod("blk");
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let link = env
        .root
        .join("pods")
        .join(&uid)
        .join("volumeDevices/kubernetes.io~local-volume/block-168");
    assert_eq!(std::fs::read_link(&link).unwrap(), PathBuf::from(&dev));
    // The container sees a block device, and what it wrote reaches the backing file.
    let (code, out) = exec_first(&env, &p, &["sh", "-c", "test -b /dev/xvda && echo block"]).await;
    assert_eq!((code, out.as_str()), (0, "block"));
    wait_until(Duration::from_secs(10), "data on the loop device", || {
        let _ = Command::new("blockdev")
            .args(["--flushbufs", &dev])
            .status();
        let bytes = std::fs::read(&backing).ok()?;
        bytes.starts_with(b"blockdata").then_some(())
    });
    cp.delete_pod("blk");
    wait_until(Duration::from_secs(30), "device link removed", || {
        (!link.exists()).then_some(())
    });
    assert!(mounts_below(&env.root).is_empty());
}
