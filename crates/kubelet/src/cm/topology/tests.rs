//! Upstream's own merge tables (`policy_test.go`: `commonPolicyMergeTestCases` and each
//! policy's `mergeTestCases`, Kubernetes 1.20.2, two NUMA nodes), converted mechanically.

use super::*;

fn h(nodes: &[usize], preferred: bool) -> TopologyHint {
    TopologyHint {
        numa_affinity: Some(BitMask::from_nodes(nodes)),
        preferred,
    }
}

fn n(preferred: bool) -> TopologyHint {
    TopologyHint {
        numa_affinity: None,
        preferred,
    }
}

type Case = (
    &'static str,
    Vec<Vec<(&'static str, Option<Vec<TopologyHint>>)>>,
    TopologyHint,
);

fn common() -> Vec<Case> {
    vec![
        (
            "Two providers, 1 hint each, same mask, both preferred 1/2",
            vec![
                vec![("resource1", Some(vec![h(&[0], true)]))],
                vec![("resource2", Some(vec![h(&[0], true)]))],
            ],
            h(&[0], true),
        ),
        (
            "Two providers, 1 hint each, same mask, both preferred 2/2",
            vec![
                vec![("resource1", Some(vec![h(&[1], true)]))],
                vec![("resource2", Some(vec![h(&[1], true)]))],
            ],
            h(&[1], true),
        ),
        (
            "Two providers, 1 no hints, 1 single hint preferred 1/2",
            vec![vec![], vec![("resource", Some(vec![h(&[0], true)]))]],
            h(&[0], true),
        ),
        (
            "Two providers, 1 no hints, 1 single hint preferred 2/2",
            vec![vec![], vec![("resource", Some(vec![h(&[1], true)]))]],
            h(&[1], true),
        ),
        (
            "Two providers, 1 with 2 hints, 1 with single hint matching 1/2",
            vec![
                vec![("resource1", Some(vec![h(&[0], true), h(&[1], true)]))],
                vec![("resource2", Some(vec![h(&[0], true)]))],
            ],
            h(&[0], true),
        ),
        (
            "Two providers, 1 with 2 hints, 1 with single hint matching 2/2",
            vec![
                vec![("resource1", Some(vec![h(&[0], true), h(&[1], true)]))],
                vec![("resource2", Some(vec![h(&[1], true)]))],
            ],
            h(&[1], true),
        ),
        (
            "Two providers, both with 2 hints, matching narrower preferred hint from both",
            vec![
                vec![("resource1", Some(vec![h(&[0], true), h(&[1], true)]))],
                vec![("resource2", Some(vec![h(&[0], true), h(&[0, 1], false)]))],
            ],
            h(&[0], true),
        ),
        (
            "Ensure less narrow preferred hints are chosen over narrower non-preferred hints",
            vec![
                vec![("resource1", Some(vec![h(&[1], true), h(&[0, 1], false)]))],
                vec![(
                    "resource2",
                    Some(vec![h(&[0], true), h(&[1], true), h(&[0, 1], false)]),
                )],
            ],
            h(&[1], true),
        ),
        (
            "Multiple resources, same provider",
            vec![vec![
                ("resource1", Some(vec![h(&[1], true), h(&[0, 1], false)])),
                (
                    "resource2",
                    Some(vec![h(&[0], true), h(&[1], true), h(&[0, 1], false)]),
                ),
            ]],
            h(&[1], true),
        ),
    ]
}

fn best_effort() -> Vec<Case> {
    vec![
        ("TopologyHint not set", vec![], h(&[0, 1], true)),
        (
            "HintProvider returns empty non-nil HintMap",
            vec![vec![]],
            h(&[0, 1], true),
        ),
        (
            "HintProvider returns -nil HintMap from provider",
            vec![vec![("resource", None)]],
            h(&[0, 1], true),
        ),
        (
            "HintProvider returns empty non-nil HintMap from provider",
            vec![vec![("resource", Some(vec![]))]],
            h(&[0, 1], false),
        ),
        (
            "Single TopologyHint with Preferred as true and NUMANodeAffinity as nil",
            vec![vec![("resource", Some(vec![n(true)]))]],
            h(&[0, 1], true),
        ),
        (
            "Single TopologyHint with Preferred as false and NUMANodeAffinity as nil",
            vec![vec![("resource", Some(vec![n(false)]))]],
            h(&[0, 1], false),
        ),
        (
            "Two providers, 1 hint each, no common mask",
            vec![
                vec![("resource1", Some(vec![h(&[0], true)]))],
                vec![("resource2", Some(vec![h(&[1], true)]))],
            ],
            h(&[0, 1], false),
        ),
        (
            "Two providers, 1 hint each, same mask, 1 preferred, 1 not 1/2",
            vec![
                vec![("resource1", Some(vec![h(&[0], true)]))],
                vec![("resource2", Some(vec![h(&[0], false)]))],
            ],
            h(&[0], false),
        ),
        (
            "Two providers, 1 hint each, same mask, 1 preferred, 1 not 2/2",
            vec![
                vec![("resource1", Some(vec![h(&[1], true)]))],
                vec![("resource2", Some(vec![h(&[1], false)]))],
            ],
            h(&[1], false),
        ),
        (
            "Two providers, 1 hint each, 1 wider mask, both preferred 1/2",
            vec![
                vec![("resource1", Some(vec![h(&[0], true)]))],
                vec![("resource2", Some(vec![h(&[0, 1], true)]))],
            ],
            h(&[0], true),
        ),
        (
            "Two providers, 1 with 2 hints, 1 with single non-preferred hint matching",
            vec![
                vec![("resource1", Some(vec![h(&[0], true), h(&[1], true)]))],
                vec![("resource2", Some(vec![h(&[0, 1], false)]))],
            ],
            h(&[0], false),
        ),
        (
            "Two providers, 1 hint each, 1 wider mask, both preferred 1/2",
            vec![
                vec![("resource1", Some(vec![h(&[1], true)]))],
                vec![("resource2", Some(vec![h(&[0, 1], true)]))],
            ],
            h(&[1], true),
        ),
    ]
}

fn single_numa_node() -> Vec<Case> {
    vec![
        ("TopologyHint not set", vec![], n(true)),
        (
            "HintProvider returns empty non-nil HintMap",
            vec![vec![]],
            n(true),
        ),
        (
            "HintProvider returns -nil HintMap from provider",
            vec![vec![("resource", None)]],
            n(true),
        ),
        (
            "HintProvider returns empty non-nil HintMap from provider",
            vec![vec![("resource", Some(vec![]))]],
            n(false),
        ),
        (
            "Single TopologyHint with Preferred as true and NUMANodeAffinity as nil",
            vec![vec![("resource", Some(vec![n(true)]))]],
            n(true),
        ),
        (
            "Single TopologyHint with Preferred as false and NUMANodeAffinity as nil",
            vec![vec![("resource", Some(vec![n(false)]))]],
            n(false),
        ),
        (
            "Two providers, 1 hint each, no common mask",
            vec![
                vec![("resource1", Some(vec![h(&[0], true)]))],
                vec![("resource2", Some(vec![h(&[1], true)]))],
            ],
            n(false),
        ),
        (
            "Two providers, 1 hint each, same mask, 1 preferred, 1 not 1/2",
            vec![
                vec![("resource1", Some(vec![h(&[0], true)]))],
                vec![("resource2", Some(vec![h(&[0], false)]))],
            ],
            n(false),
        ),
        (
            "Two providers, 1 hint each, same mask, 1 preferred, 1 not 2/2",
            vec![
                vec![("resource1", Some(vec![h(&[1], true)]))],
                vec![("resource2", Some(vec![h(&[1], false)]))],
            ],
            n(false),
        ),
        (
            "Two providers, 1 with 2 hints, 1 with single non-preferred hint matching",
            vec![
                vec![("resource1", Some(vec![h(&[0], true), h(&[1], true)]))],
                vec![("resource2", Some(vec![h(&[0, 1], false)]))],
            ],
            n(false),
        ),
        (
            "Single NUMA hint generation",
            vec![vec![
                ("resource1", Some(vec![h(&[0, 1], true)])),
                (
                    "resource2",
                    Some(vec![h(&[0], true), h(&[1], true), h(&[0, 1], false)]),
                ),
            ]],
            n(false),
        ),
        (
            "One no-preference provider",
            vec![
                vec![(
                    "resource1",
                    Some(vec![h(&[0], true), h(&[1], true), h(&[0, 1], false)]),
                )],
                vec![],
            ],
            h(&[0], true),
        ),
    ]
}

fn run(policy: Policy, cases: Vec<Case>) {
    for (name, providers, want) in cases {
        let providers: Vec<ProviderHints> = providers
            .into_iter()
            .map(|p| p.into_iter().map(|(r, h)| (r.to_string(), h)).collect())
            .collect();
        let (got, admit) = policy.merge(&[0, 1], &providers);
        assert_eq!(got, want, "{policy:?}: {name}");
        let want_admit = match policy {
            Policy::None | Policy::BestEffort => true,
            Policy::Restricted | Policy::SingleNumaNode => want.preferred,
        };
        assert_eq!(admit, want_admit, "{policy:?} admit: {name}");
    }
}

#[test]
fn best_effort_merges_as_upstream() {
    run(
        Policy::BestEffort,
        common().into_iter().chain(best_effort()).collect(),
    );
}

/// Restricted merges as best-effort (upstream embeds it) but admits only preferred hints.
#[test]
fn restricted_merges_as_upstream() {
    run(
        Policy::Restricted,
        common().into_iter().chain(best_effort()).collect(),
    );
}

#[test]
fn single_numa_node_merges_as_upstream() {
    run(
        Policy::SingleNumaNode,
        common().into_iter().chain(single_numa_node()).collect(),
    );
}

/// Upstream `TestPolicyNoneMerge`: no hint, always admitted.
#[test]
fn none_admits_everything() {
    let p: ProviderHints = [("r".to_string(), Some(vec![]))].into_iter().collect();
    assert_eq!(Policy::None.merge(&[0, 1], &[p]), (n(false), true));
}

/// Upstream `TestIterateBitMasks` order and `IsNarrowerThan`.
#[test]
fn bitmasks() {
    let masks: Vec<Vec<usize>> = BitMask::iterate(&[0, 1, 2])
        .iter()
        .map(|m| m.bits())
        .collect();
    assert_eq!(
        masks,
        vec![
            vec![0],
            vec![1],
            vec![2],
            vec![0, 1],
            vec![0, 2],
            vec![1, 2],
            vec![0, 1, 2]
        ]
    );
    let m = BitMask::from_nodes;
    assert!(m(&[0]).is_narrower_than(m(&[1])));
    assert!(m(&[1]).is_narrower_than(m(&[0, 1])));
    assert!(!m(&[0, 1]).is_narrower_than(m(&[0, 1])));
    assert_eq!(m(&[0, 3]).to_string(), "[0 3]");
}

/// Upstream `TestCPUManagerGetTopologyHints`-style generation: 2 nodes of 4 CPUs, all free.
#[test]
fn hint_generation() {
    let per_node = |m: BitMask| m.count() * 4;
    let free = |m: BitMask| Some(per_node(m));
    let hints = generate_hints(&[0, 1], 2, free, per_node);
    assert_eq!(hints, vec![h(&[0], true), h(&[1], true), h(&[0, 1], false)]);
    // Five CPUs fit on no single node: the pair is preferred.
    assert_eq!(
        generate_hints(&[0, 1], 5, free, per_node),
        vec![h(&[0, 1], true)]
    );
    // Node 0 is full: only node 1 and the pair can serve; node 1 still preferred.
    let avail = |m: BitMask| Some(if m.is_set(1) { 4 } else { 0 });
    assert_eq!(
        generate_hints(&[0, 1], 2, avail, per_node),
        vec![h(&[1], true), h(&[0, 1], false)]
    );
    // Something to reuse on node 1 only: masks without node 1 give no hint, even for a request
    // of 0 (upstream `continue`s before comparing counts).
    let reuse_on_1 = |m: BitMask| m.is_set(1).then_some(1);
    assert_eq!(
        generate_hints(&[0, 1], 0, reuse_on_1, per_node),
        vec![h(&[1], true), h(&[0, 1], false)]
    );
}

/// `prefer-closest-numa-nodes`: between two preferred two-node masks, the closer pair wins
/// over the lower-numbered one the default rule picks; `single-numa-node` ignores it.
#[test]
fn prefer_closest_numa_nodes_merge() {
    let info = NumaInfo {
        nodes: vec![0, 1, 2, 3],
        distances: [
            (0, vec![10, 20, 11, 12]),
            (1, vec![20, 10, 12, 11]),
            (2, vec![11, 12, 10, 11]),
            (3, vec![12, 11, 11, 10]),
        ]
        .into_iter()
        .collect(),
    };
    let nodes = [0, 1, 2, 3];
    let p: ProviderHints = [(
        "resource".to_string(),
        Some(vec![
            h(&[0, 1], true),
            h(&[0, 2], true),
            h(&[0, 1, 2, 3], false),
        ]),
    )]
    .into_iter()
    .collect();
    let providers = [p];
    for policy in [Policy::BestEffort, Policy::Restricted] {
        assert_eq!(policy.merge(&nodes, &providers), (h(&[0, 1], true), true));
        assert_eq!(
            policy.merge_with(&nodes, &providers, Some(&info)),
            (h(&[0, 2], true), true)
        );
    }
    // Narrower still beats closer, and non-preferred hints keep the default rule.
    let q: ProviderHints = [(
        "resource".to_string(),
        Some(vec![h(&[0, 2], true), h(&[1], true)]),
    )]
    .into_iter()
    .collect();
    assert_eq!(
        Policy::BestEffort.merge_with(&nodes, &[q], Some(&info)),
        (h(&[1], true), true)
    );
}
