//! Upstream's resource allocation admit handler (`topologymanager.Admit`, 1.20's
//! `scope_container.go` / `scope_pod.go`): for a pod with exclusive CPU needs, the hint
//! providers' hints are merged by the topology policy (scope `container`: per container, each
//! allocated before the next one's hints are asked; scope `pod`: once for the pod), a pod the
//! policy cannot admit is rejected `TopologyAffinityError`, and the CPU manager allocates with
//! the merged NUMA affinity. With policy `none` the CPU manager allocates without hints.
//!
//! Hint providers: the CPU manager. The device manager gives no hints yet (its devices count
//! as "no preference"), so device-only pods are never rejected for topology.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::cpu::{policy::guaranteed_cpus, CpuHandle, PolicyError};
use super::topology::{Policy, ProviderHints, Scope, TopologyAffinityError, TopologyHint};
use crate::podutil;

/// `topologyManagerPolicy`, `topologyManagerScope` and the NUMA nodes hints range over.
#[derive(Debug, Clone, Default)]
pub struct TopologySettings {
    pub policy: Policy,
    pub scope: Scope,
    pub numa_nodes: Vec<usize>,
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

fn stopped(e: super::cpu::CpuError) -> AdmitError {
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

/// See the module doc. Pods without a Guaranteed integer CPU request cost nothing here.
pub async fn allocate(
    cpu: Option<&CpuHandle>,
    t: &TopologySettings,
    pod: &Arc<Pod>,
) -> Result<(), AdmitError> {
    let Some(cpu) = cpu else { return Ok(()) };
    let names: Vec<String> = podutil::init_containers(pod)
        .iter()
        .chain(podutil::containers(pod))
        .filter(|c| guaranteed_cpus(pod, c) > 0)
        .map(|c| c.name.clone())
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    match (t.policy, t.scope) {
        (Policy::None, _) => cpu
            .allocate(pod.clone(), BTreeMap::new(), None)
            .await
            .map_err(stopped)?
            .map_err(AdmitError::from),
        (policy, Scope::Pod) => {
            let hints = cpu.hints(pod.clone(), None).await.map_err(stopped)?;
            let (best, admit) = policy.merge(&t.numa_nodes, &[provider(hints)]);
            if !admit {
                return Err(topology_error());
            }
            let affinity = best
                .numa_affinity
                .map(|m| names.iter().map(|n| (n.clone(), m)).collect())
                .unwrap_or_default();
            cpu.allocate(pod.clone(), affinity, None)
                .await
                .map_err(stopped)?
                .map_err(AdmitError::from)
        }
        (policy, Scope::Container) => {
            for name in names {
                let hints = cpu
                    .hints(pod.clone(), Some(name.clone()))
                    .await
                    .map_err(stopped)?;
                let (best, admit) = policy.merge(&t.numa_nodes, &[provider(hints)]);
                if !admit {
                    return Err(topology_error());
                }
                let affinity = best
                    .numa_affinity
                    .map(|m| [(name.clone(), m)].into_iter().collect())
                    .unwrap_or_default();
                cpu.allocate(pod.clone(), affinity, Some(name))
                    .await
                    .map_err(stopped)?
                    .map_err(AdmitError::from)?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
#[path = "admit_tests.rs"]
mod tests;
