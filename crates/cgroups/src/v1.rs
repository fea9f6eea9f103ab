//! cgroup v1: one directory per hierarchy (controllers may be mounted apart, `cpu` and `cpuacct`
//! separately, or together as `cpu,cpuacct`), plus the hybrid `cgroup2` mount when present.
//! Upstream: `pkg/kubelet/cm/cgroup_v1_manager_linux.go` and the libcontainer `cgroups/fs` files
//! it drives (`cpu.go`, `cpuacct.go`, `cpuset.go`, `memory.go`, `pids.go`, `hugetlb.go`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::fsio;
use crate::stat;
use crate::{cgroup_dir, CgroupManager, CgroupName, Driver, Error, ResourceConfig, Usage, Version};

/// The controllers kubelet needs on a v1 host (upstream `validateSystemRequirements`).
pub const REQUIRED_CONTROLLERS: &[&str] = &["cpu", "cpuacct", "cpuset", "memory"];

/// The hierarchies whose directory decides [`CgroupManager::exists`] (where mounted).
const EXISTS_CONTROLLERS: &[&str] = &["cpu", "cpuacct", "memory", "pids", "cpuset"];

/// A cgroup v1 manager over the given mounts.
#[derive(Debug, Clone)]
pub struct V1Manager {
    driver: Driver,
    /// Controller (or `name=systemd`) -> mount point.
    mounts: BTreeMap<String, PathBuf>,
    /// The hybrid cgroup2 mount (`/sys/fs/cgroup/unified`), created in like the v1 hierarchies.
    unified: Option<PathBuf>,
    hugepages_dir: PathBuf,
}

impl V1Manager {
    /// Built from `/proc/self/mountinfo` text; fails when a [`REQUIRED_CONTROLLERS`] one is not
    /// mounted.
    pub fn from_mountinfo(text: &str) -> Result<V1Manager, Error> {
        let m = crate::mountinfo::cgroup_mounts(text).map_err(|what| Error::Parse {
            path: PathBuf::from("/proc/self/mountinfo"),
            what,
        })?;
        if let Some(missing) = REQUIRED_CONTROLLERS
            .iter()
            .find(|c| !m.v1.contains_key(**c))
        {
            return Err(Error::MissingController {
                controller: missing.to_string(),
                detail: "no cgroup v1 hierarchy has it mounted (see /proc/self/mountinfo)"
                    .to_string(),
            });
        }
        Ok(Self::with_mounts(m.v1, m.cgroup2))
    }

    /// Built from a controller -> mount path map and the hybrid unified mount (tests point these
    /// at a temp tree). The driver is cgroupfs until [`with_driver`](Self::with_driver).
    pub fn with_mounts(mounts: BTreeMap<String, PathBuf>, unified: Option<PathBuf>) -> V1Manager {
        V1Manager {
            driver: Driver::Cgroupfs,
            mounts,
            unified,
            hugepages_dir: PathBuf::from(crate::HUGEPAGES_DIR),
        }
    }

    pub fn with_driver(mut self, driver: Driver) -> Self {
        self.driver = driver;
        self
    }

    /// Where the kernel's huge page sizes are listed (default `/sys/kernel/mm/hugepages`).
    pub fn with_hugepages_dir(mut self, dir: PathBuf) -> Self {
        self.hugepages_dir = dir;
        self
    }

    pub fn mounts(&self) -> &BTreeMap<String, PathBuf> {
        &self.mounts
    }

    pub fn unified(&self) -> Option<&Path> {
        self.unified.as_deref()
    }

    /// The cgroup's directory in `controller`'s hierarchy, when that controller is mounted.
    pub fn path(&self, controller: &str, name: &CgroupName) -> Option<PathBuf> {
        self.mounts
            .get(controller)
            .map(|m| cgroup_dir(m, name, self.driver))
    }

