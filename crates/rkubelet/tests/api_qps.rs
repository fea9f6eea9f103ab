//! `kubeAPIQPS` / `kubeAPIBurst` (issue 15 item 4) against a real kube-apiserver 1.20: the
//! node's requests, as the apiserver's audit log records them, never outrun the token bucket,
//! and the pods still converge.

mod common;

use common::*;

const QPS: f64 = 2.0;
const BURST: f64 = 1.0;
const PODS: usize = 5;

/// Seconds since the Unix epoch of an audit `requestReceivedTimestamp` (RFC 3339, microseconds).
fn received_at(event: &serde_json::Value) -> f64 {
    let ts: k8s_openapi::jiff::Timestamp = event["requestReceivedTimestamp"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("audit event without a timestamp: {event}"));
    ts.as_microsecond() as f64 / 1e6
}

/// The node's requests that go through the limited client. Upstream sends node status and the
/// Lease through its unlimited heartbeat client and events through the event client (limited by
/// eventRecordQPS), so `nodes`, `leases` and `events` are not counted.
fn limited_requests(cp: &ControlPlane, node: &str) -> Vec<f64> {
    let user = format!("system:node:{node}");
    let mut times: Vec<f64> = cp
        .audit_events()
        .iter()
        .filter(|e| e["user"]["username"] == user.as_str())
        .filter(|e| {
            let resource = e["objectRef"]["resource"].as_str().unwrap_or_default();
            !matches!(resource, "nodes" | "leases" | "events")
        })
        .map(received_at)
        .collect();
    times.sort_by(f64::total_cmp);
    times
}

#[tokio::test]
async fn node_requests_stay_within_kube_api_qps() {
    let cp = ControlPlane::up_audited("apiqps");
    let mut env = Env::new(199);
    env.join(&cp, &["--kube-api-qps=2", "--kube-api-burst=1"]);
    let node = env.node.clone();
    for i in 0..PODS {
        let pod = api_pod(&format!("q{i}"), &node, SLEEPER, 1, "");
        cp.kubectl_stdin(&["create", "-f", "-"], Some(&pod));
    }
    for i in 0..PODS {
        cp.wait_running(&format!("q{i}"));
    }
    // Deleting them too: more status writes through the same bucket, and the deletion only
    // completes once the kubelet has stopped each pod and confirmed it (grace period 0).
    cp.kubectl(&["delete", "pod", "--all", "--wait=true", "--timeout=120s"]);

    let times = limited_requests(&cp, &node);
    // The watch, the pods' status patches and gets, configmap/secret lookups: enough requests
    // that a burst of 1 at 2 QPS must have paced them.
    assert!(
        times.len() >= 15,
        "too few node requests in the audit log to judge the limit: {}",
        times.len()
    );
    // A token bucket admits at most burst + qps * T requests in any window of length T. The
    // apiserver stamps a request when it arrives, a little after the kubelet took its token;
    // one extra request absorbs that latency jitter (well under the 0.5 s between tokens).
    let mut worst = (0usize, 0.0f64, 0.0f64);
    for i in 0..times.len() {
        for j in i..times.len() {
            let n = j - i + 1;
            let allowed = BURST + QPS * (times[j] - times[i]) + 1.0;
            if n as f64 > allowed && n > worst.0 {
                worst = (n, times[i], times[j]);
            }
        }
    }
    assert_eq!(
        worst.0,
        0,
        "{} requests between {:.3} and {:.3} ({:.3} s) exceed qps {QPS} burst {BURST}; \
         all request times: {times:?}",
        worst.0,
        worst.1,
        worst.2,
        worst.2 - worst.1
    );
    let span = times.last().unwrap_or(&0.0) - times.first().unwrap_or(&0.0);
    let max_1s = (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|t| **t < times[i] + 1.0)
                .count()
        })
        .max()
        .unwrap_or(0);
    eprintln!(
        "{} limited requests over {span:.1} s, at most {max_1s} in any 1 s window",
        times.len()
    );
}
