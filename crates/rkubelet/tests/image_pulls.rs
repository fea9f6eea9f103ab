//! Image pull limits (issue 15 item 4) against containerd pulling from a real registry (Debian's
//! docker-registry on loopback): `registryPullQPS` / `registryBurst` (upstream's
//! `throttledImageService`: a pull without a token fails at once with "pull QPS exceeded",
//! `ErrImagePull`, then back-off) and `serializeImagePulls: false` with `maxParallelImagePulls`
//! (at most that many pulls at once).

mod common;

use std::time::Duration;

use common::*;

fn pull_pod(name: &str, image: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {image}
    imagePullPolicy: Always
    command: ["sh", "-c", {SLEEPER:?}]
"#
    )
}

/// Event lines the kubelet logged with `reason` whose message contains `needle`.
fn event_lines(log: &str, reason: &str, needle: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("event occurred") && l.contains(reason) && l.contains(needle))
        .count()
}

#[tokio::test]
async fn registry_qps_fails_pulls_beyond_the_bucket_then_back_off_recovers() {
    // Declared first, dropped last: the registry outlives containerd and rkubelet.
    let reg = Registry::up("qps");
    reg.push("rk/busybox:q");
    let image = reg.image("rk/busybox:q");
    let mut env = Env::new(237);
    env.trust_registry(&reg);
    // Parallel pulls so that every pod asks for its token at once; a bucket of 2 at 1 a second.
    env.extra_config = "registryPullQPS: 1\nregistryBurst: 2\nserializeImagePulls: false\n".into();
    const PODS: usize = 5;
    for i in 0..PODS {
        env.write_manifest(&format!("q{i}.yaml"), &pull_pod(&format!("q{i}"), &image));
    }
    env.start_kubelet();
    // Pods refused a token show ErrImagePull with upstream's message, then back off and run.
    for i in 0..PODS {
        env.wait_pod(
            &format!("q{i}"),
            Duration::from_secs(120),
            "Running after its pull",
            |p| (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(()),
        );
    }
    let log = env.kubelet_log();
    let throttled = event_lines(&log, "Failed", "pull QPS exceeded");
    let backoffs = event_lines(&log, "BackOff", "Back-off pulling image");
    let pulled = event_lines(&log, "Pulled", "Successfully pulled image");
    eprintln!("{throttled} throttled pulls, {backoffs} back-offs, {pulled} successful pulls");
    // All five ask within well under a second: the bucket's 2 tokens (and at most one refilled)
    // admit at most 3, so at least 2 are refused.
    assert!(
        throttled >= 2,
        "expected pulls refused with \"pull QPS exceeded\":\n{}",
        tail(&log, 60)
    );
    assert!(
        log.lines().any(|l| l.contains("event occurred")
            && l.contains("Failed to pull image")
            && l.contains(&image)
            && l.contains("pull QPS exceeded")),
        "upstream's message names the image:\n{}",
        tail(&log, 60)
    );
    assert_eq!(pulled, PODS, "every pod pulled once in the end");
}

#[tokio::test]
async fn max_parallel_image_pulls_bounds_concurrent_pulls() {
    let reg = Registry::up("par");
    const PODS: usize = 5;
    const MAX: i64 = 2;
    let images: Vec<String> = (0..PODS)
        .map(|i| {
            reg.push(&format!("rk/p{i}:1"));
            reg.image(&format!("rk/p{i}:1"))
        })
        .collect();
    let mut env = Env::new(238);
    env.trust_registry(&reg);
    // No QPS limit, so only the parallel puller's bound applies.
    env.extra_config =
        format!("registryPullQPS: 0\nserializeImagePulls: false\nmaxParallelImagePulls: {MAX}\n");
    for (i, image) in images.iter().enumerate() {
        env.write_manifest(&format!("p{i}.yaml"), &pull_pod(&format!("p{i}"), image));
    }
    env.start_kubelet();
    for i in 0..PODS {
        env.wait_running(&format!("p{i}"));
    }
    // "pulling image" is logged once a pull holds its slot, "pulled image" when it is done: the
    // number between them, in log order, is the number of pulls running at once.
    let log = env.kubelet_log();
    let (mut running, mut most, mut started) = (0i64, 0i64, 0usize);
    for l in log.lines() {
        if l.contains("] \"pulling image\" pod=") {
            running += 1;
            started += 1;
            most = most.max(running);
        } else if l.contains("] \"pulled image\" image=") {
            running -= 1;
        }
    }
    eprintln!("{started} pulls, at most {most} at once (maxParallelImagePulls {MAX})");
    assert_eq!(started, PODS, "one pull per pod:\n{}", tail(&log, 60));
    assert!(
        most <= MAX,
        "{most} pulls ran at once, more than maxParallelImagePulls {MAX}:\n{}",
        tail(&log, 80)
    );
}
