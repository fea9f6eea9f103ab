//! Init containers and sidecars (init containers with `restartPolicy: Always`) against a real
//! containerd: ordering, failure handling per restart policy, and a sidecar serving the app from
//! before it starts until after it stopped.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::jiff::Timestamp;

fn init_opt<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    pod.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == name))
}

fn init_status<'a>(pod: &'a Pod, name: &str) -> &'a ContainerStatus {
    init_opt(pod, name).unwrap_or_else(|| panic!("no init status for {name}"))
}

fn app_opt(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "app"))
}

fn started(s: &ContainerStatus) -> Timestamp {
    let st = s.state.as_ref().unwrap();
    st.running
        .as_ref()
        .and_then(|r| r.started_at.clone())
        .or_else(|| st.terminated.as_ref().and_then(|t| t.started_at.clone()))
        .unwrap_or_else(|| panic!("{} never started: {s:?}", s.name))
        .0
}

fn finished(s: &ContainerStatus) -> Timestamp {
    s.state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .and_then(|t| t.finished_at.clone())
        .unwrap_or_else(|| panic!("{} not finished: {s:?}", s.name))
        .0
}

fn condition(pod: &Pod, kind: &str) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == kind))
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

/// A pod whose init containers are `(name, script, extra yaml)` and one app container.
fn pod_with_inits(
    name: &str,
    policy: &str,
    inits: &[(&str, &str, &str)],
    app: &str,
    extra: &str,
) -> String {
    let mut s = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 10\n{extra}  initContainers:\n"
    );
    for (n, script, more) in inits {
        s += &format!(
            "  - name: {n}\n    image: {IMAGE}\n    command: [\"sh\", \"-c\", {script:?}]\n{more}"
        );
    }
    s += &format!(
        "  containers:\n  - name: app\n    image: {IMAGE}\n    command: [\"sh\", \"-c\", {app:?}]\n"
    );
    s
}

#[tokio::test]
async fn init_containers_run_in_order_and_failures_follow_the_restart_policy() {
    let mut env = Env::new(161);
    env.start_kubelet();
    // Two init containers that take a second each, then the app.
    env.write_manifest(
        "ordered.yaml",
        &pod_with_inits(
            "ordered",
            "Always",
            &[("one", "sleep 1", ""), ("two", "sleep 1", "")],
            SLEEPER,
            "",
        ),
    );
    // A failing init container under Never fails the pod; under Always it is retried and the
    // app never starts.
    env.write_manifest(
        "never.yaml",
        &pod_with_inits("never", "Never", &[("bad", "exit 3", "")], SLEEPER, ""),
    );
    env.write_manifest(
        "always.yaml",
        &pod_with_inits("always", "Always", &[("bad", "exit 3", "")], SLEEPER, ""),
    );

    let ordered = env.wait_running("ordered");
    let (one, two) = (init_status(&ordered, "one"), init_status(&ordered, "two"));
    let app = container_status(&ordered, "app");
    assert!(finished(one) <= started(two), "{one:?} {two:?}");
    assert!(finished(two) <= started(app), "{two:?} {app:?}");
    assert!(
        one.ready && two.ready,
        "succeeded init containers are ready"
    );
    assert_eq!(condition(&ordered, "Initialized"), "True");

    let never = env.wait_pod("never", Duration::from_secs(30), "never Failed", |p| {
        (p.status.as_ref()?.phase.as_deref()? == "Failed").then(|| p.clone())
    });
    let bad = init_status(&never, "bad");
    let t = bad.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(t.exit_code, 3);
    assert_eq!(t.reason.as_deref(), Some("Error"));
    assert_eq!(condition(&never, "Initialized"), "False");

    let always = env.wait_pod("always", Duration::from_secs(60), "init retried", |p| {
        (init_opt(p, "bad")?.restart_count >= 2).then(|| p.clone())
    });
    assert_eq!(
        always.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending")
    );
    let app = container_status(&always, "app");
    assert_eq!(
        app.state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("PodInitializing")
    );
    // Neither failed pod ever created its app container.
    for pod in [&never, &always] {
        let names: Vec<String> = env
            .containers_of(&uid(pod))
            .await
            .into_iter()
            .filter_map(|c| c.metadata.map(|m| m.name))
            .collect();
        assert!(!names.contains(&"app".to_string()), "{names:?}");
    }
}

/// The sidecar: a web server that logs each request, with a startup probe on its port. It
/// listens only after 2 s, so a container started before its startup probe passed finds nothing
/// there. It stops at once on SIGTERM (a bare httpd as PID 1 would ignore it and wait for
/// SIGKILL), so a sidecar stopped too early shows.
const SIDECAR: &str =
    "sleep 2; mkdir -p /www; for p in hello bye setup; do echo ok > /www/$p; done; \
                       httpd -f -vv -p 8080 -h /www & trap 'exit 0' TERM; wait";
const SIDECAR_SPEC: &str = "    restartPolicy: Always\n    startupProbe:\n      tcpSocket: {port: 8080}\n      periodSeconds: 1\n      failureThreshold: 30\n";

