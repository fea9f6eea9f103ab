//! One probe worker: a task per (pod, container, probe kind) (upstream
//! `pkg/kubelet/prober/worker.go`, with `prober.go`'s retries and events).
//!
//! The worker does not poll the runtime or a status manager: the SyncLoop pushes the container's
//! current ID, state and pod IP into a `watch` channel ([`ContainerInfo`]), and the startup worker
//! of the same container publishes whether the current container has started
//! ([`StartupGate`]). Each tick the worker reads both and runs upstream's `doProbe` decisions.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::handlers::{Outcome, ProbeRequest, Prober};
use super::results::{ProbeKind, ProbeResult, ResultsWriter};
use crate::events::{self, EventType, Recorder};
use crate::podutil;

/// Upstream `maxProbeRetries`: an attempt that *errors* is retried at once, up to this many times.
pub const MAX_PROBE_RETRIES: usize = 3;

/// What the SyncLoop knows about the container a worker probes. The default (empty ID) means the
/// container has not been created yet: the worker waits (upstream "Probe target container not
/// found").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerInfo {
    /// The runtime's container ID (bare, or `containerd://<id>` as in the API status).
    pub id: String,
    pub state: RunState,
    /// The pod IP, target of httpGet/tcpSocket without `host` and of grpc probes.
    pub pod_ip: Option<String>,
}

/// The container state as far as probing cares (the API's `containerStatus.state`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RunState {
    #[default]
    Waiting,
    /// `state.running.startedAt`; `initialDelaySeconds` counts from it.
    Running {
        started_at: SystemTime,
    },
    Terminated,
}

/// Whether the current container of one (pod, container) has started, as its startup worker
/// sees it: the counterpart of upstream `containerStatus.started` read by liveness and readiness
/// workers (computed in `UpdatePodStatus` from the startup results).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupGate {
    /// No startup worker (no startup probe, or the worker stopped): started.
    Open,
    /// The startup worker runs; the container ID whose startup probe succeeded, if any.
    Probing(Option<String>),
}

impl StartupGate {
    pub fn is_started(&self, container_id: &str) -> bool {
        match self {
            StartupGate::Open => true,
            StartupGate::Probing(id) => id.as_deref() == Some(container_id),
        }
    }
}

/// A probe's timing and thresholds with API defaults applied (upstream `SetDefaults_Probe`: an
/// unset or zero value takes the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSpec {
    pub initial_delay_seconds: i32,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl ProbeSpec {
    pub const DEFAULT_PERIOD_SECONDS: i32 = 10;
    pub const DEFAULT_TIMEOUT_SECONDS: i32 = 1;
    pub const DEFAULT_SUCCESS_THRESHOLD: i32 = 1;
    pub const DEFAULT_FAILURE_THRESHOLD: i32 = 3;

    pub fn from_probe(p: &Probe) -> ProbeSpec {
        let positive = |v: Option<i32>, default: i32| v.filter(|n| *n > 0).unwrap_or(default);
        let secs = |n: i32| Duration::from_secs(u64::from(n.unsigned_abs()));
        ProbeSpec {
            initial_delay_seconds: p.initial_delay_seconds.unwrap_or(0).max(0),
            period: secs(positive(p.period_seconds, Self::DEFAULT_PERIOD_SECONDS)),
            timeout: secs(positive(p.timeout_seconds, Self::DEFAULT_TIMEOUT_SECONDS)),
            success_threshold: positive(p.success_threshold, Self::DEFAULT_SUCCESS_THRESHOLD)
                .unsigned_abs(),
            failure_threshold: positive(p.failure_threshold, Self::DEFAULT_FAILURE_THRESHOLD)
                .unsigned_abs(),
        }
    }
}

/// Upstream's `lastResult`/`resultRun` counting: a result is reported once it has been seen
/// `successThreshold` (resp. `failureThreshold`) times in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    last: ProbeResult,
    run: u32,
}

impl Default for Thresholds {
    fn default() -> Self {
        // Go's zero value of `results.Result` is Success.
        Thresholds {
            last: ProbeResult::Success,
            run: 0,
        }
    }
}

