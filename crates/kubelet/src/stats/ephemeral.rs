//! Pods' ephemeral storage (upstream's `fsResourceAnalyzer` plus `calcEphemeralStorage`): what
//! their volumes, containers' writable layers and logs use on the node's disk. The Summary API and
//! the eviction manager to come read it through one cheap cloneable [`EphemeralStorage`] handle.
//!
//! Walking directories is costly, so each tree's measure is kept for [`DEFAULT_PERIOD`] and only
//! walked again once it is older (upstream re-runs its `du` on a period too); callers are the stats
//! endpoints and housekeeping, never the SyncLoop. The walks run on the blocking pool.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rkubelet_cri::{api, CriClient};

use super::fs::{disk_usage, fs_info, is_tmpfs, DiskUsage, FsInfo};
use crate::runtime::labels;
use crate::volumes::config_map::CONFIG_MAP_PLUGIN;
use crate::volumes::EMPTY_DIR_PLUGIN;

/// How long one walk's figure is served before the tree is walked again.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(10);

/// The pod being measured.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// One volume directory's usage, with the filesystem holding it.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeUsage {
    /// The volume's name in the pod spec (its directory's name).
    pub name: String,
    /// Upstream's plugin directory name, e.g. `kubernetes.io~empty-dir`.
    pub plugin: String,
    pub usage: DiskUsage,
    pub fs: Option<FsInfo>,
    /// Counted in the pod's ephemeral storage: an emptyDir on disk or a configMap (upstream
    /// `IsLocalEphemeralVolume`); memory-backed emptyDirs, secrets and projected volumes are not.
    pub ephemeral: bool,
    /// When the figure was measured.
    pub measured: SystemTime,
}

/// A pod's ephemeral storage, by part.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodEphemeral {
    pub volumes: Vec<VolumeUsage>,
    /// The ephemeral volumes' sum (emptyDir on disk and configMap).
    pub volumes_ephemeral: DiskUsage,
    /// Containers' writable layers (from the runtime), by container name.
    pub writable_layers: BTreeMap<String, DiskUsage>,
    /// Containers' log directories, by container name.
    pub logs: BTreeMap<String, DiskUsage>,
    /// The pod's whole log directory (its containers' and any pod-level files).
    pub pod_logs: DiskUsage,
    /// The pod's `/etc/hosts` file, which upstream counts too.
    pub etc_hosts: DiskUsage,
    /// Everything above that counts: writable layers, pod logs, ephemeral volumes, etc-hosts.
    pub total: DiskUsage,
    /// The filesystem holding the pod logs (upstream reports log capacity from the root fs).
    pub logs_fs: Option<FsInfo>,
    /// When the oldest of the walked figures was measured.
    pub measured: Option<SystemTime>,
}

#[derive(Clone, Copy)]
struct Cached {
    at: Instant,
    wall: SystemTime,
    usage: Option<DiskUsage>,
}

struct Inner {
    root_dir: PathBuf,
    pod_logs_dir: PathBuf,
    period: Duration,
    cache: Mutex<HashMap<PathBuf, Cached>>,
}

/// The handle; clones share one cache.
#[derive(Clone)]
pub struct EphemeralStorage {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EphemeralStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EphemeralStorage")
            .field("root_dir", &self.inner.root_dir)
            .field("pod_logs_dir", &self.inner.pod_logs_dir)
            .field("period", &self.inner.period)
            .finish()
    }
}

impl EphemeralStorage {
    /// Pods' directories are under `<root_dir>/pods`, their logs under `pod_logs_dir`.
    pub fn new(root_dir: PathBuf, pod_logs_dir: PathBuf, period: Duration) -> Self {
        EphemeralStorage {
            inner: Arc::new(Inner {
                root_dir,
                pod_logs_dir,
                period,
                cache: Mutex::new(HashMap::new()),
            }),
        }
    }

    fn pod_dir(&self, pod: &PodKey) -> PathBuf {
        self.inner.root_dir.join("pods").join(&pod.uid)
    }

    /// Upstream `BuildPodLogsDirectory`.
    pub fn pod_logs_dir(&self, pod: &PodKey) -> PathBuf {
        self.inner
            .pod_logs_dir
            .join(format!("{}_{}_{}", pod.namespace, pod.name, pod.uid))
    }

