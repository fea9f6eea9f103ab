use super::*;

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{HTTPGetAction, PodSpec, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use worker::tests::{ok, Captured, Script};

const S: fn(u64) -> Duration = Duration::from_secs;

fn probe(period: i32) -> Probe {
    Probe {
        period_seconds: Some(period),
        ..Default::default()
    }
}

fn container(name: &str, startup: bool, readiness: bool, liveness: bool) -> Container {
    Container {
        name: name.into(),
        startup_probe: startup.then(|| probe(10)),
        readiness_probe: readiness.then(|| probe(10)),
        liveness_probe: liveness.then(|| probe(10)),
        ..Default::default()
    }
}

fn pod(containers: Vec<Container>, init: Vec<Container>) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some("web".into());
    p.metadata.namespace = Some("ns".into());
    p.metadata.uid = Some("uid-1".into());
    p.spec = Some(PodSpec {
        containers,
        init_containers: Some(init),
        ..Default::default()
    });
    p
}

fn sidecar(mut c: Container) -> Container {
    c.restart_policy = Some("Always".into());
    c
}

fn running(id: &str, ip: Option<&str>) -> ContainerInfo {
    ContainerInfo {
        id: id.into(),
        state: RunState::Running {
            started_at: SystemTime::now() - S(3600),
        },
        pod_ip: ip.map(Into::into),
    }
}

#[test]
fn probed_containers_and_grace_overrides() {
    let mut app = container("app", false, true, true);
    if let Some(p) = app.liveness_probe.as_mut() {
        p.termination_grace_period_seconds = Some(5);
    }
    let mut side = sidecar(container("side", true, false, false));
    if let Some(p) = side.startup_probe.as_mut() {
        p.termination_grace_period_seconds = Some(7);
    }
    let p = pod(
        vec![app, container("plain", false, false, false)],
        vec![container("init", false, true, false), side],
    );
    let names: Vec<(&str, bool)> = probed_containers(&p)
        .map(|(c, init)| (c.name.as_str(), init))
        .collect();
    assert_eq!(names, [("app", false), ("plain", false), ("side", true)]);
    assert_eq!(
        probe_grace_override(&p, "app", ProbeKind::Liveness),
        Some(5)
    );
    assert_eq!(probe_grace_override(&p, "app", ProbeKind::Readiness), None);
    assert_eq!(probe_grace_override(&p, "app", ProbeKind::Startup), None);
    assert_eq!(
        probe_grace_override(&p, "side", ProbeKind::Startup),
        Some(7)
    );
    assert_eq!(probe_grace_override(&p, "plain", ProbeKind::Liveness), None);
    assert_eq!(probe_grace_override(&p, "nope", ProbeKind::Liveness), None);
}

struct Running {
    handle: ProbeHandle,
    updates: mpsc::UnboundedReceiver<ResultUpdate>,
    script: Script,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn updates(&mut self) -> Vec<(String, ProbeKind, ProbeResult)> {
        std::iter::from_fn(|| self.updates.try_recv().ok())
            .map(|u| {
                assert_eq!(u.pod_uid, "uid-1");
                (u.container_name, u.kind, u.result)
            })
            .collect()
    }
}

/// A manager over a scripted prober, started an hour ago (no initial jitter).
async fn manager() -> Running {
    let script = Script::new(ok());
    let events: Captured = Arc::default();
    let (m, handle, updates) = ProbeManager::with_sink(script.clone(), EventSink::Capture(events));
    let cancel = CancellationToken::new();
    let task = tokio::spawn(m.run(cancel.clone()));
    tokio::time::sleep(S(3600)).await;
    Running {
        handle,
        updates,
        script,
        cancel,
        task,
    }
}

