//! The CPU manager (upstream `pkg/kubelet/cm/cpumanager`), `static` policy: Guaranteed
//! containers with integer CPU requests get exclusive CPUs at admission (upstream `Allocate`),
//! every other container runs on the shared pool, which shrinks and grows as exclusive
//! assignments come and go. The cpuset reaches a new container through CreateContainer's
//! `cpuset_cpus`; running containers follow the pool through `UpdateContainerResources` in the
//! reconcile loop (`cpuManagerReconcilePeriod`). Assignments survive restarts in
//! `<root-dir>/cpu_manager_state`, upstream's checkpoint, so nothing is allocated twice.
//!
//! With policy `none` no task runs; only the checkpoint is kept (upstream writes it for every
//! policy and refuses to start when the policy changed under it).
//!
//! One task ([`manager`]) owns the [`policy::State`] and the [`policy::StaticPolicy`];
//! admission, container starts, housekeeping and the pod-resources API hold a [`CpuHandle`].

pub mod assignment;
pub mod checkpoint;
mod manager;
pub mod policy;
pub mod topology;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kubelet_config::config::cpu::CpuManagerConfig;
use rkubelet_cri::CriClient;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::info;

pub use kubelet_config::cpuset::CpuSet;
pub use policy::{Assignments, PolicyError};

use crate::cm::topology::{BitMask, TopologyHint};

/// Errors starting the CPU manager; each stops the kubelet, as upstream's
/// `start cpu manager error`.
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    #[error("[cpumanager] {0}")]
    Topology(#[from] topology::TopologyError),
    /// Upstream `NewManager`.
    #[error("[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero")]
    NoReservation,
    /// Upstream `server.go`'s range check of `--reserved-cpus`.
    #[error("Invalid cpuset {0:?} specified by --reserved-cpus")]
    ReservedOutOfRange(String),
    #[error("new static policy error: {0}")]
    Policy(PolicyError),
    /// Upstream `NewCheckpointState`'s refusal: a changed policy or a bad file.
    #[error("could not restore state from checkpoint: {message}, please drain this node and delete the CPU manager checkpoint file {path:?} before restarting Kubelet")]
    Restore { message: String, path: PathBuf },
    /// Upstream `Start`'s `validateState` failure.
    #[error("[cpumanager] static policy invalid state: {0}, please drain node and remove policy state file")]
    InvalidState(PolicyError),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cpu manager stopped")]
    Stopped,
}

pub(crate) enum Command {
    Allocate {
        pod: Arc<Pod>,
        affinity: BTreeMap<String, BitMask>,
        only: Option<String>,
        reply: oneshot::Sender<Result<(), PolicyError>>,
    },
    Hints {
        pod: Arc<Pod>,
        container: Option<String>,
        reply: oneshot::Sender<Option<Vec<TopologyHint>>>,
    },
    Affinity {
        uid: String,
        container: String,
        reply: oneshot::Sender<CpuSet>,
    },
    Assigned {
        reply: oneshot::Sender<Assignments>,
    },
    Allocatable {
        reply: oneshot::Sender<CpuSet>,
    },
    Retain {
        active: HashSet<String>,
    },
    /// A pod a later admit handler rejected: its exclusive CPUs go back to the pool.
    Release {
        uid: String,
    },
}

/// The cheap handle to the CPU manager task.
#[derive(Clone, Debug)]
pub struct CpuHandle {
    tx: mpsc::Sender<Command>,
}

impl CpuHandle {
    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, CpuError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| CpuError::Stopped)?;
        rx.await.map_err(|_| CpuError::Stopped)
    }

    /// Upstream `Allocate` for every init and regular container of a pod being admitted, each
    /// aligned to its topology affinity when the topology manager gave one (`only`: just that
    /// container, for the topology manager's container scope). All or nothing per call.
    pub async fn allocate(
        &self,
        pod: Arc<Pod>,
        affinity: BTreeMap<String, BitMask>,
        only: Option<String>,
    ) -> Result<Result<(), PolicyError>, CpuError> {
        self.ask(|reply| Command::Allocate {
            pod,
            affinity,
            only,
            reply,
        })
        .await
    }

    /// Upstream `GetTopologyHints` (a container) or `GetPodTopologyHints` (None).
    pub async fn hints(
        &self,
        pod: Arc<Pod>,
        container: Option<String>,
    ) -> Result<Option<Vec<TopologyHint>>, CpuError> {
        self.ask(|reply| Command::Hints {
            pod,
            container,
            reply,
        })
        .await
    }

    /// Upstream `GetCPUAffinity`: the container's exclusive CPUs, else the shared pool.
    pub async fn affinity(&self, uid: &str, container: &str) -> Result<CpuSet, CpuError> {
        let (uid, container) = (uid.to_string(), container.to_string());
        self.ask(|reply| Command::Affinity {
            uid,
            container,
            reply,
        })
        .await
    }

    /// Every exclusive assignment (upstream `GetExclusiveCPUs`, for the pod-resources API).
    pub async fn assigned(&self) -> Result<Assignments, CpuError> {
        self.ask(|reply| Command::Assigned { reply }).await
    }

    /// Upstream `GetAllocatableCPUs`.
    pub async fn allocatable(&self) -> Result<CpuSet, CpuError> {
        self.ask(|reply| Command::Allocatable { reply }).await
    }

    /// Frees the exclusive CPUs of a pod that was not admitted after all (upstream frees them
    /// when the rejected pod is removed, in `removeStaleState`).
    pub async fn release(&self, uid: &str) {
        let uid = uid.to_string();
        let _ = self.tx.send(Command::Release { uid }).await;
    }

    /// The pods still holding resources (upstream `activePods` for `removeStaleState`): every
    /// other pod's CPUs go back to the pool. Sent by housekeeping once all sources are ready.
    pub async fn retain(&self, active: HashSet<String>) {
        let _ = self.tx.send(Command::Retain { active }).await;
    }
}