    /// The cgroup's directory in every hierarchy: each distinct v1 mount (co-mounted controllers
    /// once) and the hybrid unified mount.
    pub fn all_paths(&self, name: &CgroupName) -> Vec<PathBuf> {
        let mounts: BTreeSet<&PathBuf> =
            self.mounts.values().chain(self.unified.as_ref()).collect();
        mounts
            .into_iter()
            .map(|m| cgroup_dir(m, name, self.driver))
            .collect()
    }

    fn require(&self, controller: &str, name: &CgroupName) -> Result<PathBuf, Error> {
        self.path(controller, name)
            .ok_or_else(|| Error::MissingController {
                controller: controller.to_string(),
                detail: "not mounted on this cgroup v1 host".to_string(),
            })
    }

    /// The directory whose absence means "no such cgroup" (memory, else cpu, else any).
    fn main_dir(&self, name: &CgroupName) -> Result<PathBuf, Error> {
        let dir = ["memory", "cpu", "cpuacct"]
            .iter()
            .find_map(|c| self.path(c, name))
            .or_else(|| self.all_paths(name).into_iter().next())
            .ok_or_else(|| Error::MissingController {
                controller: "memory".to_string(),
                detail: "no cgroup v1 hierarchy is mounted".to_string(),
            })?;
        if dir.is_dir() {
            Ok(dir)
        } else {
            Err(Error::NotFound { path: dir })
        }
    }

    /// mkdir -p in the cpuset hierarchy, copying `cpuset.cpus`/`cpuset.mems` from the parent into
    /// each level left empty (a new cpuset cgroup has none, and no task can join it until it has):
    /// libcontainer `cpuset.go` `ensureParent` + `copyIfNeeded`.
    fn ensure_cpuset(&self, mount: &Path, dir: &Path) -> Result<(), Error> {
        fsio::mkdir_all(dir)?;
        let Ok(rel) = dir.strip_prefix(mount) else {
            return Ok(());
        };
        let mut parent = mount.to_path_buf();
        for comp in rel.components() {
            let level = parent.join(comp);
            for file in ["cpuset.cpus", "cpuset.mems"] {
                let current = fsio::read_optional(&level.join(file))?.unwrap_or_default();
                if current.trim().is_empty() {
                    let from_parent = fsio::read_optional(&parent.join(file))?.unwrap_or_default();
                    if !from_parent.trim().is_empty() {
                        fsio::write(&level.join(file), from_parent.trim())?;
                    }
                }
            }
            parent = level;
        }
        Ok(())
    }

    /// Writes the Some fields (libcontainer `fs` `Set` of each controller).
    fn apply(&self, name: &CgroupName, c: &ResourceConfig) -> Result<(), Error> {
        if let Some(limit) = c.memory_limit {
            // -1 is "unlimited" to the kernel too. Shrinking below usage fails with EBUSY; the
            // error names the file.
            let dir = self.require("memory", name)?;
            fsio::write(&dir.join("memory.limit_in_bytes"), &limit.to_string())?;
        }
        if c.cpu_shares.is_some() || c.cpu_quota.is_some() || c.cpu_period.is_some() {
            let dir = self.require("cpu", name)?;
            if let Some(shares) = c.cpu_shares {
                fsio::write(&dir.join("cpu.shares"), &shares.to_string())?;
            }
            // libcontainer `cpu.go`: a period smaller than the current one can be rejected (EINVAL)
            // while the old quota is in place; then write the quota first and the period again.
            let mut period_pending = None;
            if let Some(period) = c.cpu_period {
                match fsio::write(&dir.join("cpu.cfs_period_us"), &period.to_string()) {
                    Ok(()) => {}
                    Err(Error::Write { source, .. })
                        if source.raw_os_error() == Some(nix::errno::Errno::EINVAL as i32)
                            && c.cpu_quota.is_some() =>
                    {
                        period_pending = Some(period)
                    }
                    Err(e) => return Err(e),
                }
            }
            if let Some(quota) = c.cpu_quota {
                let quota = if quota < 0 { -1 } else { quota };
                fsio::write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
            }
            if let Some(period) = period_pending {
                fsio::write(&dir.join("cpu.cfs_period_us"), &period.to_string())?;
            }
        }
        if let Some(pids) = c.pids_limit {
            let dir = self.require("pids", name)?;
            let value = if pids < 0 {
                "max".to_string()
            } else {
                pids.to_string()
            };
            fsio::write(&dir.join("pids.max"), &value)?;
        }
        if !c.hugetlb_limits.is_empty() {
            let dir = self.require("hugetlb", name)?;
            for (size, limit) in &c.hugetlb_limits {
                let file = format!("hugetlb.{}.limit_in_bytes", crate::hugetlb_size_name(*size));
                fsio::write(&dir.join(file), &(*limit).max(-1).to_string())?;
            }
        }
        if c.cpuset_cpus.is_some() || c.cpuset_mems.is_some() {
            let dir = self.require("cpuset", name)?;
            if let Some(cpus) = &c.cpuset_cpus {
                fsio::write(&dir.join("cpuset.cpus"), cpus)?;
            }
            if let Some(mems) = &c.cpuset_mems {
                fsio::write(&dir.join("cpuset.mems"), mems)?;
            }
        }
        Ok(())
    }
}