fn sidecar_log(env: &Env, pod: &Pod) -> String {
    let path = env.logs.join(format!(
        "default_{}_{}/proxy/0.log",
        pod.metadata.name.as_deref().unwrap(),
        uid(pod)
    ));
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test]
async fn sidecar_starts_before_the_app_and_stops_after_it() {
    let mut env = Env::new(162);
    env.start_kubelet();
    // The init container after the sidecar needs it serving (it exits 1 otherwise), and so
    // does the app, from its first instant and again when it stops: on SIGTERM it waits a
    // second, then makes one more request and exits 0 only if that reached the sidecar. The
    // active deadline ends the pod, which stops the app first and the sidecar after it; a
    // sidecar stopped together with the app would be gone by the time of that request.
    // (Timestamps in the status have one-second resolution: they cannot show the order.)
    let app = "wget -q -O- http://127.0.0.1:8080/hello || exit 1; \
               trap 'sleep 1; wget -q -O- http://127.0.0.1:8080/bye && exit 0; exit 1' TERM; \
               while true; do sleep 0.2; done";
    env.write_manifest(
        "side.yaml",
        &pod_with_inits(
            "side",
            "Always",
            &[
                ("proxy", SIDECAR, SIDECAR_SPEC),
                ("setup", "wget -q -O- http://127.0.0.1:8080/setup", ""),
            ],
            app,
            "  activeDeadlineSeconds: 15\n",
        ),
    );
    let pod = env.wait_pod("side", Duration::from_secs(30), "app running", |p| {
        app_opt(p)?.state.as_ref()?.running.as_ref()?;
        Some(p.clone())
    });
    let proxy = init_status(&pod, "proxy");
    assert_eq!(proxy.started, Some(true));
    assert!(proxy.state.as_ref().unwrap().running.is_some(), "{proxy:?}");
    // setup ran once and succeeded: the sidecar was serving before it started.
    let setup = init_status(&pod, "setup");
    assert_eq!(setup.restart_count, 0, "{setup:?}");
    let setup_exit = setup.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(setup_exit.exit_code, 0, "{setup:?}");
    assert_eq!(
        pod.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    assert_eq!(condition(&pod, "Initialized"), "True");
    assert_eq!(container_status(&pod, "app").restart_count, 0);

    let done = env.wait_pod(
        "side",
        Duration::from_secs(40),
        "deadline ends the pod",
        |p| {
            init_opt(p, "proxy")?.state.as_ref()?.terminated.as_ref()?;
            (p.status.as_ref()?.phase.as_deref()? == "Failed").then(|| p.clone())
        },
    );
    let (app, proxy) = (container_status(&done, "app"), init_status(&done, "proxy"));
    let app_exit = app.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        app_exit.exit_code, 0,
        "the app's last request, a second after its SIGTERM, reached the sidecar"
    );
    assert_eq!(container_status(&done, "app").restart_count, 0);
    assert!(finished(app) <= finished(proxy), "{app:?} {proxy:?}");
    let log = sidecar_log(&env, &done);
    assert!(log.contains("url:/setup"), "{log}");
    assert!(log.contains("url:/hello"), "{log}");
    assert!(log.contains("url:/bye"), "{log}");
}

#[tokio::test]
async fn a_finished_app_stops_its_sidecar_and_the_pod_succeeds() {
    let mut env = Env::new(163);
    env.start_kubelet();
    env.write_manifest(
        "job.yaml",
        &pod_with_inits(
            "job",
            "Never",
            &[("proxy", SIDECAR, SIDECAR_SPEC)],
            "wget -q -O- http://127.0.0.1:8080/hello",
            "",
        ),
    );
    let pod = env.wait_pod("job", Duration::from_secs(40), "job Succeeded", |p| {
        (p.status.as_ref()?.phase.as_deref()? == "Succeeded").then(|| p.clone())
    });
    let proxy = init_status(&pod, "proxy");
    assert!(
        proxy.state.as_ref().unwrap().terminated.is_some(),
        "the sidecar is stopped with the pod: {proxy:?}"
    );
    assert_eq!(proxy.restart_count, 0);
    let app = container_status(&pod, "app");
    assert_eq!(
        app.state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        0
    );
    assert!(sidecar_log(&env, &pod).contains("url:/hello"));
}

#[tokio::test]
async fn a_crashing_sidecar_is_restarted_without_touching_the_app() {
    let mut env = Env::new(164);
    env.start_kubelet();
    env.write_manifest(
        "crashy.yaml",
        &pod_with_inits(
            "crashy",
            "Always",
            &[("proxy", "sleep 2; exit 1", "    restartPolicy: Always\n")],
            SLEEPER,
            "",
        ),
    );
    let pod = env.wait_pod(
        "crashy",
        Duration::from_secs(60),
        "sidecar restarted",
        |p| (init_opt(p, "proxy")?.restart_count >= 2).then(|| p.clone()),
    );
    let app = container_status(&pod, "app");
    assert_eq!(app.restart_count, 0);
    assert!(app.state.as_ref().unwrap().running.is_some(), "{app:?}");
    assert_eq!(
        pod.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    assert_eq!(condition(&pod, "Initialized"), "True");
}
