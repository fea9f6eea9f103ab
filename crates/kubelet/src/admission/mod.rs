//! Pod admission (upstream `lifecycle.predicateAdmitHandler` in `pkg/kubelet/lifecycle/predicate.go`):
//! a pod the node cannot take is rejected once, with upstream's reason and message, and never
//! started.
//!
//! [`admit`] runs upstream's checks in upstream's order and reports the first failure (the
//! eviction manager's handler, registered before all of these, is [`pressure::admit`]):
//!
//! 0. sysctls against the allowlist (`sysctl.patternAllowlist`, its own admit handler upstream,
//!    registered before the predicates): `SysctlForbidden`;
//! 1. the pod's `kubernetes.io/os` label and `spec.os` against the node's OS
//!    (`rejectPodAdmissionBasedOnOSSelector` / `rejectPodAdmissionBasedOnOSField`);
//! 2. `generalFilter` → `scheduler.AdmissionCheck`: resources (`noderesources.Fits`: pod count,
//!    cpu, memory, ephemeral-storage, then scalar resources), required node affinity and
//!    nodeSelector (`nodeaffinity`), `spec.nodeName` (`nodename`), host ports (`nodeports`);
//! 3. untolerated `NoExecute` taints (`tainttoleration`), skipped for static pods.
//!
//! Resource failures read `OutOf<resource>` / `Node didn't have enough resource: ...`; the other
//! predicates read `<Plugin>` / `Predicate <Plugin> failed: <plugin's reason>`, exactly as the
//! kubelet turns `InsufficientResourceError` and `PredicateFailureError` into a rejection.

pub mod pressure;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec, PodStatus, Taint,
    Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::resources::{is_extended_resource, parse_milli};

/// Reason when the pod's `kubernetes.io/os` label names another OS (upstream
/// `PodOSSelectorNodeLabelDoesNotMatch`).
pub const POD_OS_SELECTOR_MISMATCH: &str = "PodOSSelectorNodeLabelDoesNotMatch";
/// Reason when `spec.os.name` names another OS (upstream `PodOSNotSupported`).
pub const POD_OS_NOT_SUPPORTED: &str = "PodOSNotSupported";
/// Predicate names, used as rejection reasons (upstream plugin `Name`s).
pub const NODE_AFFINITY: &str = "NodeAffinity";
pub const NODE_NAME: &str = "NodeName";
pub const NODE_PORTS: &str = "NodePorts";
pub const TAINT_TOLERATION: &str = "TaintToleration";
/// Reason when allocating a pod's devices (or CPUs) fails.
pub const UNEXPECTED_ADMISSION_ERROR: &str = "UnexpectedAdmissionError";
/// Prefix of resource rejections: `OutOfcpu`, `OutOfpods`, `OutOfexample.com/gpu`.
pub const INSUFFICIENT_RESOURCE_PREFIX: &str = "OutOf";

// The plugins' failure descriptions (`ErrReasonPod`, `ErrReason`, `ErrReasonNotMatch`).
const NODE_AFFINITY_ERR: &str = "node(s) didn't match Pod's node affinity/selector";
const NODE_NAME_ERR: &str = "node(s) didn't match the requested node name";
const NODE_PORTS_ERR: &str = "node(s) didn't have free ports for the requested pod ports";
const TAINT_TOLERATION_ERR: &str = "node(s) had taints that the pod didn't tolerate";

const OS_LABEL: &str = "kubernetes.io/os";
/// Upstream `DefaultBindAllHostIP`: the host IP an empty `hostIP` means.
const BIND_ALL_HOST_IP: &str = "0.0.0.0";

/// Why a pod was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Owned because resource rejections carry the resource name (`OutOfexample.com/gpu`).
    pub reason: String,
    pub message: String,
}

