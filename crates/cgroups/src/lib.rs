//! cgroups for the kubelet: one [`CgroupManager`] trait over cgroup v1 and v2, the naming of the
//! cgroupfs and systemd drivers, and the usage readers stats and eviction need.
//!
//! Upstream counterpart: `pkg/kubelet/cm/cgroup_manager_linux.go` (`cgroupCommon`, `CgroupName`,
//! `ToSystemd`/`ToCgroupfs`), `cgroup_v1_manager_linux.go` and `cgroup_v2_manager_linux.go`,
//! together with the file I/O that runc's libcontainer (`cgroups/fs`, `cgroups/fs2`) does for them.
//! The systemd driver changes the *names* (`kubepods.slice/kubepods-burstable.slice/…`); the
//! directories are still created through the filesystem, as there is no D-Bus client here (a
//! running systemd is still required, so that a node configured for it fails early and clearly).
//!
//! Why not cgroups-rs / libcgroups: youki's `libcgroups` applies one OCI `LinuxResources` (its
//! `ControllerOpt`) to one container's cgroup path, and always pulls `oci-spec`, `procfs`, `pathrs`,
//! `fixedbitset` and `serde` (its systemd manager brings its own D-Bus client); the kubelet creates
//! and reads back a tree of QoS and pod cgroups in its own `ResourceConfig` terms. cgroups-rs 0.5
//! depends unconditionally on `zbus` (an async D-Bus stack) and on `nix` 0.25 beside the workspace's
//! 0.31, and its v1 hierarchy takes controllers only from `cgroup` mounts, so it never creates in the
//! hybrid `cgroup2` mount at `/sys/fs/cgroup/unified` as libcontainer does. Either way we would still
//! convert both ways between their types and ours and compute cAdvisor's working set ourselves, so the
//! ~1,100 lines of plain file I/O here (thiserror and nix only) cost less, and they are tested over
//! temp-dir trees and against the real kernel.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod fsio;
pub mod mountinfo;
pub mod stat;
pub mod v1;
pub mod v2;

#[cfg(feature = "fake")]
pub mod fake;

/// The cgroup hierarchy version of the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// The kubelet's `cgroupDriver`: how cgroup names are spelled (upstream `libcontainerCgroupManagerType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Cgroupfs,
    Systemd,
}

impl Driver {
    /// Parses the `cgroupDriver` config value (`cgroupfs` or `systemd`).
    pub fn parse(s: &str) -> Result<Driver, Error> {
        match s {
            "cgroupfs" => Ok(Driver::Cgroupfs),
            "systemd" => Ok(Driver::Systemd),
            other => Err(Error::UnknownDriver(other.to_string())),
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Driver::Cgroupfs => "cgroupfs",
            Driver::Systemd => "systemd",
        }
    }
}

const SYSTEMD_SUFFIX: &str = ".slice";

/// Upstream `CgroupName`: the components of a cgroup below the root, driver-neutral.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct CgroupName(Vec<String>);

impl CgroupName {
    /// The root cgroup (upstream `RootCgroupName`).
    pub fn root() -> Self {
        CgroupName(Vec::new())
    }

