//! Lifecycle hooks and the active deadline against a real containerd. Hooks are observed by a
//! server pod (busybox httpd -vv logs every URL it is asked for).

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::Pod;

/// A web server that logs each request's URL and answers 200 for the given paths.
const SERVER: &str = "mkdir -p /www; for p in post-http pre-http pre-exec; do echo ok > /www/$p; done; exec httpd -f -vv -p 8080 -h /www";

fn server_log(env: &Env, pod: &Pod) -> String {
    let dir = env.logs.join(format!(
        "default_{}_{}/main/0.log",
        pod.metadata.name.as_deref().unwrap(),
        uid(pod)
    ));
    std::fs::read_to_string(dir).unwrap_or_default()
}

fn with_lifecycle(name: &str, script: &str, grace: u32, lifecycle: &str) -> String {
    simple_pod(name, "Always", script).replace(
        "terminationGracePeriodSeconds: 2",
        &format!("terminationGracePeriodSeconds: {grace}"),
    ) + lifecycle
}

#[tokio::test]
async fn hooks_run_and_are_observed_by_a_server() {
    let mut env = Env::new(134);
    env.start_kubelet();
    env.write_manifest("server.yaml", &simple_pod("server", "Always", SERVER));
    let server = env.wait_running("server");
    let ip = server.status.as_ref().unwrap().pod_ip.clone().unwrap();

    // postStart: an exec hook that takes 3 s (the container is not ready before it is done) and
    // an httpGet one in a second pod; preStop: exec and httpGet.
    env.write_manifest(
        "client.yaml",
        &with_lifecycle(
            "client",
            SLEEPER,
            120,
            &format!(
                r#"    lifecycle:
      postStart:
        exec: {{command: ["sh", "-c", "sleep 3; touch /tmp/post-start-done"]}}
      preStop:
        exec: {{command: ["wget", "-q", "-O", "/dev/null", "http://{ip}:8080/pre-exec"]}}
"#
            ),
        ),
    );
    env.write_manifest(
        "webhooks.yaml",
        &with_lifecycle(
            "webhooks",
            SLEEPER,
            120,
            &format!(
                r#"    lifecycle:
      postStart:
        httpGet: {{host: "{ip}", port: 8080, path: /post-http}}
      preStop:
        httpGet: {{host: "{ip}", port: 8080, path: /pre-http}}
"#
            ),
        ),
    );
    let client = env.wait_pod("client", Duration::from_secs(30), "client running", |p| {
        let cs = find_container_status(p, "main")?;
        cs.state.as_ref()?.running.as_ref()?;
        Some(p.clone())
    });
    // The status says running only once the hook finished.
    let (code, _) = exec_in(
        &env,
        &client,
        "main",
        &["test", "-f", "/tmp/post-start-done"],
    )
    .await;
    assert_eq!(code, 0, "running before the postStart hook finished");
    env.wait_running("webhooks");
    assert!(
        server_log(&env, &server).contains("url:/post-http"),
        "{}",
        server_log(&env, &server)
    );

    // Removing the pods runs their preStop hooks before the containers stop.
    env.remove_manifest("client.yaml");
    env.remove_manifest("webhooks.yaml");
    // The hooks succeed and SLEEPER exits on SIGTERM, so the pods stop in about a second, not
    // at the end of their 120 s grace period. The bound is half that grace, far above the real
    // figure, so a loaded machine does not trip it.
    wait_until(
        Duration::from_secs(60),
        "hooked pods gone before half their 120 s grace",
        || (env.pod("client").is_none() && env.pod("webhooks").is_none()).then_some(()),
    );
    let log = server_log(&env, &server);
    assert!(log.contains("url:/pre-exec"), "{log}");
    assert!(log.contains("url:/pre-http"), "{log}");
    assert!(!env.kubelet_log().contains("FailedPreStopHook"));
}

