//! End-to-end behaviour of static pods against a real private containerd.

mod common;

use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;

const WEB: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: rkubelet.local/busybox:1.35
    command: ["sh", "-c", "mkdir -p /www && echo hello-from-rkubelet > /www/index.html && exec httpd -f -p 80 -h /www"]
    ports:
    - containerPort: 80
"#;

#[tokio::test]
async fn static_pod_runs_serves_http_and_carries_upstream_labels() {
    let mut env = Env::new(101);
    env.start_kubelet();
    env.write_manifest("web.yaml", WEB);
    let pod = env.wait_running("web");
    let st = pod.status.as_ref().unwrap();
    let ip = st.pod_ip.clone().expect("pod IP");
    assert!(ip.starts_with(&format!("10.88.{}.", env.index)), "{ip}");
    assert_eq!(st.qos_class.as_deref(), Some("BestEffort"));
    let conds: Vec<_> = st
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    for want in [
        ("PodReadyToStartContainers", "True"),
        ("Initialized", "True"),
        ("Ready", "True"),
        ("ContainersReady", "True"),
    ] {
        assert!(conds.contains(&want), "{want:?} not in {conds:?}");
    }
    let ann = pod.metadata.annotations.as_ref().unwrap();
    assert_eq!(ann["kubernetes.io/config.source"], "file");
    assert_eq!(ann["kubernetes.io/config.hash"], uid(&pod));

    let (code, body) = wait_until(Duration::from_secs(10), "httpd answering", || {
        http_get(&ip, 80, "/index.html")
            .ok()
            .filter(|(c, _)| *c == 200)
    });
    assert_eq!((code, body.trim()), (200, "hello-from-rkubelet"));

    // Upstream CRI labels and annotations, so other tools and a restarted kubelet recognise them.
    let containers = env.containers_of(&uid(&pod)).await;
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(
        c.labels["io.kubernetes.pod.name"],
        format!("web-{}", env.node)
    );
    assert_eq!(c.labels["io.kubernetes.pod.namespace"], "default");
    assert_eq!(c.labels["io.kubernetes.container.name"], "httpd");
    assert_eq!(c.annotations["io.kubernetes.container.restartCount"], "0");
    assert!(!c.annotations["io.kubernetes.container.hash"].is_empty());
    let cs = container_status(&pod, "httpd");
    assert_eq!(
        cs.container_id.as_deref(),
        Some(format!("containerd://{}", c.id).as_str())
    );
    assert!(cs.image_id.starts_with("sha256:"), "{}", cs.image_id);

    // Container log where upstream puts it.
    let log_dir = env
        .logs
        .join(format!("default_web-{}_{}", env.node, uid(&pod)));
    assert!(
        log_dir.join("httpd/0.log").is_file(),
        "no log under {}",
        log_dir.display()
    );
}

#[tokio::test]
async fn two_container_pod_shares_the_network() {
    let mut env = Env::new(102);
    env.start_kubelet();
    env.write_manifest(
        "pair.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: pair
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: server
    image: rkubelet.local/busybox:1.35
    command: ["sh", "-c", "mkdir -p /w && echo from-server > /w/x && exec httpd -f -p 8080 -h /w"]
  - name: client
    image: rkubelet.local/busybox:1.35
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do timeout 3 wget -q -O- http://127.0.0.1:8080/x; sleep 1; done"]
"#,
    );
    let pod = env.wait_running("pair");
    let names: Vec<_> = pod
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(names, vec!["server", "client"]);
    let log = env.logs.join(format!(
        "default_pair-{}_{}/client/0.log",
        env.node,
        uid(&pod)
    ));
    wait_until(
        Duration::from_secs(15),
        "client reaching server over the pod's loopback",
        || {
            std::fs::read_to_string(&log)
                .ok()
                .filter(|s| s.contains("from-server"))
        },
    );
    assert_eq!(env.sandboxes_of(&uid(&pod)).await.len(), 1);
}

fn started_at(
    pod: &k8s_openapi::api::core::v1::Pod,
    name: &str,
) -> Option<k8s_openapi::jiff::Timestamp> {
    let cs = container_status(pod, name);
    cs.state
        .as_ref()?
        .running
        .as_ref()?
        .started_at
        .as_ref()
        .map(|t| t.0)
}

