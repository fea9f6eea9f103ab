//! Mirror pods (upstream `pkg/kubelet/pod/mirror_client.go` and the mirror-pod parts of `syncPod`
//! and `HandlePodCleanups`): every static pod the kubelet runs has a read-only copy in the API
//! server so that `kubectl get pods` shows it. The copy carries `kubernetes.io/config.mirror` set
//! to the static pod's config hash and a controller owner reference to the Node, as
//! NodeRestriction demands of a node creating pods.
//!
//! One task owns both sides: the static pods the SyncLoop runs (desired) and the mirror pods the
//! API source sees (observed). Every change of either, and a 10 s tick for failed writes, runs one
//! reconcile: missing mirrors are created, stale ones (hash changed, or deleted by a user) are
//! deleted with grace 0 and re-created, orphans are deleted. The status manager learns each mirror's
//! UID so the static pod's status is written onto it.
//!
//! The API source sends a snapshot per watch event, so snapshots already queued when a write
//! returns do not show it yet. The manager's own writes are [`Expectations`] until a snapshot
//! shows them: without that, a static pod deleted in a burst was deleted again (404) for about
//! one pod in three and a mirror created again (409) for one in ten, each a request the API
//! server answers on the node's cores (bench/cri-floor.sh counts them). Upstream's
//! `HandlePodCleanups` repeats such writes too, every 2 s, until its informer catches up.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::podutil;
use crate::status::StatusHandle;
use crate::types::annotations::{CONFIG_HASH_ANNOTATION, MIRROR_ANNOTATION};

const RETRY_TICK: Duration = Duration::from_secs(10);
/// How long an own write is expected in the snapshots before they are believed again: a watch
/// delivers it in milliseconds, but one that restarts lists anew, and a mirror created and then
/// deleted by someone else in that gap never shows at all.
const EXPECTATION_TTL: Duration = Duration::from_secs(30);

enum Cmd {
    /// The static pods the kubelet currently runs.
    Desired(Vec<Arc<Pod>>),
    /// Every mirror pod bound to this node, as the API source last saw them.
    Observed(Vec<Arc<Pod>>),
}

/// Cheap cloneable handle to the mirror pod manager.
#[derive(Clone, Debug)]
pub struct MirrorHandle {
    tx: mpsc::UnboundedSender<Cmd>,
}

impl MirrorHandle {
    pub fn desired(&self, static_pods: Vec<Arc<Pod>>) {
        let _ = self.tx.send(Cmd::Desired(static_pods));
    }
    pub fn observed(&self, mirror_pods: Vec<Arc<Pod>>) {
        let _ = self.tx.send(Cmd::Observed(mirror_pods));
    }
}

pub struct MirrorManager {
    client: Client,
    node_name: String,
    node_uid: Option<String>,
    status: StatusHandle,
    rx: mpsc::UnboundedReceiver<Cmd>,
    /// Static pods by full name.
    desired: BTreeMap<String, Arc<Pod>>,
    /// Mirror pods by full name.
    observed: BTreeMap<String, Arc<Pod>>,
    /// Until the API source has listed once, "no mirror" may just mean "not heard yet".
    observed_once: bool,
    /// The API source's last snapshot of the mirror pods, as sent.
    snapshot: Vec<Arc<Pod>>,
    /// Likewise for the static pods: the SyncLoop publishes them once every source is ready.
    desired_once: bool,
    expect: Expectations,
}

/// This manager's own writes that the API source's snapshots may not show yet (the controller
/// "expectations" habit of client-go's controllers).
#[derive(Debug, Default)]
struct Expectations {
    /// Mirrors created, by full name, until a snapshot shows their UID.
    created: BTreeMap<String, (Arc<Pod>, Instant)>,
    /// Mirrors deleted, by UID, until a snapshot no longer has them.
    deleted: BTreeMap<String, Deleted>,
}

#[derive(Debug)]
struct Deleted {
    at: Instant,
    /// A snapshot has shown the mirror. One deleted before any did (created and deleted within
    /// moments) is still expected to show in the snapshots queued since its create, so a
    /// snapshot without it ends the expectation only once one has shown it.
    shown: bool,
}

