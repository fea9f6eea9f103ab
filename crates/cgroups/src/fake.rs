//! An in-memory [`CgroupManager`] for the kubelet's in-process tests (feature `fake`; never in the
//! binary). It keeps cgroup name -> config, a log of the mutating calls ("create /kubepods/burstable",
//! "update …", "destroy …", "kill_all …", "add_process … 42"), and usage and pids the test sets.
//! Like the kernel, `destroy` of a cgroup that still holds pids fails with EBUSY. The counterpart
//! upstream is `pkg/kubelet/cm/fake_cgroup_manager` style doubles in the cm tests.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use crate::{CgroupManager, CgroupName, Driver, Error, ResourceConfig, Usage, Version};

#[derive(Debug, Default)]
struct State {
    cgroups: BTreeMap<CgroupName, ResourceConfig>,
    calls: Vec<String>,
    usage: BTreeMap<CgroupName, Usage>,
    pids: BTreeMap<CgroupName, Vec<i32>>,
    hugetlb_page_sizes: Vec<u64>,
    /// (operation, cgroup) -> message returned as [`Error::Injected`] until cleared.
    failures: BTreeMap<(String, CgroupName), String>,
}

/// See the module docs.
#[derive(Debug)]
pub struct FakeManager {
    version: Version,
    driver: Driver,
    state: Mutex<State>,
}

impl Default for FakeManager {
    fn default() -> Self {
        FakeManager::new(Version::V2, Driver::Cgroupfs)
    }
}

