//! rkubelet's managers: pod sources, SyncLoop, pod workers, runtime manager, PLEG, status and the
//! HTTP endpoints. See `shared/DESIGN.md` for the map to upstream `pkg/kubelet`.

/// The `tracing` target of a module's per-pod lifecycle lines (`info!(target: v2!(), ...)`): the
/// module's path plus `::v2`, which rkubelet's `logging::filter` maps to klog V(2), the level
/// upstream logs its SyncLoop ADD/REMOVE/DELETE and "Killing container" lines at. Off at the
/// default `-v=0`, on at the usual production `-v=2`; `RUST_LOG` still matches the module.
macro_rules! v2 {
    () => {
        concat!(module_path!(), "::v2")
    };
}

pub mod admission;
pub mod backoff;
pub mod blocking;
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

#[cfg(test)]
mod testutil;

// The configuration is its own leaf crate; these keep `crate::config::...` and `kubelet::flags`
// working for the modules and the binary that name them.
pub use kubelet_config::{config, flags};

pub use config::KubeletConfig;

#[cfg(test)]
mod v2_tests {
    /// rkubelet's log filter makes an event V(2) when its target is in an own crate (`kubelet`
    /// first) and ends in `::v2`; the macro must give both.
    #[test]
    fn v2_target_is_the_module_path_and_v2() {
        assert_eq!(v2!(), "kubelet::v2_tests::v2");
    }
}
