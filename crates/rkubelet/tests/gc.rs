//! Image and container garbage collection against a real containerd (upstream
//! `image_gc_manager.go`, `kuberuntime_gc.go`): thresholds forced low so image GC must act at
//! once, rkubelet restarted between policies so each collection's first pass is what is
//! checked (the periods, 5 min and 1 min, are upstream's and not shortened for tests).

mod common;

use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;
use rkubelet_cri::api;

const ENTRYPOINT: &str = "rkubelet.local/busybox-entrypoint:1.35";
const NONROOT: &str = "rkubelet.local/busybox-nonroot:1.35";
const PAUSE: &str = "rkubelet.local/pause:3.9";

async fn present(env: &Env, image: &str) -> bool {
    env.image_status(image).await.is_some()
}

/// Image GC: with imagefs usage above a 1% high threshold, unused images go (least recently
/// used first) while the image a running container uses and the sandbox image stay, and the
/// Node gets `FreeDiskSpaceFailed` when the low threshold (0%) cannot be reached; after a
/// restart with the default `imageMinimumGCAge` (2m), images re-imported meanwhile are young
/// again and nothing is removed.
#[tokio::test(flavor = "multi_thread")]
async fn image_gc_removes_unused_images_and_keeps_used_and_young_ones() {
    let cp = ControlPlane::up("imagegc");
    let mut env = Env::new(233);
    for img in [IMAGE, ENTRYPOINT, NONROOT, PAUSE] {
        assert!(present(&env, img).await, "{img} imported by containerd.sh");
    }
    // Defaults first: the machine's imagefs is nowhere near 85%, nothing is removed.
    env.join(&cp, &[]);
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod("user", &env.node, SLEEPER, 1, "")),
    );
    cp.wait_running("user");
    for img in [IMAGE, ENTRYPOINT, NONROOT, PAUSE] {
        assert!(
            present(&env, img).await,
            "{img} kept under default thresholds"
        );
    }
    env.stop_kubelet(Signal::SIGTERM);

    // Forced: usage >= 1% triggers, free down to 0% (impossible), no minimum age. The zero age
    // comes as a flag: `imageMinimumGCAge: 0s` in a file means "unset" (the 2m default), as
    // upstream's v1beta1 defaulting has it; flags are not defaulted.
    env.extra_config = "imageGCHighThresholdPercent: 1\nimageGCLowThresholdPercent: 0\n".into();
    env.join(&cp, &["--minimum-image-ttl-duration=0s"]);
    wait_async(Duration::from_secs(60), "unused images removed", || async {
        !present(&env, ENTRYPOINT).await && !present(&env, NONROOT).await
    })
    .await;
    assert!(
        present(&env, IMAGE).await,
        "the running container's image stays"
    );
    assert!(present(&env, PAUSE).await, "the sandbox image stays");
    let failed = wait_until(
        Duration::from_secs(30),
        "FreeDiskSpaceFailed on the Node",
        || {
            cp.node_events(&env.node)
                .into_iter()
                .find(|(r, _)| r == "FreeDiskSpaceFailed")
        },
    );
    assert!(
        failed
            .1
            .starts_with("Failed to garbage collect required amount of images. Attempted to free "),
        "{failed:?}"
    );
    let p = cp.get_json(&["pod", "user"]).unwrap();
    assert!(
        p["status"]["containerStatuses"][0]["state"]["running"].is_object(),
        "the pod using the kept image still runs"
    );
    env.stop_kubelet(Signal::SIGTERM);

    // Restart: images the runtime gets meanwhile are first detected now, so the default
    // imageMinimumGCAge protects them on the first pass (upstream re-detects at start).
    let out = std::process::Command::new(repo_root().join("hack/images.sh"))
        .arg("import")
        .arg(&env.sock)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(present(&env, ENTRYPOINT).await && present(&env, NONROOT).await);
    let passes = |env: &Env| {
        env.kubelet_log()
            .matches("image garbage collection failed")
            .count()
    };
    let before = passes(&env);
    let removed_before = env.kubelet_log().matches("removing image").count();
    assert!(removed_before >= 2, "the forced run removed images");
    env.extra_config = "imageGCHighThresholdPercent: 1\nimageGCLowThresholdPercent: 0\n".into();
    env.join(&cp, &[]);
    wait_until(
        Duration::from_secs(60),
        "first image GC pass after restart",
        || (passes(&env) > before).then_some(()),
    );
    for img in [IMAGE, ENTRYPOINT, NONROOT, PAUSE] {
        assert!(
            present(&env, img).await,
            "{img} kept: in use or younger than 2m"
        );
    }
    assert_eq!(
        env.kubelet_log().matches("removing image").count(),
        removed_before,
        "nothing removed on the first pass after the restart"
    );
    cp.kubectl(&["delete", "pod", "user", "--wait=false"]);
    wait_until(Duration::from_secs(60), "user pod gone", || {
        cp.get_json(&["pod", "user"]).is_none().then_some(())
    });
    env.stop_kubelet(Signal::SIGTERM);
}

/// A pod whose container fails twice, then succeeds: three dead instances of one container.
fn retry_pod(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 1
  volumes:
  - name: state
    emptyDir: {{}}
  containers:
  - name: c
    image: {IMAGE}
    volumeMounts:
    - {{name: state, mountPath: /state}}
    command: ["sh", "-c", "n=$(cat /state/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /state/n; echo run $n; [ $n -ge 3 ]"]
"#
    )
}

