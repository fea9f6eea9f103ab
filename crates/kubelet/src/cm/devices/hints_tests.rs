//! Upstream's `devicemanager/topology_hints_test.go` tables on two NUMA nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::cm::devices::api;
use crate::cm::devices::state::Allocation;

fn numa_dev(id: &str, node: i64) -> api::Device {
    api::Device {
        id: id.into(),
        health: api::HEALTHY.into(),
        topology: Some(api::TopologyInfo {
            nodes: vec![api::NumaNode { id: node }],
        }),
    }
}

fn plain_dev(id: &str) -> api::Device {
    api::Device {
        id: id.into(),
        health: api::HEALTHY.into(),
        topology: None,
    }
}

fn mask(nodes: &[usize]) -> BitMask {
    BitMask::from_nodes(nodes)
}

fn hint(nodes: &[usize], preferred: bool) -> TopologyHint {
    TopologyHint {
        numa_affinity: Some(mask(nodes)),
        preferred,
    }
}

fn container(name: &str, limits: &[(&str, &str)]) -> Container {
    Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            limits: Some(
                limits
                    .iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

type Limits<'a> = &'a [(&'a str, &'a str)];

fn pod(inits: &[Limits], containers: &[(&str, Limits)]) -> Arc<Pod> {
    let mut p = Pod::default();
    p.metadata.uid = Some("fakePod".into());
    p.spec = Some(PodSpec {
        init_containers: Some(
            inits
                .iter()
                .enumerate()
                .map(|(i, l)| container(&format!("init{i}"), l))
                .collect(),
        ),
        containers: containers.iter().map(|(n, l)| container(n, l)).collect(),
        ..Default::default()
    });
    Arc::new(p)
}

fn state(devices: &[(&str, Vec<api::Device>)], allocated: &[(&str, &str, &str, &[&str])]) -> State {
    let mut st = State::default();
    for (r, d) in devices {
        st.update_devices(r, d);
    }
    for (p, c, r, ids) in allocated {
        let alloc = Allocation {
            per_numa: BTreeMap::from([(0, ids.iter().map(|s| s.to_string()).collect())]),
            response: api::ContainerAllocateResponse::default(),
        };
        st.insert(p, c, r, alloc);
    }
    st
}

fn canon(h: &Option<Vec<TopologyHint>>) -> Option<BTreeSet<(u64, bool)>> {
    h.as_ref().map(|v| {
        v.iter()
            .map(|h| (h.numa_affinity.map_or(0, |m| m.0), h.preferred))
            .collect()
    })
}

struct Case {
    name: &'static str,
    pod: Arc<Pod>,
    devices: Vec<(&'static str, Vec<api::Device>)>,
    allocated: Vec<(
        &'static str,
        &'static str,
        &'static str,
        &'static [&'static str],
    )>,
    expected: Vec<(&'static str, Option<Vec<TopologyHint>>)>,
}

fn four() -> Vec<api::Device> {
    vec![
        numa_dev("Dev1", 0),
        numa_dev("Dev2", 1),
        numa_dev("Dev3", 0),
        numa_dev("Dev4", 1),
    ]
}

fn two_per_node() -> Vec<api::Device> {
    vec![
        numa_dev("Dev1", 0),
        numa_dev("Dev2", 0),
        numa_dev("Dev3", 1),
        numa_dev("Dev4", 1),
    ]
}

fn one(r: &'static str, n: &'static str) -> Arc<Pod> {
    pod(&[], &[("fakeContainer", &[(r, n)])])
}

fn spread() -> Vec<TopologyHint> {
    vec![hint(&[0], true), hint(&[1], true), hint(&[0, 1], false)]
}

/// Upstream `getCommonTestCases`.
fn common_cases() -> Vec<Case> {
    vec![
        Case {
            name: "Single Request, no alignment",
            pod: one("testdevice", "1"),
            devices: vec![("testdevice", vec![plain_dev("Dev1"), plain_dev("Dev2")])],
            allocated: vec![],
            expected: vec![("testdevice", None)],
        },
        Case {
            name: "Single Request, only one with alignment",
            pod: one("testdevice", "1"),
            devices: vec![("testdevice", vec![plain_dev("Dev1"), numa_dev("Dev2", 1)])],
            allocated: vec![],
            expected: vec![(
                "testdevice",
                Some(vec![hint(&[1], true), hint(&[0, 1], false)]),
            )],
        },
        Case {
            name: "Single Request, one device per socket",
            pod: one("testdevice", "1"),
            devices: vec![("testdevice", vec![numa_dev("Dev1", 0), numa_dev("Dev2", 1)])],
            allocated: vec![],
            expected: vec![("testdevice", Some(spread()))],
        },
        Case {
            name: "Request for 2, one device per socket",
            pod: one("testdevice", "2"),
            devices: vec![("testdevice", vec![numa_dev("Dev1", 0), numa_dev("Dev2", 1)])],
            allocated: vec![],
            expected: vec![("testdevice", Some(vec![hint(&[0, 1], true)]))],
        },
        Case {
            name: "Request for 2, 2 devices per socket",
            pod: one("testdevice", "2"),
            devices: vec![("testdevice", four())],
            allocated: vec![],
            expected: vec![("testdevice", Some(spread()))],
        },
        Case {
            name: "Request for 2, optimal on 1 NUMA node, forced cross-NUMA",
            pod: one("testdevice", "2"),
            devices: vec![("testdevice", four())],
            allocated: vec![(
                "fakePod",
                "fakeOtherContainer",
                "testdevice",
                &["Dev1", "Dev2"],
            )],
            expected: vec![("testdevice", Some(vec![hint(&[0, 1], false)]))],
        },
        Case {
            name: "2 device types, mixed configuration",
            pod: pod(
                &[],
                &[(
                    "fakeContainer",
                    &[("testdevice1", "2"), ("testdevice2", "1")],
                )],
            ),
            devices: vec![
                ("testdevice1", four()),
                ("testdevice2", vec![numa_dev("Dev1", 0)]),
            ],
            allocated: vec![],
            expected: vec![
                ("testdevice1", Some(spread())),
                (
                    "testdevice2",
                    Some(vec![hint(&[0], true), hint(&[0, 1], false)]),
                ),
            ],
        },
        Case {
            name: "Single device type, more requested than available",
            pod: one("testdevice", "6"),
            devices: vec![("testdevice", two_per_node())],
            allocated: vec![],
            expected: vec![("testdevice", Some(vec![]))],
        },
        Case {
            name: "Single device type, all already allocated to container",
            pod: one("testdevice", "2"),
            devices: vec![("testdevice", vec![numa_dev("Dev1", 0), numa_dev("Dev2", 0)])],
            allocated: vec![("fakePod", "fakeContainer", "testdevice", &["Dev1", "Dev2"])],
            expected: vec![(
                "testdevice",
                Some(vec![hint(&[0], true), hint(&[0, 1], false)]),
            )],
        },
        Case {
            name: "Single device type, less already allocated to container than requested",
            pod: one("testdevice", "4"),
            devices: vec![("testdevice", two_per_node())],
            allocated: vec![("fakePod", "fakeContainer", "testdevice", &["Dev1", "Dev2"])],
            expected: vec![("testdevice", Some(vec![]))],
        },
        Case {
            name: "Single device type, more already allocated to container than requested",
            pod: one("testdevice", "2"),
            devices: vec![("testdevice", two_per_node())],
            allocated: vec![(
                "fakePod",
                "fakeContainer",
                "testdevice",
                &["Dev1", "Dev2", "Dev3", "Dev4"],
            )],
            expected: vec![("testdevice", Some(vec![]))],
        },
    ]
}

/// Upstream `getPodScopeTestCases`.
fn pod_scope_cases() -> Vec<Case> {
    let both = || {
        vec![
            ("testdevice1", two_per_node()),
            ("testdevice2", two_per_node()),
        ]
    };
    vec![
        Case {
            name: "2 device types, user container only",
            pod: pod(
                &[],
                &[
                    ("fakeContainer1", &[("testdevice1", "2")]),
                    ("fakeContainer2", &[("testdevice2", "2")]),
                    ("fakeContainer3", &[("notRegistered", "2")]),
                ],
            ),
            devices: both(),
            allocated: vec![],
            expected: vec![
                ("testdevice1", Some(spread())),
                ("testdevice2", Some(spread())),
            ],
        },
        Case {
            name: "2 device types, request resources for init containers and user container",
            pod: pod(
                &[
                    &[("testdevice1", "1"), ("testdevice2", "1")],
                    &[("testdevice1", "1"), ("testdevice2", "2")],
                ],
                &[
                    (
                        "fakeContainer1",
                        &[("testdevice1", "1"), ("testdevice2", "1")],
                    ),
                    (
                        "fakeContainer2",
                        &[("testdevice1", "1"), ("testdevice2", "1")],
                    ),
                    ("fakeContainer3", &[("notRegistered", "1")]),
                ],
            ),
            devices: both(),
            allocated: vec![],
            expected: vec![
                ("testdevice1", Some(spread())),
                ("testdevice2", Some(spread())),
            ],
        },
        Case {
            name: "2 device types, user container only, optimal on 1 NUMA node, forced cross-NUMA",
            pod: pod(
                &[],
                &[
                    (
                        "fakeContainer1",
                        &[("testdevice1", "1"), ("testdevice2", "1")],
                    ),
                    (
                        "fakeContainer2",
                        &[("testdevice1", "1"), ("testdevice2", "1")],
                    ),
                    ("fakeContainer3", &[("notRegistered", "1")]),
                ],
            ),
            devices: both(),
            allocated: vec![
                (
                    "fakeOtherPod",
                    "fakeOtherContainer",
                    "testdevice1",
                    &["Dev1", "Dev3"],
                ),
                (
                    "fakeOtherPod",
                    "fakeOtherContainer",
                    "testdevice2",
                    &["Dev1", "Dev3"],
                ),
            ],
            expected: vec![
                ("testdevice1", Some(vec![hint(&[0, 1], false)])),
                ("testdevice2", Some(vec![hint(&[0, 1], false)])),
            ],
        },
    ]
}

fn check(name: &str, got: &ProviderHints, expected: &[(&str, Option<Vec<TopologyHint>>)]) {
    for (r, want) in expected {
        let have = got
            .get(*r)
            .unwrap_or_else(|| panic!("{name}: no entry for {r}"));
        assert_eq!(canon(have), canon(want), "{name}: {r}");
    }
}

#[test]
fn get_topology_hints_table() {
    for tc in common_cases() {
        let st = state(&tc.devices, &tc.allocated);
        let c = &podutil_containers(&tc.pod)[0];
        let got = st.container_hints(&[0, 1], "fakePod", c, &BTreeMap::new());
        check(tc.name, &got, &tc.expected);
    }
}

#[test]
fn get_pod_topology_hints_table() {
    for tc in common_cases().into_iter().chain(pod_scope_cases()) {
        let st = state(&tc.devices, &tc.allocated);
        let got = st.pod_hints(&[0, 1], &tc.pod);
        check(tc.name, &got, &tc.expected);
    }
}

fn podutil_containers(p: &Pod) -> Vec<Container> {
    p.spec
        .as_ref()
        .map(|s| s.containers.clone())
        .unwrap_or_default()
}

#[test]
fn reusable_devices_must_lie_in_every_hint() {
    // An init container left Dev1 (node 0): only masks containing node 0 remain.
    let st = state(&[("testdevice", four())], &[]);
    let c = container("app", &[("testdevice", "2")]);
    let reuse = BTreeMap::from([(
        "testdevice".to_string(),
        BTreeSet::from(["Dev1".to_string()]),
    )]);
    let got = st.container_hints(&[0, 1], "fakePod", &c, &reuse);
    assert_eq!(
        canon(&got["testdevice"]),
        canon(&Some(vec![hint(&[0], true), hint(&[0, 1], false)]))
    );
}

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
