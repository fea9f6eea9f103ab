//! CRI-facing half of the runtime manager (upstream `kubeGenericRuntimeManager`): reads a pod's
//! runtime state and performs single operations. Decisions live in `actions`; the order of
//! operations for one sync lives in `sync`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Container, Pod};
use rkubelet_cri::{api, CriClient, CriError};
use tokio::time::Instant;
use tracing::{debug, warn};

use super::{labels, sandbox, ContainerState, ContainerStatus, PodRuntimeStatus, SandboxStatus};
use crate::dns::DnsSettings;
use crate::logs::{termination, ContainerLog, LogHandle, LogsToClean};
use crate::podutil;

/// Runtime operation errors; they carry the CRI error and what we were doing.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("{what}: {source}")]
    Cri {
        what: String,
        #[source]
        source: CriError,
    },
    #[error("{what}")]
    Config { what: String },
    #[error(transparent)]
    RuntimeClass(#[from] super::runtime_class::RuntimeClassError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("container logs: {0}")]
    Logs(#[from] crate::logs::LogsError),
    #[error(transparent)]
    Cache(#[from] crate::container::CacheError),
    /// Upstream `SyncTerminatingPod`'s guard against a runtime whose StopContainer returned
    /// while the container runs on (its words).
    #[error("detected running containers after a successful KillPod, CRI violation: {ids:?}")]
    StillRunning { ids: Vec<String> },
    /// A shorter grace period arrived while the pod's containers were being stopped; the pod
    /// worker stops them again with it.
    #[error("termination interrupted: a shorter grace period arrived")]
    GraceShortened,
}

fn cri(what: impl Into<String>) -> impl FnOnce(CriError) -> RuntimeError {
    let what = what.into();
    move |source| RuntimeError::Cri { what, source }
}

/// A pod the runtime has, identified by its labels (for PLEG and housekeeping).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RuntimePodRef {
    pub uid: String,
    pub name: String,
    pub namespace: String,
}

impl RuntimePodRef {
    pub fn of(pod: &Pod) -> Self {
        RuntimePodRef {
            uid: podutil::uid(pod).to_string(),
            name: podutil::name(pod).to_string(),
            namespace: podutil::namespace(pod).to_string(),
        }
    }
}

/// Cheap to clone: a CRI client, handles and immutable settings.
#[derive(Clone, Debug)]
pub struct RuntimeManager {
    pub cri: CriClient,
    pub pod_logs_dir: PathBuf,
    pub dns: DnsSettings,
    /// `--root-dir`: termination-log files live under `<root-dir>/pods/<uid>/containers/`.
    pub root_dir: PathBuf,
    /// Log symlinks on start, log removal before a container is removed.
    pub logs: LogHandle,
    /// The pod's cgroup parent (the container manager's `GetPodCgroupParent`; empty without pod
    /// cgroups): sandboxes start in their pod's cgroup. A function, so that the runtime does not
    /// depend on the container manager.
    pub cgroup_parent: CgroupParent,
    /// Containers and sandboxes a StopContainer / StopPodSandbox of ours is stopping now, or
    /// stopped less than [`STOPPED_KEPT`] ago ([`Marks`]).
    pub stopping: Marks,
    /// Pods whose worker is changing them in the runtime now ([`Marks`]).
    pub acting: Marks,
}

/// IDs marked while an operation on them runs, and for `kept` after it ended: what PLEG
/// leaves to whoever does the operation, which reads the pod itself when done.
///
/// - `stopping` ([`RuntimeManager::stopping`]): containers and sandboxes being stopped. PLEG
///   reads no pod for their exit events: until the stop returns CRI does not show the exit (a
///   sandbox's stop includes its network's teardown), so each event cost a read and its
///   retries for nothing, 4 to 6 reads of 5 CRI calls per pod deleted. An event may arrive
///   just after the stop's reply: a stopped ID is kept for [`STOPPED_KEPT`].
/// - `acting` ([`RuntimeManager::acting`]): pods (by UID) whose worker is carrying out its
///   actions (creating the sandbox, starting or stopping containers) and then waits for its own
///   read of the pod. The relist does not read them: the worker asks for a read newer than its
///   actions' end, which the relist's timestamp cannot answer. While 100 pods started, relists
///   read each about twice more between its sandbox and its container's start; while 100 were
///   deleted, about once more between the kill's end and the worker's read (5 CRI calls a read).
///
/// The relist still sees every change within a second of the mark's end.
#[derive(Clone, Debug)]
pub struct Marks {
    ids: std::sync::Arc<std::sync::Mutex<HashMap<String, Option<Instant>>>>,
    kept: Duration,
}

/// How long a stopped ID stays marked after its stop returned.
pub const STOPPED_KEPT: Duration = Duration::from_secs(2);

impl Marks {
    /// Marks that end `kept` after their operation (zero: at once).
    pub fn kept_for(kept: Duration) -> Marks {
        Marks {
            ids: Default::default(),
            kept,
        }
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<Instant>>> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn live(&self, ended: &Option<Instant>) -> bool {
        ended.is_none_or(|t| t.elapsed() < self.kept)
    }

    /// Marks `id` until the guard drops (the operation returned, failed or was cancelled), and
    /// `kept` after; take a "done" instant after the drop.
    pub fn mark(&self, id: &str) -> MarkGuard {
        let mut ids = self.ids();
        ids.retain(|_, t| self.live(t));
        ids.insert(id.to_string(), None);
        MarkGuard {
            marks: self.clone(),
            id: id.to_string(),
        }
    }

    /// Under way, or ended less than `kept` ago.
    pub fn contains(&self, id: &str) -> bool {
        self.ids().get(id).is_some_and(|t| self.live(t))
    }
}

pub struct MarkGuard {
    marks: Marks,
    id: String,
}

impl Drop for MarkGuard {
    fn drop(&mut self) {
        let mut ids = self.marks.ids();
        if self.marks.kept.is_zero() {
            ids.remove(&self.id);
        } else {
            ids.insert(self.id.clone(), Some(Instant::now()));
        }
    }
}

/// See [`RuntimeManager::cgroup_parent`].
#[derive(Clone)]
pub struct CgroupParent(pub std::sync::Arc<dyn Fn(&Pod) -> String + Send + Sync>);

impl std::fmt::Debug for CgroupParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CgroupParent")
    }
}

