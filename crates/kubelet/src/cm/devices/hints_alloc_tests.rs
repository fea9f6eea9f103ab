//! Upstream's `devicemanager/topology_hints_test.go` allocation tables: the pod's device
//! request, the NUMA-aware choice and what `GetPreferredAllocation` is offered.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::tests::{four, mask, numa_dev, plain_dev, pod, state};
use super::*;
use crate::cm::devices::api;

#[test]
fn pod_device_request_table() {
    let gpu_nic = |g: &'static str, n: &'static str| -> Vec<(&'static str, &'static str)> {
        vec![("cpu", "2"), ("memory", "1G"), ("gpu", g), ("nic", n)]
    };
    type Case<'a> = (&'a str, Arc<Pod>, &'a [&'a str], &'a [(&'a str, usize)]);
    let cases: Vec<Case> = vec![
        ("empty pod", pod(&[], &[]), &[], &[]),
        (
            "Init container requests device plugin resource",
            pod(&[&[("cpu", "2"), ("memory", "1G"), ("gpu", "2")]], &[]),
            &["gpu"],
            &[("gpu", 2)],
        ),
        (
            "Init containers request device plugin resource",
            pod(
                &[
                    &[("cpu", "2"), ("memory", "1G"), ("gpu", "2")],
                    &[("cpu", "2"), ("memory", "1G"), ("gpu", "4")],
                ],
                &[],
            ),
            &["gpu"],
            &[("gpu", 4)],
        ),
        (
            "User container requests device plugin resource",
            pod(
                &[],
                &[("c", &[("cpu", "2"), ("memory", "1G"), ("gpu", "2")])],
            ),
            &["gpu"],
            &[("gpu", 2)],
        ),
        (
            "Init containers and user containers request the same amount",
            pod(
                &[&gpu_nic("2", "2"), &gpu_nic("2", "2")],
                &[("a", &gpu_nic("1", "1")), ("b", &gpu_nic("1", "1"))],
            ),
            &["gpu", "nic"],
            &[("gpu", 2), ("nic", 2)],
        ),
        (
            "Init containers request more than user containers",
            pod(
                &[&gpu_nic("2", "1"), &gpu_nic("3", "2")],
                &[
                    ("a", &gpu_nic("1", "1")),
                    ("b", &[("cpu", "1"), ("memory", "1G"), ("gpu", "1")]),
                ],
            ),
            &["gpu", "nic"],
            &[("gpu", 3), ("nic", 2)],
        ),
        (
            "User containers request more than init containers",
            pod(
                &[&gpu_nic("2", "1"), &gpu_nic("2", "1")],
                &[("a", &gpu_nic("3", "2")), ("b", &gpu_nic("3", "2"))],
            ),
            &["gpu", "nic"],
            &[("gpu", 6), ("nic", 4)],
        ),
    ];
    for (name, p, registered, want) in cases {
        let mut st = State::default();
        for r in registered {
            st.healthy.insert(r.to_string(), BTreeSet::new());
        }
        let want: BTreeMap<String, usize> = want.iter().map(|(r, n)| (r.to_string(), *n)).collect();
        assert_eq!(st.pod_device_request(&p), want, "{name}");
    }
}

