//! The device manager as a topology hint provider (upstream `devicemanager/topology_hints.go`)
//! and its NUMA-aware device choice (upstream `devicesToAllocate` after the reusable devices,
//! and `filterByAffinity`). Pure: the manager task asks these and does the RPCs around them.
//!
//! Hints come from the healthy devices not in use (plus those an init container of the same
//! pod leaves to reuse, which every hint must cover), or from the devices a container already
//! holds (a restart, a re-sync); a resource whose devices report no topology gives no
//! preference. The hints with the fewest NUMA nodes that could ever hold the request are the
//! preferred ones.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod};

use super::state::State;
use crate::cm::topology::{BitMask, ProviderHints, TopologyHint};

/// A container's whole-unit limit of `resource` (extended resources are integers; upstream
/// `Quantity.Value()` rounds up).
pub(super) fn limit(c: &Container, resource: &str) -> Option<usize> {
    let q = c.resources.as_ref()?.limits.as_ref()?.get(resource)?;
    let milli = crate::resources::parse_milli(&q.0)?;
    usize::try_from((milli + 999) / 1000).ok()
}

pub(super) fn limit_names(c: &Container) -> Vec<String> {
    c.resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .map(|l| l.keys().cloned().collect())
        .unwrap_or_default()
}

/// Upstream `mask.AnySet(ids)`.
fn any_set(mask: BitMask, ids: &[usize]) -> bool {
    ids.iter().any(|n| mask.is_set(*n))
}

impl State {
    /// A device's NUMA node IDs (upstream `getNUMANodeIds`); None without topology.
    fn numa_ids(&self, resource: &str, id: &str) -> Option<Vec<usize>> {
        let t = self.all.get(resource)?.get(id)?.topology.as_ref()?;
        Some(
            t.nodes
                .iter()
                .filter_map(|n| usize::try_from(n.id).ok())
                .collect(),
        )
    }

    /// Upstream `deviceHasTopologyAlignment`: any device of the resource reports topology.
    pub fn has_topology(&self, resource: &str) -> bool {
        self.all
            .get(resource)
            .is_some_and(|m| m.values().any(|d| d.topology.is_some()))
    }

    /// Upstream `getAvailableDevices`: healthy and not in use.
    pub fn available(&self, resource: &str) -> BTreeSet<String> {
        let in_use = self.allocated.get(resource);
        self.healthy
            .get(resource)
            .into_iter()
            .flatten()
            .filter(|d| in_use.is_none_or(|u| !u.contains(*d)))
            .cloned()
            .collect()
    }

    /// Upstream `generateDeviceTopologyHints`, through the generation the CPU manager shares.
    pub fn generate_hints(
        &self,
        numa_nodes: &[usize],
        resource: &str,
        available: &BTreeSet<String>,
        reusable: &BTreeSet<String>,
        request: usize,
    ) -> Vec<TopologyHint> {
        let ids = |d: &str| self.numa_ids(resource, d);
        let in_mask = |mask: BitMask, d: &str| ids(d).is_some_and(|n| any_set(mask, &n));
        crate::cm::topology::generate_hints(
            numa_nodes,
            request,
            |mask| {
                // Every reusable device with topology must be inside the mask.
                let mut matching = 0;
                for d in reusable {
                    let Some(n) = ids(d) else { continue };
                    if !any_set(mask, &n) {
                        return None;
                    }
                    matching += 1;
                }
                Some(matching + available.iter().filter(|d| in_mask(mask, d)).count())
            },
            |mask| {
                self.all
                    .get(resource)
                    .into_iter()
                    .flat_map(|m| m.keys())
                    .filter(|d| in_mask(mask, d))
                    .count()
            },
        )
    }

