//! Probe results (upstream `pkg/kubelet/prober/results/results_manager.go`).
//!
//! Upstream keeps one results manager per probe kind: a cache `containerID -> Result` plus a
//! channel that receives an `Update` whenever a cached result *changes* (a `Set` to the value
//! already cached sends nothing; a `Remove` sends nothing). Here the two halves are split:
//!
//! - each probe worker owns a [`ResultsWriter`]: the change detection for the containers it
//!   probes (a key `(container ID, kind)` is only ever written by one worker), sending a
//!   [`ResultUpdate`] on an unbounded channel exactly when upstream's `Set` would send one;
//! - the SyncLoop owns a [`ProbeResults`] fed from that stream ([`ProbeResults::apply`]) and
//!   consults it synchronously when it computes statuses and pod actions (upstream
//!   `livenessManager.Get`, `UpdatePodStatus`). No locks are shared between the two.

use std::collections::HashMap;

use tokio::sync::mpsc;
use tracing::debug;

/// A probe result as the kubelet acts on it (upstream `results.Result`). `Unknown` is only the
/// initial value of a startup probe: a probe attempt that ends "unknown" counts as a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeResult {
    Success,
    Failure,
    Unknown,
}

impl ProbeResult {
    /// Upstream `Result.String()`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeResult::Success => "Success",
            ProbeResult::Failure => "Failure",
            ProbeResult::Unknown => "UNKNOWN",
        }
    }
}

