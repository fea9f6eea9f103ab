//! PLEG, the pod lifecycle event generator (upstream `pleg/generic.go`): relists the runtime every
//! second, diffs against the previous relist, reads the changed pods' status into the runtime
//! cache (it is the cache's only writer) and wakes their workers. Between relists it reads single
//! pods that workers ask for ([`RuntimeCache::fresh`]). It also publishes the set of pods the
//! runtime has, for housekeeping and the server.
//!
//! With a runtime event stream ([`events`], upstream's evented PLEG) each event makes PLEG re-read
//! the pod at once ([`targeted`]) and report its changes as a relist would, well before the next
//! relist; the relist then finds nothing new for it. What a relist still finds while a stream
//! was open the whole interval is counted as missed by the events
//! (`kubelet_pleg_relist_missed_events_total`, rkubelet-specific; ~0 when the events work).

pub mod events;
pub mod targeted;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::container::cache::{self, CacheWriter, Known, Refresh, RuntimeCache};
use crate::health::Health;
use crate::runtime::manager::{RuntimePodRef, RuntimeSnapshotEntry};
use crate::runtime::{ContainerState, PodRuntimeStatus, RuntimeError, RuntimeManager};

/// What the runtime had at one relist; `at` is when the relist started, so a consumer can tell
/// whether something it did afterwards is already reflected.
#[derive(Debug, Clone)]
pub struct RuntimePods {
    pub at: Instant,
    pub pods: Vec<RuntimePodRef>,
}

/// Upstream's relist period.
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);

/// Upstream `PodLifeCycleEventType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    ContainerStarted,
    ContainerDied,
    ContainerRemoved,
    ContainerChanged,
    SandboxChanged,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLifecycleEvent {
    pub uid: String,
    pub kind: EventKind,
    /// Container or sandbox ID.
    pub id: String,
}

/// `kubelet_running_pods` (pods with a ready sandbox) and `kubelet_running_containers` by state,
/// as upstream's PLEG updates them on every relist.
fn record_running(pods: &[(RuntimePodRef, RuntimeSnapshotEntry)]) {
    let m = crate::metrics::get();
    let running = pods
        .iter()
        .filter(|(_, e)| e.sandboxes.iter().any(|(_, ready)| *ready))
        .count();
    m.running_pods.set(running as i64);
    let mut by_state: HashMap<&'static str, i64> = HashMap::new();
    for (_, e) in pods {
        for (_, state) in &e.containers {
            *by_state.entry(state_label(*state)).or_default() += 1;
        }
    }
    for state in ["created", "running", "exited", "unknown"] {
        m.running_containers
            .with_label_values(&[state])
            .set(by_state.get(state).copied().unwrap_or(0));
    }
}

/// Upstream's `container_state` label values.
fn state_label(s: ContainerState) -> &'static str {
    match s {
        ContainerState::Created => "created",
        ContainerState::Running => "running",
        ContainerState::Exited => "exited",
        ContainerState::Unknown => "unknown",
    }
}

/// Pure diff of one pod's runtime record between relists.
pub fn diff(
    uid: &str,
    old: Option<&RuntimeSnapshotEntry>,
    new: Option<&RuntimeSnapshotEntry>,
) -> Vec<PodLifecycleEvent> {
    let empty = RuntimeSnapshotEntry::default();
    let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    let mut out = Vec::new();
    let ev = |kind, id: &str| PodLifecycleEvent {
        uid: uid.to_string(),
        kind,
        id: id.to_string(),
    };
    let old_c: HashMap<_, _> = old
        .containers
        .iter()
        .map(|(id, s)| (id.as_str(), *s))
        .collect();
    let new_c: HashMap<_, _> = new
        .containers
        .iter()
        .map(|(id, s)| (id.as_str(), *s))
        .collect();
    for (id, s) in &new_c {
        match (old_c.get(id), s) {
            (Some(o), n) if o == n => {}
            (_, ContainerState::Running) => out.push(ev(EventKind::ContainerStarted, id)),
            (_, ContainerState::Exited) => out.push(ev(EventKind::ContainerDied, id)),
            _ => out.push(ev(EventKind::ContainerChanged, id)),
        }
    }
    for id in old_c.keys() {
        if !new_c.contains_key(id) {
            out.push(ev(EventKind::ContainerRemoved, id));
        }
    }
    if old.sandboxes != new.sandboxes {
        let id = new
            .sandboxes
            .first()
            .or(old.sandboxes.first())
            .map(|s| s.0.as_str())
            .unwrap_or("");
        out.push(ev(EventKind::SandboxChanged, id));
    }
    out
}