/// A file of `dir` holding one number, `None` when absent.
fn opt_u64(dir: &Path, file: &str) -> Result<Option<u64>, Error> {
    fsio::read_u64_optional(&dir.join(file))
}

/// A v1 limit file (memory.limit_in_bytes, hugetlb.*.limit_in_bytes): -1 when unlimited, which
/// the kernel shows as a huge page-aligned number (and a plain tree as the "-1" we wrote).
fn opt_limit(dir: &Path, file: &str) -> Result<Option<i64>, Error> {
    let path = dir.join(file);
    match fsio::read_optional(&path)? {
        None => Ok(None),
        Some(text) => {
            let v: i64 = text.trim().parse().map_err(|e| Error::Parse {
                path,
                what: format!("{text:?}: {e}"),
            })?;
            let unlimited = v < 0 || stat::v1_limit(v.unsigned_abs()).is_none();
            Ok(Some(if unlimited { -1 } else { v }))
        }
    }
}

/// The PSI file `dir/file` when the kernel has it there. Usage readers ignore its errors: with PSI
/// disabled the file can exist and reading it fail (EOPNOTSUPP), which only means "no data".
pub(crate) fn read_psi(dir: &Path, file: &str) -> Result<Option<crate::Psi>, Error> {
    let path = dir.join(file);
    match fsio::read_optional(&path)? {
        None => Ok(None),
        Some(text) => stat::parse_psi(&text)
            .map(Some)
            .map_err(|what| Error::Parse { path, what }),
    }
}

impl CgroupManager for V1Manager {
    fn version(&self) -> Version {
        Version::V1
    }

    fn driver(&self) -> Driver {
        self.driver
    }

    fn exists(&self, name: &CgroupName) -> bool {
        let dirs: Vec<PathBuf> = EXISTS_CONTROLLERS
            .iter()
            .filter_map(|c| self.path(c, name))
            .collect();
        let dirs = if dirs.is_empty() {
            self.all_paths(name)
        } else {
            dirs
        };
        !dirs.is_empty() && dirs.iter().all(|d| d.is_dir())
    }

    fn create(&self, name: &CgroupName, config: &ResourceConfig) -> Result<(), Error> {
        let cpuset_mount = self.mounts.get("cpuset");
        let mounts: BTreeSet<&PathBuf> =
            self.mounts.values().chain(self.unified.as_ref()).collect();
        for mount in mounts {
            let dir = cgroup_dir(mount, name, self.driver);
            if Some(mount) == cpuset_mount {
                self.ensure_cpuset(mount, &dir)?;
            } else {
                fsio::mkdir_all(&dir)?;
            }
        }
        self.apply(name, config)
    }

