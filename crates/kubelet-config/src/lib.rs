//! rkubelet's configuration: the `KubeletConfiguration` v1beta1 schema, its defaults, the upstream
//! command-line table, loading (file, drop-ins, flags) and validation (upstream
//! `pkg/kubelet/apis/config`, `cmd/kubelet/app/options`).
//!
//! A leaf crate: it depends on no kubelet module and no async runtime, so the binary parses and
//! validates its command line without the managers, and the kubelet's modules read their settings
//! from types defined here instead of the configuration reaching up into them.

pub mod change_detection;
pub mod config;
pub mod cpuset;
pub mod defaults;
pub mod endpoint;
pub mod flags;
pub mod node;
pub mod quantity;
pub mod sysctl;

pub use change_detection::ChangeDetectionStrategy;
pub use config::KubeletConfig;