    /// The pod's usage, with its containers' writable layers asked of the runtime (for callers
    /// that have no container stats at hand, such as an eviction manager).
    pub async fn pod_usage(
        &self,
        cri: &CriClient,
        pod: &PodKey,
    ) -> Result<PodEphemeral, rkubelet_cri::CriError> {
        let stats = cri
            .list_container_stats(api::ListContainerStatsRequest {
                filter: Some(api::ContainerStatsFilter {
                    label_selector: [(labels::POD_UID.to_string(), pod.uid.clone())].into(),
                    ..Default::default()
                }),
            })
            .await?
            .stats;
        let layers = stats
            .iter()
            .filter_map(|s| {
                let a = s.attributes.as_ref()?;
                let name = a.labels.get(labels::CONTAINER_NAME)?.clone();
                Some((name, writable_layer(s)?))
            })
            .collect();
        Ok(self.measure(pod, layers).await)
    }

    /// The pod's usage given its containers' writable layers (the Summary API has them from its
    /// own `ListContainerStats`). Trees measured less than a period ago are not walked again.
    pub async fn measure(
        &self,
        pod: &PodKey,
        writable_layers: BTreeMap<String, DiskUsage>,
    ) -> PodEphemeral {
        let pod_dir = self.pod_dir(pod);
        let logs_dir = self.pod_logs_dir(pod);
        let this = self.clone();
        let containers: Vec<String> = writable_layers.keys().cloned().collect();
        let measured = tokio::task::spawn_blocking(move || {
            this.measure_blocking(&pod_dir, &logs_dir, &containers)
        })
        .await;
        let mut out = measured.unwrap_or_else(|e| {
            tracing::warn!(error = %e, pod = %pod.name, "measuring ephemeral storage panicked");
            PodEphemeral::default()
        });
        let layers: DiskUsage = writable_layers
            .values()
            .fold(DiskUsage::default(), |a, b| a + *b);
        out.writable_layers = writable_layers;
        out.total = layers + out.pod_logs + out.volumes_ephemeral + out.etc_hosts;
        out
    }

    /// A tree's usage, from the cache while fresh. `None` when it does not exist (yet).
    fn cached(&self, path: &Path, oldest: &mut Option<SystemTime>) -> Option<DiskUsage> {
        let now = Instant::now();
        let hit = self
            .inner
            .cache
            .lock()
            .ok()
            .and_then(|c| c.get(path).copied())
            .filter(|c| now.duration_since(c.at) < self.inner.period);
        let c = hit.unwrap_or_else(|| {
            let c = Cached {
                at: now,
                wall: SystemTime::now(),
                usage: disk_usage(path).ok(),
            };
            if let Ok(mut cache) = self.inner.cache.lock() {
                cache.insert(path.to_path_buf(), c);
            }
            c
        });
        if c.usage.is_some() {
            *oldest = Some(oldest.map_or(c.wall, |o| o.min(c.wall)));
        }
        c.usage
    }

    fn measure_blocking(
        &self,
        pod_dir: &Path,
        logs_dir: &Path,
        containers: &[String],
    ) -> PodEphemeral {
        let mut out = PodEphemeral::default();
        let mut oldest = None;
        for (plugin, name, path) in volume_dirs(pod_dir) {
            let Some(usage) = self.cached(&path, &mut oldest) else {
                continue;
            };
            let ephemeral =
                plugin == CONFIG_MAP_PLUGIN || (plugin == EMPTY_DIR_PLUGIN && !is_tmpfs(&path));
            if ephemeral {
                out.volumes_ephemeral = out.volumes_ephemeral + usage;
            }
            out.volumes.push(VolumeUsage {
                name,
                plugin,
                usage,
                fs: fs_info(&path).ok(),
                ephemeral,
                measured: SystemTime::now(),
            });
        }
        for c in containers {
            if let Some(u) = self.cached(&logs_dir.join(c), &mut oldest) {
                out.logs.insert(c.clone(), u);
            }
        }
        out.pod_logs = self.cached(logs_dir, &mut oldest).unwrap_or_default();
        out.etc_hosts = self
            .cached(&crate::hosts::etc_hosts_path(pod_dir), &mut oldest)
            .unwrap_or_default();
        out.logs_fs = fs_info(&self.inner.pod_logs_dir).ok();
        out.measured = oldest;
        self.forget_stale();
        out
    }

