//! The container manager (upstream `pkg/kubelet/cm`): the node's pod cgroups. At start it refuses
//! swap (`failSwapOn`), limits `<cgroupRoot>/kubepods` to node allocatable and creates the QoS
//! tiers (`burstable`, `besteffort`); each pod gets `pod<uid>` under its tier before its sandbox
//! starts (the sandbox's cgroup parent), the burstable tier's cpu shares follow its pods, a
//! stopped pod's cpu shares drop to the minimum, and its cgroup goes with the pod.
//! Housekeeping removes pod cgroups no pod owns any more, killing what still runs in them.
//!
//! A cheap handle: the cgroup manager does the file I/O (on the blocking pool), the only state
//! kept here is the last burstable share value written. With `cgroupsPerQOS: false` every
//! operation is a no-op and sandboxes get no cgroup parent, as upstream.

mod admit;
pub mod allocatable;
pub mod cpu;
pub mod devices;
pub mod kernel_tunables;
pub mod names;
pub mod resources;
pub mod topology;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cgroups::{CgroupManager, CgroupName, ResourceConfig};
use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_config::config::cgroups::{
    CgroupConfig, ENFORCE_KUBE_RESERVED, ENFORCE_SYSTEM_RESERVED,
};
use tracing::{debug, info, warn};

use crate::podutil;
use crate::resources::{pod_qos, QosClass};
pub use admit::AdmitError;
pub use allocatable::{AllocatableError, Amounts};
pub use names::PodCgroupNames;
pub use resources::PodCgroupPolicy;

/// Errors of the container manager; start-up ones stop the kubelet, as upstream's
/// `Failed to start ContainerManager`.
#[derive(Debug, thiserror::Error)]
pub enum CmError {
    /// Upstream's message, word for word.
    #[error("running with swap on is not supported, please disable swap! or set --fail-swap-on flag to false. /proc/swaps contained: {0:?}")]
    SwapOn(Vec<String>),
    #[error("reading /proc/swaps: {0}")]
    Swaps(#[source] std::io::Error),
    #[error(transparent)]
    KernelTunables(#[from] kernel_tunables::TunablesError),
    #[error(transparent)]
    Allocatable(#[from] AllocatableError),
    #[error("cgroup {name}: {source}")]
    Cgroup {
        name: String,
        #[source]
        source: cgroups::Error,
    },
    /// Upstream `enforceExistingCgroup`.
    #[error("failed to enforce {what} cgroup limits on {cgroup:?}: {message}")]
    Enforce {
        what: &'static str,
        cgroup: String,
        message: String,
    },
    #[error("container manager: blocking task failed: {0}")]
    Join(String),
}

/// Upstream `validateSwapDisabled`/the `failSwapOn` check of `NewContainerManager`.
pub fn check_swap(cfg: &CgroupConfig) -> Result<(), CmError> {
    if !cfg.fail_swap_on {
        return Ok(());
    }
    let text = match std::fs::read_to_string("/proc/swaps") {
        Ok(t) => t,
        // No /proc/swaps: a kernel without swap support.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(CmError::Swaps(e)),
    };
    let lines = allocatable::active_swap(&text);
    if lines.is_empty() {
        Ok(())
    } else {
        Err(CmError::SwapOn(lines))
    }
}

/// Upstream `setupKernelTunables` as `setupNode` calls it: with `protectKernelDefaults` a
/// differing value stops the start, without it the value is set. Runs whatever the cgroup
/// settings, before the QoS cgroups, as upstream.
pub async fn setup_kernel_tunables(
    proc_sys: PathBuf,
    protect_kernel_defaults: bool,
) -> Result<(), CmError> {
    let behavior = kernel_tunables::Behavior::from_protect(protect_kernel_defaults);
    // `setup` logs each value it writes (upstream's "Updating kernel flag").
    blocking(move || Ok(kernel_tunables::setup(&proc_sys, behavior)?)).await?;
    Ok(())
}

/// The cheap handle every pod worker and the SyncLoop share.
#[derive(Clone, Debug)]
pub struct ContainerManager {
    inner: Arc<Inner>,
    /// The device manager (upstream `containerManagerImpl.deviceManager`); None in tests that
    /// run without one.
    devices: Option<devices::DeviceHandle>,
    /// The CPU manager with the `static` policy (upstream `containerManagerImpl.cpuManager`);
    /// None with `none`.
    cpu: Option<cpu::CpuHandle>,
    /// The topology manager's policy and scope and the machine's NUMA nodes.
    topology: admit::TopologySettings,
}

#[derive(Debug)]
struct Inner {
    /// None with `cgroupsPerQOS: false`.
    cgroups: Option<Arc<dyn CgroupManager>>,
    names: PodCgroupNames,
    policy: PodCgroupPolicy,
    /// The machine's memory, for containers' OOM score adjustment.
    memory_capacity: u64,
    /// `<root-dir>/pods`: a pod cgroup whose pod directory remains is not an orphan yet.
    pods_root: PathBuf,
    /// The burstable tier's shares as last written (None before the first update).
    burstable_shares: Mutex<Option<u64>>,
}

fn cg_err(name: &CgroupName) -> impl FnOnce(cgroups::Error) -> CmError + '_ {
    move |source| CmError::Cgroup {
        name: name.to_cgroupfs(),
        source,
    }
}

/// Runs blocking cgroup file I/O off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CmError> + Send + 'static,
) -> Result<T, CmError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CmError::Join(e.to_string()))?
}