#[tokio::test]
async fn failing_post_start_hook_kills_the_container() {
    let mut env = Env::new(135);
    env.start_kubelet();
    env.write_manifest(
        "bad.yaml",
        &with_lifecycle(
            "bad",
            SLEEPER,
            2,
            r#"    lifecycle:
      postStart:
        exec: {command: ["sh", "-c", "exit 3"]}
"#,
        ),
    );
    // It keeps failing: never ready, and waits with upstream's reasons between attempts:
    // PostStartHookError (with the hook's failure as the message) after a failed start, then
    // CrashLoopBackOff until the next attempt. Each status seen is recorded.
    let seen = std::cell::RefCell::new(Vec::<(i32, String, String)>::new());
    env.wait_pod(
        "bad",
        Duration::from_secs(90),
        "restarted twice after failed hooks, both waiting reasons seen",
        |p| {
            let cs = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
            assert!(!cs.ready, "ready although its postStart hook fails: {cs:?}");
            if let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) {
                let r = w.reason.clone().unwrap_or_default();
                let m = w.message.clone().unwrap_or_default();
                let mut seen = seen.borrow_mut();
                if !seen.iter().any(|(_, sr, _)| *sr == r) {
                    seen.push((cs.restart_count, r, m));
                }
            }
            let has = |r: &str| seen.borrow().iter().any(|(_, sr, _)| sr == r);
            (cs.restart_count >= 2 && has("PostStartHookError") && has("CrashLoopBackOff"))
                .then_some(())
        },
    );
    let seen = seen.into_inner();
    let hook = seen
        .iter()
        .find(|(_, r, _)| r == "PostStartHookError")
        .unwrap();
    assert!(
        hook.2.contains("Exec lifecycle hook") && hook.2.contains("exit 3"),
        "{seen:?}"
    );
    let backoff = seen
        .iter()
        .find(|(_, r, _)| r == "CrashLoopBackOff")
        .unwrap();
    assert!(backoff.2.contains("back-off"), "{seen:?}");

    // A postStart hook that never ends does not hold up the pod's removal: the termination
    // stops the sync waiting on it (upstream cancels the sync's context; its 1.20 killed the
    // pod beside the sync), rather than waiting out the hook's 2 minutes.
    env.write_manifest(
        "hung.yaml",
        &with_lifecycle(
            "hung",
            SLEEPER,
            2,
            r#"    lifecycle:
      postStart:
        exec: {command: ["sleep", "600"]}
"#,
        ),
    );
    let uid = env.wait_pod("hung", Duration::from_secs(30), "seen", |p| {
        p.metadata.uid.clone()
    });
    let begin = Instant::now();
    while !env
        .containers_of(&uid)
        .await
        .iter()
        .any(|c| c.state == rkubelet_cri::api::ContainerState::ContainerRunning as i32)
    {
        assert!(
            begin.elapsed() < Duration::from_secs(60),
            "hung never started"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Its hook runs now (the pod stays not ready while it does).
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.remove_manifest("hung.yaml");
    let removed = Instant::now();
    let what = "hung still there after its manifest went";
    env.wait_runtime_empty(&uid, removed, Duration::from_secs(40), what)
        .await;
    assert!(env.kubelet_log().contains("its sync stopped"));
}

#[tokio::test]
async fn active_deadline_fails_the_pod() {
    let mut env = Env::new(136);
    env.start_kubelet();
    let manifest = simple_pod("deadline", "Always", SLEEPER)
        .replace("spec:\n", "spec:\n  activeDeadlineSeconds: 4\n");
    env.write_manifest("deadline.yaml", &manifest);
    let started = Instant::now();
    env.wait_running("deadline");
    let p = env.wait_pod("deadline", Duration::from_secs(60), "phase Failed", |p| {
        let st = p.status.clone()?;
        (st.phase.as_deref() == Some("Failed")).then_some(p.clone())
    });
    let took = started.elapsed();
    let st = p.status.clone().unwrap();
    assert_eq!(st.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(
        st.message.as_deref(),
        Some("Pod was active on the node longer than the specified deadline")
    );
    // Not before the deadline; and at it, not at the next periodic resync (syncFrequency is
    // 1 min here): the upper bound sits halfway, far above the ~4 s it takes.
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(30),
        "{took:?}"
    );
    // Its containers are stopped and it is never started again.
    let u = uid(&p);
    let begin = Instant::now();
    loop {
        let running = env
            .containers_of(&u)
            .await
            .into_iter()
            .any(|c| c.state == rkubelet_cri::api::ContainerState::ContainerRunning as i32);
        if !running {
            break;
        }
        // SLEEPER stops on SIGTERM at once; the bound only catches containers left running.
        assert!(begin.elapsed() < Duration::from_secs(30), "still running");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Failed is final: nothing is started again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(env
        .containers_of(&u)
        .await
        .iter()
        .all(|c| c.state != rkubelet_cri::api::ContainerState::ContainerRunning as i32));
}
