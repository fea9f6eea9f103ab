//! The SyncLoop (upstream `syncLoop`, `syncLoopIteration`, `HandlePodAdditions/Updates/Removes`,
//! `HandlePodCleanups`): it only routes. It records what sources want (upstream's pod manager),
//! admits new pods, and hands work to the pod workers, whose lifecycle table holds everything
//! else about a pod. Everything that waits on the runtime happens in workers, so it never blocks.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::admission;
use crate::events::{EventType, Recorder};
use crate::health::Health;
use crate::mirror::MirrorHandle;
use crate::pleg::{PodLifecycleEvent, RuntimePods};
use crate::pod_workers::{Phase, PodSyncer, PodWorkers, WorkerEvent};
use crate::podutil;
use crate::prober::{ProbeHandle, ProbeResults, ResultUpdate};
use crate::runtime::gc::{PodGcState, PodStates};
use crate::source::{ConfigEvent, PodOp, PodUpdate};
use crate::status::{compute, StatusHandle};
use crate::types::PodPhase;
use crate::volumes;

const SYNC_TICK: Duration = Duration::from_secs(1);
/// How long the SyncLoop waits for PLEG's first listing before it handles pods.
const FIRST_RELIST_WAIT: Duration = Duration::from_secs(10);
/// Grace period for pods only the runtime knows (no spec says otherwise).
const RUNTIME_POD_GRACE: Duration = Duration::from_secs(2);

/// What the loop routes between; built by `kubelet::run` (or a test).
pub struct SyncLoop<S: PodSyncer> {
    pub sync_frequency: Duration,
    /// `podHousekeepingPeriod` (upstream's `housekeepingPeriod`, 2 s).
    pub housekeeping_period: Duration,
    pub root_dir: PathBuf,
    /// Upstream's pod manager: what the sources want, by UID. Ordered, so the active pods are
    /// published in UID order as they are read, without a sort on every pod event.
    pub pods: BTreeMap<String, Arc<Pod>>,
    pub seen_sources: HashSet<&'static str>,
    pub expected_sources: HashSet<&'static str>,
    pub workers: PodWorkers<S>,
    pub status: StatusHandle,
    pub health: Arc<Health>,
    pub runtime_pods: watch::Receiver<Arc<RuntimePods>>,
    /// Told which static pods run, so each has a mirror pod (cluster mode only).
    pub mirrors: Option<MirrorHandle>,
    pub recorder: Recorder,
    /// What admission checks pods against: labels, taints and allocatable of this node.
    pub node_view: admission::NodeView,
    pub prober: ProbeHandle,
    /// The probe results, owned here and read by pod workers through the receiver in SyncContext.
    pub probe_results: watch::Sender<Arc<ProbeResults>>,
    /// The watch-based configMap/secret manager; a finished pod unregisters from it.
    pub object_cache: Option<crate::object_cache::ObjectCache>,
    /// The container manager: QoS cgroups follow the pods, orphaned pod cgroups go.
    pub cm: crate::cm::ContainerManager,
    /// Node pressure, for admission (upstream's eviction admit handler).
    pub eviction: crate::eviction::EvictionHandle,
    /// The pods the eviction manager may evict (upstream `GetActivePods`), published here.
    pub active_pods: watch::Sender<Arc<Vec<Arc<Pod>>>>,
    /// Start-up timelines: a pod is seen and admitted here.
    pub timeline: crate::timeline::TimelineHandle,
    /// The CSI plugin: an orphaned pod directory's CSI volumes go through their driver.
    pub csi: crate::volumes::csi::CsiVolumes,
    /// `workers.finished_total()` when housekeeping last released freed heap (`crate::heap`).
    pub heap_released_at: u64,
    /// The static pods last sent to the mirror manager; `None` before the first send.
    pub static_published: Option<Vec<Arc<Pod>>>,
    /// The static pods held in `pods` or still stopping, by UID: all that
    /// [`Self::publish_static_pods`] looks at, so API pods cost it nothing.
    pub static_uids: BTreeSet<String>,
}

/// The same pod objects (by pointer, not by value) in the same order: a published list is
/// sent again only when this is false.
fn same_pods(a: &[Arc<Pod>], b: &[Arc<Pod>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y))
}