/// What the container manager is built from.
pub struct Setup<'a> {
    pub cfg: &'a CgroupConfig,
    /// None when `cgroupsPerQOS` is off.
    pub cgroups: Option<Arc<dyn CgroupManager>>,
    /// Capacity with `pid` (upstream `internalCapacity`), for the kubepods limits.
    pub internal_capacity: &'a Amounts,
    pub memory_capacity: u64,
    pub root_dir: PathBuf,
}

impl ContainerManager {
    /// Upstream `containerManagerImpl.Start` for the cgroups: node allocatable enforced on
    /// kubepods (and on the reserved cgroups when asked), then the QoS tiers. Existing cgroups
    /// are updated in place, so a restarted kubelet changes nothing its pods would notice.
    pub async fn start(s: Setup<'_>) -> Result<ContainerManager, CmError> {
        let cfg = s.cfg;
        let driver = s
            .cgroups
            .as_ref()
            .map(|c| c.driver())
            .unwrap_or(cgroups::Driver::Cgroupfs);
        let names = PodCgroupNames::new(&cfg.cgroup_root, driver);
        let hugepage_sizes = s
            .cgroups
            .as_ref()
            .map(|c| c.hugetlb_page_sizes())
            .unwrap_or_default();
        let policy = PodCgroupPolicy::from_config(cfg, hugepage_sizes.clone());
        if let Some(mgr) = s.cgroups.clone() {
            let limits = allocatable::kubepods_limits(cfg, s.internal_capacity)?;
            let kubepods = resources::kubepods_config(&limits, &hugepage_sizes);
            let reserved = reserved_enforcement(cfg)?;
            let tiers = names.clone();
            let sizes = hugepage_sizes.clone();
            blocking(move || {
                let names = tiers;
                mgr.create(&names.kubepods, &kubepods)
                    .map_err(cg_err(&names.kubepods))?;
                for (what, name, config) in reserved {
                    enforce_existing(mgr.as_ref(), what, &name, &config)?;
                }
                for (qos, shares) in [
                    (QosClass::Burstable, None),
                    (QosClass::BestEffort, Some(resources::MIN_SHARES)),
                ] {
                    let tier = names.qos(qos);
                    let mut config = ResourceConfig {
                        cpu_shares: shares,
                        ..ResourceConfig::default()
                    };
                    for size in &sizes {
                        config
                            .hugetlb_limits
                            .insert(*size, resources::HUGEPAGES_UNBOUNDED);
                    }
                    mgr.create(&tier, &config).map_err(cg_err(&tier))?;
                }
                Ok(())
            })
            .await?;
            info!(kubepods = %names.literal(&names.kubepods), memory = ?limits.get("memory"), "pod cgroups ready: node allocatable enforced on kubepods");
        }
        Ok(ContainerManager {
            devices: None,
            cpu: None,
            topology: Default::default(),
            inner: Arc::new(Inner {
                cgroups: s.cgroups,
                names,
                policy,
                memory_capacity: s.memory_capacity,
                pods_root: s.root_dir.join("pods"),
                burstable_shares: Mutex::new(None),
            }),
        })
    }

    /// With the device manager, whose allocations admission and container starts consult.
    pub fn with_devices(mut self, devices: devices::DeviceHandle) -> ContainerManager {
        self.devices = Some(devices);
        self
    }

    pub fn devices(&self) -> Option<&devices::DeviceHandle> {
        self.devices.as_ref()
    }

