//! Upstream's `devicemanager/topology_hints_test.go` tables on two NUMA nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::cm::devices::api;
use crate::cm::devices::state::Allocation;

pub(super) fn numa_dev(id: &str, node: i64) -> api::Device {
    api::Device {
        id: id.into(),
        health: api::HEALTHY.into(),
        topology: Some(api::TopologyInfo {
            nodes: vec![api::NumaNode { id: node }],
        }),
    }
}

pub(super) fn plain_dev(id: &str) -> api::Device {
    api::Device {
        id: id.into(),
        health: api::HEALTHY.into(),
        topology: None,
    }
}

pub(super) fn mask(nodes: &[usize]) -> BitMask {
    BitMask::from_nodes(nodes)
}

fn hint(nodes: &[usize], preferred: bool) -> TopologyHint {
    TopologyHint {
        numa_affinity: Some(mask(nodes)),
        preferred,
    }
}

pub(super) fn container(name: &str, limits: &[(&str, &str)]) -> Container {
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

pub(super) type Limits<'a> = &'a [(&'a str, &'a str)];

pub(super) fn pod(inits: &[Limits], containers: &[(&str, Limits)]) -> Arc<Pod> {
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

pub(super) fn state(
    devices: &[(&str, Vec<api::Device>)],
    allocated: &[(&str, &str, &str, &[&str])],
) -> State {
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

pub(super) fn four() -> Vec<api::Device> {
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
