//! Pod `overhead` (issue 15 item 4) on the real cgroup hierarchy (v1 on the host, v2 in
//! hack/vm.sh's guest) and admission: the pod cgroup's limits are the containers' plus the
//! overhead (upstream `ResourceConfigForPod`), and admission fits requests plus overhead against
//! allocatable (upstream `PodRequests`), so a pod that fits without its overhead is refused with
//! it.

mod common;

use std::time::Duration;

use common::*;

const MI: i64 = 1 << 20;

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
    assert_eq!(cgroupfs::memory_limit(&gp), 48 * MI);
    assert_eq!(cgroupfs::cpu_quota_period(&gp).0, 30_000);
    assert_eq!(
        cgroupfs::cpu_shares(&gp),
        cgroupfs::shares_as_seen(300 * 1024 / 1000)
    );

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
