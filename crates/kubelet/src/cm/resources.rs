//! What the pod and QoS cgroups get: upstream `helpers_linux.go` (`ResourceConfigForPod`,
//! `MilliCPUToShares`, `MilliCPUToQuota`, `HugePageLimits`), `qos_container_manager_linux.go`
//! (`setCPUCgroupConfig`) and `qos/policy.go` (`GetContainerOOMScoreAdjust`). Pure functions,
//! table-tested; the manager only writes what they return.

use std::collections::BTreeMap;

use cgroups::ResourceConfig;
use k8s_openapi::api::core::v1::{Container, Pod};

use crate::admission::{pod_limits, pod_requests};
use crate::resources::{parse_milli, pod_qos, QosClass};

/// Upstream `MinShares` / `MaxShares`.
pub const MIN_SHARES: u64 = 2;
pub const MAX_SHARES: u64 = 262_144;
/// Upstream `MinQuotaPeriod`: the smallest quota the kernel accepts, in microseconds.
pub const MIN_QUOTA_US: i64 = 1000;
/// Upstream `setHugePagesUnbounded`: QoS tiers and kubepods never limit hugepages below the node.
pub const HUGEPAGES_UNBOUNDED: i64 = 1 << 62;

/// Upstream `MilliCPUToShares`.
pub fn milli_cpu_to_shares(milli: i64) -> u64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    ((milli as u64).saturating_mul(1024) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// Upstream `MilliCPUToQuota`: 0 (no quota) for no limit, at least the kernel's minimum.
pub fn milli_cpu_to_quota(milli: i64, period_us: u64) -> i64 {
    if milli <= 0 {
        return 0;
    }
    (milli.saturating_mul(period_us as i64) / 1000).max(MIN_QUOTA_US)
}

/// Settings that shape every pod's cgroup (upstream `cpuCFSQuota`, `cpuCFSQuotaPeriod`,
/// `podPidsLimit`) and the hugepage sizes the node can limit.
#[derive(Debug, Clone, PartialEq)]
pub struct PodCgroupPolicy {
    pub cfs_quota: bool,
    pub cfs_period_us: u64,
    /// `podPidsLimit` when positive.
    pub pids_limit: Option<i64>,
    /// Hugepage sizes (bytes) the cgroup manager can limit: sizes a pod does not request get 0.
    pub hugepage_sizes: Vec<u64>,
}

impl PodCgroupPolicy {
    /// From the configuration (`cpuCFSQuota`, the effective `cpuCFSQuotaPeriod`, `podPidsLimit`
    /// when positive) and the hugepage sizes the cgroup manager can limit.
    pub fn from_config(
        cfg: &kubelet_config::config::cgroups::CgroupConfig,
        hugepage_sizes: Vec<u64>,
    ) -> Self {
        PodCgroupPolicy {
            cfs_quota: cfg.cpu_cfs_quota,
            cfs_period_us: cfg.effective_cfs_period().as_micros() as u64,
            pids_limit: (cfg.pod_pids_limit > 0).then_some(cfg.pod_pids_limit),
            hugepage_sizes,
        }
    }
}

/// The page size in bytes of a `hugepages-<size>` resource name (`hugepages-2Mi` -> 2097152).
pub fn hugepage_size(resource: &str) -> Option<u64> {
    let size = resource.strip_prefix("hugepages-")?;
    let milli = parse_milli(size)?;
    u64::try_from(milli / 1000).ok().filter(|s| *s > 0)
}

/// A container with a limit on `resource` (a zero limit counts as none, as upstream's
/// `IsZero()`).
fn has_limit(c: &Container, resource: &str) -> bool {
    c.resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get(resource))
        .and_then(|q| parse_milli(&q.0))
        .is_some_and(|v| v != 0)
}