impl Expectations {
    /// The mirror pods by full name as `snapshot` will be once it shows this manager's writes:
    /// a mirror it deleted is left out while the snapshot still has it, one it created is added
    /// while the snapshot has no mirror of that name. An expectation ends when a snapshot
    /// shows the write, or after [`EXPECTATION_TTL`].
    fn apply(&mut self, snapshot: Vec<Arc<Pod>>, now: Instant) -> BTreeMap<String, Arc<Pod>> {
        let fresh = |at: &Instant| now.duration_since(*at) < EXPECTATION_TTL;
        let uids: std::collections::BTreeSet<&str> =
            snapshot.iter().map(|p| podutil::uid(p)).collect();
        self.deleted.retain(|uid, d| {
            let present = uids.contains(uid.as_str());
            d.shown |= present;
            fresh(&d.at) && (present || !d.shown)
        });
        self.created
            .retain(|_, (p, at)| fresh(at) && !uids.contains(podutil::uid(p)));
        let mut out: BTreeMap<String, Arc<Pod>> = snapshot
            .into_iter()
            .filter(|p| !self.deleted.contains_key(podutil::uid(p)))
            .map(|p| (podutil::full_name(&p), p))
            .collect();
        for (full, (p, _)) in &self.created {
            out.entry(full.clone()).or_insert_with(|| p.clone());
        }
        out
    }
}

/// What one reconcile must do for one full name; pure, so it is unit tested.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    Create,
    /// Delete the mirror with this UID; re-create afterwards if `recreate`.
    Delete {
        uid: String,
        recreate: bool,
    },
}

