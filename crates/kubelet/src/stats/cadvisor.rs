//! `/metrics/cadvisor`: the cgroup series dashboards use, in cAdvisor's names, help texts, label
//! sets and timestamps (cAdvisor `metrics/prometheus.go`, with the kubelet's label function
//! `containerPrometheusLabelsFunc` in `pkg/kubelet/server/server.go`): `container`, `id` (the
//! cgroup path), `image`, `name` (the runtime's container ID), `namespace`, `pod`.
//!
//! Rows: the root cgroup (`id="/"`, the node), `kubepods` and its QoS tiers, each pod cgroup
//! (`container=""`, its pod's name and namespace, as the kubelet's label function adds them),
//! and each container's cgroup below it (the sandbox's with `container=""` and the sandbox ID as
//! `name`). Pods' network counters are read through a process of the pod cgroup (as cAdvisor
//! reads a container's), never for host-network pods; the root's are the node's. The filesystem
//! series are the node's root filesystem, as cAdvisor reports for containerd's containers none.
//!
//! One pass over the cgroups per scrape ([`super::cgroup::CgroupStats::pod_tree`]), three CRI
//! listings for the labels, and the text is written straight into one buffer.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rkubelet_cri::api;

use super::cgroup::{CgroupStats, PodTree, Sample};
use super::net::{self, Interface};
use super::StatsSource;
use crate::runtime::labels;

/// The labels of one row, borrowed from the CRI listings.
#[derive(Debug, Clone, Copy, Default)]
struct Who<'a> {
    container: &'a str,
    id: &'a str,
    image: &'a str,
    name: &'a str,
    namespace: &'a str,
    pod: &'a str,
}

/// One cgroup to export.
#[derive(Debug)]
struct Row<'a> {
    who: Who<'a>,
    sample: &'a Sample,
    network: Option<&'a [Interface]>,
}

/// Pod identity by UID and by sandbox ID, container identity by ID, image names by ID.
#[derive(Debug, Default)]
struct Names {
    pods: HashMap<String, (String, String)>,
    sandboxes: HashMap<String, (String, String)>,
    containers: HashMap<String, (String, String, String, String)>,
    images: HashMap<String, String>,
    error: bool,
}