    /// Upstream `GetTopologyHints` for one container; `reusable` are the devices the pod's
    /// init containers left (upstream `devicesToReuse[pod]`).
    pub fn container_hints(
        &self,
        numa_nodes: &[usize],
        uid: &str,
        c: &Container,
        reusable: &BTreeMap<String, BTreeSet<String>>,
    ) -> ProviderHints {
        let mut out = ProviderHints::new();
        for resource in limit_names(c) {
            if !self.is_device_resource(&resource) {
                continue;
            }
            let requested = limit(c, &resource).unwrap_or(0);
            let empty = BTreeSet::new();
            let reuse = reusable.get(&resource).unwrap_or(&empty);
            let held = self
                .container_devices(uid, &c.name, &resource)
                .map(|a| a.ids());
            let hints = self.resource_hints(numa_nodes, &resource, requested, held, reuse);
            out.insert(resource, hints);
        }
        out
    }

    /// Upstream `GetPodTopologyHints`: over the pod's device request (upstream
    /// `getPodDeviceRequest`) and the devices the whole pod holds.
    pub fn pod_hints(&self, numa_nodes: &[usize], pod: &Pod) -> ProviderHints {
        let uid = crate::podutil::uid(pod);
        let mut out = ProviderHints::new();
        for (resource, requested) in self.pod_device_request(pod) {
            let held: BTreeSet<String> = self
                .pods
                .get(uid)
                .into_iter()
                .flat_map(|cs| cs.values())
                .filter_map(|rs| rs.get(&resource))
                .flat_map(|a| a.ids())
                .collect();
            let held = (!held.is_empty()).then_some(held);
            let hints =
                self.resource_hints(numa_nodes, &resource, requested, held, &BTreeSet::new());
            out.insert(resource, hints);
        }
        out
    }

    /// The per-resource part both hint calls share: None is no preference, `Some([])` is
    /// "cannot be satisfied".
    fn resource_hints(
        &self,
        numa_nodes: &[usize],
        resource: &str,
        requested: usize,
        held: Option<BTreeSet<String>>,
        reusable: &BTreeSet<String>,
    ) -> Option<Vec<TopologyHint>> {
        if !self.has_topology(resource) {
            return None;
        }
        if let Some(held) = held.filter(|h| !h.is_empty()) {
            // Already allocated (after a restart): the same hints again, or none when the
            // request changed.
            if held.len() != requested {
                return Some(Vec::new());
            }
            return Some(self.generate_hints(
                numa_nodes,
                resource,
                &held,
                &BTreeSet::new(),
                requested,
            ));
        }
        let available = self.available(resource);
        if available.union(reusable).count() < requested {
            return Some(Vec::new());
        }
        Some(self.generate_hints(numa_nodes, resource, &available, reusable, requested))
    }

    /// Upstream `getPodDeviceRequest`: per device resource, the larger of the largest init
    /// container's limit and the sum over the regular containers.
    pub fn pod_device_request(&self, pod: &Pod) -> BTreeMap<String, usize> {
        let mut init: BTreeMap<String, usize> = BTreeMap::new();
        let mut app: BTreeMap<String, usize> = BTreeMap::new();
        let spec = pod.spec.as_ref();
        for c in spec
            .into_iter()
            .flat_map(|s| s.init_containers.iter().flatten())
        {
            for r in limit_names(c)
                .into_iter()
                .filter(|r| self.is_device_resource(r))
            {
                let n = limit(c, &r).unwrap_or(0);
                let e = init.entry(r).or_insert(n);
                *e = (*e).max(n);
            }
        }
        for c in spec.into_iter().flat_map(|s| s.containers.iter()) {
            for r in limit_names(c)
                .into_iter()
                .filter(|r| self.is_device_resource(r))
            {
                *app.entry(r).or_insert(0) += limit(c, &r).unwrap_or(0);
            }
        }
        for (r, n) in app {
            let e = init.entry(r).or_insert(n);
            *e = (*e).max(n);
        }
        init
    }