#[tokio::test(start_paused = true)]
async fn manager_gates_on_startup_and_probes_sidecars() {
    let mut m = manager().await;
    let p = Arc::new(pod(
        vec![
            container("app", true, true, true),
            container("plain", false, false, false),
        ],
        vec![
            container("init", false, true, false),
            sidecar(container("side", false, true, false)),
        ],
    ));
    m.handle.add_pod(p.clone());
    m.handle.add_pod(p.clone()); // idempotent
                                 // Let the workers run once before their containers exist.
    tokio::time::sleep(Duration::from_millis(1)).await;
    m.handle
        .update_container("uid-1", "app", running("c1", Some("10.0.0.1")));
    m.handle
        .update_container("uid-1", "side", running("s1", Some("10.0.0.1")));
    m.handle
        .update_container("uid-1", "init", running("i1", Some("10.0.0.1")));
    m.handle
        .update_container("uid-1", "plain", running("p1", Some("10.0.0.1")));
    tokio::time::sleep(Duration::from_millis(1)).await;

    // Right away: only the sidecar's readiness ran (no startup probe holds it back); app's
    // readiness reported its initial value and waits for startup.
    assert_eq!(m.script.calls_of(ProbeKind::Startup), 0);
    assert_eq!(m.script.calls_of(ProbeKind::Liveness), 0);
    assert_eq!(m.script.calls_of(ProbeKind::Readiness), 1);
    let u = m.updates();
    assert!(
        u.contains(&("side".into(), ProbeKind::Readiness, ProbeResult::Success)),
        "{u:?}"
    );
    assert!(
        u.contains(&("app".into(), ProbeKind::Readiness, ProbeResult::Failure)),
        "{u:?}"
    );
    assert!(
        !u.iter().any(|(c, _, _)| c == "init" || c == "plain"),
        "{u:?}"
    );

    // First tick: startup succeeds once, and only once (one worker despite two add_pod).
    tokio::time::sleep(S(25)).await;
    assert_eq!(m.script.calls_of(ProbeKind::Startup), 1);
    assert!(m.script.calls_of(ProbeKind::Liveness) >= 1);
    let u = m.updates();
    for want in [
        ("app".to_string(), ProbeKind::Startup, ProbeResult::Unknown),
        ("app".to_string(), ProbeKind::Startup, ProbeResult::Success),
        (
            "app".to_string(),
            ProbeKind::Readiness,
            ProbeResult::Success,
        ),
        ("app".to_string(), ProbeKind::Liveness, ProbeResult::Success),
    ] {
        assert!(u.contains(&want), "{want:?} not in {u:?}");
    }

    // Terminating: liveness and startup stop, readiness goes on.
    m.handle.stop_liveness_and_startup("uid-1");
    tokio::time::sleep(Duration::from_millis(1)).await;
    let (live, ready) = (
        m.script.calls_of(ProbeKind::Liveness),
        m.script.calls_of(ProbeKind::Readiness),
    );
    tokio::time::sleep(S(30)).await;
    assert_eq!(m.script.calls_of(ProbeKind::Liveness), live);
    assert!(m.script.calls_of(ProbeKind::Readiness) > ready);

    // Removed: nothing runs any more.
    m.handle.remove_pod("uid-1");
    tokio::time::sleep(Duration::from_millis(1)).await;
    let total = m.script.calls();
    tokio::time::sleep(S(60)).await;
    assert_eq!(m.script.calls(), total);

    m.cancel.cancel();
    m.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn workers_that_ended_are_recreated_by_add_pod_and_cleanup_stops_others() {
    let mut m = manager().await;
    let p = pod(vec![container("app", false, false, true)], vec![]);
    let mut deleting = p.clone();
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
    m.handle.add_pod(Arc::new(p.clone()));
    m.handle
        .update_container("uid-1", "app", running("c1", None));
    tokio::time::sleep(S(15)).await;
    let before = m.script.calls();
    assert!(before >= 1);
    // The pod is being deleted: the refreshed pod makes the liveness worker stop quietly.
    m.handle.add_pod(Arc::new(deleting));
    tokio::time::sleep(S(30)).await;
    assert_eq!(m.script.calls(), before);
    m.updates();
    // A later add_pod (e.g. the deletion was a mistake and a new pod object came) starts it again.
    m.handle.add_pod(Arc::new(p));
    tokio::time::sleep(S(15)).await;
    assert!(m.script.calls() > before);
    // Housekeeping: the pod is not desired any more.
    m.handle.cleanup_pods(HashSet::new());
    tokio::time::sleep(Duration::from_millis(1)).await;
    let total = m.script.calls();
    tokio::time::sleep(S(60)).await;
    assert_eq!(m.script.calls(), total);
    // Dropping the last handle stops the manager.
    drop(m.handle);
    m.task.await.unwrap();
}

/// The real handlers end to end: an httpGet readiness probe against a loopback server and a
/// tcpSocket liveness probe against a closed port.
#[tokio::test]
async fn real_http_and_tcp_probes_produce_updates() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .await;
                let _ = s.shutdown().await;
            });
        }
    });
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    };
    let mut c = container("app", false, false, false);
    c.readiness_probe = Some(Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/healthz".into()),
            port: IntOrString::Int(i32::from(port)),
            ..Default::default()
        }),
        period_seconds: Some(1),
        ..Default::default()
    });
    c.liveness_probe = Some(Probe {
        tcp_socket: Some(TCPSocketAction {
            host: None,
            port: IntOrString::Int(i32::from(closed)),
        }),
        period_seconds: Some(1),
        failure_threshold: Some(1),
        ..Default::default()
    });
    let cri = CriClient::new("unix:///nonexistent/cri.sock", Duration::from_secs(2)).unwrap();
    let (m, handle, mut updates) = ProbeManager::new(cri, Recorder::disabled());
    let cancel = CancellationToken::new();
    let task = tokio::spawn(m.run(cancel.clone()));
    handle.add_pod(Arc::new(pod(vec![c], vec![])));
    handle.update_container("uid-1", "app", running("c1", Some("127.0.0.1")));

    let mut seen = Vec::new();
    let want = [
        (ProbeKind::Readiness, ProbeResult::Success),
        (ProbeKind::Liveness, ProbeResult::Failure),
    ];
    let deadline = tokio::time::Instant::now() + S(10);
    while !want.iter().all(|w| seen.contains(w)) {
        let u = tokio::time::timeout_at(deadline, updates.recv())
            .await
            .expect("updates within 10 s")
            .unwrap();
        assert_eq!(
            (u.container_name.as_str(), u.container_id.as_str()),
            ("app", "c1")
        );
        seen.push((u.kind, u.result));
    }
    // Each kind starts from its initial value.
    let first = |kind| seen.iter().find(|(k, _)| *k == kind).map(|(_, r)| *r);
    assert_eq!(first(ProbeKind::Readiness), Some(ProbeResult::Failure));
    assert_eq!(first(ProbeKind::Liveness), Some(ProbeResult::Success));
    cancel.cancel();
    task.await.unwrap();
}
