//! Usage read straight from the node's cgroups, where upstream's kubelet asks cAdvisor: the pod
//! cgroups (`kubepods[/qos]/pod<uid>`, upstream `cadvisor_stats_provider.go` /
//! `cri_stats_provider.go` `addPodCPUMemoryStats` take a pod's CPU and memory from it), the
//! containers' cgroups below them and the QoS tiers (what `/metrics/cadvisor` exports), and the
//! system containers of the Summary API (`summary_sys_containers.go`: `kubelet`, `runtime`,
//! `pods`).
//!
//! One pass per request: three directory listings find every pod cgroup, one more per pod its
//! containers (only for `/metrics/cadvisor`), then one usage read per cgroup. The CPU rate
//! (`usageNanoCores`) is computed against the previous reading of the same cgroup, as cAdvisor
//! computes it between its housekeeping samples; that is the only state kept.
//!
//! The manager here always spells paths as cgroupfs does: the pod names are turned into the
//! literal the runtime was given (the systemd driver's `.slice` names included), so one reader
//! serves both drivers and also reads cgroups the kubelet does not own (its own, the runtime's).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cgroups::{CgroupManager, CgroupName, Usage, Version};

use crate::cm::names::{self, PodCgroupNames};

/// One reading of one cgroup.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// The cgroupfs path (cAdvisor's container name, the `id` label): `/kubepods/burstable/pod<uid>`.
    pub id: String,
    /// Unix nanoseconds of the reading.
    pub at_ns: i64,
    pub usage: Usage,
    /// CPU rate since the previous reading of this cgroup, when there was one.
    pub nano_cores: Option<u64>,
}

/// A container's cgroup below its pod's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerSample {
    pub pod_uid: String,
    /// The runtime's container (or sandbox) ID, from the directory name.
    pub container_id: String,
    pub sample: Sample,
}

/// The pod side of the cgroup tree at one time.
#[derive(Debug, Clone, Default)]
pub struct PodTree {
    /// `kubepods` itself (the `pods` system container).
    pub kubepods: Option<Sample>,
    /// `kubepods/burstable` and `kubepods/besteffort`.
    pub tiers: Vec<Sample>,
    /// Pod cgroups by pod UID.
    pub pods: HashMap<String, Sample>,
    /// Containers' cgroups (only when asked for).
    pub containers: Vec<ContainerSample>,
}

/// A system container of the Summary API.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemSample {
    /// `kubelet`, `runtime` or `pods` (upstream `statsapi.SystemContainer*`).
    pub name: &'static str,
    pub start_ns: Option<i64>,
    pub sample: Sample,
}

/// Where the stats look in the cgroup tree; a cheap handle.
#[derive(Clone, Debug)]
pub struct CgroupStats {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Reads cgroupfs-spelled names.
    mgr: Arc<dyn CgroupManager>,
    /// None without `cgroupsPerQOS`: there are no pod cgroups to read.
    pods: Option<PodCgroupNames>,
    /// `--runtime-cgroups`; empty: the cgroup of the process serving the CRI socket.
    runtime_cgroups: String,
    runtime_socket: Option<PathBuf>,
    /// This process's start (upstream `kubeletCreationTime`).
    started_ns: i64,
    /// The previous CPU reading per cgroup path.
    rates: Mutex<HashMap<String, CpuReading>>,
}

/// A cgroup's CPU reading: (at ns, cumulative cpu ns, the rate computed then).
type CpuReading = (i64, u64, Option<u64>);

/// What [`CgroupStats`] is made from.
pub struct Setup {
    /// A manager of the cgroupfs driver (paths as they are on disk).
    pub mgr: Arc<dyn CgroupManager>,
    pub pods: Option<PodCgroupNames>,
    pub runtime_cgroups: String,
    /// `--container-runtime-endpoint`.
    pub runtime_endpoint: String,
}

impl CgroupStats {
    pub fn new(s: Setup) -> Self {
        let runtime_socket = s
            .runtime_endpoint
            .strip_prefix("unix://")
            .map(PathBuf::from);
        CgroupStats {
            inner: Arc::new(Inner {
                mgr: s.mgr,
                pods: s.pods,
                runtime_cgroups: s.runtime_cgroups,
                runtime_socket,
                started_ns: super::now_ns(),
                rates: Mutex::new(HashMap::new()),
            }),
        }
    }

    pub fn version(&self) -> Version {
        self.inner.mgr.version()
    }