/// Puts `want` (the pod under `uid`, or nothing) in its place in the active pods, kept in UID
/// order; false when it is there already, by pointer.
fn splice_active(cur: &mut Arc<Vec<Arc<Pod>>>, uid: &str, want: Option<&Arc<Pod>>) -> bool {
    let at = cur.binary_search_by(|p| podutil::uid(p).cmp(uid));
    match (at, want) {
        (Ok(i), Some(p)) if Arc::ptr_eq(&cur[i], p) => false,
        (Err(_), None) => false,
        (Ok(i), Some(p)) => {
            Arc::make_mut(cur)[i] = p.clone();
            true
        }
        (Ok(i), None) => {
            Arc::make_mut(cur).remove(i);
            true
        }
        (Err(i), Some(p)) => {
            Arc::make_mut(cur).insert(i, p.clone());
            true
        }
    }
}

/// The loop's inputs.
pub struct Inputs {
    pub config: mpsc::Receiver<ConfigEvent>,
    pub pleg: mpsc::Receiver<PodLifecycleEvent>,
    pub worker_events: mpsc::UnboundedReceiver<WorkerEvent>,
    pub probe_updates: mpsc::UnboundedReceiver<ResultUpdate>,
    pub object_changes: mpsc::UnboundedReceiver<String>,
    /// The container GC asking which pods are active, finished or deleted.
    pub gc_states: mpsc::Receiver<crate::runtime::StatesRequest>,
    /// Pods the eviction manager evicts.
    pub evictions: mpsc::UnboundedReceiver<crate::eviction::EvictionRequest>,
}