/// Upstream `TestTopologyAlignedAllocation`: the devices chosen for `request` under `affinity`,
/// with the plugin's preference when it has one, as (node -> count) and the preferred devices
/// that must be among them.
#[test]
fn topology_aligned_allocation_table() {
    let numbered = |ranges: &[(std::ops::Range<usize>, i64)]| -> Vec<api::Device> {
        ranges
            .iter()
            .flat_map(|(r, n)| r.clone().map(move |i| numa_dev(&format!("Dev{i}"), *n)))
            .collect()
    };
    type Case<'a> = (
        &'a str,
        usize,
        Vec<api::Device>,
        &'a [usize],
        Option<&'a [&'a str]>,
        &'a [&'a str],
        &'a [(i64, usize)],
    );
    let cases: Vec<Case> = vec![
        (
            "Single Request, no alignment",
            1,
            vec![plain_dev("Dev1"), plain_dev("Dev2")],
            &[0, 1],
            None,
            &[],
            &[],
        ),
        (
            "Request for 1, partial alignment",
            1,
            vec![plain_dev("Dev1"), numa_dev("Dev2", 1)],
            &[1],
            None,
            &[],
            &[(1, 1)],
        ),
        (
            "Single Request, socket 0",
            1,
            vec![numa_dev("Dev1", 0), numa_dev("Dev2", 1)],
            &[0],
            None,
            &[],
            &[(0, 1)],
        ),
        (
            "Single Request, socket 1",
            1,
            vec![numa_dev("Dev1", 0), numa_dev("Dev2", 1)],
            &[1],
            None,
            &[],
            &[(1, 1)],
        ),
        (
            "Request for 2, socket 0",
            2,
            four(),
            &[0],
            None,
            &[],
            &[(0, 2)],
        ),
        (
            "Request for 2, socket 1",
            2,
            four(),
            &[1],
            None,
            &[],
            &[(1, 2)],
        ),
        (
            "Request for 4, unsatisfiable, prefer socket 0",
            4,
            numbered(&[
                (1..2, 0),
                (2..3, 1),
                (3..4, 0),
                (4..5, 1),
                (5..6, 0),
                (6..7, 1),
            ]),
            &[0],
            None,
            &[],
            &[(0, 3), (1, 1)],
        ),
        (
            "Request for 4, unsatisfiable, prefer socket 1",
            4,
            numbered(&[
                (1..2, 0),
                (2..3, 1),
                (3..4, 0),
                (4..5, 1),
                (5..6, 0),
                (6..7, 1),
            ]),
            &[1],
            None,
            &[],
            &[(0, 1), (1, 3)],
        ),
        (
            "Request for 4, multisocket",
            4,
            numbered(&[
                (1..2, 0),
                (2..3, 1),
                (3..4, 2),
                (4..5, 3),
                (5..6, 0),
                (6..7, 1),
                (7..8, 2),
                (8..9, 3),
            ]),
            &[1, 3],
            None,
            &[],
            &[(1, 2), (3, 2)],
        ),
        (
            "Request for 5, socket 0, preferred aligned accepted",
            5,
            numbered(&[(0..100, 0), (100..200, 1)]),
            &[0],
            Some(&["Dev0", "Dev19", "Dev83", "Dev42", "Dev77"]),
            &["Dev0", "Dev19", "Dev83", "Dev42", "Dev77"],
            &[(0, 5)],
        ),
        (
            "Request for 5, socket 0, preferred aligned accepted, unaligned ignored",
            5,
            numbered(&[(0..100, 0), (100..200, 1)]),
            &[0],
            Some(&["Dev0", "Dev19", "Dev83", "Dev150", "Dev186"]),
            &["Dev0", "Dev19", "Dev83"],
            &[(0, 5)],
        ),
        (
            "Request for 5, socket 1, preferred aligned accepted, bogus ignored",
            5,
            numbered(&[(0..100, 1)]),
            &[1],
            Some(&["Dev0", "Dev19", "Dev83", "bogus0", "bogus1"]),
            &["Dev0", "Dev19", "Dev83"],
            &[(1, 5)],
        ),
        (
            "Request for 5, multisocket, preferred accepted",
            5,
            numbered(&[(0..3, 0), (3..100, 1)]),
            &[0],
            Some(&["Dev0", "Dev1", "Dev2", "Dev42", "Dev83"]),
            &["Dev0", "Dev1", "Dev2", "Dev42", "Dev83"],
            &[(0, 3), (1, 2)],
        ),
        (
            "Request for 5, multisocket, preferred unaligned accepted, bogus ignored",
            5,
            numbered(&[(0..3, 0), (3..100, 1)]),
            &[0],
            Some(&["Dev0", "Dev1", "Dev2", "Dev42", "bogus0"]),
            &["Dev0", "Dev1", "Dev2", "Dev42"],
            &[(0, 3), (1, 2)],
        ),
    ];
    for (name, request, devices, affinity, preferred, must, alignment) in cases {
        let st = state(&[("resource", devices)], &[]);
        let available = st.available("resource");
        let split = st.filter_by_affinity("resource", &available, Some(mask(affinity)));
        let plan = Plan::new(request, &BTreeSet::new(), split);
        let answer: Vec<String> = match (plan.ask(), preferred) {
            (Some(_), Some(p)) => p.iter().map(|s| s.to_string()).collect(),
            _ => Vec::new(),
        };
        let chosen = plan.finish(&answer);
        assert_eq!(chosen.len(), request, "{name}");
        for d in must {
            assert!(chosen.contains(*d), "{name}: {d} not in {chosen:?}");
        }
        let mut got: BTreeMap<i64, usize> = BTreeMap::new();
        if st.has_topology("resource") {
            for d in &chosen {
                if let Some(t) = &st.all["resource"][d].topology {
                    *got.entry(t.nodes[0].id).or_default() += 1;
                }
            }
        }
        let want: BTreeMap<i64, usize> = alignment.iter().copied().collect();
        assert_eq!(got, want, "{name}");
    }
}

