//! The Summary API (`/stats/summary`, upstream `k8s.io/kubelet/pkg/apis/stats/v1alpha1`) in its
//! JSON shape: node CPU, memory, filesystem and process limits; per pod and per container CPU,
//! memory, writable layer and logs. Pods' figures are the sums of their containers'.
//!
//! The types are written here because no published crate carries the kubelet's stats API.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
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

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    pub containers: Vec<ContainerStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
}

fn time(ns: i64) -> Option<Time> {
    (ns > 0)
        .then(|| Timestamp::from_nanosecond(i128::from(ns)).ok())
        .flatten()
        .map(Time)
}

/// The node's filesystem holding `root_dir` (upstream: the kubelet's root directory's).
pub fn fs_stats(root_dir: &Path, now_ns: i64) -> Option<FsStats> {
    let v = nix::sys::statvfs::statvfs(root_dir).ok()?;
    let frag = v.fragment_size() as u64;
    let capacity = v.blocks() as u64 * frag;
    let available = v.blocks_available() as u64 * frag;
    let free = v.blocks_free() as u64 * frag;
    Some(FsStats {
        time: time(now_ns),
        available_bytes: Some(available),
        capacity_bytes: Some(capacity),
        used_bytes: Some(capacity.saturating_sub(free)),
        inodes_free: Some(v.files_free() as u64),
        inodes: Some(v.files() as u64),
        inodes_used: Some((v.files() as u64).saturating_sub(v.files_free() as u64)),
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

/// Assembles the summary: containers grouped into their pods (sorted by namespace and name),
/// pods' CPU and memory the sums of their containers', a pod's start its first container's.
pub fn build(
    node_name: &str,
    node: Option<&NodeUsage>,
    node_fs: Option<FsStats>,
    rlimit: Option<RlimitStats>,
    containers: &[ContainerUsage],
) -> Summary {
    let mut pods: BTreeMap<(String, String, String), PodStats> = BTreeMap::new();
    for c in containers {
        let key = (c.namespace.clone(), c.pod.clone(), c.pod_uid.clone());
        let p = pods.entry(key).or_insert_with(|| PodStats {
            pod_ref: PodReference {
                name: c.pod.clone(),
                namespace: c.namespace.clone(),
                uid: c.pod_uid.clone(),
            },
            ..Default::default()
        });
        let cpu = CpuStats {
            time: time(c.timestamp_ns),
            usage_nano_cores: c.cpu_nano_cores,
            usage_core_nano_seconds: c.cpu_core_nanoseconds,
        };
        let memory = MemoryStats {
            time: time(c.timestamp_ns),
            available_bytes: None,
            usage_bytes: c.memory_usage_bytes,
            working_set_bytes: c.memory_working_set_bytes,
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
        let start = time(c.started_ns);
        if p.start_time.is_none()
            || start.as_ref().map(|t| t.0) < p.start_time.as_ref().map(|t| t.0)
        {
            p.start_time = start.clone();
        }
        p.containers.push(ContainerStats {
            name: c.name.clone(),
            start_time: start,
            cpu: Some(cpu),
            memory: Some(memory),
            rootfs: c.writable_layer_bytes.map(|used| FsStats {
                time: time(c.timestamp_ns),
                used_bytes: Some(used),
                ..Default::default()
            }),
        });
    }
    Summary {
        node: NodeStats {
            node_name: node_name.to_string(),
            start_time: None,
            cpu: node.map(|n| CpuStats {
                time: time(n.timestamp_ns),
                usage_nano_cores: None,
                usage_core_nano_seconds: Some(n.cpu_core_nanoseconds),
            }),
            memory: node.map(|n| MemoryStats {
                time: time(n.timestamp_ns),
                available_bytes: None,
                usage_bytes: None,
                working_set_bytes: Some(n.memory_working_set_bytes),
            }),
            fs: node_fs,
            rlimit,
        },
        pods: pods.into_values().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_groups_containers_into_pods_in_upstream_json() {
        let c = |name: &str, cpu: u64, mem: u64, started: i64| ContainerUsage {
            name: name.into(),
            pod: "web".into(),
            namespace: "default".into(),
            pod_uid: "u1".into(),
            timestamp_ns: 1_700_000_000_000_000_000,
            cpu_core_nanoseconds: Some(cpu),
            cpu_nano_cores: Some(cpu / 10),
            memory_working_set_bytes: Some(mem),
            memory_usage_bytes: Some(mem * 2),
            writable_layer_bytes: Some(4096),
            started_ns: started,
        };
        let node = NodeUsage {
            timestamp_ns: 1_700_000_000_000_000_000,
            cpu_core_nanoseconds: 9,
            memory_working_set_bytes: 7,
        };
        let s = build(
            "n1",
            Some(&node),
            None,
            None,
            &[
                c("a", 100, 10, 1_600_000_002_000_000_000),
                c("b", 50, 5, 1_600_000_001_000_000_000),
            ],
        );
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["node"]["nodeName"], "n1");
        assert_eq!(v["node"]["cpu"]["usageCoreNanoSeconds"], 9);
        assert_eq!(v["node"]["memory"]["workingSetBytes"], 7);
        let pod = &v["pods"][0];
        assert_eq!(pod["podRef"]["uid"], "u1");
        assert_eq!(pod["cpu"]["usageCoreNanoSeconds"], 150);
        assert_eq!(pod["cpu"]["usageNanoCores"], 15);
        assert_eq!(pod["memory"]["workingSetBytes"], 15);
        assert_eq!(pod["memory"]["usageBytes"], 30);
        // The pod started with its first container.
        assert_eq!(pod["startTime"], "2020-09-13T12:26:41Z");
        assert_eq!(pod["containers"][1]["name"], "b");
        assert_eq!(pod["containers"][0]["rootfs"]["usedBytes"], 4096);
        assert_eq!(pod["containers"][0]["cpu"]["time"], "2023-11-14T22:13:20Z");
    }
}