    /// Upstream `filterByAffinity` (current upstream's order: a device on several nodes counts
    /// as aligned when any of them is in the affinity): the available devices split into those
    /// on the affinity's nodes, those on other nodes, and those without topology. Without an
    /// affinity or topology they all fall in the last set.
    pub fn filter_by_affinity(
        &self,
        resource: &str,
        available: &BTreeSet<String>,
        affinity: Option<BitMask>,
    ) -> Split {
        let Some(mask) = affinity.filter(|_| self.has_topology(resource)) else {
            return Split {
                no_affinity: available.clone(),
                ..Default::default()
            };
        };
        let mut out = Split::default();
        for d in available {
            match self.numa_ids(resource, d).filter(|n| !n.is_empty()) {
                None => out.no_affinity.insert(d.clone()),
                Some(n) if any_set(mask, &n) => out.aligned.insert(d.clone()),
                Some(_) => out.unaligned.insert(d.clone()),
            };
        }
        out
    }
}

/// The three sets of [`State::filter_by_affinity`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Split {
    pub aligned: BTreeSet<String>,
    pub unaligned: BTreeSet<String>,
    pub no_affinity: BTreeSet<String>,
}

/// Where [`Plan`] stands before the plugin's preference.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    Done,
    /// More aligned devices than needed: the plugin chooses among them.
    AmongAligned,
    /// Every aligned device taken; the plugin chooses the rest among all available.
    Rest,
}

/// Upstream `devicesToAllocate` from the reusable devices on, split around the
/// `GetPreferredAllocation` call: [`Plan::ask`] says what the plugin is offered (None: nothing
/// left to choose), [`Plan::finish`] takes its answer (empty when not asked or not supported).
#[derive(Debug, Clone)]
pub struct Plan {
    needed: usize,
    chosen: BTreeSet<String>,
    split: Split,
    stage: Stage,
}

impl Plan {
    /// `reusable` are taken first (upstream `allocateRemainingFrom(reusableDevices)`).
    pub fn new(required: usize, reusable: &BTreeSet<String>, split: Split) -> Plan {
        let chosen: BTreeSet<String> = reusable.iter().take(required).cloned().collect();
        let mut plan = Plan {
            needed: required - chosen.len(),
            chosen,
            split,
            stage: Stage::Done,
        };
        if plan.needed == 0 {
            return plan;
        }
        if plan.needed < plan.split.aligned.len() {
            plan.stage = Stage::AmongAligned;
            return plan;
        }
        // All aligned devices first, so the topology manager's alignment holds.
        let aligned = plan.split.aligned.clone();
        if !plan.take(aligned.iter()) {
            plan.stage = Stage::Rest;
        }
        plan
    }

    /// Takes from `from` until nothing is needed; true when done.
    fn take<'a>(&mut self, from: impl Iterator<Item = &'a String>) -> bool {
        for d in from {
            if self.needed == 0 {
                break;
            }
            if self.chosen.insert(d.clone()) {
                self.needed -= 1;
            }
        }
        self.needed == 0
    }

    /// `GetPreferredAllocation`'s `available` and `mustInclude` (its size is the request).
    pub fn ask(&self) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
        let offered: BTreeSet<String> = match self.stage {
            Stage::Done => return None,
            Stage::AmongAligned => self.split.aligned.clone(),
            Stage::Rest => self
                .split
                .unaligned
                .union(&self.split.no_affinity)
                .cloned()
                .collect(),
        };
        let offered = offered.union(&self.chosen).cloned().collect();
        Some((offered, self.chosen.clone()))
    }

    /// The devices to allocate: the plugin's preferred ones within what it was offered, then
    /// aligned, unaligned and topology-less devices in ID order.
    pub fn finish(mut self, preferred: &[String]) -> BTreeSet<String> {
        let split = std::mem::take(&mut self.split);
        match self.stage {
            Stage::Done => {}
            Stage::AmongAligned => {
                let _ = self.take(preferred.iter().filter(|d| split.aligned.contains(*d)))
                    || self.take(split.aligned.iter());
            }
            Stage::Rest => {
                let available =
                    |d: &&String| split.unaligned.contains(*d) || split.no_affinity.contains(*d);
                let _ = self.take(preferred.iter().filter(available))
                    || self.take(split.unaligned.iter())
                    || self.take(split.no_affinity.iter());
            }
        }
        self.chosen
    }
}

#[cfg(test)]
#[path = "hints_alloc_tests.rs"]
mod alloc_tests;
#[cfg(test)]
#[path = "hints_tests.rs"]
mod tests;