/// What the CPU manager is built from.
pub struct Setup<'a> {
    pub cfg: &'a CpuManagerConfig,
    pub root_dir: &'a Path,
    /// `/sys`, or a test's copy.
    pub sys: &'a Path,
    /// `kubeReserved.cpu + systemReserved.cpu` in millicores (upstream's
    /// `nodeAllocatableReservation[cpu]`), after `reservedSystemCPUs` replaced them.
    pub reserved_milli: i64,
    pub cri: CriClient,
}

impl<'a> Setup<'a> {
    /// From the kubelet's configuration, on this machine's `/sys`.
    pub fn from_config(cfg: &'a kubelet_config::KubeletConfig, cri: CriClient) -> Setup<'a> {
        let milli = |m: &BTreeMap<String, String>| {
            m.get("cpu")
                .and_then(|q| crate::resources::parse_milli(q))
                .unwrap_or(0)
        };
        let reserved = milli(&cfg.cgroups.kube_reserved) + milli(&cfg.cgroups.system_reserved);
        Setup {
            cfg: &cfg.cpu_manager,
            root_dir: &cfg.root_dir,
            sys: Path::new("/sys"),
            reserved_milli: i64::try_from(reserved).unwrap_or(i64::MAX),
            cri,
        }
    }
}

/// Upstream `NewManager` + `Start`. With `none`: the checkpoint only, no handle.
pub async fn start(
    s: Setup<'_>,
    cancel: CancellationToken,
) -> Result<Option<(CpuHandle, impl std::future::Future<Output = ()>)>, CpuError> {
    let path = s.root_dir.join(checkpoint::FILE_NAME);
    if !s.cfg.is_static() {
        let st = manager::restore(&path, policy::NONE).await?;
        manager::store(&path, &st.to_checkpoint(policy::NONE)).await?;
        return Ok(None);
    }
    let topo = topology::CpuTopology::discover(s.sys)?;
    info!(cpus = topo.num_cpus, cores = topo.num_cores, sockets = topo.num_sockets, numa_nodes = %topology::Details::numa_nodes(&topo.details), "[cpumanager] detected CPU topology");
    let reserved_cpus = &s.cfg.reserved_system_cpus;
    if let Some(last) = reserved_cpus.iter().last() {
        if last >= topo.num_cpus {
            return Err(CpuError::ReservedOutOfRange(reserved_cpus.to_string()));
        }
    }
    if s.reserved_milli <= 0 {
        return Err(CpuError::NoReservation);
    }
    let num_reserved = usize::try_from((s.reserved_milli + 999) / 1000).unwrap_or(0);
    let policy =
        policy::StaticPolicy::new(topo, num_reserved, reserved_cpus, s.cfg.full_pcpus_only())
            .map_err(CpuError::Policy)?;
    info!(reserved = %policy.reserved, count = policy.reserved.len(), "[cpumanager] reserved CPUs not available for exclusive assignment");
    let mut state = manager::restore(&path, policy::STATIC).await?;
    policy.start(&mut state).map_err(CpuError::InvalidState)?;
    manager::store(&path, &state.to_checkpoint(policy::STATIC)).await?;
    info!(period = ?s.cfg.reconcile_period, shared = %state.default, "[cpumanager] starting with static policy");
    let (tx, rx) = mpsc::channel(64);
    let m = manager::Manager::new(policy, state, path, s.cri, s.cfg.reconcile_period);
    Ok(Some((CpuHandle { tx }, m.run(rx, cancel))))
}

#[cfg(test)]
pub(crate) mod tests;
