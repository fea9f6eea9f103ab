//! PLEG's runtime-event fast path on a real containerd 1.6 (issue 20): containerd answers CRI
//! `GetContainerEvents` Unimplemented, so rkubelet subscribes to containerd's own events service
//! on the same socket. Containers that exit are reported through `/tasks/exit` (and read on
//! the `/tasks/delete` that follows) and the relists that follow find nothing the events had
//! missed (the counters say so, no clock is read); a containerd restart breaks the stream,
//! which reconnects, and exits are reported through the new stream the same way.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;

/// The sum of every sample of counter `name` on the read-only `/metrics` (0 when none).
fn total(env: &Env, name: &str) -> f64 {
    let (code, body) = http_get("127.0.0.1", env.ro_port, "/metrics").expect("GET /metrics");
    assert_eq!(code, 200, "{body}");
    body.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn exits(env: &Env) -> f64 {
    env.metric(
        "kubelet_pleg_runtime_events_total",
        Some(("topic", "/tasks/exit")),
    )
    .unwrap_or(0.0)
}

const MISSED: &str = "kubelet_pleg_relist_missed_events_total";
const RELISTS: &str = "kubelet_pleg_relist_duration_seconds_count";

/// Waits until the pod's only container terminated with exit code 3 (its status on `/pods`).
fn wait_exited(env: &Env, name: &str) -> Pod {
    env.wait_pod(
        name,
        Duration::from_secs(60),
        "main terminated with 3",
        |p| {
            let st = find_container_status(p, "main")?;
            let t = st.state.as_ref()?.terminated.as_ref()?;
            (t.exit_code == 3).then(|| p.clone())
        },
    )
}

/// Pods whose container exits 2 s after it started, never restarted.
fn exiting_pods(env: &Env, names: &[&str]) {
    for name in names {
        env.write_manifest(
            &format!("{name}.yaml"),
            &simple_pod(name, "Never", "sleep 2; exit 3"),
        );
    }
    for name in names {
        wait_exited(env, name);
    }
}

#[test]
fn container_exits_come_through_containerd_events_also_after_a_containerd_restart() {
    let mut env = Env::new(118);
    env.start_kubelet();
    exiting_pods(&env, &["exit-a", "exit-b", "exit-c"]);

    // The containerd stream carried the three exits ...
    assert!(
        env.metric("kubelet_evented_pleg_connection_success_count", None) >= Some(1.0),
        "no event stream was opened; log:\n{}",
        tail(&env.kubelet_log(), 40)
    );
    assert!(exits(&env) >= 3.0, "exits seen: {}", exits(&env));
    // ... and the relists since (a few, with the stream open) found nothing the events missed.
    let relists = total(&env, RELISTS);
    wait_until(Duration::from_secs(10), "three more relists", || {
        (total(&env, RELISTS) >= relists + 3.0).then_some(())
    });
    assert_eq!(
        total(&env, MISSED),
        0.0,
        "relists found changes the events missed:\n{}",
        tail(&env.kubelet_log(), 60)
    );

    // containerd goes away (the containers' shims stay) and comes back on the same state.
    let errors = env
        .metric("kubelet_evented_pleg_connection_error_count", None)
        .unwrap_or(0.0);
    let opened = env
        .metric("kubelet_evented_pleg_connection_success_count", None)
        .unwrap_or(0.0);
    let pid: i32 = std::fs::read_to_string(env.dir.join("ctd/containerd.pid"))
        .expect("containerd.pid")
        .trim()
        .parse()
        .expect("a pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill containerd");
    wait_until(Duration::from_secs(20), "the stream's loss counted", || {
        (env.metric("kubelet_evented_pleg_connection_error_count", None) > Some(errors))
            .then_some(())
    });
    env.up_runtime();

    // A pod created after the restart: its exit comes through the new stream.
    let before = exits(&env);
    exiting_pods(&env, &["exit-d"]);
    assert!(
        env.metric("kubelet_evented_pleg_connection_success_count", None) > Some(opened),
        "the stream was not opened again; log:\n{}",
        tail(&env.kubelet_log(), 40)
    );
    assert!(exits(&env) > before, "no exit event after the restart");
    let relists = total(&env, RELISTS);
    wait_until(Duration::from_secs(10), "three more relists", || {
        (total(&env, RELISTS) >= relists + 3.0).then_some(())
    });
    assert_eq!(
        total(&env, MISSED),
        0.0,
        "relists found changes the events missed:\n{}",
        tail(&env.kubelet_log(), 60)
    );
}
