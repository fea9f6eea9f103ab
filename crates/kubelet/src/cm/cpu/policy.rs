//! Upstream `cpumanager/policy_static.go` and `state`: the shared pool (`defaultCpuSet`), the
//! reserved CPUs in it that are never handed out, and the exclusive assignments of Guaranteed
//! containers with integer CPU requests. Pure: the manager task owns a [`State`] and a
//! [`StaticPolicy`] and writes the checkpoint after each change.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::assignment::{take_by_topology, NotEnoughCpus};
use super::checkpoint::Checkpoint;
use super::topology::{CpuTopology, Details};
use super::CpuSet;
use crate::cm::topology::{self as tm, BitMask, TopologyHint};
use crate::podutil;
use crate::resources::{self, QosClass};

/// Upstream `PolicyStatic` / `PolicyNone` names, as written into the checkpoint.
pub const STATIC: &str = "static";
pub const NONE: &str = "none";

/// pod UID -> container name -> its exclusive CPUs (upstream `ContainerCPUAssignments`).
pub type Assignments = BTreeMap<String, BTreeMap<String, CpuSet>>;

/// Upstream `state.State`: the shared pool and the exclusive assignments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    pub default: CpuSet,
    pub assignments: Assignments,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("[cpumanager] unable to reserve the required amount of CPUs (size of {reserved} did not equal {wanted})")]
    Reserve { reserved: CpuSet, wanted: usize },
    /// Upstream `validateState`'s findings; the kubelet refuses to start on them.
    #[error("{0}")]
    InvalidState(String),
    #[error(transparent)]
    NotEnough(#[from] NotEnoughCpus),
    /// Upstream `SMTAlignmentError` (`full-pcpus-only`).
    #[error(
        "SMT Alignment Error: requested {requested} cpus not multiple cpus per core = {per_core}"
    )]
    SmtNotMultiple { requested: usize, per_core: usize },
    #[error("SMT Alignment Error: not enough free physical CPUs: available physical CPUs = {available}, requested CPUs = {requested}, CPUs per core = {per_core}")]
    SmtNotEnough {
        requested: usize,
        per_core: usize,
        available: usize,
    },
    #[error(
        "could not parse cpuset {set:?} for container {container:?} in pod {pod:?}: {message}"
    )]
    Parse {
        set: String,
        container: String,
        pod: String,
        message: String,
    },
}

impl PolicyError {
    /// The admission reason (upstream `admission.GetPodAdmitResult`): typed errors keep their
    /// type, everything else is `UnexpectedAdmissionError`.
    pub fn reason(&self) -> &'static str {
        match self {
            PolicyError::SmtNotMultiple { .. } | PolicyError::SmtNotEnough { .. } => {
                "SMTAlignmentError"
            }
            _ => "UnexpectedAdmissionError",
        }
    }
}

impl State {
    pub fn get(&self, pod: &str, container: &str) -> Option<&CpuSet> {
        self.assignments.get(pod)?.get(container)
    }

    /// Upstream `GetCPUSetOrDefault`.
    pub fn get_or_default(&self, pod: &str, container: &str) -> CpuSet {
        self.get(pod, container)
            .cloned()
            .unwrap_or_else(|| self.default.clone())
    }

    fn set(&mut self, pod: &str, container: &str, cpus: CpuSet) {
        self.assignments
            .entry(pod.to_string())
            .or_default()
            .insert(container.to_string(), cpus);
    }

    /// Upstream `Delete`: the pod's entry goes with its last container.
    fn delete(&mut self, pod: &str, container: &str) {
        if let Some(m) = self.assignments.get_mut(pod) {
            m.remove(container);
            if m.is_empty() {
                self.assignments.remove(pod);
            }
        }
    }

    /// Upstream `storeState`'s checkpoint.
    pub fn to_checkpoint(&self, policy: &str) -> Checkpoint {
        Checkpoint {
            policy_name: policy.to_string(),
            default_cpu_set: self.default.to_string(),
            entries: self
                .assignments
                .iter()
                .map(|(p, m)| {
                    (
                        p.clone(),
                        m.iter().map(|(c, s)| (c.clone(), s.to_string())).collect(),
                    )
                })
                .collect(),
        }
    }