fn restart_counts(cs: &[api::Container]) -> Vec<String> {
    let mut v: Vec<String> = cs
        .iter()
        .map(|c| {
            c.annotations
                .get("io.kubernetes.container.restartCount")
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    v.sort();
    v
}

fn pod_restart_count(env: &Env, name: &str) -> Option<i32> {
    let p = env.pod(name)?;
    find_container_status(&p, "c").map(|c| c.restart_count)
}

/// Container GC: `--maximum-dead-containers-per-container` and `--maximum-dead-containers`
/// (deprecated flags, upstream's messages) keep the newest dead instances, never the newest one
/// of a container (its status and logs come from it); log directories of deleted pods and
/// dangling log symlinks go; a deleted pod's sandboxes and logs go with it.
#[tokio::test(flavor = "multi_thread")]
async fn container_gc_honours_its_limits_and_removes_what_deleted_pods_left() {
    let mut env = Env::new(235);
    env.write_manifest("a.yaml", &retry_pod("retry-a"));
    env.write_manifest("b.yaml", &retry_pod("retry-b"));
    env.start_kubelet_with(&["--maximum-dead-containers-per-container=10"]);
    let mut uids = Vec::new();
    for name in ["retry-a", "retry-b"] {
        let p = env.wait_pod(name, Duration::from_secs(120), "Succeeded", |p| {
            (p.status.as_ref()?.phase.as_deref()? == "Succeeded").then(|| p.clone())
        });
        uids.push((name, uid(&p)));
    }
    for (name, uid) in &uids {
        let cs = env.containers_of(uid).await;
        assert_eq!(
            restart_counts(&cs),
            ["0", "1", "2"],
            "{name}: three instances"
        );
        assert_eq!(pod_restart_count(&env, name), Some(2));
    }
    let log = env.kubelet_log();
    assert!(
        log.contains("Flag --maximum-dead-containers-per-container has been deprecated, Use --eviction-hard or --eviction-soft instead. Will be removed in a future version."),
        "upstream's deprecation message: {}",
        tail(&log, 20)
    );
    env.stop_kubelet(Signal::SIGTERM);

    // What deleted pods left: a log directory and a dangling /var/log/containers symlink.
    let ghost = env
        .logs
        .join("default_ghost_6f1f2c3e-0000-4000-8000-00000000dead");
    std::fs::create_dir_all(ghost.join("c")).unwrap();
    std::fs::write(ghost.join("c/0.log"), "old\n").unwrap();
    let link = env
        .container_logs_dir()
        .join(format!("ghost_default_c-{}.log", "ab".repeat(32)));
    std::fs::create_dir_all(env.container_logs_dir()).unwrap();
    std::os::unix::fs::symlink(ghost.join("c/1.log"), &link).unwrap();

    env.start_kubelet_with(&["--maximum-dead-containers-per-container=2"]);
    for (name, uid) in &uids {
        wait_async(Duration::from_secs(30), "two instances left", || async {
            env.containers_of(uid).await.len() == 2
        })
        .await;
        let cs = env.containers_of(uid).await;
        assert_eq!(
            restart_counts(&cs),
            ["1", "2"],
            "{name}: the newest two stay"
        );
    }
    wait_until(
        Duration::from_secs(30),
        "ghost log dir and symlink removed",
        || (!ghost.exists() && std::fs::symlink_metadata(&link).is_err()).then_some(()),
    );
    for (name, _) in &uids {
        assert_eq!(pod_restart_count(&env, name), Some(2), "{name}");
        assert_eq!(
            env.pod(name).unwrap().status.unwrap().phase.as_deref(),
            Some("Succeeded")
        );
    }
    env.stop_kubelet(Signal::SIGTERM);

    // Two containers (one per pod) at most in all: an equal share of one each, and never the
    // newest instance of a container.
    env.start_kubelet_with(&[
        "--maximum-dead-containers-per-container=5",
        "--maximum-dead-containers=1",
    ]);
    for (name, uid) in &uids {
        wait_async(Duration::from_secs(30), "one instance left", || async {
            env.containers_of(uid).await.len() == 1
        })
        .await;
        let cs = env.containers_of(uid).await;
        assert_eq!(restart_counts(&cs), ["2"], "{name}: the newest stays");
        assert_eq!(
            env.sandboxes_of(uid).await.len(),
            1,
            "{name}: its sandbox stays"
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (name, uid) in &uids {
        assert_eq!(
            env.containers_of(uid).await.len(),
            1,
            "{name}: floor of one"
        );
        // The restarted kubelet's first status for the pod is built on its own task.
        wait_until(
            Duration::from_secs(20),
            "restart count after restart",
            || (pod_restart_count(&env, name) == Some(2)).then_some(()),
        );
    }

    // A deleted pod: containers, sandboxes and its log directory go.
    let (name_a, uid_a) = uids[0].clone();
    let log_dir = env
        .logs
        .join(format!("default_{name_a}-{}_{uid_a}", env.node));
    assert!(log_dir.exists(), "{}", log_dir.display());
    env.remove_manifest("a.yaml");
    wait_async(
        Duration::from_secs(60),
        "deleted pod removed from the runtime",
        || async {
            env.containers_of(&uid_a).await.is_empty() && env.sandboxes_of(&uid_a).await.is_empty()
        },
    )
    .await;
    wait_until(Duration::from_secs(30), "its log directory removed", || {
        (!log_dir.exists()).then_some(())
    });
    let (_, uid_b) = &uids[1];
    assert_eq!(
        env.containers_of(uid_b).await.len(),
        1,
        "the other pod keeps its own"
    );
    env.stop_kubelet(Signal::SIGTERM);
}