    /// Whether pods have cgroups of their own to read.
    pub fn has_pod_cgroups(&self) -> bool {
        self.inner.pods.is_some()
    }

    /// Reads `path` (a cgroupfs path); `rate` also computes its CPU rate. None when it is gone.
    pub fn read(&self, path: &str, rate: bool) -> Option<Sample> {
        let name = CgroupName::from_cgroupfs(path);
        let usage = match self.inner.mgr.usage(&name) {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(cgroup = %path, error = %e, "cannot read cgroup usage");
                return None;
            }
        };
        let at_ns = super::now_ns();
        let nano_cores = if rate {
            self.rate(path, at_ns, usage.cpu_usage_ns)
        } else {
            None
        };
        Some(Sample {
            id: name.to_cgroupfs(),
            at_ns,
            usage,
            nano_cores,
        })
    }

    /// The CPU rate against the previous reading at least a second old (a closer one is noise:
    /// its rate is reported again until then).
    fn rate(&self, key: &str, at_ns: i64, cpu_ns: u64) -> Option<u64> {
        let mut rates = self.inner.rates.lock().unwrap_or_else(|e| e.into_inner());
        match rates.get_mut(key) {
            Some(prev) if at_ns - prev.0 < 1_000_000_000 => prev.2,
            Some(prev) => {
                let rate = cpu_rate(prev.0, prev.1, at_ns, cpu_ns);
                *prev = (at_ns, cpu_ns, rate);
                rate
            }
            None => {
                rates.insert(key.to_string(), (at_ns, cpu_ns, None));
                None
            }
        }
    }

    /// Forgets the rates of the pod cgroups below `kubepods` that were not read in the last pass
    /// (the pods are gone).
    fn prune(&self, kubepods: &str, seen: &[&str]) {
        let prefix = format!("{}/", kubepods.trim_end_matches('/'));
        let seen: std::collections::HashSet<&str> = seen.iter().copied().collect();
        let mut rates = self.inner.rates.lock().unwrap_or_else(|e| e.into_inner());
        rates.retain(|k, _| !k.starts_with(&prefix) || seen.contains(k.as_str()));
    }

    /// One pass over kubepods: the tiers, every pod cgroup and, with `containers`, the
    /// containers' cgroups. Empty without pod cgroups. Blocking.
    pub fn pod_tree(&self, containers: bool) -> PodTree {
        let mut tree = PodTree::default();
        let Some(names) = &self.inner.pods else {
            return tree;
        };
        let mgr = &self.inner.mgr;
        let literal = |n: &CgroupName| CgroupName::from_cgroupfs(&names.literal(n));
        let kubepods = literal(&names.kubepods);
        tree.kubepods = self.read(&kubepods.to_cgroupfs(), true);
        let tiers = [
            kubepods.clone(),
            literal(&names.qos(crate::resources::QosClass::Burstable)),
            literal(&names.qos(crate::resources::QosClass::BestEffort)),
        ];
        for (i, tier) in tiers.iter().enumerate() {
            if i > 0 {
                tree.tiers.extend(self.read(&tier.to_cgroupfs(), false));
            }
            let Ok(children) = mgr.children(tier) else {
                continue;
            };
            for child in children {
                let Some(uid) = names::pod_uid_of(&child, names.driver) else {
                    continue;
                };
                let pod = tier.child(child);
                let Some(sample) = self.read(&pod.to_cgroupfs(), true) else {
                    continue;
                };
                if containers {
                    for c in mgr.children(&pod).unwrap_or_default() {
                        let path = pod.child(c.as_str()).to_cgroupfs();
                        if let Some(s) = self.read(&path, false) {
                            tree.containers.push(ContainerSample {
                                pod_uid: uid.clone(),
                                container_id: container_id_of(&c).to_string(),
                                sample: s,
                            });
                        }
                    }
                }
                tree.pods.insert(uid, sample);
            }
        }
        let seen: Vec<&str> = tree.pods.values().map(|s| s.id.as_str()).collect();
        self.prune(&kubepods.to_cgroupfs(), &seen);
        tree
    }

    /// The cgroups of the kubelet and of the runtime (upstream `NodeConfig.KubeletCgroupsName`,
    /// `RuntimeCgroupsName`): this process's, and `--runtime-cgroups` or the cgroup of the
    /// process serving the CRI socket.
    fn system_paths(&self) -> Vec<(&'static str, String)> {
        let version = self.version();
        let mut out = Vec::new();
        if let Some(p) = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|t| cgroup_of(&t, version))
        {
            out.push(("kubelet", p));
        }
        let runtime = if self.inner.runtime_cgroups.is_empty() {
            self.inner
                .runtime_socket
                .as_deref()
                .and_then(peer_pid)
                .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok())
                .and_then(|t| cgroup_of(&t, version))
        } else {
            Some(self.inner.runtime_cgroups.clone())
        };
        out.extend(runtime.map(|p| ("runtime", p)));
        out
    }

    /// The Summary API's system containers: `kubelet`, `runtime` and (with pod cgroups)
    /// `pods`, the latter from `tree`. Blocking.
    pub fn system_containers(&self, tree: &PodTree) -> Vec<SystemSample> {
        let mut out = Vec::new();
        for (name, path) in self.system_paths() {
            let Some(sample) = self.read(&path, true) else {
                continue;
            };
            let start_ns = if name == "kubelet" {
                Some(self.inner.started_ns)
            } else {
                self.created_ns(&path)
            };
            out.push(SystemSample {
                name,
                start_ns,
                sample,
            });
        }
        if let Some(k) = &tree.kubepods {
            out.push(SystemSample {
                name: "pods",
                start_ns: self.created_ns(&k.id),
                sample: k.clone(),
            });
        }
        out
    }

    /// The processes in `path` and below it (none when it is gone), as one hierarchy sees them
    /// ([`cgroups::CgroupManager::pids_for_stats`]). Blocking.
    pub fn pids(&self, path: &str) -> Vec<i32> {
        self.inner
            .mgr
            .pids_for_stats(&CgroupName::from_cgroupfs(path))
            .unwrap_or_default()
    }

    fn created_ns(&self, path: &str) -> Option<i64> {
        let t = self.inner.mgr.created(&CgroupName::from_cgroupfs(path))?;
        let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
        i64::try_from(d.as_nanos()).ok()
    }
}

