use super::*;

use std::collections::VecDeque;
use std::sync::Mutex;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::prober::handlers::ProbeError;
use crate::prober::results::ResultUpdate;

type Attempt = Result<(Outcome, String), ProbeError>;

/// A scripted prober: answers from a queue, then a default; records when it was called.
#[derive(Clone)]
pub(crate) struct Script(Arc<Mutex<ScriptState>>);

pub(crate) struct ScriptState {
    queue: VecDeque<Attempt>,
    default: Attempt,
    calls: Vec<(Instant, ProbeKind, String)>,
}

impl Script {
    pub(crate) fn new(default: Attempt) -> Self {
        Script(Arc::new(Mutex::new(ScriptState {
            queue: VecDeque::new(),
            default,
            calls: Vec::new(),
        })))
    }
    pub(crate) fn push(&self, a: Attempt) {
        self.0.lock().unwrap().queue.push_back(a);
    }
    pub(crate) fn set_default(&self, a: Attempt) {
        self.0.lock().unwrap().default = a;
    }
    pub(crate) fn calls(&self) -> usize {
        self.0.lock().unwrap().calls.len()
    }
    pub(crate) fn calls_of(&self, kind: ProbeKind) -> usize {
        self.0
            .lock()
            .unwrap()
            .calls
            .iter()
            .filter(|c| c.1 == kind)
            .count()
    }
    pub(crate) fn call_times(&self) -> Vec<Instant> {
        self.0.lock().unwrap().calls.iter().map(|c| c.0).collect()
    }
}

impl Prober for Script {
    async fn probe(&self, req: &ProbeRequest<'_>) -> Attempt {
        let mut s = self.0.lock().unwrap();
        s.calls
            .push((Instant::now(), req.kind, req.container_id.to_string()));
        s.queue.pop_front().unwrap_or_else(|| s.default.clone())
    }
}

pub(crate) fn ok() -> Attempt {
    Ok((Outcome::Success, String::new()))
}

pub(crate) fn fail(msg: &str) -> Attempt {
    Ok((Outcome::Failure, msg.to_string()))
}

pub(crate) type Captured = Arc<Mutex<Vec<(String, String, String)>>>;

struct Harness {
    info: watch::Sender<ContainerInfo>,
    gate: watch::Sender<StartupGate>,
    updates: mpsc::UnboundedReceiver<ResultUpdate>,
    events: Captured,
    script: Script,
    cancel: CancellationToken,
    task: JoinHandle<()>,
    clock: Clock,
}

impl Harness {
    fn updates(&mut self) -> Vec<(String, ProbeResult)> {
        std::iter::from_fn(|| self.updates.try_recv().ok())
            .map(|u| (u.container_id, u.result))
            .collect()
    }
    fn events(&self) -> Vec<(String, String)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|(r, m, _)| (r.clone(), m.clone()))
            .collect()
    }
    fn running(&self, id: &str, started_ago: Duration) {
        self.info.send_replace(ContainerInfo {
            id: id.into(),
            state: RunState::Running {
                started_at: self.clock.wall_now() - started_ago,
            },
            pod_ip: Some("10.0.0.1".into()),
        });
    }
    fn state(&self, id: &str, state: RunState) {
        self.info.send_replace(ContainerInfo {
            id: id.into(),
            state,
            pod_ip: None,
        });
    }
}

fn pod(restart_policy: &str, deleting: bool) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some("web".into());
    p.metadata.namespace = Some("ns".into());
    p.metadata.uid = Some("uid-1".into());
    if deleting {
        p.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    }
    p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
        restart_policy: Some(restart_policy.into()),
        ..Default::default()
    });
    p
}

fn probe(period: i32, success: i32, failure: i32, delay: i32) -> Probe {
    Probe {
        period_seconds: Some(period),
        success_threshold: Some(success),
        failure_threshold: Some(failure),
        initial_delay_seconds: Some(delay),
        ..Default::default()
    }
}