#[tokio::test]
async fn restart_policies_and_crash_loop_backoff() {
    let mut env = Env::new(103);
    env.start_kubelet();
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 4;
    env.write_manifest(
        "always.yaml",
        &simple_pod("always", "Always", "sleep 1; exit 1"),
    );
    env.write_manifest("never.yaml", &simple_pod("never", "Never", "exit 1"));
    // Fails until `deadline`, then succeeds: OnFailure restarts it only while it fails.
    env.write_manifest(
        "onfailure.yaml",
        &simple_pod(
            "onfailure",
            "OnFailure",
            &format!("[ $(date +%s) -ge {deadline} ] && exit 0 || exit 1"),
        ),
    );

    // Never: not restarted, the pod turns Failed.
    let never = env.wait_pod("never", Duration::from_secs(30), "phase Failed", |p| {
        (p.status.as_ref()?.phase.as_deref() == Some("Failed")).then(|| p.clone())
    });
    let cs = container_status(&never, "main");
    assert_eq!(cs.restart_count, 0);
    let t = cs
        .state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .expect("terminated state");
    assert_eq!((t.exit_code, t.reason.as_deref()), (1, Some("Error")));
    assert_eq!(
        env.containers_of(&uid(&never)).await.len(),
        1,
        "Never must not start another instance"
    );

    // OnFailure: restarted while failing, then Succeeded and left alone.
    let onf = env.wait_pod(
        "onfailure",
        Duration::from_secs(40),
        "phase Succeeded",
        |p| (p.status.as_ref()?.phase.as_deref() == Some("Succeeded")).then(|| p.clone()),
    );
    let cs = container_status(&onf, "main");
    assert!(cs.restart_count >= 1, "restartCount {}", cs.restart_count);
    assert_eq!(
        cs.state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        0
    );

    // Always: restarted with growing backoff; waiting reason CrashLoopBackOff in between.
    let mut starts = Vec::new();
    let mut saw_backoff = false;
    let begin = Instant::now();
    // Three starts take at least 1 + 10 + 1 + 20 s; 90 s leaves room for a loaded machine.
    while starts.len() < 3 && begin.elapsed() < Duration::from_secs(90) {
        if let Some(p) = env.pod("always") {
            let cs = container_status(&p, "main");
            if let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) {
                if w.reason.as_deref() == Some("CrashLoopBackOff") {
                    saw_backoff = true;
                    assert!(
                        w.message.as_deref().unwrap_or("").contains("back-off"),
                        "{w:?}"
                    );
                    assert!(cs
                        .last_state
                        .as_ref()
                        .and_then(|l| l.terminated.as_ref())
                        .is_some());
                }
            }
            if let Some(t) = started_at(&p, "main") {
                if starts.last().map(|(_, l)| *l != t).unwrap_or(true) {
                    starts.push((cs.restart_count, t));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(saw_backoff, "never saw CrashLoopBackOff; starts {starts:?}");
    assert!(
        starts.len() >= 3,
        "expected 3 starts within 90 s, got {starts:?}\n{}",
        tail(&env.kubelet_log(), 30)
    );
    let gap1 = starts[1].1.as_second() - starts[0].1.as_second();
    let gap2 = starts[2].1.as_second() - starts[1].1.as_second();
    // The container runs ~1 s; backoff 10 s then 20 s.
    assert!(
        gap1 >= 10 && gap2 >= 20 && gap2 > gap1,
        "gaps {gap1}s, {gap2}s: {starts:?}"
    );
    assert!(
        starts[2].0 > starts[1].0 && starts[1].0 > starts[0].0,
        "{starts:?}"
    );
}

#[tokio::test]
async fn edit_replaces_and_removal_cleans_up() {
    let mut env = Env::new(104);
    env.start_kubelet();
    env.write_manifest("app.yaml", &simple_pod("app", "Always", SLEEPER));
    let first = env.wait_running("app");
    env.write_manifest(
        "app.yaml",
        &simple_pod("app", "Always", &format!("echo v2; {SLEEPER}")),
    );
    let second = env.wait_pod("app", Duration::from_secs(30), "new UID running", |p| {
        (uid(p) != uid(&first) && p.status.as_ref()?.phase.as_deref() == Some("Running"))
            .then(|| p.clone())
    });
    assert_eq!(env.pods().len(), 1, "old pod still listed");
    // The old pod stops in well under a second (SLEEPER exits on SIGTERM); the bound only
    // catches a pod left behind, so it is generous for a loaded machine.
    let begin = Instant::now();
    while !(env.containers_of(&uid(&first)).await.is_empty()
        && env.sandboxes_of(&uid(&first)).await.is_empty())
    {
        assert!(
            begin.elapsed() < Duration::from_secs(30),
            "old pod's containers or sandbox left"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        env.containers_of(&uid(&first)).await.is_empty(),
        "old containers left"
    );
    assert!(
        env.sandboxes_of(&uid(&first)).await.is_empty(),
        "old sandbox left"
    );
    assert_eq!(env.containers_of(&uid(&second)).await.len(), 1);

    env.remove_manifest("app.yaml");
    // As above: a bound for "never cleaned up", not a speed figure (bench/static-pods.sh).
    let begin = Instant::now();
    loop {
        if env.pods().is_empty()
            && env.all_containers().await.is_empty()
            && env.all_sandboxes().await.is_empty()
        {
            break;
        }
        assert!(
            begin.elapsed() < Duration::from_secs(60),
            "pod not cleaned up:\n{}",
            tail(&env.kubelet_log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pod_dir = env.root.join("pods").join(uid(&second));
    assert!(!pod_dir.exists(), "{} left behind", pod_dir.display());
    let log_dir = env
        .logs
        .join(format!("default_app-{}_{}", env.node, uid(&second)));
    assert!(!log_dir.exists(), "{} left behind", log_dir.display());
    // Each pod was torn down once: one StopPodSandbox and one RemovePodSandbox per pod, even
    // after housekeeping (every 2 s) had its look; a second teardown would call them again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for op in ["stop_podsandbox", "remove_podsandbox"] {
        let calls = env.metric(
            "kubelet_runtime_operations_total",
            Some(("operation_type", op)),
        );
        assert_eq!(calls, Some(2.0), "{op}\n{}", tail(&env.kubelet_log(), 20));
    }
    // Who tore them down (the pods' own workers, not housekeeping finding orphans) shows only
    // in the log.
    let log = env.kubelet_log();
    assert!(!log.contains("no source wants"), "{}", tail(&log, 20));
}

#[tokio::test]
async fn broken_manifests_do_not_touch_good_pods() {
    let mut env = Env::new(105);
    env.start_kubelet();
    env.write_manifest("good.yaml", &simple_pod("good", "Always", SLEEPER));
    env.write_manifest(
        "syntax.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: [unclosed\n",
    );
    env.write_manifest(
        "invalid.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: noimage}\nspec:\n  containers:\n  - name: c\n",
    );
    env.write_manifest(
        "wrongtype.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: wt}\nspec:\n  containers: 7\n",
    );
    let good = env.wait_running("good");
    // Each bad file gets its own error line naming the file and what is wrong with it (the
    // file's "read static pod manifest" success line would not do: only good.yaml parses).
    let syntax = wait_manifest_error(&env, "syntax.yaml", 1);
    assert!(syntax.contains("not valid YAML or JSON"), "{syntax}");
    let invalid = wait_manifest_error(&env, "invalid.yaml", 1);
    assert!(
        invalid.contains("spec.containers[0].image: required"),
        "{invalid}"
    );
    let wrongtype = wait_manifest_error(&env, "wrongtype.yaml", 1);
    assert!(
        wrongtype.contains("cannot decode as a v1 Pod at spec.containers"),
        "the decode error should name the field: {wrongtype}"
    );
    assert_eq!(env.pods().len(), 1);

    // A half-written edit of the good file keeps the running pod (it is not restarted).
    env.write_manifest(
        "good.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: good\n",
    );
    // Evidence the kubelet read the broken file and kept what it had from it...
    let kept = wait_manifest_error(&env, "good.yaml", 1);
    assert!(kept.contains("kept_previous_pods=1"), "{kept}");
    // ...and that the pods it sent on after that have been acted on: a manifest written later
    // runs, so the update carrying the broken good.yaml was processed before it.
    env.write_manifest("later.yaml", &simple_pod("later", "Always", SLEEPER));
    let later = env.wait_running("later");
    // Then later.yaml goes and its pod is torn down. The sync loop handles updates in order, so
    // a removal of the good pod sent with the broken good.yaml was handled before this one, and
    // its kill, started earlier, has had longer than later's to reach the runtime. (/pods lists
    // a pod until it has terminated, so the good pod being listed proves nothing on its own.)
    // The later pod's removal record also shows that the record looked for below is written.
    env.remove_manifest("later.yaml");
    wait_async(Duration::from_secs(60), "later pod torn down", || async {
        env.containers_of(&uid(&later)).await.is_empty()
            && env.sandboxes_of(&uid(&later)).await.is_empty()
    })
    .await;
    let records = log_records(&env.kubelet_log());
    assert!(
        records
            .iter()
            .any(|r| r.contains("pod removed") && r.contains(&uid(&later))),
        "the later pod's removal was not recorded:\n{}",
        tail(&env.kubelet_log(), 20)
    );
    let removed = records
        .into_iter()
        .find(|r| r.contains("pod removed") && r.contains(&uid(&good)));
    assert_eq!(removed, None, "the good pod was dropped");
    let running: Vec<_> = env
        .containers_of(&uid(&good))
        .await
        .into_iter()
        .filter(|c| c.state == rkubelet_cri::api::ContainerState::ContainerRunning as i32)
        .map(|c| c.id)
        .collect();
    assert_eq!(
        running.len(),
        1,
        "the good pod's container was stopped by the half-written edit"
    );
    let still = env.pod("good").expect("good pod still there");
    assert_eq!(uid(&still), uid(&good));
    let cs = container_status(&still, "main");
    assert_eq!(cs.restart_count, 0);
    assert_eq!(
        cs.container_id,
        container_status(&good, "main").container_id
    );
    assert!(
        cs.state.as_ref().is_some_and(|s| s.running.is_some()),
        "{cs:?}"
    );
    assert!(env.kubelet_alive());
}

/// Waits until rkubelet has logged an "invalid static pod manifest" error for `file` `n` times;
/// returns the `n`th such record (a record runs on over the lines that follow it when the
/// error quotes the bad text). Static pods have no API object to carry events, so the log is
/// where upstream reports these too.
fn wait_manifest_error(env: &Env, file: &str, n: usize) -> String {
    let path = env.manifests.join(file).display().to_string();
    wait_until(
        Duration::from_secs(20),
        &format!("error for {file} logged"),
        || {
            log_records(&env.kubelet_log())
                .into_iter()
                .filter(|r| {
                    r.contains("invalid static pod manifest")
                        && r.contains(&format!("file=\"{path}\""))
                })
                .nth(n - 1)
        },
    )
}

/// The log split into records: each starts with a line that starts with a timestamp.
fn log_records(log: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in log.lines() {
        let starts_record = common::klog::header(line).is_some();
        match out.last_mut() {
            Some(r) if !starts_record => {
                r.push('\n');
                r.push_str(line);
            }
            _ => out.push(line.to_string()),
        }
    }
    out
}

#[tokio::test]
async fn sigkill_and_restart_adopts_containers_sigterm_leaves_them_running() {
    let mut env = Env::new(106);
    env.start_kubelet();
    env.write_manifest("a.yaml", &simple_pod("a", "Always", SLEEPER));
    env.write_manifest("web.yaml", WEB);
    let a = env.wait_running("a");
    let web = env.wait_running("web");
    let before: Vec<String> = {
        let mut v: Vec<_> = env
            .all_containers()
            .await
            .into_iter()
            .map(|c| c.id)
            .collect();
        v.sort();
        v
    };
    assert_eq!(before.len(), 2);

    env.stop_kubelet(Signal::SIGKILL);
    env.start_kubelet();
    // Give the new process time to sync both pods (and to do damage if it would).
    let a2 = env.wait_running("a");
    env.wait_running("web");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut after: Vec<_> = env
        .all_containers()
        .await
        .into_iter()
        .map(|c| c.id)
        .collect();
    after.sort();
    assert_eq!(before, after, "a container was restarted or added");
    assert_eq!(uid(&a2), uid(&a));
    assert_eq!(
        container_status(&env.pod("a").unwrap(), "main").restart_count,
        0
    );
    assert_eq!(env.all_sandboxes().await.len(), 2);

    // SIGTERM: rkubelet exits cleanly, pods keep running.
    let st = env.stop_kubelet(Signal::SIGTERM);
    assert!(st.success(), "exit status {st:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let running = env
        .all_containers()
        .await
        .into_iter()
        .filter(|c| c.state == rkubelet_cri::api::ContainerState::ContainerRunning as i32)
        .count();
    assert_eq!(running, 2);
    let ip = web.status.unwrap().pod_ip.unwrap();
    assert_eq!(http_get(&ip, 80, "/index.html").unwrap().0, 200);
}

#[tokio::test]
async fn image_errors_use_upstream_reasons() {
    let mut env = Env::new(107);
    env.start_kubelet();
    env.write_manifest(
        "never.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: neverpull}\nspec:\n  containers:\n  - name: c\n    image: rkubelet.local/missing:1\n    imagePullPolicy: Never\n",
    );
    // Nothing listens on 127.0.0.1:1, so the pull fails at once.
    env.write_manifest(
        "pull.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: pullfail}\nspec:\n  containers:\n  - name: c\n    image: 127.0.0.1:1/nope:1\n",
    );
    let waiting_reason = |p: &k8s_openapi::api::core::v1::Pod| -> Option<(String, String)> {
        let w = find_container_status(p, "c")?
            .state
            .as_ref()?
            .waiting
            .clone()?;
        Some((w.reason.unwrap_or_default(), w.message.unwrap_or_default()))
    };
    let (reason, msg) = env.wait_pod(
        "neverpull",
        Duration::from_secs(20),
        "ErrImageNeverPull",
        |p| waiting_reason(p).filter(|(r, _)| r == "ErrImageNeverPull"),
    );
    assert_eq!(reason, "ErrImageNeverPull");
    assert!(
        msg.contains("rkubelet.local/missing:1") && msg.contains("Never"),
        "{msg}"
    );
    let (_, msg) = env.wait_pod("pullfail", Duration::from_secs(30), "ErrImagePull", |p| {
        waiting_reason(p).filter(|(r, _)| r == "ErrImagePull")
    });
    assert!(msg.contains("127.0.0.1:1/nope:1"), "{msg}");
    env.wait_pod(
        "pullfail",
        Duration::from_secs(30),
        "ImagePullBackOff",
        |p| waiting_reason(p).filter(|(r, _)| r == "ImagePullBackOff"),
    );
    let p = env.pod("pullfail").unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
}

#[tokio::test]
async fn waits_for_the_runtime_instead_of_exiting() {
    let mut env = Env::without_runtime(108);
    env.write_manifest("a.yaml", &simple_pod("a", "Always", SLEEPER));
    env.start_kubelet();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(env.kubelet_alive(), "rkubelet exited without a runtime");
    let log = env.kubelet_log();
    assert!(
        log.contains("container runtime is not available"),
        "{}",
        tail(&log, 10)
    );
    assert!(
        log.contains(&env.sock.display().to_string()),
        "message should name the socket"
    );
    env.up_runtime();
    env.wait_running("a");
}

#[test]
fn invalid_config_lists_every_error_and_exits() {
    let dir = std::env::temp_dir().join(format!("rkt-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("bad.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsyncFrequency: often\nhealthzPort: 99999\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkubelet"))
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success());
    let err =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        err.contains("syncFrequency") && err.contains("healthzPort") && err.contains("bad.yaml"),
        "{err}"
    );
}

#[tokio::test]
async fn manifest_readded_while_terminating_comes_back() {
    let mut env = Env::new(109);
    env.start_kubelet();
    // `sleep` as PID 1 ignores SIGTERM, so termination takes the whole 2 s grace period.
    let manifest = simple_pod("back", "Always", "sleep 3600");
    env.write_manifest("back.yaml", &manifest);
    let first = env.wait_running("back");
    env.remove_manifest("back.yaml");
    wait_until(Duration::from_secs(10), "removal noticed", || {
        env.kubelet_log().contains("pod removed").then_some(())
    });
    env.write_manifest("back.yaml", &manifest);
    // Same content, same UID: the pod must run again once the old instance is gone.
    let again = env.wait_pod(
        "back",
        Duration::from_secs(30),
        "running again with a new container",
        |p| {
            let cs = find_container_status(p, "main")?;
            let running = cs.state.as_ref()?.running.is_some();
            (running && cs.container_id != container_status(&first, "main").container_id)
                .then(|| p.clone())
        },
    );
    assert_eq!(uid(&again), uid(&first));
    assert_eq!(env.containers_of(&uid(&again)).await.len(), 1);
}

#[tokio::test]
async fn pods_beyond_max_pods_are_rejected_as_out_of_pods() {
    let mut env = Env::new(110);
    env.start_kubelet_with(&["--max-pods=1"]);
    env.write_manifest("a.yaml", &simple_pod("a", "Always", SLEEPER));
    env.wait_running("a");
    env.write_manifest("b.yaml", &simple_pod("b", "Always", SLEEPER));
    let b = env.wait_pod("b", Duration::from_secs(10), "rejected", |p| {
        (p.status.as_ref()?.reason.as_deref() == Some("OutOfpods")).then(|| p.clone())
    });
    let st = b.status.clone().unwrap();
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    assert!(st.message.unwrap().contains("capacity: 1"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        env.containers_of(&uid(&b)).await.is_empty(),
        "a rejected pod must not run"
    );
    env.remove_manifest("b.yaml");
    wait_until(
        Duration::from_secs(10),
        "rejected pod gone from /pods",
        || (env.pods().len() == 1).then_some(()),
    );
}

/// A one-container pod running `script` from `image` with the given imagePullPolicy.
fn pull_pod(name: &str, image: &str, policy: &str, script: &str) -> String {
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
    imagePullPolicy: {policy}
    command: ["sh", "-c", {script:?}]
"#
    )
}

#[tokio::test]
async fn image_pull_policies_pull_from_a_registry() {
    // Declared first, dropped last: the registry outlives containerd and rkubelet.
    let reg = Registry::up("pull");
    let pulled_digest = reg.push("rk/busybox:pulled");
    let old_digest = reg.push_image(
        "rkubelet.local/busybox-entrypoint:1.35",
        "rk/busybox:always",
    );
    let mut env = Env::new(111);
    env.trust_registry(&reg);
    let pulled = reg.image("rk/busybox:pulled");
    let always = reg.image("rk/busybox:always");
    let repo_digest = |d: &str| format!("{}@{d}", reg.image("rk/busybox"));
    // The pushed images are the imported busybox ones: remove those (and so their content) so
    // that pulls download and unpack layers instead of finding every blob already local.
    for image in [
        IMAGE,
        "rkubelet.local/busybox-entrypoint:1.35",
        "rkubelet.local/busybox-nonroot:1.35",
    ] {
        env.cri()
            .remove_image(rkubelet_cri::api::RemoveImageRequest {
                image: Some(rkubelet_cri::api::ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap();
        assert!(env.image_status(image).await.is_none(), "{image} removed");
    }
    assert!(
        env.image_status(&pulled).await.is_none(),
        "{pulled} must not be present before the kubelet pulls it"
    );

    // `:always` is present locally (busybox-entrypoint), then the tag moves in the registry to
    // another image (busybox-nonroot, which runs as uid 1000): only a real pull sees the new one.
    // The three images share no blob, so each pull below downloads its own config and layer.
    env.cri()
        .pull_image(rkubelet_cri::api::PullImageRequest {
            image: Some(rkubelet_cri::api::ImageSpec {
                image: always.clone(),
                ..Default::default()
            }),
            auth: None,
            sandbox_config: None,
        })
        .await
        .unwrap_or_else(|e| panic!("CRI pull of {always} from the test registry: {e}"));
    let local = env.image_status(&always).await.expect("pre-pulled image");
    assert_eq!(local.repo_digests, vec![repo_digest(&old_digest)]);
    let new_digest = reg.push_image("rkubelet.local/busybox-nonroot:1.35", "rk/busybox:always");
    assert_ne!(new_digest, old_digest);
    let always_resolves = reg.manifest_requests("rk/busybox:always");
    assert_eq!(always_resolves, 1, "{:#?}", reg.containerd_requests());
    assert_eq!(reg.manifest_requests("rk/busybox:pulled"), 0);

    // containerd's requests from here on are the kubelet's pulls.
    let pre = reg.containerd_requests().len();
    let downloaded = |blob: &str| {
        let get = format!("\"GET /v2/rk/busybox/blobs/{blob} HTTP/1.1\" 200 ");
        reg.containerd_requests()[pre..]
            .iter()
            .any(|l| l.contains(&get))
    };
    env.start_kubelet();
    env.write_manifest(
        "ifnotpresent.yaml",
        &pull_pod("ifnotpresent", &pulled, "IfNotPresent", SLEEPER),
    );
    env.write_manifest(
        "always.yaml",
        &pull_pod("always", &always, "Always", &format!("id -u; {SLEEPER}")),
    );

    // IfNotPresent, image absent: pulled from the registry, now in containerd.
    let pod = env.wait_running("ifnotpresent");
    let cs = container_status(&pod, "main");
    assert_eq!(cs.image, pulled);
    assert_eq!(cs.image_id, repo_digest(&pulled_digest));
    let img = env
        .image_status(&pulled)
        .await
        .expect("pulled image present in containerd");
    assert!(img.repo_tags.contains(&pulled), "{:?}", img.repo_tags);
    assert_eq!(img.repo_digests, vec![repo_digest(&pulled_digest)]);
    assert!(
        reg.manifest_requests("rk/busybox:pulled") >= 1,
        "{:#?}",
        reg.containerd_requests()
    );
    assert!(
        downloaded(&img.id),
        "config {} not downloaded: {:#?}",
        img.id,
        reg.containerd_requests()
    );

    // Always, image present: pulled again, and the container runs the registry's new image.
    let pod = env.wait_running("always");
    let cs = container_status(&pod, "main");
    assert_eq!(cs.image, always);
    assert_eq!(cs.image_id, repo_digest(&new_digest));
    let img = env.image_status(&always).await.expect(":always present");
    assert_eq!(img.repo_digests, vec![repo_digest(&new_digest)]);
    assert!(downloaded(&img.id), "config {} not downloaded", img.id);
    // Two configs and two layers, each once.
    let blob_gets = reg.containerd_requests()[pre..]
        .iter()
        .filter(|l| l.contains("\"GET /v2/rk/busybox/blobs/sha256:") && l.contains("\" 200 "))
        .count();
    assert_eq!(blob_gets, 4, "{:#?}", &reg.containerd_requests()[pre..]);
    assert!(
        reg.manifest_requests("rk/busybox:always") > always_resolves,
        "{:#?}",
        reg.containerd_requests()
    );
    let log = env.logs.join(format!(
        "default_always-{}_{}/main/0.log",
        env.node,
        uid(&pod)
    ));
    wait_until(
        Duration::from_secs(10),
        "the Always container running as the new image's user (uid 1000)",
        || {
            std::fs::read_to_string(&log)
                .ok()
                .filter(|s| s.lines().any(|l| l.ends_with(" 1000")))
        },
    );

    // Never, image present (pulled above): runs without a single request to the registry.
    let before = reg.containerd_requests();
    env.write_manifest("never.yaml", &pull_pod("never", &pulled, "Never", SLEEPER));
    let pod = env.wait_running("never");
    let cs = container_status(&pod, "main");
    assert_eq!(cs.image, pulled);
    assert_eq!(cs.image_id, repo_digest(&pulled_digest));
    assert_eq!(
        reg.containerd_requests(),
        before,
        "a Never pod must not contact the registry"
    );

    // The registry under a name no DNS knows, only the instance's hosts.toml (config_path):
    // IfNotPresent pulls it (not present under that name) over plain HTTP.
    let name = "registry.rkubelet.test";
    env.trust_registry_as(&reg, name);
    let named = format!("{name}/rk/busybox:pulled");
    assert!(env.image_status(&named).await.is_none());
    env.write_manifest(
        "named.yaml",
        &pull_pod("named", &named, "IfNotPresent", SLEEPER),
    );
    let pod = env.wait_running("named");
    let img = env.image_status(&named).await.expect("pulled by name");
    // The status shows the runtime's image, as upstream's: containerd 1.6 answers with the image's
    // first repo tag (it ignores the user_specified_image rkubelet sends), and this image now has
    // two, the registry's address and the name.
    assert!(img.repo_tags.contains(&named), "{:?}", img.repo_tags);
    assert_eq!(img.repo_tags.len(), 2, "{:?}", img.repo_tags);
    assert_eq!(container_status(&pod, "main").image, img.repo_tags[0]);
    assert!(
        img.repo_digests
            .contains(&format!("{name}/rk/busybox@{pulled_digest}")),
        "{:?}",
        img.repo_digests
    );
    let ns = format!("/v2/rk/busybox/manifests/pulled?ns={name} ");
    assert!(
        reg.containerd_requests().iter().any(|l| l.contains(&ns)),
        "{:#?}",
        reg.containerd_requests()
    );
}