    /// Drops figures of trees nobody asked about for a while (deleted pods).
    fn forget_stale(&self) {
        let keep = self.inner.period * 6;
        if let Ok(mut cache) = self.inner.cache.lock() {
            cache.retain(|_, c| c.at.elapsed() < keep);
        }
    }
}

/// A container's writable layer as the runtime reports it.
pub fn writable_layer(s: &api::ContainerStats) -> Option<DiskUsage> {
    let w = s.writable_layer.as_ref()?;
    Some(DiskUsage {
        bytes: w.used_bytes.as_ref()?.value,
        inodes: w.inodes_used.as_ref().map_or(0, |v| v.value),
    })
}

/// `(plugin, volume name, path)` of each volume directory under `<pod_dir>/volumes`, sorted.
fn volume_dirs(pod_dir: &Path) -> Vec<(String, String, PathBuf)> {
    let mut out = Vec::new();
    let Ok(plugins) = std::fs::read_dir(pod_dir.join("volumes")) else {
        return out;
    };
    for p in plugins.flatten() {
        let plugin = p.file_name().to_string_lossy().into_owned();
        let Ok(vols) = std::fs::read_dir(p.path()) else {
            continue;
        };
        for v in vols.flatten() {
            let name = v.file_name().to_string_lossy().into_owned();
            out.push((plugin.clone(), name, v.path()));
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, bytes: usize) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, vec![1u8; bytes]).unwrap();
    }

    #[tokio::test]
    async fn pod_usage_sums_the_parts_and_is_cached_for_a_period() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let logs = tmp.path().join("logs");
        let pod = PodKey {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u1".into(),
        };
        let pod_dir = root.join("pods/u1");
        write(
            &pod_dir.join("volumes/kubernetes.io~empty-dir/scratch/a"),
            1 << 20,
        );
        write(&pod_dir.join("volumes/kubernetes.io~configmap/cfg/k"), 10);
        write(&pod_dir.join("volumes/kubernetes.io~secret/s/k"), 4096 * 4);
        write(&pod_dir.join("etc-hosts"), 100);
        write(&logs.join("ns_p_u1/main/0.log"), 8192);
        std::fs::create_dir_all(&logs).unwrap();
        let store = EphemeralStorage::new(root.clone(), logs.clone(), Duration::from_millis(300));
        let layer = DiskUsage {
            bytes: 1000,
            inodes: 3,
        };
        let m = store
            .measure(&pod, [("main".to_string(), layer)].into())
            .await;
        let names: Vec<_> = m
            .volumes
            .iter()
            .map(|v| (v.name.as_str(), v.ephemeral))
            .collect();
        assert_eq!(names, [("cfg", true), ("scratch", true), ("s", false)]);
        assert!(m.volumes_ephemeral.bytes >= 1 << 20, "{m:?}");
        assert!(m.logs["main"].bytes >= 8192, "{m:?}");
        assert!(m.pod_logs.bytes >= m.logs["main"].bytes);
        assert!(m.etc_hosts.bytes > 0);
        assert_eq!(
            m.total,
            layer + m.pod_logs + m.volumes_ephemeral + m.etc_hosts
        );
        assert!(m.logs_fs.is_some() && m.measured.is_some());

        // Written now, seen only once the period is over.
        write(
            &pod_dir.join("volumes/kubernetes.io~empty-dir/scratch/b"),
            2 << 20,
        );
        let again = store.measure(&pod, BTreeMap::new()).await;
        assert_eq!(again.volumes_ephemeral, m.volumes_ephemeral);
        tokio::time::sleep(Duration::from_millis(350)).await;
        let later = store.measure(&pod, BTreeMap::new()).await;
        assert!(
            later.volumes_ephemeral.bytes >= m.volumes_ephemeral.bytes + (2 << 20),
            "{m:?} -> {later:?}"
        );
        // No writable layers asked: none counted.
        assert_eq!(
            later.total,
            later.pod_logs + later.volumes_ephemeral + later.etc_hosts
        );

        // A pod without directories measures as nothing.
        let none = store
            .measure(
                &PodKey {
                    uid: "gone".into(),
                    ..pod.clone()
                },
                BTreeMap::new(),
            )
            .await;
        assert_eq!(none.total, DiskUsage::default());
        assert!(none.volumes.is_empty());
    }
}