/// Nanocores between two cumulative CPU readings; None when time did not move forward or the
/// counter went back (a cgroup made again under the same name).
pub fn cpu_rate(t0_ns: i64, cpu0_ns: u64, t1_ns: i64, cpu1_ns: u64) -> Option<u64> {
    let dt = u64::try_from(t1_ns.checked_sub(t0_ns)?)
        .ok()
        .filter(|d| *d > 0)?;
    let used = cpu1_ns.checked_sub(cpu0_ns)?;
    Some((u128::from(used) * 1_000_000_000 / u128::from(dt)) as u64)
}

/// The container ID in a container cgroup's directory name: `<id>` (cgroupfs) or
/// `cri-containerd-<id>.scope` (systemd; other runtimes' `<prefix>-<id>.scope` likewise).
pub fn container_id_of(dir: &str) -> &str {
    match dir.strip_suffix(".scope") {
        Some(s) => s.rsplit('-').next().unwrap_or(s),
        None => dir,
    }
}

/// A process's cgroup from `/proc/<pid>/cgroup`, as upstream's `getContainer` (container
/// manager) finds the kubelet's and the runtime's: on v2 the `0::` line's path; on v1 the cpu
/// and memory paths must be the same (it is used for accounting), and then the `name=systemd`
/// path is taken where that hierarchy exists, else the cpu one.
pub fn cgroup_of(text: &str, version: Version) -> Option<String> {
    let mut paths: HashMap<&str, &str> = HashMap::new();
    for l in text.lines() {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        if controllers.is_empty() {
            paths.insert("", path);
        }
        for c in controllers.split(',').filter(|c| !c.is_empty()) {
            paths.insert(c, path);
        }
    }
    match version {
        Version::V2 => paths.get("").map(|p| p.to_string()),
        Version::V1 => {
            let (cpu, memory) = (paths.get("cpu")?, paths.get("memory")?);
            if cpu != memory {
                tracing::debug!(cpu, memory, "cpu and memory cgroup hierarchy not unified");
                return None;
            }
            Some(paths.get("name=systemd").unwrap_or(cpu).to_string())
        }
    }
}

/// The pid of the process listening on a unix socket (SO_PEERCRED of a connection to it).
fn peer_pid(socket: &std::path::Path) -> Option<i32> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let s = std::os::unix::net::UnixStream::connect(socket).ok()?;
    let cred = getsockopt(&s, PeerCredentials).ok()?;
    Some(cred.pid()).filter(|p| *p > 0)
}

#[cfg(test)]
#[path = "cgroup_tests.rs"]
mod tests;
