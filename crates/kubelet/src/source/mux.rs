//! Merges source snapshots into ADD / UPDATE / REMOVE for the SyncLoop (upstream `PodConfig` /
//! `podStorage.merge`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{ConfigEvent, PodOp, PodUpdate, SourceMsg, SourceSnapshot};
use crate::podutil;

/// What one source last wanted, by UID.
#[derive(Default)]
pub struct Merger {
    sources: HashMap<&'static str, HashMap<String, Arc<Pod>>>,
}

impl Merger {
    /// One message of a source: a snapshot is diffed whole, a change costs one lookup. Returns
    /// (events, first_time), as [`Merger::merge`].
    pub fn take(&mut self, msg: SourceMsg) -> (Vec<PodUpdate>, bool) {
        match msg {
            SourceMsg::Snapshot(snap) => self.merge(snap),
            SourceMsg::Set { source, pod } => self.set(source, pod),
            SourceMsg::Delete { source, uid } => self.delete(source, &uid),
        }
    }

    /// One pod set by its source: ADD when new, UPDATE when it differs semantically. No name
    /// check as in [`Merger::merge`]: only the API source sends changes, and the API server
    /// holds one live pod per name and sends a pod's delete before a new pod of its name.
    fn set(&mut self, source: &'static str, pod: Arc<Pod>) -> (Vec<PodUpdate>, bool) {
        let first = !self.sources.contains_key(source);
        let old = self.sources.entry(source).or_default();
        let op = match old.get(podutil::uid(&pod)) {
            None => Some(PodOp::Add),
            Some(prev) if Arc::ptr_eq(prev, &pod) => None,
            Some(prev) => differ_semantically(prev, &pod).then_some(PodOp::Update),
        };
        old.insert(podutil::uid(&pod).to_string(), pod.clone());
        let out = op.map(|op| PodUpdate {
            op,
            pods: vec![pod],
            source,
        });
        (out.into_iter().collect(), first)
    }

    /// One pod its source no longer wants: REMOVE, if the source had it.
    fn delete(&mut self, source: &'static str, uid: &str) -> (Vec<PodUpdate>, bool) {
        let first = !self.sources.contains_key(source);
        let gone = self.sources.entry(source).or_default().remove(uid);
        let out = gone.map(|pod| PodUpdate {
            op: PodOp::Remove,
            pods: vec![pod],
            source,
        });
        (out.into_iter().collect(), first)
    }

    /// Diffs a snapshot against the source's previous one. REMOVE comes before ADD so that an edited
    /// static pod (new UID, same name) frees its name first. Returns (events, first_time).
    pub fn merge(&mut self, snap: SourceSnapshot) -> (Vec<PodUpdate>, bool) {
        let first = !self.sources.contains_key(snap.source);
        let old = self.sources.entry(snap.source).or_default();
        // Borrowed keys and the previous map updated in place: a snapshot per watch event (one
        // per status patch of ours echoing back) allocates nothing per pod it shares.
        let mut names: HashSet<(&str, &str)> = HashSet::with_capacity(snap.pods.len());
        let mut uids: HashSet<&str> = HashSet::with_capacity(snap.pods.len());
        let mut adds = Vec::new();
        let mut updates = Vec::new();
        let mut replaced = Vec::new();
        for pod in &snap.pods {
            let uid = podutil::uid(pod);
            if !names.insert((podutil::namespace(pod), podutil::name(pod))) || !uids.insert(uid) {
                let full = podutil::full_name(pod);
                warn!(pod = %full, source = snap.source, "duplicate pod name or UID in source; ignoring the later one");
                continue;
            }
            match old.get(uid) {
                None => adds.push(pod.clone()),
                // The same allocation: the source did not replace this pod since the last one.
                Some(prev) if Arc::ptr_eq(prev, pod) => {}
                Some(prev) => {
                    if differ_semantically(prev, pod) {
                        updates.push(pod.clone());
                    }
                    replaced.push(pod.clone());
                }
            }
        }
        // Every previous pod the snapshot still has was matched above: fewer means removals.
        let mut removes = Vec::new();
        if uids.len() - adds.len() < old.len() {
            old.retain(|uid, pod| {
                let keep = uids.contains(uid.as_str());
                if !keep {
                    removes.push(pod.clone());
                }
                keep
            });
        }
        for pod in adds.iter().chain(&replaced) {
            old.insert(podutil::uid(pod).to_string(), pod.clone());
        }
        let mut out = Vec::new();
        for (op, pods) in [
            (PodOp::Remove, removes),
            (PodOp::Add, adds),
            (PodOp::Update, updates),
        ] {
            if !pods.is_empty() {
                out.push(PodUpdate {
                    op,
                    pods,
                    source: snap.source,
                });
            }
        }
        (out, first)
    }
}

/// Upstream `podsDifferSemantically`: what the kubelet acts on. Status and bookkeeping fields
/// (resourceVersion, managedFields) change with every status patch and must not cause a resync.
fn differ_semantically(a: &Pod, b: &Pod) -> bool {
    let (ma, mb) = (&a.metadata, &b.metadata);
    a.spec != b.spec
        || ma.labels != mb.labels
        || ma.annotations != mb.annotations
        || ma.deletion_timestamp != mb.deletion_timestamp
        || ma.deletion_grace_period_seconds != mb.deletion_grace_period_seconds
}