/// A relist's result, handed back to the PLEG task which alone writes the cache.
struct Relisted {
    started: Instant,
    outcome: Result<Listed, RuntimeError>,
}

struct Listed {
    refs: Vec<RuntimePodRef>,
    /// What the runtime had for every pod.
    current: HashMap<String, RuntimeSnapshotEntry>,
    /// Fresh statuses of the pods that changed since the snapshot the relist started from
    /// (upstream `updateCache` for pods with events).
    statuses: Vec<(String, Result<PodRuntimeStatus, String>)>,
    /// Changed pods not read because their worker was changing them: left for the worker's
    /// own read, or the next relist.
    acting: HashSet<String>,
}

/// How long an event the runtime's CRI view did not show yet is remembered (see `Pleg::late`).
const LATE_KEPT: Duration = Duration::from_secs(60);

/// How many pod status reads PLEG runs at once (relist and refreshes each).
const READ_PARALLELISM: usize = 16;

/// A worker's read of one pod: its uid, when the read started, and what it found.
type Read = Pin<Box<dyn Future<Output = (String, Instant, PodRead)> + Send>>;

/// What a read of one pod found, and how (see [`Pleg::apply_read`]).
enum PodRead {
    /// The whole pod, read from the runtime after its stamp.
    Now(Result<PodRuntimeStatus, String>),
    /// A pod started from nothing ([`Started`]): its containers read now, its sandbox as
    /// RunPodSandbox's read left it, which is older than the stamp.
    Composed(PodRuntimeStatus),
}
type HintFuture = Pin<Box<dyn Future<Output = targeted::HintRead> + Send>>;

/// The PLEG task's state. It owns the runtime cache's only writer.
pub struct Pleg {
    runtime: RuntimeManager,
    events: mpsc::Sender<PodLifecycleEvent>,
    pods: watch::Sender<Arc<RuntimePods>>,
    cache: CacheWriter,
    refresh: mpsc::UnboundedReceiver<Refresh>,
    health: Arc<Health>,
    /// What PLEG has reported (sent events for) per pod: the last relist's view, or a newer read
    /// made for a runtime event.
    last: HashMap<String, RuntimeSnapshotEntry>,
    /// When each pod's `last` was read (a relist's start for the pods it set).
    last_at: HashMap<String, Instant>,
    /// Container and sandbox IDs to their pod, from `last`.
    owners: HashMap<String, String>,
    last_relist: Option<Instant>,
    /// When the relist that `last` came from started.
    base_at: Option<Instant>,
    /// Containers and sandboxes with an event no read has shown yet (under way, or it came
    /// before the runtime's CRI view showed it: a sandbox is listed only once RunPodSandbox
    /// returns), with when: a relist that reports them found an event in flight or the
    /// runtime's lag, not an event the stream missed.
    late: HashMap<String, Instant>,
    /// Runtime events (none: relist only).
    hints: Option<mpsc::Receiver<events::Hint>>,
    live: Option<events::Live>,
}

impl Pleg {
    pub fn new(
        runtime: RuntimeManager,
        events: mpsc::Sender<PodLifecycleEvent>,
        health: Arc<Health>,
    ) -> (Self, watch::Receiver<Arc<RuntimePods>>, RuntimeCache) {
        let (tx, rx) = watch::channel(Arc::new(RuntimePods {
            at: Instant::now(),
            pods: Vec::new(),
        }));
        let (cache, refresh, reader) = cache::new();
        (
            Pleg {
                runtime,
                events,
                pods: tx,
                cache,
                refresh,
                health,
                last: HashMap::new(),
                last_at: HashMap::new(),
                owners: HashMap::new(),
                last_relist: None,
                base_at: None,
                late: HashMap::new(),
                hints: None,
                live: None,
            },
            rx,
            reader,
        )
    }