async fn names(src: &StatsSource) -> Names {
    let cri = &src.cri;
    let (sandboxes, containers, images) = tokio::join!(
        cri.list_pod_sandbox(api::ListPodSandboxRequest { filter: None }),
        cri.list_containers(api::ListContainersRequest { filter: None }),
        cri.list_images(api::ListImagesRequest { filter: None }),
    );
    let mut n = Names::default();
    match sandboxes {
        Ok(r) => {
            for sb in r.items {
                let Some(md) = sb.metadata else { continue };
                n.pods
                    .insert(md.uid.clone(), (md.name.clone(), md.namespace.clone()));
                n.sandboxes.insert(sb.id, (md.name, md.namespace));
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cadvisor metrics: cannot list pod sandboxes");
            n.error = true;
        }
    }
    match images {
        Ok(r) => {
            for i in r.images {
                if let Some(tag) = i.repo_tags.into_iter().next() {
                    n.images.insert(i.id, tag);
                }
            }
        }
        Err(e) => tracing::debug!(error = %e, "cadvisor metrics: cannot list images"),
    }
    match containers {
        Ok(r) => {
            for c in r.containers {
                let l = &c.labels;
                let get = |k: &str| l.get(k).cloned().unwrap_or_default();
                let spec = c.image.map(|i| i.image).unwrap_or_default();
                let image = n
                    .images
                    .get(&c.image_ref)
                    .or_else(|| n.images.get(&spec))
                    .cloned()
                    .unwrap_or(spec);
                n.containers.insert(
                    c.id,
                    (
                        get(labels::CONTAINER_NAME),
                        get(labels::POD_NAME),
                        get(labels::POD_NAMESPACE),
                        image,
                    ),
                );
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cadvisor metrics: cannot list containers");
            n.error = true;
        }
    }
    n
}

/// What the blocking pass reads: the pod tree with containers, the root cgroup, pods' network
/// and the node's.
#[derive(Debug, Default)]
struct Read {
    tree: PodTree,
    root: Option<Sample>,
    root_network: Vec<Interface>,
    pod_network: HashMap<String, Vec<Interface>>,
    root_fs: Option<(String, super::fs::FsInfo)>,
}

fn read_cgroups(c: &CgroupStats, root_dir: &Path) -> Read {
    let tree = c.pod_tree(true);
    let host_netns = netns(Path::new("/proc/self"));
    let mut pod_network = HashMap::new();
    // Every container of a pod shares its sandbox's network namespace: one leaf cgroup's
    // processes are enough (walking the whole pod cgroup costs a directory listing per level).
    let mut leaf: HashMap<&str, &str> = HashMap::new();
    for ct in &tree.containers {
        leaf.entry(ct.pod_uid.as_str())
            .or_insert(ct.sample.id.as_str());
    }
    for (uid, s) in &tree.pods {
        let cgroup = leaf.get(uid.as_str()).copied().unwrap_or(s.id.as_str());
        let Some(pid) = c.pids(cgroup).into_iter().min() else {
            continue;
        };
        let dir = PathBuf::from(format!("/proc/{pid}"));
        let ns = netns(&dir);
        if ns.is_none() || ns == host_netns {
            continue;
        }
        if let Ok((ifaces, _)) = net::read(&dir) {
            pod_network.insert(uid.clone(), ifaces);
        }
    }
    Read {
        root: c.read("/", false),
        root_network: net::read(Path::new("/proc/self"))
            .map(|(i, _)| i)
            .unwrap_or_default(),
        pod_network,
        root_fs: super::fs::fs_info(root_dir)
            .ok()
            .map(|i| (root_device(root_dir), i)),
        tree,
    }
}

fn netns(proc_dir: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(proc_dir.join("ns/net"))
        .ok()
        .map(|m| m.ino())
}

/// The device holding the kubelet's root directory (cAdvisor's `device` label), read once.
fn root_device(root_dir: &Path) -> String {
    static DEVICE: OnceLock<String> = OnceLock::new();
    DEVICE
        .get_or_init(|| {
            std::fs::read_to_string("/proc/self/mountinfo")
                .ok()
                .and_then(|t| mount_source(&t, root_dir))
                .unwrap_or_default()
        })
        .clone()
}

/// The source of the mount holding `path` (the longest mount point above it) in a mountinfo text:
/// `36 35 98:0 / /mnt rw - ext4 /dev/vda1 rw` -> `/dev/vda1`.
pub fn mount_source(mountinfo: &str, path: &Path) -> Option<String> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let mount_point = l.split(' ').nth(4)?;
            let (_, post) = l.split_once(" - ")?;
            let source = post.split(' ').nth(1)?;
            path.starts_with(mount_point)
                .then(|| (mount_point.len(), source.to_string()))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, s)| s)
}

/// `/metrics/cadvisor` now, in the Prometheus text format.
pub async fn cadvisor_metrics(src: &StatsSource) -> Vec<u8> {
    let names = names(src).await;
    let read = match src.cgroups.clone() {
        Some(c) => {
            let root_dir = src.root_dir.clone();
            tokio::task::spawn_blocking(move || read_cgroups(&c, &root_dir))
                .await
                .unwrap_or_default()
        }
        None => Read::default(),
    };
    render(&names, &read, &machine()).into_bytes()
}

/// The machine's identity and size (cAdvisor's `machine_*` series).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Machine {
    pub boot_id: String,
    pub machine_id: String,
    pub system_uuid: String,
    pub cpu_cores: u64,
    pub memory_bytes: u64,
}

fn machine() -> Machine {
    static M: OnceLock<Machine> = OnceLock::new();
    M.get_or_init(|| {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        Machine {
            boot_id: read("/proc/sys/kernel/random/boot_id"),
            machine_id: read("/etc/machine-id"),
            system_uuid: read("/sys/class/dmi/id/product_uuid"),
            cpu_cores: std::thread::available_parallelism().map_or(0, |n| n.get() as u64),
            memory_bytes: super::node::memory_capacity().unwrap_or(0),
        }
    })
    .clone()
}