    /// Upstream `NewCgroupName` without a base: the parts as given.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(parts: I) -> Self {
        CgroupName(parts.into_iter().map(Into::into).collect())
    }

    /// Upstream `NewCgroupName(base, component)`.
    pub fn child(&self, part: impl Into<String>) -> Self {
        let mut parts = self.0.clone();
        parts.push(part.into());
        CgroupName(parts)
    }

    pub fn parts(&self) -> &[String] {
        &self.0
    }

    /// The enclosing cgroup; `None` for the root.
    pub fn parent(&self) -> Option<CgroupName> {
        if self.0.is_empty() {
            None
        } else {
            Some(CgroupName(self.0[..self.0.len() - 1].to_vec()))
        }
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// True when `self` is `other` or lies below it.
    pub fn is_within(&self, other: &CgroupName) -> bool {
        self.0.starts_with(&other.0)
    }

    /// Upstream `ToCgroupfs`: "/" + parts joined by "/" ("/" for the root).
    pub fn to_cgroupfs(&self) -> String {
        format!("/{}", self.0.join("/"))
    }

    /// Upstream `ToSystemd`: each part with '-' replaced by '_', joined with '-' + ".slice", then
    /// libcontainer's `ExpandSlice`: ["kubepods","burstable","pod12-34"] ->
    /// "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice"; root -> "/".
    pub fn to_systemd(&self) -> String {
        if self.0.is_empty() || (self.0.len() == 1 && self.0[0].is_empty()) {
            return "/".to_string();
        }
        let mut path = String::new();
        let mut prefix = String::new();
        for part in &self.0 {
            let escaped = part.replace('-', "_");
            path.push('/');
            path.push_str(&prefix);
            path.push_str(&escaped);
            path.push_str(SYSTEMD_SUFFIX);
            prefix.push_str(&escaped);
            prefix.push('-');
        }
        path
    }

    /// Inverse of [`to_cgroupfs`](Self::to_cgroupfs) (upstream `ParseCgroupfsToCgroupName`):
    /// "/a/b" -> [a, b]; empty components are dropped, so "/" and "" are the root.
    pub fn from_cgroupfs(s: &str) -> Self {
        CgroupName(
            s.split('/')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect(),
        )
    }

    /// Inverse of [`to_systemd`](Self::to_systemd) (upstream `ParseSystemdToCgroupName`): take the
    /// last path element, strip ".slice", split on '-', '_' back to '-'. "/" and "" are the root.
    pub fn from_systemd(s: &str) -> Self {
        let base = s.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        let base = base.strip_suffix(SYSTEMD_SUFFIX).unwrap_or(base);
        if base.is_empty() || base == "-" {
            return CgroupName::root();
        }
        CgroupName(base.split('-').map(|p| p.replace('_', "-")).collect())
    }

    /// The name as the given driver spells it.
    pub fn for_driver(&self, driver: Driver) -> String {
        match driver {
            Driver::Cgroupfs => self.to_cgroupfs(),
            Driver::Systemd => self.to_systemd(),
        }
    }
}

/// The directory of `name` below a hierarchy's mount point, as the driver spells it.
pub(crate) fn cgroup_dir(mount: &Path, name: &CgroupName, driver: Driver) -> PathBuf {
    let rel = name.for_driver(driver);
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        mount.to_path_buf()
    } else {
        mount.join(rel)
    }
}

/// Upstream `ResourceConfig`. None = leave as is. -1 means "max"/unlimited where the kernel has it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceConfig {
    /// Bytes.
    pub memory_limit: Option<i64>,
    /// v1 cpu.shares; v2 cpu.weight via runc's conversion (see [`cpu_shares_to_weight`]).
    pub cpu_shares: Option<u64>,
    /// Microseconds; -1 = max.
    pub cpu_quota: Option<i64>,
    /// Microseconds.
    pub cpu_period: Option<u64>,
    /// -1 = max.
    pub pids_limit: Option<i64>,
    /// Page size in bytes -> limit in bytes.
    pub hugetlb_limits: BTreeMap<u64, i64>,
    pub cpuset_cpus: Option<String>,
    pub cpuset_mems: Option<String>,
}

/// One reading of a cgroup's usage (what stats and eviction need; upstream's cAdvisor fields).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    pub cpu_usage_ns: u64,
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    pub cpu_periods: u64,
    pub cpu_throttled_periods: u64,
    pub cpu_throttled_ns: u64,
    /// The CFS quota in microseconds; None when unlimited (cAdvisor's `Spec.Cpu.Quota` 0, which
    /// leaves out the `container_cpu_cfs_*` series).
    pub cpu_quota_us: Option<u64>,
    /// v1 memory.usage_in_bytes, v2 memory.current.
    pub memory_usage_bytes: u64,
    /// usage - inactive_file (v1 total_inactive_file), floored at 0, as cAdvisor.
    pub memory_working_set_bytes: u64,
    /// v1 total_rss, v2 anon.
    pub memory_rss_bytes: u64,
    /// v1 total_cache, v2 file.
    pub memory_cache_bytes: u64,
    pub memory_page_faults: u64,
    pub memory_major_page_faults: u64,
    /// None when unlimited.
    pub memory_limit_bytes: Option<u64>,
    pub pids_current: Option<u64>,
    /// None when unlimited.
    pub pids_limit: Option<u64>,
    pub memory_pressure: Option<Psi>,
    pub cpu_pressure: Option<Psi>,
    pub io_pressure: Option<Psi>,
}

