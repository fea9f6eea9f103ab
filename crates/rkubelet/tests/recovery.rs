//! Recovery (issue 22), against a real kube-apiserver and containerd: back to work within seconds
//! after a long apiserver outage, politely while it lasts; and a kubelet SIGKILLed in the middle
//! of starting (and of deleting) pods ends with every pod Running exactly once, restart count 0,
//! and nothing left behind.
//!
//! `RK_RECOVERY_OUTAGE_SECS` sets the outage length (default 100 s); bench/recovery.sh runs the
//! outage test with 30 s, 2 min and 5 min and collects the `RECOVERY` line it prints.

mod common;

use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;
use rkubelet_cri::api;
use serde_json::Value;

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn outage() -> Duration {
    let secs = std::env::var("RK_RECOVERY_OUTAGE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    Duration::from_secs(secs)
}

/// Polls `f` every 100 ms until it is true; the seconds it took from `since`.
fn seconds_until(
    since: Instant,
    timeout: Duration,
    what: &str,
    mut f: impl FnMut() -> bool,
) -> f64 {
    wait_until(timeout, what, || f().then_some(()));
    since.elapsed().as_secs_f64()
}

#[tokio::test]
async fn back_to_work_within_seconds_after_a_long_apiserver_outage() {
    let cp = ControlPlane::up("recovery");
    let mut env = Env::new(175);
    env.join(&cp, &[]);
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod("steady", &env.node, SLEEPER, 2, "")),
    );
    // Finishes while the apiserver is away: its final status must land soon after it is back.
    let finisher = api_pod("finisher", &env.node, "sleep 20", 2, "")
        .replace("spec:\n", "spec:\n  restartPolicy: Never\n");
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&finisher));
    wait_until(Duration::from_secs(60), "pods Running", || {
        let f = cp.get_json(&["pod", "finisher"])?;
        let p = cp.get_json(&["pod", "steady"])?;
        (p["status"]["phase"] == "Running" && f["status"]["phase"] == "Running").then_some(())
    });
    let lease_before = wait_until(Duration::from_secs(20), "lease", || {
        let l = cp.get_json(&["lease", "-n", "kube-node-lease", &env.node])?;
        Some(l["spec"]["renewTime"].as_str()?.to_string())
    });
    let heartbeat_before = wait_until(Duration::from_secs(20), "node status", || {
        let n = cp.get_json(&["node", &env.node])?;
        Some(
            condition(&n, "Ready")?["lastHeartbeatTime"]
                .as_str()?
                .to_string(),
        )
    });

    let syns = SynCounter::new(cp.api_port());
    cp.stop_apiserver();
    let down = Instant::now();
    // Let any connection the stop cut short be retried before counting.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = syns.count();
    tokio::time::sleep(outage().saturating_sub(Duration::from_secs(5))).await;
    let counted = syns.count() - before;
    let rate = counted as f64 / (down.elapsed().as_secs_f64() - 5.0);
    assert!(env.kubelet_alive(), "rkubelet died without its apiserver");
    cp.start_apiserver();
    let outage_s = down.elapsed().as_secs_f64();
    // Counted from the moment the apiserver answers again (start_apiserver waits for ready).
    let back = Instant::now();
    let back_wall = std::time::SystemTime::now();
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod("newcomer", &env.node, SLEEPER, 2, "")),
    );
    let pod_running = seconds_until(back, Duration::from_secs(120), "new pod Running", || {
        cp.get_json(&["pod", "newcomer"])
            .is_some_and(|p| p["status"]["phase"] == "Running")
    });
    let status = seconds_until(back, Duration::from_secs(120), "final status lands", || {
        cp.get_json(&["pod", "finisher"])
            .is_some_and(|p| p["status"]["phase"] == "Succeeded")
    });
    // The Lease and the node status carry their own write times: how long after the apiserver
    // was back they were written (negative: before start_apiserver saw it ready).
    let lease = wait_until(Duration::from_secs(60), "lease renewed", || {
        let l = cp.get_json(&["lease", "-n", "kube-node-lease", &env.node])?;
        let t = l["spec"]["renewTime"].as_str()?.to_string();
        (t != lease_before).then(|| since(back_wall, &t))
    });
    let node = wait_until(Duration::from_secs(60), "node status posted", || {
        let n = cp.get_json(&["node", &env.node])?;
        let ready = condition(&n, "Ready")?;
        let t = ready["lastHeartbeatTime"].as_str()?.to_string();
        (ready["status"] == "True" && t != heartbeat_before).then(|| since(back_wall, &t))
    });
    println!(
        "RECOVERY outage={outage_s:.0}s new_pod_running={pod_running:.1}s pod_status={status:.1}s \
         lease={lease:.1}s node_status={node:.1}s connects_per_s_while_down={rate:.2} ({counted} in {:.0}s)",
        outage_s - 5.0,
    );
    // The targets are 5 s (new pod, plus the runtime's start time) and 10 s (statuses, Lease);
    // the bounds are about twice that, because kubectl polls (~0.2 s each) and a shared 2-core
    // machine running other builds add seconds that are not the kubelet's. The old behaviour
    // waited out a retry delay grown to 30 s (55 s measured after 5 min), well above them.
    assert!(
        pod_running < 12.0,
        "new pod Running {pod_running:.1}s after the apiserver returned"
    );
    assert!(
        status < 20.0,
        "pending pod status landed {status:.1}s after the apiserver returned"
    );
    assert!(
        lease < 15.0,
        "lease renewed {lease:.1}s after the apiserver returned"
    );
    assert!(
        node < 20.0,
        "node Ready {node:.1}s after the apiserver returned"
    );
    // Polite while down: a handful of loops, each at most one attempt per second (the probes)
    // plus its capped backoff; a storm would be tens or hundreds per second.
    assert!(
        rate < 6.0,
        "{rate:.2} connection attempts per second while the apiserver was down"
    );
}

