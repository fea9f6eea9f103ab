//! Upstream's resource allocation admit handler (`topologymanager.Admit`, 1.20's
//! `scope_container.go` / `scope_pod.go`, `resourceAllocator` with policy `none`): the hint
//! providers (the device manager, then the CPU manager, in upstream's registration order) give
//! their hints, the topology policy merges them (scope `container`: per container, each
//! allocated before the next one's hints are asked; scope `pod`: once for the pod), a pod the
//! policy cannot admit is rejected `TopologyAffinityError`, and both managers allocate with
//! the merged NUMA affinity. With policy `none` they allocate without hints.
//!
//! Upstream registers this handler before the predicates, so a pod the predicates reject
//! already holds devices and CPUs; upstream frees them when the rejected pod is removed, here
//! [`release`] frees them at once. Any failure here releases what the pod got so far too.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::cpu::{policy::guaranteed_cpus, CpuHandle, PolicyError};
use super::devices::DeviceHandle;
use super::topology::{BitMask, Policy, ProviderHints, Scope, TopologyAffinityError, TopologyHint};
use crate::podutil;

/// `topologyManagerPolicy`, `topologyManagerScope` and the NUMA nodes hints range over.
#[derive(Debug, Clone, Default)]
pub struct TopologySettings {
    pub policy: Policy,
    pub scope: Scope,
    pub numa_nodes: Vec<usize>,
    /// The NUMA distances when `prefer-closest-numa-nodes` is on.
    pub closest: Option<Arc<super::topology::NumaInfo>>,
}

impl TopologySettings {
    fn merge(&self, hints: &[ProviderHints]) -> (TopologyHint, bool) {
        self.policy
            .merge_with(&self.numa_nodes, hints, self.closest.as_deref())
    }
}

/// A rejection with upstream's reason and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct AdmitError {
    pub reason: String,
    pub message: String,
}

impl From<PolicyError> for AdmitError {
    /// Upstream `admission.GetPodAdmitResult`.
    fn from(e: PolicyError) -> Self {
        let reason = e.reason().to_string();
        let message = if reason == "UnexpectedAdmissionError" {
            format!("Allocate failed due to {e}, which is unexpected")
        } else {
            e.to_string()
        };
        AdmitError { reason, message }
    }
}

fn topology_error() -> AdmitError {
    AdmitError {
        reason: TopologyAffinityError::REASON.into(),
        message: TopologyAffinityError.to_string(),
    }
}

/// Upstream `unexpectedAdmissionError` / `admission.GetPodAdmitResult` of an allocation error.
fn unexpected(e: impl std::fmt::Display) -> AdmitError {
    AdmitError {
        reason: "UnexpectedAdmissionError".into(),
        message: format!("Allocate failed due to {e}, which is unexpected"),
    }
}

fn provider(hints: Option<Vec<TopologyHint>>) -> ProviderHints {
    match hints {
        None => ProviderHints::new(),
        Some(h) => [("cpu".to_string(), Some(h))].into_iter().collect(),
    }
}

/// The hint providers and what they need to know of the node.
pub struct Providers<'a> {
    pub cpu: Option<&'a CpuHandle>,
    pub devices: Option<&'a DeviceHandle>,
    /// The pods admitted and still holding resources (the device manager frees the devices
    /// of the others first).
    pub active: HashSet<String>,
}

/// See the module doc; counts upstream's topology manager admission metrics. Pods that need
/// neither exclusive CPUs nor device plugin devices cost no round trip.
pub async fn allocate(
    p: &Providers<'_>,
    t: &TopologySettings,
    pod: &Arc<Pod>,
) -> Result<(), AdmitError> {
    let m = crate::metrics::get();
    m.topology_manager_admission_requests.inc();
    let start = std::time::Instant::now();
    let r = allocate_inner(p, t, pod).await;
    m.topology_manager_admission_duration
        .observe(start.elapsed().as_millis() as f64);
    if r.is_err() {
        m.topology_manager_admission_errors.inc();
        release(p, podutil::uid(pod)).await;
    }
    r
}

/// Frees what [`allocate`] gave the pod (a later admit handler rejected it).
pub async fn release(p: &Providers<'_>, uid: &str) {
    if let Some(d) = p.devices {
        d.release(uid).await;
    }
    if let Some(c) = p.cpu {
        c.release(uid).await;
    }
}

/// Whether a container limits an extended resource (only those can need devices).
fn wants_devices(c: &k8s_openapi::api::core::v1::Container) -> bool {
    c.resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .is_some_and(|l| l.keys().any(|k| crate::resources::is_extended_resource(k)))
}

