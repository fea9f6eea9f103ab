//! The Node object and its status (upstream `nodestatus/setters.go`, `kubelet_node_status.go`):
//! pure functions from machine facts and health to `v1.Node`, so registration and the status loop
//! share one definition and it can be table-tested.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::machine::MachineInfo;

pub use crate::types::KUBELET_VERSION;

/// Node settings from flags and config.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSettings {
    pub name: String,
    pub ip: IpAddr,
    pub hostname: String,
    pub extra_labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// The pods capacity: `maxPods`, lowered by `podsPerCore` ([`pods_capacity`]).
    pub max_pods: u32,
    /// `providerID`: set in the spec of the Node this kubelet creates (upstream `initialNode`;
    /// an existing Node's is left alone, as upstream).
    pub provider_id: Option<String>,
    pub kubelet_port: u16,
    /// Allocatable in upstream units (cpu millicores, bytes, counts): capacity less the
    /// reservations and hard eviction thresholds, computed by the container manager
    /// (`cm::allocatable::node_allocatable`) from [`capacity`].
    pub allocatable: BTreeMap<String, i64>,
}

pub use kubelet_config::node::{parse_labels, parse_taints};

fn ki(bytes: u64) -> Quantity {
    Quantity(format!("{}Ki", bytes / 1024))
}

/// Labels the kubelet owns on its Node (upstream `initialNode` + `updateDefaultLabels`).
pub fn node_labels(s: &NodeSettings, m: &MachineInfo) -> BTreeMap<String, String> {
    let mut l = s.extra_labels.clone();
    for (k, v) in [
        ("kubernetes.io/hostname", s.hostname.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", m.architecture.as_str()),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", m.architecture.as_str()),
    ] {
        l.insert(k.into(), v.into());
    }
    l
}

/// The pods capacity (upstream's `MachineInfo` node status setter): `maxPods`, or
/// `podsPerCore` times the logical CPUs when `podsPerCore` is set and that is smaller.
pub fn pods_capacity(max_pods: u32, pods_per_core: u32, cpus: u32) -> u32 {
    if pods_per_core == 0 {
        return max_pods;
    }
    max_pods.min(pods_per_core.saturating_mul(cpus))
}

/// The node's capacity in upstream units (upstream `CapacityFromMachineInfo`): cpu in
/// millicores, memory and ephemeral storage in bytes, pods, and every hugepage size the kernel
/// has (pre-allocated pages times their size, 0 when none).
pub fn capacity(max_pods: u32, m: &MachineInfo) -> BTreeMap<String, i64> {
    let mut out: BTreeMap<String, i64> = [
        ("cpu".to_string(), i64::from(m.cpus) * 1000),
        ("memory".to_string(), saturate(m.memory_bytes)),
        ("pods".to_string(), i64::from(max_pods)),
        (
            "ephemeral-storage".to_string(),
            saturate(m.ephemeral_storage_bytes),
        ),
    ]
    .into();
    for hp in &m.hugepages {
        out.insert(
            hugepage_resource(hp.page_size_bytes),
            saturate(hp.page_size_bytes.saturating_mul(hp.pages)),
        );
    }
    out
}

