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
    // PLEG updates the running gauges on each relist. A relist can see both sandboxes ready while
    // the containers are still being started (the pods' Running status comes from their workers,
    // not from PLEG), so wait for the relist that sees both gauges at 2: two pods, two containers.
    fn gauges(s: &Scrape) -> (Option<&Value>, Option<&Value>) {
        (
            value(s, "kubelet_running_pods", None),
            value(
                s,
                "kubelet_running_containers",
                Some(("container_state", "running")),
            ),
        )
    }
    // Relists come every second; the bound only catches gauges that never get there, with room
    // for a loaded machine.
    let s = wait_until(
        Duration::from_secs(30),
        "running pods and containers gauges at 2",
        || {
            let s = scrape(&env);
            matches!(
                gauges(&s),
                (Some(Value::Gauge(p)), Some(Value::Gauge(c))) if *p == 2.0 && *c == 2.0
            )
            .then_some(s)
        },
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
            // Two pods: a sandbox and a container each; PLEG lists containers every relist.
            Some(Value::Counter(c)) => {
                let min = if op == "list_containers" { 1.0 } else { 2.0 };
                assert!(*c >= min, "{op}: {c}")
            }
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
    // PLEG relists (every second) are timed: at least the one that set the gauges above.
    match value(&s, "kubelet_pleg_relist_duration_seconds", None) {
        Some(Value::Histogram(buckets)) => {
            let total = buckets.last().map(|b| b.count).unwrap_or(0.0);
            assert!(total >= 1.0, "relists: {buckets:?}");
            assert!(
                buckets.windows(2).all(|w| w[0].count <= w[1].count),
                "cumulative buckets: {buckets:?}"
            );
        }
        other => panic!("kubelet_pleg_relist_duration_seconds: {other:?}"),
    }
}

#[tokio::test]
async fn resource_metrics_report_node_pod_and_container_usage() {
    let mut env = Env::new(167);
    env.start_kubelet();
    // A container that burns CPU, so its counter moves between scrapes.
    env.write_manifest(
        "busy.yaml",
        &simple_pod("busy", "Always", "while true; do :; done"),
    );
    env.wait_running("busy");
    let read = |name: &str, label: Option<(&str, &str)>| -> f64 {
        let (code, body) = http_get("127.0.0.1", env.ro_port, "/metrics/resource").unwrap();
        assert_eq!(code, 200, "{body}");
        let s = Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("text format");
        match value(&s, name, label) {
            Some(Value::Counter(v)) | Some(Value::Gauge(v)) | Some(Value::Untyped(v)) => *v,
            other => panic!("{name} {label:?}: {other:?}\n{body}"),
        }
    };
    let pod = Some(("pod", "busy-".to_string() + &env.node));
    let pod = pod.as_ref().map(|(k, v)| (*k, v.as_str()));
    assert!(read("node_cpu_usage_seconds_total", None) > 0.0);
    assert!(read("node_memory_working_set_bytes", None) > 0.0);
    assert_eq!(read("resource_scrape_error", None), 0.0);
    let first = read("container_cpu_usage_seconds_total", pod);
    assert!(read("container_memory_working_set_bytes", pod) > 0.0);
    assert!(read("pod_memory_working_set_bytes", pod) > 0.0);
    assert!(read("container_start_time_seconds", pod) > 1.6e9);
    // The busy loop's counter moves. How fast depends on how loaded the machine is, so this
    // waits for a clear step (0.2 CPU-s) with a bound that only catches a counter standing
    // still; the CPU figures themselves are measured by bench/, not asserted here.
    let second = wait_until(Duration::from_secs(60), "busy loop CPU counted", || {
        let v = read("container_cpu_usage_seconds_total", pod);
        (v > first + 0.2).then_some(v)
    });
    assert!(read("pod_cpu_usage_seconds_total", pod) >= second);

    // The Summary API from the same sources, in upstream's JSON shape.
    let summary = || -> serde_json::Value {
        let (code, body) = http_get("127.0.0.1", env.ro_port, "/stats/summary").unwrap();
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    };
    let s = summary();
    let n = &s["node"];
    assert_eq!(n["nodeName"], env.node.as_str());
    assert!(
        n["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 0,
        "{n}"
    );
    assert!(n["memory"]["workingSetBytes"].as_u64().unwrap() > 0, "{n}");
    assert!(n["fs"]["capacityBytes"].as_u64().unwrap() > 0, "{n}");
    assert!(n["rlimit"]["maxpid"].as_u64().unwrap() > 0, "{n}");
    let busy = |s: &serde_json::Value| -> serde_json::Value {
        s["pods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["podRef"]["name"] == format!("busy-{}", env.node))
            .cloned()
            .unwrap_or_else(|| panic!("no busy pod in {s}"))
    };
    let p1 = busy(&s);
    assert_eq!(p1["containers"][0]["name"], "main");
    assert!(
        p1["containers"][0]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(p1["startTime"].is_string(), "{p1}");
    let cpu = |p: &serde_json::Value| p["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let p2 = busy(&summary());
    assert!(cpu(&p2) > cpu(&p1), "{p1} -> {p2}");
}