/// Upstream `TestGetPreferredAllocationParameters`: what `GetPreferredAllocation` is offered.
#[test]
fn preferred_allocation_parameters_table() {
    let node0 = (0..8)
        .map(|i| numa_dev(&format!("Dev{i}"), 0))
        .collect::<Vec<_>>();
    let split = (0..8)
        .map(|i| numa_dev(&format!("Dev{i}"), i / 4))
        .collect::<Vec<_>>();
    type Case<'a> = (
        &'a str,
        usize,
        Vec<api::Device>,
        &'a [&'a str],
        &'a [&'a str],
        &'a [&'a str],
        &'a [&'a str],
    );
    let cases: Vec<Case> = vec![
        (
            "Request for 1, socket 0, 0 already allocated, 0 reusable",
            1,
            node0[..4].to_vec(),
            &[],
            &[],
            &["Dev0", "Dev1", "Dev2", "Dev3"],
            &[],
        ),
        (
            "Request for 4, socket 0, 2 already allocated, 2 reusable",
            4,
            node0.clone(),
            &["Dev0", "Dev5"],
            &["Dev0", "Dev5"],
            &[
                "Dev0", "Dev1", "Dev2", "Dev3", "Dev4", "Dev5", "Dev6", "Dev7",
            ],
            &["Dev0", "Dev5"],
        ),
        (
            "Request for 4, socket 0, 4 already allocated, 2 reusable",
            4,
            node0.clone(),
            &["Dev0", "Dev5", "Dev4", "Dev1"],
            &["Dev0", "Dev5"],
            &["Dev0", "Dev2", "Dev3", "Dev5", "Dev6", "Dev7"],
            &["Dev0", "Dev5"],
        ),
        (
            "Request for 6, multisocket, 2 already allocated, 2 reusable",
            6,
            split.clone(),
            &["Dev1", "Dev6"],
            &["Dev1", "Dev6"],
            &[
                "Dev0", "Dev1", "Dev2", "Dev3", "Dev4", "Dev5", "Dev6", "Dev7",
            ],
            &["Dev0", "Dev1", "Dev2", "Dev3", "Dev6"],
        ),
        (
            "Request for 6, multisocket, 4 already allocated, 2 reusable",
            6,
            split.clone(),
            &["Dev0", "Dev1", "Dev6", "Dev7"],
            &["Dev1", "Dev6"],
            &["Dev1", "Dev2", "Dev3", "Dev4", "Dev5", "Dev6"],
            &["Dev1", "Dev2", "Dev3", "Dev6"],
        ),
    ];
    let set = |s: &[&str]| s.iter().map(|d| d.to_string()).collect::<BTreeSet<_>>();
    for (name, request, devices, in_use, reusable, offered, must) in cases {
        let mut st = state(&[("resource", devices)], &[]);
        st.allocated.insert("resource".into(), set(in_use));
        let available: BTreeSet<String> = st
            .available("resource")
            .difference(&set(reusable))
            .cloned()
            .collect();
        let split = st.filter_by_affinity("resource", &available, Some(mask(&[0])));
        let plan = Plan::new(request, &set(reusable), split);
        let (got_offered, got_must) = plan.ask().unwrap_or_else(|| panic!("{name}: not asked"));
        assert_eq!(got_offered, set(offered), "{name}: available");
        assert_eq!(got_must, set(must), "{name}: mustInclude");
    }
}