impl Thresholds {
    /// Counts `result`; returns it when it is to be reported (`resultsManager.Set`).
    pub fn observe(&mut self, result: ProbeResult, spec: &ProbeSpec) -> Option<ProbeResult> {
        if self.last == result {
            self.run += 1;
        } else {
            self.last = result;
            self.run = 1;
        }
        let below = match result {
            ProbeResult::Failure => self.run < spec.failure_threshold,
            ProbeResult::Success => self.run < spec.success_threshold,
            ProbeResult::Unknown => false,
        };
        (!below).then_some(result)
    }

    /// After a reported liveness failure or startup result: the next container starts counting
    /// afresh (a new container ID alone does not reset the run, as upstream).
    pub fn reset_run(&mut self) {
        self.run = 0;
    }

    pub fn run(&self) -> u32 {
        self.run
    }
}

/// Wall time on tokio's clock: `SystemTime` at manager start plus the (pausable) monotonic time
/// since, so `initialDelaySeconds` is testable with a paused clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    start: Instant,
    wall_at_start: SystemTime,
}

impl Clock {
    pub(crate) fn now() -> Clock {
        Clock {
            start: Instant::now(),
            wall_at_start: SystemTime::now(),
        }
    }

    pub(crate) fn since_start(&self) -> Duration {
        self.start.elapsed()
    }

    pub(crate) fn wall_now(&self) -> SystemTime {
        self.wall_at_start + self.start.elapsed()
    }
}

/// Where a worker's events go: the kubelet's [`Recorder`], or a list in tests.
#[derive(Debug, Clone)]
pub(crate) enum EventSink {
    Recorder(Recorder),
    /// (reason, message, field path)
    #[cfg(test)]
    Capture(Arc<std::sync::Mutex<Vec<(String, String, String)>>>),
}

impl EventSink {
    fn warning(&self, pod: &Pod, field_path: String, reason: &str, message: String) {
        match self {
            EventSink::Recorder(r) => {
                r.pod_event(pod, Some(field_path), EventType::Warning, reason, message)
            }
            #[cfg(test)]
            EventSink::Capture(list) => {
                if let Ok(mut l) = list.lock() {
                    l.push((reason.to_string(), message, field_path));
                }
            }
        }
    }
}

/// Everything a worker is started with.
pub(crate) struct WorkerConfig<P> {
    pub kind: ProbeKind,
    pub probe: Probe,
    pub container: Container,
    /// An init container with `restartPolicy: Always` (a sidecar).
    pub restartable_init: bool,
    pub pod: watch::Receiver<Arc<Pod>>,
    pub info: watch::Receiver<ContainerInfo>,
    pub gate: watch::Receiver<StartupGate>,
    /// The startup worker's way to publish the gate.
    pub gate_tx: Option<watch::Sender<StartupGate>>,
    pub results: ResultsWriter,
    pub events: EventSink,
    pub prober: P,
    pub clock: Clock,
}

pub(crate) struct Worker<P> {
    cfg: WorkerConfig<P>,
    spec: ProbeSpec,
    /// The last container ID seen (upstream `containerID`).
    container_id: String,
    thresholds: Thresholds,
    /// Skip probing until the container ID changes (upstream `onHold`).
    on_hold: bool,
    /// The last result reported for `container_id`.
    reported: Option<ProbeResult>,
    /// When the next probe is due: the period tick (or the end of the initial jitter, or the
    /// moment a readiness trigger arrived) that woke the worker. Taken by [`Self::do_probe`].
    due: Option<Instant>,
    /// How late the last probe started after it was due (logged as `delay_ms`).
    last_delay: Option<Duration>,
}

impl<P: Prober> Worker<P> {
    pub(crate) fn new(cfg: WorkerConfig<P>) -> Self {
        let spec = ProbeSpec::from_probe(&cfg.probe);
        Worker {
            cfg,
            spec,
            container_id: String::new(),
            thresholds: Thresholds::default(),
            on_hold: false,
            reported: None,
            due: None,
            last_delay: None,
        }
    }