/// Starts one worker. `aged`: the manager started long ago, so there is no initial jitter.
fn start(
    kind: ProbeKind,
    probe: Probe,
    pod: Pod,
    gate: StartupGate,
    aged: bool,
    default: Attempt,
) -> Harness {
    let clock = Clock::now();
    let (info_tx, info_rx) = watch::channel(ContainerInfo::default());
    let (gate_tx, gate_rx) = watch::channel(gate);
    let (_pod_tx, pod_rx) = watch::channel(Arc::new(pod));
    let (tx, updates) = mpsc::unbounded_channel();
    let events: Captured = Arc::default();
    let script = Script::new(default);
    let cancel = CancellationToken::new();
    let worker = Worker::new(WorkerConfig {
        kind,
        probe,
        container: Container {
            name: "main".into(),
            ..Default::default()
        },
        restartable_init: false,
        pod: pod_rx,
        info: info_rx,
        gate: gate_rx,
        gate_tx: (kind == ProbeKind::Startup).then(|| gate_tx.clone()),
        results: ResultsWriter::new(tx, "uid-1".into(), "main".into(), kind),
        events: EventSink::Capture(events.clone()),
        prober: script.clone(),
        clock,
    });
    let token = cancel.clone();
    let task = tokio::spawn(async move {
        if aged {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        // Keep the pod sender alive as long as the worker.
        let _pod = _pod_tx;
        worker.run(token).await
    });
    Harness {
        info: info_tx,
        gate: gate_tx,
        updates,
        events,
        script,
        cancel,
        task,
        clock,
    }
}

const S: fn(u64) -> Duration = Duration::from_secs;

async fn at(h: &Harness, secs_after_start: u64, aged: bool) {
    // Workers of an aged manager start an hour in; +1 ms lets a probe due at that second run.
    let base = if aged { 3600 } else { 0 };
    let target = h.clock.start + S(base + secs_after_start) + Duration::from_millis(1);
    tokio::time::sleep_until(target).await;
}

#[test]
fn probe_defaults() {
    let d = ProbeSpec::from_probe(&Probe::default());
    assert_eq!(
        d,
        ProbeSpec {
            initial_delay_seconds: 0,
            period: S(10),
            timeout: S(1),
            success_threshold: 1,
            failure_threshold: 3,
        }
    );
    // Zero means unset (API defaulting); negatives never pass validation, treat them alike.
    assert_eq!(ProbeSpec::from_probe(&probe(0, 0, 0, 0)), d);
    assert_eq!(ProbeSpec::from_probe(&probe(-1, -1, -1, -5)), d);
    let p = Probe {
        timeout_seconds: Some(5),
        ..probe(3, 2, 7, 4)
    };
    assert_eq!(
        ProbeSpec::from_probe(&p),
        ProbeSpec {
            initial_delay_seconds: 4,
            period: S(3),
            timeout: S(5),
            success_threshold: 2,
            failure_threshold: 7,
        }
    );
}

#[test]
fn threshold_counting_table() {
    use ProbeResult::{Failure as F, Success as T};
    let spec = ProbeSpec::from_probe(&probe(10, 2, 3, 0));
    // (observed, reported)
    let table = [
        (T, None),
        (T, Some(T)),
        (T, Some(T)),
        (F, None),
        (F, None),
        (F, Some(F)),
        (F, Some(F)),
        (T, None),
        (F, None),
        (T, None),
        (T, Some(T)),
    ];
    let mut t = Thresholds::default();
    for (i, (seen, want)) in table.into_iter().enumerate() {
        assert_eq!(t.observe(seen, &spec), want, "step {i}");
    }
    // Defaults: one success, three failures.
    let spec = ProbeSpec::from_probe(&Probe::default());
    let mut t = Thresholds::default();
    assert_eq!(t.observe(T, &spec), Some(T));
    assert_eq!(t.observe(F, &spec), None);
    assert_eq!(t.observe(F, &spec), None);
    assert_eq!(t.observe(F, &spec), Some(F));
    // After a reported liveness failure the run restarts.
    t.reset_run();
    assert_eq!(t.run(), 0);
    assert_eq!(t.observe(F, &spec), None);
    assert_eq!(t.run(), 1);
}

#[tokio::test(start_paused = true)]
async fn readiness_reports_initial_failure_then_result() {
    let mut h = start(
        ProbeKind::Readiness,
        probe(10, 1, 3, 0),
        pod("Always", false),
        StartupGate::Open,
        true,
        ok(),
    );
    at(&h, 0, true).await;
    assert_eq!(h.script.calls(), 0, "no container yet");
    assert!(h.updates().is_empty());
    // The container appears: a not-ready readiness worker probes at once.
    h.running("c1", S(100));
    at(&h, 1, true).await;
    assert_eq!(
        h.updates(),
        [
            ("c1".to_string(), ProbeResult::Failure),
            ("c1".to_string(), ProbeResult::Success)
        ]
    );
    assert_eq!(h.script.calls(), 1);
    // Then every period, without updates while unchanged.
    at(&h, 21, true).await;
    assert_eq!(h.script.calls(), 3);
    assert!(h.updates().is_empty());
    h.cancel.cancel();
    h.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn liveness_failure_threshold_then_hold_until_new_container() {
    let mut h = start(
        ProbeKind::Liveness,
        probe(10, 1, 3, 0),
        pod("Always", false),
        StartupGate::Open,
        true,
        fail("boom"),
    );
    h.running("c1", S(100));
    at(&h, 0, true).await;
    assert_eq!(h.updates(), [("c1".to_string(), ProbeResult::Success)]);
    at(&h, 10, true).await;
    assert!(h.updates().is_empty(), "2 failures are below the threshold");
    at(&h, 20, true).await;
    assert_eq!(h.updates(), [("c1".to_string(), ProbeResult::Failure)]);
    assert_eq!(h.script.calls(), 3);
    assert_eq!(
        h.events(),
        vec![
            (
                events::CONTAINER_UNHEALTHY.to_string(),
                "Liveness probe failed: boom".to_string()
            );
            3
        ]
    );
    assert_eq!(h.events.lock().unwrap()[0].2, "spec.containers{main}");
    // On hold: the failed container is not probed again.
    at(&h, 50, true).await;
    assert_eq!(h.script.calls(), 3);
    // The restarted container resets the hold; the count starts afresh.
    h.running("c2", S(0));
    at(&h, 60, true).await;
    assert_eq!(h.updates(), [("c2".to_string(), ProbeResult::Success)]);
    assert_eq!(h.script.calls(), 4);
    h.cancel.cancel();
    h.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn initial_delay_counts_from_started_at() {
    let h = start(
        ProbeKind::Liveness,
        probe(10, 1, 3, 15),
        pod("Always", false),
        StartupGate::Open,
        true,
        ok(),
    );
    at(&h, 0, true).await;
    h.running("c1", S(0));
    at(&h, 10, true).await;
    assert_eq!(h.script.calls(), 0);
    at(&h, 20, true).await;
    assert_eq!(h.script.calls(), 1);
    h.cancel.cancel();
    h.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn non_running_containers_fail_and_never_restarted_ones_stop_the_worker() {
    let mut h = start(
        ProbeKind::Liveness,
        probe(10, 1, 3, 0),
        pod("Never", false),
        StartupGate::Open,
        true,
        ok(),
    );
    h.state("c1", RunState::Waiting);
    at(&h, 0, true).await;
    assert_eq!(
        h.updates(),
        [
            ("c1".to_string(), ProbeResult::Success),
            ("c1".to_string(), ProbeResult::Failure)
        ]
    );
    assert!(!h.task.is_finished());
    h.state("c1", RunState::Terminated);
    at(&h, 10, true).await;
    assert!(
        h.task.is_finished(),
        "restartPolicy Never: nothing more to probe"
    );
    assert_eq!(h.script.calls(), 0);

    // With restartPolicy Always the worker waits for the next container.
    let h = start(
        ProbeKind::Liveness,
        probe(10, 1, 3, 0),
        pod("Always", false),
        StartupGate::Open,
        true,
        ok(),
    );
    h.state("c1", RunState::Terminated);
    at(&h, 20, true).await;
    assert!(!h.task.is_finished());
    h.cancel.cancel();
    h.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn deletion_makes_liveness_and_startup_succeed_and_stop() {
    for kind in [ProbeKind::Liveness, ProbeKind::Startup] {
        let mut h = start(
            kind,
            probe(10, 1, 3, 0),
            pod("Always", true),
            StartupGate::Probing(None),
            true,
            fail("x"),
        );
        h.running("c1", S(100));
        at(&h, 1, true).await;
        assert!(h.task.is_finished(), "{kind}");
        assert_eq!(
            h.updates().last(),
            Some(&("c1".to_string(), ProbeResult::Success))
        );
        assert_eq!(h.script.calls(), 0);
        if kind == ProbeKind::Startup {
            assert_eq!(*h.gate.borrow(), StartupGate::Open);
        }
    }
    // Readiness keeps probing a terminating pod.
    let h = start(
        ProbeKind::Readiness,
        probe(10, 1, 3, 0),
        pod("Always", true),
        StartupGate::Open,
        true,
        ok(),
    );
    h.running("c1", S(100));
    at(&h, 1, true).await;
    assert!(!h.task.is_finished());
    assert_eq!(h.script.calls(), 1);
    h.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn errors_are_retried_thrown_away_and_reported() {
    let mut h = start(
        ProbeKind::Readiness,
        probe(10, 1, 3, 0),
        pod("Always", false),
        StartupGate::Open,
        true,
        Err(ProbeError::PortNotFound("http".into())),
    );
    h.running("c1", S(100));
    at(&h, 0, true).await;
    assert_eq!(h.script.calls(), super::MAX_PROBE_RETRIES);
    // Only the initial value: the errored attempt changed nothing.
    assert_eq!(h.updates(), [("c1".to_string(), ProbeResult::Failure)]);
    assert_eq!(
        h.events(),
        [(
            events::CONTAINER_UNHEALTHY.to_string(),
            "Readiness probe errored and resulted in unknown state: port \"http\" not found"
                .to_string()
        )]
    );
    // An error followed by a result counts the result.
    h.script.push(Err(ProbeError::NoPodIp));
    h.script.set_default(ok());
    at(&h, 10, true).await;
    assert_eq!(h.script.calls(), super::MAX_PROBE_RETRIES + 2);
    assert_eq!(h.updates(), [("c1".to_string(), ProbeResult::Success)]);
    h.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn warning_is_success_with_an_event_and_unknown_is_failure() {
    let mut h = start(
        ProbeKind::Readiness,
        probe(10, 1, 1, 0),
        pod("Always", false),
        StartupGate::Open,
        true,
        Ok((Outcome::Warning, "moved".into())),
    );
    h.running("c1", S(100));
    at(&h, 0, true).await;
    assert_eq!(
        h.updates().last(),
        Some(&("c1".to_string(), ProbeResult::Success))
    );
    assert_eq!(
        h.events(),
        [(
            events::CONTAINER_PROBE_WARNING.to_string(),
            "Readiness probe warning: moved".to_string()
        )]
    );
    h.script.set_default(Ok((Outcome::Unknown, String::new())));
    at(&h, 10, true).await;
    assert_eq!(h.updates(), [("c1".to_string(), ProbeResult::Failure)]);
    assert_eq!(h.events().len(), 1, "unknown records no event");
    h.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn liveness_waits_for_the_startup_gate() {
    let mut h = start(
        ProbeKind::Liveness,
        probe(10, 1, 3, 0),
        pod("Always", false),
        StartupGate::Probing(None),
        true,
        ok(),
    );
    h.running("c1", S(100));
    at(&h, 20, true).await;
    assert_eq!(h.script.calls(), 0);
    // The initial value is reported even while gated (upstream sets it before the check).
    assert_eq!(h.updates(), [("c1".to_string(), ProbeResult::Success)]);
    // Started for another container: still gated.
    h.gate.send_replace(StartupGate::Probing(Some("c0".into())));
    at(&h, 30, true).await;
    assert_eq!(h.script.calls(), 0);
    h.gate.send_replace(StartupGate::Probing(Some("c1".into())));
    at(&h, 40, true).await;
    assert_eq!(h.script.calls(), 1);
    h.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn startup_probes_until_a_result_then_holds() {
    let mut h = start(
        ProbeKind::Startup,
        probe(10, 1, 3, 0),
        pod("Always", false),
        StartupGate::Probing(None),
        true,
        fail("not yet"),
    );
    h.script.push(fail("not yet"));
    h.script.push(ok());
    h.running("c1", S(100));
    at(&h, 0, true).await;
    assert_eq!(h.updates(), [("c1".to_string(), ProbeResult::Unknown)]);
    at(&h, 10, true).await;
    assert_eq!(h.updates(), [("c1".to_string(), ProbeResult::Success)]);
    assert_eq!(*h.gate.borrow(), StartupGate::Probing(Some("c1".into())));
    at(&h, 60, true).await;
    assert_eq!(
        h.script.calls(),
        2,
        "a started container is not probed again"
    );
    // A new container starts over; three failures report Failure and hold again.
    h.running("c2", S(0));
    at(&h, 90, true).await;
    assert_eq!(
        h.updates(),
        [
            ("c2".to_string(), ProbeResult::Unknown),
            ("c2".to_string(), ProbeResult::Failure)
        ]
    );
    at(&h, 120, true).await;
    assert_eq!(h.script.calls(), 5);
    assert!(!h.gate.borrow().is_started("c2"));
    h.cancel.cancel();
    h.task.await.unwrap();
    assert_eq!(
        *h.gate.borrow(),
        StartupGate::Open,
        "a stopped startup worker opens the gate"
    );
}

#[tokio::test(start_paused = true)]
async fn first_probe_is_jittered_only_right_after_start() {
    let h = start(
        ProbeKind::Liveness,
        probe(10, 1, 3, 0),
        pod("Always", false),
        StartupGate::Open,
        false,
        ok(),
    );
    h.running("c1", S(100));
    at(&h, 30, false).await;
    let times = h.script.call_times();
    assert!(times.len() >= 3, "{times:?}");
    let first = times[0] - h.clock.start;
    assert!(first < S(10), "{first:?}");
    // Then exactly one period apart.
    assert_eq!(times[1] - times[0], S(10));
    h.cancel.cancel();

    let h = start(
        ProbeKind::Liveness,
        probe(10, 1, 3, 0),
        pod("Always", false),
        StartupGate::Open,
        true,
        ok(),
    );
    h.running("c1", S(100));
    at(&h, 0, true).await;
    assert_eq!(h.script.call_times(), [h.clock.start + S(3600)]);
    h.cancel.cancel();
}
