//! The CPU manager's task (upstream `cpumanager.manager`): it alone owns the state and the
//! policy, writes the checkpoint after every change, and reconciles running containers'
//! cpusets every `cpuManagerReconcilePeriod` (upstream `reconcileState`), calling
//! `UpdateContainerResources` only when a container's set differs from the last one written
//! (upstream's `lastUpdateState`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::{api, CriClient};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::checkpoint::{self, Checkpoint};
use super::policy::{PolicyError, State, StaticPolicy, STATIC};
use super::{Command, CpuError, CpuSet};
use crate::cm::topology::BitMask;
use crate::podutil;
use crate::types::labels;

/// Upstream `restoreState`: a missing file is an empty state; another policy's file or a
/// corrupt one refuses the start.
pub async fn restore(path: &Path, policy: &str) -> Result<State, CpuError> {
    let fail = |message: String| CpuError::Restore {
        message,
        path: path.to_path_buf(),
    };
    let bytes = match tokio::fs::read(path).await {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(State::default()),
        Err(e) => return Err(fail(e.to_string())),
    };
    let cp = checkpoint::decode(&bytes).map_err(|e| fail(e.to_string()))?;
    if cp.policy_name != policy {
        return Err(fail(format!(
            "configured policy \"{policy}\" differs from state checkpoint policy \"{}\"",
            cp.policy_name
        )));
    }
    State::from_checkpoint(&cp).map_err(|e| fail(e.to_string()))
}

/// Writes the checkpoint atomically and durably (a synced temporary file renamed over it, as
/// upstream's checkpoint manager's file store does).
pub async fn store(path: &Path, cp: &Checkpoint) -> Result<(), CpuError> {
    use tokio::io::AsyncWriteExt as _;
    let err = |source| CpuError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(err)?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = tokio::fs::File::create(&tmp).await.map_err(err)?;
    f.write_all(&checkpoint::encode(cp)).await.map_err(err)?;
    f.sync_all().await.map_err(err)?;
    drop(f);
    tokio::fs::rename(&tmp, path).await.map_err(err)
}

pub struct Manager {
    policy: StaticPolicy,
    state: State,
    path: PathBuf,
    cri: CriClient,
    period: Duration,
    /// The pods holding resources, once housekeeping has told (None before: nothing is stale).
    active: Option<HashSet<String>>,
    /// container ID -> the cpuset last written to it.
    last_update: HashMap<String, CpuSet>,
}

impl Manager {
    pub fn new(
        policy: StaticPolicy,
        state: State,
        path: PathBuf,
        cri: CriClient,
        period: Duration,
    ) -> Self {
        Manager {
            policy,
            state,
            path,
            cri,
            period,
            active: None,
            last_update: HashMap::new(),
        }
    }