fn uid_filter(uid: &str) -> std::collections::HashMap<String, String> {
    [(labels::POD_UID.to_string(), uid.to_string())].into()
}

impl RuntimeManager {
    /// The sandbox config with the pod's cgroup as its parent (upstream
    /// `generatePodSandboxLinuxConfig` with `GetPodCgroupParent`); the same for the sandbox and
    /// for every CreateContainer of the pod.
    fn sandbox_config(&self, pod: &Pod, attempt: u32) -> Result<api::PodSandboxConfig, String> {
        let mut config = sandbox::sandbox_config(pod, attempt, &self.pod_logs_dir, &self.dns)?;
        if let Some(linux) = config.linux.as_mut() {
            linux.cgroup_parent = (self.cgroup_parent.0)(pod);
        }
        Ok(config)
    }

    /// Everything the runtime has for `uid`, newest first (upstream `GetPodStatus`).
    pub async fn pod_status(&self, uid: &str) -> Result<PodRuntimeStatus, RuntimeError> {
        let sandboxes = self
            .cri
            .list_pod_sandbox(api::ListPodSandboxRequest {
                filter: Some(api::PodSandboxFilter {
                    label_selector: uid_filter(uid),
                    ..Default::default()
                }),
            })
            .await
            .map_err(cri("list pod sandboxes"))?
            .items;
        let mut out = PodRuntimeStatus::default();
        for sb in sandboxes {
            let st = match self
                .cri
                .pod_sandbox_status(api::PodSandboxStatusRequest {
                    pod_sandbox_id: sb.id.clone(),
                    verbose: false,
                })
                .await
            {
                Ok(r) => r.status,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(cri(format!("status of sandbox {}", sb.id))(e)),
            };
            let Some(st) = st else { continue };
            out.sandboxes.push(super::status::sandbox(st));
        }
        out.sandboxes
            .sort_by_key(|s| std::cmp::Reverse(s.created_at));

        let containers = self
            .cri
            .list_containers(api::ListContainersRequest {
                filter: Some(api::ContainerFilter {
                    label_selector: uid_filter(uid),
                    ..Default::default()
                }),
            })
            .await
            .map_err(cri("list containers"))?
            .containers;
        // Removed between the listing and its read: not part of the pod any more.
        out.containers = self
            .container_statuses(containers.iter().map(|c| &c.id))
            .await?
            .into_iter()
            .flatten()
            .collect();
        out.containers
            .sort_by_key(|c| std::cmp::Reverse(c.created_at));
        Ok(out)
    }

