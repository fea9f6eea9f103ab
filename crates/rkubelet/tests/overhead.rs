//! Pod `overhead` (issue 15 item 4) on the real cgroup v1 hierarchy and admission: the pod
//! cgroup's limits are the containers' plus the overhead (upstream `ResourceConfigForPod`), and
//! admission fits requests plus overhead against allocatable (upstream `PodRequests`), so a pod
//! that fits without its overhead is refused with it.

mod common;

use std::time::Duration;

use common::*;

const MI: i64 = 1 << 20;

fn cg_num(controller: &str, rel: &str, file: &str) -> i64 {
    let p = std::path::PathBuf::from("/sys/fs/cgroup")
        .join(controller)
        .join(rel.trim_start_matches('/'))
        .join(file);
    let v = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    v.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}: {v:?}", p.display()))
}

fn pod(name: &str, resources: &str, overhead: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  overhead: {overhead}
  containers:
  - name: c
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
    resources: {resources}
"#
    )
}

#[tokio::test]
async fn overhead_counts_in_pod_cgroups_and_admission() {
    let mut env = Env::new(239);
    let root = env.cgroup_root();
    // Guaranteed: limits (= requests) 200m / 40Mi, overhead 100m / 8Mi.
    env.write_manifest(
        "g.yaml",
        &pod(
            "guaranteed",
            "{limits: {cpu: 200m, memory: 40Mi}}",
            "{cpu: 100m, memory: 8Mi}",
        ),
    );
    env.start_kubelet();
    let g = env.wait_running("guaranteed");
    let gp = format!("{root}/kubepods/pod{}", uid(&g));
    assert_eq!(cg_num("memory", &gp, "memory.limit_in_bytes"), 48 * MI);
    assert_eq!(cg_num("cpu", &gp, "cpu.cfs_quota_us"), 30_000);
    assert_eq!(cg_num("cpu", &gp, "cpu.shares"), 300 * 1024 / 1000);

    // The node's CPUs less the 300m the first pod takes with its overhead: a pod requesting
    // 50m less fits on its own, and not with a 100m overhead.
    let cpus = std::thread::available_parallelism().unwrap().get() as i64;
    let request = cpus * 1000 - 300 - 50;
    env.write_manifest(
        "fits.yaml",
        &pod("fits", &format!("{{requests: {{cpu: {request}m}}}}"), "{}"),
    );
    env.wait_running("fits");
    env.remove_manifest("fits.yaml");
    wait_until(Duration::from_secs(30), "pod fits gone", || {
        env.pod("fits").is_none().then_some(())
    });
    env.write_manifest(
        "over.yaml",
        &pod(
            "over",
            &format!("{{requests: {{cpu: {request}m}}}}"),
            "{cpu: 100m}",
        ),
    );
    let (reason, message) = env.wait_pod("over", Duration::from_secs(30), "refused", |p| {
        let st = p.status.as_ref()?;
        if st.phase.as_deref() != Some("Failed") {
            return None;
        }
        Some((st.reason.clone()?, st.message.clone().unwrap_or_default()))
    });
    assert_eq!(reason, "OutOfcpu", "{message}");
    assert!(
        message.contains(&format!("requested: {}", request + 100)),
        "requests plus overhead in the message: {message}"
    );
}