    pub async fn run(mut self, mut rx: mpsc::Receiver<Command>, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.period.max(Duration::from_millis(100)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                Some(cmd) = rx.recv() => self.handle(cmd).await,
                _ = tick.tick() => self.reconcile().await,
            }
        }
    }

    async fn save(&self) {
        if let Err(e) = store(&self.path, &self.state.to_checkpoint(STATIC)).await {
            warn!(error = %e, "[cpumanager] could not write the state checkpoint");
        }
    }

    async fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Allocate {
                pod,
                affinity,
                only,
                reply,
            } => {
                let r = self.allocate(&pod, &affinity, only.as_deref());
                if r.is_ok() {
                    self.save().await;
                }
                let _ = reply.send(r);
            }
            Command::Hints {
                pod,
                container,
                reply,
            } => {
                let hints = match container {
                    None => self.policy.pod_hints(&self.state, &pod),
                    Some(name) => podutil::init_containers(&pod)
                        .iter()
                        .chain(podutil::containers(&pod))
                        .find(|c| c.name == name)
                        .and_then(|c| self.policy.hints(&self.state, &pod, c)),
                };
                let _ = reply.send(hints);
            }
            Command::Affinity {
                uid,
                container,
                reply,
            } => {
                let _ = reply.send(self.state.get_or_default(&uid, &container));
            }
            Command::Assigned { reply } => {
                let _ = reply.send(self.state.assignments.clone());
            }
            Command::Allocatable { reply } => {
                let _ = reply.send(self.policy.allocatable());
            }
            Command::Release { uid } => {
                let names: Vec<String> = self
                    .state
                    .assignments
                    .get(&uid)
                    .map(|m| m.keys().cloned().collect())
                    .unwrap_or_default();
                for c in &names {
                    self.policy.remove_container(&mut self.state, &uid, c);
                }
                if !names.is_empty() {
                    info!(uid = %uid, "[cpumanager] a pod not admitted gave its CPUs back to the shared pool");
                    self.save().await;
                    self.reconcile().await;
                }
            }
            Command::Retain { active } => {
                let removed = self.remove_stale(&active);
                self.active = Some(active);
                if removed {
                    self.save().await;
                    // The pool grew: give it to the shared containers now, not a period later.
                    self.reconcile().await;
                }
            }
        }
    }

    /// Every container of the pod, init containers first; on a failure the pod's new
    /// assignments are undone (upstream leaves them to `removeStaleState`).
    fn allocate(
        &mut self,
        pod: &Pod,
        affinity: &BTreeMap<String, BitMask>,
        only: Option<&str>,
    ) -> Result<(), PolicyError> {
        let uid = podutil::uid(pod).to_string();
        let mut done = Vec::new();
        let containers: Vec<_> = podutil::init_containers(pod)
            .iter()
            .chain(podutil::containers(pod))
            .filter(|c| only.is_none_or(|o| o == c.name))
            .cloned()
            .collect();
        let m = crate::metrics::get();
        for c in &containers {
            let had = self.state.get(&uid, &c.name).is_some();
            // Upstream counts in the static policy's `Allocate`, for every container that
            // needs pinning, already pinned or not.
            if super::policy::guaranteed_cpus(pod, c) > 0 {
                m.cpu_manager_pinning_requests.inc();
            }
            match self
                .policy
                .allocate(&mut self.state, pod, c, affinity.get(&c.name).copied())
            {
                Ok(Some(set)) => {
                    if !had {
                        info!(pod = %podutil::describe(pod), container = %c.name, cpus = %set, "[cpumanager] static policy: exclusive CPUs allocated");
                        done.push(c.name.clone());
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    m.cpu_manager_pinning_errors.inc();
                    for name in done {
                        self.policy.remove_container(&mut self.state, &uid, &name);
                    }
                    warn!(pod = %podutil::describe(pod), container = %c.name, error = %e, "[cpumanager] unable to allocate CPUs");
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Upstream `removeStaleState`: assignments of pods no longer active go back to the pool.
    fn remove_stale(&mut self, active: &HashSet<String>) -> bool {
        let stale: Vec<(String, String)> = self
            .state
            .assignments
            .iter()
            .filter(|(pod, _)| !active.contains(*pod))
            .flat_map(|(pod, m)| m.keys().map(move |c| (pod.clone(), c.clone())))
            .collect();
        for (pod, c) in &stale {
            info!(uid = %pod, container = %c, "[cpumanager] removing stale assignment; its CPUs return to the shared pool");
            self.policy.remove_container(&mut self.state, pod, c);
        }
        !stale.is_empty()
    }

    /// Upstream `reconcileState`: every running container of an active pod gets its exclusive
    /// set or the shared pool.
    async fn reconcile(&mut self) {
        let Some(active) = &self.active else { return };
        let req = api::ListContainersRequest {
            filter: Some(api::ContainerFilter {
                state: Some(api::ContainerStateValue {
                    state: api::ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }),
        };
        let containers = match self.cri.list_containers(req).await {
            Ok(r) => r.containers,
            Err(e) => {
                warn!(error = %e, "[cpumanager] reconcileState: cannot list containers");
                return;
            }
        };
        let mut running = HashSet::new();
        let mut updates = Vec::new();
        for c in &containers {
            let (Some(uid), Some(name)) = (
                c.labels.get(labels::POD_UID),
                c.labels.get(labels::CONTAINER_NAME),
            ) else {
                continue;
            };
            if !active.contains(uid) {
                continue;
            }
            running.insert(c.id.clone());
            let want = self.state.get_or_default(uid, name);
            if want.is_empty() || self.last_update.get(&c.id) == Some(&want) {
                continue;
            }
            updates.push((c.id.clone(), uid.clone(), name.clone(), want));
        }
        self.last_update.retain(|id, _| running.contains(id));
        for (id, uid, name, want) in updates {
            let req = api::UpdateContainerResourcesRequest {
                container_id: id.clone(),
                linux: Some(api::LinuxContainerResources {
                    cpuset_cpus: want.to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            };
            match self.cri.update_container_resources(req).await {
                Ok(_) => {
                    debug!(uid = %uid, container = %name, id = %id, cpuset = %want, "[cpumanager] reconcileState: container cpuset updated");
                    self.last_update.insert(id, want);
                }
                Err(e) => {
                    warn!(uid = %uid, container = %name, id = %id, cpuset = %want, error = %e, "[cpumanager] reconcileState: failed to update container")
                }
            }
        }
    }
}
