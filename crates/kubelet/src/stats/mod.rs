//! Resource usage for the stats endpoints (upstream `pkg/kubelet/stats` with the CRI stats
//! provider): the node's from its root cgroup (or /proc where the cgroup has no such file),
//! containers' from the runtime (CRI `ListContainerStats`), pods' from their pod cgroup (else as
//! the sum of their containers), the system containers and `/metrics/cadvisor` from the cgroups
//! ([`cgroup`], [`cadvisor`]).
//!
//! `/metrics/resource` is what metrics-server scrapes; it is rendered here in upstream's names
//! and label sets, with the sample times as Prometheus timestamps, as upstream does.

pub mod cadvisor;
pub mod cgroup;
pub mod ephemeral;
pub mod fs;
pub mod net;
pub(crate) mod node;
pub mod sandbox;
pub mod summary;

use std::collections::BTreeMap;

use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};
use rkubelet_cri::{api, CriClient};

use crate::runtime::labels;

pub use cgroup::CgroupStats;
pub use ephemeral::{EphemeralStorage, PodEphemeral, PodKey};
pub use node::{node_usage, NodeUsage};

/// What the stats endpoints read from: the runtime, the node's name and root directory, and the
/// pods' ephemeral storage measures (shared with whoever else needs them).
#[derive(Clone)]
pub struct StatsSource {
    pub cri: CriClient,
    pub node_name: String,
    pub root_dir: std::path::PathBuf,
    pub ephemeral: EphemeralStorage,
    /// The node's cgroups (None where they cannot be read): pod cgroups, system containers and
    /// `/metrics/cadvisor`.
    pub cgroups: Option<CgroupStats>,
    /// The CSI plugin, set once the pod runtime exists (the stats endpoints start before it):
    /// CSI volumes' usage comes from their driver's `NodeGetVolumeStats`.
    pub csi: std::sync::Arc<std::sync::OnceLock<crate::volumes::csi::CsiVolumes>>,
}

impl StatsSource {
    pub fn new(
        cri: CriClient,
        node_name: String,
        root_dir: std::path::PathBuf,
        pod_logs_dir: std::path::PathBuf,
        cgroups: Option<CgroupStats>,
    ) -> Self {
        let ephemeral =
            EphemeralStorage::new(root_dir.clone(), pod_logs_dir, ephemeral::DEFAULT_PERIOD);
        StatsSource {
            cri,
            node_name,
            root_dir,
            ephemeral,
            cgroups,
            csi: std::sync::Arc::default(),
        }
    }

    /// Hands the CSI plugin to the stats endpoints (every clone of this source sees it).
    pub fn set_csi(&self, csi: crate::volumes::csi::CsiVolumes) {
        let _ = self.csi.set(csi);
    }

    /// The pod cgroups now and, with `system`, the system containers (nothing without cgroups).
    pub async fn pod_cgroups(&self, system: bool) -> (cgroup::PodTree, Vec<cgroup::SystemSample>) {
        let Some(c) = self.cgroups.clone() else {
            return Default::default();
        };
        tokio::task::spawn_blocking(move || {
            let tree = c.pod_tree(false);
            let sys = if system {
                c.system_containers(&tree)
            } else {
                Vec::new()
            };
            (tree, sys)
        })
        .await
        .unwrap_or_default()
    }
}

/// One container's usage, as the runtime reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerUsage {
    pub id: String,
    pub name: String,
    pub pod: String,
    pub namespace: String,
    pub pod_uid: String,
    /// Unix nanoseconds of the sample.
    pub timestamp_ns: i64,
    pub cpu_core_nanoseconds: Option<u64>,
    /// The runtime's CPU rate over its last sample window, if it computes one.
    pub cpu_nano_cores: Option<u64>,
    pub memory_working_set_bytes: Option<u64>,
    pub memory_usage_bytes: Option<u64>,
    pub memory_available_bytes: Option<u64>,
    pub memory_rss_bytes: Option<u64>,
    pub memory_page_faults: Option<u64>,
    pub memory_major_page_faults: Option<u64>,
    /// Bytes used by the container's writable layer.
    pub writable_layer_bytes: Option<u64>,
    pub writable_layer_inodes: Option<u64>,
    /// Unix nanoseconds the container was created (upstream uses it as its start time).
    pub started_ns: i64,
}

