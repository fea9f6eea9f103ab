//! The test CSI driver under the upstream kubelet (issue 18 item 4): `rkt-csi-hostpath` must
//! work with upstream's kubelet 1.20.2 (built from the Debian source by hack/control-plane.sh)
//! exactly as the CSI tests use it with rkubelet, so it cannot quietly adapt to rkubelet's
//! mistakes: registration and CSINode, a PV staged and published, an inline ephemeral volume
//! published. Then upstream is swapped for rkubelet, which adopts what upstream set up and tears
//! it down with the pod, unstaging at upstream 1.20's staging path.
//!
//! Runs alone (hack/run-tests.sh SERIAL): upstream's kubelet sets host kernel tunables. It uses
//! Env index 137, which tests/csi_volumes.rs uses too; the two binaries never run together.

mod common;
#[path = "csi_driver/harness.rs"]
mod harness;
#[path = "swap/host.rs"]
#[allow(dead_code)]
mod host;

use std::time::{Duration, Instant};

use common::*;
use harness::{csi_driver_object, csi_pv_and_claim, Driver, DRIVER};
use host::*;

const INDEX: u32 = 137;

/// Named `swap-*` so that [`HostCleanup`] removes its logs from the host's /var/log/pods.
fn pod(node: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: swap-csi, namespace: default}}
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  volumes:
  - name: data
    persistentVolumeClaim: {{claimName: data}}
  - name: scratch
    csi: {{driver: {DRIVER}, volumeAttributes: {{size: small}}}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", "echo up > /data/u; echo e > /scratch/e; {SLEEPER}"]
    volumeMounts:
    - {{name: data, mountPath: /data}}
    - {{name: scratch, mountPath: /scratch}}
"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn test_driver_works_under_the_upstream_kubelet_and_rkubelet_adopts_its_volumes() {
    let bin = upstream_kubelet();
    let cp = ControlPlane::up("csi-upstream");
    cp.start_controller_manager(&[
        "--controllers",
        "persistentvolume-binder",
        "--pvclaimbinder-sync-period=2s",
    ]);
    // Declared before the Env, so dropped after it (see tests/upstream_swap.rs).
    let _cleanup = HostCleanup {
        dir: std::path::PathBuf::from(format!("/tmp/rkt-{INDEX}-{}", std::process::id())),
        tunables: read_tunables(),
    };
    let env = Env::new(INDEX);
    assert_eq!(env.dir, _cleanup.dir, "HostCleanup names the Env's dir");
    make_cgroup_root(&env.cgroup_root());
    save_tunables(&env.dir.join("host-tunables"), &_cleanup.tunables);
    let node = env.node.clone();
    let args = shared_node_command_line(&env, &cp);
    let mut upstream = Upstream::start(&bin, &args, env.dir.join("upstream.log"));
    wait_until(
        Duration::from_secs(60),
        "upstream registers the node",
        || cp.get_json(&["node", &node]).map(|_| ()),
    );
    let driver = Driver::start(&env, &format!("csi-{node}"), &["--stage"]);
    wait_until(Duration::from_secs(60), "upstream's CSINode entry", || {
        let c = cp.get_json(&["csinode", &node])?;
        (c["spec"]["drivers"][0]["name"] == DRIVER).then_some(())
    });
    assert!(driver
        .log()
        .contains("registration status: registered=true error=\"\""));
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&csi_driver_object(false, "Persistent, Ephemeral")),
    );
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&csi_pv_and_claim("data", "vol-u")),
    );
    let t0 = Instant::now();
    cp.kubectl_stdin(&["apply", "-f", "-"], Some(&pod(&node)));
    wait_until(
        Duration::from_secs(120),
        "swap-csi Running under upstream",
        || {
            let p = cp.get_json(&["pod", "swap-csi"])?;
            (p["status"]["phase"] == "Running").then_some(())
        },
    );
    println!(
        "figure: upstream kubelet 1.20.2, CSI pod (stage + publish + inline) create to Running: {:?}",
        t0.elapsed()
    );
    // Upstream 1.20 stages at its own global path (pv/<pv>/globalmount), which the driver takes
    // as given, publishes the PV from it and the inline volume without staging.
    let stages = driver.calls("NodeStageVolume");
    assert_eq!(stages.len(), 1, "{}", driver.log());
    assert!(
        stages[0].contains("/plugins/kubernetes.io/csi/pv/pv-data/globalmount"),
        "{}",
        stages[0]
    );
    assert!(
        stages[0].contains("secrets=[\"stage-key\"]"),
        "{}",
        stages[0]
    );
    let publishes = driver.calls("NodePublishVolume");
    assert_eq!(publishes.len(), 2, "{}", driver.log());
    assert!(publishes.iter().any(|p| p.contains("volume_id=vol-u ")
        && p.contains("secrets=[\"publish-key\"]")
        && p.contains("\"csi.storage.k8s.io/pod.name\":\"swap-csi\"")));
    assert!(publishes.iter().any(
        |p| p.contains("\"csi.storage.k8s.io/ephemeral\":\"true\"") && p.contains("staging= ")
    ));
    assert_eq!(
        std::fs::read_to_string(driver.state.join("vol-u/u")).unwrap(),
        "up\n"
    );

    // Swapped for rkubelet (same command line, root dir and credentials): it adopts both
    // published volumes and the volume upstream staged at its 1.20 path, calls nothing, and
    // on the pod's deletion unpublishes both and unstages at upstream's staging path.
    let staging = stages[0]
        .split(' ')
        .find_map(|f| f.strip_prefix("staging="))
        .unwrap()
        .to_string();
    upstream.stop();
    let mut env = env;
    env.start_kubelet_raw(&args);
    let container = cp.get_json(&["pod", "swap-csi"]).unwrap()["status"]["containerStatuses"][0]
        ["containerID"]
        .clone();
    std::thread::sleep(Duration::from_secs(8));
    let p = cp.get_json(&["pod", "swap-csi"]).unwrap();
    assert_eq!(p["status"]["phase"], "Running");
    assert_eq!(
        p["status"]["containerStatuses"][0]["containerID"],
        container
    );
    assert_eq!(driver.calls("NodeStageVolume").len(), 1, "{}", driver.log());
    assert_eq!(
        driver.calls("NodePublishVolume").len(),
        2,
        "{}",
        driver.log()
    );
    cp.kubectl(&["delete", "pod", "swap-csi", "--wait=false"]);
    wait_until(Duration::from_secs(90), "unpublished and unstaged", || {
        (driver.calls("NodeUnpublishVolume").len() == 2
            && driver.calls("NodeUnstageVolume").len() == 1)
            .then_some(())
    });
    let unstage = &driver.calls("NodeUnstageVolume")[0];
    assert!(
        unstage.contains(&format!("staging={staging}")),
        "{unstage}\n{}",
        tail(&env.kubelet_log(), 30)
    );
    wait_until(Duration::from_secs(60), "no CSI mount left", || {
        let left: Vec<String> = mounts_below(&env.root)
            .into_iter()
            .filter(|m| m.contains("/pods/") || m.contains("/plugins/kubernetes.io/csi/"))
            .collect();
        left.is_empty().then_some(())
    });
    env.stop_kubelet(nix::sys::signal::Signal::SIGTERM);
}
