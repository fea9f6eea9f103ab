//! Which pod goes first, and what its eviction says (upstream `rankMemoryPressure`,
//! `rankPIDPressure`, `rankDiskPressureFunc`, `evictionMessage`, and the local storage checks
//! `emptyDirLimitEviction`, `podEphemeralStorageLimitEviction`,
//! `containerEphemeralStorageLimitEviction` of `eviction_manager.go`). Pure, over the pods and
//! the summary's pod stats.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kubelet_config::config::eviction::{Signal, Threshold};

use super::signals::{format_binary, format_decimal, observed_signal, Observations};
use crate::admission::{pod_limits, pod_requests};
use crate::podutil;
use crate::stats::summary::{FsStats, PodStats};

pub use crate::types::pod::{is_critical, SYSTEM_CRITICAL_PRIORITY};

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Pod stats by UID (upstream `cachedStatsFunc`).
pub type StatsByUid<'a> = BTreeMap<&'a str, &'a PodStats>;

pub fn by_uid(pods: &[PodStats]) -> StatsByUid<'_> {
    pods.iter().map(|p| (p.pod_ref.uid.as_str(), p)).collect()
}

/// Which parts of a pod's disk use count for a signal (upstream `fsStatsType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsPart {
    /// Containers' writable layers.
    Root,
    Logs,
    /// Local volumes (emptyDir on disk, configMap, secret, downwardAPI, hostPath).
    LocalVolumes,
}

/// Upstream `buildSignalToRankFunc`'s disk parts: with a dedicated image filesystem, nodefs
/// counts logs and volumes and imagefs the writable layers; on one filesystem, everything.
pub fn disk_parts(signal: Signal, dedicated_image_fs: bool) -> &'static [FsPart] {
    const ALL: &[FsPart] = &[FsPart::Root, FsPart::Logs, FsPart::LocalVolumes];
    if !dedicated_image_fs {
        return ALL;
    }
    match observed_signal(signal) {
        Signal::ImageFsAvailable | Signal::ImageFsInodesFree => &[FsPart::Root],
        _ => &[FsPart::Logs, FsPart::LocalVolumes],
    }
}

/// Upstream `localVolumeNames`: volumes whose data lives on the node's disk.
fn local_volume_names(pod: &Pod) -> Vec<&str> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter(|v| {
            v.host_path.is_some()
                || v.config_map.is_some()
                || v.downward_api.is_some()
                || v.empty_dir
                    .as_ref()
                    .is_some_and(|e| e.medium.as_deref() != Some("Memory"))
        })
        .map(|v| v.name.as_str())
        .collect()
}

fn fs_value(fs: Option<&FsStats>, inodes: bool) -> i64 {
    let v = fs.and_then(|f| if inodes { f.inodes_used } else { f.used_bytes });
    i64::try_from(v.unwrap_or(0)).unwrap_or(i64::MAX)
}

/// Upstream `podDiskUsage`: bytes (or inodes) of the given parts.
pub fn disk_usage(pod: &Pod, stats: &PodStats, parts: &[FsPart], inodes: bool) -> i64 {
    let mut total = 0i64;
    for c in &stats.containers {
        if parts.contains(&FsPart::Root) {
            total += fs_value(c.rootfs.as_ref(), inodes);
        }
        if parts.contains(&FsPart::Logs) {
            total += fs_value(c.logs.as_ref(), inodes);
        }
    }
    if parts.contains(&FsPart::LocalVolumes) {
        for name in local_volume_names(pod) {
            if let Some(v) = stats.volume_stats.iter().find(|v| v.name == name) {
                total += fs_value(Some(&v.fs), inodes);
            }
        }
    }
    total
}

fn memory_usage(stats: &PodStats) -> i64 {
    let ws = stats.memory.as_ref().and_then(|m| m.working_set_bytes);
    i64::try_from(ws.unwrap_or(0)).unwrap_or(i64::MAX)
}

