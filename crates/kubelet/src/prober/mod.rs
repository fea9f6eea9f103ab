//! Container probes: liveness, readiness and startup (upstream `pkg/kubelet/prober`:
//! `prober_manager.go`, `worker.go`, `prober.go`, `results/`; handlers from `pkg/probe`).
//!
//! Shape: a [`ProbeManager`] task owns one worker task per (pod, container, probe kind); others
//! reach it through a cheap cloneable [`ProbeHandle`] (commands over an unbounded channel, so the
//! SyncLoop never waits on it). Results leave as [`ResultUpdate`] events on the receiver returned
//! by [`ProbeManager::new`], sent only when a result changes (upstream results manager semantics).
//!
//! How the SyncLoop is expected to drive it:
//! - [`ProbeHandle::add_pod`] when it syncs a pod that is not terminating (upstream `SyncPod` ->
//!   `AddPod`); idempotent; a later call with the same UID refreshes the pod the workers see (its
//!   `deletionTimestamp`, which makes liveness and startup workers stop quietly, as upstream's
//!   in-place pod updates do);
//! - [`ProbeHandle::update_container`] whenever a container's ID, state or the pod IP changes
//!   (from PLEG / the runtime status): workers never poll the runtime;
//! - [`ProbeHandle::stop_liveness_and_startup`] when the pod starts terminating (upstream
//!   `SyncTerminatingPod`), [`ProbeHandle::remove_pod`] when it is removed or reaches a terminal
//!   phase (upstream workers exit on a terminal phase), [`ProbeHandle::cleanup_pods`] from
//!   housekeeping;
//! - keep a [`ProbeResults`] fed from the update stream and consult it when computing pod actions
//!   (liveness/startup Failure: restart, with [`probe_grace_override`]) and statuses
//!   ([`ProbeResults::is_started`], [`ProbeResults::is_ready`]); a readiness or startup update
//!   should also wake the pod's worker so the status is recomputed (upstream `handleProbeSync`).
//!
//! Only regular containers and restartable init containers (sidecars) are probed, as upstream.

pub mod grpc;
pub mod handlers;
pub mod http;
pub mod probe;
pub mod results;
pub mod url;
pub mod worker;

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use rkubelet_cri::CriClient;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info_span, warn, Instrument};

use crate::events::Recorder;
use crate::podutil;

pub use handlers::{Handlers, Outcome, ProbeError, ProbeRequest, Prober};
pub use results::{ProbeKind, ProbeResult, ProbeResults, ResultUpdate};
pub use worker::{ContainerInfo, ProbeSpec, RunState, StartupGate, Thresholds};

use results::ResultsWriter;
use worker::{Clock, EventSink, Worker, WorkerConfig};

/// The probe of `kind` in a container spec, if any.
pub fn probe_of(container: &Container, kind: ProbeKind) -> Option<&Probe> {
    match kind {
        ProbeKind::Liveness => container.liveness_probe.as_ref(),
        ProbeKind::Readiness => container.readiness_probe.as_ref(),
        ProbeKind::Startup => container.startup_probe.as_ref(),
    }
}

