//! The Summary API (`/stats/summary`, upstream `k8s.io/kubelet/pkg/apis/stats/v1alpha1`) in its
//! JSON shape: node CPU, memory, network, filesystems and process limits; per pod CPU, memory,
//! network, volumes, ephemeral storage and process count; per container CPU, memory, writable
//! layer and logs; the system containers (`kubelet`, `runtime`, `pods`). Pods' CPU and memory
//! come from their pod cgroup when there is one (as upstream), else they are the sums of their
//! containers'.
//!
//! Left out: the `misc` system container (`systemCgroups` is not implemented), `swap`,
//! accelerators and user-defined metrics.
//!
//! The types are written here because no published crate carries the kubelet's stats API.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::cgroup::{Sample, SystemSample};
use super::ephemeral::{PodEphemeral, PodKey};
use super::fs::{fs_info, DiskUsage, FsInfo};
use super::net::Interface;
use super::sandbox::SandboxUsage;
use super::{ContainerUsage, NodeUsage};

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub node_name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    /// The node's boot time (upstream: the root container's creation).
    pub start_time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

/// Upstream inlines the default interface's counters next to the list of all interfaces.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStats {
    pub time: Option<Time>,
    #[serde(flatten)]
    pub default: InterfaceStats,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    pub time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    pub time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    pub time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RlimitStats {
    pub time: Option<Time>,
    pub maxpid: Option<u64>,
    pub curproc: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

/// A volume's usage; `pvcRef` is absent as no plugin here is backed by a claim.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStats {
    #[serde(flatten)]
    pub fs: FsStats,
    pub name: String,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ProcessStats {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    pub start_time: Option<Time>,
    pub containers: Vec<ContainerStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(rename = "volume", skip_serializing_if = "Vec::is_empty")]
    pub volume_stats: Vec<VolumeStats>,
    #[serde(rename = "ephemeral-storage", skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<FsStats>,
    #[serde(rename = "process_stats", skip_serializing_if = "Option::is_none")]
    pub process_stats: Option<ProcessStats>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    pub start_time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
}

fn time(ns: i64) -> Option<Time> {
    (ns > 0)
        .then(|| Timestamp::from_nanosecond(i128::from(ns)).ok())
        .flatten()
        .map(Time)
}

/// The node's filesystem holding `root_dir` (upstream: the kubelet's root directory's).
pub fn fs_stats(root_dir: &Path, now_ns: i64) -> Option<FsStats> {
    fs_info(root_dir).ok().map(|i| fs_of(&i, now_ns))
}

/// A whole filesystem's figures.
pub fn fs_of(i: &FsInfo, now_ns: i64) -> FsStats {
    FsStats {
        time: time(now_ns),
        available_bytes: Some(i.available_bytes),
        capacity_bytes: Some(i.capacity_bytes),
        used_bytes: Some(i.capacity_bytes.saturating_sub(i.free_bytes)),
        inodes_free: Some(i.inodes_free),
        inodes: Some(i.inodes),
        inodes_used: Some(i.inodes.saturating_sub(i.inodes_free)),
    }
}

/// A part's usage on a filesystem (a volume, logs, a writable layer): used from the part, the
/// rest from the filesystem holding it.
pub fn usage_on(used: DiskUsage, on: Option<&FsInfo>, at_ns: i64) -> FsStats {
    FsStats {
        time: time(at_ns),
        available_bytes: on.map(|i| i.available_bytes),
        capacity_bytes: on.map(|i| i.capacity_bytes),
        used_bytes: Some(used.bytes),
        inodes_free: on.map(|i| i.inodes_free),
        inodes: on.map(|i| i.inodes),
        inodes_used: Some(used.inodes),
    }
}

/// The node's boot time from /proc/stat's `btime`, in Unix nanoseconds.
pub fn boot_time_ns() -> Option<i64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    // /proc/stat is "key value..." per line, as the cgroups' flat keyed files.
    let secs: i64 = cgroups::stat::value_by_key(&stat, "btime")?
        .try_into()
        .ok()?;
    Some(secs * 1_000_000_000)
}

/// Network counters in the API's shape, the default interface's inlined.
pub fn network_stats(
    ifaces: &[Interface],
    default: Option<&str>,
    now_ns: i64,
) -> Option<NetworkStats> {
    let conv = |i: &Interface| InterfaceStats {
        name: i.name.clone(),
        rx_bytes: Some(i.rx_bytes),
        rx_errors: Some(i.rx_errors),
        tx_bytes: Some(i.tx_bytes),
        tx_errors: Some(i.tx_errors),
    };
    if ifaces.is_empty() {
        return None;
    }
    Some(NetworkStats {
        time: time(now_ns),
        default: default
            .and_then(|d| ifaces.iter().find(|i| i.name == d))
            .map(conv)
            .unwrap_or_default(),
        interfaces: ifaces.iter().map(conv).collect(),
    })
}