/// Errors reading usage, naming the source.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("CRI {what}: {source}")]
    Cri {
        what: &'static str,
        #[source]
        source: rkubelet_cri::CriError,
    },
}

/// Running containers' usage from the runtime, with their pod identity from the CRI labels.
pub async fn container_usage(cri: &CriClient) -> Result<Vec<ContainerUsage>, StatsError> {
    let stats = cri
        .list_container_stats(api::ListContainerStatsRequest { filter: None })
        .await
        .map_err(|source| StatsError::Cri {
            what: "list container stats",
            source,
        })?
        .stats;
    let running = cri
        .list_containers(api::ListContainersRequest {
            filter: Some(api::ContainerFilter {
                state: Some(api::ContainerStateValue {
                    state: api::ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }),
        })
        .await
        .map_err(|source| StatsError::Cri {
            what: "list containers",
            source,
        })?
        .containers;
    let created: BTreeMap<&str, i64> = running
        .iter()
        .map(|c| (c.id.as_str(), c.created_at))
        .collect();
    Ok(stats
        .into_iter()
        .filter_map(|s| {
            let attrs = s.attributes?;
            // Only running containers are reported, as upstream's CRI stats provider does.
            let started_ns = *created.get(attrs.id.as_str())?;
            let l = &attrs.labels;
            let cpu = s.cpu.as_ref();
            let mem = s.memory.as_ref();
            let mem_v = |f: fn(&api::MemoryUsage) -> Option<&api::UInt64Value>| {
                mem.and_then(f).map(|v| v.value)
            };
            Some(ContainerUsage {
                id: attrs.id.clone(),
                name: l.get(labels::CONTAINER_NAME)?.clone(),
                pod: l.get(labels::POD_NAME)?.clone(),
                namespace: l.get(labels::POD_NAMESPACE)?.clone(),
                pod_uid: l.get(labels::POD_UID)?.clone(),
                timestamp_ns: cpu
                    .map(|c| c.timestamp)
                    .or(mem.map(|m| m.timestamp))
                    .unwrap_or_default(),
                cpu_core_nanoseconds: cpu
                    .and_then(|c| c.usage_core_nano_seconds.as_ref())
                    .map(|v| v.value),
                cpu_nano_cores: cpu
                    .and_then(|c| c.usage_nano_cores.as_ref())
                    .map(|v| v.value),
                memory_working_set_bytes: mem
                    .and_then(|m| m.working_set_bytes.as_ref())
                    .map(|v| v.value),
                memory_usage_bytes: mem_v(|m| m.usage_bytes.as_ref()),
                memory_available_bytes: mem_v(|m| m.available_bytes.as_ref()),
                memory_rss_bytes: mem_v(|m| m.rss_bytes.as_ref()),
                memory_page_faults: mem_v(|m| m.page_faults.as_ref()),
                memory_major_page_faults: mem_v(|m| m.major_page_faults.as_ref()),
                writable_layer_bytes: s
                    .writable_layer
                    .as_ref()
                    .and_then(|w| w.used_bytes.as_ref())
                    .map(|v| v.value),
                writable_layer_inodes: s
                    .writable_layer
                    .as_ref()
                    .and_then(|w| w.inodes_used.as_ref())
                    .map(|v| v.value),
                started_ns,
            })
        })
        .collect())
}

fn label(name: &str, value: &str) -> LabelPair {
    let mut l = LabelPair::default();
    l.set_name(name.to_string());
    l.set_value(value.to_string());
    l
}

fn family(name: &str, help: &str, kind: MetricType, metrics: Vec<Metric>) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(kind);
    f.set_metric(metrics);
    f
}

fn sample(labels: Vec<LabelPair>, kind: MetricType, value: f64, timestamp_ms: i64) -> Metric {
    let mut m = Metric::from_label(labels);
    match kind {
        MetricType::COUNTER => {
            let mut c = Counter::default();
            c.set_value(value);
            m.set_counter(c);
        }
        _ => {
            let mut g = Gauge::default();
            g.set_value(value);
            m.set_gauge(g);
        }
    }
    if timestamp_ms > 0 {
        m.set_timestamp_ms(timestamp_ms);
    }
    m
}

/// Upstream's `/metrics/resource` families (the resource metrics collector), from a node sample
/// and the containers' samples; `scrape_error` says whether container stats were unavailable.
pub fn resource_families(
    node: Option<&NodeUsage>,
    containers: &[ContainerUsage],
    pod_cgroups: &std::collections::HashMap<String, cgroup::Sample>,
    scrape_error: bool,
) -> Vec<MetricFamily> {
    use MetricType::{COUNTER, GAUGE};
    let ms = |ns: i64| ns / 1_000_000;
    let mut out = Vec::new();
    let who = |c: &ContainerUsage| {
        vec![
            label("container", &c.name),
            label("namespace", &c.namespace),
            label("pod", &c.pod),
        ]
    };
    out.push(family(
        "container_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
        COUNTER,
        containers
            .iter()
            .filter_map(|c| {
                let v = c.cpu_core_nanoseconds? as f64 / 1e9;
                Some(sample(who(c), COUNTER, v, ms(c.timestamp_ns)))
            })
            .collect(),
    ));
    out.push(family(
        "container_memory_working_set_bytes",
        "[STABLE] Current working set of the container in bytes",
        GAUGE,
        containers
            .iter()
            .filter_map(|c| {
                let v = c.memory_working_set_bytes? as f64;
                Some(sample(who(c), GAUGE, v, ms(c.timestamp_ns)))
            })
            .collect(),
    ));
    out.push(family(
        "container_start_time_seconds",
        "[STABLE] Start time of the container since unix epoch in seconds",
        GAUGE,
        containers
            .iter()
            .map(|c| sample(who(c), GAUGE, c.started_ns as f64 / 1e9, ms(c.timestamp_ns)))
            .collect(),
    ));
    if let Some(n) = node {
        out.push(family(
            "node_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
            COUNTER,
            vec![sample(
                vec![],
                COUNTER,
                n.cpu_core_nanoseconds as f64 / 1e9,
                ms(n.timestamp_ns),
            )],
        ));
        out.push(family(
            "node_memory_working_set_bytes",
            "[STABLE] Current working set of the node in bytes",
            GAUGE,
            vec![sample(
                vec![],
                GAUGE,
                n.memory_working_set_bytes as f64,
                ms(n.timestamp_ns),
            )],
        ));
    }
    // Pods: their pod cgroup's figures, else the sum of their containers at the newest of
    // their samples (upstream reads the summary's pod figures).
    let mut pods: BTreeMap<(&str, &str), (f64, f64, i64)> = BTreeMap::new();
    for c in containers {
        let e = pods
            .entry((c.namespace.as_str(), c.pod.as_str()))
            .or_default();
        if let Some(s) = pod_cgroups.get(&c.pod_uid) {
            *e = (
                s.usage.cpu_usage_ns as f64 / 1e9,
                s.usage.memory_working_set_bytes as f64,
                s.at_ns,
            );
            continue;
        }
        e.0 += c.cpu_core_nanoseconds.unwrap_or(0) as f64 / 1e9;
        e.1 += c.memory_working_set_bytes.unwrap_or(0) as f64;
        e.2 = e.2.max(c.timestamp_ns);
    }
    let pod_labels = |ns: &str, pod: &str| vec![label("namespace", ns), label("pod", pod)];
    out.push(family(
        "pod_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
        COUNTER,
        pods.iter()
            .map(|((ns, pod), (cpu, _, t))| sample(pod_labels(ns, pod), COUNTER, *cpu, ms(*t)))
            .collect(),
    ));
    out.push(family(
        "pod_memory_working_set_bytes",
        "[STABLE] Current working set of the pod in bytes",
        GAUGE,
        pods.iter()
            .map(|((ns, pod), (_, mem, t))| sample(pod_labels(ns, pod), GAUGE, *mem, ms(*t)))
            .collect(),
    ));
    // The 1.20-era name (this project's API server), kept next to the stable one.
    out.push(family(
        "scrape_error",
        "[ALPHA] 1 if there was an error while getting container metrics, 0 otherwise",
        GAUGE,
        vec![sample(
            vec![],
            GAUGE,
            if scrape_error { 1.0 } else { 0.0 },
            0,
        )],
    ));
    out.push(family(
        "resource_scrape_error",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
        GAUGE,
        vec![sample(
            vec![],
            GAUGE,
            if scrape_error { 1.0 } else { 0.0 },
            0,
        )],
    ));
    // Families without samples are left out, as client_golang's gatherer does.
    out.retain(|f| !f.get_metric().is_empty());
    out
}

/// The runtime's image filesystem: its usage from CRI `ImageFsInfo`, its size from the
/// filesystem at the mountpoint the runtime names.
pub(crate) async fn image_fs(cri: &CriClient) -> Option<(fs::DiskUsage, Option<fs::FsInfo>)> {
    let r = cri
        .image_fs_info(api::ImageFsInfoRequest {})
        .await
        .map_err(|e| tracing::warn!(error = %e, "cannot read the image filesystem's usage"))
        .ok()?;
    let f = r.image_filesystems.first()?;
    let used = fs::DiskUsage {
        bytes: f.used_bytes.as_ref().map_or(0, |v| v.value),
        inodes: f.inodes_used.as_ref().map_or(0, |v| v.value),
    };
    let info = f
        .fs_id
        .as_ref()
        .and_then(|id| fs::fs_info(std::path::Path::new(&id.mountpoint)).ok());
    Some((used, info))
}

/// Wall-clock nanoseconds: the Summary API stamps each figure with the time it was taken.
fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// `/stats/summary` now: node from its cgroups, /proc and `root_dir`'s filesystem; pods and
/// containers from the runtime, /proc and the pods' directories (through the ephemeral storage
/// cache). A source that fails is left out of the answer and logged.
pub async fn summary(src: &StatsSource) -> summary::Summary {
    let cri = &src.cri;
    let node = node_usage()
        .map_err(|e| tracing::warn!(error = %e, "cannot read node usage"))
        .ok();
    let containers = container_usage(cri)
        .await
        .map_err(|e| tracing::warn!(error = %e, "cannot read container usage"))
        .unwrap_or_default();
    let (tree, system) = src.pod_cgroups(true).await;
    let pod_pids = match src.cgroups.clone() {
        Some(c) => sandbox::PodPids {
            paths: tree
                .pods
                .iter()
                .map(|(uid, s)| (uid.clone(), s.id.clone()))
                .collect(),
            read: std::sync::Arc::new(move |path| c.pids(path)),
        },
        None => sandbox::PodPids::none(),
    };
    let sandboxes = sandbox::sandbox_usage(cri, pod_pids)
        .await
        .map_err(|e| tracing::warn!(error = %e, "cannot read pod sandboxes"))
        .unwrap_or_default();
    let image_fs = image_fs(cri).await;
    // Every pod's storage, with the writable layers the runtime just reported.
    let mut layers: BTreeMap<PodKey, BTreeMap<String, fs::DiskUsage>> = sandboxes
        .iter()
        .map(|s| (s.pod.clone(), BTreeMap::new()))
        .collect();
    for c in &containers {
        let key = PodKey {
            namespace: c.namespace.clone(),
            name: c.pod.clone(),
            uid: c.pod_uid.clone(),
        };
        let used = fs::DiskUsage {
            bytes: c.writable_layer_bytes.unwrap_or(0),
            inodes: c.writable_layer_inodes.unwrap_or(0),
        };
        layers.entry(key).or_default().insert(c.name.clone(), used);
    }
    let mut ephemeral = BTreeMap::new();
    for (pod, l) in layers {
        let mut e = src.ephemeral.measure(&pod, l).await;
        if let Some(csi) = src.csi.get() {
            csi_volume_stats(csi, &src.root_dir.join("pods").join(&pod.uid), &mut e).await;
        }
        ephemeral.insert(pod, e);
    }
    let now = now_ns();
    let node_network = net::read(std::path::Path::new("/proc/self"))
        .map_err(|e| tracing::warn!(error = %e, "cannot read the node's network counters"))
        .ok()
        .and_then(|(ifaces, default)| summary::network_stats(&ifaces, default.as_deref(), now));
    summary::build(&summary::Inputs {
        node_name: &src.node_name,
        now_ns: now,
        node: node.as_ref(),
        boot_ns: summary::boot_time_ns(),
        node_fs: fs::fs_info(&src.root_dir)
            .map_err(|e| tracing::warn!(error = %e, "cannot read the root filesystem"))
            .ok(),
        node_network,
        image_fs,
        rlimit: summary::rlimit_stats(now),
        containers: &containers,
        sandboxes: &sandboxes,
        ephemeral: &ephemeral,
        pod_cgroups: &tree.pods,
        system_containers: &system,
    })
}

/// CSI volumes' usage and file system as their driver reports them (upstream's CSI
/// `MetricsProvider`); a driver that cannot tell leaves the walked figure.
async fn csi_volume_stats(
    csi: &crate::volumes::csi::CsiVolumes,
    pod_dir: &std::path::Path,
    e: &mut PodEphemeral,
) {
    for v in &mut e.volumes {
        if v.plugin != crate::volumes::csi::CSI_PLUGIN_DIR {
            continue;
        }
        match csi.volume_stats(pod_dir, &v.name).await {
            Ok(Some(s)) => {
                v.usage = fs::DiskUsage {
                    bytes: s.used_bytes.unwrap_or(0),
                    inodes: s.inodes_used.unwrap_or(0),
                };
                v.fs = Some(fs::FsInfo {
                    capacity_bytes: s.capacity_bytes.unwrap_or(0),
                    available_bytes: s.available_bytes.unwrap_or(0),
                    free_bytes: s.available_bytes.unwrap_or(0),
                    inodes: s.inodes.unwrap_or(0),
                    inodes_free: s.inodes_free.unwrap_or(0),
                });
                v.measured = std::time::SystemTime::now();
            }
            Ok(None) => {}
            Err(err) => {
                tracing::debug!(volume = %v.name, error = %err, "CSI volume stats unavailable")
            }
        }
    }
}

/// Upstream `GetCPUAndMemoryStats`: the summary's CPU and memory figures only, without walking
/// any directory or asking the runtime for more than the containers' stats.
pub async fn summary_cpu_and_memory(src: &StatsSource) -> summary::Summary {
    let node = node_usage()
        .map_err(|e| tracing::warn!(error = %e, "cannot read node usage"))
        .ok();
    let containers = container_usage(&src.cri)
        .await
        .map_err(|e| tracing::warn!(error = %e, "cannot read container usage"))
        .unwrap_or_default();
    let (tree, system) = src.pod_cgroups(true).await;
    let mut s = summary::build(&summary::Inputs {
        node_name: &src.node_name,
        now_ns: now_ns(),
        node: node.as_ref(),
        boot_ns: summary::boot_time_ns(),
        node_fs: None,
        node_network: None,
        image_fs: None,
        rlimit: None,
        containers: &containers,
        sandboxes: &[],
        ephemeral: &BTreeMap::new(),
        pod_cgroups: &tree.pods,
        system_containers: &system,
    });
    summary::cpu_and_memory_only(&mut s);
    s
}

/// [`summary`] (or with `only_cpu_and_memory`, [`summary_cpu_and_memory`]) as the endpoint's
/// JSON body.
pub async fn summary_json(src: &StatsSource, only_cpu_and_memory: bool) -> Vec<u8> {
    let s = if only_cpu_and_memory {
        summary_cpu_and_memory(src).await
    } else {
        summary(src).await
    };
    serde_json::to_vec(&s).unwrap_or_default()
}

/// `/metrics/resource`: node, pod and container usage now, in the Prometheus text format.
pub async fn resource_metrics(src: &StatsSource) -> Vec<u8> {
    let cri = &src.cri;
    let node = match node_usage() {
        Ok(n) => Some(n),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read node usage");
            None
        }
    };
    let (containers, err) = match container_usage(cri).await {
        Ok(c) => (c, false),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read container usage");
            (Vec::new(), true)
        }
    };
    let (tree, _) = src.pod_cgroups(false).await;
    let mut buf = Vec::new();
    let families = resource_families(node.as_ref(), &containers, &tree.pods, err);
    // Encoding into a Vec cannot fail on I/O.
    let _ = prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &families, &mut buf);
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_families_in_upstream_shape() {
        let c = |name: &str, pod: &str, cpu: u64, mem: u64| ContainerUsage {
            name: name.into(),
            pod: pod.into(),
            namespace: "default".into(),
            pod_uid: format!("uid-{pod}"),
            timestamp_ns: 1_700_000_000_123_000_000,
            cpu_core_nanoseconds: Some(cpu),
            cpu_nano_cores: None,
            memory_working_set_bytes: Some(mem),
            started_ns: 1_699_999_999_000_000_000,
            ..Default::default()
        };
        let node = NodeUsage {
            timestamp_ns: 1_700_000_000_000_000_000,
            cpu_core_nanoseconds: 5_500_000_000,
            memory_working_set_bytes: 1024,
            memory_capacity_bytes: None,
        };
        let fams = resource_families(
            Some(&node),
            &[
                c("a", "p", 1_500_000_000, 100),
                c("b", "p", 500_000_000, 50),
            ],
            &Default::default(),
            false,
        );
        let mut buf = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &fams, &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        for want in [
            "container_cpu_usage_seconds_total{container=\"a\",namespace=\"default\",pod=\"p\"} 1.5 1700000000123",
            "container_memory_working_set_bytes{container=\"b\",namespace=\"default\",pod=\"p\"} 50 1700000000123",
            "node_cpu_usage_seconds_total 5.5 1700000000000",
            "node_memory_working_set_bytes 1024 1700000000000",
            "pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"p\"} 2 1700000000123",
            "pod_memory_working_set_bytes{namespace=\"default\",pod=\"p\"} 150 1700000000123",
            "container_start_time_seconds{container=\"a\",namespace=\"default\",pod=\"p\"} 1699999999 1700000000123",
            "resource_scrape_error 0",
            "\nscrape_error 0",
            "# TYPE container_cpu_usage_seconds_total counter",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }

    #[test]
    fn pod_resource_figures_from_the_pod_cgroup() {
        let c = |name: &str, uid: &str| ContainerUsage {
            name: name.into(),
            pod: format!("pod-{uid}"),
            namespace: "ns".into(),
            pod_uid: uid.into(),
            timestamp_ns: 1_700_000_000_000_000_000,
            cpu_core_nanoseconds: Some(1_000_000_000),
            memory_working_set_bytes: Some(100),
            ..Default::default()
        };
        let sample = cgroup::Sample {
            id: "/kubepods/poda".into(),
            at_ns: 1_700_000_001_000_000_000,
            usage: cgroups::Usage {
                cpu_usage_ns: 3_000_000_000,
                memory_working_set_bytes: 250,
                ..Default::default()
            },
            nano_cores: None,
        };
        let cgroups = [("a".to_string(), sample)].into();
        let fams = resource_families(
            None,
            &[c("x", "a"), c("y", "a"), c("z", "b")],
            &cgroups,
            false,
        );
        let mut buf = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &fams, &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        for want in [
            // Pod a has a pod cgroup: its figures, at its time.
            "pod_cpu_usage_seconds_total{namespace=\"ns\",pod=\"pod-a\"} 3 1700000001000",
            "pod_memory_working_set_bytes{namespace=\"ns\",pod=\"pod-a\"} 250 1700000001000",
            // Pod b has none: the sum of its containers.
            "pod_memory_working_set_bytes{namespace=\"ns\",pod=\"pod-b\"} 100 1700000000000",
            // Containers keep their own.
            "container_memory_working_set_bytes{container=\"x\",namespace=\"ns\",pod=\"pod-a\"} 100",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }
}