    /// With the CPU manager (static policy) and the topology manager's settings.
    pub fn with_cpu(
        mut self,
        cpu: Option<cpu::CpuHandle>,
        policy: topology::Policy,
        scope: topology::Scope,
        numa_nodes: Vec<usize>,
        closest: Option<topology::NumaInfo>,
    ) -> ContainerManager {
        self.cpu = cpu;
        self.topology = admit::TopologySettings {
            policy,
            scope,
            numa_nodes,
            closest: closest.map(Arc::new),
        };
        self
    }

    pub fn cpu(&self) -> Option<&cpu::CpuHandle> {
        self.cpu.as_ref()
    }

    /// Upstream's resource allocation admit handler (the topology manager's `Admit` over the
    /// device and CPU managers): see [`admit::allocate`]. `active`: the UIDs of the pods
    /// admitted and still holding resources.
    pub async fn allocate_resources(
        &self,
        pod: &Arc<Pod>,
        active: HashSet<String>,
    ) -> Result<(), AdmitError> {
        admit::allocate(&self.providers(active), &self.topology, pod).await
    }

    /// Devices in use per device plugin resource (empty without a device manager).
    pub async fn allocated_devices(&self) -> std::collections::BTreeMap<String, i64> {
        match &self.devices {
            Some(d) => d.allocated_counts().await.unwrap_or_default(),
            None => Default::default(),
        }
    }

    /// Frees the devices and CPUs of a pod a later admit handler rejected.
    pub async fn release_resources(&self, uid: &str) {
        admit::release(&self.providers(HashSet::new()), uid).await
    }