    fn update(&self, name: &CgroupName, config: &ResourceConfig) -> Result<(), Error> {
        self.apply(name, config)
    }

    fn destroy(&self, name: &CgroupName) -> Result<(), Error> {
        // Every hierarchy is tried; the first failure is reported.
        let mut first = None;
        for dir in self.all_paths(name) {
            if let Err(e) = fsio::remove_tree(&dir) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Every hierarchy is tried, so one that refused leaves no other half-removed for long: the
    /// caller's kill and destroy then find the cgroup only where it still is.
    fn remove_if_empty(&self, name: &CgroupName) -> bool {
        let mut all = true;
        for dir in self.all_paths(name) {
            all &= fsio::rmdir_once(&dir);
        }
        all
    }

    /// The union over every hierarchy: a process moved into one hierarchy only (by hand, or a
    /// crash half-way through runc's placement) still keeps that one busy and must be found.
    fn pids(&self, name: &CgroupName) -> Result<Vec<i32>, Error> {
        let dirs = self.all_paths(name);
        if dirs.is_empty() {
            return Err(Error::MissingController {
                controller: "pids".to_string(),
                detail: "no cgroup v1 hierarchy is mounted".to_string(),
            });
        }
        let mut all = std::collections::BTreeSet::new();
        for dir in dirs.iter().filter(|d| d.is_dir()) {
            all.extend(fsio::pids_recursive(dir)?);
        }
        Ok(all.into_iter().collect())
    }

    /// The `devices` hierarchy, as libcontainer's `GetAllPids`; else the one whose absence
    /// means no such cgroup.
    fn pids_for_stats(&self, name: &CgroupName) -> Result<Vec<i32>, Error> {
        let dir = match self.path("devices", name) {
            Some(d) => Ok(d),
            None => self.main_dir(name),
        };
        match dir {
            Ok(d) if d.is_dir() => fsio::pids_recursive(&d),
            Ok(_) => Ok(Vec::new()),
            Err(e) if e.is_not_found() => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    fn kill_all(&self, name: &CgroupName) -> Result<usize, Error> {
        fsio::kill_rounds(|| self.pids(name))
    }

    fn usage(&self, name: &CgroupName) -> Result<Usage, Error> {
        self.main_dir(name)?;
        let mut u = Usage::default();
        if let Some(dir) = self.path("cpuacct", name) {
            u.cpu_usage_ns = fsio::read_u64(&dir.join("cpuacct.usage"))?;
            let ticks = stat::parse_flat_keyed(&fsio::read(&dir.join("cpuacct.stat"))?);
            u.cpu_user_ns = stat::ticks_to_ns(ticks.get("user").copied().unwrap_or(0));
            u.cpu_system_ns = stat::ticks_to_ns(ticks.get("system").copied().unwrap_or(0));
        }
        if let Some(dir) = self.path("cpu", name) {
            let s = stat::parse_flat_keyed(&fsio::read(&dir.join("cpu.stat"))?);
            u.cpu_periods = s.get("nr_periods").copied().unwrap_or(0);
            u.cpu_throttled_periods = s.get("nr_throttled").copied().unwrap_or(0);
            u.cpu_throttled_ns = s.get("throttled_time").copied().unwrap_or(0);
            // The root cgroup has no quota file.
            u.cpu_quota_us = fsio::read_max_optional(&dir, "cpu.cfs_quota_us")?
                .and_then(|q| u64::try_from(q).ok());
            u.cpu_pressure = read_psi(&dir, "cpu.pressure").ok().flatten();
        }
        if let Some(dir) = self.path("memory", name) {
            u.memory_usage_bytes = fsio::read_u64(&dir.join("memory.usage_in_bytes"))?;
            let s = stat::parse_flat_keyed(&fsio::read(&dir.join("memory.stat"))?);
            let get = |k: &str| s.get(k).copied().unwrap_or(0);
            u.memory_working_set_bytes =
                stat::working_set(u.memory_usage_bytes, get("total_inactive_file"));
            u.memory_rss_bytes = get("total_rss");
            u.memory_cache_bytes = get("total_cache");
            u.memory_page_faults = get("total_pgfault");
            u.memory_major_page_faults = get("total_pgmajfault");
            u.memory_limit_bytes =
                opt_limit(&dir, "memory.limit_in_bytes")?.and_then(|v| u64::try_from(v).ok());
            u.memory_pressure = read_psi(&dir, "memory.pressure").ok().flatten();
        }
        if let Some(dir) = self.path("pids", name) {
            // The root cgroup has neither file.
            u.pids_current = opt_u64(&dir, "pids.current")?;
            u.pids_limit =
                fsio::read_max_optional(&dir, "pids.max")?.and_then(|v| u64::try_from(v).ok());
        }
        if let Some(dir) = self.path("blkio", name) {
            u.io_pressure = read_psi(&dir, "io.pressure").ok().flatten();
        }
        Ok(u)
    }

    fn created(&self, name: &CgroupName) -> Option<std::time::SystemTime> {
        crate::oldest_mtime(self.all_paths(name))
    }

    fn resource_config(&self, name: &CgroupName) -> Result<ResourceConfig, Error> {
        self.main_dir(name)?;
        let mut c = ResourceConfig::default();
        if let Some(dir) = self.path("memory", name) {
            c.memory_limit = opt_limit(&dir, "memory.limit_in_bytes")?;
        }
        if let Some(dir) = self.path("cpu", name) {
            c.cpu_shares = opt_u64(&dir, "cpu.shares")?;
            c.cpu_quota = fsio::read_max_optional(&dir, "cpu.cfs_quota_us")?;
            c.cpu_period = opt_u64(&dir, "cpu.cfs_period_us")?;
        }
        if let Some(dir) = self.path("pids", name) {
            c.pids_limit = fsio::read_max_optional(&dir, "pids.max")?;
        }
        if let Some(dir) = self.path("hugetlb", name) {
            for size in self.hugetlb_page_sizes() {
                let file = format!("hugetlb.{}.limit_in_bytes", crate::hugetlb_size_name(size));
                if let Some(limit) = opt_limit(&dir, &file)? {
                    c.hugetlb_limits.insert(size, limit);
                }
            }
        }
        if let Some(dir) = self.path("cpuset", name) {
            let read = |f: &str| {
                fsio::read_optional(&dir.join(f)).map(|o| o.map(|s| s.trim().to_string()))
            };
            c.cpuset_cpus = read("cpuset.cpus")?;
            c.cpuset_mems = read("cpuset.mems")?;
        }
        Ok(c)
    }

    fn children(&self, name: &CgroupName) -> Result<Vec<String>, Error> {
        let mut names = BTreeSet::new();
        let mut found = false;
        let mut last_missing = None;
        for dir in EXISTS_CONTROLLERS.iter().filter_map(|c| self.path(c, name)) {
            match fsio::child_dirs(&dir) {
                Ok(n) => {
                    found = true;
                    names.extend(n);
                }
                Err(e) if e.is_not_found() => last_missing = Some(e),
                Err(e) => return Err(e),
            }
        }
        match (found, last_missing) {
            (false, Some(e)) => Err(e),
            _ => Ok(names.into_iter().collect()),
        }
    }

    fn hugetlb_page_sizes(&self) -> Vec<u64> {
        if self.mounts.contains_key("hugetlb") {
            crate::kernel_hugepage_sizes(&self.hugepages_dir)
        } else {
            Vec::new()
        }
    }

    fn add_process(&self, name: &CgroupName, pid: i32) -> Result<(), Error> {
        for dir in self.all_paths(name) {
            fsio::write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "v1_tests.rs"]
mod tests;