    /// Upstream `worker.run`: an initial random delay when the kubelet started less than a period
    /// ago (so probes of adopted containers do not all fire at once), then `doProbe` at once and
    /// on every period tick until it says stop or the worker is cancelled.
    ///
    /// Readiness workers also probe at once (and restart the period) when the container info or
    /// the startup gate changes while not reported ready: upstream `UpdatePodStatus` triggers that
    /// manual run whenever it computes the status of a not-ready container with a readiness probe.
    ///
    /// Each probe that runs logs, at debug level, how late it started after it was due
    /// (`delay_ms`: scheduling and runtime lag, including a previous probe overrunning the period).
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        let period = self.spec.period;
        self.due = Some(Instant::now());
        if period > self.cfg.clock.since_start() {
            let jitter = period.mul_f64(fastrand::f64());
            self.due = Some(Instant::now() + jitter);
            tokio::select! {
                _ = cancel.cancelled() => {
                    self.finish();
                    return;
                }
                _ = tokio::time::sleep(jitter) => {}
            }
        }
        let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let (mut info_open, mut gate_open) = (true, true);
        'probing: loop {
            let keep_going = tokio::select! {
                _ = cancel.cancelled() => false,
                keep = self.do_probe() => keep,
            };
            if !keep_going {
                break;
            }
            loop {
                let trigger = self.cfg.kind == ProbeKind::Readiness
                    && self.reported != Some(ProbeResult::Success);
                tokio::select! {
                    _ = cancel.cancelled() => break 'probing,
                    // The tick's scheduled instant, even when it fires late.
                    due = ticker.tick() => {
                        self.due = Some(due);
                        break;
                    }
                    changed = self.cfg.info.changed(), if trigger && info_open => {
                        if changed.is_err() {
                            info_open = false;
                            continue;
                        }
                        ticker.reset();
                        self.due = Some(Instant::now());
                        break;
                    }
                    changed = self.cfg.gate.changed(), if trigger && gate_open => {
                        if changed.is_err() {
                            gate_open = false;
                            continue;
                        }
                        ticker.reset();
                        self.due = Some(Instant::now());
                        break;
                    }
                }
            }
        }
        self.finish();
    }

    /// Upstream `doProbe`: probes once and records the result; false when the worker should stop.
    pub(crate) async fn do_probe(&mut self) -> bool {
        // A due time is for this call only: a call that probes nothing discards it.
        let due = self.due.take();
        let info = self.cfg.info.borrow_and_update().clone();
        let gate = self.cfg.gate.borrow_and_update().clone();
        if info.id.is_empty() {
            return true; // not created yet
        }
        if info.id != self.container_id {
            if !self.container_id.is_empty() {
                self.cfg.results.remove(&self.container_id);
            }
            self.container_id = info.id.clone();
            self.reported = None;
            self.report(self.cfg.kind.initial_result());
            self.on_hold = false; // a new container: resume probing
        }
        if self.on_hold {
            return true;
        }
        let pod = self.cfg.pod.borrow().clone();
        let started_at = match info.state {
            RunState::Running { started_at } => started_at,
            RunState::Waiting | RunState::Terminated => {
                self.report(ProbeResult::Failure);
                // Stop for good when the container will not be restarted.
                return info.state != RunState::Terminated
                    || podutil::restart_policy(&pod) != "Never"
                    || self.cfg.restartable_init;
            }
        };
        let kind = self.cfg.kind;
        if pod.metadata.deletion_timestamp.is_some()
            && matches!(kind, ProbeKind::Liveness | ProbeKind::Startup)
        {
            // Graceful deletion: a last Success keeps the shutdown quiet; stop probing.
            debug!(probe = %kind, "pod deletion requested, setting probe result to success");
            self.report(ProbeResult::Success);
            return false;
        }
        let since_start = self
            .cfg
            .clock
            .wall_now()
            .duration_since(started_at)
            .unwrap_or_default();
        if since_start.as_secs() < u64::from(self.spec.initial_delay_seconds.unsigned_abs()) {
            return true;
        }
        let started = gate.is_started(&self.container_id);
        // The startup probe stops once started; the others wait for it.
        if started == (kind == ProbeKind::Startup) {
            return true;
        }
        let begin = Instant::now();
        self.last_delay = due.map(|d| begin.saturating_duration_since(d));
        let result = self.probe(&pod, &info).await;
        let ms = |d: Duration| d.as_micros() as f64 / 1000.0;
        debug!(
            delay_ms = self.last_delay.map(ms),
            took_ms = ms(begin.elapsed()),
            result = ?result,
            "probe ran"
        );
        let Some(result) = result else {
            return true; // the attempt errored: throw it away
        };
        self.record_metrics(&pod, result, begin.elapsed());
        if let Some(result) = self.thresholds.observe(result, &self.spec) {
            self.report(result);
            if (kind == ProbeKind::Liveness && result == ProbeResult::Failure)
                || kind == ProbeKind::Startup
            {
                // The container will be restarted (or has started): hold until a new container.
                self.on_hold = true;
                self.thresholds.reset_run();
            }
        }
        true
    }

    /// Upstream's `prober_probe_total` per result and, for successes, `prober_probe_duration_seconds`.
    fn record_metrics(&self, pod: &Pod, result: ProbeResult, took: Duration) {
        let m = crate::metrics::get();
        let (kind, container) = (self.cfg.kind.as_str(), self.cfg.container.name.as_str());
        let (name, namespace) = (podutil::name(pod), podutil::namespace(pod));
        let label = match result {
            ProbeResult::Success => "successful",
            ProbeResult::Failure => "failed",
            ProbeResult::Unknown => "unknown",
        };
        m.prober_probe_total
            .with_label_values(&[kind, label, container, name, namespace, podutil::uid(pod)])
            .inc();
        if result == ProbeResult::Success {
            m.prober_probe_duration
                .with_label_values(&[kind, container, name, namespace])
                .observe(took.as_secs_f64());
        }
    }

    /// Upstream `prober.probe`: up to [`MAX_PROBE_RETRIES`] attempts while they error, then the
    /// events and the mapping of the outcome to a result (`None`: errored, no result).
    async fn probe(&self, pod: &Pod, info: &ContainerInfo) -> Option<ProbeResult> {
        let kind = self.cfg.kind;
        let req = ProbeRequest {
            kind,
            probe: &self.cfg.probe,
            pod,
            container: &self.cfg.container,
            container_id: &self.container_id,
            pod_ip: info.pod_ip.as_deref(),
            timeout: self.spec.timeout,
        };
        let mut last = self.cfg.prober.probe(&req).await;
        for _ in 1..MAX_PROBE_RETRIES {
            if last.is_ok() {
                break;
            }
            last = self.cfg.prober.probe(&req).await;
        }
        match last {
            Err(e) => {
                debug!(probe = %kind, error = %e, "probe errored");
                self.event(
                    pod,
                    events::CONTAINER_UNHEALTHY,
                    format!(
                        "{kind} probe errored and resulted in {} state: {e}",
                        e.outcome()
                    ),
                );
                None
            }
            Ok((Outcome::Success, _)) => Some(ProbeResult::Success),
            Ok((Outcome::Warning, output)) => {
                self.event(
                    pod,
                    events::CONTAINER_PROBE_WARNING,
                    format!("{kind} probe warning: {output}"),
                );
                Some(ProbeResult::Success)
            }
            Ok((Outcome::Failure, output)) => {
                debug!(probe = %kind, %output, "probe failed");
                self.event(
                    pod,
                    events::CONTAINER_UNHEALTHY,
                    format!("{kind} probe failed: {output}"),
                );
                Some(ProbeResult::Failure)
            }
            Ok((Outcome::Unknown, _)) => Some(ProbeResult::Failure),
        }
    }

    fn event(&self, pod: &Pod, reason: &str, message: String) {
        let name = &self.cfg.container.name;
        let field_path = if self.cfg.restartable_init {
            format!("spec.initContainers{{{name}}}")
        } else {
            format!("spec.containers{{{name}}}")
        };
        self.cfg.events.warning(pod, field_path, reason, message);
    }

    /// `resultsManager.Set` for the current container; the startup worker also opens the gate of
    /// that container on Success.
    fn report(&mut self, result: ProbeResult) {
        self.cfg.results.set(&self.container_id, result);
        self.reported = Some(result);
        if result == ProbeResult::Success {
            if let Some(tx) = &self.cfg.gate_tx {
                tx.send_replace(StartupGate::Probing(Some(self.container_id.clone())));
            }
        }
    }

    /// Upstream's deferred cleanup: the results of the last container are forgotten (without an
    /// update) and a stopped startup worker no longer holds the other probes back.
    fn finish(&mut self) {
        if !self.container_id.is_empty() {
            self.cfg.results.remove(&self.container_id);
        }
        if let Some(tx) = &self.cfg.gate_tx {
            tx.send_replace(StartupGate::Open);
        }
        debug!(probe = %self.cfg.kind, "probe worker stopped");
    }
}