fn rows<'a>(n: &'a Names, r: &'a Read) -> Vec<Row<'a>> {
    let mut out = Vec::new();
    if let Some(root) = &r.root {
        out.push(Row {
            who: Who {
                id: &root.id,
                ..Who::default()
            },
            sample: root,
            network: Some(&r.root_network),
        });
    }
    for s in r.tree.kubepods.iter().chain(&r.tree.tiers) {
        out.push(Row {
            who: Who {
                id: &s.id,
                ..Who::default()
            },
            sample: s,
            network: None,
        });
    }
    let mut pods: Vec<(&String, &Sample)> = r.tree.pods.iter().collect();
    pods.sort_by(|a, b| a.1.id.cmp(&b.1.id));
    for (uid, s) in pods {
        let (pod, namespace) = n
            .pods
            .get(uid)
            .map_or(("", ""), |(p, ns)| (p.as_str(), ns.as_str()));
        out.push(Row {
            who: Who {
                id: &s.id,
                pod,
                namespace,
                ..Who::default()
            },
            sample: s,
            network: r.pod_network.get(uid).map(Vec::as_slice),
        });
    }
    for c in &r.tree.containers {
        let who =
            if let Some((container, pod, namespace, image)) = n.containers.get(&c.container_id) {
                Who {
                    container,
                    id: &c.sample.id,
                    image,
                    name: &c.container_id,
                    namespace,
                    pod,
                }
            } else if let Some((pod, namespace)) = n.sandboxes.get(&c.container_id) {
                Who {
                    id: &c.sample.id,
                    name: &c.container_id,
                    namespace,
                    pod,
                    ..Who::default()
                }
            } else {
                // Not (or no longer) the runtime's: left out rather than shown unnamed.
                continue;
            };
        out.push(Row {
            who,
            sample: &c.sample,
            network: None,
        });
    }
    out
}

/// The text body from what was read: families in cAdvisor's order of kinds, every row in each.
fn render(n: &Names, r: &Read, m: &Machine) -> String {
    let rows = rows(n, r);
    let mut w = Text {
        out: String::with_capacity(256 + rows.len() * 2048),
    };
    type Get = fn(&Sample) -> Option<f64>;
    fn ns(v: u64) -> f64 {
        v as f64 / 1e9
    }
    let counters: [(&str, &str, Get); 5] = [
        (
            "container_cpu_system_seconds_total",
            "Cumulative system cpu time consumed in seconds.",
            |s| Some(ns(s.usage.cpu_system_ns)),
        ),
        (
            "container_cpu_user_seconds_total",
            "Cumulative user cpu time consumed in seconds.",
            |s| Some(ns(s.usage.cpu_user_ns)),
        ),
        (
            "container_cpu_cfs_periods_total",
            "Number of elapsed enforcement period intervals.",
            |s| s.usage.cpu_quota_us.map(|_| s.usage.cpu_periods as f64),
        ),
        (
            "container_cpu_cfs_throttled_periods_total",
            "Number of throttled period intervals.",
            |s| {
                s.usage
                    .cpu_quota_us
                    .map(|_| s.usage.cpu_throttled_periods as f64)
            },
        ),
        (
            "container_cpu_cfs_throttled_seconds_total",
            "Total time duration the container has been throttled.",
            |s| s.usage.cpu_quota_us.map(|_| ns(s.usage.cpu_throttled_ns)),
        ),
    ];
    for (name, help, get) in &counters {
        w.family(name, help, "counter");
        for row in &rows {
            if let Some(v) = get(row.sample) {
                w.series(name, &row.who, None, v, Some(row.sample.at_ns));
            }
        }
    }
    let name = "container_cpu_usage_seconds_total";
    w.family(name, "Cumulative cpu time consumed in seconds.", "counter");
    for row in &rows {
        let v = ns(row.sample.usage.cpu_usage_ns);
        w.series(
            name,
            &row.who,
            Some(("cpu", "total")),
            v,
            Some(row.sample.at_ns),
        );
    }
    let gauges: [(&str, &str, Get); 4] = [
        (
            "container_memory_cache",
            "Number of bytes of page cache memory.",
            |s| Some(s.usage.memory_cache_bytes as f64),
        ),
        (
            "container_memory_rss",
            "Size of RSS in bytes.",
            |s| Some(s.usage.memory_rss_bytes as f64),
        ),
        (
            "container_memory_usage_bytes",
            "Current memory usage in bytes, including all memory regardless of when it was accessed",
            |s| Some(s.usage.memory_usage_bytes as f64),
        ),
        (
            "container_memory_working_set_bytes",
            "Current working set in bytes.",
            |s| Some(s.usage.memory_working_set_bytes as f64),
        ),
    ];
    for (name, help, get) in &gauges {
        w.family(name, help, "gauge");
        for row in &rows {
            if let Some(v) = get(row.sample) {
                w.series(name, &row.who, None, v, Some(row.sample.at_ns));
            }
        }
    }
    type Net = fn(&Interface) -> u64;
    let nets: [(&str, &str, Net); 4] = [
        (
            "container_network_receive_bytes_total",
            "Cumulative count of bytes received",
            |i| i.rx_bytes,
        ),
        (
            "container_network_receive_errors_total",
            "Cumulative count of errors encountered while receiving",
            |i| i.rx_errors,
        ),
        (
            "container_network_transmit_bytes_total",
            "Cumulative count of bytes transmitted",
            |i| i.tx_bytes,
        ),
        (
            "container_network_transmit_errors_total",
            "Cumulative count of errors encountered while transmitting",
            |i| i.tx_errors,
        ),
    ];
    for (name, help, get) in &nets {
        w.family(name, help, "counter");
        for row in &rows {
            for i in row.network.unwrap_or_default() {
                let at = Some(row.sample.at_ns);
                w.series(
                    name,
                    &row.who,
                    Some(("interface", &i.name)),
                    get(i) as f64,
                    at,
                );
            }
        }
    }
    if let (Some((device, fs)), Some(root)) = (&r.root_fs, rows.first()) {
        let at = Some(root.sample.at_ns);
        let used = fs.capacity_bytes.saturating_sub(fs.free_bytes) as f64;
        for (name, help, v) in [
            (
                "container_fs_limit_bytes",
                "Number of bytes that can be consumed by the container on this filesystem.",
                fs.capacity_bytes as f64,
            ),
            (
                "container_fs_usage_bytes",
                "Number of bytes that are consumed by the container on this filesystem.",
                used,
            ),
        ] {
            w.family(name, help, "gauge");
            w.series(name, &root.who, Some(("device", device)), v, at);
        }
    }
    let name = "container_spec_memory_limit_bytes";
    w.family(name, "Memory limit for the container.", "gauge");
    for row in &rows {
        // cAdvisor's specMemoryValue: unlimited is 0. Spec series carry no timestamp.
        let v = row.sample.usage.memory_limit_bytes.unwrap_or(0) as f64;
        w.series(name, &row.who, None, v, None);
    }
    let name = "container_scrape_error";
    w.family(
        name,
        "1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
    );
    let _ = writeln!(w.out, "{name} {}", if n.error { 1 } else { 0 });
    for (name, help, v) in [
        (
            "machine_cpu_cores",
            "Number of logical CPU cores.",
            m.cpu_cores,
        ),
        (
            "machine_memory_bytes",
            "Amount of memory installed on the machine.",
            m.memory_bytes,
        ),
    ] {
        w.family(name, help, "gauge");
        w.out.push_str(name);
        w.out.push_str("{boot_id=\"");
        escape_into(&mut w.out, &m.boot_id);
        w.out.push_str("\",machine_id=\"");
        escape_into(&mut w.out, &m.machine_id);
        w.out.push_str("\",system_uuid=\"");
        escape_into(&mut w.out, &m.system_uuid);
        let _ = writeln!(w.out, "\"}} {v}");
    }
    w.out
}