impl<S: PodSyncer> SyncLoop<S> {
    pub async fn run(mut self, mut inputs: Inputs, cancel: CancellationToken) {
        let mut sync_tick = tokio::time::interval(SYNC_TICK);
        let mut housekeeping =
            tokio::time::interval(self.housekeeping_period.max(Duration::from_millis(10)));
        sync_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Admission skips pods whose containers already run (they hold their resources), which
        // needs the first runtime listing; without a runtime there is nothing to adopt anyway.
        let mut listing = self.runtime_pods.clone();
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = tokio::time::timeout(FIRST_RELIST_WAIT, listing.changed()) => if r.is_err() {
                warn!(waited = ?FIRST_RELIST_WAIT, "no runtime listing yet; admitting pods without it");
            }
        }
        info!("starting the SyncLoop");
        loop {
            self.health.sync_loop_ran();
            tokio::select! {
                _ = cancel.cancelled() => break,
                Some(ev) = inputs.config.recv() => match ev {
                    ConfigEvent::Update(u) => {
                        let uids: Vec<String> =
                            u.pods.iter().map(|p| podutil::uid(p).to_string()).collect();
                        self.handle_update(u).await;
                        self.publish_static_pods();
                        for uid in &uids {
                            self.refresh_active(uid);
                        }
                    }
                    ConfigEvent::SourceReady(s) => {
                        info!(source = s, "pod source ready");
                        self.seen_sources.insert(s);
                        self.publish_static_pods();
                    }
                },
                Some(ev) = inputs.pleg.recv() => self.workers.sync(&ev.uid),
                Some(u) = inputs.probe_updates.recv() => self.handle_probe_result(u),
                Some(uid) = inputs.object_changes.recv() => {
                    debug!(uid = %uid, "a configMap or secret the pod references changed");
                    self.workers.sync(&uid);
                }
                Some(ev) = inputs.worker_events.recv() => self.handle_worker_event(ev).await,
                Some(reply) = inputs.gc_states.recv() => {
                    let _ = reply.send(self.pod_gc_states());
                }
                Some(req) = inputs.evictions.recv() => self.handle_eviction(req),
                _ = sync_tick.tick() => {
                    for uid in self.workers.take_due(Instant::now()) {
                        self.workers.sync(&uid);
                    }
                }
                _ = housekeeping.tick() => self.housekeeping().await,
            }
        }
        info!("SyncLoop stopping; waiting for pod workers");
        self.workers.shutdown().await;
    }

    async fn handle_update(&mut self, u: PodUpdate) {
        let mut pods = u.pods;
        if u.op == PodOp::Add {
            // Upstream admits additions oldest first, so after a restart the pods that already
            // run claim their resources before newer ones are considered.
            pods.sort_by(|a, b| {
                a.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0)
                    .cmp(&b.metadata.creation_timestamp.as_ref().map(|t| t.0))
            });
        }
        for pod in pods {
            let uid = podutil::uid(&pod).to_string();
            match u.op {
                PodOp::Add | PodOp::Update => {
                    if u.op == PodOp::Add {
                        info!(target: v2!(), pod = %podutil::describe(&pod), uid = %uid, source = u.source, "pod added");
                    }
                    self.add_or_update(uid, pod).await;
                }
                PodOp::Remove => {
                    info!(target: v2!(), pod = %podutil::describe(&pod), uid = %uid, source = u.source, "pod removed");
                    self.pods.remove(&uid);
                    self.timeline.forget(&uid);
                    self.workers.unwanted(&uid);
                    if self.workers.drop_unstarted(&uid) {
                        // Rejected, or still waiting for its name: nothing ever ran.
                        self.status.remove(&uid).await;
                    } else if self.workers.get(&uid).is_none_or(|r| {
                        r.has_worker() || !matches!(r.phase, Phase::Finished { .. })
                    }) {
                        // (A pod whose worker already finished, e.g. deleted through the API, has
                        // nothing left to stop.)
                        self.workers.terminate(pod, None);
                    }
                }
            }
        }
    }

    async fn add_or_update(&mut self, uid: String, pod: Arc<Pod>) {
        let known = self.pods.contains_key(&uid);
        if !known && pod.metadata.deletion_timestamp.is_none() && !is_terminal_in_api(&pod) {
            self.timeline.mark(&pod, crate::timeline::Mark::Seen);
            let admitted = self.admit(&pod).await;
            if admitted.is_ok() {
                self.timeline.mark(&pod, crate::timeline::Mark::Admitted);
            }
            if let Err(r) = admitted {
                warn!(pod = %podutil::describe(&pod), reason = %r.reason, message = %r.message, "pod rejected");
                self.recorder.pod_event(
                    &pod,
                    None,
                    EventType::Warning,
                    &r.reason,
                    r.message.clone(),
                );
                self.hold(uid, pod.clone());
                self.workers.reject(pod.clone());
                self.status.set(pod, r.status(compute::now())).await;
                return;
            }
        }
        self.hold(uid.clone(), pod.clone());
        let record = self.workers.get(&uid);
        if record.is_some_and(|r| r.phase == Phase::Rejected) {
            // Rejection is final for this UID (upstream: rejected pods are terminal).
            self.workers.update(pod);
            return;
        }
        if pod.metadata.deletion_timestamp.is_some() {
            if record.is_some_and(|r| r.deleted_in_api && !r.has_worker()) {
                // Already terminated and its deletion requested: this is our own status write
                // coming back through the watch.
                return;
            }
            // Graceful deletion: stop with the API's grace period; the object is deleted once
            // everything is gone (see handle_worker_event).
            let grace = pod
                .metadata
                .deletion_grace_period_seconds
                .map(|g| Duration::from_secs(g.max(0) as u64));
            info!(target: v2!(), pod = %podutil::describe(&pod), grace = ?grace, "pod deleted in the API; terminating");
            self.workers.terminate(pod, grace);
            return;
        }
        if !self.workers.has_worker(&uid) && is_terminal_in_api(&pod) {
            // Finished before (e.g. before a kubelet restart): never run it again.
            self.workers.reject(pod);
            return;
        }
        if known && record.is_some_and(|r| matches!(r.phase, Phase::Finished { .. })) {
            // Terminated and cleaned up while its source still lists it: termination is final.
            return;
        }
        self.status.add(pod.clone()).await;
        match known {
            true => self.workers.update(pod),
            // New to the SyncLoop: a first add, or a pod its source removed and added again.
            false => self.workers.add(pod),
        }
    }

    /// Keeps the pod as what its source wants (upstream's pod manager), noting a static one.
    fn hold(&mut self, uid: String, pod: Arc<Pod>) {
        if podutil::is_static(&pod) && !self.static_uids.contains(&uid) {
            self.static_uids.insert(uid.clone());
        }
        self.pods.insert(uid, pod);
    }

    /// Upstream `canAdmitPod` with 1.20's handler order (`NewMainKubelet`): node pressure (the
    /// eviction manager's handler), the sysctl allowlist, the resource allocation handler (the
    /// topology manager over the device and CPU managers: devices and exclusive CPUs are
    /// allocated now, or the pod is rejected `TopologyAffinityError` /
    /// `UnexpectedAdmissionError`), then the predicates against the pods already admitted and
    /// still active. A pod the predicates reject gives its devices and CPUs back at once
    /// (upstream frees them when the rejected pod is removed). A pod whose containers already
    /// run (adopted after a restart) holds its resources already and is not re-checked.
    async fn admit(&self, pod: &Arc<Pod>) -> Result<(), admission::Rejection> {
        let uid = podutil::uid(pod);
        if self.runtime_pods.borrow().pods.iter().any(|r| r.uid == uid) {
            return Ok(());
        }
        admission::pressure::admit(pod, &self.eviction.pressure().conditions)?;
        admission::admit_sysctls(pod, &self.node_view)?;
        let active: Vec<&Pod> = self
            .pods
            .iter()
            .filter(|(u, _)| self.workers.holds_resources(u))
            .map(|(_, p)| &**p)
            .collect();
        let uids = active.iter().map(|p| podutil::uid(p).to_string()).collect();
        self.cm
            .allocate_resources(pod, uids)
            .await
            .map_err(|e| admission::Rejection {
                reason: e.reason,
                message: e.message,
            })?;
        // Upstream's predicate handler first raises device resources' allocatable to what is
        // allocated (`UpdatePluginResources`).
        let sanitized = match admission::requests_extended(pod) {
            true => {
                admission::sanitize_allocatable(&self.node_view, &self.cm.allocated_devices().await)
            }
            false => None,
        };
        let node = sanitized.as_ref().unwrap_or(&self.node_view);
        if let Err(r) = admission::admit(pod, node, &active) {
            self.cm.release_resources(uid).await;
            return Err(r);
        }
        Ok(())
    }

    /// Upstream `killPodFunc` for the eviction manager: the pod is stopped through its worker
    /// with the manager's grace period and ends `Failed`/`Evicted`. The newest spec is used; a
    /// pod already stopping takes only a shorter grace period; a stopped, removed or gone one
    /// is left alone.
    fn handle_eviction(&mut self, req: crate::eviction::EvictionRequest) {
        let uid = podutil::uid(&req.pod);
        // Removed since the eviction manager looked: its status is not the kubelet's to write.
        let Some(pod) = self.pods.get(uid).cloned() else {
            return;
        };
        if self.workers.evict(pod.clone(), req.grace, req.failure) {
            info!(pod = %podutil::describe(&pod), grace = ?req.grace, queued_ms = req.decided_at.elapsed().as_millis() as u64, "pod evicted; terminating");
            self.refresh_active(uid);
        }
    }

    /// Upstream `GetActivePods` (`filterOutInactivePods`): a wanted pod whose worker syncs it
    /// or is still stopping it (upstream: not yet known terminated), unless it finished in the
    /// API. A pod deleted with a long grace period is thus active and can be evicted, which
    /// shortens its stop; a pod that ended is not, so an eviction never rewrites its phase.
    fn is_active(&self, uid: &str, pod: &Pod) -> bool {
        matches!(
            self.workers.phase(uid),
            Some(Phase::Syncing | Phase::Terminating { .. })
        ) && !is_terminal_in_api(pod)
    }

    /// The active pods ([`Self::is_active`]) for the eviction manager and the pod-resources API,
    /// decided afresh for every pod: at housekeeping, which makes it the safety net for a
    /// change [`Self::refresh_active`] was not called for.
    fn publish_active_pods(&self) {
        // In UID order: `pods` is keyed by it.
        let active: Vec<Arc<Pod>> = self
            .pods
            .iter()
            .filter(|(uid, p)| self.is_active(uid, p))
            .map(|(_, p)| p.clone())
            .collect();
        self.active_pods.send_if_modified(|cur| {
            let same = same_pods(cur, &active);
            if !same {
                // Every change goes through `refresh_active`; a difference here is a path that
                // does not, which the in-process tests (debug builds) turn into a failure.
                warn!(
                    kept = cur.len(),
                    decided = active.len(),
                    "active pods kept per event differed from a full pass; corrected"
                );
                debug_assert!(same, "active pods kept per event differ from a full pass");
                *cur = Arc::new(active);
            }
            !same
        });
    }

    /// [`Self::publish_active_pods`] for the one pod an event changed (its object or its
    /// worker's phase). The list is in UID order, so this is a binary search, and a copy only
    /// when the pod joins, leaves or changes: the whole pass ran on every pod update and worker
    /// event, O(pods) each, and was about 2% of the CPU to stop 100 pods.
    fn refresh_active(&self, uid: &str) {
        let want = self.pods.get(uid).filter(|p| self.is_active(uid, p));
        self.active_pods
            .send_if_modified(|cur| splice_active(cur, uid, want));
    }

    /// The static pods that should have a mirror: wanted by their source and admitted, or removed
    /// but still stopping (upstream keeps the mirror until the static pod has terminated). Listed
    /// last, a wanted pod wins over a stopping one of the same full name. Nothing until every
    /// source delivered once (upstream deletes orphaned mirror pods only when `sourcesReady`): a
    /// static pod not read yet would make its mirror look orphaned, and deleting it gives the
    /// mirror a new UID (seen when swapping from the upstream kubelet, issue 15).
    ///
    /// Sent only when the list changed (the same pods, by pointer, in the same order): this runs
    /// on every pod update and worker event, and each send woke the mirror manager to reconcile
    /// nothing new, 100 times per 100 API pods deleted on a node without a static pod. It looks
    /// only at `static_uids`: walking every pod and worker here was about 2% of the CPU to stop
    /// 100 API pods.
    fn publish_static_pods(&mut self) {
        let Some(m) = &self.mirrors else { return };
        if !self.expected_sources.is_subset(&self.seen_sources) {
            return;
        }
        let (pods, workers) = (&self.pods, &self.workers);
        self.static_uids
            .retain(|uid| pods.contains_key(uid) || workers.stopping_pod(uid).is_some());
        let stopping = self
            .static_uids
            .iter()
            .filter(|uid| !pods.contains_key(*uid))
            .filter_map(|uid| workers.stopping_pod(uid));
        let wanted = self.static_uids.iter().filter_map(|uid| {
            pods.get(uid)
                .filter(|_| workers.phase(uid) != Some(Phase::Rejected))
        });
        let desired: Vec<Arc<Pod>> = stopping.chain(wanted).cloned().collect();
        let same = self
            .static_published
            .as_ref()
            .is_some_and(|last| same_pods(last, &desired));
        if !same {
            m.desired(desired.clone());
            self.static_published = Some(desired);
        }
    }

    async fn handle_worker_event(&mut self, ev: WorkerEvent) {
        match ev {
            WorkerEvent::Synced { uid, retry_after } => {
                if self.pods.contains_key(&uid) {
                    let after = retry_after.unwrap_or_else(|| jitter(self.sync_frequency));
                    self.workers.schedule(&uid, after);
                }
            }
            // A removed static pod's mirror goes now, while its worker cleans up (upstream
            // deletes orphaned mirrors once the static pod is no longer terminating).
            WorkerEvent::Terminated { uid } => {
                self.workers.terminated(&uid);
                self.publish_static_pods();
                self.refresh_active(&uid);
            }
            // The object of a deleted pod went to the status manager from its worker, once the
            // pod's resources were reclaimed (`sync::cleanup_pod`).
            WorkerEvent::Finished { uid, pod } => {
                self.forget_probes(&uid);
                if let Some(c) = &self.object_cache {
                    c.unregister(&uid);
                }
                let next = self.workers.finished(&uid, pod.as_deref());
                let mut changed = vec![uid];
                for pod in next {
                    changed.push(podutil::uid(&pod).to_string());
                    self.workers.add(pod);
                }
                self.publish_static_pods();
                for uid in &changed {
                    self.refresh_active(uid);
                }
            }
        }
    }

    /// Upstream's SyncLoop probe channels: a changed result is recorded, then the pod is synced
    /// (a failed liveness/startup probe kills the container; readiness changes the status).
    fn handle_probe_result(&mut self, u: ResultUpdate) {
        debug!(uid = %u.pod_uid, container = %u.container_name, kind = u.kind.as_str(), result = u.result.as_str(), "probe result changed");
        self.probe_results
            .send_modify(|r| Arc::make_mut(r).apply(&u));
        self.workers.sync(&u.pod_uid);
    }

    /// Forgets a pod's probes: its workers stop and its results go.
    fn forget_probes(&mut self, uid: &str) {
        self.prober.remove_pod(uid);
        self.probe_results.send_if_modified(|r| {
            let before = r.len();
            Arc::make_mut(r).remove_pod(uid);
            r.len() != before
        });
    }

    /// What the container GC may remove (upstream's `podStateProvider` over the pod workers):
    /// a pod a source wants is active until it finished (or was rejected), then terminated; a
    /// pod no source wants but whose worker still runs is active; anything else is deleted.
    fn pod_gc_states(&self) -> PodStates {
        let mut pods = HashMap::new();
        for uid in self.pods.keys() {
            let state = match self.workers.phase(uid) {
                Some(Phase::Finished { .. }) | Some(Phase::Rejected) => PodGcState::Terminated,
                _ => PodGcState::Active,
            };
            pods.insert(uid.clone(), state);
        }
        for uid in self.workers.uids() {
            if self.workers.has_worker(uid) {
                pods.entry(uid.to_string()).or_insert(PodGcState::Active);
            }
        }
        PodStates {
            sources_ready: self.expected_sources.is_subset(&self.seen_sources),
            pods,
        }
    }

    /// Upstream `HandlePodCleanups`: pods the runtime has that no source wants are killed and
    /// removed, and pod directories nobody owns are cleaned up. Only once every source has been
    /// read, or a restart would kill everything.
    async fn housekeeping(&mut self) {
        self.workers.reap();
        // Workers that finished since the last round freed their pods' memory: give it back.
        let finished = self.workers.finished_total();
        if finished != self.heap_released_at {
            self.heap_released_at = finished;
            crate::heap::release_free();
        }
        self.publish_active_pods();
        if !self.expected_sources.is_subset(&self.seen_sources) {
            return;
        }
        let listing = self.runtime_pods.borrow().clone();
        // Cleanups the listing already reflects need no memory any more.
        self.workers.forget_finished(listing.at);
        for r in &listing.pods {
            if self.pods.contains_key(&r.uid) || self.workers.knows(&r.uid) {
                continue;
            }
            info!(pod = %format!("{}/{}", r.namespace, r.name), uid = %r.uid, "cleaning up runtime pod no source wants");
            self.workers
                .terminate_runtime_pod(r.clone(), RUNTIME_POD_GRACE);
        }
        self.cleanup_orphaned_pod_dirs(&listing).await;
        self.cleanup_cgroups(&listing).await;
        if let Some(cpu) = self.cm.cpu() {
            // Upstream `removeStaleState` against `activePods`: a pod keeps its CPUs while a
            // source wants it (and it is not rejected or finished) or its worker still stops it.
            let active = self
                .pods
                .keys()
                .filter(|u| self.workers.holds_resources(u))
                .cloned()
                .chain(
                    self.workers
                        .uids()
                        .filter(|u| self.workers.has_worker(u))
                        .map(str::to_string),
                )
                .collect();
            cpu.retain(active).await;
        }
    }

    /// Upstream `UpdateQOSCgroups` (from the active pods, those still stopping included: they
    /// run until their grace period ends) and `cleanupOrphanedPodCgroups`:
    /// a pod cgroup is kept while a source wants its pod, a worker handles it or the runtime
    /// runs it.
    async fn cleanup_cgroups(&self, listing: &RuntimePods) {
        if !self.cm.enabled() {
            return;
        }
        let active: Vec<Arc<Pod>> = self
            .pods
            .iter()
            .filter(|(uid, p)| self.is_active(uid, p))
            .map(|(_, p)| p.clone())
            .collect();
        let mut keep: HashSet<String> = self.pods.keys().cloned().collect();
        keep.extend(listing.pods.iter().map(|r| r.uid.clone()));
        keep.extend(
            self.workers
                .uids()
                .filter(|u| self.workers.has_worker(u))
                .map(str::to_string),
        );
        self.cm.housekeeping(active, keep).await;
    }

    /// Upstream `cleanupOrphanedPodDirs`: a pod directory whose pod no source wants, no worker
    /// handles and the runtime does not run is left from a crash or a failed clean up; its
    /// volumes are unmounted and it is removed. Pods still known keep theirs: their worker
    /// removes it after tearing the pod down.
    async fn cleanup_orphaned_pod_dirs(&self, listing: &RuntimePods) {
        let pods_root = self.root_dir.join("pods");
        let running: HashSet<&str> = listing.pods.iter().map(|r| r.uid.as_str()).collect();
        let known = |uid: &str| {
            self.pods.contains_key(uid) || self.workers.has_worker(uid) || running.contains(uid)
        };
        let uids = {
            let root = pods_root.clone();
            tokio::task::spawn_blocking(move || volumes::pod_dir_uids(&root)).await
        };
        let orphans: Vec<String> = match uids {
            Ok(Ok(uids)) => uids.into_iter().filter(|u| !known(u)).collect(),
            Ok(Err(e)) => {
                warn!(error = %e, "cannot list pod directories");
                return;
            }
            Err(_) => return,
        };
        let mut ready = Vec::with_capacity(orphans.len());
        for uid in orphans {
            match self.csi.tear_down_pod(&pods_root.join(&uid)).await {
                Ok(()) => ready.push(uid),
                Err(e) => {
                    warn!(uid = %uid, error = %e, "cannot tear down CSI volumes of an orphaned pod directory")
                }
            }
        }
        let orphans = ready;
        if orphans.is_empty() {
            return;
        }
        let res = tokio::task::spawn_blocking(move || {
            orphans
                .into_iter()
                .map(|uid| {
                    let res = volumes::remove_pod_dir(&pods_root.join(&uid));
                    (uid, res)
                })
                .collect::<Vec<_>>()
        })
        .await;
        for (uid, r) in res.into_iter().flatten() {
            match r {
                Ok(()) => info!(uid = %uid, "removed orphaned pod directory"),
                Err(e) => warn!(uid = %uid, error = %e, "cannot remove orphaned pod directory"),
            }
        }
    }
}

