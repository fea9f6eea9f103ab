//! Status manager (upstream `pkg/kubelet/status`): the one owner of every pod's latest API status.
//! Workers set statuses; the server reads them. Patching the API server joins here with the cluster
//! work, in this same loop, so versioning stays in one place.

pub mod compute;
pub mod syncer;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

enum Cmd {
    Add(Arc<Pod>),
    /// The pod was deleted in the API and is now fully terminated: delete the object.
    Terminated(Arc<Pod>),
    Set(Arc<Pod>, Box<PodStatus>),
    Remove(String),
    /// The UID of a static pod's mirror in the API (None: no mirror right now).
    Mirror(String, Option<String>),
    List(oneshot::Sender<Vec<Pod>>),
}

/// Cheap cloneable handle to the status manager task.
#[derive(Clone, Debug)]
pub struct StatusHandle {
    tx: mpsc::Sender<Cmd>,
}

impl StatusHandle {
    /// Starts tracking a pod the kubelet now owns (shown as Pending until a worker reports).
    pub async fn add(&self, pod: Arc<Pod>) {
        let _ = self.tx.send(Cmd::Add(pod)).await;
    }
    pub async fn set(&self, pod: Arc<Pod>, status: PodStatus) {
        let _ = self.tx.send(Cmd::Set(pod, Box::new(status))).await;
    }
    /// The worker finished terminating a pod the API server deleted: remove the object (grace 0).
    pub async fn terminated(&self, pod: Arc<Pod>) {
        let _ = self.tx.send(Cmd::Terminated(pod)).await;
    }
    /// Static pods' statuses are written onto their mirror pods; the mirror manager says which.
    pub async fn set_mirror(&self, static_uid: &str, mirror_uid: Option<String>) {
        let _ = self
            .tx
            .send(Cmd::Mirror(static_uid.to_string(), mirror_uid))
            .await;
    }
    /// Forgets a pod once its worker finished cleaning it up.
    pub async fn remove(&self, uid: &str) {
        let _ = self.tx.send(Cmd::Remove(uid.to_string())).await;
    }
    /// Every pod with its status, for `/pods`.
    pub async fn list(&self) -> Vec<Pod> {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Cmd::List(tx)).await.is_err() {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }
}

fn key(pod: &Pod) -> syncer::PodKey {
    syncer::PodKey {
        namespace: crate::podutil::namespace(pod).into(),
        name: crate::podutil::name(pod).into(),
        uid: crate::podutil::uid(pod).into(),
    }
}

/// The manager task's state.
pub struct StatusManager {
    rx: mpsc::Receiver<Cmd>,
    /// Writes to the API server, when the kubelet has one.
    api: Option<mpsc::UnboundedSender<syncer::SyncCmd>>,
    pods: BTreeMap<String, (Arc<Pod>, Option<PodStatus>)>,
    /// Static pod UID -> its mirror pod's UID.
    mirrors: BTreeMap<String, String>,
}

impl StatusManager {
    /// Queues a status for the API server: API pods under their own UID, static pods onto their
    /// mirror pod (upstream `TranslatePodUID`), or nowhere while they have none.
    fn write(&self, pod: &Pod, status: &PodStatus) {
        let Some(api) = &self.api else { return };
        let mut k = key(pod);
        if crate::podutil::is_static(pod) {
            match self.mirrors.get(&k.uid) {
                Some(m) => k.uid = m.clone(),
                None => return,
            }
        }
        let _ = api.send(syncer::SyncCmd::Patch(k, Box::new(status.clone())));
    }

    /// `api` is the syncer's queue (see [`syncer::Syncer`]), None in standalone mode.
    pub fn new(api: Option<mpsc::UnboundedSender<syncer::SyncCmd>>) -> (Self, StatusHandle) {
        let (tx, rx) = mpsc::channel(1024);
        (
            StatusManager {
                rx,
                api,
                pods: BTreeMap::new(),
                mirrors: BTreeMap::new(),
            },
            StatusHandle { tx },
        )
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            let cmd = tokio::select! {
                _ = cancel.cancelled() => return,
                c = self.rx.recv() => match c { Some(c) => c, None => return },
            };
            match cmd {
                Cmd::Add(pod) => {
                    let uid = crate::podutil::uid(&pod).to_string();
                    let entry = self.pods.entry(uid).or_insert_with(|| (pod.clone(), None));
                    entry.0 = pod;
                }
                Cmd::Set(pod, status) => {
                    let uid = crate::podutil::uid(&pod).to_string();
                    self.write(&pod, &status);
                    self.pods.insert(uid, (pod, Some(*status)));
                }
                Cmd::Mirror(static_uid, mirror) => {
                    let changed = match mirror {
                        Some(m) => self.mirrors.insert(static_uid.clone(), m.clone()) != Some(m),
                        None => self.mirrors.remove(&static_uid).is_some(),
                    };
                    if changed {
                        if let Some((pod, Some(status))) = self.pods.get(&static_uid) {
                            self.write(pod, status);
                        }
                    }
                }
                Cmd::Terminated(pod) => {
                    if let (Some(api), false) = (&self.api, crate::podutil::is_static(&pod)) {
                        let _ = api.send(syncer::SyncCmd::Delete(key(&pod)));
                    }
                }
                Cmd::Remove(uid) => {
                    self.pods.remove(&uid);
                    self.mirrors.remove(&uid);
                }
                Cmd::List(reply) => {
                    let list = self
                        .pods
                        .values()
                        .map(|(pod, status)| {
                            let mut p = (**pod).clone();
                            p.status = Some(status.clone().unwrap_or_else(|| PodStatus {
                                phase: Some("Pending".into()),
                                ..Default::default()
                            }));
                            p
                        })
                        .collect();
                    let _ = reply.send(list);
                }
            }
        }
    }
}
