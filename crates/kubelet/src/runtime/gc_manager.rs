//! The container garbage collector's task (upstream `realContainerGC` + the container half of
//! `kubelet.StartGarbageCollection`): every [`CONTAINER_GC_PERIOD`] it removes dead containers
//! beyond the policy (with their log files), replaced sandboxes, pod log directories of deleted
//! pods and dangling `/var/log/containers` symlinks, deciding with [`super::gc`]. Pod states
//! come from the SyncLoop on request, so the collector never acts on a stale view of a pod.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use rkubelet_cri::api;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::gc::{self, ContainerGcPolicy, GcContainer, GcSandbox, PodStates};
use super::RuntimeManager;
use crate::container::ContainerState;
use crate::events::{self, EventType, Recorder};
use crate::types::labels;

/// Upstream `ContainerGCPeriod`.
pub const CONTAINER_GC_PERIOD: Duration = Duration::from_secs(60);
/// How soon the first collection is tried again while the pod sources have not all been read.
const SOURCES_WAIT: Duration = Duration::from_secs(2);

/// The SyncLoop answers these with the pods' states (see [`PodStates`]).
pub type StatesRequest = oneshot::Sender<PodStates>;

#[derive(Debug, thiserror::Error)]
pub enum ContainerGcError {
    #[error("{op}: {source}")]
    Cri {
        op: &'static str,
        #[source]
        source: rkubelet_cri::CriError,
    },
    #[error("{0}")]
    Removal(String),
    #[error("the container garbage collector (or the SyncLoop it asks) has stopped")]
    Stopped,
}

enum Request {
    DeleteAllUnused(oneshot::Sender<Result<(), ContainerGcError>>),
    Soon,
}

/// A cheap handle on the container garbage collector.
#[derive(Clone)]
pub struct ContainerGcHandle {
    tx: mpsc::Sender<Request>,
}

impl ContainerGcHandle {
    /// Upstream `DeleteAllUnusedContainers` (the eviction manager's disk reclaim): a collection
    /// now, which also removes every dead container and sandbox of finished pods.
    pub async fn delete_all_unused_containers(&self) -> Result<(), ContainerGcError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::DeleteAllUnused(tx))
            .await
            .map_err(|_| ContainerGcError::Stopped)?;
        rx.await.map_err(|_| ContainerGcError::Stopped)?
    }

    /// Asks for a collection soon (a pod worker replaced a sandbox); never waits.
    pub fn collect_soon(&self) {
        let _ = self.tx.try_send(Request::Soon);
    }
}

pub struct ContainerGc {
    runtime: RuntimeManager,
    policy: ContainerGcPolicy,
    /// Where the `<pod>_<ns>_<container>-<id>.log` symlinks are (upstream /var/log/containers).
    container_logs_dir: PathBuf,
    recorder: Recorder,
    states: mpsc::Sender<StatesRequest>,
    rx: mpsc::Receiver<Request>,
}

