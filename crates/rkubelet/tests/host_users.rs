//! `hostUsers: false` on a runtime without user namespace support (issue 15 item 4): containerd
//! 1.6 reports no runtime handlers in its CRI `Status`, so upstream's kubelet fails the sandbox
//! with `the handler "" is not known` rather than running the pod in the host user namespace.
//! kube-apiserver 1.20 predates `hostUsers` (it would drop the field), so the pods are static
//! pods; their events still go to the API.

mod common;

use std::time::Duration;

use common::*;

fn with_host_users(name: &str, host_users: bool) -> String {
    simple_pod(name, "Always", SLEEPER)
        .replace("spec:\n", &format!("spec:\n  hostUsers: {host_users}\n"))
}

#[tokio::test]
async fn host_users_false_fails_without_runtime_support() {
    let cp = ControlPlane::up("hostusers");
    let mut env = Env::new(217);
    env.join(&cp, &[]);
    let node = env.node.clone();
    env.write_manifest("own.yaml", &with_host_users("own", false));
    env.write_manifest("host.yaml", &with_host_users("host", true));

    // hostUsers: true is the host user namespace: it runs.
    env.wait_running("host");
    let msg = cp.wait_pod_event(
        &format!("own-{node}"),
        "FailedCreatePodSandBox",
        Duration::from_secs(60),
        |_| true,
    );
    assert_eq!(
        msg,
        r#"Failed to create pod sandbox: the handler "" is not known"#
    );
    // Never started in the host user namespace: no sandbox, no container, still waiting.
    let sandboxes = env.all_sandboxes().await;
    assert!(
        sandboxes.iter().all(|s| s
            .metadata
            .as_ref()
            .is_some_and(|m| !m.name.starts_with("own"))),
        "{sandboxes:?}"
    );
    let pod = env
        .pod("own")
        .expect("static pod own in the kubelet's pods");
    assert_eq!(pod.status.and_then(|s| s.phase).as_deref(), Some("Pending"));
}