/// One pod's pass through the providers.
struct Run<'a> {
    pod: &'a Arc<Pod>,
    t: &'a TopologySettings,
    active: &'a HashSet<String>,
    cpu: Option<&'a CpuHandle>,
    devices: Option<&'a DeviceHandle>,
    /// The containers needing exclusive CPUs, and those limiting extended resources.
    cpu_names: Vec<String>,
    dev_names: Vec<String>,
}

fn wants(names: &[String], container: Option<&str>) -> bool {
    container.is_none_or(|n| names.iter().any(|m| m == n))
}

impl Run<'_> {
    /// Upstream `getTopologyHints` / `getPodTopologyHints` over the providers that care.
    async fn hints(&self, container: Option<&str>) -> Result<Vec<ProviderHints>, AdmitError> {
        let mut out = Vec::new();
        let name = container.map(str::to_string);
        if let Some(d) = self.devices.filter(|_| wants(&self.dev_names, container)) {
            let h = d
                .hints(
                    self.pod.clone(),
                    name.clone(),
                    self.active.clone(),
                    self.t.numa_nodes.clone(),
                )
                .await
                .map_err(unexpected)?;
            out.push(h);
        }
        if let Some(c) = self.cpu.filter(|_| wants(&self.cpu_names, container)) {
            let h = c.hints(self.pod.clone(), name).await.map_err(unexpected)?;
            out.push(provider(h));
        }
        Ok(out)
    }

    /// Upstream `allocateAlignedResources`: the device manager, then the CPU manager.
    async fn allocate(
        &self,
        only: Option<&str>,
        affinity: BTreeMap<String, BitMask>,
    ) -> Result<(), AdmitError> {
        let name = only.map(str::to_string);
        if let Some(d) = self.devices.filter(|_| wants(&self.dev_names, only)) {
            d.allocate(
                self.pod.clone(),
                self.active.clone(),
                name.clone(),
                affinity.clone(),
            )
            .await
            .map_err(unexpected)?;
        }
        if let Some(c) = self.cpu.filter(|_| wants(&self.cpu_names, only)) {
            c.allocate(self.pod.clone(), affinity, name)
                .await
                .map_err(unexpected)?
                .map_err(AdmitError::from)?;
        }
        Ok(())
    }
}

async fn allocate_inner(
    p: &Providers<'_>,
    t: &TopologySettings,
    pod: &Arc<Pod>,
) -> Result<(), AdmitError> {
    let all: Vec<_> = podutil::init_containers(pod)
        .iter()
        .chain(podutil::containers(pod))
        .collect();
    let names = |keep: &dyn Fn(&k8s_openapi::api::core::v1::Container) -> bool| -> Vec<String> {
        all.iter()
            .filter(|c| keep(c))
            .map(|c| c.name.clone())
            .collect()
    };
    let run = Run {
        pod,
        t,
        active: &p.active,
        cpu_names: p
            .cpu
            .map(|_| names(&|c| guaranteed_cpus(pod, c) > 0))
            .unwrap_or_default(),
        dev_names: p.devices.map(|_| names(&wants_devices)).unwrap_or_default(),
        cpu: None,
        devices: None,
    };
    let run = Run {
        cpu: p.cpu.filter(|_| !run.cpu_names.is_empty()),
        devices: p.devices.filter(|_| !run.dev_names.is_empty()),
        ..run
    };
    if run.cpu.is_none() && run.devices.is_none() {
        return Ok(());
    }
    match (t.policy, t.scope) {
        (Policy::None, _) => run.allocate(None, BTreeMap::new()).await,
        (_, Scope::Pod) => {
            let (best, admit) = t.merge(&run.hints(None).await?);
            if !admit {
                return Err(topology_error());
            }
            let affinity = best
                .numa_affinity
                .map(|m| all.iter().map(|c| (c.name.clone(), m)).collect())
                .unwrap_or_default();
            run.allocate(None, affinity).await
        }
        (_, Scope::Container) => {
            for c in &all {
                let name = c.name.as_str();
                if !wants(&run.cpu_names, Some(name)) && !wants(&run.dev_names, Some(name)) {
                    continue;
                }
                let (best, admit) = t.merge(&run.hints(Some(name)).await?);
                if !admit {
                    return Err(topology_error());
                }
                let affinity = best
                    .numa_affinity
                    .map(|m| [(name.to_string(), m)].into_iter().collect())
                    .unwrap_or_default();
                run.allocate(Some(name), affinity).await?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
#[path = "admit_tests.rs"]
mod tests;
