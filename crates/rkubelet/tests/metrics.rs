//! rkubelet's own metrics on the read-only port, under upstream's names, parsed with a
//! Prometheus text-format parser after real pod starts on a real containerd.

mod common;

use std::time::Duration;

use common::*;
use prometheus_parse::{Scrape, Value};

fn scrape(env: &Env) -> Scrape {
    let (code, body) = http_get("127.0.0.1", env.ro_port, "/metrics").unwrap();
    assert_eq!(code, 200, "{body}");
    Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text format")
}

fn value<'a>(s: &'a Scrape, name: &str, label: Option<(&str, &str)>) -> Option<&'a Value> {
    s.samples
        .iter()
        .find(|m| m.metric == name && label.is_none_or(|(k, v)| m.labels.get(k) == Some(v)))
        .map(|m| &m.value)
}

#[tokio::test]
async fn metrics_count_pods_runtime_calls_and_start_latency() {
    let mut env = Env::new(166);
    env.start_kubelet();
    env.write_manifest("a.yaml", &simple_pod("a", "Always", SLEEPER));
    env.write_manifest("b.yaml", &simple_pod("b", "Always", SLEEPER));
    env.wait_running("a");
    env.wait_running("b");
    // PLEG updates the running gauges on its next relist.
    let s = wait_until(Duration::from_secs(10), "running pods gauge", || {
        let s = scrape(&env);
        matches!(value(&s, "kubelet_running_pods", None), Some(Value::Gauge(g)) if *g == 2.0)
            .then_some(s)
    });
    assert!(
        matches!(
            value(&s, "kubelet_running_containers", Some(("container_state", "running"))),
            Some(Value::Gauge(g)) if *g == 2.0
        ),
        "{:?}",
        value(
            &s,
            "kubelet_running_containers",
            Some(("container_state", "running"))
        )
    );
    let node = env.node.clone();
    assert!(matches!(
        value(&s, "kubelet_node_name", Some(("node", node.as_str()))),
        Some(Value::Gauge(g)) if *g == 1.0
    ));
    for op in [
        "run_podsandbox",
        "create_container",
        "start_container",
        "list_containers",
    ] {
        match value(
            &s,
            "kubelet_runtime_operations_total",
            Some(("operation_type", op)),
        ) {
            Some(Value::Counter(c)) => assert!(*c >= 2.0 || op == "list_containers", "{op}: {c}"),
            other => panic!("{op}: {other:?}"),
        }
    }
    assert!(matches!(
        value(&s, "kubelet_started_pods_total", None),
        Some(Value::Counter(c)) if *c == 2.0
    ));
    assert!(matches!(
        value(&s, "kubelet_started_containers_total", Some(("container_type", "container"))),
        Some(Value::Counter(c)) if *c == 2.0
    ));
    for h in [
        "kubelet_pod_start_duration_seconds",
        "kubelet_pod_start_sli_duration_seconds",
    ] {
        match value(&s, h, None) {
            Some(Value::Histogram(buckets)) => {
                let total = buckets.last().map(|b| b.count).unwrap_or(0.0);
                assert_eq!(total, 2.0, "{h}: {buckets:?}");
                // Both pods started within 30 s (wait_running's limit).
                let within_30 = buckets
                    .iter()
                    .find(|b| b.less_than == 30.0)
                    .map(|b| b.count);
                assert_eq!(within_30, Some(2.0), "{h}: {buckets:?}");
            }
            other => panic!("{h}: {other:?}"),
        }
    }
    assert!(matches!(
        value(&s, "kubelet_pleg_relist_duration_seconds", None),
        Some(Value::Histogram(_))
    ));
}