    /// Acts on the runtime events `hints` carries (see [`events::EventWatcher`]).
    pub fn with_events(mut self, hints: mpsc::Receiver<events::Hint>, live: events::Live) -> Self {
        self.hints = Some(hints);
        self.live = Some(live);
        self
    }

    /// Relists every [`RELIST_PERIOD`] and serves refresh requests and runtime events in
    /// between, each read concurrently, so a slow runtime answer for one pod holds up no other.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(RELIST_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut relist: Option<Pin<Box<dyn Future<Output = Relisted> + Send>>> = None;
        let mut reads: FuturesUnordered<Read> = FuturesUnordered::new();
        // Reads under way, by pod, and pods asked for again meanwhile: a read that started before
        // the request cannot show what the asker just did, so it is read once more afterwards.
        // A pod waiting in `again` keeps what its worker started when every request for it said
        // (see `RuntimeCache::fresh_after_start`); one request without it makes it a whole read.
        let mut reading: HashSet<String> = HashSet::new();
        let mut again: HashMap<String, Option<Known>> = HashMap::new();
        // Reads for runtime events; the hints that came for a pod while one was under way wait
        // here (the newest per pod), as a read that started before an event may not show it.
        let mut hinted: FuturesUnordered<HintFuture> = FuturesUnordered::new();
        let mut hint_reading: HashMap<String, Arc<tokio::sync::Notify>> = HashMap::new();
        let mut hint_again: HashMap<String, events::Hint> = HashMap::new();
        let mut hints = self.hints.take();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick(), if relist.is_none() => {
                    let started = Instant::now();
                    if let Some(prev) = self.last_relist.replace(started) {
                        crate::metrics::get()
                            .pleg_relist_interval
                            .observe((started - prev).as_secs_f64());
                    }
                    relist = Some(Box::pin(relist_once(
                        self.runtime.clone(),
                        self.last.clone(),
                        self.cache.view(),
                        started,
                    )));
                }
                r = async {
                    match relist.as_mut() {
                        Some(f) => f.await,
                        None => std::future::pending().await,
                    }
                }, if relist.is_some() => {
                    relist = None;
                    if !self.apply(r).await {
                        return;
                    }
                }
                Some(Refresh { uid, known }) = self.refresh.recv() => {
                    if reading.contains(&uid) || reading.len() >= READ_PARALLELISM {
                        // Waiting already: the newest `Known` if both had one, else none.
                        let merged = match again.remove(&uid) {
                            Some(waiting) => waiting.and(known),
                            None => known,
                        };
                        again.insert(uid, merged);
                    } else {
                        reading.insert(uid.clone());
                        reads.push(self.read(uid, known));
                    }
                }
                hint = async {
                    match hints.as_mut() {
                        Some(h) => h.recv().await,
                        None => std::future::pending().await,
                    }
                } => {
                    // The watcher ended (the runtime has no events): relists only from now on.
                    let Some(hint) = hint else {
                        hints = None;
                        continue;
                    };
                    // Pending until a read shows it: a relist finding it meanwhile found an
                    // event in flight, not a missed one.
                    self.late.insert(hint.id.clone(), Instant::now());
                    let uid = hint.uid.clone().or_else(|| self.owners.get(&hint.id).cloned());
                    // An exit the kubelet is causing: the stopper reads the pod when its stop
                    // returns (`runtime::manager::Marks`). It stays pending in `late`: a
                    // relist finding the exit first found an event received, not a missed one.
                    if self.runtime.stopping.contains(&hint.id) {
                        continue;
                    }
                    // A worker's own read after stopping the container may show the exit
                    // already: nothing to read for the event.
                    if let Some(u) = &uid {
                        if !hint_reading.contains_key(u)
                            && self
                                .cache
                                .status(u)
                                .is_some_and(|st| targeted::already_shown(hint.expect, &hint.id, &st))
                        {
                            self.late.remove(&hint.id);
                            continue;
                        }
                    }
                    match uid {
                        Some(u) => match hint_reading.get(&u) {
                            // The read under way looks again now, and once more when done.
                            Some(wake) => {
                                wake.notify_one();
                                hint_again.insert(u, hint);
                            }
                            None => {
                                let wake = Arc::new(tokio::sync::Notify::new());
                                hint_reading.insert(u.clone(), wake.clone());
                                hinted.push(Box::pin(targeted::read(self.runtime.clone(), hint, Some(u), wake)));
                            }
                        },
                        None => hinted.push(Box::pin(targeted::read(
                            self.runtime.clone(),
                            hint,
                            None,
                            Default::default(),
                        ))),
                    }
                }
                Some(read) = hinted.next(), if !hinted.is_empty() => {
                    if read.met {
                        self.late.remove(&read.id);
                    }
                    let Some(uid) = read.uid.clone() else { continue };
                    hint_reading.remove(&uid);
                    if !self.apply_hint_read(read).await {
                        return;
                    }
                    if let Some(h) = hint_again.remove(&uid) {
                        let wake = Arc::new(tokio::sync::Notify::new());
                        hint_reading.insert(uid.clone(), wake.clone());
                        hinted.push(Box::pin(targeted::read(self.runtime.clone(), h, Some(uid), wake)));
                    }
                }
                Some((uid, at, read)) = reads.next(), if !reads.is_empty() => {
                    reading.remove(&uid);
                    if !self.apply_read(uid.clone(), at, read).await {
                        return;
                    }
                    // Start what waited: this pod again, or pods queued while reads were full.
                    let next: Vec<String> = again
                        .keys()
                        .filter(|u| !reading.contains(*u))
                        .take(READ_PARALLELISM - reading.len())
                        .cloned()
                        .collect();
                    for u in next {
                        let known = again.remove(&u).flatten();
                        reading.insert(u.clone());
                        reads.push(self.read(u, known));
                    }
                }
            }
        }
    }

    /// A read of one pod for its worker: only what it says it knows (the containers it started
    /// from nothing; every sandbox and container it stopped), else (or when one of them is
    /// gone) the whole pod.
    fn read(&self, uid: String, known: Option<Known>) -> Read {
        let runtime = self.runtime.clone();
        Box::pin(async move {
            let at = Instant::now();
            match &known {
                Some(Known::Started(started)) => match runtime.started_pod_status(started).await {
                    Ok(Some(status)) => return (uid, at, PodRead::Composed(status)),
                    Ok(None) => {}
                    Err(e) => return (uid, at, PodRead::Now(Err(e.to_string()))),
                },
                // Each one read after the stamp: as current as a whole read.
                Some(Known::Stopped {
                    sandboxes,
                    containers,
                }) => match runtime.stopped_pod_status(sandboxes, containers).await {
                    Ok(Some(status)) => return (uid, at, PodRead::Now(Ok(status))),
                    Ok(None) => {}
                    Err(e) => return (uid, at, PodRead::Now(Err(e.to_string()))),
                },
                None => {}
            }
            let res = runtime.pod_status(&uid).await.map_err(|e| e.to_string());
            (uid, at, PodRead::Now(res))
        })
    }

    /// Sends PLEG events to the SyncLoop; false when it is gone.
    async fn send(&self, events: Vec<PodLifecycleEvent>) -> bool {
        for e in events {
            debug!(uid = %e.uid, kind = ?e.kind, id = %e.id, "pod lifecycle event");
            if self.events.send(e).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Records `entry` as `uid`'s reported state read at `at` and returns what changed.
    fn report(
        &mut self,
        uid: &str,
        entry: Option<RuntimeSnapshotEntry>,
        at: Instant,
    ) -> Vec<PodLifecycleEvent> {
        let events = diff(uid, self.last.get(uid), entry.as_ref());
        if let Some(old) = self.last.get(uid) {
            for id in old
                .sandboxes
                .iter()
                .map(|s| &s.0)
                .chain(old.containers.iter().map(|c| &c.0))
            {
                self.owners.remove(id);
            }
        }
        match entry {
            Some(e) => {
                for id in e
                    .sandboxes
                    .iter()
                    .map(|s| &s.0)
                    .chain(e.containers.iter().map(|c| &c.0))
                {
                    self.owners.insert(id.clone(), uid.to_string());
                }
                self.last.insert(uid.to_string(), e);
            }
            None => {
                self.last.remove(uid);
            }
        }
        self.last_at.insert(uid.to_string(), at);
        events
    }

    /// A read made for a runtime event: into the cache, and its changes reported at once.
    async fn apply_hint_read(&mut self, read: targeted::HintRead) -> bool {
        let Some(uid) = read.uid else { return true };
        if !read.met {
            debug!(uid = %uid, "a read after a runtime event does not show it yet; the relist will");
        }
        self.apply_read(uid, read.at, PodRead::Now(read.status))
            .await
    }

    /// A read of one pod (for a runtime event, or for a worker that must see what it just did):
    /// into the cache, and its changes against what PLEG last reported sent at once. The next
    /// relist then finds the pod as reported and does not read it again: before, every change a
    /// worker made was read twice, once for the worker and once for the relist that noticed it.
    ///
    /// A composed read's sandbox was read before its stamp: if what PLEG has reported has that
    /// sandbox not ready, it stays not ready (a sandbox never becomes ready again), so an older
    /// view of the sandbox does not overwrite a death already reported. Not covered: a death
    /// seen by a read that started before the composed read's stamp and ends after it is
    /// applied (that read is older, and dropped); the next relist reports it, within 1-2 s.
    async fn apply_read(&mut self, uid: String, at: Instant, read: PodRead) -> bool {
        let status = match read {
            PodRead::Now(Ok(st)) => st,
            PodRead::Now(Err(e)) => {
                self.cache.set(&uid, Err(e), at);
                return true;
            }
            PodRead::Composed(mut st) => {
                if let Some(last) = self.last.get(&uid) {
                    keep_not_ready(&mut st, &last.sandboxes);
                }
                st
            }
        };
        let entry = targeted::snapshot_of(&status);
        self.cache.set(&uid, Ok(status), at);
        if self.last_at.get(&uid).is_some_and(|t| *t > at) {
            return true;
        }
        let events = self.report(&uid, entry, at);
        self.send(events).await
    }

    /// Writes a relist into the cache and the listing, then wakes the changed pods' workers;
    /// false when the SyncLoop is gone.
    async fn apply(&mut self, r: Relisted) -> bool {
        let listed = match r.outcome {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "PLEG relist failed");
                return true;
            }
        };
        self.health.pleg_relisted();
        crate::metrics::get()
            .pleg_relist_duration
            .observe(r.started.elapsed().as_secs_f64());
        // Did an event stream cover the whole interval since the relist this one is diffed
        // against? Then what this relist finds, the events missed.
        let base = self.base_at.replace(r.started);
        let covered = match (&self.live, base) {
            (Some(live), Some(base)) => live.borrow().is_some_and(|open| open <= base),
            _ => false,
        };
        let mut uids: HashSet<String> = listed.current.keys().cloned().collect();
        uids.extend(self.last.keys().cloned());
        let mut events = Vec::new();
        let mut gone = Vec::new();
        let mut current = listed.current;
        for uid in uids {
            // A read for an event started after this relist: it is the newer view.
            if self.last_at.get(&uid).is_some_and(|t| *t >= r.started) {
                continue;
            }
            // Not read because its worker was changing it: not reported either, so the next
            // relist still finds the change unless the worker's own read reported it first
            // (a worker whose sync turned out to change nothing reads nothing).
            if listed.acting.contains(&uid) {
                continue;
            }
            let entry = current.remove(&uid);
            if entry.is_none() && self.last.contains_key(&uid) {
                gone.push(uid.clone());
            }
            events.extend(self.report(&uid, entry, r.started));
        }
        self.last_at
            .retain(|uid, t| *t >= r.started || self.last.contains_key(uid));
        self.late.retain(|_, t| t.elapsed() < LATE_KEPT);
        if covered {
            let m = crate::metrics::get();
            // Deaths are what the events serve (`events::expect_of_topic`); the kubelet's own
            // starts and removals are not read for their events, so not "missed".
            let served = |e: &&PodLifecycleEvent| e.kind == EventKind::ContainerDied;
            for e in events
                .iter()
                .filter(served)
                .filter(|e| self.late.remove(&e.id).is_none())
            {
                info!(uid = %e.uid, kind = ?e.kind, id = %e.id, "relist found what the runtime events missed");
                m.pleg_relist_missed_events
                    .with_label_values(&[kind_label(e.kind)])
                    .inc();
            }
        }
        // Changed pods first, then the timestamp: every pod not set here is unchanged as of it,
        // but for those left to their worker's read, which the timestamp must not stand in for.
        let read: HashSet<String> = listed.statuses.iter().map(|(u, _)| u.clone()).collect();
        for (uid, status) in listed.statuses {
            self.cache.set(&uid, status, r.started);
        }
        for uid in &listed.acting {
            self.cache.skipped(uid, r.started);
        }
        for uid in &gone {
            self.cache.delete(uid);
        }
        self.cache
            .prune(r.started, |uid| self.last.contains_key(uid));
        // A pod whose change an event reported while this relist ran, and that changed again
        // since: the relist did not read it (its snapshot was the older one), so read it now
        // before the timestamp says it is current.
        let mut unread = Vec::new();
        for e in &events {
            if !read.contains(&e.uid) && !gone.contains(&e.uid) && !unread.contains(&e.uid) {
                unread.push(e.uid.clone());
            }
        }
        for uid in unread {
            let at = Instant::now();
            let res = self
                .runtime
                .pod_status(&uid)
                .await
                .map_err(|e| e.to_string());
            self.cache.set(&uid, res, at);
        }
        self.cache.update_time(r.started);
        self.pods.send_replace(Arc::new(RuntimePods {
            at: r.started,
            pods: listed.refs,
        }));
        if !self.send(events).await {
            return false;
        }
        debug!(elapsed = ?r.started.elapsed(), "PLEG relist");
        true
    }
}

