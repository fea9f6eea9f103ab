//! Operator settings of the kubelet process and its Node (issue 15 item 4), against a real
//! kube-apiserver 1.20 and containerd:
//! - `podsPerCore`: the Node's pods capacity and allocatable are `min(maxPods, podsPerCore *
//!   cores)`, and admission holds to it (`OutOfpods`), as upstream's `MachineInfo` setter;
//! - `providerID`: the registered Node's `spec.providerID`;
//! - `oomScoreAdj` and `maxOpenFiles`: the process's own `oom_score_adj` and `RLIMIT_NOFILE`
//!   (soft and hard), read from /proc. Values this VM allows are used (raising
//!   `oom_score_adj` and lowering the hard limit need no `CAP_SYS_RESOURCE`); upstream's
//!   defaults (-999, 1000000) need it, and the refusal is logged, not fatal, as upstream.

mod common;

use std::time::Duration;

use common::*;

const INDEX: u32 = 158;
const PROVIDER_ID: &str = "rkt://test/node-158";
const OOM_SCORE_ADJ: i32 = 321;
const MAX_OPEN_FILES: u64 = 4096;

/// Logical CPUs as /proc/cpuinfo lists them (what the kubelet counts as cores).
fn cpus() -> u64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .expect("reading /proc/cpuinfo")
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count() as u64
}

/// `(soft, hard)` of "Max open files" in /proc/<pid>/limits.
fn nofile(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_else(|| panic!("no 'Max open files' in {limits}"));
    let mut f = line["Max open files".len()..].split_whitespace();
    let soft = f.next().unwrap_or_default().to_string();
    let hard = f.next().unwrap_or_default().to_string();
    (soft, hard)
}

#[tokio::test]
async fn pods_per_core_provider_id_oom_score_adj_and_open_files() {
    let cores = cpus();
    assert!(
        (1..110).contains(&cores),
        "this test needs fewer than 110 CPUs"
    );
    let cp = ControlPlane::up("procsettings");
    let mut env = Env::new(INDEX);
    env.extra_config = format!(
        "podsPerCore: 1\nproviderID: {PROVIDER_ID}\noomScoreAdj: {OOM_SCORE_ADJ}\n\
         maxOpenFiles: {MAX_OPEN_FILES}\n"
    );
    env.join(&cp, &[]);
    let node_name = env.node.clone();

    let node = wait_json("node registered", Duration::from_secs(60), || {
        cp.get_json(&["node", &node_name])
    });
    assert_eq!(node["spec"]["providerID"], PROVIDER_ID, "{}", node["spec"]);
    // One pod per core, below maxPods (110): capacity and allocatable both say so.
    let want = cores.to_string();
    assert_eq!(
        node["status"]["capacity"]["pods"],
        want.as_str(),
        "{}",
        node["status"]["capacity"]
    );
    assert_eq!(node["status"]["allocatable"]["pods"], want.as_str());

    let pid = env.kubelet_pid().expect("rkubelet runs");
    let adj = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).expect("oom_score_adj");
    assert_eq!(adj.trim(), OOM_SCORE_ADJ.to_string());
    let limit = MAX_OPEN_FILES.to_string();
    assert_eq!(nofile(pid), (limit.clone(), limit));

    // Admission holds to the lowered capacity: `cores` pods run, one more is OutOfpods.
    let names: Vec<String> = (0..=cores).map(|i| format!("ppc-{i}")).collect();
    for name in &names[..cores as usize] {
        cp.kubectl_stdin(
            &["create", "-f", "-"],
            Some(&api_pod(name, &node_name, SLEEPER, 1, "")),
        );
        wait_json("pod Running", Duration::from_secs(60), || {
            let p = cp.get_json(&["pod", name])?;
            (p["status"]["phase"] == "Running").then_some(p)
        });
    }
    let extra = &names[cores as usize];
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod(extra, &node_name, SLEEPER, 1, "")),
    );
    let rejected = wait_json("extra pod rejected", Duration::from_secs(30), || {
        let p = cp.get_json(&["pod", extra])?;
        (p["status"]["phase"] == "Failed").then_some(p)
    });
    assert_eq!(
        rejected["status"]["reason"], "OutOfpods",
        "{}",
        rejected["status"]
    );
}

/// Upstream's defaults (-999 and 1000000) need CAP_SYS_RESOURCE when the process starts above
/// them; without it rkubelet starts anyway and logs each refusal in upstream's words.
#[tokio::test]
async fn refused_process_settings_are_logged_not_fatal() {
    // Applies only where the test runs without the capability (as this project's CI does).
    let (_, hard) = nofile(std::process::id());
    let own_adj = std::fs::read_to_string("/proc/self/oom_score_adj").expect("oom_score_adj");
    let mut env = Env::new(INDEX + 1);
    env.start_kubelet();
    env.write_manifest("p.yaml", &simple_pod("procset", "Always", SLEEPER));
    env.wait_running("procset");
    let pid = env.kubelet_pid().expect("rkubelet runs");
    let log = env.kubelet_log();
    let (soft_now, hard_now) = nofile(pid);
    if hard.parse::<u64>().is_ok_and(|h| h < 1_000_000) && hard_now == hard {
        // Refused: the limits stay as inherited and the refusal is an error line.
        assert_eq!(soft_now, hard, "limit changed though the call was refused");
        assert!(
            log.lines().any(|l| l.starts_with('E')
                && l.contains("\"Failed to set rlimit on max file handles\"")),
            "{}",
            tail(&log, 30)
        );
    } else {
        assert_eq!(
            (soft_now, hard_now),
            ("1000000".to_string(), "1000000".to_string())
        );
    }
    let adj = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).expect("oom_score_adj");
    if adj.trim() == "-999" {
        assert!(!log.contains("Failed to ApplyOOMScoreAdj"));
    } else {
        assert_eq!(adj, own_adj, "oom_score_adj is neither -999 nor inherited");
        assert!(
            log.lines()
                .any(|l| l.starts_with('W') && l.contains("\"Failed to ApplyOOMScoreAdj\"")),
            "{}",
            tail(&log, 30)
        );
    }
}