fn plan(desired: Option<&Pod>, observed: Option<&Pod>) -> Option<Action> {
    match (desired, observed) {
        (None, None) => None,
        (Some(_), None) => Some(Action::Create),
        (None, Some(m)) => Some(Action::Delete {
            uid: podutil::uid(m).to_string(),
            recreate: false,
        }),
        (Some(s), Some(m)) => {
            let stale = m.metadata.deletion_timestamp.is_some()
                || annotation(m, MIRROR_ANNOTATION) != annotation(s, CONFIG_HASH_ANNOTATION);
            stale.then(|| Action::Delete {
                uid: podutil::uid(m).to_string(),
                recreate: true,
            })
        }
    }
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The mirror of a static pod (upstream `CreateMirrorPod`): same name, labels, annotations and
/// spec, plus the mirror annotation and the Node as controller owner (no blockOwnerDeletion:
/// NodeRestriction refuses it).
pub fn mirror_of(static_pod: &Pod, node_name: &str, node_uid: &str) -> Pod {
    let mut annotations = static_pod.metadata.annotations.clone().unwrap_or_default();
    let hash = annotations
        .get(CONFIG_HASH_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    annotations.insert(MIRROR_ANNOTATION.into(), hash);
    Pod {
        metadata: ObjectMeta {
            name: static_pod.metadata.name.clone(),
            namespace: static_pod.metadata.namespace.clone(),
            labels: static_pod.metadata.labels.clone(),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node_name.into(),
                uid: node_uid.into(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..Default::default()
        },
        spec: static_pod.spec.clone(),
        status: None,
    }
}

impl MirrorManager {
    pub fn new(client: Client, node_name: String, status: StatusHandle) -> (Self, MirrorHandle) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            MirrorManager {
                client,
                node_name,
                node_uid: None,
                status,
                rx,
                desired: BTreeMap::new(),
                observed: BTreeMap::new(),
                observed_once: false,
                snapshot: Vec::new(),
                desired_once: false,
                expect: Expectations::default(),
            },
            MirrorHandle { tx },
        )
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(RETRY_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                cmd = self.rx.recv() => match cmd {
                    Some(c) => self.take(c),
                    None => return,
                },
                _ = tick.tick() => {}
            }
            while let Ok(c) = self.rx.try_recv() {
                self.take(c);
            }
            if self.observed_once && self.desired_once {
                self.observe();
                self.reconcile().await;
            }
        }
    }

    /// Mirrors as the last snapshot and this manager's expectations give them; derived again
    /// before each reconcile, so an expectation past its TTL ends on the retry tick even when
    /// no snapshot comes.
    fn observe(&mut self) {
        self.observed = self.expect.apply(self.snapshot.clone(), Instant::now());
    }

    fn take(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Desired(pods) => {
                self.desired_once = true;
                self.desired = pods
                    .into_iter()
                    .map(|p| (podutil::full_name(&p), p))
                    .collect();
            }
            Cmd::Observed(pods) => {
                self.observed_once = true;
                // Every snapshot moves the expectations on, not only the last of a batch: one
                // in the middle may be the only one that shows a write (a mirror created, then
                // deleted by a user, both while a reconcile waited on the API server).
                self.expect.apply(pods.clone(), Instant::now());
                self.snapshot = pods;
            }
        }
    }

    /// The Node's UID for the owner reference; None until the node is registered.
    async fn node_uid(&mut self) -> Option<String> {
        if self.node_uid.is_none() {
            let nodes: Api<Node> = Api::all(self.client.clone());
            match nodes.get_opt(&self.node_name).await {
                Ok(Some(n)) => self.node_uid = n.metadata.uid,
                Ok(None) => debug!("node not registered yet; mirror pods wait"),
                Err(e) => warn!(error = %e, "cannot read the Node for mirror pods; will retry"),
            }
        }
        self.node_uid.clone()
    }

    async fn reconcile(&mut self) {
        let names: Vec<String> = self
            .desired
            .keys()
            .chain(self.observed.keys())
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        for full in names {
            let desired = self.desired.get(&full).cloned();
            let observed = self.observed.get(&full).map(|m| m.as_ref());
            if let (Some(s), Some(m)) = (&desired, observed) {
                if plan(Some(s), Some(m)).is_none() {
                    self.status
                        .set_mirror(podutil::uid(s), Some(podutil::uid(m).to_string()))
                        .await;
                }
            }
            match plan(desired.as_deref(), observed) {
                None => {}
                Some(Action::Create) => {
                    if let Some(s) = desired {
                        self.create(&s).await;
                    }
                }
                Some(Action::Delete { uid, recreate }) => {
                    if let Some(s) = &desired {
                        self.status.set_mirror(podutil::uid(s), None).await;
                    }
                    let Some(m) = self.observed.remove(&full) else {
                        continue;
                    };
                    if self.delete(&m, &uid).await && recreate {
                        if let Some(s) = desired {
                            self.create(&s).await;
                        }
                    }
                }
            }
        }
    }

    async fn create(&mut self, static_pod: &Arc<Pod>) {
        let Some(node_uid) = self.node_uid().await else {
            return;
        };
        let mirror = mirror_of(static_pod, &self.node_name, &node_uid);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), podutil::namespace(static_pod));
        let full = podutil::full_name(static_pod);
        match api.create(&PostParams::default(), &mirror).await {
            Ok(created) => {
                info!(pod = %full, "created mirror pod");
                self.status
                    .set_mirror(podutil::uid(static_pod), created.metadata.uid.clone())
                    .await;
                let created = Arc::new(created);
                self.expect
                    .created
                    .insert(full.clone(), (created.clone(), Instant::now()));
                self.observed.insert(full, created);
            }
            // The watch has not shown it yet; the next snapshot will.
            Err(kube::Error::Api(s)) if s.is_already_exists() => {
                debug!(pod = %full, "mirror pod already exists")
            }
            Err(e) => warn!(pod = %full, error = %e, "failed to create mirror pod; will retry"),
        }
    }

    /// Deletes a mirror pod now (grace 0, UID precondition, as upstream `DeleteMirrorPod`).
    async fn delete(&mut self, mirror: &Pod, uid: &str) -> bool {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), podutil::namespace(mirror));
        let dp = podutil::delete_now(uid);
        let full = podutil::full_name(mirror);
        // Gone (or going) once answered, whichever way: a UID mismatch means another pod has
        // the name now.
        let done = match api.delete(podutil::name(mirror), &dp).await {
            Ok(_) => {
                info!(pod = %full, "deleted mirror pod");
                true
            }
            Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => true,
            Err(e) => {
                warn!(pod = %full, error = %e, "failed to delete mirror pod; will retry");
                false
            }
        };
        if done {
            // Only this mirror's create expectation ends here, not another's of the same name.
            let unshown = self
                .expect
                .created
                .get(&full)
                .is_some_and(|(p, _)| podutil::uid(p) == uid);
            if unshown {
                self.expect.created.remove(&full);
            }
            let d = Deleted {
                at: Instant::now(),
                shown: !unshown,
            };
            self.expect.deleted.insert(uid.to_string(), d);
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(hash: Option<&str>, mirror: Option<&str>, uid: &str) -> Pod {
        let mut ann = BTreeMap::new();
        if let Some(h) = hash {
            ann.insert(CONFIG_HASH_ANNOTATION.to_string(), h.to_string());
        }
        if let Some(m) = mirror {
            ann.insert(MIRROR_ANNOTATION.to_string(), m.to_string());
        }
        let mut p = Pod::default();
        p.metadata.name = Some("web-node1".into());
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some(uid.into());
        p.metadata.annotations = Some(ann);
        p
    }

    #[test]
    fn plans() {
        let s = pod(Some("h1"), None, "static");
        let good = pod(Some("h1"), Some("h1"), "m1");
        let stale = pod(Some("h0"), Some("h0"), "m0");
        let mut deleted = good.clone();
        deleted.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(crate::status::compute::now()),
        );
        assert_eq!(plan(None, None), None);
        assert_eq!(plan(Some(&s), None), Some(Action::Create));
        assert_eq!(plan(Some(&s), Some(&good)), None);
        assert_eq!(
            plan(Some(&s), Some(&stale)),
            Some(Action::Delete {
                uid: "m0".into(),
                recreate: true
            })
        );
        assert_eq!(
            plan(Some(&s), Some(&deleted)),
            Some(Action::Delete {
                uid: "m1".into(),
                recreate: true
            })
        );
        assert_eq!(
            plan(None, Some(&good)),
            Some(Action::Delete {
                uid: "m1".into(),
                recreate: false
            })
        );
    }

    /// Rows: the expectations after a write, the snapshot that arrives (UIDs of mirror pods of
    /// one name), when, and the UIDs the manager then believes are there.
    #[test]
    fn own_writes_are_expected_until_a_snapshot_shows_them() {
        let t0 = Instant::now();
        let m = |uid: &str| Arc::new(pod(Some("h1"), Some("h1"), uid));
        let late = t0 + EXPECTATION_TTL;
        struct Row {
            what: &'static str,
            created: Option<&'static str>,
            deleted: Option<(&'static str, bool)>,
            snapshot: &'static [&'static str],
            at: Instant,
            believed: &'static [&'static str],
            expecting: bool,
        }
        #[rustfmt::skip]
        let rows = [
            Row { what: "created, snapshot from before the create", created: Some("b"), deleted: None,
                  snapshot: &[], at: t0, believed: &["b"], expecting: true },
            Row { what: "created, snapshot shows it", created: Some("b"), deleted: None,
                  snapshot: &["b"], at: t0, believed: &["b"], expecting: false },
            Row { what: "created long ago and never shown", created: Some("b"), deleted: None,
                  snapshot: &[], at: late, believed: &[], expecting: false },
            Row { what: "deleted, snapshot from before the delete", created: None, deleted: Some(("a", true)),
                  snapshot: &["a"], at: t0, believed: &[], expecting: true },
            Row { what: "deleted, snapshot without it", created: None, deleted: Some(("a", true)),
                  snapshot: &[], at: t0, believed: &[], expecting: false },
            Row { what: "deleted long ago and still shown (a finalizer)", created: None, deleted: Some(("a", true)),
                  snapshot: &["a"], at: late, believed: &["a"], expecting: false },
            Row { what: "replaced, snapshot from before both", created: Some("b"), deleted: Some(("a", true)),
                  snapshot: &["a"], at: t0, believed: &["b"], expecting: true },
            Row { what: "created and deleted before shown, snapshot from before the create", created: None,
                  deleted: Some(("b", false)), snapshot: &[], at: t0, believed: &[], expecting: true },
            Row { what: "created and deleted before shown, snapshot from before the delete", created: None,
                  deleted: Some(("b", false)), snapshot: &["b"], at: t0, believed: &[], expecting: true },
            Row { what: "created and deleted long ago, never shown", created: None,
                  deleted: Some(("b", false)), snapshot: &[], at: late, believed: &[], expecting: false },
            Row { what: "replaced, snapshot shows the new one", created: Some("b"), deleted: Some(("a", true)),
                  snapshot: &["b"], at: t0, believed: &["b"], expecting: false },
        ];
        for r in rows {
            let mut e = Expectations::default();
            if let Some(uid) = r.created {
                e.created.insert("web-node1_default".into(), (m(uid), t0));
            }
            if let Some((uid, shown)) = r.deleted {
                e.deleted.insert(uid.into(), Deleted { at: t0, shown });
            }
            let out = e.apply(r.snapshot.iter().map(|u| m(u)).collect(), r.at);
            let uids: Vec<&str> = out.values().map(|p| podutil::uid(p)).collect();
            assert_eq!(uids, r.believed, "{}", r.what);
            assert_eq!(
                !e.created.is_empty() || !e.deleted.is_empty(),
                r.expecting,
                "{}: {e:?}",
                r.what
            );
        }
    }

    /// Snapshots in order, as the manager takes each one of a batch: a mirror it created that
    /// one snapshot shows and the next lacks (a user deleted it) is gone, not still expected.
    #[test]
    fn a_write_shown_in_the_middle_of_a_batch_ends_its_expectation() {
        let t0 = Instant::now();
        let m = |uid: &str| Arc::new(pod(Some("h1"), Some("h1"), uid));
        let mut e = Expectations::default();
        e.created.insert("web-node1_default".into(), (m("b"), t0));
        for snapshot in [vec![], vec![m("b")], vec![]] {
            e.apply(snapshot, t0);
        }
        assert!(e.created.is_empty(), "{e:?}");
        assert!(e.apply(vec![], t0).is_empty());
    }

    #[test]
    fn mirror_carries_hash_and_node_owner() {
        let s = pod(Some("h1"), None, "static");
        let m = mirror_of(&s, "node1", "node-uid");
        assert_eq!(annotation(&m, MIRROR_ANNOTATION), Some("h1"));
        assert_eq!(m.metadata.uid, None);
        let owner = &m.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Node", "node1", "node-uid")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, None);
    }
}