/// Upstream's rlimit stats: the pid limit and the processes running now.
pub fn rlimit_stats(now_ns: i64) -> Option<RlimitStats> {
    let maxpid = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()?
        .trim()
        .parse()
        .ok();
    let curproc = std::fs::read_dir("/proc").ok().map(|d| {
        d.filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            })
            .count() as u64
    });
    Some(RlimitStats {
        time: time(now_ns),
        maxpid,
        curproc,
    })
}

/// Everything the summary is assembled from, gathered by the caller.
#[derive(Debug)]
pub struct Inputs<'a> {
    pub node_name: &'a str,
    pub now_ns: i64,
    pub node: Option<&'a NodeUsage>,
    pub boot_ns: Option<i64>,
    pub node_fs: Option<FsInfo>,
    pub node_network: Option<NetworkStats>,
    /// The image filesystem: the runtime's usage, and the filesystem holding it.
    pub image_fs: Option<(DiskUsage, Option<FsInfo>)>,
    pub rlimit: Option<RlimitStats>,
    pub containers: &'a [ContainerUsage],
    pub sandboxes: &'a [SandboxUsage],
    pub ephemeral: &'a BTreeMap<PodKey, PodEphemeral>,
    /// Pod cgroups' readings by pod UID (empty without pod cgroups).
    pub pod_cgroups: &'a HashMap<String, Sample>,
    pub system_containers: &'a [SystemSample],
}

/// Assembles the summary. Pods are the ready sandboxes (and any pod a running container names),
/// sorted by namespace and name; their CPU and memory their pod cgroup's (else the sums of their
/// containers'), their start
/// the sandbox's creation (else their first container's). Containers' writable layers and logs
/// are reported against the image and log filesystems; the pod's ephemeral storage against the
/// root filesystem, as upstream does.
pub fn build(i: &Inputs<'_>) -> Summary {
    let mut pods: BTreeMap<PodKey, PodStats> = BTreeMap::new();
    let image_fs_info = i.image_fs.as_ref().and_then(|(_, f)| f.as_ref());
    let pod_ref = |k: &PodKey| PodReference {
        name: k.name.clone(),
        namespace: k.namespace.clone(),
        uid: k.uid.clone(),
    };
    for sb in i.sandboxes {
        let p = pods.entry(sb.pod.clone()).or_insert_with(|| PodStats {
            pod_ref: pod_ref(&sb.pod),
            start_time: time(sb.created_ns),
            ..Default::default()
        });
        p.network = sb
            .network
            .as_ref()
            .and_then(|n| network_stats(&n.interfaces, n.default.as_deref(), n.timestamp_ns));
        p.process_stats = sb.process_count.map(|c| ProcessStats {
            process_count: Some(c),
        });
    }
    for c in i.containers {
        let key = PodKey {
            namespace: c.namespace.clone(),
            name: c.pod.clone(),
            uid: c.pod_uid.clone(),
        };
        let eph = i.ephemeral.get(&key);
        let p = pods.entry(key.clone()).or_insert_with(|| PodStats {
            pod_ref: pod_ref(&key),
            ..Default::default()
        });
        let cpu = CpuStats {
            time: time(c.timestamp_ns),
            usage_nano_cores: c.cpu_nano_cores,
            usage_core_nano_seconds: c.cpu_core_nanoseconds,
        };
        let memory = MemoryStats {
            time: time(c.timestamp_ns),
            available_bytes: c.memory_available_bytes,
            usage_bytes: c.memory_usage_bytes,
            working_set_bytes: c.memory_working_set_bytes,
            rss_bytes: c.memory_rss_bytes,
            page_faults: c.memory_page_faults,
            major_page_faults: c.memory_major_page_faults,
        };
        let pc = p.cpu.get_or_insert_with(|| CpuStats {
            time: cpu.time.clone(),
            usage_nano_cores: Some(0),
            usage_core_nano_seconds: Some(0),
        });
        let add = |a: &mut Option<u64>, b: Option<u64>| *a = Some(a.unwrap_or(0) + b.unwrap_or(0));
        add(&mut pc.usage_nano_cores, cpu.usage_nano_cores);
        add(&mut pc.usage_core_nano_seconds, cpu.usage_core_nano_seconds);
        let pm = p.memory.get_or_insert_with(|| MemoryStats {
            time: memory.time.clone(),
            ..Default::default()
        });
        add(&mut pm.usage_bytes, memory.usage_bytes);
        add(&mut pm.working_set_bytes, memory.working_set_bytes);
        add(&mut pm.rss_bytes, memory.rss_bytes);
        add(&mut pm.page_faults, memory.page_faults);
        add(&mut pm.major_page_faults, memory.major_page_faults);
        let start = time(c.started_ns);
        if p.start_time.is_none() {
            p.start_time = start.clone();
        }
        let measured_ns = |e: &PodEphemeral| {
            e.measured
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(i.now_ns, |d| d.as_nanos() as i64)
        };
        p.containers.push(ContainerStats {
            name: c.name.clone(),
            start_time: start,
            cpu: Some(cpu),
            memory: Some(memory),
            rootfs: c.writable_layer_bytes.map(|used| {
                let u = DiskUsage {
                    bytes: used,
                    inodes: c.writable_layer_inodes.unwrap_or(0),
                };
                usage_on(u, image_fs_info, c.timestamp_ns)
            }),
            logs: eph.and_then(|e| {
                let used = e.logs.get(&c.name)?;
                Some(usage_on(*used, e.logs_fs.as_ref(), measured_ns(e)))
            }),
        });
    }
    for p in pods.values_mut() {
        if let Some(s) = i.pod_cgroups.get(&p.pod_ref.uid) {
            let (cpu, memory) = cgroup_cpu_memory(s);
            p.cpu = Some(cpu);
            p.memory = Some(memory);
        }
    }
    for (key, p) in pods.iter_mut() {
        let Some(e) = i.ephemeral.get(key) else {
            continue;
        };
        let at = e
            .measured
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(i.now_ns, |d| d.as_nanos() as i64);
        p.volume_stats = e
            .volumes
            .iter()
            .map(|v| VolumeStats {
                fs: usage_on(v.usage, v.fs.as_ref(), at),
                name: v.name.clone(),
            })
            .collect();
        p.ephemeral_storage = Some(usage_on(e.total, i.node_fs.as_ref(), at));
    }
    Summary {
        node: NodeStats {
            node_name: i.node_name.to_string(),
            system_containers: i.system_containers.iter().map(system_container).collect(),
            start_time: i.boot_ns.and_then(time),
            cpu: i.node.map(|n| CpuStats {
                time: time(n.timestamp_ns),
                usage_nano_cores: None,
                usage_core_nano_seconds: Some(n.cpu_core_nanoseconds),
            }),
            memory: i.node.map(|n| MemoryStats {
                time: time(n.timestamp_ns),
                available_bytes: n
                    .memory_capacity_bytes
                    .map(|cap| cap.saturating_sub(n.memory_working_set_bytes)),
                working_set_bytes: Some(n.memory_working_set_bytes),
                ..Default::default()
            }),
            network: i.node_network.clone(),
            fs: i.node_fs.as_ref().map(|f| fs_of(f, i.now_ns)),
            runtime: i.image_fs.as_ref().map(|(used, on)| RuntimeStats {
                image_fs: Some(usage_on(*used, on.as_ref(), i.now_ns)),
            }),
            rlimit: i.rlimit.clone(),
        },
        pods: pods.into_values().collect(),
    }
}

