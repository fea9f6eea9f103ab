//! A restarted rkubelet keeps the mirror pods of its static pods (the same API object, same UID).
//! The API source can list the mirror pod before the file source delivered the static pod; a
//! mirror reconcile at that moment took the mirror for an orphan and replaced it (seen in the
//! swap from the upstream kubelet, issue 15). Upstream deletes orphaned mirrors only once every
//! source is ready, and so does rkubelet now. Before that fix this test failed at the first
//! restart (the mirror came back with a new UID); three restarts make a lucky order unlikely.

mod common;

use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

const INDEX: u32 = 230;

fn mirror_uid(cp: &ControlPlane, name: &str) -> Option<String> {
    let p = cp.get_json(&["pod", name])?;
    (p["status"]["phase"] == "Running").then(|| p["metadata"]["uid"].as_str().map(String::from))?
}

#[tokio::test]
async fn restart_keeps_mirror_pods() {
    let cp = ControlPlane::up("mirror-restart");
    let mut env = Env::new(INDEX);
    env.write_manifest("web.yaml", &simple_pod("web", "Always", SLEEPER));
    env.join(&cp, &[]);
    let name = format!("web-{}", env.node);
    let uid = wait_until(Duration::from_secs(60), "mirror pod Running", || {
        mirror_uid(&cp, &name)
    });
    for restart in 1..=3 {
        env.stop_kubelet(Signal::SIGTERM);
        env.join(&cp, &[]);
        // Past the first reconciles of the new process: the file source's first read, the API
        // source's first list and the SyncLoop's first sync of the static pod.
        wait_until(Duration::from_secs(30), "static pod synced again", || {
            env.pod("web")
                .filter(|p| find_container_status(p, "main").is_some_and(|s| s.ready))
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            mirror_uid(&cp, &name).as_deref(),
            Some(uid.as_str()),
            "restart {restart}: the mirror pod is the same object"
        );
    }
    assert!(
        !env.kubelet_log().contains("deleted mirror pod"),
        "no mirror pod deleted: {}",
        tail(&env.kubelet_log(), 30)
    );
}
