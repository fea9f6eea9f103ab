//! The device manager as a topology hint provider (issue 19) with `topologyManagerPolicy:
//! restricted`, on this machine's one NUMA node (node 0) and real containerd: a device
//! plugin written here advertises one device on node 0 and one on node 1, a node this machine
//! does not have. A static pod asking for both cannot be aligned to one node and is rejected
//! `TopologyAffinityError` (upstream's reason and message) before anything runs; a pod asking
//! for one gets the node-0 device, although the other one comes first in ID order (the order
//! the device manager picks in without an affinity). A pod of two one-device containers is
//! rejected after its first container got the node-0 device, which goes back at once; the
//! metrics count the admissions and the failures.
//!
//! `restricted`, not `single-numa-node`: on a one-node machine the latter turns a merged hint
//! equal to all nodes into "no affinity" (upstream `singleNumaNodePolicy.Merge`), so the
//! device choice would not be aligned there, by design; both reject the same way.

mod common;
mod device_plugin;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::*;
use device_plugin::{channel, device, TestPlugin};
use kubelet::podresources::v1 as pr;

const RES: &str = "test.rkubelet.io/numa";
/// Sorts before [`NEAR`]: only the affinity makes the manager choose the other one.
const FAR: &str = "a-node1";
const NEAR: &str = "b-node0";

/// The test's plugin with one device per NUMA node (0 and 1), no preference of its own.
async fn run_plugin(dir: &Path) -> tokio::task::JoinHandle<()> {
    let plugin = TestPlugin {
        devices: vec![device(FAR, Some(1)), device(NEAR, Some(0))],
        ..Default::default()
    };
    plugin.run(dir, "numa.sock", RES).await
}

/// A static pod whose containers (`c`, `c1`, ...) each limit [`RES`] to the given counts.
fn device_pod(name: &str, counts: &[u32]) -> String {
    let containers: String = counts
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let cname = if i == 0 { "c".to_string() } else { format!("c{i}") };
            format!(
                "  - name: {cname}\n    image: {IMAGE}\n    command: [\"sh\", \"-c\", {SLEEPER:?}]\n    \
                 resources:\n      limits: {{{RES:?}: {n}}}\n"
            )
        })
        .collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n{containers}"
    )
}

fn wait_rejected(env: &Env, name: &str) -> k8s_openapi::api::core::v1::PodStatus {
    env.wait_pod(name, Duration::from_secs(30), "rejected", |p| {
        let s = p.status.clone()?;
        (s.phase.as_deref() == Some("Failed")).then_some(s)
    })
}

/// pod name -> (device IDs, NUMA nodes) of [`RES`] in the pod-resources `List`.
async fn listed(env: &Env) -> BTreeMap<String, (Vec<String>, Vec<i64>)> {
    let mut client = pr::pod_resources_lister_client::PodResourcesListerClient::new(
        channel(env.root.join("pod-resources/kubelet.sock")).await,
    );
    let list = client
        .list(pr::ListPodResourcesRequest {})
        .await
        .expect("List")
        .into_inner();
    list.pod_resources
        .into_iter()
        .filter_map(|p| {
            let devs: Vec<_> = p
                .containers
                .iter()
                .flat_map(|c| &c.devices)
                .filter(|d| d.resource_name == RES)
                .collect();
            let ids = devs.iter().flat_map(|d| d.device_ids.clone()).collect();
            let nodes = devs
                .iter()
                .flat_map(|d| d.topology.iter().flat_map(|t| t.nodes.iter().map(|n| n.id)))
                .collect();
            (!devs.is_empty()).then_some((p.name, (ids, nodes)))
        })
        .collect()
}

