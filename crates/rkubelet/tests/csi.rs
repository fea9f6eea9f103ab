//! CSI node plugins (issue 18 item 2, registration part): the test driver `rkt-csi-hostpath`
//! (tests/csi_driver) registers through `<root-dir>/plugins_registry` like any node plugin, and
//! rkubelet's plugin manager keeps the node's CSINode object and `csi.volume.kubernetes.io/nodeid`
//! annotation up to date from the driver's `NodeGetInfo`; the driver going away deregisters it.

mod common;
#[path = "csi_driver/harness.rs"]
mod harness;

use std::path::Path;
use std::time::Duration;

use common::*;
use harness::{Driver, DRIVER};
use serde_json::Value;

const TOPOLOGY_KEY: &str = "topology.hostpath.csi.rkubelet.test/node";

fn csinode_drivers(cp: &ControlPlane, node: &str) -> Vec<Value> {
    cp.get_json(&["csinode", node])
        .and_then(|c| c["spec"]["drivers"].as_array().cloned())
        .unwrap_or_default()
}

fn node_id_annotation(node: &Value) -> Option<Value> {
    node["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"]
        .as_str()
        .map(|s| serde_json::from_str(s).unwrap())
}

#[tokio::test]
async fn csi_driver_registration_keeps_csinode_up_to_date() {
    let cp = ControlPlane::up("csi1");
    let mut env = Env::new(177);
    env.join(&cp, &[]);
    let node = wait_until(Duration::from_secs(30), "node registered", || {
        cp.get_json(&["node", &env.node])
    });
    let node_id = format!("csi-id-{}", env.node);
    let topology = format!("{TOPOLOGY_KEY}={}", env.node);
    let mut driver = Driver::start(
        &env,
        &node_id,
        &["--max-volumes", "5", "--topology", &topology],
    );

    let drivers = wait_until(Duration::from_secs(60), "CSINode entry", || {
        let d = csinode_drivers(&cp, &env.node);
        (!d.is_empty()).then_some(d)
    });
    assert_eq!(drivers.len(), 1, "{drivers:?}");
    assert_eq!(drivers[0]["name"], DRIVER);
    assert_eq!(drivers[0]["nodeID"], node_id.as_str());
    assert_eq!(
        drivers[0]["topologyKeys"],
        serde_json::json!([TOPOLOGY_KEY])
    );
    assert_eq!(drivers[0]["allocatable"]["count"], 5);
    // The CSINode is owned by the Node (garbage-collected with it), as upstream creates it.
    let csinode = cp.get_json(&["csinode", &env.node]).unwrap();
    let owner = &csinode["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Node");
    assert_eq!(owner["name"], env.node.as_str());
    assert_eq!(owner["uid"], node["metadata"]["uid"]);

    let node = cp.get_json(&["node", &env.node]).unwrap();
    assert_eq!(
        node_id_annotation(&node),
        Some(serde_json::json!({ DRIVER: node_id }))
    );
    assert_eq!(node["metadata"]["labels"][TOPOLOGY_KEY], env.node.as_str());
    // The driver was told it is registered, and the kubelet logged it in upstream's words.
    wait_until(Duration::from_secs(10), "registration status sent", || {
        driver
            .log()
            .contains("registration status: registered=true error=\"\"")
            .then_some(())
    });
    let log = env.kubelet_log();
    assert!(
        log.lines().any(|l| l.contains("] \"Register new plugin\"")
            && l.contains(&format!("name=\"{DRIVER}\""))),
        "{}",
        tail(&log, 40)
    );

    // The registration socket going away deregisters the driver: its CSINode entry and its
    // key in the annotation are removed (the topology label stays, as upstream).
    driver.stop();
    assert!(!Path::new(&env.root.join(format!("plugins_registry/{DRIVER}-reg.sock"))).exists());
    wait_until(Duration::from_secs(30), "CSINode entry removed", || {
        csinode_drivers(&cp, &env.node).is_empty().then_some(())
    });
    let node = cp.get_json(&["node", &env.node]).unwrap();
    assert_eq!(node_id_annotation(&node), None);
    assert!(cp.get_json(&["csinode", &env.node]).is_some());
}
