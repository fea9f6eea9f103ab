//! The device manager (upstream `pkg/kubelet/cm/devicemanager`): device plugins register on
//! `<root-dir>/device-plugins/kubelet.sock`, stream their devices (`ListAndWatch`) into the node's
//! capacity and allocatable of their extended resource, and answer `Allocate` when a pod asking
//! for that resource is admitted; the answer (envs, mounts, device nodes, annotations) goes into
//! the container's CreateContainer. Allocations survive restarts in upstream's
//! `kubelet_internal_checkpoint`; a plugin that goes away leaves its devices unhealthy.
//!
//! One task ([`manager`]) owns the [`state::State`]; everyone else holds a cheap
//! [`DeviceHandle`]. The registration server and each plugin's `ListAndWatch` stream only send
//! it messages ([`plugins`]).

pub mod api;
pub mod checkpoint;
pub mod hints;
mod manager;
mod plugins;
pub mod state;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

pub use state::{Capacity, RunOptions};

use crate::cm::topology::{BitMask, ProviderHints};

/// The device plugin directory under the root dir (upstream `DevicePluginPath`).
pub const DIR_NAME: &str = "device-plugins";

/// Errors of the device manager.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("device manager: {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An allocation the admission turns into `UnexpectedAdmissionError`.
    #[error(transparent)]
    Alloc(#[from] state::AllocError),
    /// Upstream `unknown Device Plugin %s`.
    #[error("unknown Device Plugin {0}")]
    UnknownPlugin(String),
    #[error("no containers return in allocation response {0}")]
    EmptyResponse(String),
    /// `Allocate`'s gRPC error as upstream passes it on, unwrapped.
    #[error("{0}")]
    AllocateRpc(String),
    #[error("device plugin {what} rpc failed with err: {message}")]
    Rpc { what: &'static str, message: String },
    /// Upstream `callPreStartContainerIfNeeded`'s error when nothing was allocated.
    #[error("no devices found allocated in local cache for pod {pod}, container {container}, resource {resource}")]
    NotAllocated {
        pod: String,
        container: String,
        resource: String,
    },
    #[error("writing device checkpoint {path}: {source}")]
    Checkpoint {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("device manager stopped")]
    Stopped,
}

/// A container's devices of one resource, for the pod-resources API.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerDevices {
    pub resource: String,
    pub ids: Vec<String>,
    /// The NUMA node the IDs are on (upstream reports one entry per node).
    pub numa_node: i64,
}

/// pod UID -> container name -> devices.
pub type AssignedDevices =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, Vec<ContainerDevices>>>;

pub(crate) enum Command {
    Allocate {
        pod: Arc<Pod>,
        active: HashSet<String>,
        only: Option<String>,
        affinity: BTreeMap<String, BitMask>,
        reply: oneshot::Sender<Result<(), DeviceError>>,
    },
    Hints {
        pod: Arc<Pod>,
        container: Option<String>,
        active: HashSet<String>,
        numa_nodes: Vec<usize>,
        reply: oneshot::Sender<ProviderHints>,
    },
    /// Devices in use per resource (upstream `allocatedDevices[r].Len()`).
    AllocatedCounts {
        reply: oneshot::Sender<BTreeMap<String, i64>>,
    },
    /// A pod a later admit handler rejected: its devices go back (upstream frees them when
    /// the rejected pod is removed).
    Release {
        uid: String,
    },
    RunOptions {
        pod: Arc<Pod>,
        container: String,
        reply: oneshot::Sender<Result<RunOptions, DeviceError>>,
    },
    Capacity {
        reply: oneshot::Sender<Capacity>,
    },
    Assigned {
        reply: oneshot::Sender<AssignedDevices>,
    },
    /// Healthy devices: (resource, device) pairs (upstream `GetAllocatableDevices`).
    Allocatable {
        reply: oneshot::Sender<Vec<(String, api::Device)>>,
    },
    Plugin(plugins::Event),
}