#[cfg(test)]
#[path = "worker_tests.rs"]
pub(crate) mod tests;

#[cfg(test)]
mod delay_tests {
    use super::tests::{ok, Script};
    use super::*;

    fn worker(info: ContainerInfo) -> (Worker<Script>, Script, watch::Sender<ContainerInfo>) {
        let (info_tx, info_rx) = watch::channel(info);
        let (_, gate) = watch::channel(StartupGate::Open);
        let (_, pod) = watch::channel(Arc::new(Pod::default()));
        let (tx, _) = tokio::sync::mpsc::unbounded_channel();
        let script = Script::new(ok());
        let w = Worker::new(WorkerConfig {
            kind: ProbeKind::Liveness,
            probe: Probe::default(),
            container: Container::default(),
            restartable_init: false,
            pod,
            info: info_rx,
            gate,
            gate_tx: None,
            results: ResultsWriter::new(tx, "uid".into(), "main".into(), ProbeKind::Liveness),
            events: EventSink::Capture(Arc::default()),
            prober: script.clone(),
            clock: Clock::now(),
        });
        (w, script, info_tx)
    }

    #[tokio::test(start_paused = true)]
    async fn delay_is_measured_from_the_due_time_to_the_probe() {
        let (mut w, script, info) = worker(ContainerInfo::default());
        let ms = Duration::from_millis;
        // Due while the container does not exist yet: nothing runs, the due time is dropped.
        w.due = Some(Instant::now());
        tokio::time::sleep(ms(700)).await;
        assert!(w.do_probe().await);
        assert_eq!((script.calls(), w.last_delay), (0, None));
        info.send_replace(ContainerInfo {
            id: "c1".into(),
            state: RunState::Running {
                started_at: SystemTime::now() - Duration::from_secs(60),
            },
            pod_ip: None,
        });
        assert!(w.do_probe().await);
        assert_eq!((script.calls(), w.last_delay), (1, None));
        // Due 250 ms ago: that is the delay.
        w.due = Some(Instant::now());
        tokio::time::sleep(ms(250)).await;
        assert!(w.do_probe().await);
        assert_eq!((script.calls(), w.last_delay), (2, Some(ms(250))));
    }

    /// `run` takes the due time from the tick: tokio's interval returns the scheduled instant
    /// even when polled late (and with `Skip` the next tick stays on the period grid).
    #[tokio::test(start_paused = true)]
    async fn a_late_tick_returns_its_scheduled_instant() {
        let ms = Duration::from_millis;
        let start = Instant::now();
        let mut ticker = tokio::time::interval_at(start + ms(1000), ms(1000));
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        tokio::time::sleep(ms(2400)).await;
        assert_eq!(ticker.tick().await, start + ms(1000));
        assert_eq!(ticker.tick().await, start + ms(3000));
    }
}
