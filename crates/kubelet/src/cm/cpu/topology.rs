//! The machine's CPU topology (upstream `cpumanager/topology`, which reads it from cAdvisor's
//! machine info): every online logical CPU with its socket, core and NUMA node, read here from
//! `/sys/devices/system/cpu` and `/sys/devices/system/node` as cAdvisor does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::CpuSet;

/// Upstream `CPUInfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuInfo {
    pub numa_node: usize,
    pub socket: usize,
    /// Unique across sockets: the lowest thread ID of the core (upstream `getUniqueCoreID`).
    pub core: usize,
}

/// Upstream `CPUDetails`: CPU ID -> its place.
pub type CpuDetails = BTreeMap<usize, CpuInfo>;

/// Upstream `CPUTopology`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuTopology {
    pub num_cpus: usize,
    pub num_cores: usize,
    pub num_sockets: usize,
    pub details: CpuDetails,
}

/// Reading the topology failed (upstream `Discover`'s `could not detect number of cpus`).
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("could not detect number of cpus")]
    NoCpus,
}

fn select(
    d: &CpuDetails,
    keep: impl Fn(&CpuInfo) -> bool,
    pick: impl Fn(usize, &CpuInfo) -> usize,
) -> CpuSet {
    d.iter()
        .filter(|(_, i)| keep(i))
        .map(|(c, i)| pick(*c, i))
        .collect()
}

/// Upstream's `CPUDetails` queries.
pub trait Details {
    fn keep_only(&self, cpus: &CpuSet) -> CpuDetails;
    fn cpus(&self) -> CpuSet;
    fn sockets(&self) -> CpuSet;
    fn cores(&self) -> CpuSet;
    fn numa_nodes(&self) -> CpuSet;
    fn cpus_in_sockets(&self, ids: &[usize]) -> CpuSet;
    fn cpus_in_cores(&self, ids: &[usize]) -> CpuSet;
    fn cpus_in_numa_nodes(&self, ids: &[usize]) -> CpuSet;
    fn cores_in_sockets(&self, ids: &[usize]) -> CpuSet;
}

impl Details for CpuDetails {
    fn keep_only(&self, cpus: &CpuSet) -> CpuDetails {
        self.iter()
            .filter(|(c, _)| cpus.contains(**c))
            .map(|(c, i)| (*c, *i))
            .collect()
    }
    fn cpus(&self) -> CpuSet {
        self.keys().copied().collect()
    }
    fn sockets(&self) -> CpuSet {
        select(self, |_| true, |_, i| i.socket)
    }
    fn cores(&self) -> CpuSet {
        select(self, |_| true, |_, i| i.core)
    }
    fn numa_nodes(&self) -> CpuSet {
        select(self, |_| true, |_, i| i.numa_node)
    }
    fn cpus_in_sockets(&self, ids: &[usize]) -> CpuSet {
        select(self, |i| ids.contains(&i.socket), |c, _| c)
    }
    fn cpus_in_cores(&self, ids: &[usize]) -> CpuSet {
        select(self, |i| ids.contains(&i.core), |c, _| c)
    }
    fn cpus_in_numa_nodes(&self, ids: &[usize]) -> CpuSet {
        select(self, |i| ids.contains(&i.numa_node), |c, _| c)
    }
    fn cores_in_sockets(&self, ids: &[usize]) -> CpuSet {
        select(self, |i| ids.contains(&i.socket), |_, i| i.core)
    }
}

impl CpuTopology {
    /// From the details alone (cores and sockets counted from them).
    pub fn from_details(details: CpuDetails) -> CpuTopology {
        CpuTopology {
            num_cpus: details.len(),
            num_cores: details.cores().len(),
            num_sockets: details.sockets().len(),
            details,
        }
    }

    /// Upstream `CPUsPerCore`.
    pub fn cpus_per_core(&self) -> usize {
        self.num_cpus.checked_div(self.num_cores).unwrap_or(0)
    }

    /// Upstream `CPUsPerSocket`.
    pub fn cpus_per_socket(&self) -> usize {
        self.num_cpus.checked_div(self.num_sockets).unwrap_or(0)
    }

    /// Reads the online CPUs under `sys` (normally `/sys`): socket from
    /// `topology/physical_package_id`, core from the lowest of `topology/thread_siblings_list`,
    /// NUMA node from `devices/system/node/node<N>/cpulist` (node 0 on machines without NUMA).
    pub fn discover(sys: &Path) -> Result<CpuTopology, TopologyError> {
        let cpu_dir = sys.join("devices/system/cpu");
        let read = |p: &Path| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .map_err(|source| TopologyError::Io {
                    path: p.display().to_string(),
                    source,
                })
        };
        let parse_set = |p: &Path| -> Result<CpuSet, TopologyError> {
            let text = read(p)?;
            CpuSet::parse(&text).map_err(|e| TopologyError::Parse {
                path: p.display().to_string(),
                message: e.to_string(),
            })
        };
        let online = parse_set(&cpu_dir.join("online"))?;
        let mut numa: BTreeMap<usize, usize> = BTreeMap::new();
        let node_dir = sys.join("devices/system/node");
        if let Ok(rd) = std::fs::read_dir(&node_dir) {
            let mut nodes = BTreeSet::new();
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if let Some(id) = name
                    .strip_prefix("node")
                    .and_then(|n| n.parse::<usize>().ok())
                {
                    nodes.insert(id);
                }
            }
            for id in nodes {
                for cpu in parse_set(&node_dir.join(format!("node{id}/cpulist")))?.iter() {
                    numa.insert(cpu, id);
                }
            }
        }
        let mut details = CpuDetails::new();
        for cpu in online.iter() {
            let topo = cpu_dir.join(format!("cpu{cpu}/topology"));
            let socket_text = read(&topo.join("physical_package_id"))?;
            let socket = socket_text
                .parse::<i64>()
                .map_err(|e| TopologyError::Parse {
                    path: topo.join("physical_package_id").display().to_string(),
                    message: e.to_string(),
                })?;
            let siblings = parse_set(&topo.join("thread_siblings_list"))?;
            details.insert(
                cpu,
                CpuInfo {
                    numa_node: numa.get(&cpu).copied().unwrap_or(0),
                    // -1 on some virtual machines: one socket.
                    socket: usize::try_from(socket).unwrap_or(0),
                    core: siblings.iter().next().unwrap_or(cpu),
                },
            );
        }
        if details.is_empty() {
            return Err(TopologyError::NoCpus);
        }
        Ok(CpuTopology::from_details(details))
    }
}