/// The mux task: snapshots in, events out.
pub async fn run(
    mut rx: mpsc::Receiver<SourceMsg>,
    tx: mpsc::Sender<ConfigEvent>,
    cancel: CancellationToken,
) {
    let mut merger = Merger::default();
    loop {
        let msg = tokio::select! {
            _ = cancel.cancelled() => return,
            s = rx.recv() => match s { Some(s) => s, None => return },
        };
        let source = msg.source();
        let (events, first) = merger.take(msg);
        for ev in events {
            if tx.send(ConfigEvent::Update(ev)).await.is_err() {
                return;
            }
        }
        if first && tx.send(ConfigEvent::SourceReady(source)).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: &str) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some(uid.into());
        Arc::new(p)
    }

    #[test]
    fn diffs_snapshots() {
        let mut m = Merger::default();
        let (ev, first) = m.merge(SourceSnapshot {
            source: "file",
            pods: vec![pod("a", "1"), pod("b", "2")],
        });
        assert!(first);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].op, PodOp::Add);
        assert_eq!(ev[0].pods.len(), 2);
        // Same snapshot again: nothing.
        let (ev, first) = m.merge(SourceSnapshot {
            source: "file",
            pods: vec![pod("a", "1"), pod("b", "2")],
        });
        assert!(!first);
        assert!(ev.is_empty());
        // Edit of a (new uid, same name) and removal of b: removes first, then the add.
        let (ev, _) = m.merge(SourceSnapshot {
            source: "file",
            pods: vec![pod("a", "3")],
        });
        let ops: Vec<_> = ev.iter().map(|e| (e.op, e.pods.len())).collect();
        assert_eq!(ops, vec![(PodOp::Remove, 2), (PodOp::Add, 1)]);
        // Label change with same uid: update.
        let mut p = pod("a", "3").as_ref().clone();
        p.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
        let (ev, _) = m.merge(SourceSnapshot {
            source: "file",
            pods: vec![Arc::new(p)],
        });
        assert_eq!(ev[0].op, PodOp::Update);
        // A new resourceVersion alone (our own status patch) is no update.
        let mut p = m.sources["file"]["3"].as_ref().clone();
        p.metadata.resource_version = Some("42".into());
        let (ev, _) = m.merge(SourceSnapshot {
            source: "file",
            pods: vec![Arc::new(p)],
        });
        assert!(ev.is_empty());
        // Duplicate names: the later one is ignored.
        let (ev, _) = m.merge(SourceSnapshot {
            source: "file",
            pods: vec![pod("a", "3"), pod("a", "4")],
        });
        assert_eq!(
            ev.iter().map(|e| e.op).collect::<Vec<_>>(),
            vec![PodOp::Update]
        );
    }

    /// A change costs one lookup and says what the same change in a snapshot would: ADD for a
    /// new UID, UPDATE only for a semantic difference, REMOVE for a pod the source had. The first
    /// message of a source, whichever kind, makes it ready.
    #[test]
    fn changes_after_a_snapshot() {
        let mut m = Merger::default();
        let set = |pod: Arc<Pod>| SourceMsg::Set { source: "api", pod };
        let delete = |uid: &str| SourceMsg::Delete {
            source: "api",
            uid: uid.into(),
        };
        let ops = |ev: &[PodUpdate]| -> Vec<(PodOp, Vec<String>)> {
            ev.iter()
                .map(|e| {
                    assert_eq!(e.source, "api");
                    let uids = e.pods.iter().map(|p| podutil::uid(p).to_string());
                    (e.op, uids.collect())
                })
                .collect()
        };
        let snap = SourceSnapshot {
            source: "api",
            pods: vec![pod("a", "1")],
        };
        let (ev, first) = m.take(snap.into());
        assert!(first);
        assert_eq!(ops(&ev), vec![(PodOp::Add, vec!["1".to_string()])]);

        let b = pod("b", "2");
        let (ev, first) = m.take(set(b.clone()));
        assert!(!first);
        assert_eq!(ops(&ev), vec![(PodOp::Add, vec!["2".to_string()])]);
        // The same allocation again, then a new resourceVersion alone: nothing.
        assert!(m.take(set(b.clone())).0.is_empty());
        let mut p = b.as_ref().clone();
        p.metadata.resource_version = Some("7".into());
        assert!(m.take(set(Arc::new(p.clone()))).0.is_empty());
        // A label: UPDATE, and the source's view holds the new pod.
        p.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
        let (ev, _) = m.take(set(Arc::new(p)));
        assert_eq!(ops(&ev), vec![(PodOp::Update, vec!["2".to_string()])]);
        assert!(m.sources["api"]["2"].metadata.labels.is_some());
        // Deletes: a pod the source had, then one it never had.
        let (ev, _) = m.take(delete("1"));
        assert_eq!(ops(&ev), vec![(PodOp::Remove, vec!["1".to_string()])]);
        assert!(m.take(delete("1")).0.is_empty());
        // A snapshot after changes diffs against them: "2" stays, "3" is new.
        let (ev, _) = m.take(
            SourceSnapshot {
                source: "api",
                pods: vec![m.sources["api"]["2"].clone(), pod("c", "3")],
            }
            .into(),
        );
        assert_eq!(ops(&ev), vec![(PodOp::Add, vec!["3".to_string()])]);
        // A source whose first message is a change is ready with it.
        let (_, first) = Merger::default().take(delete("9"));
        assert!(first);
    }
}