fn request(pod: &Pod, resource: &str) -> i64 {
    pod_requests(pod).get(resource).copied().unwrap_or(0)
}

/// Upstream's rank comparators for one signal: first, pods without stats; then, for memory and
/// disk, those using more than they requested; then lower priority; then more usage above
/// requests (pids: more processes). The pods are sorted most evictable first.
pub fn rank(pods: &mut [Arc<Pod>], stats: &StatsByUid<'_>, signal: Signal, dedicated: bool) {
    let usage = |p: &Pod, s: &PodStats| -> i64 {
        match signal.resource() {
            "memory" => memory_usage(s),
            "pids" => s
                .process_stats
                .as_ref()
                .and_then(|p| p.process_count)
                .map_or(0, |c| i64::try_from(c).unwrap_or(i64::MAX)),
            r => disk_usage(p, s, disk_parts(signal, dedicated), r == "inodes"),
        }
    };
    // (request compared for "exceeds", request subtracted from usage): upstream compares inode
    // use to an inodes request (there is none) but subtracts the ephemeral-storage request.
    let req = |p: &Pod| -> (i64, i64) {
        match signal.resource() {
            "memory" => {
                let r = request(p, "memory");
                (r, r)
            }
            "pids" => (0, 0),
            "inodes" => (0, request(p, "ephemeral-storage")),
            _ => {
                let r = request(p, "ephemeral-storage");
                (r, r)
            }
        }
    };
    let key = |p: &Arc<Pod>| {
        let s = stats.get(podutil::uid(p));
        (s.is_some(), s.map(|s| (usage(p, s), req(p))))
    };
    pods.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        // No stats first.
        let mut o = ka.0.cmp(&kb.0);
        if o != Ordering::Equal {
            return o;
        }
        let (Some((ua, (ea, ra))), Some((ub, (eb, rb)))) = (ka.1, kb.1) else {
            return Ordering::Equal;
        };
        if signal.resource() != "pids" {
            // Exceeding requests first.
            o = (ub > eb).cmp(&(ua > ea));
            if o != Ordering::Equal {
                return o;
            }
        }
        o = priority(a).cmp(&priority(b));
        if o != Ordering::Equal {
            return o;
        }
        if signal.resource() == "pids" {
            ub.cmp(&ua)
        } else {
            (ub - rb).cmp(&(ua - ra))
        }
    });
}

/// Upstream `getThresholdMetInfo`: the first met threshold for the resource and its signal's
/// observation, as printed quantities.
fn threshold_met_info(
    resource: &str,
    met: &[Threshold],
    obs: &Observations,
) -> Option<(String, String)> {
    met.iter().find_map(|t| {
        if t.signal.resource() != resource {
            return None;
        }
        let o = obs.get(&observed_signal(t.signal))?;
        let avail = match resource {
            "memory" | "ephemeral-storage" => format_binary(o.available),
            _ => format_decimal(o.available),
        };
        Some((format_binary(t.value.quantity(o.capacity)), avail))
    })
}

/// Upstream `evictionMessage`: `The node was low on resource: memory. Threshold quantity: 100Mi,
/// available: 50Mi. Container x was using 20Mi, request is 0, has larger consumption of memory. `
pub fn message(
    resource: &str,
    pod: &Pod,
    stats: Option<&PodStats>,
    met: &[Threshold],
    obs: &Observations,
) -> String {
    let mut m = format!("The node was low on resource: {resource}. ");
    if let Some((q, avail)) = threshold_met_info(resource, met, obs) {
        m.push_str(&format!("Threshold quantity: {q}, available: {avail}. "));
    }
    let Some(stats) = stats else { return m };
    let spec = pod.spec.as_ref();
    let containers = spec
        .map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .into_iter()
        .flatten();
    let specs: Vec<_> = containers.collect();
    for cs in &stats.containers {
        let Some(c) = specs.iter().find(|c| c.name == cs.name) else {
            continue;
        };
        let req_text = c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(resource))
            .map(|q| q.0.clone());
        let req = req_text
            .as_deref()
            .and_then(crate::resources::parse_milli)
            .map_or(0, |m| i64::try_from((m + 999) / 1000).unwrap_or(i64::MAX));
        let usage = match resource {
            "memory" => cs
                .memory
                .as_ref()
                .and_then(|m| m.working_set_bytes)
                .map(|v| i64::try_from(v).unwrap_or(i64::MAX)),
            "ephemeral-storage" => match (
                cs.rootfs.as_ref().and_then(|f| f.used_bytes),
                cs.logs.as_ref().and_then(|f| f.used_bytes),
            ) {
                (Some(r), Some(l)) => Some(i64::try_from(r + l).unwrap_or(i64::MAX)),
                _ => None,
            },
            _ => None,
        };
        if let Some(u) = usage.filter(|u| *u > req) {
            m.push_str(&format!(
                "Container {} was using {}, request is {}, has larger consumption of {resource}. ",
                c.name,
                format_binary(u),
                req_text.unwrap_or_else(|| "0".into())
            ));
        }
    }
    m
}