fn saturate(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// `hugepages-2Mi` for 2 MiB pages (upstream `HugePageResourceName`).
pub fn hugepage_resource(page_size_bytes: u64) -> String {
    format!("hugepages-{}", binary_si(page_size_bytes))
}

/// A byte count as Go prints a `BinarySI` quantity: the largest binary suffix that divides it.
pub fn binary_si(bytes: u64) -> String {
    if bytes == 0 {
        return "0".into();
    }
    for (shift, suffix) in [
        (60, "Ei"),
        (50, "Pi"),
        (40, "Ti"),
        (30, "Gi"),
        (20, "Mi"),
        (10, "Ki"),
    ] {
        if bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// One resource amount as the Node object shows it: cpu in cores (or millicores), memory in
/// Ki as cAdvisor's figures print, hugepages and storage in binary units (Go's canonical
/// `BinarySI`), counts plain.
fn quantity(resource: &str, amount: i64) -> Quantity {
    let amount = amount.max(0);
    Quantity(match resource {
        "cpu" if amount % 1000 == 0 => (amount / 1000).to_string(),
        "cpu" => format!("{amount}m"),
        "memory" if amount % 1024 == 0 => format!("{}Ki", amount / 1024),
        r if r.starts_with("hugepages-") || r == "ephemeral-storage" => binary_si(amount as u64),
        _ => amount.to_string(),
    })
}

/// Capacity and allocatable as the Node object shows them.
pub fn resources(
    s: &NodeSettings,
    m: &MachineInfo,
) -> (BTreeMap<String, Quantity>, BTreeMap<String, Quantity>) {
    let cap = capacity(s.max_pods, m);
    let mut capacity: BTreeMap<String, Quantity> = cap
        .iter()
        .map(|(k, v)| (k.clone(), quantity(k, *v)))
        .collect();
    // cAdvisor's memory figure is MemTotal, in KiB.
    capacity.insert("memory".into(), ki(m.memory_bytes));
    let alloc = cap
        .keys()
        .map(|k| {
            let v = s.allocatable.get(k).copied().unwrap_or(cap[k]);
            (k.clone(), quantity(k, v))
        })
        .collect();
    (capacity, alloc)
}

/// Device plugin resources into capacity and allocatable (upstream `MachineInfo` setter with
/// `devicePluginResourceCapacityFunc`): counts as plain integers; a resource whose plugin is
/// gone for good shows 0 once, the last value the API server then keeps.
pub fn add_device_resources(st: &mut NodeStatus, d: &crate::cm::devices::Capacity) {
    let int = |v: i64| Quantity(v.to_string());
    let cap = st.capacity.get_or_insert_with(Default::default);
    for (k, v) in &d.capacity {
        cap.insert(k.clone(), int(*v));
    }
    for k in &d.deleted {
        cap.insert(k.clone(), int(0));
    }
    let alloc = st.allocatable.get_or_insert_with(Default::default);
    for (k, v) in &d.allocatable {
        alloc.insert(k.clone(), int(*v));
    }
    for k in &d.deleted {
        alloc.insert(k.clone(), int(0));
    }
}

/// The Node to register (upstream `initialNode`).
pub fn initial_node(s: &NodeSettings, m: &MachineInfo, runtime_version: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(s.name.clone()),
            labels: Some(node_labels(s, m)),
            annotations: Some(
                [(
                    "volumes.kubernetes.io/controller-managed-attach-detach".to_string(),
                    "true".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: (!s.taints.is_empty()).then(|| s.taints.clone()),
            provider_id: s.provider_id.clone(),
            ..Default::default()
        }),
        status: Some(node_status(
            s,
            m,
            runtime_version,
            &Health::default(),
            Timestamp::UNIX_EPOCH,
            None,
        )),
    }
}

/// What the Ready condition is computed from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Health {
    /// Reasons the node is not ready (runtime down, PLEG unhealthy, network not ready...).
    pub not_ready: Vec<String>,
    /// The pressure conditions the eviction manager reports now (`MemoryPressure`, ...).
    pub pressure: Vec<&'static str>,
}

fn condition(
    kind: &str,
    ok_status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
    old: Option<&NodeStatus>,
) -> NodeCondition {
    let prev = old
        .and_then(|o| o.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == kind));
    let transition = match prev {
        Some(p) if p.status == ok_status => p.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    NodeCondition {
        type_: kind.into(),
        status: ok_status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: transition,
    }
}

/// Upstream `MemoryPressureCondition` / `DiskPressureCondition` / `PIDPressureCondition`:
/// True with the first reason and message while the eviction manager reports the pressure.
fn pressure_condition(
    health: &Health,
    kind: &str,
    when_true: (&str, &str),
    when_false: (&str, &str),
    now: Timestamp,
    old: Option<&NodeStatus>,
) -> NodeCondition {
    let (status, (reason, message)) = if health.pressure.contains(&kind) {
        ("True", when_true)
    } else {
        ("False", when_false)
    };
    condition(kind, status, reason, message, now, old)
}

/// The whole node status (upstream's setters, in their order).
pub fn node_status(
    s: &NodeSettings,
    m: &MachineInfo,
    runtime_version: &str,
    health: &Health,
    now: Timestamp,
    old: Option<&NodeStatus>,
) -> NodeStatus {
    let (capacity, allocatable) = resources(s, m);
    let ready = if health.not_ready.is_empty() {
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
            now,
            old,
        )
    } else {
        condition(
            "Ready",
            "False",
            "KubeletNotReady",
            &health.not_ready.join(", "),
            now,
            old,
        )
    };
    NodeStatus {
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: s.ip.to_string(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: s.hostname.clone(),
            },
        ]),
        capacity: Some(capacity),
        allocatable: Some(allocatable),
        conditions: Some(vec![
            pressure_condition(
                health,
                "MemoryPressure",
                (
                    "KubeletHasInsufficientMemory",
                    "kubelet has insufficient memory available",
                ),
                (
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                now,
                old,
            ),
            pressure_condition(
                health,
                "DiskPressure",
                ("KubeletHasDiskPressure", "kubelet has disk pressure"),
                ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                now,
                old,
            ),
            pressure_condition(
                health,
                "PIDPressure",
                (
                    "KubeletHasInsufficientPID",
                    "kubelet has insufficient PID available",
                ),
                (
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                ),
                now,
                old,
            ),
            ready,
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: s.kubelet_port as i32,
            }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: m.architecture.clone(),
            boot_id: m.boot_id.clone(),
            container_runtime_version: runtime_version.into(),
            kernel_version: m.kernel_version.clone(),
            kube_proxy_version: String::new(),
            kubelet_version: KUBELET_VERSION.into(),
            machine_id: m.machine_id.clone(),
            operating_system: "linux".into(),
            os_image: m.os_image.clone(),
            system_uuid: m.system_uuid.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Status equality ignoring heartbeat times: a status that differs only in them is not posted
/// before `nodeStatusReportFrequency` (the Lease carries liveness).
pub fn changed(a: &NodeStatus, b: &NodeStatus) -> bool {
    let strip = |s: &NodeStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_heartbeat_time = None;
        }
        s
    };
    strip(a) != strip(b)
}

/// Upstream's node setters record an event whenever a condition changes status (including the
/// first time it is set): `NodeReady`, `NodeHasSufficientMemory`, ... This says which.
pub fn condition_events(prev: Option<&NodeStatus>, new: &NodeStatus) -> Vec<&'static str> {
    use crate::events as ev;
    let status_of = |st: Option<&NodeStatus>, kind: &str| -> Option<String> {
        st?.conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == kind)
            .map(|c| c.status.clone())
    };
    let mut out = Vec::new();
    for (kind, if_true, if_false) in [
        (
            "MemoryPressure",
            ev::NODE_HAS_INSUFFICIENT_MEMORY,
            ev::NODE_HAS_SUFFICIENT_MEMORY,
        ),
        (
            "DiskPressure",
            ev::NODE_HAS_DISK_PRESSURE,
            ev::NODE_HAS_NO_DISK_PRESSURE,
        ),
        (
            "PIDPressure",
            ev::NODE_HAS_INSUFFICIENT_PID,
            ev::NODE_HAS_SUFFICIENT_PID,
        ),
        ("Ready", ev::NODE_READY, ev::NODE_NOT_READY),
    ] {
        let now = status_of(Some(new), kind);
        if now.is_some() && now != status_of(prev, kind) {
            out.push(if now.as_deref() == Some("True") {
                if_true
            } else {
                if_false
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> NodeSettings {
        NodeSettings {
            name: "n1".into(),
            ip: "10.1.2.3".parse().unwrap(),
            hostname: "n1".into(),
            extra_labels: parse_labels("role=worker,zone=a").unwrap(),
            taints: parse_taints("dedicated=db:NoSchedule,gpu:NoExecute").unwrap(),
            max_pods: 110,
            provider_id: None,
            kubelet_port: 10250,
            // Upstream's defaults: 100Mi of memory and 10% of nodefs held back.
            allocatable: [
                ("cpu".to_string(), 2000),
                ("memory".to_string(), (4 << 30) - (100 << 20)),
                ("pods".to_string(), 110),
                ("ephemeral-storage".to_string(), 90 << 30),
            ]
            .into(),
        }
    }

    fn machine() -> MachineInfo {
        MachineInfo {
            cpus: 2,
            memory_bytes: 4 * 1024 * 1024 * 1024,
            ephemeral_storage_bytes: 100 * 1024 * 1024 * 1024,
            architecture: "amd64".into(),
            ..Default::default()
        }
    }

    #[test]
    fn pods_capacity_as_upstreams_machine_info_setter() {
        // (maxPods, podsPerCore, cpus) -> pods
        for (max, per_core, cpus, want) in [
            (110, 0, 2, 110),   // podsPerCore unset: maxPods
            (110, 10, 2, 20),   // 10 per core on 2 cores
            (110, 100, 2, 110), // maxPods is the cap
            (110, 55, 2, 110),  // equal
            (5, 10, 64, 5),
            (u32::MAX, u32::MAX, 4, u32::MAX), // saturates, no overflow
        ] {
            assert_eq!(
                pods_capacity(max, per_core, cpus),
                want,
                "{max} {per_core} {cpus}"
            );
        }
    }

    #[test]
    fn provider_id_goes_into_the_initial_node_spec() {
        let m = MachineInfo::default();
        let spec = |s: &NodeSettings| initial_node(s, &m, "containerd://1.6").spec.unwrap();
        assert_eq!(spec(&settings()).provider_id, None);
        let s = NodeSettings {
            provider_id: Some("aws:///us-east-1a/i-0123".into()),
            ..settings()
        };
        assert_eq!(
            spec(&s).provider_id.as_deref(),
            Some("aws:///us-east-1a/i-0123")
        );
    }

    #[test]
    fn flags() {
        assert!(parse_labels("novalue").is_err());
        assert!(parse_taints("k=v:Sometimes").is_err());
        assert!(parse_taints("k=v").is_err());
        let t = parse_taints("gpu:NoExecute").unwrap();
        assert_eq!(
            (
                t[0].key.as_str(),
                t[0].value.as_deref(),
                t[0].effect.as_str()
            ),
            ("gpu", None, "NoExecute")
        );
    }

    #[test]
    fn node_object() {
        let n = initial_node(&settings(), &machine(), "containerd://1.6.20");
        let l = n.metadata.labels.as_ref().unwrap();
        assert_eq!(l["kubernetes.io/hostname"], "n1");
        assert_eq!(l["kubernetes.io/arch"], "amd64");
        assert_eq!(l["role"], "worker");
        assert_eq!(n.spec.as_ref().unwrap().taints.as_ref().unwrap().len(), 2);
        let st = n.status.unwrap();
        let cap = st.capacity.unwrap();
        let alloc = st.allocatable.unwrap();
        assert_eq!(cap["cpu"].0, "2");
        assert_eq!(cap["memory"].0, "4194304Ki");
        assert_eq!(alloc["memory"].0, format!("{}Ki", 4194304 - 102400));
        assert_eq!(cap["pods"].0, "110");
        let info = st.node_info.unwrap();
        assert_eq!(
            (
                info.kubelet_version.as_str(),
                info.container_runtime_version.as_str()
            ),
            (KUBELET_VERSION, "containerd://1.6.20")
        );
        assert_eq!(st.addresses.unwrap()[0].address, "10.1.2.3");
    }

    #[test]
    fn ready_condition_and_change_detection() {
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let t1 = Timestamp::from_second(1_700_000_010).unwrap();
        let ok = node_status(&settings(), &machine(), "c", &Health::default(), t0, None);
        let again = node_status(
            &settings(),
            &machine(),
            "c",
            &Health::default(),
            t1,
            Some(&ok),
        );
        assert!(!changed(&ok, &again), "only heartbeats differ");
        let ready = |s: &NodeStatus| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == "Ready")
                .unwrap()
                .clone()
        };
        assert_eq!(ready(&again).last_transition_time, Some(Time(t0)));
        assert_eq!(ready(&again).reason.as_deref(), Some("KubeletReady"));
        let bad = Health {
            not_ready: vec!["container runtime is down".into()],
            pressure: vec![],
        };
        let down = node_status(&settings(), &machine(), "c", &bad, t1, Some(&ok));
        assert!(changed(&ok, &down));
        let r = ready(&down);
        assert_eq!(
            (r.status.as_str(), r.reason.as_deref(), r.message.as_deref()),
            (
                "False",
                Some("KubeletNotReady"),
                Some("container runtime is down")
            )
        );
        assert_eq!(r.last_transition_time, Some(Time(t1)));
    }

    #[test]
    fn pressure_conditions_follow_the_eviction_manager() {
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let cond = |s: &NodeStatus, kind: &str| {
            let c = s
                .conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == kind)
                .unwrap()
                .clone();
            (
                c.status,
                c.reason.unwrap_or_default(),
                c.message.unwrap_or_default(),
            )
        };
        let fine = node_status(&settings(), &machine(), "c", &Health::default(), t0, None);
        let pressed = Health {
            not_ready: vec![],
            pressure: vec!["MemoryPressure", "DiskPressure", "PIDPressure"],
        };
        let st = node_status(&settings(), &machine(), "c", &pressed, t0, Some(&fine));
        let owned = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        let cases = [
            (
                "MemoryPressure",
                owned(
                    "True",
                    "KubeletHasInsufficientMemory",
                    "kubelet has insufficient memory available",
                ),
                owned(
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
            ),
            (
                "DiskPressure",
                owned(
                    "True",
                    "KubeletHasDiskPressure",
                    "kubelet has disk pressure",
                ),
                owned(
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                ),
            ),
            (
                "PIDPressure",
                owned(
                    "True",
                    "KubeletHasInsufficientPID",
                    "kubelet has insufficient PID available",
                ),
                owned(
                    "False",
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                ),
            ),
        ];
        for (kind, when_true, when_false) in cases {
            assert_eq!(cond(&st, kind), when_true, "{kind}");
            assert_eq!(cond(&fine, kind), when_false, "{kind}");
        }
        assert_eq!(
            condition_events(Some(&fine), &st),
            vec![
                "NodeHasInsufficientMemory",
                "NodeHasDiskPressure",
                "NodeHasInsufficientPID"
            ]
        );
        // Pressure alone leaves the node Ready, as upstream.
        assert_eq!(cond(&st, "Ready").0, "True");
    }

    #[test]
    fn condition_change_events() {
        let st = |ready: &str| NodeStatus {
            conditions: Some(vec![
                k8s_openapi::api::core::v1::NodeCondition {
                    type_: "MemoryPressure".into(),
                    status: "False".into(),
                    ..Default::default()
                },
                k8s_openapi::api::core::v1::NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        assert_eq!(
            condition_events(None, &st("True")),
            vec!["NodeHasSufficientMemory", "NodeReady"]
        );
        assert!(condition_events(Some(&st("True")), &st("True")).is_empty());
        assert_eq!(
            condition_events(Some(&st("True")), &st("False")),
            vec!["NodeNotReady"]
        );
    }
}