    fn providers(&self, active: HashSet<String>) -> admit::Providers<'_> {
        admit::Providers {
            cpu: self.cpu.as_ref(),
            devices: self.devices.as_ref(),
            active,
        }
    }

    /// A manager that manages no cgroups (`cgroupsPerQOS: false`): containers still get the
    /// configured CFS settings and OOM scores, as upstream applies them without pod cgroups.
    pub fn disabled(cfg: &CgroupConfig, memory_capacity: u64) -> ContainerManager {
        ContainerManager {
            devices: None,
            cpu: None,
            topology: Default::default(),
            inner: Arc::new(Inner {
                cgroups: None,
                names: PodCgroupNames::new("", cgroups::Driver::Cgroupfs),
                policy: PodCgroupPolicy::from_config(cfg, Vec::new()),
                memory_capacity,
                pods_root: PathBuf::new(),
                burstable_shares: Mutex::new(None),
            }),
        }
    }

    pub fn enabled(&self) -> bool {
        self.inner.cgroups.is_some()
    }

    /// The sandbox's cgroup parent (upstream `GetPodCgroupParent`); empty without pod cgroups.
    pub fn cgroup_parent(&self, pod: &Pod) -> String {
        if self.enabled() {
            self.inner.names.literal(&self.inner.names.pod(pod))
        } else {
            String::new()
        }
    }

    /// The `kubepods` cgroup's memory working set and limit (upstream's `pods` system container
    /// the eviction manager's `allocatableMemory.available` is read from); None without pod
    /// cgroups or without a limit.
    pub async fn kubepods_memory(&self) -> Option<(u64, u64)> {
        let mgr = self.inner.cgroups.clone()?;
        let name = self.inner.names.kubepods.clone();
        let usage = blocking(move || mgr.usage(&name).map_err(cg_err(&name)))
            .await
            .ok()?;
        Some((usage.memory_working_set_bytes, usage.memory_limit_bytes?))
    }

    /// The `kubepods` cgroup's path in each hierarchy (cgroupfs layout for either driver);
    /// None without pod cgroups.
    pub fn kubepods_cgroup(&self) -> Option<String> {
        self.enabled()
            .then(|| self.inner.names.literal(&self.inner.names.kubepods))
    }

    /// The CFS settings containers get (`cpuCFSQuota`, the effective period).
    pub fn cfs(&self) -> (bool, u64) {
        (self.inner.policy.cfs_quota, self.inner.policy.cfs_period_us)
    }

    /// Upstream `GetContainerOOMScoreAdjust` against this machine's memory.
    pub fn oom_score_adj(&self, pod: &Pod, c: &Container) -> i64 {
        resources::oom_score_adj(pod, c, self.inner.memory_capacity)
    }

    /// Whether the pod's cgroup exists (always true without pod cgroups).
    pub async fn pod_exists(&self, pod: &Pod) -> bool {
        let Some(mgr) = self.inner.cgroups.clone() else {
            return true;
        };
        let name = self.inner.names.pod(pod);
        tokio::task::spawn_blocking(move || mgr.exists(&name))
            .await
            .unwrap_or(false)
    }

    /// Upstream `podContainerManagerImpl.EnsureExists`: creates the pod's cgroup with its
    /// resource config when missing; an existing one is left as it is (a restart changes nothing
    /// for running pods). A failed create removes what it made, so the retry starts whole (upstream
    /// leaves it, and its next EnsureExists skips the limits). Returns whether it was created now.
    pub async fn ensure_pod(&self, pod: &Pod) -> Result<bool, CmError> {
        let Some(mgr) = self.inner.cgroups.clone() else {
            return Ok(false);
        };
        let name = self.inner.names.pod(pod);
        let config = resources::resource_config_for_pod(pod, &self.inner.policy);
        let who = podutil::describe(pod);
        let created = blocking(move || {
            if mgr.exists(&name) {
                return Ok(false);
            }
            if let Err(e) = mgr.create(&name, &config) {
                // A create that failed half-way (the directory made, a limit not written) must
                // not stay: the next sync would find it existing and run the pod without its
                // limits. It holds no process yet (the sandbox comes after), so it goes, and the
                // retry creates it whole.
                if let Err(d) = mgr.destroy(&name) {
                    warn!(cgroup = ?name, error = %d, "cannot remove a half-made pod cgroup; its retry may run without limits");
                }
                return Err(cg_err(&name)(e));
            }
            Ok(true)
        })
        .await?;
        if created {
            debug!(pod = %who, cgroup = %self.cgroup_parent(pod), "pod cgroup created");
        }
        Ok(created)
    }

    /// Upstream `ReduceCPULimits`: a pod whose containers were stopped keeps only the minimum
    /// cpu shares until its cgroup is removed.
    pub async fn reduce_cpu_limits(&self, pod: &Pod) {
        let Some(mgr) = self.inner.cgroups.clone() else {
            return;
        };
        let name = self.inner.names.pod(pod);
        let config = ResourceConfig {
            cpu_shares: Some(resources::MIN_SHARES),
            ..ResourceConfig::default()
        };
        let res = blocking(move || {
            if mgr.exists(&name) {
                mgr.update(&name, &config).map_err(cg_err(&name))?;
            }
            Ok(())
        })
        .await;
        if let Err(e) = res {
            warn!(pod = %podutil::describe(pod), error = %e, "cannot reduce the cpu limits of a stopped pod's cgroup");
        }
    }

    /// Upstream `podContainerManagerImpl.Destroy`: kills what still runs in the pod's cgroup
    /// (whichever QoS tier it is under) and removes it.
    ///
    /// Upstream reads every hierarchy's tree for pids before it removes anything. A pod's
    /// cgroup is empty by the time it goes (its containers are gone), so one rmdir per
    /// hierarchy is tried first and the kernel says whether anything is left: only a cgroup it
    /// refused is walked, killed and destroyed as upstream does. The end state is the same; at
    /// 100 pods deleted, the walk was 13% of the kubelet's CPU to stop them (perf).
    ///
    /// With the pod's spec (`pod`), only its own QoS tier's cgroup is removed, as upstream's
    /// `GetPodContainerName` names it: a pod's QoS class cannot change, so the other two tiers
    /// never hold it, and asking them was two failed rmdirs per hierarchy per pod. Without it (a
    /// pod only the runtime knows, an orphan) every tier is tried.
    pub async fn destroy_pod(&self, uid: &str, pod: Option<&Pod>) -> Result<(), CmError> {
        let Some(mgr) = self.inner.cgroups.clone() else {
            return Ok(());
        };
        let candidates = match pod {
            Some(p) => vec![self.inner.names.pod(p)],
            None => self.inner.names.candidates(uid).to_vec(),
        };
        let uid = uid.to_string();
        blocking(move || {
            // Not only where `exists` (every hierarchy) holds: a cgroup half made or half
            // removed by a crash is still removed from the hierarchies that have it.
            for name in &candidates {
                if mgr.remove_if_empty(name) {
                    continue;
                }
                let killed = mgr.kill_all(name).map_err(cg_err(name))?;
                if killed > 0 {
                    warn!(uid = %uid, cgroup = %name.to_cgroupfs(), processes = killed, "killed processes left in a pod cgroup");
                }
                mgr.destroy(name).map_err(cg_err(name))?;
                debug!(uid = %uid, cgroup = %name.to_cgroupfs(), "pod cgroup removed");
            }
            Ok(())
        })
        .await
    }

    /// Housekeeping (upstream `UpdateQOSCgroups` and `cleanupOrphanedPodCgroups`): the burstable
    /// tier's shares from `active` pods, then every pod cgroup whose UID is not in `keep` and
    /// whose pod directory is gone is killed and removed.
    pub async fn housekeeping(&self, active: Vec<Arc<Pod>>, keep: HashSet<String>) {
        let Some(mgr) = self.inner.cgroups.clone() else {
            return;
        };
        self.update_qos(&active).await;
        let names = self.inner.names.clone();
        let pods_root = self.inner.pods_root.clone();
        let orphans = blocking(move || {
            let mut out = Vec::new();
            for qos in [
                QosClass::Guaranteed,
                QosClass::Burstable,
                QosClass::BestEffort,
            ] {
                let tier = names.qos(qos);
                let children = match mgr.children(&tier) {
                    Ok(c) => c,
                    Err(e) => {
                        debug!(cgroup = %tier.to_cgroupfs(), error = %e, "cannot list pod cgroups");
                        continue;
                    }
                };
                for child in children {
                    let Some(uid) = names::pod_uid_of(&child, names.driver) else {
                        continue;
                    };
                    if !keep.contains(&uid) && !pods_root.join(&uid).exists() {
                        out.push(uid);
                    }
                }
            }
            Ok(out)
        })
        .await
        .unwrap_or_default();
        for uid in orphans {
            match self.destroy_pod(&uid, None).await {
                Ok(()) => info!(uid = %uid, "removed orphaned pod cgroup"),
                Err(e) => warn!(uid = %uid, error = %e, "cannot remove orphaned pod cgroup"),
            }
        }
    }

    /// Upstream `qosContainerManagerImpl.UpdateCgroups` for cpu: burstable shares are the sum of
    /// its pods' cpu requests; written only when they change.
    async fn update_qos(&self, active: &[Arc<Pod>]) {
        let Some(mgr) = self.inner.cgroups.clone() else {
            return;
        };
        let requests: Vec<i64> = active
            .iter()
            .filter(|p| pod_qos(p) == QosClass::Burstable)
            .map(|p| resources::cpu_request_milli(p))
            .collect();
        let shares = resources::burstable_shares(requests.iter());
        {
            let last = self
                .inner
                .burstable_shares
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if *last == Some(shares) {
                return;
            }
        }
        let tier = self.inner.names.qos(QosClass::Burstable);
        let config = ResourceConfig {
            cpu_shares: Some(shares),
            ..ResourceConfig::default()
        };
        let res = blocking(move || mgr.update(&tier, &config).map_err(cg_err(&tier))).await;
        match res {
            Ok(()) => {
                debug!(shares, "burstable QoS cgroup updated");
                *self
                    .inner
                    .burstable_shares
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(shares);
            }
            Err(e) => warn!(error = %e, "cannot update the burstable QoS cgroup"),
        }
    }
}