impl Rejection {
    /// The terminal status a rejected pod shows (upstream `rejectPod`).
    pub fn status(&self, start_time: crate::status::compute::Timestamp) -> PodStatus {
        PodStatus {
            phase: Some("Failed".into()),
            reason: Some(self.reason.clone()),
            message: Some(format!("Pod was rejected: {}", self.message)),
            start_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                start_time,
            )),
            ..Default::default()
        }
    }

    /// Upstream `InsufficientResourceError`: reason `OutOf<resource>` (`OutOfCPU` etc. are the
    /// same strings), message from its `Error()`.
    fn insufficient(resource: &str, requested: i64, used: i64, capacity: i64) -> Self {
        Rejection {
            reason: format!("{INSUFFICIENT_RESOURCE_PREFIX}{resource}"),
            message: format!(
                "Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"
            ),
        }
    }

    /// Upstream `PredicateFailureError`: reason is the predicate (plugin) name.
    fn predicate(name: &str, desc: &str) -> Self {
        Rejection {
            reason: name.into(),
            message: format!("Predicate {name} failed: {desc}"),
        }
    }
}

/// What admission knows of this node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// Allocatable resources as quantities keyed by resource name ("cpu", "memory", "pods", "ephemeral-storage", ...).
    /// A missing (or unparsable) entry counts as zero, as upstream's `NodeInfo.Allocatable`
    /// does: without "pods" no pod fits.
    pub allocatable:
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    /// Sysctls pods may set: the safe set plus `allowedUnsafeSysctls`.
    pub sysctls: crate::sysctl::Allowlist,
}

/// `active` pods already admitted; one more must fit under `max_pods`. The pod-count half of the
/// resource check, for callers that have no [`NodeView`]; [`admit`] does the same with
/// `allocatable["pods"]`.
pub fn admit_pod_count(active: usize, max_pods: u32) -> Result<(), Rejection> {
    if active < max_pods as usize {
        return Ok(());
    }
    Err(Rejection::insufficient(
        "pods",
        1,
        saturate(active as i128),
        i64::from(max_pods),
    ))
}

/// Upstream `UpdatePluginResources` → `sanitizeNodeAllocatable`, run by the predicate handler
/// after the resource allocation handler: a device plugin resource's allocatable is raised to
/// the devices in use (the new pod's included), so a node status not yet updated for a plugin's
/// devices cannot reject a pod whose devices were just allocated. None when nothing changes.
pub fn sanitize_allocatable(
    node: &NodeView,
    allocated: &BTreeMap<String, i64>,
) -> Option<NodeView> {
    let mut out: Option<NodeView> = None;
    for (resource, &needed) in allocated {
        let have = node
            .allocatable
            .get(resource)
            .and_then(|q| parse_milli(&q.0))
            .map(|m| to_unit(resource, m));
        if have.is_some_and(|h| h >= needed) {
            continue;
        }
        out.get_or_insert_with(|| node.clone())
            .allocatable
            .insert(resource.clone(), Quantity(needed.to_string()));
    }
    out
}

/// Whether the pod requests an extended resource (only then can device allocations matter to
/// the predicates).
pub fn requests_extended(pod: &Pod) -> bool {
    pod_requests(pod).keys().any(|k| is_extended_resource(k))
}

/// The sysctl allowlist, upstream's own admit handler, registered before the resource
/// allocation handler and the predicates.
pub fn admit_sysctls(pod: &Pod, node: &NodeView) -> Result<(), Rejection> {
    node.sysctls.admit(pod).map_err(|message| Rejection {
        reason: crate::sysctl::FORBIDDEN_REASON.into(),
        message,
    })
}