/// The machine's NUMA node IDs (upstream's topology manager reads them from cAdvisor's
/// `Topology`): `node<N>` under `/sys/devices/system/node`, `[0]` without NUMA support.
pub fn numa_nodes(sys: &Path) -> Vec<usize> {
    let mut out: Vec<usize> = std::fs::read_dir(sys.join("devices/system/node"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .strip_prefix("node")
                        .and_then(|n| n.parse().ok())
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_unstable();
    if out.is_empty() {
        out.push(0);
    }
    out
}

/// Upstream's test topologies (`cpumanager/policy_test.go`), for the tables here.
#[cfg(test)]
pub mod fixtures {
    use super::*;

    fn topo(rows: &[(usize, usize, usize, usize)]) -> CpuTopology {
        CpuTopology::from_details(
            rows.iter()
                .map(|&(cpu, socket, core, numa)| {
                    (
                        cpu,
                        CpuInfo {
                            numa_node: numa,
                            socket,
                            core,
                        },
                    )
                })
                .collect(),
        )
    }

    /// `topoSingleSocketHT`: 1 socket, 4 cores, 2 threads each; siblings are (n, n+4).
    pub fn single_socket_ht() -> CpuTopology {
        topo(&[
            (0, 0, 0, 0),
            (1, 0, 1, 0),
            (2, 0, 2, 0),
            (3, 0, 3, 0),
            (4, 0, 0, 0),
            (5, 0, 1, 0),
            (6, 0, 2, 0),
            (7, 0, 3, 0),
        ])
    }

    /// `topoDualSocketHT`: 2 sockets, 3 cores each, 2 threads; siblings (n, n+6); socket 0 has
    /// cores 0, 2, 4.
    pub fn dual_socket_ht() -> CpuTopology {
        topo(&[
            (0, 0, 0, 0),
            (1, 1, 1, 1),
            (2, 0, 2, 0),
            (3, 1, 3, 1),
            (4, 0, 4, 0),
            (5, 1, 5, 1),
            (6, 0, 0, 0),
            (7, 1, 1, 1),
            (8, 0, 2, 0),
            (9, 1, 3, 1),
            (10, 0, 4, 0),
            (11, 1, 5, 1),
        ])
    }

    /// `topoDualSocketNoHT`: 2 sockets, 4 cores each, no SMT.
    pub fn dual_socket_no_ht() -> CpuTopology {
        topo(&[
            (0, 0, 0, 0),
            (1, 0, 1, 0),
            (2, 0, 2, 0),
            (3, 0, 3, 0),
            (4, 1, 4, 1),
            (5, 1, 5, 1),
            (6, 1, 6, 1),
            (7, 1, 7, 1),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovers_a_fake_sys_tree() {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path();
        let w = |p: &str, s: &str| {
            let p = sys.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, s).unwrap();
        };
        w("devices/system/cpu/online", "0-3\n");
        for (cpu, pkg, sib) in [
            (0, "0", "0,2"),
            (1, "1", "1,3"),
            (2, "0", "0,2"),
            (3, "1", "1,3"),
        ] {
            w(
                &format!("devices/system/cpu/cpu{cpu}/topology/physical_package_id"),
                pkg,
            );
            w(
                &format!("devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"),
                sib,
            );
        }
        w("devices/system/node/node0/cpulist", "0,2\n");
        w("devices/system/node/node1/cpulist", "1,3\n");
        let t = CpuTopology::discover(sys).unwrap();
        assert_eq!((t.num_cpus, t.num_cores, t.num_sockets), (4, 2, 2));
        assert_eq!(t.cpus_per_core(), 2);
        assert_eq!(
            t.details[&3],
            CpuInfo {
                numa_node: 1,
                socket: 1,
                core: 1
            }
        );
        assert_eq!(t.details.cpus_in_numa_nodes(&[0]).to_string(), "0,2");
    }

    #[test]
    fn this_machine_has_a_topology() {
        let t = CpuTopology::discover(Path::new("/sys")).unwrap();
        assert!(t.num_cpus >= 1 && t.num_cores >= 1 && t.num_sockets >= 1);
        assert_eq!(t.details.cpus().len(), t.num_cpus);
    }
}
