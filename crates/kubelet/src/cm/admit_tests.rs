//! The topology manager's admission over the CPU manager on a fake two-NUMA-node machine
//! (CPUs 0-1 on node 0, 2-3 on node 1, CPU 0 reserved): rejections by policy and scope, and
//! allocations aligned to the merged hint.

use std::sync::Arc;

use super::*;
use crate::cm::cpu::tests::{pod, static_cfg, Node};
use crate::cm::topology::{Policy, Scope};

fn cpu_only(cpu: &crate::cm::cpu::CpuHandle) -> Providers<'_> {
    Providers {
        cpu: Some(cpu),
        devices: None,
        active: Default::default(),
    }
}

fn topo(policy: Policy, scope: Scope) -> TopologySettings {
    TopologySettings {
        policy,
        scope,
        numa_nodes: vec![0, 1],
        closest: None,
    }
}

#[tokio::test]
async fn topology_policies_admit_or_reject() {
    // Three CPUs fit on no single node: single-numa-node rejects, best-effort spreads.
    for (policy, scope) in [
        (Policy::SingleNumaNode, Scope::Container),
        (Policy::SingleNumaNode, Scope::Pod),
    ] {
        let node = Node::new();
        let cpu = node.start(&static_cfg()).await.unwrap().unwrap();
        let e = allocate(
            &cpu_only(&cpu),
            &topo(policy, scope),
            &pod("big", &[("c", "3")]),
        )
        .await
        .unwrap_err();
        assert_eq!(e.reason, "TopologyAffinityError");
        assert_eq!(
            e.message,
            "Resources cannot be allocated with Topology locality"
        );
        assert!(cpu.assigned().await.unwrap().is_empty());
    }
    let node = Node::new();
    let cpu = node.start(&static_cfg()).await.unwrap().unwrap();
    allocate(
        &cpu_only(&cpu),
        &topo(Policy::BestEffort, Scope::Container),
        &pod("big", &[("c", "3")]),
    )
    .await
    .unwrap();
    assert_eq!(cpu.affinity("big", "c").await.unwrap().to_string(), "1-3");

    // One CPU: aligned to the narrowest preferred node (node 0 has CPU 1 free).
    let node = Node::new();
    let cpu = node.start(&static_cfg()).await.unwrap().unwrap();
    let t = topo(Policy::Restricted, Scope::Container);
    allocate(&cpu_only(&cpu), &t, &pod("one", &[("c", "1")]))
        .await
        .unwrap();
    assert_eq!(cpu.affinity("one", "c").await.unwrap().to_string(), "1");
    // Two more: only node 1 can hold them together.
    allocate(&cpu_only(&cpu), &t, &pod("two", &[("c", "2")]))
        .await
        .unwrap();
    assert_eq!(cpu.affinity("two", "c").await.unwrap().to_string(), "2-3");
    // Nothing left: restricted rejects on topology, best-effort fails the allocation.
    let e = allocate(&cpu_only(&cpu), &t, &pod("three", &[("c", "1")]))
        .await
        .unwrap_err();
    assert_eq!(e.reason, "TopologyAffinityError");
    let e = allocate(
        &cpu_only(&cpu),
        &topo(Policy::BestEffort, Scope::Pod),
        &pod("three", &[("c", "1")]),
    )
    .await
    .unwrap_err();
    assert_eq!(e.reason, "UnexpectedAdmissionError");
    // Pods without exclusive CPUs never reach the CPU manager.
    let mut shared = (*pod("shared", &[("c", "500m")])).clone();
    shared.metadata.uid = Some("shared".into());
    allocate(&cpu_only(&cpu), &t, &Arc::new(shared))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_pod_not_admitted_gives_its_cpus_back() {
    // Upstream's order allocates before the predicates; a pod they reject is released.
    let node = Node::new();
    let cpu = node.start(&static_cfg()).await.unwrap().unwrap();
    let p = cpu_only(&cpu);
    let t = topo(Policy::Restricted, Scope::Container);
    allocate(&p, &t, &pod("rejected", &[("c", "2")]))
        .await
        .unwrap();
    assert_eq!(
        cpu.affinity("rejected", "c").await.unwrap().to_string(),
        "2-3"
    );
    release(&p, "rejected").await;
    assert!(cpu.assigned().await.unwrap().is_empty());
    // A failure half-way (container scope: the second container cannot be aligned) frees the
    // first container's CPUs too, and counts as a topology manager admission error.
    let m = crate::metrics::get();
    let errors = m.topology_manager_admission_errors.get();
    let requests = m.topology_manager_admission_requests.get();
    let e = allocate(&p, &t, &pod("half", &[("a", "2"), ("b", "2")]))
        .await
        .unwrap_err();
    assert_eq!(e.reason, "TopologyAffinityError");
    assert!(cpu.assigned().await.unwrap().is_empty());
    assert!(m.topology_manager_admission_errors.get() > errors);
    assert!(m.topology_manager_admission_requests.get() > requests);
    // The freed CPUs can be had again.
    allocate(&p, &t, &pod("again", &[("c", "2")]))
        .await
        .unwrap();
    assert_eq!(cpu.affinity("again", "c").await.unwrap().to_string(), "2-3");
}