/// One pressure (PSI) file: the "some" and "full" lines.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Psi {
    pub some_avg10: f64,
    pub some_avg60: f64,
    pub some_avg300: f64,
    pub some_total_us: u64,
    pub full_avg10: f64,
    pub full_avg60: f64,
    pub full_avg300: f64,
    pub full_total_us: u64,
}

/// What failed, naming the file or directory.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("write {} = {value}: {source}", path.display())]
    Write {
        path: PathBuf,
        value: String,
        source: std::io::Error,
    },
    #[error("read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parse {}: {what}", path.display())]
    Parse { path: PathBuf, what: String },
    #[error("mkdir {}: {source}", path.display())]
    Mkdir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("rmdir {}: {source}", path.display())]
    Rmdir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cgroup {} does not exist", path.display())]
    NotFound { path: PathBuf },
    #[error("kill {pid}: {source}")]
    Kill { pid: i32, source: nix::Error },
    #[error("statfs {}: {source}", path.display())]
    Statfs { path: PathBuf, source: nix::Error },
    #[error("systemd is not reachable (no /run/systemd/system): cgroupDriver systemd needs a running systemd")]
    SystemdNotRunning,
    #[error("cgroup controller {controller} is not available: {detail}")]
    MissingController { controller: String, detail: String },
    #[error("unknown cgroup driver {0:?}: want \"cgroupfs\" or \"systemd\"")]
    UnknownDriver(String),
    #[error("{0} is not supported by this cgroup manager")]
    Unsupported(&'static str),
    /// A failure injected by a test double.
    #[error("{0}")]
    Injected(String),
}

impl Error {
    /// True when the cgroup (or the file) is not there.
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::NotFound { .. } => true,
            Error::Read { source, .. } | Error::Write { source, .. } => {
                source.kind() == std::io::ErrorKind::NotFound
            }
            _ => false,
        }
    }
}

/// The seam: upstream's `CgroupManager` interface (`pkg/kubelet/cm/types.go`).
pub trait CgroupManager: Send + Sync + std::fmt::Debug {
    fn version(&self) -> Version;
    fn driver(&self) -> Driver;
    /// The literal name the runtime is given as cgroup parent: to_cgroupfs() or to_systemd() by driver.
    fn name(&self, name: &CgroupName) -> String {
        name.for_driver(self.driver())
    }
    /// True when the cgroup exists in every hierarchy this manager requires (v1: cpu, cpuacct,
    /// memory, pids, cpuset where mounted; v2: the one dir).
    fn exists(&self, name: &CgroupName) -> bool;
    /// mkdir -p in every hierarchy, then apply the config. Idempotent.
    fn create(&self, name: &CgroupName, config: &ResourceConfig) -> Result<(), Error>;
    /// Apply only the Some fields (and hugetlb entries).
    fn update(&self, name: &CgroupName, config: &ResourceConfig) -> Result<(), Error>;
    /// Remove the cgroup (and any child dirs left, deepest first) in every hierarchy; a missing one
    /// is fine; rmdir is retried on EBUSY a few times.
    fn destroy(&self, name: &CgroupName) -> Result<(), Error>;
    /// One rmdir per hierarchy, nothing read: true when the cgroup is gone from every hierarchy
    /// (removed now, or never there); false when any hierarchy kept it (a process or a child
    /// cgroup still in it: the kernel refuses with EBUSY and changes nothing). Added beyond
    /// upstream's interface for a pod cgroup's usual end, empty once its containers are gone:
    /// the caller kills and destroys as upstream's `podContainerManagerImpl.Destroy` only when
    /// this is false. The default (other test doubles) always says false.
    fn remove_if_empty(&self, name: &CgroupName) -> bool {
        let _ = name;
        false
    }
    /// Pids in the cgroup and all its descendants (none when the cgroup does not exist).
    fn pids(&self, name: &CgroupName) -> Result<Vec<i32>, Error>;
    /// The same as one hierarchy sees it: what stats read (libcontainer's v1 `GetAllPids`
    /// walks the `devices` hierarchy alone). On v1 [`CgroupManager::pids`] walks every
    /// hierarchy, about ten times the reads, to find a process placed in only some of them:
    /// kill and destroy need that, a process count or a pid to find the pod's network
    /// namespace does not. The default is `pids`.
    fn pids_for_stats(&self, name: &CgroupName) -> Result<Vec<i32>, Error> {
        self.pids(name)
    }
    /// SIGKILL every process in it and its descendants; returns how many were signalled (best effort).
    fn kill_all(&self, name: &CgroupName) -> Result<usize, Error>;
    fn usage(&self, name: &CgroupName) -> Result<Usage, Error>;
    /// Read back the current settings (what `create` wrote); -1 for unlimited/max.
    fn resource_config(&self, name: &CgroupName) -> Result<ResourceConfig, Error>;
    /// Names of the direct child cgroups (directory names, as the driver spells them).
    fn children(&self, name: &CgroupName) -> Result<Vec<String>, Error>;
    /// Which hugetlb page sizes (bytes) this manager can limit; empty when none.
    fn hugetlb_page_sizes(&self) -> Vec<u64>;
    /// When the cgroup was made, as cAdvisor tells it (`getSpecInternal`: the oldest
    /// modification time of its directories); `None` when it does not exist or the manager
    /// cannot tell. The Summary API's `startTime` of system containers.
    fn created(&self, name: &CgroupName) -> Option<std::time::SystemTime> {
        let _ = name;
        None
    }
    /// Move a process into the cgroup (its `cgroup.procs` in every hierarchy). Added beyond
    /// upstream's interface (there the runtime places containers); used by tests. The default is
    /// for other test doubles of this trait.
    fn add_process(&self, name: &CgroupName, pid: i32) -> Result<(), Error> {
        let _ = (name, pid);
        Err(Error::Unsupported("add_process"))
    }
}