// Multi-threaded: the plugin must answer while the test thread blocks in waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_policy_aligns_devices_and_rejects_what_cannot_be_aligned() {
    let nodes = std::fs::read_to_string("/sys/devices/system/node/online").unwrap();
    assert_eq!(
        nodes.trim(),
        "0",
        "this test is written for a one-NUMA-node machine"
    );
    let mut env = Env::new(113);
    // Both policy options, so the start reads this machine's NUMA distances from /sys.
    env.extra_config = "topologyManagerPolicy: restricted\n\
        topologyManagerPolicyOptions: {prefer-closest-numa-nodes: \"true\", max-allowable-numa-nodes: \"8\"}\n"
        .into();
    env.start_kubelet();
    let plugins_dir = env.root.join("device-plugins");
    wait_until(Duration::from_secs(30), "device plugin socket", || {
        plugins_dir.join("kubelet.sock").exists().then_some(())
    });
    assert!(
        env.kubelet_log()
            .lines()
            .any(|l| l.contains("topology manager enabled")
                && l.contains("prefer-closest-numa-nodes")),
        "{}",
        tail(&env.kubelet_log(), 30)
    );
    let serving = run_plugin(&plugins_dir).await;
    wait_until(Duration::from_secs(30), "devices registered", || {
        env.kubelet_log()
            .contains("device plugin sent its devices")
            .then_some(())
    });

    // Two devices: one on each node, so no single node holds them.
    env.write_manifest("both.yaml", &device_pod("both", &[2]));
    let st = wait_rejected(&env, "both");
    assert_eq!(
        st.reason.as_deref(),
        Some("TopologyAffinityError"),
        "{st:?}"
    );
    assert_eq!(
        st.message.as_deref(),
        Some("Pod was rejected: Resources cannot be allocated with Topology locality")
    );
    let rejected = env.pod("both").unwrap();
    assert!(env.sandboxes_of(&uid(&rejected)).await.is_empty());

    // One device: the node-0 one, and the container sees it in the plugin's env.
    env.write_manifest("one.yaml", &device_pod("one", &[1]));
    let pod = env.wait_running("one");
    let node = env.node.clone();
    let got = listed(&env).await;
    assert_eq!(
        got.get(&format!("one-{node}")),
        Some(&(vec![NEAR.to_string()], vec![0])),
        "{got:?}"
    );
    assert!(!got.contains_key(&format!("both-{node}")), "{got:?}");
    let (code, out) = exec_in(&env, &pod, "c", &["sh", "-c", "echo $TEST_DEVICES"]).await;
    assert_eq!((code, out.trim()), (0, NEAR), "{out}");

    // Scope container, two containers of one device each: the first gets the node-0 device,
    // the second cannot be aligned, and the pod is rejected; the first container's device goes
    // back with the rejection itself (not at the next admission's clean-up): the checkpoint,
    // which named the pod once its first container had the device, no longer does.
    env.remove_manifest("one.yaml");
    wait_until(Duration::from_secs(30), "pod one gone", || {
        env.pod("one").is_none().then_some(())
    });
    env.write_manifest("pair.yaml", &device_pod("pair", &[1, 1]));
    let st = wait_rejected(&env, "pair");
    assert_eq!(
        st.reason.as_deref(),
        Some("TopologyAffinityError"),
        "{st:?}"
    );
    let pair_uid = uid(&env.pod("pair").unwrap());
    let log = env.kubelet_log();
    assert!(
        log.lines()
            .any(|l| l.contains("allocated devices") && l.contains(&pair_uid)),
        "{}",
        tail(&log, 30)
    );
    let checkpoint = plugins_dir.join("kubelet_internal_checkpoint");
    wait_until(Duration::from_secs(10), "pair's devices released", || {
        let text = std::fs::read_to_string(&checkpoint).ok()?;
        (!text.contains(&pair_uid)).then_some(())
    });
    env.write_manifest("again.yaml", &device_pod("again", &[1]));
    env.wait_running("again");
    let got = listed(&env).await;
    assert_eq!(
        got.get(&format!("again-{node}")),
        Some(&(vec![NEAR.to_string()], vec![0])),
        "{got:?}"
    );

    // Upstream's topology manager metrics: four pods through the handler, two failed.
    let metric = |n: &str| env.metric(n, None).unwrap_or(-1.0);
    assert_eq!(
        metric("kubelet_topology_manager_admission_requests_total"),
        4.0
    );
    assert_eq!(
        metric("kubelet_topology_manager_admission_errors_total"),
        2.0
    );
    serving.abort();
}
