//! The topology manager's admission over the CPU manager on a fake two-NUMA-node machine
//! (CPUs 0-1 on node 0, 2-3 on node 1, CPU 0 reserved): rejections by policy and scope, and
//! allocations aligned to the merged hint.

use std::sync::Arc;

use super::*;
use crate::cm::cpu::tests::{pod, static_cfg, Node};
use crate::cm::topology::{Policy, Scope};

fn topo(policy: Policy, scope: Scope) -> TopologySettings {
    TopologySettings {
        policy,
        scope,
        numa_nodes: vec![0, 1],
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
        let e = allocate(Some(&cpu), &topo(policy, scope), &pod("big", &[("c", "3")]))
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
        Some(&cpu),
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
    allocate(Some(&cpu), &t, &pod("one", &[("c", "1")]))
        .await
        .unwrap();
    assert_eq!(cpu.affinity("one", "c").await.unwrap().to_string(), "1");
    // Two more: only node 1 can hold them together.
    allocate(Some(&cpu), &t, &pod("two", &[("c", "2")]))
        .await
        .unwrap();
    assert_eq!(cpu.affinity("two", "c").await.unwrap().to_string(), "2-3");
    // Nothing left: restricted rejects on topology, best-effort fails the allocation.
    let e = allocate(Some(&cpu), &t, &pod("three", &[("c", "1")]))
        .await
        .unwrap_err();
    assert_eq!(e.reason, "TopologyAffinityError");
    let e = allocate(
        Some(&cpu),
        &topo(Policy::BestEffort, Scope::Pod),
        &pod("three", &[("c", "1")]),
    )
    .await
    .unwrap_err();
    assert_eq!(e.reason, "UnexpectedAdmissionError");
    // Pods without exclusive CPUs never reach the CPU manager.
    let mut shared = (*pod("shared", &[("c", "500m")])).clone();
    shared.metadata.uid = Some("shared".into());
    allocate(Some(&cpu), &t, &Arc::new(shared)).await.unwrap();
}