/// Marks `status`'s sandboxes not ready where `reported` (what PLEG last reported of the same
/// pod, which may have read the sandbox after `status` did) has the same sandbox not ready. A
/// pure table: see [`Pleg::apply_read`].
fn keep_not_ready(status: &mut PodRuntimeStatus, reported: &[(String, bool)]) {
    for sb in status.sandboxes.iter_mut() {
        if reported.iter().any(|(id, ready)| *id == sb.id && !*ready) {
            sb.ready = false;
        }
    }
}

/// The metric label of an event kind (upstream's `PodLifeCycleEventType` names).
fn kind_label(k: EventKind) -> &'static str {
    match k {
        EventKind::ContainerStarted => "ContainerStarted",
        EventKind::ContainerDied => "ContainerDied",
        EventKind::ContainerRemoved => "ContainerRemoved",
        EventKind::ContainerChanged => "ContainerChanged",
        EventKind::SandboxChanged => "SandboxChanged",
    }
}

/// One relist (upstream `GenericPLEG.Relist`): list, and read the pods that changed since
/// `last` (the events themselves are computed on the PLEG task, against what it reported since).
async fn relist_once(
    runtime: RuntimeManager,
    last: HashMap<String, RuntimeSnapshotEntry>,
    cached: cache::CacheView,
    started: Instant,
) -> Relisted {
    let pods = match runtime.list_pods().await {
        Ok(p) => p,
        Err(e) => {
            return Relisted {
                started,
                outcome: Err(e),
            }
        }
    };
    record_running(&pods);
    let mut current: HashMap<String, RuntimeSnapshotEntry> = HashMap::new();
    let mut refs = Vec::with_capacity(pods.len());
    for (r, entry) in pods {
        current.insert(r.uid.clone(), entry);
        refs.push(r);
    }
    // Changed since the last report, and not already in the cache as listed: a read a worker
    // asked for while this relist listed has it (and reported it), under load most of them.
    // A pod its worker is changing now is not read either (`runtime::manager::Marks`).
    let mut acting = HashSet::new();
    let to_read: Vec<String> = current
        .iter()
        .filter(|(uid, e)| last.get(*uid) != Some(*e))
        .filter(|(uid, e)| {
            cached
                .status(uid)
                .is_none_or(|st| targeted::snapshot_of(&st).as_ref() != Some(*e))
        })
        .filter(|(uid, _)| {
            let busy = runtime.acting.contains(uid);
            if busy {
                acting.insert((*uid).clone());
            }
            !busy
        })
        .map(|(uid, _)| uid.clone())
        .collect();
    let statuses = futures::stream::iter(to_read.into_iter().map(|uid| {
        let runtime = runtime.clone();
        async move {
            let res = runtime.pod_status(&uid).await.map_err(|e| e.to_string());
            (uid, res)
        }
    }))
    .buffer_unordered(READ_PARALLELISM)
    .collect()
    .await;
    Relisted {
        started,
        outcome: Ok(Listed {
            refs,
            current,
            statuses,
            acting,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_events() {
        let a = RuntimeSnapshotEntry {
            sandboxes: vec![("s1".into(), true)],
            containers: vec![
                ("c1".into(), ContainerState::Running),
                ("c2".into(), ContainerState::Running),
            ],
        };
        let b = RuntimeSnapshotEntry {
            sandboxes: vec![("s1".into(), true)],
            containers: vec![
                ("c1".into(), ContainerState::Exited),
                ("c3".into(), ContainerState::Running),
            ],
        };
        let mut kinds: Vec<_> = diff("u", Some(&a), Some(&b))
            .into_iter()
            .map(|e| (e.kind, e.id))
            .collect();
        kinds.sort_by(|x, y| x.1.cmp(&y.1));
        assert_eq!(
            kinds,
            vec![
                (EventKind::ContainerDied, "c1".into()),
                (EventKind::ContainerRemoved, "c2".into()),
                (EventKind::ContainerStarted, "c3".into())
            ]
        );
        assert!(diff("u", Some(&a), Some(&a)).is_empty());
        let gone = diff("u", Some(&a), None);
        assert!(gone.iter().any(|e| e.kind == EventKind::SandboxChanged));
    }

    /// A composed read's sandbox (read at RunPodSandbox) against what PLEG reported since.
    #[test]
    fn a_composed_read_keeps_a_reported_death() {
        let sb = |id: &str, ready| crate::container::types::SandboxStatus {
            id: id.into(),
            ready,
            ..Default::default()
        };
        /// (composed sandbox ready, reported sandboxes, ready after)
        type Row = (bool, &'static [(&'static str, bool)], bool);
        let table: &[Row] = &[
            // nothing reported yet: as read
            (true, &[], true),
            // reported alive: alive
            (true, &[("s1", true)], true),
            // reported dead after the read: dead
            (true, &[("s1", false)], false),
            // another sandbox's death is not this one's
            (true, &[("s0", false)], true),
            // read dead stays dead whatever was reported
            (false, &[("s1", true)], false),
        ];
        for (read, reported, want) in table {
            let mut st = PodRuntimeStatus {
                sandboxes: vec![sb("s1", *read)],
                containers: vec![],
            };
            let reported: Vec<(String, bool)> =
                reported.iter().map(|(i, r)| (i.to_string(), *r)).collect();
            keep_not_ready(&mut st, &reported);
            assert_eq!(st.sandboxes[0].ready, *want, "{read} {reported:?}");
        }
    }
}