/// Admits `pod` given the pods already admitted and active on the node (`running`), in upstream's order;
/// the first failing predicate gives the rejection.
pub fn admit(pod: &Pod, node: &NodeView, running: &[&Pod]) -> Result<(), Rejection> {
    admit_sysctls(pod, node)?;
    check_os(pod)?;
    check_resources(pod, node, running)?;
    if !node_affinity_matches(pod, node) {
        return Err(Rejection::predicate(NODE_AFFINITY, NODE_AFFINITY_ERR));
    }
    if !node_name_matches(pod, node) {
        return Err(Rejection::predicate(NODE_NAME, NODE_NAME_ERR));
    }
    if !host_ports_fit(pod, running) {
        return Err(Rejection::predicate(NODE_PORTS, NODE_PORTS_ERR));
    }
    // Upstream skips taints for static pods: the node runs them whatever its taints say.
    if !crate::podutil::is_static(pod) {
        let tolerations = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or(&[]);
        if untolerated_no_execute_taint(&node.taints, tolerations).is_some() {
            return Err(Rejection::predicate(TAINT_TOLERATION, TAINT_TOLERATION_ERR));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// OS
// ---------------------------------------------------------------------------------------------

/// The node's OS is the kubelet's own (`runtime.GOOS`): upstream overrides a missing or
/// different node label with it before comparing, so only the pod side matters here.
fn check_os(pod: &Pod) -> Result<(), Rejection> {
    let node_os = std::env::consts::OS;
    let pod_label = pod.metadata.labels.as_ref().and_then(|l| l.get(OS_LABEL));
    if pod_label.is_some_and(|os| os != node_os) {
        return Err(Rejection {
            reason: POD_OS_SELECTOR_MISMATCH.into(),
            message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                .into(),
        });
    }
    let pod_os = pod
        .spec
        .as_ref()
        .and_then(|s| s.os.as_ref())
        .map(|o| o.name.as_str());
    if pod_os.is_some_and(|os| os != node_os) {
        return Err(Rejection {
            reason: POD_OS_NOT_SUPPORTED.into(),
            message: "Failed to admit pod as the OS field doesn't match node OS".into(),
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Resources
// ---------------------------------------------------------------------------------------------

/// Resource amounts in thousandths of their unit, as `parse_milli` returns them; summed before
/// rounding, as upstream sums `Quantity`s before taking `Value()`.
type MilliList = BTreeMap<String, i128>;

/// The pod's effective requests in upstream's `framework.Resource` units: `cpu` in millicores,
/// every other resource in whole units rounded up (bytes for memory, storage and hugepages).
///
/// Upstream `resource.PodRequests`: the sum of regular and sidecar (restartPolicy Always init)
/// containers, raised to the largest init container (each counted with the sidecars started
/// before it), then pod-level requests for cpu/memory/hugepages when set, plus `spec.overhead`.
/// A container's limit stands in for a request it leaves out, as API defaulting (which static
/// pods skip here) would have set it. Unparsable quantities count as absent.
pub fn pod_requests(pod: &Pod) -> BTreeMap<String, i64> {
    to_units(&pod_requests_milli(pod, &|_| true))
}

fn pod_requests_milli(pod: &Pod, keep: &dyn Fn(&str) -> bool) -> MilliList {
    let Some(spec) = pod.spec.as_ref() else {
        return MilliList::new();
    };
    let mut reqs = aggregate_container_requests(spec, keep);
    for (name, value) in pod_level_requests(spec, &reqs) {
        reqs.insert(name, value);
    }
    add_into(&mut reqs, &milli_list(spec.overhead.as_ref()));
    reqs
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Upstream `AggregateContainerRequests` (sidecar KEP-753 formula); `keep` filters resource
/// names out of the containers' requests (upstream `removeMissingExtendedResources`).
fn aggregate_container_requests(spec: &PodSpec, keep: &dyn Fn(&str) -> bool) -> MilliList {
    aggregate(spec, &|c| {
        let mut r = container_requests(c);
        r.retain(|name, _| keep(name));
        r
    })
}

/// The shape upstream's `AggregateContainerRequests` and `AggregateContainerLimits` share:
/// regular and sidecar containers summed, raised to the largest init container counted with
/// the sidecars started before it.
fn aggregate(spec: &PodSpec, of: &dyn Fn(&Container) -> MilliList) -> MilliList {
    let mut result = MilliList::new();
    for c in &spec.containers {
        add_into(&mut result, &of(c));
    }
    let mut sidecars = MilliList::new();
    let mut init = MilliList::new();
    for c in spec.init_containers.iter().flatten() {
        let r = of(c);
        if is_sidecar(c) {
            // Runs for the pod's whole life: counts like a regular container, and every later
            // init container runs next to it.
            add_into(&mut result, &r);
            add_into(&mut sidecars, &r);
            max_into(&mut init, &sidecars);
        } else {
            let mut with_sidecars = r;
            add_into(&mut with_sidecars, &sidecars);
            max_into(&mut init, &with_sidecars);
        }
    }
    max_into(&mut result, &init);
    result
}

/// The pod's effective limits in the units of [`pod_requests`] (upstream `resource.PodLimits`):
/// the containers' limits aggregated like requests, pod-level limits for the resources they
/// may set, and `spec.overhead` added to the limits that are set (a missing limit stays
/// unlimited).
pub fn pod_limits(pod: &Pod) -> BTreeMap<String, i64> {
    let Some(spec) = pod.spec.as_ref() else {
        return BTreeMap::new();
    };
    let mut limits = aggregate(spec, &|c| {
        milli_list(c.resources.as_ref().and_then(|r| r.limits.as_ref()))
    });
    if let Some(res) = spec.resources.as_ref() {
        for (name, v) in milli_list(res.limits.as_ref()) {
            if is_pod_level_resource(&name) {
                limits.insert(name, v);
            }
        }
    }
    for (name, v) in milli_list(spec.overhead.as_ref()) {
        if let Some(l) = limits.get_mut(&name) {
            *l += v;
        }
    }
    to_units(&limits)
}

/// A container's requests, with its limits standing in for requests it does not name (upstream
/// `SetDefaults_Pod`).
fn container_requests(c: &Container) -> MilliList {
    let res = c.resources.as_ref();
    let requests = res.and_then(|r| r.requests.as_ref());
    let limits = res.and_then(|r| r.limits.as_ref());
    let mut out = milli_list(requests);
    for (name, q) in limits.into_iter().flatten() {
        if requests.is_some_and(|r| r.contains_key(name)) {
            continue;
        }
        if let Some(v) = parse_milli(&q.0) {
            out.insert(name.clone(), v);
        }
    }
    out
}

/// Resources pod-level `spec.resources` may set (upstream `IsSupportedPodLevelResource`).
fn is_pod_level_resource(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with("hugepages-")
}

/// Pod-level requests that replace the containers' aggregate (PodLevelResources, on by default
/// since 1.34): explicit ones, else (upstream `defaultPodRequests`, only when pod-level limits
/// exist) the pod-level limit, except that cpu/memory the containers request keep the containers'
/// aggregate.
fn pod_level_requests(spec: &PodSpec, containers: &MilliList) -> MilliList {
    let Some(res) = spec.resources.as_ref() else {
        return MilliList::new();
    };
    let mut out = milli_list(res.requests.as_ref());
    out.retain(|name, _| is_pod_level_resource(name));
    let declared = |name: &str| res.requests.as_ref().is_some_and(|r| r.contains_key(name));
    for (name, q) in res.limits.iter().flatten() {
        if !is_pod_level_resource(name) || declared(name) {
            continue;
        }
        let overcommittable = !name.starts_with("hugepages-");
        if overcommittable && containers.contains_key(name) {
            continue;
        }
        if let Some(v) = parse_milli(&q.0) {
            out.insert(name.clone(), v);
        }
    }
    out
}

fn milli_list(map: Option<&BTreeMap<String, Quantity>>) -> MilliList {
    map.into_iter()
        .flatten()
        .filter_map(|(name, q)| parse_milli(&q.0).map(|v| (name.clone(), v)))
        .collect()
}

/// Upstream `addResourceList`.
fn add_into(acc: &mut MilliList, other: &MilliList) {
    for (name, v) in other {
        *acc.entry(name.clone()).or_insert(0) += v;
    }
}

/// Upstream `maxResourceList`: a name missing from `acc` is taken even when zero.
fn max_into(acc: &mut MilliList, other: &MilliList) {
    for (name, v) in other {
        let e = acc.entry(name.clone()).or_insert(*v);
        if *v > *e {
            *e = *v;
        }
    }
}

/// Thousandths to upstream units: `MilliValue()` for cpu, `Value()` (rounded up) otherwise.
fn to_unit(name: &str, milli: i128) -> i64 {
    if name == "cpu" {
        saturate(milli)
    } else {
        saturate((milli + 999).div_euclid(1000))
    }
}

fn to_units(list: &MilliList) -> BTreeMap<String, i64> {
    list.iter()
        .map(|(name, v)| (name.clone(), to_unit(name, *v)))
        .collect()
}

fn saturate(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Upstream `IsPrefixedNativeResource`.
fn is_prefixed_native(name: &str) -> bool {
    name.contains("kubernetes.io/")
}

/// Upstream `IsScalarResourceName`: the resources `noderesources.Fits` checks besides pods, cpu,
/// memory and ephemeral-storage.
fn is_scalar_resource(name: &str) -> bool {
    is_extended_resource(name)
        || name.starts_with("hugepages-")
        || is_prefixed_native(name)
        || name.starts_with("attachable-volumes-")
}

/// Upstream `noderesources.Fits` on the kubelet's `NodeInfo`: the pod count first, then cpu,
/// memory, ephemeral-storage, then scalar resources (by name; upstream's map order is random).
fn check_resources(pod: &Pod, node: &NodeView, running: &[&Pod]) -> Result<(), Rejection> {
    let capacity = |name: &str| {
        node.allocatable
            .get(name)
            .and_then(|q| parse_milli(&q.0))
            .map_or(0, |m| to_unit(name, m))
    };

    let allowed_pods = capacity("pods");
    let used_pods = saturate(running.len() as i128);
    if i128::from(used_pods) + 1 > i128::from(allowed_pods) {
        return Err(Rejection::insufficient("pods", 1, used_pods, allowed_pods));
    }

    let mut used: BTreeMap<String, i128> = BTreeMap::new();
    for p in running {
        for (name, v) in pod_requests(p) {
            *used.entry(name).or_insert(0) += i128::from(v);
        }
    }
    let used = |name: &str| saturate(used.get(name).copied().unwrap_or(0));

    // Extended resources the node does not advertise are dropped from the request: they may be
    // cluster-level or DRA-backed (upstream `removeMissingExtendedResources`).
    let keep = |name: &str| !is_extended_resource(name) || node.allocatable.contains_key(name);
    let requested = to_units(&pod_requests_milli(pod, &keep));

    let fits = |name: &str, want: i64| {
        i128::from(want) <= i128::from(capacity(name)) - i128::from(used(name))
    };
    for name in ["cpu", "memory", "ephemeral-storage"] {
        let want = requested.get(name).copied().unwrap_or(0);
        if want > 0 && !fits(name, want) {
            return Err(Rejection::insufficient(
                name,
                want,
                used(name),
                capacity(name),
            ));
        }
    }
    for (name, &want) in requested.iter().filter(|(n, _)| is_scalar_resource(n)) {
        if want != 0 && !fits(name, want) {
            return Err(Rejection::insufficient(
                name,
                want,
                used(name),
                capacity(name),
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Node name, node selector and required node affinity
// ---------------------------------------------------------------------------------------------

/// Upstream `nodename.Fits`.
fn node_name_matches(pod: &Pod, node: &NodeView) -> bool {
    match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        None | Some("") => true,
        Some(name) => name == node.name,
    }
}

/// Upstream `GetRequiredNodeAffinity(pod).Match(node)`: every `nodeSelector` pair, and then, if
/// the pod has required node affinity, at least one of its terms.
fn node_affinity_matches(pod: &Pod, node: &NodeView) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    if !selector_ok {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        None => true,
        // No terms match nothing.
        Some(sel) => sel
            .node_selector_terms
            .iter()
            .any(|t| term_matches(t, node)),
    }
}

/// Upstream `nodeSelectorTerm.match`: an empty term matches nothing, a term with an invalid
/// requirement never matches, otherwise all its expressions and fields must hold. Fields are only
/// checked when the node has a name, as upstream builds `metadata.name` only then.
pub(crate) fn term_matches(term: &NodeSelectorTerm, node: &NodeView) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let mut ok = true;
    for r in exprs {
        match label_requirement(r, &node.labels) {
            Some(m) => ok &= m,
            None => return false,
        }
    }
    for r in fields {
        match field_requirement(r, &node.name) {
            Some(m) => ok &= m || node.name.is_empty(),
            None => return false,
        }
    }
    ok
}

/// One `matchExpressions` entry (upstream `labels.NewRequirement` + `Requirement.Matches`);
/// None when the requirement is invalid.
fn label_requirement(
    r: &NodeSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    let values = r.values.as_deref().unwrap_or(&[]);
    let label = labels.get(&r.key);
    match r.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => None,
        "In" => Some(label.is_some_and(|l| values.contains(l))),
        "NotIn" => Some(!label.is_some_and(|l| values.contains(l))),
        "Exists" | "DoesNotExist" if !values.is_empty() => None,
        "Exists" => Some(label.is_some()),
        "DoesNotExist" => Some(label.is_none()),
        op @ ("Gt" | "Lt") => {
            let [bound] = values else {
                return None;
            };
            let bound: i64 = bound.parse().ok()?;
            let Some(actual) = label.and_then(|l| l.parse::<i64>().ok()) else {
                return Some(false);
            };
            Some(if op == "Gt" {
                actual > bound
            } else {
                actual < bound
            })
        }
        _ => None,
    }
}

/// One `matchFields` entry (upstream `nodeSelectorRequirementsAsFieldSelector`): only In/NotIn
/// with exactly one value; the node's only field is `metadata.name`, others read as "".
fn field_requirement(r: &NodeSelectorRequirement, node_name: &str) -> Option<bool> {
    let [value] = r.values.as_deref().unwrap_or(&[]) else {
        return None;
    };
    let actual = if r.key == "metadata.name" {
        node_name
    } else {
        ""
    };
    match r.operator.as_str() {
        "In" => Some(actual == value),
        "NotIn" => Some(actual != value),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Host ports
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
struct HostPort {
    ip: String,
    protocol: String,
    port: i32,
}

/// Upstream `schedutil.GetHostPorts`: host ports of regular and sidecar containers (ordinary init
/// containers are gone before the pod runs), with `HostPortInfo.sanitize`'s defaults (empty IP
/// is 0.0.0.0, empty protocol TCP). A hostNetwork pod's ports are host ports even without
/// `hostPort` (API defaulting `defaultHostNetworkPorts`, which static pods skip here).
fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let host_network = spec.host_network.unwrap_or(false);
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| is_sidecar(c));
    sidecars
        .chain(spec.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let mut port = p.host_port.unwrap_or(0);
            if host_network && port == 0 {
                port = p.container_port;
            }
            let or = |v: Option<&str>, default: &str| {
                v.filter(|s| !s.is_empty()).unwrap_or(default).to_string()
            };
            (port > 0).then(|| HostPort {
                ip: or(p.host_ip.as_deref(), BIND_ALL_HOST_IP),
                protocol: or(p.protocol.as_deref(), "TCP"),
                port,
            })
        })
        .collect()
}

/// Upstream `HostPortInfo.CheckConflict`: same protocol and port, and either side binds 0.0.0.0
/// or both bind the same IP.
fn port_conflicts(used: &[HostPort], want: &HostPort) -> bool {
    used.iter().any(|u| {
        u.protocol == want.protocol
            && u.port == want.port
            && (want.ip == BIND_ALL_HOST_IP || u.ip == BIND_ALL_HOST_IP || u.ip == want.ip)
    })
}

/// Upstream `nodeports.Fits`.
fn host_ports_fit(pod: &Pod, running: &[&Pod]) -> bool {
    let want = host_ports(pod);
    if want.is_empty() {
        return true;
    }
    let used: Vec<HostPort> = running.iter().flat_map(|p| host_ports(p)).collect();
    !want.iter().any(|w| port_conflicts(&used, w))
}

// ---------------------------------------------------------------------------------------------
// Taints
// ---------------------------------------------------------------------------------------------

/// Upstream `FindMatchingUntoleratedTaint` with the kubelet's filter: only `NoExecute` taints
/// matter at admission (`NoSchedule` is the scheduler's business and is ignored for pods bound
/// directly).
fn untolerated_no_execute_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| t.effect == "NoExecute")
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

/// Upstream `Toleration.ToleratesTaint`. Empty effect or key match any; the `Gt`/`Lt` operators
/// sit behind the alpha TaintTolerationComparisonOperators gate (off) and so never tolerate.
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let set = |v: &Option<String>| v.as_deref().filter(|s| !s.is_empty()).map(str::to_owned);
    if set(&t.effect).is_some_and(|e| e != taint.effect) {
        return false;
    }
    if set(&t.key).is_some_and(|k| k != taint.key) {
        return false;
    }
    match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests;