/// The text exposition format, written in place.
struct Text {
    out: String,
}

impl Text {
    fn family(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// One series; the extra label is put in its alphabetical place, as client_golang sorts them.
    fn series(
        &mut self,
        name: &str,
        who: &Who<'_>,
        extra: Option<(&str, &str)>,
        value: f64,
        at_ns: Option<i64>,
    ) {
        let mut labels = [
            ("container", who.container),
            ("id", who.id),
            ("image", who.image),
            ("name", who.name),
            ("namespace", who.namespace),
            ("pod", who.pod),
            ("", ""),
        ];
        let n = match extra {
            Some(e) => {
                labels[6] = e;
                labels.sort_by(|a, b| a.0.cmp(b.0));
                7
            }
            None => 6,
        };
        self.out.push_str(name);
        self.out.push('{');
        for (i, (k, v)) in labels[..n].iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            self.out.push_str(k);
            self.out.push_str("=\"");
            escape_into(&mut self.out, v);
            self.out.push('"');
        }
        let _ = match at_ns {
            Some(t) if t > 0 => writeln!(self.out, "}} {value} {}", t / 1_000_000),
            _ => writeln!(self.out, "}} {value}"),
        };
    }
}

/// A label value as the text format wants it: backslash, double quote and newline escaped.
fn escape_into(out: &mut String, v: &str) {
    for ch in v.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
#[path = "cadvisor_tests.rs"]
mod tests;