    /// Upstream `restoreState` after the policy name was checked.
    pub fn from_checkpoint(cp: &Checkpoint) -> Result<State, PolicyError> {
        let default = CpuSet::parse(&cp.default_cpu_set).map_err(|e| PolicyError::Parse {
            set: cp.default_cpu_set.clone(),
            container: String::new(),
            pod: String::new(),
            message: e.to_string(),
        })?;
        let mut st = State {
            default,
            assignments: Assignments::new(),
        };
        for (pod, m) in &cp.entries {
            for (c, text) in m {
                let set = CpuSet::parse(text).map_err(|e| PolicyError::Parse {
                    set: text.clone(),
                    container: c.clone(),
                    pod: pod.clone(),
                    message: e.to_string(),
                })?;
                st.set(pod, c, set);
            }
        }
        Ok(st)
    }
}

/// Upstream `staticPolicy`.
#[derive(Debug, Clone)]
pub struct StaticPolicy {
    pub topology: CpuTopology,
    pub reserved: CpuSet,
    pub full_pcpus_only: bool,
    /// Upstream `cpusToReuse`: CPUs of a pod's init containers its later containers may take.
    cpus_to_reuse: BTreeMap<String, CpuSet>,
}

/// Upstream `guaranteedCPUs`: the container's whole CPUs when its pod is Guaranteed and its CPU
/// request is an integer, else 0.
pub fn guaranteed_cpus(pod: &Pod, c: &Container) -> usize {
    if resources::pod_qos(pod) != QosClass::Guaranteed {
        return 0;
    }
    let r = c.resources.as_ref();
    let q = r
        .and_then(|r| r.requests.as_ref())
        .and_then(|m| m.get("cpu"))
        .or_else(|| r.and_then(|r| r.limits.as_ref()).and_then(|m| m.get("cpu")));
    match q.and_then(|q| resources::parse_milli(&q.0)) {
        Some(m) if m > 0 && m % 1000 == 0 => usize::try_from(m / 1000).unwrap_or(0),
        _ => 0,
    }
}

/// Init containers then regular ones (upstream's allocation order).
fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    podutil::init_containers(pod)
        .iter()
        .chain(podutil::containers(pod).iter())
}

fn is_restartable_init(pod: &Pod, c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
        && podutil::init_containers(pod)
            .iter()
            .any(|i| i.name == c.name)
}

impl StaticPolicy {
    /// Upstream `NewStaticPolicy`: the reserved set is `reservedSystemCPUs` when given, else
    /// the first `num_reserved` CPUs by topology (low-numbered cores first).
    pub fn new(
        topology: CpuTopology,
        num_reserved: usize,
        reserved_cpus: &CpuSet,
        full_pcpus_only: bool,
    ) -> Result<StaticPolicy, PolicyError> {
        let all = topology.details.cpus();
        let reserved = if !reserved_cpus.is_empty() {
            reserved_cpus.clone()
        } else {
            take_by_topology(&topology, &all, num_reserved).unwrap_or_default()
        };
        if reserved.len() != num_reserved {
            return Err(PolicyError::Reserve {
                reserved,
                wanted: num_reserved,
            });
        }
        Ok(StaticPolicy {
            topology,
            reserved,
            full_pcpus_only,
            cpus_to_reuse: BTreeMap::new(),
        })
    }