type Enforcement = (&'static str, CgroupName, ResourceConfig);

/// `system-reserved` / `kube-reserved` enforcement: the reservation becomes the limit of the
/// named (existing) cgroup.
fn reserved_enforcement(cfg: &CgroupConfig) -> Result<Vec<Enforcement>, CmError> {
    let mut out = Vec::new();
    for (key, what, cgroup, map, field) in [
        (
            ENFORCE_SYSTEM_RESERVED,
            "system reserved",
            &cfg.system_reserved_cgroup,
            &cfg.system_reserved,
            "systemReserved",
        ),
        (
            ENFORCE_KUBE_RESERVED,
            "kube reserved",
            &cfg.kube_reserved_cgroup,
            &cfg.kube_reserved,
            "kubeReserved",
        ),
    ] {
        if !cfg.enforces(key) {
            continue;
        }
        let limits = allocatable::reservation_limits(field, map)?;
        out.push((
            what,
            CgroupName::from_cgroupfs(cgroup),
            resources::kubepods_config(&limits, &[]),
        ));
    }
    Ok(out)
}

/// Upstream `enforceExistingCgroup`: the cgroup must exist already (the operator made it).
fn enforce_existing(
    mgr: &dyn CgroupManager,
    what: &'static str,
    name: &CgroupName,
    config: &ResourceConfig,
) -> Result<(), CmError> {
    let cgroup = name.to_cgroupfs();
    if !mgr.exists(name) {
        return Err(CmError::Enforce {
            what,
            cgroup: cgroup.clone(),
            message: format!("{cgroup:?} cgroup does not exist"),
        });
    }
    mgr.update(name, config).map_err(|e| CmError::Enforce {
        what,
        cgroup,
        message: e.to_string(),
    })?;
    info!(what, cgroup = %name.to_cgroupfs(), "reservation enforced on its cgroup");
    Ok(())
}
