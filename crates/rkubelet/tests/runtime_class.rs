//! RuntimeClass handlers (issue 15 item 4) against kube-apiserver 1.20 and a private containerd
//! 1.6 (whose CRI plugin has one runtime, `runc`): the handler comes from the RuntimeClass
//! object, an unknown handler is containerd's error in a `FailedCreatePodSandBox` event, and a
//! missing RuntimeClass is upstream's lister error.

mod common;

use std::time::Duration;

use common::*;

const CLASSES: &str = r#"apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: plain}
handler: runc
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: bogus}
handler: nosuch
"#;

fn with_class(pod: String, class: &str) -> String {
    pod.replace("spec:\n", &format!("spec:\n  runtimeClassName: {class}\n"))
}

fn sandbox_event(cp: &ControlPlane, name: &str) -> String {
    cp.wait_pod_event(
        name,
        "FailedCreatePodSandBox",
        Duration::from_secs(60),
        |_| true,
    )
}

#[tokio::test]
async fn runtime_class_handler_from_the_api() {
    let cp = ControlPlane::up("rtclass");
    let mut env = Env::new(216);
    env.join(&cp, &[]);
    let node = env.node.clone();
    cp.kubectl_stdin(&["create", "-f", "-"], Some(CLASSES));

    // A class whose handler containerd has: the sandbox runs with that handler.
    let plain = with_class(api_pod("plain", &node, SLEEPER, 1, ""), "plain");
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&plain));
    cp.wait_running("plain");
    let uid = cp
        .get_json(&["pod", "plain"])
        .and_then(|p| p["metadata"]["uid"].as_str().map(String::from))
        .expect("uid of pod plain");
    let sandboxes = env.sandboxes_of(&uid).await;
    assert!(!sandboxes.is_empty(), "no sandbox for pod plain");
    for s in &sandboxes {
        assert_eq!(s.runtime_handler, "runc", "{s:?}");
    }

    // A class whose handler containerd does not know: containerd's error, as upstream.
    let bogus = with_class(api_pod("bogus", &node, SLEEPER, 1, ""), "bogus");
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&bogus));
    let msg = sandbox_event(&cp, "bogus");
    assert!(
        msg.starts_with("Failed to create pod sandbox: ")
            && msg.contains(r#"no runtime for "nosuch" is configured"#),
        "{msg}"
    );

    // A class that does not exist. The apiserver's RuntimeClass admission refuses such API
    // pods, so a static pod (which no admission sees) carries the name to the kubelet.
    env.write_manifest(
        "missing.yaml",
        &with_class(simple_pod("missing", "Always", SLEEPER), "missing"),
    );
    let msg = sandbox_event(&cp, &format!("missing-{node}"));
    assert_eq!(
        msg,
        r#"Failed to create pod sandbox: runtimeclass.node.k8s.io "missing" not found"#
    );
    // Neither failed pod got a sandbox.
    let all = env.all_sandboxes().await;
    assert!(
        all.iter()
            .all(|s| s.metadata.as_ref().is_some_and(|m| m.name == "plain")),
        "{all:?}"
    );
}
