//! Node-pressure eviction on this machine (upstream `pkg/kubelet/eviction`): rkubelet as a node
//! of a real control plane against a real containerd, with thresholds set just below what the
//! machine has now, and pods that really use the resource: the pod that uses it is evicted
//! (phase, reason, message, event), the others keep running, the pressure condition comes and
//! goes, and new pods are refused meanwhile.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const MI: i64 = 1 << 20;

/// The node's `memory.available` as the kubelet computes it (upstream, cAdvisor's root
/// container): MemTotal less the root cgroup's working set (usage less inactive file).
fn memory_available() -> i64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let total: i64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    let usage: i64 = std::fs::read_to_string("/sys/fs/cgroup/memory/memory.usage_in_bytes")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stat = std::fs::read_to_string("/sys/fs/cgroup/memory/memory.stat").unwrap();
    let inactive: i64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("total_inactive_file "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    total * 1024 - (usage - inactive).max(0)
}

fn condition(obj: &Value, kind: &str) -> Option<(String, String)> {
    let c = obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?;
    Some((
        c["status"].as_str()?.to_string(),
        c["reason"].as_str().unwrap_or_default().to_string(),
    ))
}

fn events_for(cp: &ControlPlane, kind: &str, name: &str) -> Vec<(String, String, String)> {
    let sel = format!("involvedObject.kind={kind},involvedObject.name={name}");
    let ev = cp
        .get_json(&["events", "-A", "--field-selector", &sel])
        .unwrap_or_default();
    ev["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (s("type"), s("reason"), s("message"))
        })
        .collect()
}

fn wait_json(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<Value>) -> Value {
    wait_until(timeout, what, &mut f)
}

/// A memory hog: `mb` MiB written into a tmpfs emptyDir (shared memory is charged to the pod's
/// cgroup and counts in the working set), then it sleeps.
fn hog_pod(name: &str, node: &str, mb: i64) -> String {
    let script = format!(
        "trap 'exit 0' TERM; dd if=/dev/zero of=/cache/fill bs=1M count={mb} 2>/dev/null; \
         while true; do sleep 1; done"
    );
    api_pod(
        name,
        node,
        &script,
        1,
        "    volumeMounts:\n    - {name: cache, mountPath: /cache}\n  volumes:\n  - name: cache\n    emptyDir: {medium: Memory}\n",
    )
}

#[tokio::test]
async fn memory_pressure_evicts_the_best_effort_pod_and_refuses_new_ones() {
    let cp = ControlPlane::up("evict-mem");
    let mut env = Env::new(243);
    // The threshold sits 3 GiB below what the machine has now; the hog takes 6 GiB. The margin
    // keeps the other processes of a shared machine from crossing it on their own.
    let avail = memory_available();
    let threshold_mi = (avail - 3072 * MI) / MI;
    assert!(
        threshold_mi > 256,
        "too little memory for this test: {avail}"
    );
    env.extra_config = format!(
        "evictionHard: {{memory.available: {threshold_mi}Mi}}\nevictionPressureTransitionPeriod: 30s\n"
    );
    env.join(&cp, &[]);
    wait_json("node Ready", Duration::from_secs(30), || {
        let n = cp.get_json(&["node", &env.node])?;
        (condition(&n, "Ready")?.0 == "True").then_some(n)
    });
    let n = cp.get_json(&["node", &env.node]).unwrap();
    assert_eq!(
        condition(&n, "MemoryPressure").unwrap(),
        ("False".into(), "KubeletHasSufficientMemory".into())
    );

    let guaranteed = api_pod(
        "guaranteed",
        &env.node,
        SLEEPER,
        1,
        "    resources:\n      limits: {cpu: 50m, memory: 32Mi}\n",
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&guaranteed));
    cp.wait_running("guaranteed");
    let hog = hog_pod("hog", &env.node, 6144);
    let created = Instant::now();
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&hog));

    // The hog is evicted: Failed, Evicted, upstream's message naming the threshold and the
    // container's use, the DisruptionTarget condition, and a Warning event with the message.
    let p = wait_json("hog evicted", Duration::from_secs(90), || {
        let p = cp.get_json(&["pod", "hog"])?;
        (p["status"]["phase"] == "Failed").then_some(p)
    });
    let evicted_after = created.elapsed();
    assert_eq!(p["status"]["reason"], "Evicted", "{}", p["status"]);
    let msg = p["status"]["message"].as_str().unwrap().to_string();
    let prefix = format!(
        "The node was low on resource: memory. Threshold quantity: {threshold_mi}Mi, available: "
    );
    assert!(msg.starts_with(&prefix), "{msg}");
    assert!(
        msg.contains("Container main was using ")
            && msg.ends_with(", request is 0, has larger consumption of memory. "),
        "{msg}"
    );
    let disruption = p["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "DisruptionTarget")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (&disruption["status"], &disruption["reason"]),
        (&Value::from("True"), &Value::from("TerminationByKubelet")),
        "{}",
        p["status"]
    );
    let evs = wait_until(Duration::from_secs(20), "Evicted event", || {
        let evs = events_for(&cp, "Pod", "hog");
        evs.iter().any(|(_, r, _)| r == "Evicted").then_some(evs)
    });
    assert!(
        evs.iter()
            .any(|(t, r, m)| t == "Warning" && r == "Evicted" && *m == msg),
        "{evs:?}"
    );
    // Its containers are stopped and gone.
    let hog_uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !env.sandboxes_of(&hog_uid).await.is_empty() {
        assert!(Instant::now() < deadline, "hog's sandbox still there");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // MemoryPressure shows, and a new BestEffort pod is refused while it holds.
    let n = wait_json("MemoryPressure True", Duration::from_secs(25), || {
        let n = cp.get_json(&["node", &env.node])?;
        (condition(&n, "MemoryPressure")?.0 == "True").then_some(n)
    });
    assert_eq!(
        condition(&n, "MemoryPressure").unwrap().1,
        "KubeletHasInsufficientMemory"
    );
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod("late", &env.node, SLEEPER, 1, "")),
    );
    let late = wait_json("late pod refused", Duration::from_secs(20), || {
        let p = cp.get_json(&["pod", "late"])?;
        (p["status"]["phase"] == "Failed").then_some(p)
    });
    assert_eq!(
        (&late["status"]["reason"], &late["status"]["message"]),
        (
            &Value::from("Evicted"),
            &Value::from("Pod was rejected: The node had condition: [MemoryPressure]. ")
        ),
        "{}",
        late["status"]
    );
    let node_events = events_for(&cp, "Node", &env.node);
    assert!(
        node_events
            .iter()
            .any(|(_, r, _)| r == "NodeHasInsufficientMemory"),
        "{node_events:?}"
    );

    // The pressure ends after the transition period; the Guaranteed pod never stopped.
    wait_json("MemoryPressure False", Duration::from_secs(70), || {
        let n = cp.get_json(&["node", &env.node])?;
        (condition(&n, "MemoryPressure")? == ("False".into(), "KubeletHasSufficientMemory".into()))
            .then_some(n)
    });
    let g = cp.get_json(&["pod", "guaranteed"]).unwrap();
    assert_eq!(g["status"]["phase"], "Running", "{}", g["status"]);
    assert_eq!(g["status"]["containerStatuses"][0]["restartCount"], 0);
    assert!(g["status"]["containerStatuses"][0]["state"]["running"].is_object());
    let log = env.kubelet_log();
    assert!(log.contains("evicting pod"), "{}", tail(&log, 40));
    eprintln!("hog created -> Failed/Evicted seen in the API: {evicted_after:?}");
}
