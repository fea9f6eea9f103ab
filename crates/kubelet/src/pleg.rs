//! PLEG, the pod lifecycle event generator (upstream `pleg/generic.go`): relists the runtime every
//! second, diffs against the previous relist and wakes the workers of pods whose sandboxes or
//! containers changed. It also publishes the set of pods the runtime has, for housekeeping.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::health::Health;
use crate::runtime::manager::{RuntimePodRef, RuntimeSnapshotEntry};
use crate::runtime::{ContainerState, RuntimeManager};

/// What the runtime had at one relist; `at` is when the relist started, so a consumer can tell
/// whether something it did afterwards is already reflected.
#[derive(Debug, Clone)]
pub struct RuntimePods {
    pub at: tokio::time::Instant,
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

/// The PLEG task's state.
pub struct Pleg {
    runtime: RuntimeManager,
    events: mpsc::Sender<PodLifecycleEvent>,
    pods: watch::Sender<Arc<RuntimePods>>,
    health: Arc<Health>,
    last: HashMap<String, RuntimeSnapshotEntry>,
    last_relist: Option<tokio::time::Instant>,
}

impl Pleg {
    pub fn new(
        runtime: RuntimeManager,
        events: mpsc::Sender<PodLifecycleEvent>,
        health: Arc<Health>,
    ) -> (Self, watch::Receiver<Arc<RuntimePods>>) {
        let (tx, rx) = watch::channel(Arc::new(RuntimePods {
            at: tokio::time::Instant::now(),
            pods: Vec::new(),
        }));
        (
            Pleg {
                runtime,
                events,
                pods: tx,
                health,
                last: HashMap::new(),
                last_relist: None,
            },
            rx,
        )
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(RELIST_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            if !self.relist().await {
                return;
            }
        }
    }

    /// One relist; false when the SyncLoop is gone.
    async fn relist(&mut self) -> bool {
        let started = tokio::time::Instant::now();
        let m = crate::metrics::get();
        if let Some(prev) = self.last_relist.replace(started) {
            m.pleg_relist_interval
                .observe((started - prev).as_secs_f64());
        }
        let pods = match self.runtime.list_pods().await {
            Ok(p) => p,
            Err(e) => {
                warn!(error = %e, "PLEG relist failed");
                return true;
            }
        };
        self.health.pleg_relisted();
        m.pleg_relist_duration
            .observe(started.elapsed().as_secs_f64());
        record_running(&pods);
        let mut current: HashMap<String, RuntimeSnapshotEntry> = HashMap::new();
        let mut refs = Vec::with_capacity(pods.len());
        for (r, entry) in pods {
            current.insert(r.uid.clone(), entry);
            refs.push(r);
        }
        let mut events = Vec::new();
        for uid in current.keys().chain(self.last.keys()) {
            events.extend(diff(uid, self.last.get(uid), current.get(uid)));
        }
        // A uid present in both maps was visited twice; its events are identical, keep one copy.
        events.dedup();
        let mut seen = std::collections::HashSet::new();
        events.retain(|e| seen.insert((e.uid.clone(), e.id.clone(), e.kind)));
        self.last = current;
        self.pods.send_replace(Arc::new(RuntimePods {
            at: started,
            pods: refs,
        }));
        for e in events {
            debug!(uid = %e.uid, kind = ?e.kind, id = %e.id, "pod lifecycle event");
            if self.events.send(e).await.is_err() {
                return false;
            }
        }
        debug!(elapsed = ?started.elapsed(), "PLEG relist");
        true
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
