//! Status manager (upstream `pkg/kubelet/status`): the one owner of every pod's latest API status.
//! Workers set statuses; the server reads them. Patching the API server joins here with the cluster
//! work, in this same loop, so versioning stays in one place.

pub mod compute;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

enum Cmd {
    Add(Arc<Pod>),
    Set(Arc<Pod>, Box<PodStatus>),
    Remove(String),
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

/// The manager task's state.
pub struct StatusManager {
    rx: mpsc::Receiver<Cmd>,
    pods: BTreeMap<String, (Arc<Pod>, Option<PodStatus>)>,
}

impl StatusManager {
    pub fn new() -> (Self, StatusHandle) {
        let (tx, rx) = mpsc::channel(1024);
        (
            StatusManager {
                rx,
                pods: BTreeMap::new(),
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
                    self.pods.insert(uid, (pod, Some(*status)));
                }
                Cmd::Remove(uid) => {
                    self.pods.remove(&uid);
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