impl ContainerGc {
    pub fn new(
        runtime: RuntimeManager,
        policy: ContainerGcPolicy,
        container_logs_dir: PathBuf,
        recorder: Recorder,
        states: mpsc::Sender<StatesRequest>,
    ) -> (ContainerGc, ContainerGcHandle) {
        let (tx, rx) = mpsc::channel(8);
        let gc = ContainerGc {
            runtime,
            policy,
            container_logs_dir,
            recorder,
            states,
            rx,
        };
        (gc, ContainerGcHandle { tx })
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        info!(min_age = ?self.policy.min_age, max_per_pod_container = self.policy.max_per_pod_container,
            max_containers = self.policy.max_containers, "container garbage collection policy");
        let mut next = tokio::time::Instant::now();
        loop {
            // Waiting and collecting both end with the kubelet: a CRI call in a collection
            // must not hold its shutdown.
            let req = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep_until(next) => None,
                Some(req) = self.rx.recv() => Some(req),
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                () = self.handle(req, &mut next) => {}
            }
        }
    }

    /// One collection: the periodic one (`req` None), one a worker asked for, or the eviction
    /// manager's.
    async fn handle(&mut self, req: Option<Request>, next: &mut tokio::time::Instant) {
        match req {
            None => {
                let ready = self.collect_and_report(false).await;
                // The first full collection waits for every pod source (upstream only skips
                // the deleted pods' parts then, until the next period).
                *next = tokio::time::Instant::now()
                    + if ready {
                        CONTAINER_GC_PERIOD
                    } else {
                        SOURCES_WAIT
                    };
            }
            Some(Request::DeleteAllUnused(reply)) => {
                info!("attempting to delete unused containers");
                let _ = reply.send(self.collect(true).await.map(|_| ()));
            }
            Some(Request::Soon) => {
                self.collect_and_report(false).await;
            }
        }
    }

    /// A periodic collection; a failure is logged and a `ContainerGCFailed` event, as upstream.
    /// Returns whether the pod sources had all been read.
    async fn collect_and_report(&mut self, evict_non_deleted: bool) -> bool {
        match self.collect(evict_non_deleted).await {
            Ok(ready) => ready,
            Err(ContainerGcError::Stopped) => false,
            Err(e) => {
                warn!(error = %e, "container garbage collection failed");
                self.recorder.node_event(
                    EventType::Warning,
                    events::CONTAINER_GC_FAILED,
                    e.to_string(),
                );
                true
            }
        }
    }

    /// Upstream `GarbageCollect`: containers, then sandboxes, then log directories.
    async fn collect(&mut self, evict_non_deleted: bool) -> Result<bool, ContainerGcError> {
        // Read before asking for the states: a directory seen here existed before the answer,
        // so its pod, if still wanted, is in it.
        let started = std::time::Instant::now();
        let log_dirs = read_dir_names(&self.runtime.pod_logs_dir).await;
        let (tx, rx) = oneshot::channel();
        self.states
            .send(tx)
            .await
            .map_err(|_| ContainerGcError::Stopped)?;
        let states = rx.await.map_err(|_| ContainerGcError::Stopped)?;
        let (containers, sandboxes) = self.list().await?;
        let now_ns = crate::clock::now_unix_nanos();
        let mut errors = Vec::new();
        let remove = gc::containers_to_remove(
            &containers,
            &states,
            &self.policy,
            now_ns,
            evict_non_deleted,
        );
        let removed: HashSet<&str> = remove.iter().map(String::as_str).collect();
        for id in &remove {
            let Some(c) = containers.iter().find(|c| &c.id == id) else {
                continue;
            };
            if c.state == ContainerState::Unknown {
                // Upstream kills a container in an unknown state before removing it.
                if let Err(e) = self.runtime.stop_container(id, Duration::ZERO).await {
                    errors.push(e.to_string());
                    continue;
                }
            }
            info!(pod_uid = %c.pod_uid, container = %c.name, id = %id, "removing dead container");
            if let Err(e) = self.runtime.remove_container(id).await {
                errors.push(e.to_string());
            }
        }
        let remaining: Vec<GcContainer> = containers
            .into_iter()
            .filter(|c| !removed.contains(c.id.as_str()))
            .collect();
        for id in gc::sandboxes_to_remove(&sandboxes, &remaining, &states, evict_non_deleted) {
            info!(sandbox = %id, "removing dead sandbox");
            if let Err(e) = self.runtime.stop_sandbox(&id).await {
                errors.push(e.to_string());
                continue;
            }
            if let Err(e) = self.runtime.remove_sandbox(&id).await {
                errors.push(e.to_string());
            }
        }
        let runtime_uids: HashSet<String> = remaining
            .iter()
            .map(|c| c.pod_uid.clone())
            .chain(sandboxes.iter().map(|s| s.pod_uid.clone()))
            .collect();
        for name in gc::log_dirs_to_remove(&log_dirs, &states, &runtime_uids) {
            let dir = self.runtime.pod_logs_dir.join(&name);
            info!(dir = %dir.display(), "removing the log directory of a deleted pod");
            if let Err(e) = tokio::fs::remove_dir_all(&dir).await {
                if e.kind() != std::io::ErrorKind::NotFound {
                    errors.push(format!("remove {}: {e}", dir.display()));
                }
            }
        }
        self.remove_dangling_symlinks().await;
        debug!(elapsed = ?started.elapsed(), containers = remaining.len() + remove.len(),
            removed = remove.len(), "container garbage collection pass");
        if errors.is_empty() {
            Ok(states.sources_ready)
        } else {
            Err(ContainerGcError::Removal(errors.join(", ")))
        }
    }

    /// Every container and sandbox the kubelet made (those with a pod UID label).
    async fn list(&self) -> Result<(Vec<GcContainer>, Vec<GcSandbox>), ContainerGcError> {
        let cri = &self.runtime.cri;
        let containers = cri
            .list_containers(api::ListContainersRequest { filter: None })
            .await
            .map_err(|source| ContainerGcError::Cri {
                op: "list containers",
                source,
            })?
            .containers
            .into_iter()
            .filter_map(|c| {
                Some(GcContainer {
                    pod_uid: c.labels.get(labels::POD_UID)?.clone(),
                    name: c
                        .labels
                        .get(labels::CONTAINER_NAME)
                        .cloned()
                        .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))?,
                    sandbox_id: c.pod_sandbox_id,
                    created_at: c.created_at,
                    state: ContainerState::from(c.state),
                    id: c.id,
                })
            })
            .collect();
        let sandboxes = cri
            .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
            .await
            .map_err(|source| ContainerGcError::Cri {
                op: "list pod sandboxes",
                source,
            })?
            .items
            .into_iter()
            .filter_map(|s| {
                Some(GcSandbox {
                    pod_uid: s.labels.get(labels::POD_UID)?.clone(),
                    created_at: s.created_at,
                    ready: s.state == api::PodSandboxState::SandboxReady as i32,
                    id: s.id,
                })
            })
            .collect();
        Ok((containers, sandboxes))
    }

    /// Upstream's dead legacy symlink removal: a `*.log` symlink whose target is gone, unless
    /// its container still exists and has not exited (its log may be mid-rotation).
    async fn remove_dangling_symlinks(&self) {
        let dir = &self.container_logs_dir;
        for name in read_dir_names(dir).await {
            if !name.ends_with(".log") {
                continue;
            }
            let path = dir.join(&name);
            let dangling = matches!(tokio::fs::symlink_metadata(&path).await, Ok(m) if m.file_type().is_symlink())
                && tokio::fs::metadata(&path).await.is_err();
            if !dangling {
                continue;
            }
            if let Some(id) = gc::container_id_of_symlink(&name) {
                let st = self
                    .runtime
                    .cri
                    .container_status(api::ContainerStatusRequest {
                        container_id: id.to_string(),
                        verbose: false,
                    })
                    .await;
                if let Ok(Some(s)) = st.map(|r| r.status) {
                    if s.state != api::ContainerState::ContainerExited as i32 {
                        debug!(symlink = %path.display(), "container not exited; keeping its log symlink");
                        continue;
                    }
                }
            }
            debug!(symlink = %path.display(), "removing dangling container log symlink");
            if let Err(e) = tokio::fs::remove_file(&path).await {
                warn!(symlink = %path.display(), error = %e, "cannot remove dangling log symlink");
            }
        }
    }
}

async fn read_dir_names(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(mut rd) = tokio::fs::read_dir(dir).await else {
        return out;
    };
    while let Ok(Some(e)) = rd.next_entry().await {
        if let Some(n) = e.file_name().to_str() {
            out.push(n.to_string());
        }
    }
    out
}
