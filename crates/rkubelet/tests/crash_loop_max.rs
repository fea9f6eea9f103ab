//! `crashLoopBackOff.maxContainerRestartPeriod` (issue 15 item 4) against a private containerd:
//! a capped CrashLoopBackOff restarts a crashing container far more often than the default
//! 10 s -> 20 s -> 40 s ... schedule could.

mod common;

use std::time::Duration;

use common::*;

const RESTARTS: i32 = 6;

#[tokio::test]
async fn capped_crash_loop_backoff_restarts_sooner() {
    let mut env = Env::new(200);
    env.extra_config = "crashLoopBackOff: {maxContainerRestartPeriod: 2s}\n".into();
    env.start_kubelet();
    env.write_manifest("crash.yaml", &simple_pod("crash", "Always", "exit 1"));
    let messages = std::cell::RefCell::new(Vec::<String>::new());
    // With upstream's default schedule the sixth restart comes after at least
    // 10 + 20 + 40 + 80 + 160 = 310 s of back-off; with a 2 s cap every delay is 2 s, so six
    // restarts fit easily in 90 s even on a loaded machine (each cycle: 2 s back-off plus a
    // container start).
    let count = env.wait_pod(
        "crash",
        Duration::from_secs(90),
        "six restarts under the 2 s cap",
        |p| {
            let cs = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
            if let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) {
                if w.reason.as_deref() == Some("CrashLoopBackOff") {
                    let m = w.message.clone().unwrap_or_default();
                    let mut seen = messages.borrow_mut();
                    if !seen.contains(&m) {
                        seen.push(m);
                    }
                }
            }
            (cs.restart_count >= RESTARTS).then_some(cs.restart_count)
        },
    );
    let messages = messages.into_inner();
    // Every back-off the status showed was the cap (the first delay too: a cap below 10 s is
    // also the initial delay, as upstream's newCrashLoopBackOff).
    assert!(!messages.is_empty(), "no CrashLoopBackOff status seen");
    for m in &messages {
        assert!(
            m.starts_with("back-off 2s restarting failed container"),
            "{messages:?}"
        );
    }
    eprintln!("{count} restarts; back-off messages: {messages:?}");
}