/// The dispatching enum, as youki's `AnyCgroupManager`.
#[derive(Debug)]
pub enum AnyManager {
    V1(v1::V1Manager),
    V2(v2::V2Manager),
    #[cfg(feature = "fake")]
    Fake(fake::FakeManager),
}

macro_rules! dispatch {
    ($self:ident, $m:ident => $e:expr) => {
        match $self {
            AnyManager::V1($m) => $e,
            AnyManager::V2($m) => $e,
            #[cfg(feature = "fake")]
            AnyManager::Fake($m) => $e,
        }
    };
}

impl CgroupManager for AnyManager {
    fn version(&self) -> Version {
        dispatch!(self, m => m.version())
    }
    fn driver(&self) -> Driver {
        dispatch!(self, m => m.driver())
    }
    fn name(&self, name: &CgroupName) -> String {
        dispatch!(self, m => m.name(name))
    }
    fn exists(&self, name: &CgroupName) -> bool {
        dispatch!(self, m => m.exists(name))
    }
    fn create(&self, name: &CgroupName, config: &ResourceConfig) -> Result<(), Error> {
        dispatch!(self, m => m.create(name, config))
    }
    fn update(&self, name: &CgroupName, config: &ResourceConfig) -> Result<(), Error> {
        dispatch!(self, m => m.update(name, config))
    }
    fn destroy(&self, name: &CgroupName) -> Result<(), Error> {
        dispatch!(self, m => m.destroy(name))
    }
    fn remove_if_empty(&self, name: &CgroupName) -> bool {
        dispatch!(self, m => m.remove_if_empty(name))
    }
    fn pids(&self, name: &CgroupName) -> Result<Vec<i32>, Error> {
        dispatch!(self, m => m.pids(name))
    }
    fn pids_for_stats(&self, name: &CgroupName) -> Result<Vec<i32>, Error> {
        dispatch!(self, m => m.pids_for_stats(name))
    }
    fn kill_all(&self, name: &CgroupName) -> Result<usize, Error> {
        dispatch!(self, m => m.kill_all(name))
    }
    fn usage(&self, name: &CgroupName) -> Result<Usage, Error> {
        dispatch!(self, m => m.usage(name))
    }
    fn resource_config(&self, name: &CgroupName) -> Result<ResourceConfig, Error> {
        dispatch!(self, m => m.resource_config(name))
    }
    fn children(&self, name: &CgroupName) -> Result<Vec<String>, Error> {
        dispatch!(self, m => m.children(name))
    }
    fn hugetlb_page_sizes(&self) -> Vec<u64> {
        dispatch!(self, m => m.hugetlb_page_sizes())
    }
    fn add_process(&self, name: &CgroupName, pid: i32) -> Result<(), Error> {
        dispatch!(self, m => m.add_process(name, pid))
    }
    fn created(&self, name: &CgroupName) -> Option<std::time::SystemTime> {
        dispatch!(self, m => m.created(name))
    }
}