    /// Upstream `validateState`: an empty state gets every CPU as its pool; a restored one
    /// must keep the reserved CPUs shared, no assignment in the pool, and cover exactly this
    /// machine's CPUs.
    pub fn start(&self, s: &mut State) -> Result<(), PolicyError> {
        let all = self.topology.details.cpus();
        if s.default.is_empty() {
            if !s.assignments.is_empty() {
                return Err(PolicyError::InvalidState(
                    "default cpuset cannot be empty".into(),
                ));
            }
            s.default = all;
            return Ok(());
        }
        if self.reserved.intersection(&s.default) != self.reserved {
            return Err(PolicyError::InvalidState(format!(
                "not all reserved cpus: \"{}\" are present in defaultCpuSet: \"{}\"",
                self.reserved, s.default
            )));
        }
        let mut known = s.default.clone();
        for (pod, m) in &s.assignments {
            for (c, set) in m {
                if !s.default.intersection(set).is_empty() {
                    return Err(PolicyError::InvalidState(format!(
                        "pod: {pod}, container: {c} cpuset: \"{set}\" overlaps with default cpuset \"{}\"",
                        s.default
                    )));
                }
                known = known.union(set);
            }
        }
        if known != all {
            return Err(PolicyError::InvalidState(format!(
                "current set of available CPUs \"{all}\" doesn't match with CPUs in state \"{known}\""
            )));
        }
        Ok(())
    }

    /// Upstream `GetAllocatableCPUs`: every CPU but the reserved ones.
    pub fn allocatable(&self) -> CpuSet {
        self.topology.details.cpus().difference(&self.reserved)
    }

    /// Upstream `assignableCPUs`: the pool less the reserved CPUs.
    fn assignable(&self, s: &State) -> CpuSet {
        s.default.difference(&self.reserved)
    }

    /// CPUs of whole free cores among the assignable ones (upstream `GetAvailablePhysicalCPUs`).
    fn available_physical(&self, s: &State) -> usize {
        let avail = self.assignable(s);
        let d = &self.topology.details;
        d.cores()
            .iter()
            .map(|core| d.cpus_in_cores(&[core]))
            .filter(|cpus| cpus.is_subset(&avail))
            .map(|cpus| cpus.len())
            .sum()
    }

    fn update_cpus_to_reuse(&mut self, pod: &Pod, c: &Container, set: &CpuSet) {
        let uid = podutil::uid(pod).to_string();
        self.cpus_to_reuse.retain(|k, _| *k == uid);
        let reuse = self.cpus_to_reuse.entry(uid).or_default();
        let is_init = podutil::init_containers(pod)
            .iter()
            .any(|i| i.name == c.name);
        *reuse = if is_init && !is_restartable_init(pod, c) {
            reuse.union(set)
        } else {
            reuse.difference(set)
        };
    }

    /// Upstream `Allocate` for one container: exclusive CPUs for a Guaranteed container with an
    /// integer request, aligned to `affinity` (the topology manager's NUMA nodes) first; shared
    /// containers need nothing.
    pub fn allocate(
        &mut self,
        s: &mut State,
        pod: &Pod,
        c: &Container,
        affinity: Option<BitMask>,
    ) -> Result<Option<CpuSet>, PolicyError> {
        let n = guaranteed_cpus(pod, c);
        if n == 0 {
            return Ok(None);
        }
        let uid = podutil::uid(pod).to_string();
        if let Some(set) = s.get(&uid, &c.name).cloned() {
            self.update_cpus_to_reuse(pod, c, &set);
            return Ok(Some(set));
        }
        if self.full_pcpus_only {
            let per_core = self.topology.cpus_per_core().max(1);
            if !n.is_multiple_of(per_core) {
                return Err(PolicyError::SmtNotMultiple {
                    requested: n,
                    per_core,
                });
            }
            let available = self.available_physical(s);
            if n > available {
                return Err(PolicyError::SmtNotEnough {
                    requested: n,
                    per_core,
                    available,
                });
            }
        }
        let reuse = self.cpus_to_reuse.get(&uid).cloned().unwrap_or_default();
        let set = self.allocate_cpus(s, n, affinity, &reuse)?;
        s.set(&uid, &c.name, set.clone());
        self.update_cpus_to_reuse(pod, c, &set);
        Ok(Some(set))
    }