fn is_terminal_in_api(pod: &Pod) -> bool {
    PodPhase::of(pod.status.as_ref()).is_some_and(PodPhase::is_terminal)
}

/// Upstream resyncs with up to 50% jitter so pods do not sync in lockstep.
fn jitter(d: Duration) -> Duration {
    d + d.mul_f64(fastrand::f64() * 0.5)
}

#[cfg(test)]
mod splice_tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::{same_pods, splice_active};

    fn pod(uid: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn uids(v: &[Arc<Pod>]) -> Vec<&str> {
        v.iter().map(|p| crate::podutil::uid(p)).collect()
    }

    /// One pod's place in the UID-ordered active pods: joins in order, is replaced by a newer
    /// object, leaves; the same object or an absent pod changes nothing.
    #[test]
    fn one_pod_is_put_in_its_place() {
        let (a, b, c) = (pod("a"), pod("b"), pod("c"));
        let b2 = pod("b");
        // (list before, uid, wanted, list after, changed)
        type Case<'a> = (
            Vec<&'a Arc<Pod>>,
            &'a str,
            Option<&'a Arc<Pod>>,
            Vec<&'a str>,
            bool,
        );
        let cases: Vec<Case> = vec![
            (vec![], "b", Some(&b), vec!["b"], true),
            (vec![&a, &c], "b", Some(&b), vec!["a", "b", "c"], true),
            (vec![&b, &c], "a", Some(&a), vec!["a", "b", "c"], true),
            (vec![&a, &b], "c", Some(&c), vec!["a", "b", "c"], true),
            (vec![&a, &b, &c], "b", Some(&b), vec!["a", "b", "c"], false),
            (vec![&a, &b, &c], "b", Some(&b2), vec!["a", "b", "c"], true),
            (vec![&a, &b, &c], "b", None, vec!["a", "c"], true),
            (vec![&a, &c], "b", None, vec!["a", "c"], false),
            (vec![&a], "a", None, vec![], true),
        ];
        for (before, uid, want, after, changed) in cases {
            let mut cur = Arc::new(before.into_iter().cloned().collect::<Vec<_>>());
            let held = cur.clone();
            assert_eq!(
                splice_active(&mut cur, uid, want),
                changed,
                "{uid} {want:?}"
            );
            assert_eq!(uids(&cur), after, "{uid}");
            if let Some(w) = want {
                assert!(cur.iter().any(|p| Arc::ptr_eq(p, w)), "the wanted object");
            }
            // A reader holding the old list keeps it as it was.
            assert_eq!(same_pods(&held, &cur), !changed);
        }
    }
}