impl FakeManager {
    pub fn new(version: Version, driver: Driver) -> Self {
        FakeManager {
            version,
            driver,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock leaves consistent data; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The mutating calls so far, in order.
    pub fn calls(&self) -> Vec<String> {
        self.state().calls.clone()
    }

    /// The calls so far, clearing the log.
    pub fn take_calls(&self) -> Vec<String> {
        std::mem::take(&mut self.state().calls)
    }

    /// The config a cgroup holds, `None` when it does not exist.
    pub fn config(&self, name: &CgroupName) -> Option<ResourceConfig> {
        self.state().cgroups.get(name).cloned()
    }

    /// Every existing cgroup, sorted.
    pub fn cgroups(&self) -> Vec<CgroupName> {
        self.state().cgroups.keys().cloned().collect()
    }

    /// Makes a cgroup exist (as if left from an earlier run), without logging a call.
    pub fn insert(&self, name: CgroupName, config: ResourceConfig) {
        self.state().cgroups.insert(name, config);
    }

    pub fn set_usage(&self, name: &CgroupName, usage: Usage) {
        self.state().usage.insert(name.clone(), usage);
    }

    /// The processes directly in `name`.
    pub fn set_pids(&self, name: &CgroupName, pids: Vec<i32>) {
        self.state().pids.insert(name.clone(), pids);
    }

    pub fn set_hugetlb_page_sizes(&self, sizes: Vec<u64>) {
        self.state().hugetlb_page_sizes = sizes;
    }

    /// From now on, `op` ("create", "update", "destroy", "pids", "kill_all", "usage",
    /// "resource_config", "children", "add_process") on `name` fails with `message`.
    /// "create_half" fails a create half-way, as a failed limit write does: the cgroup (and its
    /// ancestors) exist afterwards, without the config.
    pub fn fail(&self, op: &str, name: &CgroupName, message: &str) {
        self.state()
            .failures
            .insert((op.to_string(), name.clone()), message.to_string());
    }

    pub fn clear_failures(&self) {
        self.state().failures.clear();
    }

    fn check(state: &State, op: &str, name: &CgroupName) -> Result<(), Error> {
        match state.failures.get(&(op.to_string(), name.clone())) {
            Some(msg) => Err(Error::Injected(msg.clone())),
            None => Ok(()),
        }
    }

    fn not_found(name: &CgroupName) -> Error {
        Error::NotFound {
            path: PathBuf::from(name.to_cgroupfs()),
        }
    }

    fn exists_in(state: &State, name: &CgroupName) -> bool {
        name.is_root() || state.cgroups.contains_key(name)
    }

    fn subtree_pids(state: &State, name: &CgroupName) -> Vec<i32> {
        let mut pids: Vec<i32> = state
            .pids
            .iter()
            .filter(|(n, _)| n.is_within(name))
            .flat_map(|(_, p)| p.iter().copied())
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}

/// Applies the Some fields of `from` onto `to` (what `update` does to the kernel files).
fn merge(to: &mut ResourceConfig, from: &ResourceConfig) {
    fn set<T: Clone>(to: &mut Option<T>, from: &Option<T>) {
        if from.is_some() {
            to.clone_from(from);
        }
    }
    set(&mut to.memory_limit, &from.memory_limit);
    set(&mut to.cpu_shares, &from.cpu_shares);
    set(&mut to.cpu_quota, &from.cpu_quota);
    set(&mut to.cpu_period, &from.cpu_period);
    set(&mut to.pids_limit, &from.pids_limit);
    set(&mut to.cpuset_cpus, &from.cpuset_cpus);
    set(&mut to.cpuset_mems, &from.cpuset_mems);
    to.hugetlb_limits
        .extend(from.hugetlb_limits.iter().map(|(k, v)| (*k, *v)));
}

impl CgroupManager for FakeManager {
    fn version(&self) -> Version {
        self.version
    }

    fn driver(&self) -> Driver {
        self.driver
    }

    fn exists(&self, name: &CgroupName) -> bool {
        Self::exists_in(&self.state(), name)
    }

    fn create(&self, name: &CgroupName, config: &ResourceConfig) -> Result<(), Error> {
        let mut s = self.state();
        s.calls.push(format!("create {}", name.to_cgroupfs()));
        Self::check(&s, "create", name)?;
        // mkdir -p: the ancestors come into being too.
        let mut ancestor = name.parent();
        while let Some(a) = ancestor.filter(|a| !a.is_root()) {
            s.cgroups.entry(a.clone()).or_default();
            ancestor = a.parent();
        }
        if !name.is_root() && Self::check(&s, "create_half", name).is_err() {
            s.cgroups.entry(name.clone()).or_default();
            return Self::check(&s, "create_half", name);
        }
        if !name.is_root() {
            merge(s.cgroups.entry(name.clone()).or_default(), config);
        }
        Ok(())
    }

    fn update(&self, name: &CgroupName, config: &ResourceConfig) -> Result<(), Error> {
        let mut s = self.state();
        s.calls.push(format!("update {}", name.to_cgroupfs()));
        Self::check(&s, "update", name)?;
        match s.cgroups.get_mut(name) {
            Some(c) => {
                merge(c, config);
                Ok(())
            }
            None if name.is_root() => Ok(()),
            None => Err(Self::not_found(name)),
        }
    }

    /// As the kernel's rmdir: refused while a process or a child cgroup is in it.
    fn remove_if_empty(&self, name: &CgroupName) -> bool {
        let mut s = self.state();
        s.calls
            .push(format!("remove_if_empty {}", name.to_cgroupfs()));
        if Self::check(&s, "remove_if_empty", name).is_err() {
            return false;
        }
        let child = s.cgroups.keys().any(|n| n != name && n.is_within(name));
        if child || !Self::subtree_pids(&s, name).is_empty() {
            return false;
        }
        s.cgroups.remove(name);
        s.usage.remove(name);
        s.pids.remove(name);
        true
    }

    fn destroy(&self, name: &CgroupName) -> Result<(), Error> {
        let mut s = self.state();
        s.calls.push(format!("destroy {}", name.to_cgroupfs()));
        Self::check(&s, "destroy", name)?;
        if !Self::subtree_pids(&s, name).is_empty() {
            return Err(Error::Rmdir {
                path: PathBuf::from(name.to_cgroupfs()),
                source: std::io::Error::from_raw_os_error(nix::errno::Errno::EBUSY as i32),
            });
        }
        s.cgroups.retain(|n, _| !n.is_within(name));
        s.usage.retain(|n, _| !n.is_within(name));
        s.pids.retain(|n, _| !n.is_within(name));
        Ok(())
    }

    fn pids(&self, name: &CgroupName) -> Result<Vec<i32>, Error> {
        let s = self.state();
        Self::check(&s, "pids", name)?;
        Ok(Self::subtree_pids(&s, name))
    }

    fn kill_all(&self, name: &CgroupName) -> Result<usize, Error> {
        let mut s = self.state();
        s.calls.push(format!("kill_all {}", name.to_cgroupfs()));
        Self::check(&s, "kill_all", name)?;
        let count = Self::subtree_pids(&s, name).len();
        s.pids.retain(|n, _| !n.is_within(name));
        Ok(count)
    }

    fn usage(&self, name: &CgroupName) -> Result<Usage, Error> {
        let s = self.state();
        Self::check(&s, "usage", name)?;
        if !Self::exists_in(&s, name) {
            return Err(Self::not_found(name));
        }
        Ok(s.usage.get(name).cloned().unwrap_or_default())
    }

    fn resource_config(&self, name: &CgroupName) -> Result<ResourceConfig, Error> {
        let s = self.state();
        Self::check(&s, "resource_config", name)?;
        match s.cgroups.get(name) {
            Some(c) => Ok(c.clone()),
            None if name.is_root() => Ok(ResourceConfig::default()),
            None => Err(Self::not_found(name)),
        }
    }

    fn children(&self, name: &CgroupName) -> Result<Vec<String>, Error> {
        let s = self.state();
        Self::check(&s, "children", name)?;
        if !Self::exists_in(&s, name) {
            return Err(Self::not_found(name));
        }
        let depth = name.parts().len() + 1;
        Ok(s.cgroups
            .keys()
            .filter(|n| n.parts().len() == depth && n.is_within(name))
            .filter_map(|n| self.name(n).rsplit('/').next().map(str::to_string))
            .collect())
    }

    fn hugetlb_page_sizes(&self) -> Vec<u64> {
        self.state().hugetlb_page_sizes.clone()
    }

    fn add_process(&self, name: &CgroupName, pid: i32) -> Result<(), Error> {
        let mut s = self.state();
        s.calls
            .push(format!("add_process {} {pid}", name.to_cgroupfs()));
        Self::check(&s, "add_process", name)?;
        if !Self::exists_in(&s, name) {
            return Err(Self::not_found(name));
        }
        s.pids.entry(name.clone()).or_default().push(pid);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_calls_and_behaves_like_a_tree() -> Result<(), Error> {
        let m = FakeManager::default();
        let pod = CgroupName::new(["kubepods", "burstable", "pod1"]);
        m.create(
            &pod,
            &ResourceConfig {
                cpu_shares: Some(2),
                ..Default::default()
            },
        )?;
        assert!(m.exists(&CgroupName::new(["kubepods", "burstable"])));
        m.update(
            &pod,
            &ResourceConfig {
                memory_limit: Some(10),
                ..Default::default()
            },
        )?;
        assert_eq!(
            m.resource_config(&pod)?,
            ResourceConfig {
                cpu_shares: Some(2),
                memory_limit: Some(10),
                ..Default::default()
            }
        );
        assert!(m
            .add_process(&pod.child("c"), 5)
            .err()
            .is_some_and(|e| e.is_not_found()));
        m.create(&pod.child("c"), &ResourceConfig::default())?;
        m.add_process(&pod.child("c"), 5)?;
        m.set_pids(&pod, vec![4]);
        assert_eq!(m.pids(&pod)?, vec![4, 5]);
        assert_eq!(
            m.children(&CgroupName::new(["kubepods", "burstable"]))?,
            vec!["pod1"]
        );
        let busy = m
            .destroy(&pod)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            busy.starts_with("rmdir /kubepods/burstable/pod1: "),
            "{busy}"
        );
        assert_eq!(m.kill_all(&pod)?, 2);
        m.destroy(&pod)?;
        assert!(!m.exists(&pod) && !m.exists(&pod.child("c")));
        assert_eq!(
            m.take_calls(),
            vec![
                "create /kubepods/burstable/pod1",
                "update /kubepods/burstable/pod1",
                "add_process /kubepods/burstable/pod1/c 5",
                "create /kubepods/burstable/pod1/c",
                "add_process /kubepods/burstable/pod1/c 5",
                "destroy /kubepods/burstable/pod1",
                "kill_all /kubepods/burstable/pod1",
                "destroy /kubepods/burstable/pod1",
            ]
        );
        assert!(m.calls().is_empty());
        Ok(())
    }

    #[test]
    fn injected_failures_usage_and_systemd_children() -> Result<(), Error> {
        let m = FakeManager::new(Version::V1, Driver::Systemd);
        let qos = CgroupName::new(["kubepods", "besteffort"]);
        m.create(&qos.child("pod-a"), &ResourceConfig::default())?;
        assert_eq!(m.children(&qos)?, vec!["kubepods-besteffort-pod_a.slice"]);
        m.set_usage(
            &qos,
            Usage {
                memory_usage_bytes: 7,
                ..Default::default()
            },
        );
        assert_eq!(m.usage(&qos)?.memory_usage_bytes, 7);
        assert!(m
            .usage(&qos.child("x"))
            .err()
            .is_some_and(|e| e.is_not_found()));
        m.fail("update", &qos, "boom");
        assert_eq!(
            m.update(&qos, &ResourceConfig::default())
                .err()
                .map(|e| e.to_string()),
            Some("boom".to_string())
        );
        let half = qos.child("pod-h");
        let limits = ResourceConfig {
            pids_limit: Some(20),
            ..Default::default()
        };
        m.fail("create_half", &half, "cpu.weight: no such file");
        assert!(m.create(&half, &limits).is_err());
        assert_eq!(m.config(&half), Some(ResourceConfig::default()));
        m.clear_failures();
        m.update(&qos, &ResourceConfig::default())?;
        let any = crate::AnyManager::Fake(m);
        assert_eq!(any.version(), Version::V1);
        assert_eq!(any.name(&qos), "/kubepods.slice/kubepods-besteffort.slice");
        Ok(())
    }
}
