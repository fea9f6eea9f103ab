//! Node-pressure eviction (upstream `pkg/kubelet/eviction`): a manager task watches the node's
//! signals (memory, allocatable memory, nodefs and imagefs bytes and inodes, pids), reports
//! `MemoryPressure`/`DiskPressure`/`PIDPressure` while a threshold is met and for
//! `evictionPressureTransitionPeriod` after, reclaims node-level disk (unused images and dead
//! containers, through [`NodeReclaim`]) and, when that is not enough, evicts one pod per pass,
//! ranked as upstream ranks them. Pods over their local storage limits are evicted too.
//!
//! The pure parts are [`signals`] (observations, thresholds, conditions) and [`rank`] (ranking,
//! messages, local storage checks); [`manager`] is the one task that owns the state. Others
//! read the pressure through an [`EvictionHandle`]; the SyncLoop receives the
//! [`EvictionRequest`]s and terminates those pods through the pod workers like any other
//! termination, `Failed` with reason `Evicted`.

pub mod manager;
pub mod memcg;
pub mod rank;
pub mod signals;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

pub use kubelet_config::config::eviction::{Signal, Threshold, ThresholdValue};
pub use manager::{EvictionManager, Setup};

use crate::status::compute::PodFailure;

/// Upstream `eviction.Reason`: the evicted pod's status reason, and its event's.
pub const REASON: &str = "Evicted";

/// Node-level resources the manager reclaims before it evicts pods for disk pressure (upstream
/// `ImageGC.DeleteUnusedImages` and `ContainerGC.DeleteAllUnusedContainers`). The image and
/// container garbage collectors serve it (`kubelet::reclaim::GcReclaim`).
pub trait NodeReclaim: Send + Sync {
    /// Removes every image no container uses; returns the bytes freed.
    fn delete_unused_images(&self) -> BoxFuture<'_, Result<u64, String>>;
    /// Removes every dead container and sandbox, whatever its age.
    fn delete_all_unused_containers(&self) -> BoxFuture<'_, Result<(), String>>;
}

/// What the manager asks of the SyncLoop: stop this pod with this grace period, `Failed` as the
/// failure says (upstream `killPodFunc` / `TerminatePodAbnormallyAndWait`).
#[derive(Debug, Clone)]
pub struct EvictionRequest {
    pub pod: Arc<Pod>,
    pub grace: Duration,
    pub failure: PodFailure,
    /// When the manager decided, for the SyncLoop's log line.
    pub decided_at: Instant,
}

/// The node conditions eviction reports, in upstream's order of types.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pressure {
    /// `MemoryPressure`, `DiskPressure`, `PIDPressure`: those that hold now.
    pub conditions: Vec<&'static str>,
}

impl Pressure {
    pub fn has(&self, condition: &str) -> bool {
        self.conditions.contains(&condition)
    }
}

/// The cheap handle others read the manager through (upstream `IsUnderMemoryPressure` & co,
/// and its `Admit`).
#[derive(Debug, Clone)]
pub struct EvictionHandle {
    pressure: watch::Receiver<Pressure>,
}

impl EvictionHandle {
    pub fn pressure(&self) -> Pressure {
        self.pressure.borrow().clone()
    }
}