    /// ContainerStatus of each of `ids`, all at once, in their order; None for one the runtime
    /// does not have (gone, or answered without a status). What a missing one means is the
    /// caller's: [`Self::pod_status`] leaves it out, [`Self::started_pod_status`] reads the
    /// whole pod instead.
    async fn container_statuses<'a>(
        &self,
        ids: impl Iterator<Item = &'a String>,
    ) -> Result<Vec<Option<ContainerStatus>>, RuntimeError> {
        let ids: Vec<&String> = ids.collect();
        let statuses = join_all(ids.iter().map(|id| {
            self.cri.container_status(api::ContainerStatusRequest {
                container_id: (*id).clone(),
                verbose: false,
            })
        }))
        .await;
        let mut out = Vec::with_capacity(ids.len());
        for (id, st) in ids.into_iter().zip(statuses) {
            match st {
                Ok(r) => match r.status {
                    Some(st) => out.push(Some(super::status::container(st).await)),
                    None => out.push(None),
                },
                Err(e) if e.is_not_found() => out.push(None),
                Err(e) => return Err(cri(format!("status of container {id}"))(e)),
            }
        }
        Ok(out)
    }

    /// Creates the pod's sandbox with the CRI `runtime_handler` (from its RuntimeClass, see
    /// [`super::runtime_class`]) and returns its ID and its status as read right after (upstream
    /// `createPodSandbox`, then `PodSandboxStatus` for the IP); no status when that read failed.
    pub async fn run_sandbox(
        &self,
        pod: &Pod,
        attempt: u32,
        runtime_handler: String,
    ) -> Result<(String, Option<SandboxStatus>), RuntimeError> {
        let config = self
            .sandbox_config(pod, attempt)
            .map_err(|what| RuntimeError::Config { what })?;
        tokio::fs::create_dir_all(&config.log_directory)
            .await
            .map_err(|source| RuntimeError::Io {
                what: format!("create pod log directory {}", config.log_directory),
                source,
            })?;
        let id = self
            .cri
            .run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(config),
                runtime_handler,
            })
            .await
            .map_err(cri("RunPodSandbox"))?
            .pod_sandbox_id;
        let status = self
            .cri
            .pod_sandbox_status(api::PodSandboxStatusRequest {
                pod_sandbox_id: id.clone(),
                verbose: false,
            })
            .await
            .ok()
            .and_then(|r| r.status)
            .map(super::status::sandbox);
        Ok((id, status))
    }

    /// The status of a pod the kubelet has just started from nothing: `started`'s sandbox as read
    /// when it was made, and each of its containers read now (one ContainerStatus each, where
    /// [`Self::pod_status`] makes two listings and a sandbox read besides). None when a container
    /// is not found: something else changed the pod, and only a whole read can tell.
    pub async fn started_pod_status(
        &self,
        started: &crate::container::cache::Started,
    ) -> Result<Option<PodRuntimeStatus>, RuntimeError> {
        let statuses = self.container_statuses(started.containers.iter()).await?;
        let Some(mut containers) = statuses.into_iter().collect::<Option<Vec<_>>>() else {
            return Ok(None);
        };
        containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        Ok(Some(PodRuntimeStatus {
            sandboxes: vec![started.sandbox.clone()],
            containers,
        }))
    }

    /// The status of a pod the kubelet has just stopped: each of `sandboxes` and `containers`
    /// (what the read the stop acted on showed) read now, one PodSandboxStatus or
    /// ContainerStatus each, where [`Self::pod_status`] lists both anew besides. None when one
    /// is not found: something else changed the pod, and only a whole read can tell.
    pub async fn stopped_pod_status(
        &self,
        sandboxes: &[String],
        containers: &[String],
    ) -> Result<Option<PodRuntimeStatus>, RuntimeError> {
        let (sandbox_reads, container_reads) = tokio::join!(
            join_all(sandboxes.iter().map(|id| {
                self.cri.pod_sandbox_status(api::PodSandboxStatusRequest {
                    pod_sandbox_id: id.clone(),
                    verbose: false,
                })
            })),
            self.container_statuses(containers.iter())
        );
        let mut out = PodRuntimeStatus::default();
        for (id, read) in sandboxes.iter().zip(sandbox_reads) {
            match read {
                Ok(r) => match r.status {
                    Some(st) => out.sandboxes.push(super::status::sandbox(st)),
                    None => return Ok(None),
                },
                Err(e) if e.is_not_found() => return Ok(None),
                Err(e) => return Err(cri(format!("status of sandbox {id}"))(e)),
            }
        }
        let Some(containers) = container_reads?.into_iter().collect::<Option<Vec<_>>>() else {
            return Ok(None);
        };
        out.containers = containers;
        // The order a whole read gives: newest first.
        out.sandboxes
            .sort_by_key(|s| std::cmp::Reverse(s.created_at));
        out.containers
            .sort_by_key(|c| std::cmp::Reverse(c.created_at));
        Ok(Some(out))
    }

    /// CreateContainer + StartContainer (upstream `startContainer`, without hooks yet). Returns the
    /// container ID; errors say which step failed, because the reason differs
    /// (`CreateContainerError` vs `RunContainerError`). `on_created` runs between the two (the
    /// pod's start-up timeline).
    pub async fn create_and_start(
        &self,
        pod: &Pod,
        c: &Container,
        mut config: api::ContainerConfig,
        sandbox_id: &str,
        sandbox_attempt: u32,
        on_created: impl FnOnce(),
    ) -> Result<String, StartFailure> {
        let sb_config = self
            .sandbox_config(pod, sandbox_attempt)
            .map_err(StartFailure::Create)?;
        if let Some(host) = termination::create_file(&self.root_dir, pod, c).await {
            config
                .mounts
                .extend(super::container::termination_message_mount(c, &host));
        }
        let log = PathBuf::from(&sb_config.log_directory).join(&config.log_path);
        let log_dir = sandbox::pod_logs_dir(&self.pod_logs_dir, pod).join(&c.name);
        if let Err(e) = tokio::fs::create_dir_all(&log_dir).await {
            return Err(StartFailure::Create(format!(
                "create container log directory {}: {e}",
                log_dir.display()
            )));
        }
        let id = self
            .cri
            .create_container(api::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.to_string(),
                config: Some(config),
                sandbox_config: Some(sb_config),
            })
            .await
            .map_err(|e| StartFailure::Create(e.message()))?
            .container_id;
        on_created();
        if let Err(e) = self
            .cri
            .start_container(api::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
        {
            return Err(StartFailure::Start(e.message()));
        }
        self.logs
            .container_started(
                podutil::name(pod),
                podutil::namespace(pod),
                &c.name,
                &id,
                &log,
            )
            .await;
        Ok(id)
    }

    /// StartContainer on a container found `Created` (an earlier start was interrupted between
    /// CreateContainer and StartContainer, e.g. the kubelet was killed): it is started as it is,
    /// keeping its restart count, instead of being replaced by a new instance. Beyond upstream,
    /// which replaces it and counts a restart.
    pub async fn start_existing(
        &self,
        pod: &Pod,
        c: &Container,
        id: &str,
        restart_count: i32,
    ) -> Result<(), StartFailure> {
        self.cri
            .start_container(api::StartContainerRequest {
                container_id: id.to_string(),
            })
            .await
            .map_err(|e| StartFailure::Start(e.message()))?;
        let log = sandbox::pod_logs_dir(&self.pod_logs_dir, pod)
            .join(super::container::log_path(c, restart_count));
        self.logs
            .container_started(
                podutil::name(pod),
                podutil::namespace(pod),
                &c.name,
                id,
                &log,
            )
            .await;
        Ok(())
    }

    /// StopContainer with a grace period; a container already gone counts as stopped.
    pub async fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let _stopping = self.stopping.mark(id);
        match self
            .cri
            .stop_container(api::StopContainerRequest {
                container_id: id.to_string(),
                timeout: grace.as_secs() as i64,
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(cri(format!("stop container {id}"))(e)),
        }
    }

    /// Removes the container's logs and log symlink, then the container (upstream
    /// `removeContainer`: logs first, as they are found through the container's status).
    pub async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.remove_container_logged(LogsToClean::Lookup(id.to_string()))
            .await
    }

    /// [`Self::remove_container`] with the container's logs found as `logs` says (a read of the
    /// pod already in hand saves the ContainerStatus).
    async fn remove_container_logged(&self, logs: LogsToClean) -> Result<(), RuntimeError> {
        self.logs.container_removed(&logs).await?;
        let id = logs.id();
        match self
            .cri
            .remove_container(api::RemoveContainerRequest {
                container_id: id.to_string(),
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(cri(format!("remove container {id}"))(e)),
        }
    }

    pub async fn stop_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        let _stopping = self.stopping.mark(id);
        match self
            .cri
            .stop_pod_sandbox(api::StopPodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(cri(format!("stop sandbox {id}"))(e)),
        }
    }

    pub async fn remove_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        match self
            .cri
            .remove_pod_sandbox(api::RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(cri(format!("remove sandbox {id}"))(e)),
        }
    }

    /// Stops every running container in parallel with `grace`, then every sandbox (upstream
    /// `KillPod`). Returns the first error after trying everything.
    pub async fn kill_pod(
        &self,
        status: &PodRuntimeStatus,
        grace: Duration,
    ) -> Result<(), RuntimeError> {
        let running: Vec<_> = status
            .containers
            .iter()
            .filter(|c| {
                matches!(
                    c.state,
                    ContainerState::Running | ContainerState::Created | ContainerState::Unknown
                )
            })
            .collect();
        let results = join_all(running.iter().map(|c| {
            debug!(container = %c.name, id = %c.id, grace = ?grace, "stopping container");
            self.stop_container(&c.id, grace)
        }))
        .await;
        let mut first_err = results.into_iter().find_map(Result::err);
        for sb in status.sandboxes.iter().filter(|s| s.ready) {
            if let Err(e) = self.stop_sandbox(&sb.id).await {
                warn!(sandbox = %sb.id, error = %e, "failed to stop sandbox");
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Removes all containers and sandboxes of a pod that was killed, and its log directory
    /// (upstream does this through container GC once the pod is gone).
    ///
    /// The containers' logs go first, as upstream's `removeContainer` removes them before the
    /// container. The containers themselves go with their sandbox: the CRI contract has
    /// RemovePodSandbox remove the sandbox's containers, as containerd and CRI-O do, so a pod
    /// costs one call per sandbox where upstream's GC makes a RemoveContainer per container
    /// first (each on the pod's removal path, for work RemovePodSandbox does anyway). Only
    /// when the read shows no sandbox is each container removed by itself. A stopped container
    /// whose sandbox the read did not show (containerd leaves none behind: its RemovePodSandbox
    /// fails if a container's removal does) would stay until housekeeping finds its pod
    /// unwanted, which for a pod whose object stays (Failed, evicted) is its deletion.
    pub async fn remove_pod(
        &self,
        pod: &RuntimePodRef,
        status: &PodRuntimeStatus,
    ) -> Result<(), RuntimeError> {
        let mut first_err = None;
        let with_sandbox = !status.sandboxes.is_empty();
        for c in &status.containers {
            // The read that found the container says where its logs are (no path: only the
            // symlink, as a ContainerStatus would have said too).
            let logs = LogsToClean::Known(ContainerLog {
                id: c.id.clone(),
                log_path: c.log_path.clone(),
                pod_name: pod.name.clone(),
                pod_namespace: pod.namespace.clone(),
                container_name: c.name.clone(),
            });
            let removed = match with_sandbox {
                true => self
                    .logs
                    .container_removed(&logs)
                    .await
                    .map_err(RuntimeError::from),
                false => self.remove_container_logged(logs).await,
            };
            if let Err(e) = removed {
                first_err.get_or_insert(e);
            }
        }
        for sb in &status.sandboxes {
            if let Err(e) = self.remove_sandbox(&sb.id).await {
                first_err.get_or_insert(e);
            }
        }
        if first_err.is_none() {
            let dir = sandbox::logs_dir_of(&self.pod_logs_dir, &pod.namespace, &pod.name, &pod.uid);
            if let Err(e) = tokio::fs::remove_dir_all(&dir).await {
                if e.kind() != std::io::ErrorKind::NotFound {
                    warn!(dir = %dir.display(), error = %e, "failed to remove pod log directory");
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// All pods the runtime has, by their labels (upstream `GetPods(all=true)`).
    pub async fn list_pods(
        &self,
    ) -> Result<Vec<(RuntimePodRef, RuntimeSnapshotEntry)>, RuntimeError> {
        let sandboxes = self
            .cri
            .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
            .await
            .map_err(cri("list pod sandboxes"))?
            .items;
        let containers = self
            .cri
            .list_containers(api::ListContainersRequest { filter: None })
            .await
            .map_err(cri("list containers"))?
            .containers;
        let mut map: std::collections::BTreeMap<String, (RuntimePodRef, RuntimeSnapshotEntry)> =
            Default::default();
        let key = |l: &std::collections::HashMap<String, String>| -> Option<RuntimePodRef> {
            Some(RuntimePodRef {
                uid: l.get(labels::POD_UID)?.clone(),
                name: l.get(labels::POD_NAME).cloned().unwrap_or_default(),
                namespace: l.get(labels::POD_NAMESPACE).cloned().unwrap_or_default(),
            })
        };
        for sb in sandboxes {
            let Some(k) = key(&sb.labels) else { continue };
            let e = map
                .entry(k.uid.clone())
                .or_insert_with(|| (k, Default::default()));
            e.1.sandboxes
                .push((sb.id, sb.state == api::PodSandboxState::SandboxReady as i32));
        }
        for c in containers {
            let Some(k) = key(&c.labels) else { continue };
            let e = map
                .entry(k.uid.clone())
                .or_insert_with(|| (k, Default::default()));
            e.1.containers.push((c.id, ContainerState::from(c.state)));
        }
        for (_, (_, e)) in map.iter_mut() {
            e.sandboxes.sort();
            e.containers.sort_by(|a, b| a.0.cmp(&b.0));
        }
        Ok(map.into_values().collect())
    }
}

/// Which step of starting a container failed.
#[derive(Debug, Clone, PartialEq)]
pub enum StartFailure {
    Create(String),
    Start(String),
}

/// What PLEG compares between relists: sandbox (id, ready) and container (id, state), sorted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeSnapshotEntry {
    pub sandboxes: Vec<(String, bool)>,
    pub containers: Vec<(String, ContainerState)>,
}