/// Seconds from `t0` to the RFC 3339 time `rfc` (parsed by date(1); the test has no time crate).
fn since(t0: std::time::SystemTime, rfc: &str) -> f64 {
    let out = std::process::Command::new("date")
        .args(["-u", "-d", rfc, "+%s.%N"])
        .output()
        .unwrap();
    let t: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    t - t0
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

const PODS: usize = 30;

fn pods_yaml(node: &str) -> String {
    (0..PODS)
        .map(|i| api_pod(&format!("crash-{i}"), node, SLEEPER, 1, ""))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Every `crash-*` pod in the API, as JSON.
fn api_pods(cp: &ControlPlane) -> Vec<Value> {
    cp.get_json(&["pods"])
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| {
            p["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("crash-"))
        })
        .collect()
}

#[tokio::test]
async fn sigkill_while_starting_and_deleting_pods_leaves_one_clean_run_each() {
    let cp = ControlPlane::up("crash");
    let mut env = Env::new(176);
    env.join(&cp, &[]);
    wait_until(Duration::from_secs(30), "node registered", || {
        cp.get_json(&["node", &env.node])
    });
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&pods_yaml(&env.node)));
    // Kill while starts are in flight: some containers exist, not all.
    wait_async(Duration::from_secs(120), "starts under way", || async {
        env.all_containers().await.len() >= 3
    })
    .await;
    env.stop_kubelet(Signal::SIGKILL);
    let cs = env.all_containers().await;
    let created = cs
        .iter()
        .filter(|c| c.state == api::ContainerState::ContainerCreated as i32)
        .count();
    // Interrupted starts show up as Created containers, or (StartContainer cancelled half-way)
    // as containers containerd marks exited with a StartError; the run only tests something
    // when there are some, so say how many.
    println!(
        "killed with {} containers, {created} created, not started",
        cs.len()
    );
    env.join(&cp, &[]);

    // Phase Running alone also holds for a pod whose only container has exited and waits to be
    // started again (restartPolicy Always): wait for every container to be reported running, the
    // state the runtime is then checked for.
    let pods = wait_until(
        Duration::from_secs(180),
        "every pod's container running",
        || {
            let pods = api_pods(&cp);
            (pods.len() == PODS
                && pods.iter().all(|p| {
                    p["status"]["phase"] == "Running"
                        && p["status"]["containerStatuses"][0]["state"]["running"].is_object()
                }))
            .then_some(pods)
        },
    );
    for p in &pods {
        let name = p["metadata"]["name"].as_str().unwrap();
        let uid = p["metadata"]["uid"].as_str().unwrap();
        if p["status"]["containerStatuses"][0]["restartCount"] != 0 {
            let log = env.kubelet_log();
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| l.contains(&format!("{name}_")) || l.contains(&format!("/{name} ")))
                .filter(|l| !l.contains(" pleg.rs:"))
                .collect();
            eprintln!("{name}:\n{}", lines.join("\n"));
            // What the runtime holds for the pod, so a failure says which kind of interrupted
            // start was counted.
            for c in env.containers_of(uid).await {
                let st = env
                    .cri()
                    .container_status(api::ContainerStatusRequest {
                        container_id: c.id.clone(),
                        verbose: false,
                    })
                    .await
                    .ok()
                    .and_then(|r| r.status);
                if let Some(st) = st {
                    eprintln!(
                        "  instance {} state={} reason={:?} message={:?} created={} started={} finished={} restartCount={:?}",
                        st.id,
                        st.state,
                        st.reason,
                        st.message,
                        st.created_at,
                        st.started_at,
                        st.finished_at,
                        st.annotations.get("io.kubernetes.container.restartCount")
                    );
                }
            }
        }
        assert_eq!(
            p["status"]["containerStatuses"][0]["restartCount"], 0,
            "{name}: an interrupted start must not count as a restart"
        );
        let sandboxes = env.sandboxes_of(uid).await;
        assert_eq!(sandboxes.len(), 1, "{name}: one sandbox, not {sandboxes:?}");
        let containers = env.containers_of(uid).await;
        assert_eq!(
            containers.len(),
            1,
            "{name}: one container, not {containers:?}"
        );
        assert_eq!(
            containers[0].state,
            api::ContainerState::ContainerRunning as i32,
            "{name}: the container runs"
        );
    }

    // Delete them all, and kill the kubelet again while it is deleting.
    cp.kubectl(&["delete", "pods", "--all", "--wait=false"]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    env.stop_kubelet(Signal::SIGKILL);
    env.join(&cp, &[]);
    wait_until(Duration::from_secs(180), "pods gone from the API", || {
        api_pods(&cp).is_empty().then_some(())
    });
    wait_async(
        Duration::from_secs(60),
        "pods gone from the runtime",
        || async { env.all_containers().await.is_empty() && env.all_sandboxes().await.is_empty() },
    )
    .await;
}
