//! cgroup v2: one tree, controllers enabled per level through `cgroup.subtree_control`.
//! Upstream: `pkg/kubelet/cm/cgroup_v2_manager_linux.go` and the libcontainer `cgroups/fs2` files
//! it drives (`create.go` `CreateCgroupPath`, `cpu.go`, `memory.go`, `pids.go`, `hugetlb.go`,
//! `cpuset.go`, `psi.go`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::fsio;
use crate::stat;
use crate::v1::read_psi;
use crate::{cgroup_dir, CgroupManager, CgroupName, Driver, Error, ResourceConfig, Usage, Version};

/// The controllers the kubelet's cgroups need, enabled in each parent's `cgroup.subtree_control`
/// when the parent offers them (`cgroup.controllers`).
pub const WANTED_CONTROLLERS: &[&str] = &["cpu", "cpuset", "memory", "pids", "hugetlb"];

/// Used when a quota is set without a period and `cpu.max` cannot be read (the kernel's default).
const DEFAULT_CFS_PERIOD_US: u64 = 100_000;

/// A cgroup v2 manager rooted at a cgroup2 mount (`/sys/fs/cgroup`, or the hybrid
/// `/sys/fs/cgroup/unified`).
#[derive(Debug, Clone)]
pub struct V2Manager {
    driver: Driver,
    mount: PathBuf,
    hugepages_dir: PathBuf,
    meminfo: PathBuf,
}

