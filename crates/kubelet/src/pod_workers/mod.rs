//! Pod workers (upstream `pod_workers.go`): one lifecycle record per pod UID and one task per
//! pod that is being synced or torn down.
//!
//! The record is upstream's `podSyncStatus`: where the pod is in its life (waiting for its name,
//! syncing, terminating, terminated, finished, or rejected at admission), whether it is a pod only
//! the runtime knows, whether its API deletion was requested, and when it is due for its next
//! sync. It is the one place that state lives; the SyncLoop keeps only what sources want (the pod
//! manager) and routes. Workers run a [`PodSyncer`], upstream's `podSyncer` interface with its four
//! operations, so the lifecycle can be tested without a runtime.

mod worker;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::podutil;
use crate::runtime::manager::RuntimePodRef;
use crate::runtime::RuntimeError;
pub use crate::status::compute::PodFailure;
use worker::Work;
pub use worker::ERROR_RETRY;

/// The result of one sync.
#[derive(Debug, Default)]
pub struct SyncOutcome {
    /// The pod reached Succeeded or Failed: the worker stops it and never starts it again.
    pub terminal: bool,
    /// Sync again this soon (backoff ends, or an error to retry); None means the regular resync.
    pub retry_after: Option<Duration>,
}

/// What a worker runs (upstream `podSyncer`). `State` is what the syncer keeps for one pod
/// between calls; the worker owns it.
pub trait PodSyncer: Send + Sync + 'static {
    type State: Send + 'static;

    /// `after`: when an earlier worker of the same UID finished (a static pod whose manifest
    /// came back unchanged, a pod wanted again while it was torn down). The new state must not
    /// act on a runtime read older than that: it would show the containers and sandboxes that
    /// worker removed, and the pod would start with their attempt and restart counts.
    fn new_state(&self, pod: &Pod, after: Option<Instant>) -> Self::State;

    /// Upstream `SyncPod`: one pass towards the spec.
    ///
    /// `terminating` is cancelled when the pod begins terminating meanwhile: the syncer stops
    /// starting containers, leaving an image pull or a postStart hook it waits on, and returns;
    /// the worker then terminates the pod. Upstream cancels the sync's context.
    fn sync_pod(
        &self,
        state: &mut Self::State,
        pod: &Arc<Pod>,
        terminating: &CancellationToken,
    ) -> impl Future<Output = SyncOutcome> + Send;

    /// Upstream `SyncTerminatingPod`: stop every container with the grace period (the override,
    /// else the pod's own) and publish the final status, `Failed` as `failure` says when the
    /// kubelet fails the pod (an eviction). Retried until it succeeds.
    ///
    /// `shortened` is cancelled when a shorter grace period arrives (a force delete while the
    /// pod stops): the syncer stops waiting for the containers and returns an error, and the
    /// worker runs it again with the newest pod and grace. Upstream cancels the sync's context.
    fn sync_terminating_pod(
        &self,
        state: &mut Self::State,
        pod: &Arc<Pod>,
        grace: Option<Duration>,
        failure: Option<&PodFailure>,
        shortened: &CancellationToken,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    /// Upstream `SyncTerminatingRuntimePod`: a pod no source wants and only the runtime knows;
    /// there is no spec (no hooks, no status), only what the runtime has.
    fn sync_terminating_runtime_pod(
        &self,
        pod: &RuntimePodRef,
        grace: Duration,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    /// Upstream `SyncTerminatedPod`: everything stopped; remove the pod cgroup and let the
    /// status manager delete a deleted pod's object, then remove containers, sandboxes, volumes
    /// and the pod directory, and forget the pod's status.
    fn sync_terminated_pod(
        &self,
        state: &mut Self::State,
        pod: &Arc<Pod>,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send;
}

/// What workers report to the SyncLoop.
#[derive(Debug)]
pub enum WorkerEvent {
    /// A sync finished; run the next one after `retry_after` (None: the regular resync period).
    Synced {
        uid: String,
        retry_after: Option<Duration>,
    },
    /// Every container is stopped; clean up follows.
    Terminated { uid: String },
    /// Terminated and cleaned up: the worker is gone and the pod's name is free again.
    Finished {
        uid: String,
        /// The pod as the worker last knew it (deletion timestamp included); None for a
        /// runtime-only pod.
        pod: Option<Arc<Pod>>,
    },
}

/// Where a pod is in its life (upstream: `podSyncStatus`'s working / terminating / terminated /
/// finished flags, as one enum so impossible combinations cannot be written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Admission turned it down; it keeps its Failed status until its source drops it.
    Rejected,
    /// Its full name is still held by another UID that is terminating.
    WaitingForName,
    Syncing,
    /// Being stopped with this grace period; it can only get shorter (upstream
    /// `calculateEffectiveGracePeriod`).
    Terminating {
        grace: Duration,
    },
    /// Stopped; its worker is cleaning up.
    Terminated,
    /// Cleaned up and its worker gone, at this time. Kept until a runtime listing taken after
    /// it, so housekeeping does not take a stale listing for a pod to clean up again.
    Finished {
        at: Instant,
    },
}

/// One pod's lifecycle record.
#[derive(Debug)]
pub struct PodRecord {
    /// The newest spec; None for a pod only the runtime knows.
    pub pod: Option<Arc<Pod>>,
    pub full_name: String,
    pub phase: Phase,
    /// Deleted in the API, terminated, and its object's deletion requested: a later update of it
    /// is our own status write coming back and must not start another termination.
    pub deleted_in_api: bool,
    /// When the pod is due for its next sync (upstream's work queue).
    pub next_sync: Option<Instant>,
    /// The same UID was wanted again while terminating (upstream `restartRequested`).
    restart: Option<Arc<Pod>>,
    /// When this UID's previous worker finished (a pod waiting for its name after one).
    after: Option<Instant>,
    worker: Option<watch::Sender<Work>>,
}

impl PodRecord {
    fn new(pod: Option<Arc<Pod>>, full_name: String, phase: Phase) -> Self {
        PodRecord {
            pod,
            full_name,
            phase,
            deleted_in_api: false,
            next_sync: None,
            restart: None,
            after: None,
            worker: None,
        }
    }

    /// The pod, while a worker stops it.
    fn stopping_pod(&self) -> Option<&Arc<Pod>> {
        match (self.has_worker(), self.phase) {
            (true, Phase::Terminating { .. }) => self.pod.as_ref(),
            _ => None,
        }
    }

    /// True while a worker task runs for the pod.
    pub fn has_worker(&self) -> bool {
        self.worker.is_some()
    }
}

/// The lifecycle table and the worker tasks, owned by the SyncLoop.
pub struct PodWorkers<S: PodSyncer> {
    syncer: Arc<S>,
    records: HashMap<String, PodRecord>,
    tasks: JoinSet<()>,
    events: mpsc::UnboundedSender<WorkerEvent>,
    cancel: CancellationToken,
    /// How many workers have finished since start (housekeeping releases freed heap after).
    finished_total: u64,
}

impl<S: PodSyncer> PodWorkers<S> {
    pub fn new(
        syncer: Arc<S>,
        events: mpsc::UnboundedSender<WorkerEvent>,
        cancel: CancellationToken,
    ) -> Self {
        PodWorkers {
            syncer,
            records: HashMap::new(),
            tasks: JoinSet::new(),
            events,
            cancel,
            finished_total: 0,
        }
    }

    /// How many workers have finished since start.
    pub fn finished_total(&self) -> u64 {
        self.finished_total
    }

    pub fn get(&self, uid: &str) -> Option<&PodRecord> {
        self.records.get(uid)
    }

    pub fn phase(&self, uid: &str) -> Option<Phase> {
        self.records.get(uid).map(|r| r.phase)
    }

    /// Any record at all: the pod is wanted, running, or was cleaned up after the last listing.
    pub fn knows(&self, uid: &str) -> bool {
        self.records.contains_key(uid)
    }

    /// Every UID with a record.
    pub fn uids(&self) -> impl Iterator<Item = &str> {
        self.records.keys().map(String::as_str)
    }

    pub fn has_worker(&self, uid: &str) -> bool {
        self.records.get(uid).is_some_and(PodRecord::has_worker)
    }

    /// Pods holding node resources for admission: neither rejected nor finished.
    pub fn holds_resources(&self, uid: &str) -> bool {
        !matches!(
            self.phase(uid),
            Some(Phase::Rejected) | Some(Phase::Finished { .. })
        )
    }

    /// The pod under `uid` if its containers are still being stopped (upstream
    /// `IsPodForMirrorPodTerminatingByFullName` asks this of the static pods): their mirror pods
    /// stay until they have terminated. A terminated pod whose worker is still removing its
    /// sandbox, logs and directory is not stopping: upstream deletes its mirror then, as an API
    /// pod's object goes before that cleanup (`sync::cleanup_pod`).
    pub fn stopping_pod(&self, uid: &str) -> Option<&Arc<Pod>> {
        self.records.get(uid).and_then(PodRecord::stopping_pod)
    }

    /// Number of live worker tasks.
    pub fn workers(&self) -> usize {
        self.records.values().filter(|r| r.has_worker()).count()
    }

    /// True while the full name is held by another UID's worker, or by this UID's own worker that
    /// is terminating: the pod must wait for `Finished`.
    fn name_busy(&self, full_name: &str, uid: &str) -> bool {
        self.records.iter().any(|(u, r)| {
            r.has_worker() && r.full_name == full_name && (u != uid || r.phase != Phase::Syncing)
        })
    }

    /// A pod its source added, or added again after removing it (upstream `SyncPodCreate`):
    /// [`Self::update`], and a pod still being torn down is restarted once it finished
    /// (upstream `restartRequested`).
    pub fn add(&mut self, pod: Arc<Pod>) {
        self.update_with(pod, true);
    }

    /// A wanted pod, new or updated: start its worker (or make it wait for its name), or hand the
    /// worker the newest spec. An update of a pod being torn down does not restart it (an
    /// evicted pod's own status coming back through the watch, a label change): only a pending
    /// restart takes the newer spec.
    pub fn update(&mut self, pod: Arc<Pod>) {
        self.update_with(pod, false);
    }

    fn update_with(&mut self, pod: Arc<Pod>, added: bool) {
        let uid = podutil::uid(&pod).to_string();
        let full_name = podutil::full_name(&pod);
        let busy = self.name_busy(&full_name, &uid);
        match self.records.get_mut(&uid) {
            Some(r) => match r.phase {
                Phase::Syncing => {
                    if let Some(w) = &r.worker {
                        w.send_replace(Work::Sync(pod.clone()));
                    }
                    r.pod = Some(pod);
                }
                Phase::Rejected => r.pod = Some(pod),
                Phase::WaitingForName if busy => r.pod = Some(pod),
                Phase::WaitingForName => {
                    let after = r.after;
                    self.records.remove(&uid);
                    self.start(uid, pod, full_name, false, after);
                }
                Phase::Terminating { .. } | Phase::Terminated => {
                    if added || r.restart.is_some() {
                        r.restart = Some(pod);
                    }
                }
                // The same UID again before a runtime listing showed its cleanup: the PLEG cache
                // may still hold the read from before the removal.
                Phase::Finished { at } => {
                    self.records.remove(&uid);
                    self.start(uid, pod, full_name, busy, Some(at));
                }
            },
            None => self.start(uid, pod, full_name, busy, None),
        }
    }

    fn start(
        &mut self,
        uid: String,
        pod: Arc<Pod>,
        full_name: String,
        busy: bool,
        after: Option<Instant>,
    ) {
        if busy {
            let mut r = PodRecord::new(Some(pod), full_name, Phase::WaitingForName);
            r.after = after;
            self.records.insert(uid, r);
        } else {
            self.spawn(
                uid,
                Some(pod.clone()),
                full_name,
                Work::Sync(pod),
                Phase::Syncing,
                after,
            );
        }
    }

    /// Wakes a syncing pod's worker with its newest spec; anything else ignores the wake.
    pub fn sync(&mut self, uid: &str) {
        if let Some(r) = self.records.get(uid) {
            if let (Phase::Syncing, Some(w), Some(pod)) = (r.phase, &r.worker, &r.pod) {
                w.send_replace(Work::Sync(pod.clone()));
            }
        }
    }

    /// Admission turned the pod down.
    pub fn reject(&mut self, pod: Arc<Pod>) {
        let uid = podutil::uid(&pod).to_string();
        let full_name = podutil::full_name(&pod);
        self.records
            .insert(uid, PodRecord::new(Some(pod), full_name, Phase::Rejected));
    }

    /// Stop the pod and remove everything it had (upstream `UpdatePod` with `SyncPodKill`), with
    /// `grace` (None: the pod's own, its deletion's if it has one). Termination is final: a pod
    /// already terminating goes on, and only a shorter grace period changes it: the worker
    /// stops the pod again with that one (a force delete of a pod stopping slowly).
    pub fn terminate(&mut self, pod: Arc<Pod>, grace: Option<Duration>) {
        self.terminate_with(pod, grace, None);
    }

    /// [`Self::terminate`], the kubelet failing the pod as it goes (upstream `KillPodOptions`
    /// with a `PodStatusFunc`, what an eviction sends). A pod already terminating is evicted
    /// too, as upstream's eviction manager counts it active, when the eviction's grace period
    /// is shorter: it is stopped again with that one (the failure goes with it unless it has
    /// one). False when nothing changes: the pod is neither syncing nor terminating (stopped,
    /// finished, unknown, or only the runtime knows it), or it already stops as fast.
    pub fn evict(&mut self, pod: Arc<Pod>, grace: Duration, failure: PodFailure) -> bool {
        let takes = self.records.get(podutil::uid(&pod)).is_some_and(|r| {
            r.pod.is_some()
                && match r.phase {
                    Phase::Syncing => true,
                    Phase::Terminating { grace: now } => effective_grace(&pod, Some(grace)) < now,
                    _ => false,
                }
        });
        if takes {
            self.terminate_with(pod, Some(grace), Some(failure));
        }
        takes
    }

    fn terminate_with(
        &mut self,
        pod: Arc<Pod>,
        grace: Option<Duration>,
        failure: Option<PodFailure>,
    ) {
        let uid = podutil::uid(&pod).to_string();
        let full_name = podutil::full_name(&pod);
        let grace = effective_grace(&pod, grace);
        let is_eviction = failure.is_some();
        let mut after = None;
        if let Some(r) = self.records.get_mut(&uid) {
            // A syncing pod starts terminating; a terminating one takes only a shorter grace
            // period, and not when only the runtime knows it (its worker has no spec).
            let takes = match r.phase {
                Phase::Syncing => true,
                Phase::Terminating { grace: now } => grace < now && r.pod.is_some(),
                _ => false,
            };
            match (&r.worker, r.phase) {
                (Some(w), phase) if takes => {
                    if let Phase::Terminating { grace: now } = phase {
                        info!(pod = %podutil::describe(&pod), from = ?now, to = ?grace, "grace period shortened");
                    }
                    // The kubelet's failure (an eviction) stays, whatever stops the pod after.
                    let failure = match &*w.borrow() {
                        Work::Terminate {
                            failure: Some(f), ..
                        } => Some(f.clone()),
                        _ => failure,
                    };
                    w.send_replace(Work::Terminate {
                        pod: pod.clone(),
                        grace: Some(grace),
                        failure,
                    });
                    r.phase = Phase::Terminating { grace };
                    r.pod = Some(pod);
                    // A removal cancels a restart the source asked for; an eviction is not
                    // the source's and leaves it (upstream's kill keeps `restartRequested`).
                    if !is_eviction {
                        r.restart = None;
                    }
                    r.next_sync = None;
                    return;
                }
                // Never started: it is torn down like a pod with nothing running (its API
                // deletion still has to complete).
                (_, Phase::WaitingForName) => after = r.after,
                _ => {
                    r.restart = None;
                    r.next_sync = None;
                    return;
                }
            }
        }
        // No record, or a record that never started: a worker that only terminates.
        let work = Work::Terminate {
            pod: pod.clone(),
            grace: Some(grace),
            failure,
        };
        self.spawn(
            uid,
            Some(pod),
            full_name,
            work,
            Phase::Terminating { grace },
            after,
        );
    }

    /// Stops and removes a pod only the runtime knows (upstream `SyncKnownPods` +
    /// `SyncTerminatingRuntimePod`); no API object is invented for it.
    pub fn terminate_runtime_pod(&mut self, pod: RuntimePodRef, grace: Duration) {
        if self.records.contains_key(&pod.uid) {
            return;
        }
        let uid = pod.uid.clone();
        let full_name = format!("{}_{}", pod.name, pod.namespace);
        self.spawn(
            uid,
            None,
            full_name,
            Work::TerminateRuntime { pod, grace },
            Phase::Terminating { grace },
            None,
        );
    }

    /// The source dropped a pod that never ran (rejected, or waiting for its name): its record
    /// goes and nothing needs stopping. False when the pod has (or had) a worker.
    pub fn drop_unstarted(&mut self, uid: &str) -> bool {
        match self.phase(uid) {
            Some(Phase::Rejected) | Some(Phase::WaitingForName) => {
                self.records.remove(uid);
                true
            }
            _ => false,
        }
    }

    /// The pod's next sync is due after `after`.
    pub fn schedule(&mut self, uid: &str, after: Duration) {
        if let Some(r) = self.records.get_mut(uid) {
            if r.phase == Phase::Syncing {
                r.next_sync = Some(Instant::now() + after);
            }
        }
    }

    /// Pods whose next sync is due; their schedule is cleared.
    pub fn take_due(&mut self, now: Instant) -> Vec<String> {
        let mut due = Vec::new();
        for (uid, r) in self.records.iter_mut() {
            if r.next_sync.is_some_and(|t| t <= now) {
                r.next_sync = None;
                due.push(uid.clone());
            }
        }
        due
    }

    /// The source no longer wants the pod: it is not resynced any more, and a deletion recorded
    /// for a finished pod is forgotten.
    pub fn unwanted(&mut self, uid: &str) {
        if let Some(r) = self.records.get_mut(uid) {
            r.next_sync = None;
            r.deleted_in_api = false;
        }
    }

    /// A worker stopped every container.
    pub fn terminated(&mut self, uid: &str) {
        if let Some(r) = self.records.get_mut(uid) {
            if matches!(r.phase, Phase::Terminating { .. }) {
                r.phase = Phase::Terminated;
            }
        }
    }

    /// A worker finished: the record turns Finished and the name is free. Returns the pods to
    /// start now (this UID wanted again, or another waiting for the name).
    pub fn finished(&mut self, uid: &str, pod: Option<&Pod>) -> Vec<Arc<Pod>> {
        self.reap();
        self.finished_total += 1;
        let Some(r) = self.records.get_mut(uid) else {
            return Vec::new();
        };
        r.worker = None;
        r.phase = Phase::Finished { at: Instant::now() };
        r.deleted_in_api = pod.is_some_and(|p| p.metadata.deletion_timestamp.is_some());
        let full_name = r.full_name.clone();
        let mut next: Vec<Arc<Pod>> = r.restart.take().into_iter().collect();
        next.extend(
            self.records
                .values()
                .filter(|r| r.phase == Phase::WaitingForName && r.full_name == full_name)
                .filter_map(|r| r.pod.clone()),
        );
        next
    }

    /// Forgets finished pods cleaned up before a runtime listing taken at `listed`, except those
    /// whose API deletion may still echo back through the watch.
    pub fn forget_finished(&mut self, listed: Instant) {
        self.records.retain(|_, r| match r.phase {
            Phase::Finished { at } => at >= listed || r.deleted_in_api,
            _ => true,
        });
    }

    /// Forgets a pod entirely (its source dropped it and it is finished).
    pub fn forget(&mut self, uid: &str) {
        if matches!(self.phase(uid), Some(Phase::Finished { .. })) {
            self.records.remove(uid);
        }
    }

    /// Reaps finished tasks so the JoinSet does not grow; a panicked worker is logged.
    pub fn reap(&mut self) {
        while let Some(res) = self.tasks.try_join_next() {
            if let Err(e) = res {
                if e.is_panic() {
                    warn!(error = %e, "pod worker panicked");
                }
            }
        }
    }

    fn spawn(
        &mut self,
        uid: String,
        pod: Option<Arc<Pod>>,
        full_name: String,
        work: Work,
        phase: Phase,
        after: Option<Instant>,
    ) {
        let span = tracing::info_span!("pod_worker", pod = %full_name, uid = %uid);
        let (tx, rx) = watch::channel(work);
        self.tasks.spawn(
            worker::run(
                self.syncer.clone(),
                rx,
                self.events.clone(),
                self.cancel.child_token(),
                uid.clone(),
                after,
            )
            .instrument(span),
        );
        let mut r = PodRecord::new(pod, full_name, phase);
        r.worker = Some(tx);
        self.records.insert(uid, r);
    }

    /// Waits for every worker to stop after cancellation (kubelet shutdown leaves pods running).
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// The grace period a termination asked for with `requested` uses: the request, else the
/// deletion's, else the spec's, and never under 1 s (upstream `calculateEffectiveGracePeriod`,
/// which also takes the smallest of these once a pod is terminating; [`PodWorkers::terminate`]
/// does that). A force delete (0) thus gives a preStop hook 1 s, as upstream.
fn effective_grace(pod: &Pod, requested: Option<Duration>) -> Duration {
    requested
        .unwrap_or_else(|| Duration::from_secs(podutil::grace_period_seconds(pod).max(0) as u64))
        .max(MIN_GRACE)
}

/// Upstream's floor on a termination's grace period ("no matter what, we always supply a grace
/// period of 1").
const MIN_GRACE: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests;