/// Drops everything but CPU and memory, as upstream's `only_cpu_and_memory` answer has.
pub fn cpu_and_memory_only(s: &mut Summary) {
    let n = &mut s.node;
    n.network = None;
    n.fs = None;
    n.runtime = None;
    n.rlimit = None;
    for p in &mut s.pods {
        p.network = None;
        p.volume_stats.clear();
        p.ephemeral_storage = None;
        p.process_stats = None;
        for c in &mut p.containers {
            c.rootfs = None;
            c.logs = None;
        }
    }
}

/// A cgroup's CPU and memory in the Summary API's terms (upstream
/// `cadvisorInfoToCPUandMemoryStats`): `availableBytes` only under a memory limit.
pub fn cgroup_cpu_memory(s: &Sample) -> (CpuStats, MemoryStats) {
    let u = &s.usage;
    let cpu = CpuStats {
        time: time(s.at_ns),
        usage_nano_cores: s.nano_cores,
        usage_core_nano_seconds: Some(u.cpu_usage_ns),
    };
    let memory = MemoryStats {
        time: time(s.at_ns),
        available_bytes: u
            .memory_limit_bytes
            .map(|l| l.saturating_sub(u.memory_working_set_bytes)),
        usage_bytes: Some(u.memory_usage_bytes),
        working_set_bytes: Some(u.memory_working_set_bytes),
        rss_bytes: Some(u.memory_rss_bytes),
        page_faults: Some(u.memory_page_faults),
        major_page_faults: Some(u.memory_major_page_faults),
    };
    (cpu, memory)
}

/// A system container in the Summary API's shape (no filesystems, as upstream).
pub fn system_container(s: &SystemSample) -> ContainerStats {
    let (cpu, memory) = cgroup_cpu_memory(&s.sample);
    ContainerStats {
        name: s.name.to_string(),
        start_time: s.start_ns.and_then(time),
        cpu: Some(cpu),
        memory: Some(memory),
        rootfs: None,
        logs: None,
    }
}

#[cfg(test)]
#[path = "summary_tests.rs"]
mod tests;