/// The oldest modification time among `dirs` that exist (cAdvisor's cgroup creation time).
pub(crate) fn oldest_mtime<I: IntoIterator<Item = PathBuf>>(
    dirs: I,
) -> Option<std::time::SystemTime> {
    dirs.into_iter()
        .filter_map(|d| std::fs::metadata(d).ok()?.modified().ok())
        .min()
}

/// Where cgroups are mounted on a normal host.
pub const DEFAULT_CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// Present only while systemd runs as init (sd_booted(3)).
pub const SYSTEMD_RUNNING_DIR: &str = "/run/systemd/system";

/// Detect at start: `/sys/fs/cgroup` is cgroup2fs -> V2, else V1 from `/proc/self/mountinfo`.
/// For [`Driver::Systemd`], fails with [`Error::SystemdNotRunning`] when `/run/systemd/system`
/// does not exist. Upstream: `libcontainercgroups.IsCgroup2UnifiedMode` + `NewCgroupManager`.
pub fn detect(driver: Driver) -> Result<AnyManager, Error> {
    detect_at(
        driver,
        Path::new(DEFAULT_CGROUP_ROOT),
        Path::new(SYSTEMD_RUNNING_DIR),
    )
}

/// [`detect`] with the cgroup root and the systemd marker directory given.
pub fn detect_at(driver: Driver, root: &Path, systemd_dir: &Path) -> Result<AnyManager, Error> {
    if driver == Driver::Systemd && !systemd_dir.is_dir() {
        return Err(Error::SystemdNotRunning);
    }
    let fs = nix::sys::statfs::statfs(root).map_err(|source| Error::Statfs {
        path: root.to_path_buf(),
        source,
    })?;
    if fs.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC {
        return Ok(AnyManager::V2(
            v2::V2Manager::new(root.to_path_buf()).with_driver(driver),
        ));
    }
    let path = Path::new("/proc/self/mountinfo");
    let text = fsio::read(path)?;
    Ok(AnyManager::V1(
        v1::V1Manager::from_mountinfo(&text)?.with_driver(driver),
    ))
}

/// runc's `ConvertCPUSharesToCgroupV2Value`: v1 shares [2, 262144] -> v2 weight [1, 10000]
/// (0 stays 0: not set).
pub fn cpu_shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    let shares = shares.clamp(2, 262_144);
    1 + ((shares - 2) * 9999) / 262_142
}

/// The inverse, as upstream `cgroup_v2_manager_linux.go` `cpuWeightToCpuShares` reads it back.
pub fn cpu_weight_to_shares(weight: u64) -> u64 {
    if weight == 0 {
        return 0;
    }
    let weight = weight.clamp(1, 10_000);
    ((weight - 1) * 262_142) / 9999 + 2
}

/// libcontainer's hugetlb file name part for a page size (`HugePageSizes`, `units.CustomSize`):
/// 2097152 -> "2MB", 1073741824 -> "1GB", 65536 -> "64KB".
pub fn hugetlb_size_name(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];
    let mut size = bytes as f64;
    let mut unit = 0;
    while size >= 1024.0 && unit < UNITS.len() - 1 {
        size /= 1024.0;
        unit += 1;
    }
    format!("{size}{}", UNITS[unit])
}

/// The inverse of [`hugetlb_size_name`]: "2MB" -> 2097152.
pub fn parse_hugetlb_size_name(name: &str) -> Option<u64> {
    let digits = name
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(name.len());
    let (n, unit) = name.split_at(digits);
    let n: u64 = n.parse().ok()?;
    let shift = match unit {
        "B" => 0,
        "KB" => 10,
        "MB" => 20,
        "GB" => 30,
        "TB" => 40,
        "PB" => 50,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// The huge page sizes the kernel offers: `hugepages-2048kB` entries of `/sys/kernel/mm/hugepages`
/// (libcontainer `HugePageSizes`). A missing directory means none.
pub(crate) fn kernel_hugepage_sizes(dir: &Path) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut sizes: Vec<u64> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let kb = name.strip_prefix("hugepages-")?.strip_suffix("kB")?;
            kb.parse::<u64>().ok()?.checked_mul(1024)
        })
        .collect();
    sizes.sort_unstable();
    sizes
}

/// Where the kernel lists its huge page sizes.
pub const HUGEPAGES_DIR: &str = "/sys/kernel/mm/hugepages";

#[cfg(test)]
#[path = "lib_tests.rs"]
mod tests;
