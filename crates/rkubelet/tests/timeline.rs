//! A pod's start-up timeline (issue 20) on a real node: an API pod through kube-apiserver 1.20 on
//! a private containerd; `/pods/<ns>/<name>/timeline` on the secure port behind the same
//! authentication and authorization as `/pods` (and through the apiserver's nodes/proxy), the
//! `kubelet_pod_start_stage_duration_seconds{stage}` histogram on `/metrics`, the V(2) summary line,
//! and the timeline forgotten once the pod is gone.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

/// The `_count` of the stage histogram's series for `stage` on the read-only `/metrics`.
fn stage_count(env: &Env, stage: &str) -> f64 {
    let (code, body) = http_get("127.0.0.1", env.ro_port, "/metrics").expect("GET /metrics");
    assert_eq!(code, 200, "{body}");
    let prefix = format!("kubelet_pod_start_stage_duration_seconds_count{{stage=\"{stage}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn pod_start_timeline_endpoint_metrics_and_log() {
    let cp = ControlPlane::up("timeline");
    let mut env = Env::new(138);
    env.join(&cp, &[]);
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod("tl", &env.node, SLEEPER, 2, "")),
    );
    let cert = cp.dir.join("pki/apiserver-kubelet-client.crt");
    let key = cp.dir.join("pki/apiserver-kubelet-client.key");
    let creds = [
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];

    // The apiserver's kubelet-client cert is allowed; the timeline closes at Ready.
    let t: Value = wait_until(Duration::from_secs(60), "a complete timeline", || {
        let (code, body) = curl(&env, "/pods/default/tl/timeline", &creds);
        if code != 200 {
            return None;
        }
        let v: Value = serde_json::from_str(&body).expect("JSON");
        (v["complete"] == true).then_some(v)
    });
    assert_eq!(t["kind"], "PodStartupTimeline");
    assert_eq!(
        (t["namespace"].as_str(), t["name"].as_str()),
        (Some("default"), Some("tl"))
    );
    let events = t["events"].as_array().unwrap();
    let milestones: Vec<(&str, Option<&str>)> = events
        .iter()
        .map(|e| (e["milestone"].as_str().unwrap(), e["container"].as_str()))
        .collect();
    assert_eq!(
        milestones,
        [
            ("seen", None),
            ("admitted", None),
            ("volumesReady", None),
            ("sandboxCreated", None),
            ("imagePulled", Some("main")),
            ("containerCreated", Some("main")),
            ("containerStarted", Some("main")),
            ("ready", None),
        ],
        "{t}"
    );
    // Times only go forward, and the stages add up to the total.
    let since: Vec<f64> = events
        .iter()
        .map(|e| e["sinceSeenSeconds"].as_f64().unwrap())
        .collect();
    assert!(since.windows(2).all(|w| w[0] <= w[1]), "{since:?}");
    let sum: f64 = events
        .iter()
        .map(|e| e["stageSeconds"].as_f64().unwrap())
        .sum();
    let total = t["totalSeconds"].as_f64().unwrap();
    assert!(
        (sum - total).abs() < 1e-6 && total > 0.0,
        "{sum} vs {total}"
    );
    assert!(
        events
            .iter()
            .all(|e| e["time"].as_str().is_some_and(|s| s.ends_with('Z'))),
        "{t}"
    );

    // Through the apiserver's nodes/proxy, as an operator reaches it with kubectl.
    let raw = cp.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/pods/default/tl/timeline", env.node),
    ]);
    let via: Value = serde_json::from_str(&raw).expect("JSON through the proxy");
    assert_eq!(via["uid"], t["uid"]);

    // Same authentication and authorization as /pods.
    let (code, body) = curl(&env, "/pods/default/tl/timeline", &[]);
    assert_eq!((code, body.as_str()), (401, "Unauthorized"));
    cp.kubectl(&["create", "serviceaccount", "nobody"]);
    let token = cp.kubectl(&["create", "token", "nobody"]);
    let auth = format!("Authorization: Bearer {}", token.trim());
    let (code, body) = curl(&env, "/pods/default/tl/timeline", &["-H", &auth]);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("subresource(s)=[pods proxy]"), "{body}");
    // A pod the node does not know.
    let (code, body) = curl(&env, "/pods/default/nope/timeline", &creds);
    assert_eq!(code, 404, "{body}");

    // Every stage observed once in the histogram.
    for stage in [
        "admission",
        "volumes",
        "sandbox",
        "image_pull",
        "container_create",
        "container_start",
        "readiness",
    ] {
        assert_eq!(stage_count(&env, stage), 1.0, "stage {stage}");
    }

    // The V(2) summary line (the tests run rkubelet at -v=4).
    let log = env.kubelet_log();
    let line = log
        .lines()
        .find(|l| l.contains("] \"pod start-up timeline\"") && l.contains("pod=\"default/tl\""))
        .unwrap_or_else(|| panic!("no timeline line in\n{}", tail(&log, 40)));
    assert!(
        line.contains("stages=\"admission=") && line.contains("image_pull[main]="),
        "{line}"
    );

    // Deleted and cleaned up: its timeline goes with it.
    cp.kubectl(&["delete", "pod", "tl", "--wait=true", "--timeout=60s"]);
    wait_until(Duration::from_secs(30), "timeline forgotten", || {
        (curl(&env, "/pods/default/tl/timeline", &creds).0 == 404).then_some(())
    });
}
