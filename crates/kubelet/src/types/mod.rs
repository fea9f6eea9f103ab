//! Names and small types every manager shares, at the bottom of the module graph (upstream
//! `pkg/kubelet/types`, `pkg/kubelet/events`, `kuberuntime/labels.go`'s keys): pod identity, pod
//! phase and restart policy, the reasons a container or an event carries, annotation and CRI
//! label names, the version the kubelet reports.
//!
//! Nothing here depends on another kubelet module, so any module can use it without a cycle (the
//! crate's `tests/module_cycles.rs` checks that the module graph stays acyclic).

pub mod annotations;
pub mod event_reasons;
pub mod labels;
pub mod objects;
pub mod phase;
pub mod pod;
pub mod reasons;

pub use phase::{PodPhase, RestartPolicy};
pub use reasons::{ConfigError, Reason, StartError};

/// The upstream kubelet version whose behaviour rkubelet follows; reported as `kubeletVersion`
/// and in the probes' `User-Agent` (upstream `version.Get()`).
pub const KUBELET_VERSION: &str = "v1.33.0";
