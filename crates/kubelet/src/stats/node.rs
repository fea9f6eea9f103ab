//! The node's CPU and memory as upstream reports them (cAdvisor's root container): cgroup v1's
//! `cpuacct.usage` and `memory.usage_in_bytes - total_inactive_file`; on cgroup v2 the root
//! cgroup's `cpu.stat` and, as the root has no `memory.current`, /proc/meminfo's
//! `MemTotal - MemFree - Inactive(file)` (what cAdvisor computes there too).

use std::path::Path;

/// One sample of the node's usage.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeUsage {
    /// Unix nanoseconds of the sample.
    pub timestamp_ns: i64,
    pub cpu_core_nanoseconds: u64,
    pub memory_working_set_bytes: u64,
    /// The machine's memory (`MemTotal`); upstream's node `availableBytes` is it less the
    /// working set.
    pub memory_capacity_bytes: Option<u64>,
}

/// Errors reading the node's usage, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum NodeStatsError {
    #[error("read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: no {what} in it")]
    Missing { path: String, what: &'static str },
}

fn read(path: &str) -> Result<String, NodeStatsError> {
    std::fs::read_to_string(path).map_err(|source| NodeStatsError::Read {
        path: path.into(),
        source,
    })
}

/// The machine's memory, from /proc/meminfo's `MemTotal`: node status's capacity
/// (`node::machine`) and the cAdvisor machine info both read it here (upstream: cAdvisor's
/// `machine.GetMachineMemoryCapacity`).
pub(crate) fn memory_capacity() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| cgroups::stat::meminfo_kib(&m, "MemTotal"))
        .map(|kib| kib * 1024)
}

fn missing(path: &str, what: &'static str) -> NodeStatsError {
    NodeStatsError::Missing {
        path: path.into(),
        what,
    }
}

fn cpu_ns(root: &Path) -> Result<u64, NodeStatsError> {
    let v1 = root.join("cpu,cpuacct/cpuacct.usage");
    let v1_alt = root.join("cpuacct/cpuacct.usage");
    for p in [v1, v1_alt] {
        if p.exists() {
            let path = p.display().to_string();
            return cgroups::stat::parse_u64(&read(&path)?)
                .map_err(|_| missing(&path, "CPU nanoseconds"));
        }
    }
    let path = root.join("cpu.stat").display().to_string();
    let usec = cgroups::stat::value_by_key(&read(&path)?, "usage_usec")
        .ok_or_else(|| missing(&path, "usage_usec"))?;
    Ok(usec * 1000)
}

fn memory_working_set(root: &Path) -> Result<u64, NodeStatsError> {
    let usage = root.join("memory/memory.usage_in_bytes");
    if usage.exists() {
        let path = usage.display().to_string();
        let used = cgroups::stat::parse_u64(&read(&path)?).map_err(|_| missing(&path, "bytes"))?;
        let stat = root.join("memory/memory.stat").display().to_string();
        let inactive =
            cgroups::stat::value_by_key(&read(&stat)?, "total_inactive_file").unwrap_or(0);
        return Ok(used.saturating_sub(inactive));
    }
    let path = "/proc/meminfo";
    let info = read(path)?;
    let kib =
        |k: &'static str| cgroups::stat::meminfo_kib(&info, k).ok_or_else(|| missing(path, k));
    let used = kib("MemTotal")?.saturating_sub(kib("MemFree")?);
    Ok(used.saturating_sub(kib("Inactive(file)").unwrap_or(0)) * 1024)
}

/// The node's usage now, read from the cgroup hierarchy at /sys/fs/cgroup.
pub fn node_usage() -> Result<NodeUsage, NodeStatsError> {
    let root = Path::new("/sys/fs/cgroup");
    Ok(NodeUsage {
        timestamp_ns: super::now_ns(),
        cpu_core_nanoseconds: cpu_ns(root)?,
        memory_working_set_bytes: memory_working_set(root)?,
        memory_capacity_bytes: memory_capacity(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_of_stat_files() {
        assert_eq!(
            cgroups::stat::value_by_key("usage_usec 123\nuser_usec 7\n", "usage_usec"),
            Some(123)
        );
        assert_eq!(
            cgroups::stat::value_by_key("cache 1\ntotal_inactive_file 42\n", "total_inactive_file"),
            Some(42)
        );
        assert_eq!(cgroups::stat::value_by_key("a 1\n", "b"), None);
    }

    #[test]
    fn this_node_has_usage() {
        let n = node_usage().unwrap();
        assert!(
            n.cpu_core_nanoseconds > 0 && n.memory_working_set_bytes > 0,
            "{n:?}"
        );
    }
}
