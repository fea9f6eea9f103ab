//! PLEG, the pod lifecycle event generator (upstream `pleg/generic.go`): relists the runtime every
//! second, diffs against the previous relist, reads the changed pods' status into the runtime
//! cache (it is the cache's only writer) and wakes their workers. Between relists it reads single
//! pods that workers ask for ([`RuntimeCache::fresh`]). It also publishes the set of pods the
//! runtime has, for housekeeping and the server.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::container::cache::{self, CacheWriter, RuntimeCache};
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
    /// The snapshot to diff the next relist against (the old one when listing failed).
    snapshot: HashMap<String, RuntimeSnapshotEntry>,
    outcome: Result<Listed, RuntimeError>,
}

struct Listed {
    refs: Vec<RuntimePodRef>,
    events: Vec<PodLifecycleEvent>,
    /// Fresh statuses of the pods that changed (upstream `updateCache` for pods with events).
    statuses: Vec<(String, Result<PodRuntimeStatus, String>)>,
    /// Pods the runtime no longer has.
    gone: Vec<String>,
}

/// How many pod status reads PLEG runs at once (relist and refreshes each).
const READ_PARALLELISM: usize = 16;

type Read =
    Pin<Box<dyn Future<Output = (String, Instant, Result<PodRuntimeStatus, String>)> + Send>>;

/// The PLEG task's state. It owns the runtime cache's only writer.
pub struct Pleg {
    runtime: RuntimeManager,
    events: mpsc::Sender<PodLifecycleEvent>,
    pods: watch::Sender<Arc<RuntimePods>>,
    cache: CacheWriter,
    refresh: mpsc::UnboundedReceiver<String>,
    health: Arc<Health>,
    last: HashMap<String, RuntimeSnapshotEntry>,
    last_relist: Option<Instant>,
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
                last_relist: None,
            },
            rx,
            reader,
        )
    }

    /// Relists every [`RELIST_PERIOD`] and serves refresh requests in between, each read
    /// concurrently, so a slow runtime answer for one pod holds up no other.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(RELIST_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut relist: Option<Pin<Box<dyn Future<Output = Relisted> + Send>>> = None;
        let mut reads: FuturesUnordered<Read> = FuturesUnordered::new();
        // Reads under way, by pod, and pods asked for again meanwhile: a read that started before
        // the request cannot show what the asker just did, so it is read once more afterwards.
        let mut reading: HashSet<String> = HashSet::new();
        let mut again: HashSet<String> = HashSet::new();
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
                        std::mem::take(&mut self.last),
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
                Some(uid) = self.refresh.recv() => {
                    if reading.contains(&uid) {
                        again.insert(uid);
                    } else if reading.len() < READ_PARALLELISM {
                        reading.insert(uid.clone());
                        reads.push(self.read(uid));
                    } else {
                        again.insert(uid);
                    }
                }
                Some((uid, at, res)) = reads.next(), if !reads.is_empty() => {
                    reading.remove(&uid);
                    self.cache.set(&uid, res, at);
                    // Start what waited: this pod again, or pods queued while reads were full.
                    let next: Vec<String> = again
                        .iter()
                        .filter(|u| !reading.contains(*u))
                        .take(READ_PARALLELISM - reading.len())
                        .cloned()
                        .collect();
                    for u in next {
                        again.remove(&u);
                        reading.insert(u.clone());
                        reads.push(self.read(u));
                    }
                }
            }
        }
    }

    fn read(&self, uid: String) -> Read {
        let runtime = self.runtime.clone();
        Box::pin(async move {
            let at = Instant::now();
            let res = runtime.pod_status(&uid).await.map_err(|e| e.to_string());
            (uid, at, res)
        })
    }

    /// Writes a relist into the cache and the listing, then wakes the changed pods' workers;
    /// false when the SyncLoop is gone.
    async fn apply(&mut self, r: Relisted) -> bool {
        self.last = r.snapshot;
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
        // Changed pods first, then the timestamp: every pod not set here is unchanged as of it.
        for (uid, status) in listed.statuses {
            self.cache.set(&uid, status, r.started);
        }
        for uid in &listed.gone {
            self.cache.delete(uid);
        }
        self.cache.update_time(r.started);
        self.pods.send_replace(Arc::new(RuntimePods {
            at: r.started,
            pods: listed.refs,
        }));
        for e in listed.events {
            debug!(uid = %e.uid, kind = ?e.kind, id = %e.id, "pod lifecycle event");
            if self.events.send(e).await.is_err() {
                return false;
            }
        }
        debug!(elapsed = ?r.started.elapsed(), "PLEG relist");
        true
    }
}

/// One relist (upstream `GenericPLEG.Relist`): list, diff against `last`, read the changed pods.
async fn relist_once(
    runtime: RuntimeManager,
    last: HashMap<String, RuntimeSnapshotEntry>,
    started: Instant,
) -> Relisted {
    let pods = match runtime.list_pods().await {
        Ok(p) => p,
        Err(e) => {
            return Relisted {
                started,
                snapshot: last,
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
    let mut events = Vec::new();
    for uid in current.keys().chain(last.keys()) {
        events.extend(diff(uid, last.get(uid), current.get(uid)));
    }
    // A uid present in both maps was visited twice; its events are identical, keep one copy.
    let mut seen = HashSet::new();
    events.retain(|e| seen.insert((e.uid.clone(), e.id.clone(), e.kind)));
    let changed: HashSet<&str> = events.iter().map(|e| e.uid.as_str()).collect();
    let gone: Vec<String> = changed
        .iter()
        .filter(|u| !current.contains_key(**u))
        .map(|u| u.to_string())
        .collect();
    let to_read: Vec<String> = changed
        .into_iter()
        .filter(|u| current.contains_key(*u))
        .map(str::to_string)
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
        snapshot: current,
        outcome: Ok(Listed {
            refs,
            events,
            statuses,
            gone,
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
}
