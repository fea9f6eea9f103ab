//! rkubelet's managers: pod sources, SyncLoop, pod workers, runtime manager, PLEG, status and the
//! HTTP endpoints. See `shared/DESIGN.md` for the map to upstream `pkg/kubelet`.

pub mod admission;
pub mod backoff;
pub mod certificate;
pub mod clock;
pub mod cm;
pub mod configz;
pub mod container;
pub mod credentials;
pub mod dns;
pub mod events;
pub mod eviction;
pub mod expansion;
pub mod grpc_uds;
pub mod health;
pub mod heap;
pub mod hosts;
pub mod images;
pub mod kubelet;
pub mod logs;
pub mod metrics;
pub mod mirror;
pub mod node;
pub mod object_cache;
pub mod objects;
pub mod oom;
pub mod pleg;
pub mod pluginmanager;
pub mod pod_workers;
pub mod podresources;
pub mod podutil;
pub mod prober;
pub mod resources;
pub mod runtime;
pub mod server;
pub mod services;
pub mod shutdown;
pub mod source;
pub mod stats;
pub mod status;
pub mod sync;
pub mod sysctl;
pub mod timeline;
pub mod token;
pub mod types;
pub mod volumes;

// The configuration is its own leaf crate; these keep `crate::config::...` and `kubelet::flags`
// working for the modules and the binary that name them.
pub use kubelet_config::{config, flags};

pub use config::KubeletConfig;
