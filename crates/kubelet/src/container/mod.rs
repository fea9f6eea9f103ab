//! What the kubelet knows of the runtime's pods (upstream `pkg/kubelet/container`): the runtime
//! pod cache that PLEG writes and everyone else reads.

pub mod cache;

pub use cache::{CacheError, CacheWriter, RuntimeCache};