    /// Upstream `allocateCPUs`.
    fn allocate_cpus(
        &self,
        s: &mut State,
        n: usize,
        affinity: Option<BitMask>,
        reusable: &CpuSet,
    ) -> Result<CpuSet, PolicyError> {
        let assignable = self.assignable(s).union(reusable);
        let mut result = CpuSet::new();
        if let Some(mask) = affinity {
            let aligned =
                assignable.intersection(&self.topology.details.cpus_in_numa_nodes(&mask.bits()));
            let take = n.min(aligned.len());
            result = take_by_topology(&self.topology, &aligned, take)?;
        }
        let rest = take_by_topology(
            &self.topology,
            &assignable.difference(&result),
            n - result.len(),
        )?;
        result = result.union(&rest);
        s.default = s.default.difference(&result);
        Ok(result)
    }

    /// Upstream `RemoveContainer`: its CPUs go back to the pool, except those a sibling of the
    /// same pod still holds (an app container reusing its init container's CPUs).
    pub fn remove_container(&mut self, s: &mut State, pod: &str, container: &str) {
        let Some(set) = s.get(pod, container).cloned() else {
            return;
        };
        s.delete(pod, container);
        let in_use = s
            .assignments
            .get(pod)
            .map(|m| m.values().fold(CpuSet::new(), |a, b| a.union(b)))
            .unwrap_or_default();
        s.default = s.default.union(&set.difference(&in_use));
    }

    /// Upstream `GetTopologyHints`: None is "no preference" (not exclusive), `Some(vec![])`
    /// "cannot be satisfied".
    pub fn hints(&self, s: &State, pod: &Pod, c: &Container) -> Option<Vec<TopologyHint>> {
        let n = guaranteed_cpus(pod, c);
        if n == 0 {
            return None;
        }
        let uid = podutil::uid(pod);
        if let Some(set) = s.get(uid, &c.name) {
            if set.len() != n {
                return Some(Vec::new());
            }
            return Some(self.generate_hints(set, &CpuSet::new(), n));
        }
        let reuse = self.cpus_to_reuse.get(uid).cloned().unwrap_or_default();
        Some(self.generate_hints(&self.assignable(s), &reuse, n))
    }

    /// Upstream `GetPodTopologyHints` (scope `pod`): the pod's Guaranteed CPUs (the largest init
    /// container or the sum of the others).
    pub fn pod_hints(&self, s: &State, pod: &Pod) -> Option<Vec<TopologyHint>> {
        let init = podutil::init_containers(pod)
            .iter()
            .map(|c| guaranteed_cpus(pod, c))
            .max()
            .unwrap_or(0);
        let app: usize = podutil::containers(pod)
            .iter()
            .map(|c| guaranteed_cpus(pod, c))
            .sum();
        let n = init.max(app);
        if n == 0 {
            return None;
        }
        let uid = podutil::uid(pod);
        let mut assigned = CpuSet::new();
        for c in all_containers(pod) {
            if let Some(set) = s.get(uid, &c.name) {
                if set.len() != guaranteed_cpus(pod, c) {
                    return Some(Vec::new());
                }
                assigned = assigned.union(set);
            }
        }
        if assigned.len() == n {
            return Some(self.generate_hints(&assigned, &CpuSet::new(), n));
        }
        let reuse = self
            .cpus_to_reuse
            .get(uid)
            .cloned()
            .unwrap_or_default()
            .union(&assigned);
        Some(self.generate_hints(&self.assignable(s), &reuse, n))
    }

    /// Upstream `generateCPUTopologyHints`.
    fn generate_hints(&self, available: &CpuSet, reusable: &CpuSet, n: usize) -> Vec<TopologyHint> {
        let d = &self.topology.details;
        let nodes = d.numa_nodes().to_vec();
        let node_of = |cpu: usize| d.get(&cpu).map(|i| i.numa_node).unwrap_or(0);
        tm::generate_hints(
            &nodes,
            n,
            |mask| {
                if reusable.iter().any(|c| !mask.is_set(node_of(c))) {
                    return None;
                }
                Some(
                    reusable.len()
                        + available
                            .iter()
                            .filter(|c| mask.is_set(node_of(*c)))
                            .count(),
                )
            },
            |mask| d.cpus_in_numa_nodes(&mask.bits()).len(),
        )
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