/// Upstream `ResourceConfigForPod`: cpu shares from the requests; CFS quota only when every
/// container has a cpu limit (and `cpuCFSQuota`), memory only when every container has a
/// memory limit (Guaranteed pods always have both); BestEffort pods get the minimum shares
/// only. Hugepage requests become limits, other sizes 0; `podPidsLimit` when set.
pub fn resource_config_for_pod(pod: &Pod, policy: &PodCgroupPolicy) -> ResourceConfig {
    let reqs = pod_requests(pod);
    let limits = pod_limits(pod);
    let spec = pod.spec.as_ref();
    // Regular containers and sidecars run for the pod's whole life; their limits decide.
    let long_running: Vec<&Container> = spec
        .map(|s| {
            s.containers
                .iter()
                .chain(
                    s.init_containers
                        .iter()
                        .flatten()
                        .filter(|c| c.restart_policy.as_deref() == Some("Always")),
                )
                .collect()
        })
        .unwrap_or_default();
    let cpu_limits_declared = long_running.iter().all(|c| has_limit(c, "cpu"));
    let memory_limits_declared = long_running.iter().all(|c| has_limit(c, "memory"));
    let period = policy.cfs_period_us;
    let cpu_quota = if policy.cfs_quota {
        milli_cpu_to_quota(limits.get("cpu").copied().unwrap_or(0), period)
    } else {
        -1
    };
    let cpu_shares = milli_cpu_to_shares(reqs.get("cpu").copied().unwrap_or(0));
    let memory = limits.get("memory").copied().unwrap_or(0);
    let mut out = ResourceConfig::default();
    match pod_qos(pod) {
        QosClass::Guaranteed => {
            out.cpu_shares = Some(cpu_shares);
            out.cpu_quota = Some(cpu_quota);
            out.cpu_period = Some(period);
            out.memory_limit = Some(memory);
        }
        QosClass::Burstable => {
            out.cpu_shares = Some(cpu_shares);
            if cpu_limits_declared {
                out.cpu_quota = Some(cpu_quota);
                out.cpu_period = Some(period);
            }
            if memory_limits_declared {
                out.memory_limit = Some(memory);
            }
        }
        QosClass::BestEffort => out.cpu_shares = Some(MIN_SHARES),
    }
    for size in &policy.hugepage_sizes {
        out.hugetlb_limits.insert(*size, 0);
    }
    for (name, v) in &reqs {
        if let Some(size) = hugepage_size(name) {
            out.hugetlb_limits.insert(size, *v);
        }
    }
    out.pids_limit = policy.pids_limit;
    out
}

/// Upstream `setCPUCgroupConfig`: the burstable tier's shares are the sum of its pods' cpu
/// requests, so that it competes with Guaranteed pods by what it asked for; best-effort keeps
/// the minimum.
pub fn burstable_shares<'a>(burstable_cpu_requests: impl Iterator<Item = &'a i64>) -> u64 {
    milli_cpu_to_shares(burstable_cpu_requests.sum())
}

/// Upstream `GetContainerOOMScoreAdjust`: node-critical and Guaranteed -997, BestEffort 1000,
/// Burstable between by the share of the node's memory the container requests (3..=999).
pub fn oom_score_adj(pod: &Pod, c: &Container, memory_capacity: u64) -> i64 {
    const GUARANTEED: i64 = -997;
    const BEST_EFFORT: i64 = 1000;
    if is_node_critical(pod) {
        return GUARANTEED;
    }
    match pod_qos(pod) {
        QosClass::Guaranteed => return GUARANTEED,
        QosClass::BestEffort => return BEST_EFFORT,
        QosClass::Burstable => {}
    }
    let res = c.resources.as_ref();
    let request = res
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("memory"))
        .or_else(|| {
            res.and_then(|r| r.limits.as_ref())
                .and_then(|l| l.get("memory"))
        })
        .and_then(|q| parse_milli(&q.0))
        .map(|m| (m + 999) / 1000)
        .unwrap_or(0);
    let capacity = i128::from(memory_capacity.max(1));
    let adj = (1000 - (1000 * request) / capacity) as i64;
    if adj < 1000 + GUARANTEED {
        1000 + GUARANTEED
    } else if adj == BEST_EFFORT {
        adj - 1
    } else {
        adj
    }
}

/// Upstream `IsNodeCriticalPod`: a critical pod (static, mirror, or priority at least
/// system-critical) of priority class `system-node-critical`.
fn is_node_critical(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.priority_class_name.as_deref()) != Some("system-node-critical") {
        return false;
    }
    const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
    let annotations = pod.metadata.annotations.as_ref();
    let source =
        annotations.and_then(|a| a.get(crate::types::annotations::CONFIG_SOURCE_ANNOTATION));
    let mirror =
        annotations.is_some_and(|a| a.contains_key(crate::types::annotations::MIRROR_ANNOTATION));
    let static_pod = source.is_some_and(|s| s != "api");
    static_pod || mirror || spec.and_then(|s| s.priority).unwrap_or(0) >= SYSTEM_CRITICAL_PRIORITY
}

/// A burstable pod's entry in the QoS bookkeeping: its cpu request in millicores.
pub fn cpu_request_milli(pod: &Pod) -> i64 {
    pod_requests(pod).get("cpu").copied().unwrap_or(0)
}

/// The kubepods cgroup's settings from node allocatable (upstream `getCgroupConfig`): memory and
/// pids limits, cpu shares by cpu, hugepages unbounded. `allocatable` is in upstream units (cpu
/// in millicores, memory bytes, pid a count).
pub fn kubepods_config(
    allocatable: &BTreeMap<String, i64>,
    hugepage_sizes: &[u64],
) -> ResourceConfig {
    let mut out = ResourceConfig {
        memory_limit: allocatable.get("memory").copied(),
        cpu_shares: allocatable.get("cpu").map(|m| milli_cpu_to_shares(*m)),
        pids_limit: allocatable.get("pid").copied(),
        ..ResourceConfig::default()
    };
    for size in hugepage_sizes {
        out.hugetlb_limits.insert(*size, HUGEPAGES_UNBOUNDED);
    }
    out
}

#[cfg(test)]
mod tests;
