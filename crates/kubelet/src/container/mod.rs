//! What the kubelet knows of the runtime's pods (upstream `pkg/kubelet/container`): the runtime
//! pod types and the runtime pod cache that PLEG writes and everyone else reads.

pub mod cache;
pub mod types;

pub use cache::{CacheError, CacheWriter, RuntimeCache};
pub use types::{ContainerState, ContainerStatus, PodRuntimeStatus, SandboxStatus};