impl V2Manager {
    /// The driver is cgroupfs until [`with_driver`](Self::with_driver).
    pub fn new(mount: PathBuf) -> V2Manager {
        V2Manager {
            driver: Driver::Cgroupfs,
            mount,
            hugepages_dir: PathBuf::from(crate::HUGEPAGES_DIR),
            meminfo: PathBuf::from("/proc/meminfo"),
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

    /// Where the root's memory usage is read (default `/proc/meminfo`).
    pub fn with_meminfo(mut self, path: PathBuf) -> Self {
        self.meminfo = path;
        self
    }

    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// The cgroup's directory.
    pub fn path(&self, name: &CgroupName) -> PathBuf {
        cgroup_dir(&self.mount, name, self.driver)
    }

    fn existing(&self, name: &CgroupName) -> Result<PathBuf, Error> {
        let dir = self.path(name);
        if dir.is_dir() {
            Ok(dir)
        } else {
            Err(Error::NotFound { path: dir })
        }
    }

    /// `MemTotal - MemFree` of /proc/meminfo in bytes: the root cgroup's usage as libcontainer
    /// computes it where the kernel keeps no memory.current.
    fn root_memory_usage(&self) -> Result<u64, Error> {
        let text = fsio::read(&self.meminfo)?;
        let kib = |key: &str| {
            stat::meminfo_kib(&text, key).ok_or_else(|| Error::Parse {
                path: self.meminfo.clone(),
                what: format!("no {key} in it"),
            })
        };
        Ok(kib("MemTotal")?.saturating_sub(kib("MemFree")?) * 1024)
    }

    /// Enables [`WANTED_CONTROLLERS`] (those offered) in the `cgroup.subtree_control` of every
    /// ancestor of `name`, root first, so that `name` gets their interface files (libcontainer
    /// `fs2/create.go` `CreateCgroupPath`). All at once, else one by one ignoring refusals as runc
    /// does: a controller left off shows later as a failed write naming its file.
    fn enable_controllers(&self, name: &CgroupName) -> Result<(), Error> {
        let mut ancestor = CgroupName::root();
        for part in name.parts() {
            let dir = self.path(&ancestor);
            let offered =
                words(fsio::read_optional(&dir.join("cgroup.controllers"))?.unwrap_or_default());
            let enabled = words(
                fsio::read_optional(&dir.join("cgroup.subtree_control"))?.unwrap_or_default(),
            );
            let missing: Vec<&str> = WANTED_CONTROLLERS
                .iter()
                .copied()
                .filter(|c| offered.contains(*c) && !enabled.contains(*c))
                .collect();
            if !missing.is_empty() {
                let file = dir.join("cgroup.subtree_control");
                let all = missing
                    .iter()
                    .map(|c| format!("+{c}"))
                    .collect::<Vec<_>>()
                    .join(" ");
                if fsio::write(&file, &all).is_err() {
                    for c in &missing {
                        let _ = fsio::write(&file, &format!("+{c}"));
                    }
                }
            }
            ancestor = ancestor.child(part.clone());
        }
        Ok(())
    }

    /// Writes the Some fields (libcontainer `fs2` `setCpu`, `setMemory`, `setPids`, `setHugeTlb`,
    /// `setCpuset`).
    fn apply(&self, name: &CgroupName, c: &ResourceConfig) -> Result<(), Error> {
        let dir = self.path(name);
        if let Some(limit) = c.memory_limit {
            fsio::write(&dir.join("memory.max"), &max_or(limit))?;
        }
        if let Some(shares) = c.cpu_shares {
            let weight = crate::cpu_shares_to_weight(shares);
            if weight != 0 {
                fsio::write(&dir.join("cpu.weight"), &weight.to_string())?;
            }
        }
        if c.cpu_quota.is_some() || c.cpu_period.is_some() {
            let path = dir.join("cpu.max");
            // The half not given is kept from the current value.
            let (cur_quota, cur_period) = match fsio::read_optional(&path)? {
                Some(text) => stat::parse_cpu_max(&text).map_err(|what| Error::Parse {
                    path: path.clone(),
                    what,
                })?,
                None => (-1, DEFAULT_CFS_PERIOD_US),
            };
            let quota = c.cpu_quota.unwrap_or(cur_quota);
            let period = c.cpu_period.unwrap_or(cur_period);
            fsio::write(&path, &format!("{} {period}", max_or(quota)))?;
        }
        if let Some(pids) = c.pids_limit {
            fsio::write(&dir.join("pids.max"), &max_or(pids))?;
        }
        for (size, limit) in &c.hugetlb_limits {
            let file = format!("hugetlb.{}.max", crate::hugetlb_size_name(*size));
            fsio::write(&dir.join(file), &max_or(*limit))?;
        }
        if let Some(cpus) = &c.cpuset_cpus {
            fsio::write(&dir.join("cpuset.cpus"), cpus)?;
        }
        if let Some(mems) = &c.cpuset_mems {
            fsio::write(&dir.join("cpuset.mems"), mems)?;
        }
        Ok(())
    }
}

/// A v2 limit as written: negative is "max".
fn max_or(v: i64) -> String {
    if v < 0 {
        "max".to_string()
    } else {
        v.to_string()
    }
}

fn words(text: String) -> BTreeSet<String> {
    text.split_whitespace()
        .map(|w| w.trim_start_matches('+').to_string())
        .collect()
}

impl CgroupManager for V2Manager {
    fn version(&self) -> Version {
        Version::V2
    }

    fn driver(&self) -> Driver {
        self.driver
    }

    fn exists(&self, name: &CgroupName) -> bool {
        self.path(name).is_dir()
    }

    fn create(&self, name: &CgroupName, config: &ResourceConfig) -> Result<(), Error> {
        fsio::mkdir_all(&self.path(name))?;
        self.enable_controllers(name)?;
        self.apply(name, config)
    }

    fn update(&self, name: &CgroupName, config: &ResourceConfig) -> Result<(), Error> {
        self.enable_controllers(name)?;
        self.apply(name, config)
    }

    fn destroy(&self, name: &CgroupName) -> Result<(), Error> {
        fsio::remove_tree(&self.path(name))
    }

    fn remove_if_empty(&self, name: &CgroupName) -> bool {
        fsio::rmdir_once(&self.path(name))
    }

    fn pids(&self, name: &CgroupName) -> Result<Vec<i32>, Error> {
        fsio::pids_recursive(&self.path(name))
    }

    /// `cgroup.kill` (Linux 5.14+) kills the whole subtree at once; else signal the pids.
    fn kill_all(&self, name: &CgroupName) -> Result<usize, Error> {
        let kill_file = self.path(name).join("cgroup.kill");
        if kill_file.exists() {
            let count = self.pids(name)?.len();
            fsio::write(&kill_file, "1")?;
            return Ok(count);
        }
        fsio::kill_rounds(|| self.pids(name))
    }

    fn usage(&self, name: &CgroupName) -> Result<Usage, Error> {
        let dir = self.existing(name)?;
        let mut u = Usage::default();
        // cpu.stat's usage lines are there in every cgroup, with or without the cpu controller.
        let s = stat::parse_flat_keyed(&fsio::read(&dir.join("cpu.stat"))?);
        let get = |k: &str| s.get(k).copied().unwrap_or(0);
        u.cpu_usage_ns = get("usage_usec").saturating_mul(1000);
        u.cpu_user_ns = get("user_usec").saturating_mul(1000);
        u.cpu_system_ns = get("system_usec").saturating_mul(1000);
        u.cpu_periods = get("nr_periods");
        u.cpu_throttled_periods = get("nr_throttled");
        u.cpu_throttled_ns = get("throttled_usec").saturating_mul(1000);
        // cpu.max only where the cpu controller is enabled (never in the root).
        if let Some(text) = fsio::read_optional(&dir.join("cpu.max"))? {
            let (quota, _) = stat::parse_cpu_max(&text).map_err(|what| Error::Parse {
                path: dir.join("cpu.max"),
                what,
            })?;
            u.cpu_quota_us = u64::try_from(quota).ok();
        }
        // Memory files exist only where the memory controller is enabled. With it, the root
        // has memory.stat but no memory.current: its usage is the machine's, from /proc/meminfo
        // (libcontainer `fs2/memory.go` rootStatsFromMeminfo, which cAdvisor reports for a
        // kubelet or runtime that runs in the root cgroup). A hybrid host's unified mount has
        // no memory controller, and no memory.stat in its root either.
        let current = match fsio::read_u64_optional(&dir.join("memory.current"))? {
            Some(current) => Some(current),
            None if name.is_root() && dir.join("memory.stat").is_file() => {
                Some(self.root_memory_usage()?)
            }
            None => None,
        };
        if let Some(current) = current {
            u.memory_usage_bytes = current;
            let s = stat::parse_flat_keyed(&fsio::read(&dir.join("memory.stat"))?);
            let get = |k: &str| s.get(k).copied().unwrap_or(0);
            u.memory_working_set_bytes = stat::working_set(current, get("inactive_file"));
            u.memory_rss_bytes = get("anon");
            u.memory_cache_bytes = get("file");
            u.memory_page_faults = get("pgfault");
            u.memory_major_page_faults = get("pgmajfault");
            u.memory_limit_bytes =
                fsio::read_max_optional(&dir, "memory.max")?.and_then(|v| u64::try_from(v).ok());
        }
        u.pids_current = fsio::read_u64_optional(&dir.join("pids.current"))?;
        u.pids_limit =
            fsio::read_max_optional(&dir, "pids.max")?.and_then(|v| u64::try_from(v).ok());
        u.cpu_pressure = read_psi(&dir, "cpu.pressure").ok().flatten();
        u.memory_pressure = read_psi(&dir, "memory.pressure").ok().flatten();
        u.io_pressure = read_psi(&dir, "io.pressure").ok().flatten();
        Ok(u)
    }

    fn created(&self, name: &CgroupName) -> Option<std::time::SystemTime> {
        crate::oldest_mtime([self.path(name)])
    }

    fn resource_config(&self, name: &CgroupName) -> Result<ResourceConfig, Error> {
        let dir = self.existing(name)?;
        let mut c = ResourceConfig {
            memory_limit: fsio::read_max_optional(&dir, "memory.max")?,
            cpu_shares: fsio::read_u64_optional(&dir.join("cpu.weight"))?
                .map(crate::cpu_weight_to_shares),
            pids_limit: fsio::read_max_optional(&dir, "pids.max")?,
            ..Default::default()
        };
        let path = dir.join("cpu.max");
        if let Some(text) = fsio::read_optional(&path)? {
            let (quota, period) =
                stat::parse_cpu_max(&text).map_err(|what| Error::Parse { path, what })?;
            c.cpu_quota = Some(quota);
            c.cpu_period = Some(period);
        }
        for size in self.hugetlb_page_sizes() {
            let file = format!("hugetlb.{}.max", crate::hugetlb_size_name(size));
            if let Some(limit) = fsio::read_max_optional(&dir, &file)? {
                c.hugetlb_limits.insert(size, limit);
            }
        }
        let read =
            |f: &str| fsio::read_optional(&dir.join(f)).map(|o| o.map(|s| s.trim().to_string()));
        c.cpuset_cpus = read("cpuset.cpus")?;
        c.cpuset_mems = read("cpuset.mems")?;
        Ok(c)
    }

    fn children(&self, name: &CgroupName) -> Result<Vec<String>, Error> {
        fsio::child_dirs(&self.path(name))
    }

    fn hugetlb_page_sizes(&self) -> Vec<u64> {
        let offered = fsio::read_optional(&self.mount.join("cgroup.controllers"))
            .ok()
            .flatten()
            .unwrap_or_default();
        if offered.split_whitespace().any(|c| c == "hugetlb") {
            crate::kernel_hugepage_sizes(&self.hugepages_dir)
        } else {
            Vec::new()
        }
    }

    fn add_process(&self, name: &CgroupName, pid: i32) -> Result<(), Error> {
        fsio::write(&self.path(name).join("cgroup.procs"), &pid.to_string())
    }
}

#[cfg(test)]
#[path = "v2_tests.rs"]
mod tests;
