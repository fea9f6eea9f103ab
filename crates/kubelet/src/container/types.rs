//! The runtime's view of a pod (upstream `kubecontainer.PodStatus`, `Status`, `State`): what
//! PLEG reads into the cache and everything else decides from.

use rkubelet_cri::api;

/// A container's state as the kubelet sees it (upstream `kubecontainer.State`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

impl From<i32> for ContainerState {
    fn from(s: i32) -> Self {
        match api::ContainerState::try_from(s) {
            Ok(api::ContainerState::ContainerCreated) => ContainerState::Created,
            Ok(api::ContainerState::ContainerRunning) => ContainerState::Running,
            Ok(api::ContainerState::ContainerExited) => ContainerState::Exited,
            _ => ContainerState::Unknown,
        }
    }
}

/// One sandbox of a pod.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SandboxStatus {
    pub id: String,
    pub attempt: u32,
    pub ready: bool,
    pub ip: String,
    pub additional_ips: Vec<String>,
    pub created_at: i64,
    pub host_network: bool,
}

/// One container instance of a pod (upstream `kubecontainer.Status`).
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerStatus {
    pub id: String,
    pub name: String,
    pub state: ContainerState,
    /// Unix nanoseconds; 0 when not set.
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    pub hash: String,
    pub restart_count: i32,
    pub image: String,
    pub image_ref: String,
    pub is_init: bool,
    /// Created by another kubelet (no rkubelet `CREATED_BY` annotation): `hash` is that kubelet's
    /// and means nothing to rkubelet until `runtime::adopt` decides whether the container still
    /// matches its spec.
    pub foreign: bool,
    /// The live log's path as the runtime reports it (CRI `log_path`); empty when it has none.
    /// Removing the container removes its logs by it, without asking the runtime again.
    pub log_path: String,
}

impl Default for ContainerStatus {
    fn default() -> Self {
        ContainerStatus {
            id: String::new(),
            name: String::new(),
            state: ContainerState::Unknown,
            created_at: 0,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            hash: String::new(),
            restart_count: 0,
            image: String::new(),
            image_ref: String::new(),
            is_init: false,
            foreign: false,
            log_path: String::new(),
        }
    }
}

/// Everything the runtime has for one pod, newest first (upstream `kubecontainer.PodStatus`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodRuntimeStatus {
    pub sandboxes: Vec<SandboxStatus>,
    pub containers: Vec<ContainerStatus>,
}

impl PodRuntimeStatus {
    /// The newest instance of the named container.
    pub fn find(&self, name: &str) -> Option<&ContainerStatus> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// The newest ready sandbox's IPs, for the pod status.
    pub fn pod_ips(&self) -> Vec<String> {
        match self.sandboxes.first() {
            Some(s) if !s.ip.is_empty() => std::iter::once(s.ip.clone())
                .chain(s.additional_ips.iter().cloned())
                .collect(),
            _ => Vec::new(),
        }
    }
}
