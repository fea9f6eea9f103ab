//! Upstream's `policy_static_test.go` tables (Kubernetes 1.20.2): `TestStaticPolicyStart`,
//! `TestStaticPolicyAdd`, `TestStaticPolicyRemove`, `TestTopologyAwareAllocateCPUs`, plus the
//! `full-pcpus-only` checks of later releases.

use super::super::topology::fixtures::*;
use super::*;
use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn set(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

/// Upstream `makePod`: one container, memory 1G request and limit.
fn make_pod(uid: &str, container: &str, req: &str, lim: &str) -> Pod {
    let q = |cpu: &str| {
        Some(
            [
                ("cpu".to_string(), Quantity(cpu.into())),
                ("memory".to_string(), Quantity("1G".into())),
            ]
            .into_iter()
            .collect(),
        )
    };
    let mut p = Pod::default();
    p.metadata.uid = Some(uid.into());
    p.spec = Some(PodSpec {
        containers: vec![Container {
            name: container.into(),
            resources: Some(ResourceRequirements {
                requests: q(req),
                limits: q(lim),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    });
    p
}

fn state(default: &str, assigned: &[(&str, &str, &str)]) -> State {
    let mut s = State {
        default: set(default),
        ..State::default()
    };
    for (p, c, cpus) in assigned {
        s.set(p, c, set(cpus));
    }
    s
}

#[test]
fn start_validates_the_state_as_upstream() {
    let policy = StaticPolicy::new(dual_socket_ht(), 1, &CpuSet::new(), false).unwrap();
    assert_eq!(policy.reserved.to_string(), "0");
    let mut empty = State::default();
    policy.start(&mut empty).unwrap();
    assert_eq!(empty.default.to_string(), "0-11");
    let ok = state("0-1,3-11", &[("fakePod", "0", "2")]);
    policy.start(&mut ok.clone()).unwrap();
    for (what, st, want) in [
        (
            "empty cpuset",
            state("", &[("fakePod", "0", "0-1")]),
            "default cpuset cannot be empty",
        ),
        (
            "reserved not in pool",
            state("1-11", &[]),
            "not all reserved cpus: \"0\" are present in defaultCpuSet: \"1-11\"",
        ),
        (
            "assigned core still in pool",
            state("0-11", &[("fakePod", "0", "2")]),
            "pod: fakePod, container: 0 cpuset: \"2\" overlaps with default cpuset \"0-11\"",
        ),
        (
            "cpu 12 not in topology",
            state("0-12", &[]),
            "current set of available CPUs \"0-11\" doesn't match with CPUs in state \"0-12\"",
        ),
        (
            "cpu 11 not in state",
            state("0-10", &[]),
            "current set of available CPUs \"0-11\" doesn't match with CPUs in state \"0-10\"",
        ),
    ] {
        let e = policy.start(&mut st.clone()).unwrap_err().to_string();
        assert_eq!(e, want, "{what}");
    }
    // Upstream `TestStaticPolicyReservedCPUs`-style: an explicit set must have the count.
    let e = StaticPolicy::new(single_socket_ht(), 2, &set("0"), false).unwrap_err();
    assert_eq!(
        e.to_string(),
        "[cpumanager] unable to reserve the required amount of CPUs (size of 0 did not equal 2)"
    );
    // Two CPUs by topology: a whole core (0 and its sibling 4).
    let p = StaticPolicy::new(single_socket_ht(), 2, &CpuSet::new(), false).unwrap();
    assert_eq!(p.reserved.to_string(), "0,4");
}

/// Upstream `TestStaticPolicyAdd`.
#[test]
fn add_as_upstream() {
    type Case = (
        &'static str,
        CpuTopology,
        State,
        Pod,
        Result<&'static str, &'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "GuPodSingleCore, SingleSocketHT, ExpectError",
            single_socket_ht(),
            state("0-7", &[]),
            make_pod("fakePod", "fakeContainer2", "8000m", "8000m"),
            Err("not enough cpus available to satisfy request"),
        ),
        (
            "GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU",
            single_socket_ht(),
            state("0-7", &[]),
            make_pod("fakePod", "fakeContainer2", "1000m", "1000m"),
            Ok("4"),
        ),
        (
            "GuPodMultipleCores, SingleSocketHT, ExpectAllocOneCore",
            single_socket_ht(),
            state("0-1,4-5", &[("fakePod", "fakeContainer100", "2-3,6-7")]),
            make_pod("fakePod", "fakeContainer3", "2000m", "2000m"),
            Ok("1,5"),
        ),
        (
            "GuPodMultipleCores, SingleSocketHT, ExpectSameAllocation",
            single_socket_ht(),
            state("0-1,4-5", &[("fakePod", "fakeContainer3", "2-3,6-7")]),
            make_pod("fakePod", "fakeContainer3", "4000m", "4000m"),
            Ok("2-3,6-7"),
        ),
        (
            "GuPodMultipleCores, DualSocketHT, ExpectAllocOneSocket",
            dual_socket_ht(),
            state("0-1,3-11", &[("fakePod", "fakeContainer100", "2")]),
            make_pod("fakePod", "fakeContainer3", "6000m", "6000m"),
            Ok("1,3,5,7,9,11"),
        ),
        (
            "GuPodMultipleCores, DualSocketHT, ExpectAllocThreeCores",
            dual_socket_ht(),
            state("0,2-4,6-11", &[("fakePod", "fakeContainer100", "1,5")]),
            make_pod("fakePod", "fakeContainer3", "6000m", "6000m"),
            Ok("2-4,8-10"),
        ),
        (
            "GuPodMultipleCores, DualSocketNoHT, ExpectAllocOneSocket",
            dual_socket_no_ht(),
            state("0-1,3-7", &[]),
            make_pod("fakePod", "fakeContainer1", "4000m", "4000m"),
            Ok("4-7"),
        ),
        (
            "GuPodMultipleCores, DualSocketNoHT, ExpectAllocFourCores",
            dual_socket_no_ht(),
            state("0-1,3,6-7", &[("fakePod", "fakeContainer100", "4-5")]),
            make_pod("fakePod", "fakeContainer1", "4000m", "4000m"),
            Ok("1,3,6-7"),
        ),
        (
            "GuPodMultipleCores, DualSocketHT, ExpectAllocOneSocketOneCore",
            dual_socket_ht(),
            state("0-1,3-11", &[("fakePod", "fakeContainer100", "2")]),
            make_pod("fakePod", "fakeContainer3", "8000m", "8000m"),
            Ok("1,3-5,7,9-11"),
        ),
        (
            "NonGuPod, SingleSocketHT, NoAlloc",
            single_socket_ht(),
            state("0-7", &[]),
            make_pod("fakePod", "fakeContainer1", "1000m", "2000m"),
            Ok(""),
        ),
        (
            "GuPodNonIntegerCore, SingleSocketHT, NoAlloc",
            single_socket_ht(),
            state("0-7", &[]),
            make_pod("fakePod", "fakeContainer4", "977m", "977m"),
            Ok(""),
        ),
        (
            "GuPodMultipleCores, SingleSocketHT, NoAllocExpectError",
            single_socket_ht(),
            state("0,7", &[("fakePod", "fakeContainer100", "1-6")]),
            make_pod("fakePod", "fakeContainer5", "2000m", "2000m"),
            Err("not enough cpus available to satisfy request"),
        ),
        (
            "GuPodMultipleCores, DualSocketHT, NoAllocExpectError",
            dual_socket_ht(),
            state("0,4-11", &[("fakePod", "fakeContainer100", "1-3")]),
            make_pod("fakePod", "fakeContainer5", "10000m", "10000m"),
            Err("not enough cpus available to satisfy request"),
        ),
    ];
    for (what, topo, st, pod, want) in cases {
        let mut policy = StaticPolicy::new(topo, 1, &CpuSet::new(), false).unwrap();
        let mut st = st;
        let before = st.clone();
        let c = pod.spec.as_ref().unwrap().containers[0].clone();
        match (policy.allocate(&mut st, &pod, &c, None), want) {
            (Ok(got), Ok(w)) => {
                let got = got.map(|s| s.to_string()).unwrap_or_default();
                assert_eq!(got, w, "{what}");
                if !w.is_empty() {
                    assert_eq!(st.get("fakePod", &c.name).unwrap().to_string(), w, "{what}");
                    assert!(
                        st.default.intersection(&set(w)).is_empty(),
                        "{what}: pool keeps {w}"
                    );
                }
            }
            (Err(e), Err(w)) => {
                assert!(e.to_string().starts_with(w), "{what}: {e}");
                assert_eq!(e.reason(), "UnexpectedAdmissionError");
                assert_eq!(st, before, "{what}: a failed allocation changes nothing");
            }
            (got, w) => panic!("{what}: got {got:?}, want {w:?}"),
        }
    }
}

/// Upstream `TestStaticPolicyRemove` plus sibling reuse.
#[test]
fn remove_returns_cpus_to_the_pool() {
    let mut policy = StaticPolicy::new(single_socket_ht(), 1, &CpuSet::new(), false).unwrap();
    let mut st = state("1-3,5-7", &[("fakePod", "fakeContainer1", "4")]);
    policy.remove_container(&mut st, "fakePod", "fakeContainer1");
    assert_eq!(st.default.to_string(), "1-7");
    assert!(st.assignments.is_empty());
    let mut st = state(
        "1,3,5,7",
        &[
            ("fakePod", "fakeContainer1", "4,6"),
            ("fakePod", "fakeContainer2", "2"),
        ],
    );
    policy.remove_container(&mut st, "fakePod", "fakeContainer1");
    assert_eq!(st.default.to_string(), "1,3-7");
    policy.remove_container(&mut st, "fakePod", "fakeContainer2");
    assert_eq!(st.default.to_string(), "1-7");
    // Nothing to remove: nothing changes.
    policy.remove_container(&mut st, "fakePod", "fakeContainer3");
    assert_eq!(st.default.to_string(), "1-7");
    // An init container's CPUs reused by the app container stay taken while it holds them.
    let mut st = state("0-3", &[("p", "init", "4-7"), ("p", "app", "4-7")]);
    policy.remove_container(&mut st, "p", "init");
    assert_eq!(st.default.to_string(), "0-3");
    policy.remove_container(&mut st, "p", "app");
    assert_eq!(st.default.to_string(), "0-7");
}

/// Upstream `TestTopologyAwareAllocateCPUs`.
#[test]
fn topology_aware_allocation() {
    for (what, n, mask, want) in [
        ("Request 2 CPUs, No BitMask", 2, None, "0,6"),
        (
            "Request 2 CPUs, BitMask on Socket 0",
            2,
            Some(&[0][..]),
            "0,6",
        ),
        (
            "Request 2 CPUs, BitMask on Socket 1",
            2,
            Some(&[1][..]),
            "1,7",
        ),
        (
            "Request 8 CPUs, BitMask on Socket 0",
            8,
            Some(&[0][..]),
            "0-2,4,6-8,10",
        ),
        (
            "Request 8 CPUs, BitMask on Socket 1",
            8,
            Some(&[1][..]),
            "0-1,3,5-7,9,11",
        ),
    ] {
        let policy = StaticPolicy::new(dual_socket_ht(), 0, &CpuSet::new(), false).unwrap();
        let mut st = state("0-11", &[]);
        let got = policy
            .allocate_cpus(&mut st, n, mask.map(BitMask::from_nodes), &CpuSet::new())
            .unwrap();
        assert_eq!(got.to_string(), want, "{what}");
    }
}

/// Init container CPUs are reused by the app container (upstream `cpusToReuse`).
#[test]
fn app_containers_reuse_init_cpus() {
    let mut policy = StaticPolicy::new(single_socket_ht(), 1, &CpuSet::new(), false).unwrap();
    let mut pod = make_pod("p", "app", "2", "2");
    let app = pod.spec.as_ref().unwrap().containers[0].clone();
    let mut init = app.clone();
    init.name = "init".into();
    pod.spec.as_mut().unwrap().init_containers = Some(vec![init.clone()]);
    let mut st = state("0-7", &[]);
    let a = policy
        .allocate(&mut st, &pod, &init, None)
        .unwrap()
        .unwrap();
    let b = policy.allocate(&mut st, &pod, &app, None).unwrap().unwrap();
    assert_eq!(a, b);
    assert_eq!(st.default.len(), 6);
}

/// `full-pcpus-only` (upstream 1.22+ `SMTAlignmentError`).
#[test]
fn full_pcpus_only() {
    let mut policy = StaticPolicy::new(single_socket_ht(), 2, &CpuSet::new(), true).unwrap();
    let mut st = state("0-7", &[]);
    let pod = make_pod("p", "c", "1", "1");
    let c = pod.spec.as_ref().unwrap().containers[0].clone();
    let e = policy.allocate(&mut st, &pod, &c, None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2"
    );
    assert_eq!(e.reason(), "SMTAlignmentError");
    let pod = make_pod("p", "c", "8", "8");
    let c = pod.spec.as_ref().unwrap().containers[0].clone();
    let e = policy.allocate(&mut st, &pod, &c, None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 6, requested CPUs = 8, CPUs per core = 2"
    );
    let pod = make_pod("p", "c", "2", "2");
    let c = pod.spec.as_ref().unwrap().containers[0].clone();
    assert_eq!(
        policy
            .allocate(&mut st, &pod, &c, None)
            .unwrap()
            .unwrap()
            .to_string(),
        "1,5"
    );
}

/// Upstream `TestGetTopologyHints`-style: the dual-socket box, one NUMA node per socket.
#[test]
fn topology_hints() {
    let policy = StaticPolicy::new(dual_socket_ht(), 0, &CpuSet::new(), false).unwrap();
    let st = state("0-11", &[]);
    let pod = make_pod("p", "c", "2", "2");
    let c = pod.spec.as_ref().unwrap().containers[0].clone();
    let hint = |nodes: &[usize], preferred| TopologyHint {
        numa_affinity: Some(BitMask::from_nodes(nodes)),
        preferred,
    };
    assert_eq!(
        policy.hints(&st, &pod, &c),
        Some(vec![
            hint(&[0], true),
            hint(&[1], true),
            hint(&[0, 1], false)
        ])
    );
    assert_eq!(policy.pod_hints(&st, &pod), policy.hints(&st, &pod, &c));
    // Already allocated on node 1: the same hints again, from that set only.
    let st = state("0,2-6,8-11", &[("p", "c", "1,7")]);
    assert_eq!(
        policy.hints(&st, &pod, &c),
        Some(vec![hint(&[1], true), hint(&[0, 1], false)])
    );
    // Allocated with another size: cannot be satisfied.
    let st = state("0,2-11", &[("p", "c", "1")]);
    assert_eq!(policy.hints(&st, &pod, &c), Some(vec![]));
    // Not Guaranteed: no preference.
    let pod = make_pod("p", "c", "1", "2");
    assert_eq!(policy.hints(&st, &pod, &c), None);
}

#[test]
fn checkpoint_round_trip() {
    let st = state("0,3", &[("uid-1", "c", "1-2")]);
    let cp = st.to_checkpoint(STATIC);
    assert_eq!(cp.entries["uid-1"]["c"], "1-2");
    assert_eq!(State::from_checkpoint(&cp).unwrap(), st);
}