/// An init container with `restartPolicy: Always` (upstream `IsRestartableInitContainer`).
pub fn is_restartable_init(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// The containers that get probe workers, each with "is a restartable init container": regular
/// containers, then sidecars (upstream
/// `append(pod.Spec.Containers, getRestartableInitContainers(pod)...)`).
pub fn probed_containers(pod: &Pod) -> impl Iterator<Item = (&Container, bool)> {
    podutil::containers(pod).iter().map(|c| (c, false)).chain(
        podutil::init_containers(pod)
            .iter()
            .filter(|c| is_restartable_init(c))
            .map(|c| (c, true)),
    )
}

/// The probe-level `terminationGracePeriodSeconds` of a container's liveness or startup probe
/// (readiness probes cannot set one). Upstream `setTerminationGracePeriod` uses it when the kill is
/// caused by that probe, after `deletionGracePeriodSeconds` and before the pod's
/// `terminationGracePeriodSeconds`.
pub fn probe_grace_override(pod: &Pod, container_name: &str, kind: ProbeKind) -> Option<i64> {
    let container = podutil::containers(pod)
        .iter()
        .chain(podutil::init_containers(pod))
        .find(|c| c.name == container_name)?;
    match kind {
        ProbeKind::Liveness | ProbeKind::Startup => {
            probe_of(container, kind)?.termination_grace_period_seconds
        }
        ProbeKind::Readiness => None,
    }
}

enum Command {
    AddPod(Arc<Pod>),
    RemovePod(String),
    StopLivenessAndStartup(String),
    CleanupPods(HashSet<String>),
    UpdateContainer {
        pod_uid: String,
        container_name: String,
        info: ContainerInfo,
    },
}

/// Cheap cloneable handle onto the [`ProbeManager`] (upstream `prober.Manager`). Calls never block
/// and never fail; once the manager has stopped they are ignored.
#[derive(Debug, Clone)]
pub struct ProbeHandle {
    tx: mpsc::UnboundedSender<Command>,
}

impl ProbeHandle {
    fn send(&self, cmd: Command) {
        if self.tx.send(cmd).is_err() {
            debug!("probe manager is gone; command dropped");
        }
    }

    /// Upstream `AddPod`: starts the workers this pod's probes need and are not running yet.
    pub fn add_pod(&self, pod: Arc<Pod>) {
        self.send(Command::AddPod(pod));
    }

    /// Upstream `RemovePod`: stops every worker of the pod.
    pub fn remove_pod(&self, pod_uid: &str) {
        self.send(Command::RemovePod(pod_uid.to_string()));
    }

    /// Upstream `StopLivenessAndStartup`: during termination, liveness and startup probes of the
    /// regular containers must not cause restarts; readiness keeps reporting.
    pub fn stop_liveness_and_startup(&self, pod_uid: &str) {
        self.send(Command::StopLivenessAndStartup(pod_uid.to_string()));
    }

    /// Upstream `CleanupPods`: stops the workers of every pod not in `desired`.
    pub fn cleanup_pods(&self, desired: HashSet<String>) {
        self.send(Command::CleanupPods(desired));
    }

    /// The current ID, state and pod IP of one container; ignored for pods or containers without
    /// probes, and for pods not added yet. Sending the same info again is free, so the simplest
    /// correct use is: on every sync of a pod, `add_pod` and then `update_container` for each of
    /// its containers (an update sent before `add_pod` is dropped).
    pub fn update_container(&self, pod_uid: &str, container_name: &str, info: ContainerInfo) {
        self.send(Command::UpdateContainer {
            pod_uid: pod_uid.to_string(),
            container_name: container_name.to_string(),
            info,
        });
    }
}

struct ContainerChannels {
    info: watch::Sender<ContainerInfo>,
    gate: watch::Sender<StartupGate>,
}

struct RunningWorker {
    cancel: CancellationToken,
    generation: u64,
    restartable_init: bool,
}

struct PodProbes {
    pod: watch::Sender<Arc<Pod>>,
    containers: HashMap<String, ContainerChannels>,
    workers: HashMap<(String, ProbeKind), RunningWorker>,
}

impl PodProbes {
    fn stop_all(&self) {
        for w in self.workers.values() {
            w.cancel.cancel();
        }
    }
}

/// Identifies a worker task when it ends.
struct WorkerKey {
    pod_uid: String,
    container: String,
    kind: ProbeKind,
    generation: u64,
}

/// The probe manager task (upstream `prober.manager`): owns the workers and their channels.
pub struct ProbeManager<P: Prober = Handlers> {
    prober: P,
    events: EventSink,
    results: mpsc::UnboundedSender<ResultUpdate>,
    commands: mpsc::UnboundedReceiver<Command>,
    clock: Clock,
    root: CancellationToken,
    pods: HashMap<String, PodProbes>,
    workers: JoinSet<WorkerKey>,
    generation: u64,
}

impl ProbeManager<Handlers> {
    /// The manager with the real handlers (exec through `cri`), its handle, and the stream of
    /// result changes for the SyncLoop.
    pub fn new(
        cri: CriClient,
        recorder: Recorder,
    ) -> (Self, ProbeHandle, mpsc::UnboundedReceiver<ResultUpdate>) {
        Self::with_prober(Handlers::new(cri), recorder)
    }
}

impl<P: Prober> ProbeManager<P> {
    /// The manager with any [`Prober`] (tests use a scripted one).
    pub fn with_prober(
        prober: P,
        recorder: Recorder,
    ) -> (Self, ProbeHandle, mpsc::UnboundedReceiver<ResultUpdate>) {
        Self::with_sink(prober, EventSink::Recorder(recorder))
    }

    pub(crate) fn with_sink(
        prober: P,
        events: EventSink,
    ) -> (Self, ProbeHandle, mpsc::UnboundedReceiver<ResultUpdate>) {
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (res_tx, res_rx) = mpsc::unbounded_channel();
        (
            ProbeManager {
                prober,
                events,
                results: res_tx,
                commands: cmd_rx,
                clock: Clock::now(),
                root: CancellationToken::new(),
                pods: HashMap::new(),
                workers: JoinSet::new(),
                generation: 0,
            },
            ProbeHandle { tx: cmd_tx },
            res_rx,
        )
    }

    /// Serves commands until cancelled or until every handle is dropped, then stops all workers
    /// and waits for them.
    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                cmd = self.commands.recv() => match cmd {
                    Some(cmd) => self.handle(cmd),
                    None => break,
                },
                Some(done) = self.workers.join_next(), if !self.workers.is_empty() => {
                    match done {
                        Ok(key) => self.reap(key),
                        Err(e) => error!(error = %e, "probe worker task failed"),
                    }
                }
            }
        }
        self.root.cancel();
        while self.workers.join_next().await.is_some() {}
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::AddPod(pod) => self.add_pod(pod),
            Command::RemovePod(uid) => {
                if let Some(p) = self.pods.remove(&uid) {
                    p.stop_all();
                }
            }
            Command::StopLivenessAndStartup(uid) => {
                if let Some(p) = self.pods.get(&uid) {
                    for ((_, kind), w) in &p.workers {
                        if *kind != ProbeKind::Readiness && !w.restartable_init {
                            w.cancel.cancel();
                        }
                    }
                }
            }
            Command::CleanupPods(desired) => {
                self.pods.retain(|uid, p| {
                    let keep = desired.contains(uid);
                    if !keep {
                        p.stop_all();
                    }
                    keep
                });
            }
            Command::UpdateContainer {
                pod_uid,
                container_name,
                info,
            } => {
                let channels = self
                    .pods
                    .get(&pod_uid)
                    .and_then(|p| p.containers.get(&container_name));
                if let Some(c) = channels {
                    c.info.send_if_modified(|cur| {
                        let changed = *cur != info;
                        if changed {
                            *cur = info;
                        }
                        changed
                    });
                }
            }
        }
    }

    fn add_pod(&mut self, pod: Arc<Pod>) {
        let uid = podutil::uid(&pod).to_string();
        if uid.is_empty() {
            warn!(pod = %podutil::describe(&pod), "pod without UID is not probed");
            return;
        }
        let has_probes = probed_containers(&pod)
            .any(|(c, _)| ProbeKind::ALL.iter().any(|k| probe_of(c, *k).is_some()));
        if !has_probes && !self.pods.contains_key(&uid) {
            return;
        }
        let entry = self.pods.entry(uid.clone()).or_insert_with(|| PodProbes {
            pod: watch::Sender::new(pod.clone()),
            containers: HashMap::new(),
            workers: HashMap::new(),
        });
        entry.pod.send_replace(pod.clone());
        for (container, restartable_init) in probed_containers(&pod) {
            let has_startup = container.startup_probe.is_some();
            // Upstream creates startup, readiness, liveness in this order.
            for kind in [
                ProbeKind::Startup,
                ProbeKind::Readiness,
                ProbeKind::Liveness,
            ] {
                let Some(probe) = probe_of(container, kind) else {
                    continue;
                };
                let key = (container.name.clone(), kind);
                if entry.workers.contains_key(&key) {
                    continue;
                }
                let channels = entry
                    .containers
                    .entry(container.name.clone())
                    .or_insert_with(|| ContainerChannels {
                        info: watch::Sender::new(ContainerInfo::default()),
                        gate: watch::Sender::new(if has_startup {
                            StartupGate::Probing(None)
                        } else {
                            StartupGate::Open
                        }),
                    });
                if kind == ProbeKind::Startup {
                    // A (re)started startup worker holds the others back until it succeeds.
                    channels.gate.send_replace(StartupGate::Probing(None));
                }
                self.generation += 1;
                let generation = self.generation;
                let cancel = self.root.child_token();
                let worker = Worker::new(WorkerConfig {
                    kind,
                    probe: probe.clone(),
                    container: container.clone(),
                    restartable_init,
                    pod: entry.pod.subscribe(),
                    info: channels.info.subscribe(),
                    gate: channels.gate.subscribe(),
                    gate_tx: (kind == ProbeKind::Startup).then(|| channels.gate.clone()),
                    results: ResultsWriter::new(
                        self.results.clone(),
                        uid.clone(),
                        container.name.clone(),
                        kind,
                    ),
                    events: self.events.clone(),
                    prober: self.prober.clone(),
                    clock: self.clock,
                });
                let span = info_span!(
                    "probe",
                    pod = %podutil::describe(&pod),
                    uid = %uid,
                    container = %container.name,
                    probe = %kind,
                );
                let done = WorkerKey {
                    pod_uid: uid.clone(),
                    container: container.name.clone(),
                    kind,
                    generation,
                };
                let token = cancel.clone();
                self.workers.spawn(
                    async move {
                        if AssertUnwindSafe(worker.run(token))
                            .catch_unwind()
                            .await
                            .is_err()
                        {
                            error!("probe worker panicked");
                        }
                        done
                    }
                    .instrument(span),
                );
                entry.workers.insert(
                    key,
                    RunningWorker {
                        cancel,
                        generation,
                        restartable_init,
                    },
                );
            }
        }
    }

    /// Upstream `removeWorker`: a worker that ended (by itself or stopped) is forgotten, so a
    /// later `add_pod` may start it again.
    fn reap(&mut self, key: WorkerKey) {
        if let Some(p) = self.pods.get_mut(&key.pod_uid) {
            let k = (key.container, key.kind);
            if p.workers.get(&k).map(|w| w.generation) == Some(key.generation) {
                p.workers.remove(&k);
            }
        }
    }
}

#[cfg(test)]
mod tests;