/// Upstream's `kubelet_evictions` signal labels of the local storage evictions.
pub const EMPTY_DIR_LIMIT: &str = "emptydirfs.limit";
pub const POD_EPHEMERAL_LIMIT: &str = "ephemeralpodfs.limit";
pub const CONTAINER_EPHEMERAL_LIMIT: &str = "ephemeralcontainerfs.limit";

/// Upstream `localStorageEviction`'s checks for one pod, in its order: an emptyDir over its
/// `sizeLimit`, the pod over its containers' total `ephemeral-storage` limit, a container over
/// its own. The metric's signal label and the eviction message when one fails.
pub fn local_storage_violation(
    pod: &Pod,
    stats: &PodStats,
    dedicated: bool,
) -> Option<(&'static str, String)> {
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let Some(limit) = v.empty_dir.as_ref().and_then(|e| e.size_limit.as_ref()) else {
            continue;
        };
        let Some(bytes) = crate::resources::parse_milli(&limit.0).map(|m| (m + 999) / 1000) else {
            continue;
        };
        let used = stats
            .volume_stats
            .iter()
            .find(|s| s.name == v.name)
            .and_then(|s| s.fs.used_bytes);
        if let Some(used) = used {
            if bytes > 0 && i128::from(used) > bytes {
                return Some((
                    EMPTY_DIR_LIMIT,
                    format!(
                        "Usage of EmptyDir volume {:?} exceeds the limit {:?}. ",
                        v.name, limit.0
                    ),
                ));
            }
        }
    }
    if let Some(limit) = pod_limits(pod).get("ephemeral-storage") {
        let used = stats
            .ephemeral_storage
            .as_ref()
            .and_then(|e| e.used_bytes)
            .unwrap_or(0);
        if i128::from(used) > i128::from(*limit) {
            return Some((
                POD_EPHEMERAL_LIMIT,
                format!(
                    "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
                    format_binary(*limit)
                ),
            ));
        }
    }
    let containers = pod.spec.iter().flat_map(|s| s.containers.iter());
    for c in containers {
        let limit = c
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get("ephemeral-storage"));
        let Some(limit) = limit else { continue };
        let Some(bytes) = crate::resources::parse_milli(&limit.0).map(|m| (m + 999) / 1000) else {
            continue;
        };
        if bytes == 0 {
            continue;
        }
        let Some(cs) = stats.containers.iter().find(|s| s.name == c.name) else {
            continue;
        };
        let mut used = i128::from(fs_value(cs.logs.as_ref(), false));
        if !dedicated {
            used += i128::from(fs_value(cs.rootfs.as_ref(), false));
        }
        if used > bytes {
            return Some((
                CONTAINER_EPHEMERAL_LIMIT,
                format!(
                    "Container {} exceeded its local ephemeral storage limit {:?}. ",
                    c.name, limit.0
                ),
            ));
        }
    }
    None
}

#[cfg(test)]
#[path = "rank_tests.rs"]
mod tests;
