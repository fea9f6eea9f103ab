//! The container runtime manager (upstream `kuberuntime`): what the runtime has for a pod, the pure
//! decision of what must change, and the CRI calls that make it so.

pub mod actions;
pub mod adopt;
pub mod container;
pub mod env;
pub mod gc;
mod gc_manager;
pub mod labels;
pub mod manager;
pub mod runtime_class;
pub mod sandbox;
pub mod security;
mod status;

pub use actions::{compute_pod_actions, PodActions};
pub use gc_manager::{ContainerGc, ContainerGcError, ContainerGcHandle, StatesRequest};
pub use manager::{RuntimeError, RuntimeManager};

// The runtime pod types live with the cache in `container`, below this module.
pub use crate::container::{ContainerState, ContainerStatus, PodRuntimeStatus, SandboxStatus};