/// The cheap handle every user of the device manager holds.
#[derive(Clone, Debug)]
pub struct DeviceHandle {
    tx: mpsc::Sender<Command>,
}

impl DeviceHandle {
    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, DeviceError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| DeviceError::Stopped)?;
        rx.await.map_err(|_| DeviceError::Stopped)
    }

    /// Upstream `Allocate`: devices for each init and regular container of a pod being
    /// admitted (`only`: that container alone, for the topology manager's container scope),
    /// on the NUMA nodes of each container's `affinity` where it has one. `active` are the
    /// UIDs of the pods admitted and still running (the devices of any other pod go back to
    /// the pool first, upstream `UpdateAllocatedDevices`).
    pub async fn allocate(
        &self,
        pod: Arc<Pod>,
        active: HashSet<String>,
        only: Option<String>,
        affinity: BTreeMap<String, BitMask>,
    ) -> Result<(), DeviceError> {
        self.ask(|reply| Command::Allocate {
            pod,
            active,
            only,
            affinity,
            reply,
        })
        .await?
    }

    /// Upstream `GetTopologyHints` (a container) or `GetPodTopologyHints` (None) over
    /// `numa_nodes`.
    pub async fn hints(
        &self,
        pod: Arc<Pod>,
        container: Option<String>,
        active: HashSet<String>,
        numa_nodes: Vec<usize>,
    ) -> Result<ProviderHints, DeviceError> {
        self.ask(|reply| Command::Hints {
            pod,
            container,
            active,
            numa_nodes,
            reply,
        })
        .await
    }

    /// How many devices of each resource are in use, for the predicates' view of node
    /// allocatable (upstream `UpdatePluginResources`).
    pub async fn allocated_counts(&self) -> Result<BTreeMap<String, i64>, DeviceError> {
        self.ask(|reply| Command::AllocatedCounts { reply }).await
    }

    /// Frees the devices of a pod that was not admitted after all.
    pub async fn release(&self, uid: &str) {
        let uid = uid.to_string();
        let _ = self.tx.send(Command::Release { uid }).await;
    }

    /// Upstream `GetDeviceRunContainerOptions`: `PreStartContainer` where the plugin asks for it,
    /// then what the container gets from its devices.
    pub async fn run_options(
        &self,
        pod: Arc<Pod>,
        container: &str,
    ) -> Result<RunOptions, DeviceError> {
        let container = container.to_string();
        self.ask(|reply| Command::RunOptions {
            pod,
            container,
            reply,
        })
        .await?
    }

    /// Capacity and allocatable of the device plugin resources (upstream `GetCapacity`).
    pub async fn capacity(&self) -> Result<Capacity, DeviceError> {
        self.ask(|reply| Command::Capacity { reply }).await
    }

    /// Every container's devices (upstream `GetDevices`, for the pod-resources API).
    pub async fn assigned(&self) -> Result<AssignedDevices, DeviceError> {
        self.ask(|reply| Command::Assigned { reply }).await
    }

    /// The healthy devices (upstream `GetAllocatableDevices`).
    pub async fn allocatable(&self) -> Result<Vec<(String, api::Device)>, DeviceError> {
        self.ask(|reply| Command::Allocatable { reply }).await
    }
}

/// Starts the device manager under `root_dir` (upstream `ManagerImpl.Start`): the checkpoint is
/// read, the socket directory made and emptied of stale sockets (plugins watching it then
/// register again), and the registration server listens. Runs until `cancel`.
pub async fn start(
    root_dir: &Path,
    cancel: CancellationToken,
) -> Result<(DeviceHandle, impl std::future::Future<Output = ()>), DeviceError> {
    let dir = root_dir.join(DIR_NAME);
    let (tx, rx) = mpsc::channel(64);
    let listener = plugins::listen(&dir).await?;
    let handle = DeviceHandle { tx: tx.clone() };
    let task = manager::Manager::new(dir, tx).await;
    Ok((handle, task.run(rx, listener, cancel)))
}
