use super::*;
use k8s_openapi::api::core::v1::{
    Affinity, ContainerPort, NodeAffinity, NodeSelector, PodOS, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

type Res<'a> = &'a [(&'a str, &'a str)];

fn ql(pairs: Res) -> Option<BTreeMap<String, Quantity>> {
    (!pairs.is_empty()).then(|| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect()
    })
}

fn ctr(name: &str, req: Res, lim: Res) -> Container {
    Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            requests: ql(req),
            limits: ql(lim),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn sidecar(name: &str, req: Res) -> Container {
    Container {
        restart_policy: Some("Always".into()),
        ..ctr(name, req, &[])
    }
}

fn pod(containers: Vec<Container>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn with(mut p: Pod, f: impl FnOnce(&mut PodSpec)) -> Pod {
    f(p.spec.as_mut().unwrap());
    p
}

fn empty_pod() -> Pod {
    pod(vec![ctr("c", &[], &[])])
}

fn node(alloc: Res) -> NodeView {
    NodeView {
        name: "n1".into(),
        labels: BTreeMap::new(),
        taints: vec![],
        allocatable: ql(alloc).unwrap_or_default(),
        sysctls: crate::sysctl::Allowlist::new(&crate::sysctl::safe_sysctls(Some((6, 1)))).unwrap(),
    }
}

fn big_node() -> NodeView {
    node(&[
        ("cpu", "4"),
        ("memory", "8Gi"),
        ("pods", "110"),
        ("ephemeral-storage", "100Gi"),
    ])
}

fn units(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

const GI: i64 = 1 << 30;
const MI: i64 = 1 << 20;

// --- request computation -------------------------------------------------------------------

#[test]
fn request_computation_table() {
    let cases: Vec<(&str, Pod, BTreeMap<String, i64>)> = vec![
        ("no spec", Pod::default(), units(&[])),
        ("no resources", empty_pod(), units(&[])),
        (
            "one container",
            pod(vec![ctr("a", &[("cpu", "250m"), ("memory", "64Mi")], &[])]),
            units(&[("cpu", 250), ("memory", 64 * MI)]),
        ),
        (
            "limits stand in for missing requests",
            pod(vec![ctr(
                "a",
                &[("cpu", "100m")],
                &[("cpu", "1"), ("memory", "1Gi")],
            )]),
            units(&[("cpu", 100), ("memory", GI)]),
        ),
        (
            "containers are summed",
            pod(vec![
                ctr("a", &[("cpu", "1"), ("memory", "1Gi")], &[]),
                ctr("b", &[("cpu", "500m")], &[]),
            ]),
            units(&[("cpu", 1500), ("memory", GI)]),
        ),
        (
            "largest init container wins per resource",
            with(
                pod(vec![ctr("a", &[("cpu", "1"), ("memory", "1Gi")], &[])]),
                |s| {
                    s.init_containers = Some(vec![
                        ctr("i1", &[("cpu", "2"), ("memory", "512Mi")], &[]),
                        ctr("i2", &[("cpu", "500m"), ("memory", "3Gi")], &[]),
                    ])
                },
            ),
            units(&[("cpu", 2000), ("memory", 3 * GI)]),
        ),
        (
            "init container resources absent from containers are kept",
            with(pod(vec![ctr("a", &[("cpu", "1")], &[])]), |s| {
                s.init_containers = Some(vec![ctr("i", &[("example.com/x", "2")], &[])])
            }),
            units(&[("cpu", 1000), ("example.com/x", 2)]),
        ),
        (
            "init container limits default its requests",
            with(pod(vec![ctr("a", &[("cpu", "1")], &[])]), |s| {
                s.init_containers = Some(vec![ctr("i", &[], &[("cpu", "3")])])
            }),
            units(&[("cpu", 3000)]),
        ),
        (
            // KEP-753: sidecars add to the containers and run beside later init containers.
            "sidecars count like containers and beside later init containers",
            with(pod(vec![ctr("a", &[("cpu", "1")], &[])]), |s| {
                s.init_containers = Some(vec![
                    ctr("i1", &[("cpu", "2")], &[]),
                    sidecar("s1", &[("cpu", "500m")]),
                    ctr("i2", &[("cpu", "2")], &[]),
                    sidecar("s2", &[("cpu", "200m")]),
                ])
            }),
            // containers: 1 + 0.5 + 0.2 = 1.7; i2 with s1 = 2.5; i1 alone = 2.
            units(&[("cpu", 2500)]),
        ),
        (
            "sidecar sum above init",
            with(pod(vec![ctr("a", &[("memory", "1Gi")], &[])]), |s| {
                s.init_containers = Some(vec![
                    sidecar("s1", &[("memory", "1Gi")]),
                    ctr("i", &[("memory", "1Gi")], &[]),
                ])
            }),
            units(&[("memory", 2 * GI)]),
        ),
        (
            "overhead is added",
            with(pod(vec![ctr("a", &[("cpu", "1")], &[])]), |s| {
                s.overhead = ql(&[("cpu", "250m"), ("memory", "120Mi")])
            }),
            units(&[("cpu", 1250), ("memory", 120 * MI)]),
        ),
        (
            "pod-level requests replace the containers' aggregate",
            with(
                pod(vec![ctr("a", &[("cpu", "1"), ("memory", "1Gi")], &[])]),
                |s| {
                    s.resources = Some(ResourceRequirements {
                        requests: ql(&[("cpu", "2")]),
                        ..Default::default()
                    })
                },
            ),
            units(&[("cpu", 2000), ("memory", GI)]),
        ),
        (
            "pod-level limit defaults a request the containers do not make",
            with(pod(vec![ctr("a", &[("memory", "1Gi")], &[])]), |s| {
                s.resources = Some(ResourceRequirements {
                    limits: ql(&[("cpu", "3"), ("memory", "4Gi")]),
                    ..Default::default()
                })
            }),
            units(&[("cpu", 3000), ("memory", GI)]),
        ),
        (
            "pod-level unsupported resources are ignored",
            with(pod(vec![ctr("a", &[], &[])]), |s| {
                s.resources = Some(ResourceRequirements {
                    requests: ql(&[("ephemeral-storage", "1Gi")]),
                    ..Default::default()
                })
            }),
            units(&[]),
        ),
        (
            "unparsable quantities are ignored",
            pod(vec![ctr("a", &[("cpu", "lots"), ("memory", "1Gi")], &[])]),
            units(&[("memory", GI)]),
        ),
        (
            "non-cpu resources round up to whole units",
            pod(vec![
                ctr("a", &[("memory", "1500m")], &[]),
                ctr("b", &[("cpu", "0.0005")], &[]),
            ]),
            units(&[("cpu", 1), ("memory", 2)]),
        ),
    ];
    for (name, p, want) in cases {
        assert_eq!(pod_requests(&p), want, "{name}");
    }
}

// --- resources -----------------------------------------------------------------------------

fn reject(reason: &str, message: &str) -> Result<(), Rejection> {
    Err(Rejection {
        reason: reason.into(),
        message: message.into(),
    })
}

#[test]
fn resources_table() {
    let cpu_pod = |cpu: &str| pod(vec![ctr("a", &[("cpu", cpu)], &[])]);
    let running_1cpu = cpu_pod("1");
    // (name, pod, node, running pods, expected)
    type Case = (&'static str, Pod, NodeView, Vec<Pod>, Result<(), Rejection>);
    let cases: Vec<Case> = vec![
        ("fits", cpu_pod("1"), big_node(), vec![], Ok(())),
        (
            "exact fit",
            cpu_pod("3"),
            big_node(),
            vec![running_1cpu.clone()],
            Ok(()),
        ),
        (
            "cpu",
            cpu_pod("3500m"),
            big_node(),
            vec![running_1cpu.clone()],
            reject(
                "OutOfcpu",
                "Node didn't have enough resource: cpu, requested: 3500, used: 1000, capacity: 4000",
            ),
        ),
        (
            "memory in bytes",
            pod(vec![ctr("a", &[("memory", "5Gi")], &[])]),
            big_node(),
            vec![pod(vec![ctr("a", &[("memory", "4Gi")], &[])])],
            reject(
                "OutOfmemory",
                "Node didn't have enough resource: memory, requested: 5368709120, used: 4294967296, capacity: 8589934592",
            ),
        ),
        (
            "memory from limits only (static pod without defaulting)",
            pod(vec![ctr("a", &[], &[("memory", "9Gi")])]),
            big_node(),
            vec![],
            reject(
                "OutOfmemory",
                "Node didn't have enough resource: memory, requested: 9663676416, used: 0, capacity: 8589934592",
            ),
        ),
        (
            "ephemeral storage",
            pod(vec![ctr("a", &[("ephemeral-storage", "101Gi")], &[])]),
            big_node(),
            vec![],
            reject(
                "OutOfephemeral-storage",
                "Node didn't have enough resource: ephemeral-storage, requested: 108447924224, used: 0, capacity: 107374182400",
            ),
        ),
        (
            "pod count comes first",
            cpu_pod("100"),
            node(&[("cpu", "1"), ("pods", "1")]),
            vec![empty_pod()],
            reject(
                "OutOfpods",
                "Node didn't have enough resource: pods, requested: 1, used: 1, capacity: 1",
            ),
        ),
        (
            "no pods allocatable",
            empty_pod(),
            node(&[("cpu", "1")]),
            vec![],
            reject(
                "OutOfpods",
                "Node didn't have enough resource: pods, requested: 1, used: 0, capacity: 0",
            ),
        ),
        (
            "cpu missing from allocatable",
            cpu_pod("100m"),
            node(&[("pods", "10")]),
            vec![],
            reject(
                "OutOfcpu",
                "Node didn't have enough resource: cpu, requested: 100, used: 0, capacity: 0",
            ),
        ),
        (
            "cpu before memory",
            pod(vec![ctr("a", &[("cpu", "5"), ("memory", "9Gi")], &[])]),
            big_node(),
            vec![],
            reject(
                "OutOfcpu",
                "Node didn't have enough resource: cpu, requested: 5000, used: 0, capacity: 4000",
            ),
        ),
        (
            "best-effort pod only needs a pod slot",
            empty_pod(),
            node(&[("pods", "1")]),
            vec![],
            Ok(()),
        ),
        (
            "extended resource short",
            pod(vec![ctr("a", &[("example.com/gpu", "2")], &[])]),
            {
                let mut n = big_node();
                n.allocatable
                    .insert("example.com/gpu".into(), Quantity("2".into()));
                n
            },
            vec![pod(vec![ctr("a", &[("example.com/gpu", "1")], &[])])],
            reject(
                "OutOfexample.com/gpu",
                "Node didn't have enough resource: example.com/gpu, requested: 2, used: 1, capacity: 2",
            ),
        ),
        (
            "extended resource the node does not advertise is ignored",
            pod(vec![ctr("a", &[("example.com/gpu", "2")], &[])]),
            big_node(),
            vec![],
            Ok(()),
        ),
        (
            "zero extended request skipped",
            pod(vec![ctr("a", &[("example.com/gpu", "0")], &[])]),
            {
                let mut n = big_node();
                n.allocatable
                    .insert("example.com/gpu".into(), Quantity("0".into()));
                n
            },
            vec![],
            Ok(()),
        ),
        (
            "hugepages missing from the node count as zero",
            pod(vec![ctr("a", &[("hugepages-2Mi", "4Mi")], &[])]),
            big_node(),
            vec![],
            reject(
                "OutOfhugepages-2Mi",
                "Node didn't have enough resource: hugepages-2Mi, requested: 4194304, used: 0, capacity: 0",
            ),
        ),
        (
            "unknown unprefixed resources are not checked",
            pod(vec![ctr("a", &[("storage", "1Ti")], &[])]),
            big_node(),
            vec![],
            Ok(()),
        ),
        (
            "running pods count their init containers and overhead",
            cpu_pod("1"),
            big_node(),
            vec![with(cpu_pod("1"), |s| {
                s.init_containers = Some(vec![ctr("i", &[("cpu", "2")], &[])]);
                s.overhead = ql(&[("cpu", "500m")]);
            })],
            // 1 + 2.5 of 4 fits; the assertion after the table shows the 2.5.
            Ok(()),
        ),
    ];
    for (name, p, n, running, want) in cases {
        let refs: Vec<&Pod> = running.iter().collect();
        assert_eq!(admit(&p, &n, &refs), want, "{name}");
    }
    // The running pod above uses 2.5 cpu; 2 more do not fit.
    let running = with(cpu_pod("1"), |s| {
        s.init_containers = Some(vec![ctr("i", &[("cpu", "2")], &[])]);
        s.overhead = ql(&[("cpu", "500m")]);
    });
    assert_eq!(
        admit(&cpu_pod("2"), &big_node(), &[&running]),
        reject(
            "OutOfcpu",
            "Node didn't have enough resource: cpu, requested: 2000, used: 2500, capacity: 4000",
        )
    );
}

#[test]
fn pod_count() {
    assert!(admit_pod_count(0, 1).is_ok());
    assert!(admit_pod_count(109, 110).is_ok());
    let r = admit_pod_count(110, 110).unwrap_err();
    assert_eq!(r.reason, "OutOfpods");
    assert_eq!(
        r.message,
        "Node didn't have enough resource: pods, requested: 1, used: 110, capacity: 110"
    );
}

// --- node name -----------------------------------------------------------------------------

#[test]
fn node_name_table() {
    let cases = [
        (None, true),
        (Some(""), true),
        (Some("n1"), true),
        (Some("n2"), false),
    ];
    for (name, ok) in cases {
        let p = with(empty_pod(), |s| s.node_name = name.map(Into::into));
        let want = if ok {
            Ok(())
        } else {
            reject(
                "NodeName",
                "Predicate NodeName failed: node(s) didn't match the requested node name",
            )
        };
        assert_eq!(admit(&p, &big_node(), &[]), want, "{name:?}");
    }
}

// --- node affinity -------------------------------------------------------------------------

fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

fn term(exprs: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: (!exprs.is_empty()).then_some(exprs),
        match_fields: None,
    }
}

fn fields(fs: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: None,
        match_fields: Some(fs),
    }
}

fn affinity_pod(terms: Vec<NodeSelectorTerm>) -> Pod {
    with(empty_pod(), |s| {
        s.affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: terms,
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    })
}

fn labeled_node() -> NodeView {
    let mut n = big_node();
    n.labels = [("zone", "a"), ("disk", "ssd"), ("gen", "5")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    n
}

#[test]
fn node_affinity_table() {
    let selector = |pairs: &[(&str, &str)]| {
        with(empty_pod(), |s| {
            s.node_selector = Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        })
    };
    let expr = |r: NodeSelectorRequirement| affinity_pod(vec![term(vec![r])]);
    let cases: Vec<(&str, Pod, bool)> = vec![
        ("nothing required", empty_pod(), true),
        (
            "selector matches",
            selector(&[("zone", "a"), ("disk", "ssd")]),
            true,
        ),
        ("selector value differs", selector(&[("zone", "b")]), false),
        ("selector label missing", selector(&[("rack", "1")]), false),
        ("In", expr(req("zone", "In", &["b", "a"])), true),
        ("In no match", expr(req("zone", "In", &["b"])), false),
        ("In missing label", expr(req("rack", "In", &["1"])), false),
        (
            "In without values is invalid",
            expr(req("zone", "In", &[])),
            false,
        ),
        ("NotIn", expr(req("zone", "NotIn", &["b"])), true),
        ("NotIn excluded", expr(req("zone", "NotIn", &["a"])), false),
        (
            "NotIn missing label",
            expr(req("rack", "NotIn", &["1"])),
            true,
        ),
        ("Exists", expr(req("disk", "Exists", &[])), true),
        ("Exists missing", expr(req("rack", "Exists", &[])), false),
        (
            "Exists with values is invalid",
            expr(req("disk", "Exists", &["ssd"])),
            false,
        ),
        ("DoesNotExist", expr(req("rack", "DoesNotExist", &[])), true),
        (
            "DoesNotExist present",
            expr(req("disk", "DoesNotExist", &[])),
            false,
        ),
        ("Gt", expr(req("gen", "Gt", &["4"])), true),
        ("Gt equal", expr(req("gen", "Gt", &["5"])), false),
        ("Lt", expr(req("gen", "Lt", &["6"])), true),
        ("Lt not less", expr(req("gen", "Lt", &["5"])), false),
        (
            "Gt non-numeric label",
            expr(req("zone", "Gt", &["1"])),
            false,
        ),
        ("Gt missing label", expr(req("rack", "Gt", &["1"])), false),
        (
            "Gt non-numeric value is invalid",
            expr(req("gen", "Gt", &["x"])),
            false,
        ),
        (
            "Gt two values is invalid",
            expr(req("gen", "Gt", &["1", "2"])),
            false,
        ),
        (
            "unknown operator",
            expr(req("zone", "Equals", &["a"])),
            false,
        ),
        (
            "expressions are ANDed",
            affinity_pod(vec![term(vec![
                req("zone", "In", &["a"]),
                req("disk", "In", &["hdd"]),
            ])]),
            false,
        ),
        (
            "invalid requirement spoils a term even after a false one",
            affinity_pod(vec![term(vec![
                req("zone", "In", &["b"]),
                req("disk", "Bogus", &[]),
            ])]),
            false,
        ),
        (
            "terms are ORed",
            affinity_pod(vec![
                term(vec![req("zone", "In", &["b"])]),
                term(vec![req("disk", "In", &["ssd"])]),
            ]),
            true,
        ),
        (
            "an invalid term does not stop a later match",
            affinity_pod(vec![
                term(vec![req("zone", "In", &[])]),
                term(vec![req("zone", "In", &["a"])]),
            ]),
            true,
        ),
        ("no terms match nothing", affinity_pod(vec![]), false),
        (
            "empty term matches nothing",
            affinity_pod(vec![term(vec![])]),
            false,
        ),
        (
            "matchFields metadata.name In",
            affinity_pod(vec![fields(vec![req("metadata.name", "In", &["n1"])])]),
            true,
        ),
        (
            "matchFields metadata.name In other",
            affinity_pod(vec![fields(vec![req("metadata.name", "In", &["n2"])])]),
            false,
        ),
        (
            "matchFields NotIn",
            affinity_pod(vec![fields(vec![req("metadata.name", "NotIn", &["n2"])])]),
            true,
        ),
        (
            "matchFields two values is invalid",
            affinity_pod(vec![fields(vec![req(
                "metadata.name",
                "In",
                &["n1", "n2"],
            )])]),
            false,
        ),
        (
            "matchFields Exists is invalid",
            affinity_pod(vec![fields(vec![req("metadata.name", "Exists", &[])])]),
            false,
        ),
        (
            "matchFields and matchExpressions both hold",
            affinity_pod(vec![NodeSelectorTerm {
                match_expressions: Some(vec![req("zone", "In", &["a"])]),
                match_fields: Some(vec![req("metadata.name", "In", &["n1"])]),
            }]),
            true,
        ),
        (
            "selector and affinity both required",
            with(
                affinity_pod(vec![term(vec![req("zone", "In", &["a"])])]),
                |s| s.node_selector = Some([("disk".to_string(), "hdd".to_string())].into()),
            ),
            false,
        ),
    ];
    for (name, p, ok) in cases {
        let want = if ok {
            Ok(())
        } else {
            reject(
                "NodeAffinity",
                "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
            )
        };
        assert_eq!(admit(&p, &labeled_node(), &[]), want, "{name}");
    }
}

// --- host ports ----------------------------------------------------------------------------

fn port(host_port: i32, protocol: &str, host_ip: &str) -> ContainerPort {
    ContainerPort {
        container_port: 80,
        host_port: (host_port != 0).then_some(host_port),
        protocol: (!protocol.is_empty()).then(|| protocol.into()),
        host_ip: (!host_ip.is_empty()).then(|| host_ip.into()),
        ..Default::default()
    }
}

fn ports_pod(ports: Vec<ContainerPort>) -> Pod {
    let mut c = ctr("c", &[], &[]);
    c.ports = Some(ports);
    pod(vec![c])
}

#[test]
fn host_ports_table() {
    let p = |hp, proto, ip| ports_pod(vec![port(hp, proto, ip)]);
    let cases: Vec<(&str, Pod, Vec<Pod>, bool)> = vec![
        ("no running pods", p(8080, "TCP", ""), vec![], true),
        (
            "same port",
            p(8080, "TCP", ""),
            vec![p(8080, "TCP", "")],
            false,
        ),
        (
            "empty protocol is TCP",
            p(8080, "", ""),
            vec![p(8080, "TCP", "")],
            false,
        ),
        (
            "other protocol",
            p(8080, "UDP", ""),
            vec![p(8080, "TCP", "")],
            true,
        ),
        (
            "other port",
            p(8081, "TCP", ""),
            vec![p(8080, "TCP", "")],
            true,
        ),
        (
            "wildcard wants a port bound on one IP",
            p(8080, "TCP", "0.0.0.0"),
            vec![p(8080, "TCP", "10.0.0.1")],
            false,
        ),
        (
            "IP wants a port bound on the wildcard",
            p(8080, "TCP", "10.0.0.1"),
            vec![p(8080, "TCP", "")],
            false,
        ),
        (
            "same IP",
            p(8080, "TCP", "10.0.0.1"),
            vec![p(8080, "TCP", "10.0.0.1")],
            false,
        ),
        (
            "different IPs",
            p(8080, "TCP", "10.0.0.2"),
            vec![p(8080, "TCP", "10.0.0.1")],
            true,
        ),
        ("no host port", p(0, "TCP", ""), vec![p(0, "TCP", "")], true),
        (
            "hostNetwork ports are host ports",
            with(p(0, "TCP", ""), |s| s.host_network = Some(true)),
            vec![with(p(0, "TCP", ""), |s| s.host_network = Some(true))],
            false,
        ),
        (
            "hostNetwork defaulting uses containerPort",
            with(p(0, "TCP", ""), |s| s.host_network = Some(true)),
            vec![p(80, "TCP", "")],
            false,
        ),
        (
            "sidecar ports count",
            p(8080, "TCP", ""),
            vec![with(empty_pod(), |s| {
                let mut c = sidecar("s", &[]);
                c.ports = Some(vec![port(8080, "TCP", "")]);
                s.init_containers = Some(vec![c]);
            })],
            false,
        ),
        (
            "ordinary init container ports do not",
            p(8080, "TCP", ""),
            vec![with(empty_pod(), |s| {
                let mut c = ctr("i", &[], &[]);
                c.ports = Some(vec![port(8080, "TCP", "")]);
                s.init_containers = Some(vec![c]);
            })],
            true,
        ),
        (
            "any of the pod's ports",
            ports_pod(vec![port(1, "TCP", ""), port(2, "UDP", "")]),
            vec![p(3, "TCP", ""), p(2, "UDP", "")],
            false,
        ),
    ];
    for (name, p, running, ok) in cases {
        let refs: Vec<&Pod> = running.iter().collect();
        let want = if ok {
            Ok(())
        } else {
            reject(
                "NodePorts",
                "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports",
            )
        };
        assert_eq!(admit(&p, &big_node(), &refs), want, "{name}");
    }
}

// --- taints --------------------------------------------------------------------------------

fn taint(key: &str, value: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: (!value.is_empty()).then(|| value.into()),
        effect: effect.into(),
        time_added: None,
    }
}

fn toleration(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    Toleration {
        key: opt(key),
        operator: opt(op),
        value: opt(value),
        effect: opt(effect),
        toleration_seconds: None,
    }
}

#[test]
fn taints_table() {
    let tolerating = |ts: Vec<Toleration>| with(empty_pod(), |s| s.tolerations = Some(ts));
    let static_pod = {
        let mut p = empty_pod();
        p.metadata.annotations = Some(
            [(
                "kubernetes.io/config.source".to_string(),
                "file".to_string(),
            )]
            .into(),
        );
        p
    };
    let ne = taint("dedicated", "gpu", "NoExecute");
    let cases: Vec<(&str, Vec<Taint>, Pod, bool)> = vec![
        ("no taints", vec![], empty_pod(), true),
        (
            "NoSchedule is the scheduler's",
            vec![taint("k", "v", "NoSchedule")],
            empty_pod(),
            true,
        ),
        (
            "PreferNoSchedule ignored",
            vec![taint("k", "v", "PreferNoSchedule")],
            empty_pod(),
            true,
        ),
        (
            "untolerated NoExecute",
            vec![ne.clone()],
            empty_pod(),
            false,
        ),
        (
            "Equal toleration",
            vec![ne.clone()],
            tolerating(vec![toleration("dedicated", "Equal", "gpu", "NoExecute")]),
            true,
        ),
        (
            "empty operator means Equal",
            vec![ne.clone()],
            tolerating(vec![toleration("dedicated", "", "gpu", "")]),
            true,
        ),
        (
            "value differs",
            vec![ne.clone()],
            tolerating(vec![toleration("dedicated", "Equal", "cpu", "")]),
            false,
        ),
        (
            "Exists on the key",
            vec![ne.clone()],
            tolerating(vec![toleration("dedicated", "Exists", "", "")]),
            true,
        ),
        (
            "Exists with empty key tolerates everything",
            vec![ne.clone(), taint("other", "", "NoExecute")],
            tolerating(vec![toleration("", "Exists", "", "")]),
            true,
        ),
        (
            "effect differs",
            vec![ne.clone()],
            tolerating(vec![toleration("dedicated", "Exists", "", "NoSchedule")]),
            false,
        ),
        (
            "key differs",
            vec![ne.clone()],
            tolerating(vec![toleration("other", "Exists", "", "")]),
            false,
        ),
        (
            "every NoExecute taint needs a toleration",
            vec![ne.clone(), taint("other", "", "NoExecute")],
            tolerating(vec![toleration("dedicated", "Exists", "", "")]),
            false,
        ),
        (
            "Gt is gated off",
            vec![taint("level", "5", "NoExecute")],
            tolerating(vec![toleration("level", "Gt", "1", "")]),
            false,
        ),
        (
            "static pods skip taints",
            vec![ne.clone()],
            static_pod,
            true,
        ),
    ];
    for (name, taints, p, ok) in cases {
        let mut n = big_node();
        n.taints = taints;
        let want = if ok {
            Ok(())
        } else {
            reject(
                "TaintToleration",
                "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate",
            )
        };
        assert_eq!(admit(&p, &n, &[]), want, "{name}");
    }
}

// --- OS and ordering -----------------------------------------------------------------------

#[test]
fn os_table() {
    let other_os = if std::env::consts::OS == "windows" {
        "linux"
    } else {
        "windows"
    };
    let labeled = |os: &str| {
        let mut p = empty_pod();
        p.metadata.labels = Some([(OS_LABEL.to_string(), os.to_string())].into());
        p
    };
    let field = |os: &str| {
        with(empty_pod(), |s| {
            s.os = Some(PodOS {
                name: os.to_string(),
            })
        })
    };
    let cases: Vec<(&str, Pod, Option<&str>)> = vec![
        ("label matches", labeled(std::env::consts::OS), None),
        (
            "label differs",
            labeled(other_os),
            Some(POD_OS_SELECTOR_MISMATCH),
        ),
        ("field matches", field(std::env::consts::OS), None),
        ("field differs", field(other_os), Some(POD_OS_NOT_SUPPORTED)),
    ];
    for (name, p, want) in cases {
        let got = admit(&p, &big_node(), &[]).err().map(|r| r.reason);
        assert_eq!(got.as_deref(), want, "{name}");
    }
    assert_eq!(
        admit(&field(other_os), &big_node(), &[])
            .unwrap_err()
            .message,
        "Failed to admit pod as the OS field doesn't match node OS"
    );
}

#[test]
fn first_failure_wins_in_upstream_order() {
    let mut n = labeled_node();
    n.taints = vec![taint("k", "", "NoExecute")];
    let running = ports_pod(vec![port(80, "TCP", "")]);
    let all_bad = |s: &mut PodSpec| {
        s.node_name = Some("elsewhere".into());
        s.node_selector = Some([("zone".to_string(), "b".to_string())].into());
        s.containers[0].ports = Some(vec![port(80, "TCP", "")]);
    };
    let p = with(pod(vec![ctr("a", &[("cpu", "64")], &[])]), all_bad);
    let reason = |p: &Pod| admit(p, &n, &[&running]).unwrap_err().reason;
    assert_eq!(reason(&p), "OutOfcpu");
    let p = with(p, |s| s.containers[0].resources = None);
    assert_eq!(reason(&p), NODE_AFFINITY);
    let p = with(p, |s| s.node_selector = None);
    assert_eq!(reason(&p), NODE_NAME);
    let p = with(p, |s| s.node_name = Some("n1".into()));
    assert_eq!(reason(&p), NODE_PORTS);
    let p = with(p, |s| s.containers[0].ports = None);
    assert_eq!(reason(&p), TAINT_TOLERATION);
}

#[test]
fn rejection_status() {
    let r = Rejection::insufficient("example.com/gpu", 2, 1, 2);
    assert_eq!(r.reason, "OutOfexample.com/gpu");
    let ts = crate::status::compute::now();
    let st = r.status(ts);
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    assert_eq!(st.reason.as_deref(), Some("OutOfexample.com/gpu"));
    assert_eq!(
        st.message.as_deref(),
        Some("Pod was rejected: Node didn't have enough resource: example.com/gpu, requested: 2, used: 1, capacity: 2")
    );
}

#[test]
fn forbidden_sysctl_rejected_before_the_predicates() {
    use k8s_openapi::api::core::v1::{PodSecurityContext, Sysctl};
    let with = |name: &str| {
        let mut p = empty_pod();
        p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
            sysctls: Some(vec![Sysctl {
                name: name.into(),
                value: "1".into(),
            }]),
            ..Default::default()
        });
        p
    };
    let n = big_node();
    assert_eq!(admit(&with("net.ipv4.tcp_syncookies"), &n, &[]), Ok(()));
    let r = admit(&with("net.core.somaxconn"), &node(&[]), &[]).unwrap_err();
    assert_eq!(r.reason, "SysctlForbidden");
    assert_eq!(
        r.message,
        "forbidden sysctl: \"net.core.somaxconn\" not allowlisted"
    );
}

/// Upstream `sanitizeNodeAllocatable`: device resources' allocatable raised to what is in use,
/// never lowered, the rest untouched.
#[test]
fn sanitize_allocatable_raises_device_resources_to_what_is_allocated() {
    let n = node(&[
        ("cpu", "4"),
        ("example.com/gpu", "1"),
        ("example.com/nic", "4"),
    ]);
    let allocated: BTreeMap<String, i64> = [
        ("example.com/gpu".to_string(), 2),
        ("example.com/nic".to_string(), 3),
        ("example.com/new".to_string(), 1),
    ]
    .into_iter()
    .collect();
    let got = sanitize_allocatable(&n, &allocated).expect("changed");
    let get = |r: &str| got.allocatable.get(r).map(|q| q.0.clone());
    assert_eq!(get("example.com/gpu").as_deref(), Some("2"));
    assert_eq!(get("example.com/nic").as_deref(), Some("4"));
    assert_eq!(get("example.com/new").as_deref(), Some("1"));
    assert_eq!(get("cpu").as_deref(), Some("4"));
    let enough: BTreeMap<String, i64> = [("example.com/gpu".to_string(), 1)].into_iter().collect();
    assert_eq!(sanitize_allocatable(&n, &enough), None);
}