impl std::fmt::Display for ProbeResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which probe of a container (upstream `probeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeKind {
    pub const ALL: [ProbeKind; 3] = [
        ProbeKind::Liveness,
        ProbeKind::Readiness,
        ProbeKind::Startup,
    ];

    /// Upstream `probeType.String()`, also the first word of probe event messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }

    /// The value a worker reports for a container it has just discovered, before any probe ran
    /// (upstream `worker.initialValue`): not ready, alive, not started.
    pub fn initial_result(self) -> ProbeResult {
        match self {
            ProbeKind::Readiness => ProbeResult::Failure,
            ProbeKind::Liveness => ProbeResult::Success,
            ProbeKind::Startup => ProbeResult::Unknown,
        }
    }
}

impl std::fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One changed result (upstream `results.Update`, plus the container name and kind so that a
/// single stream carries all three upstream managers' updates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultUpdate {
    pub pod_uid: String,
    pub container_name: String,
    /// The container ID as the SyncLoop gave it in `ContainerInfo::id`.
    pub container_id: String,
    pub kind: ProbeKind,
    pub result: ProbeResult,
}

/// The sending half of the results of one worker: upstream `Set`/`Remove` on the kind's results
/// manager, with the same "send only on change" rule.
#[derive(Debug)]
pub(crate) struct ResultsWriter {
    tx: mpsc::UnboundedSender<ResultUpdate>,
    pod_uid: String,
    container_name: String,
    kind: ProbeKind,
    cache: HashMap<String, ProbeResult>,
}

impl ResultsWriter {
    pub(crate) fn new(
        tx: mpsc::UnboundedSender<ResultUpdate>,
        pod_uid: String,
        container_name: String,
        kind: ProbeKind,
    ) -> Self {
        ResultsWriter {
            tx,
            pod_uid,
            container_name,
            kind,
            cache: HashMap::new(),
        }
    }

    /// Upstream `Set`: caches `result` and sends an update when it differs from the cached value
    /// or nothing was cached. Returns whether an update was sent.
    pub(crate) fn set(&mut self, container_id: &str, result: ProbeResult) -> bool {
        if self.cache.get(container_id) == Some(&result) {
            return false;
        }
        self.cache.insert(container_id.to_string(), result);
        let update = ResultUpdate {
            pod_uid: self.pod_uid.clone(),
            container_name: self.container_name.clone(),
            container_id: container_id.to_string(),
            kind: self.kind,
            result,
        };
        if self.tx.send(update).is_err() {
            debug!("probe results receiver is gone; result dropped");
        }
        true
    }

    /// Upstream `Remove`: forgets the cached value without sending anything, so that a later
    /// `set` of the same container sends again.
    pub(crate) fn remove(&mut self, container_id: &str) {
        self.cache.remove(container_id);
    }

    #[cfg(test)]
    pub(crate) fn get(&self, container_id: &str) -> Option<ProbeResult> {
        self.cache.get(container_id).copied()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    pod_uid: String,
    result: ProbeResult,
}

/// The SyncLoop's synchronous view of probe results, keyed by `(container ID, kind)`: the
/// counterpart of upstream's three `results.Manager` caches as read by the kubelet
/// (`livenessManager.Get` in `computePodActions`, `UpdatePodStatus` for Started/Ready).
///
/// It is fed only by [`ProbeResults::apply`] on the [`ResultUpdate`] stream; since updates are
/// only sent on change, a stale entry stays until the SyncLoop drops it with
/// [`ProbeResults::remove_container`] (container removed from the runtime) or
/// [`ProbeResults::remove_pod`] (pod removed).
#[derive(Debug, Clone, Default)]
pub struct ProbeResults {
    map: HashMap<(String, ProbeKind), Entry>,
}

impl ProbeResults {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one update from the stream.
    pub fn apply(&mut self, update: &ResultUpdate) {
        self.set(
            &update.pod_uid,
            &update.container_id,
            update.kind,
            update.result,
        );
    }

    pub fn set(&mut self, pod_uid: &str, container_id: &str, kind: ProbeKind, result: ProbeResult) {
        self.map.insert(
            (container_id.to_string(), kind),
            Entry {
                pod_uid: pod_uid.to_string(),
                result,
            },
        );
    }

    pub fn get(&self, container_id: &str, kind: ProbeKind) -> Option<ProbeResult> {
        self.map
            .get(&(container_id.to_string(), kind))
            .map(|e| e.result)
    }

    /// Drops every kind's result of one container.
    pub fn remove_container(&mut self, container_id: &str) {
        for kind in ProbeKind::ALL {
            self.map.remove(&(container_id.to_string(), kind));
        }
    }

    /// Drops every result of one pod's containers.
    pub fn remove_pod(&mut self, pod_uid: &str) {
        self.map.retain(|_, e| e.pod_uid != pod_uid);
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// `containerStatus.started` (upstream `manager.isContainerStarted`): a non-running container
    /// is not started; else the startup result decides when there is one; else the container is
    /// started unless it has a startup probe that has not reported yet.
    ///
    /// Upstream asks "does a startup worker exist"; we ask whether the spec has a startup probe.
    /// They differ only after the startup worker stopped before ever succeeding (pod
    /// terminating): upstream then reports started, this reports the last result.
    pub fn is_started(&self, container_id: &str, running: bool, has_startup_probe: bool) -> bool {
        if !running {
            return false;
        }
        match self.get(container_id, ProbeKind::Startup) {
            Some(r) => r == ProbeResult::Success,
            None => !has_startup_probe,
        }
    }

    /// `containerStatus.ready` of a started container (upstream `UpdatePodStatus`): a non-running
    /// container is not ready; a readiness Success makes it ready; without a readiness probe it is
    /// ready. Callers first check [`ProbeResults::is_started`]: upstream leaves `ready` false for a
    /// container that has not started.
    pub fn is_ready(&self, container_id: &str, running: bool, has_readiness_probe: bool) -> bool {
        if !running {
            return false;
        }
        match self.get(container_id, ProbeKind::Readiness) {
            Some(ProbeResult::Success) => true,
            _ => !has_readiness_probe,
        }
    }

    /// True when the container's liveness probe has failed (upstream `computePodActions`:
    /// "Container %s failed liveness probe, will be restarted").
    pub fn liveness_failed(&self, container_id: &str) -> bool {
        self.get(container_id, ProbeKind::Liveness) == Some(ProbeResult::Failure)
    }

    /// True when the container's startup probe has failed (upstream: "Container %s failed startup
    /// probe, will be restarted").
    pub fn startup_failed(&self, container_id: &str) -> bool {
        self.get(container_id, ProbeKind::Startup) == Some(ProbeResult::Failure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_sends_only_on_change_and_after_remove() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut w = ResultsWriter::new(tx, "uid".into(), "c".into(), ProbeKind::Readiness);
        assert!(w.set("id1", ProbeResult::Failure));
        assert!(!w.set("id1", ProbeResult::Failure));
        assert!(w.set("id1", ProbeResult::Success));
        w.remove("id1");
        assert_eq!(w.get("id1"), None);
        assert!(w.set("id1", ProbeResult::Success));
        let got: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|u| u.result)
            .collect();
        assert_eq!(
            got,
            [
                ProbeResult::Failure,
                ProbeResult::Success,
                ProbeResult::Success
            ]
        );
    }

    #[test]
    fn writer_survives_a_dropped_receiver() {
        let (tx, rx) = mpsc::unbounded_channel();
        drop(rx);
        let mut w = ResultsWriter::new(tx, "uid".into(), "c".into(), ProbeKind::Liveness);
        assert!(w.set("id", ProbeResult::Success));
    }

    #[test]
    fn initial_values_are_upstreams() {
        assert_eq!(ProbeKind::Readiness.initial_result(), ProbeResult::Failure);
        assert_eq!(ProbeKind::Liveness.initial_result(), ProbeResult::Success);
        assert_eq!(ProbeKind::Startup.initial_result(), ProbeResult::Unknown);
    }

    #[test]
    fn results_cache_started_and_ready() {
        let mut r = ProbeResults::new();
        // No probes at all: started and ready as soon as running.
        assert!(r.is_started("a", true, false));
        assert!(!r.is_started("a", false, false));
        assert!(r.is_ready("a", true, false));
        assert!(!r.is_ready("a", false, false));
        // Probes that have not reported yet.
        assert!(!r.is_started("a", true, true));
        assert!(!r.is_ready("a", true, true));

        r.apply(&ResultUpdate {
            pod_uid: "p".into(),
            container_name: "c".into(),
            container_id: "a".into(),
            kind: ProbeKind::Startup,
            result: ProbeResult::Unknown,
        });
        assert!(!r.is_started("a", true, true));
        r.set("p", "a", ProbeKind::Startup, ProbeResult::Success);
        assert!(r.is_started("a", true, true));
        r.set("p", "a", ProbeKind::Readiness, ProbeResult::Failure);
        assert!(!r.is_ready("a", true, true));
        r.set("p", "a", ProbeKind::Readiness, ProbeResult::Success);
        assert!(r.is_ready("a", true, true));
        assert!(!r.is_ready("a", false, true));

        r.set("p", "a", ProbeKind::Liveness, ProbeResult::Failure);
        r.set("q", "b", ProbeKind::Startup, ProbeResult::Failure);
        assert!(r.liveness_failed("a") && !r.liveness_failed("b"));
        assert!(r.startup_failed("b") && !r.startup_failed("a"));
        assert_eq!(r.len(), 4);

        r.remove_container("a");
        assert_eq!(r.len(), 1);
        r.remove_pod("q");
        assert!(r.is_empty());
    }
}
