//! The API pod status computed from the runtime's state (upstream `generateAPIPodStatus`,
//! `convertToAPIContainerStatuses`, `getPhase`, `status/generate.go`). Pure: table-tested.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus as ApiContainerStatus, HostIP, Pod, PodCondition, PodIP,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
pub use k8s_openapi::jiff::Timestamp;

use crate::logs::termination;
use crate::podutil::{self, ContainerKind};
use crate::prober::{is_restartable_init, probe_of, ProbeKind, ProbeResults};
use crate::resources;
use crate::runtime::actions::should_container_be_restarted;
use crate::runtime::{ContainerState, ContainerStatus, PodRuntimeStatus};

/// The last start failure of a container (upstream `ReasonCache`): reason and message.
pub type Reasons = HashMap<String, (String, String)>;

/// Inputs besides the pod and runtime state.
pub struct StatusContext<'a> {
    pub reasons: &'a Reasons,
    pub old: Option<&'a PodStatus>,
    pub now: Timestamp,
    /// "containerd": prefixes container IDs as upstream (`containerd://<id>`).
    pub runtime_name: &'a str,
    /// When the kubelet first saw the pod.
    pub start_time: Timestamp,
    /// The node's IP, reported as hostIP(s).
    pub host_ip: &'a str,
    /// Startup and readiness results: a running container is started and ready only once its
    /// probes say so (upstream `probeManager.UpdatePodStatus`).
    pub probes: &'a ProbeResults,
    /// Set when the kubelet itself fails the pod (an eviction): upstream's kill options'
    /// `PodStatusFunc`, applied on top of the generated status.
    pub failure: Option<&'a PodFailure>,
}

/// The kubelet failing a pod it stops (upstream `TerminatePodOptions` of an eviction): phase
/// `Failed` with this reason and message, and a `DisruptionTarget` condition
/// (`TerminationByKubelet`) saying why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFailure {
    pub reason: String,
    pub message: String,
}

/// Upstream `v1.DisruptionTarget` and `PodReasonTerminationByKubelet`.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
pub const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";

/// Upstream `activeDeadlineHandler`'s reason and message.
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
pub const DEADLINE_EXCEEDED_MESSAGE: &str =
    "Pod was active on the node longer than the specified deadline";

/// How long the pod may still be active under `activeDeadlineSeconds`, counted from when the
/// kubelet first saw it (its `startTime`, as upstream); None without a deadline.
pub fn active_deadline_left(
    pod: &Pod,
    start: Timestamp,
    now: Timestamp,
) -> Option<std::time::Duration> {
    let allowed = pod.spec.as_ref()?.active_deadline_seconds?;
    let elapsed = now.as_second() - start.as_second();
    Some(std::time::Duration::from_secs(
        allowed.saturating_sub(elapsed).max(0) as u64,
    ))
}

/// Now, at the second precision API times carry (jiff is built without its clock here).
pub fn now() -> Timestamp {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn time_ns(ns: i64) -> Option<Time> {
    (ns > 0)
        .then(|| Timestamp::from_nanosecond(ns as i128).ok())
        .flatten()
        .map(Time)
}

fn terminated_state(s: &ContainerStatus, runtime: &str) -> ApiState {
    let reason = if !s.reason.is_empty() {
        s.reason.clone()
    } else if s.exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    };
    ApiState {
        terminated: Some(ContainerStateTerminated {
            exit_code: s.exit_code,
            reason: Some(reason),
            message: (!s.message.is_empty()).then(|| s.message.clone()),
            started_at: time_ns(s.started_at),
            finished_at: time_ns(s.finished_at),
            container_id: Some(format!("{runtime}://{}", s.id)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn waiting(reason: &str, message: Option<String>) -> ApiState {
    ApiState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message,
        }),
        ..Default::default()
    }
}

fn state_of(s: &ContainerStatus, runtime: &str) -> ApiState {
    match s.state {
        ContainerState::Running => ApiState {
            running: Some(ContainerStateRunning {
                started_at: time_ns(s.started_at),
            }),
            ..Default::default()
        },
        ContainerState::Exited => terminated_state(s, runtime),
        _ => ApiState {
            waiting: Some(ContainerStateWaiting::default()),
            ..Default::default()
        },
    }
}

fn container_statuses(
    pod: &Pod,
    specs: &[Container],
    rt: &PodRuntimeStatus,
    cx: &StatusContext,
    default_waiting: &str,
    kind: ContainerKind,
) -> Vec<ApiContainerStatus> {
    specs
        .iter()
        .map(|c| {
            let mut instances = rt.containers.iter().filter(|s| s.name == c.name);
            let current = instances.next();
            let previous = instances.next();
            let mut st = ApiContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                ..Default::default()
            };
            match current {
                None => st.state = Some(waiting(default_waiting, None)),
                Some(s) => {
                    st.state = Some(state_of(s, cx.runtime_name));
                    st.container_id = Some(format!("{}://{}", cx.runtime_name, s.id));
                    st.image_id = s.image_ref.clone();
                    // Upstream `toKubeContainerStatus` shows the runtime's image, not the spec's
                    // text: a runtime that honours CRI `user_specified_image` (containerd 2)
                    // answers with the spec's image, containerd 1.6 with the image's first repo
                    // tag (`busybox` shows as `docker.io/library/busybox:latest`).
                    if !s.image.is_empty() {
                        st.image = s.image.clone();
                    }
                    st.restart_count = s.restart_count;
                    let running = s.state == ContainerState::Running;
                    let started = cx.probes.is_started(
                        &s.id,
                        running,
                        probe_of(c, ProbeKind::Startup).is_some(),
                    );
                    st.started = Some(started);
                    st.ready = if kind == ContainerKind::Init && !is_restartable_init(c) {
                        // Upstream: a regular init container is ready once it succeeded.
                        s.state == ContainerState::Exited && s.exit_code == 0
                    } else if kind == ContainerKind::Ephemeral {
                        // The prober never looks at ephemeral containers: never ready.
                        false
                    } else {
                        started
                            && cx.probes.is_ready(
                                &s.id,
                                running,
                                probe_of(c, ProbeKind::Readiness).is_some(),
                            )
                    };
                    if let Some(p) = previous.filter(|p| p.state == ContainerState::Exited) {
                        st.last_state = Some(terminated_state(p, cx.runtime_name));
                    }
                }
            }
            // A container that will be started again shows why it is not running yet.
            if should_container_be_restarted(c, pod, rt) {
                if let Some((reason, message)) = cx.reasons.get(&c.name) {
                    if st.state.as_ref().is_some_and(|s| s.terminated.is_some()) {
                        st.last_state = st.state.take();
                    }
                    st.state = Some(waiting(reason, Some(message.clone())));
                    st.ready = false;
                }
            }
            st
        })
        .collect()
}

fn is_running(s: &ApiContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|x| x.running.is_some())
}

fn terminated(s: &ApiContainerStatus) -> Option<&ContainerStateTerminated> {
    s.state.as_ref().and_then(|x| x.terminated.as_ref())
}

fn is_waiting(s: &ApiContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|x| x.waiting.is_some())
}

fn last_terminated(s: &ApiContainerStatus) -> Option<&ContainerStateTerminated> {
    s.last_state.as_ref().and_then(|x| x.terminated.as_ref())
}

/// Upstream `getPhase` (sidecar-aware). `initialized`: a regular container is running
/// (`HasAnyActiveRegularContainerStarted`), so a restarting sidecar does not send the pod back to
/// Pending. Terminated sidecars never count: they are stopped when the pod ends.
pub fn phase(
    pod: &Pod,
    init: &[ApiContainerStatus],
    containers: &[ApiContainerStatus],
    initialized: bool,
) -> &'static str {
    let policy = podutil::restart_policy(pod);
    let (mut pending_regular_init, mut pending_sidecars, mut failed_init) = (0, 0, 0);
    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    // Statuses are built in spec order, one per init container.
    for (c, s) in podutil::init_containers(pod).iter().zip(init) {
        if is_restartable_init(c) {
            if is_running(s) {
                if s.started != Some(true) {
                    pending_sidecars += 1;
                }
                running += 1;
            } else if terminated(s).is_some() || last_terminated(s).is_some() {
                // A stopped sidecar does not count towards the phase.
            } else if is_waiting(s) {
                pending_sidecars += 1;
                waiting += 1;
            } else {
                pending_sidecars += 1;
                unknown += 1;
            }
        } else if is_running(s) {
            pending_regular_init += 1;
        } else if let Some(t) = terminated(s) {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else if is_waiting(s) {
            match last_terminated(s) {
                Some(t) if t.exit_code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_regular_init += 1,
            }
        } else {
            pending_regular_init += 1;
        }
    }
    for s in containers {
        if is_running(s) {
            running += 1;
        } else if let Some(t) = terminated(s) {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if is_waiting(s) {
            if last_terminated(s).is_some() {
                stopped += 1;
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }
    if failed_init > 0 && policy == "Never" {
        return "Failed";
    }
    if pending_regular_init > 0 || (pending_sidecars > 0 && !initialized) || waiting > 0 {
        return "Pending";
    }
    if running > 0 && unknown == 0 {
        return "Running";
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if policy == "Always" {
            return "Running";
        }
        if stopped == succeeded {
            return "Succeeded";
        }
        if policy == "Never" {
            return "Failed";
        }
        return "Running";
    }
    "Pending"
}

fn condition(
    kind: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    cx: &StatusContext,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let old = cx
        .old
        .and_then(|o| o.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == kind));
    let last = match old {
        Some(o) if o.status == status => o.last_transition_time.clone(),
        _ => Some(Time(cx.now)),
    };
    PodCondition {
        type_: kind.into(),
        status: status.into(),
        reason: reason.map(Into::into),
        message,
        last_transition_time: last,
        ..Default::default()
    }
}

/// Upstream `PodConditionsByKubelet`: the conditions the kubelet computes; others are kept.
const KUBELET_CONDITIONS: [&str; 5] = [
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodReadyToStartContainers",
];

/// (status, reason, message) of a condition.
type Cond = (bool, Option<&'static str>, Option<String>);

/// Go's `fmt.Sprintf("%s", []string{..})`: `[a b]`.
fn go_list(v: &[String]) -> String {
    format!("[{}]", v.join(" "))
}

/// Upstream `GeneratePodInitializedCondition`: every regular init container succeeded and every
/// sidecar started; or a regular container already ran (a restarting sidecar does not
/// un-initialize the pod).
fn initialized_condition(
    pod: &Pod,
    init: &[ApiContainerStatus],
    containers: &[ApiContainerStatus],
    phase: &str,
) -> Cond {
    let incomplete: Vec<String> = podutil::init_containers(pod)
        .iter()
        .zip(init)
        .filter(|(c, s)| {
            if is_restartable_init(c) {
                s.started != Some(true)
            } else {
                !s.ready
            }
        })
        .map(|(c, _)| c.name.clone())
        .collect();
    if phase == "Succeeded" {
        return (true, Some("PodCompleted"), None);
    }
    let regular_started = containers
        .iter()
        .any(|s| is_running(s) || terminated(s).is_some());
    if regular_started || incomplete.is_empty() {
        return (true, None, None);
    }
    (
        false,
        Some("ContainersNotInitialized"),
        Some(format!(
            "containers with incomplete status: {}",
            go_list(&incomplete)
        )),
    )
}

/// Upstream `GenerateContainersReadyCondition`: sidecars and regular containers all ready.
fn containers_ready_condition(
    pod: &Pod,
    init: &[ApiContainerStatus],
    containers: &[ApiContainerStatus],
    phase: &str,
) -> Cond {
    let sidecars = podutil::init_containers(pod)
        .iter()
        .zip(init)
        .filter(|(c, _)| is_restartable_init(c))
        .map(|(_, s)| s);
    let unready: Vec<String> = sidecars
        .chain(containers)
        .filter(|s| !s.ready)
        .map(|s| s.name.clone())
        .collect();
    match phase {
        "Succeeded" => return (false, Some("PodCompleted"), None),
        "Failed" => return (false, Some("PodFailed"), None),
        _ => {}
    }
    if unready.is_empty() {
        return (true, None, None);
    }
    (
        false,
        Some("ContainersNotReady"),
        Some(format!(
            "containers with unready status: {}",
            go_list(&unready)
        )),
    )
}

/// Upstream `GeneratePodReadyCondition`: containers ready and every readiness gate's condition
/// True.
fn ready_condition(pod: &Pod, conditions: &[PodCondition], containers_ready: Cond) -> Cond {
    if !containers_ready.0 {
        return containers_ready;
    }
    let gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .into_iter()
        .flatten();
    let unready: Vec<String> = gates
        .filter_map(|g| {
            let kind = &g.condition_type;
            match conditions.iter().find(|c| &c.type_ == kind) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate {kind:?} does not exist."
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate {kind:?} is not \"True\", but {}",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect();
    if unready.is_empty() {
        return (true, None, None);
    }
    (
        false,
        Some("ReadinessGatesNotReady"),
        Some(unready.join(", ")),
    )
}

/// Computes the whole API status of a pod.
pub fn generate(pod: &Pod, rt: &PodRuntimeStatus, cx: &StatusContext) -> PodStatus {
    let inits = podutil::init_containers(pod);
    let regular = |name: &str| podutil::containers(pod).iter().any(|c| c.name == name);
    let init_done_before = rt.containers.iter().any(|c| regular(&c.name));
    let init_statuses =
        container_statuses(pod, inits, rt, cx, "PodInitializing", ContainerKind::Init);
    let app_waiting = if inits.is_empty() || init_done_before {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let statuses = container_statuses(
        pod,
        podutil::containers(pod),
        rt,
        cx,
        app_waiting,
        ContainerKind::Regular,
    );
    let ephemeral: Vec<Container> = podutil::ephemeral_specs(pod)
        .iter()
        .map(podutil::ephemeral_as_container)
        .collect();
    let ephemeral_statuses = container_statuses(
        pod,
        &ephemeral,
        rt,
        cx,
        "ContainerCreating",
        ContainerKind::Ephemeral,
    );
    let active_regular = rt
        .containers
        .iter()
        .any(|c| regular(&c.name) && c.state == ContainerState::Running);
    let phase = phase(pod, &init_statuses, &statuses, active_regular);

    // Upstream's pod sync handlers (the active deadline) override the phase of an active pod.
    let deadline_exceeded = phase != "Succeeded"
        && phase != "Failed"
        && active_deadline_left(pod, cx.start_time, cx.now).is_some_and(|d| d.is_zero());
    let (phase, reason, message) = if let Some(f) = cx.failure {
        ("Failed", Some(f.reason.clone()), Some(f.message.clone()))
    } else if deadline_exceeded {
        (
            "Failed",
            Some(DEADLINE_EXCEEDED.to_string()),
            Some(DEADLINE_EXCEEDED_MESSAGE.to_string()),
        )
    } else {
        (phase, None, None)
    };
    let mut ips = rt.pod_ips();
    if ips.is_empty() {
        // A stopped sandbox has no IP; keep showing the one the pod had, as upstream.
        ips = cx
            .old
            .and_then(|o| o.pod_ips.as_ref())
            .map(|v| v.iter().map(|i| i.ip.clone()).collect())
            .unwrap_or_default();
    }
    // Host-network pods have the node's IP (upstream generateAPIPodStatus: `IsHostNetworkPod(pod)
    // && s.PodIP == ""` takes the host IP): kube-proxy, kubeadm's control plane and every client
    // reading podIP or Endpoints of such pods rely on it.
    if ips.is_empty() && podutil::host_network(pod) && !cx.host_ip.is_empty() {
        ips.push(cx.host_ip.to_string());
    }

    let sandbox_ok = rt
        .sandboxes
        .first()
        .is_some_and(|s| s.ready && (s.host_network || !s.ip.is_empty()));
    // Conditions other components own (readiness gates among them) are kept, as upstream.
    let mut conditions: Vec<PodCondition> = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    conditions.push(condition(
        "PodReadyToStartContainers",
        sandbox_ok,
        None,
        None,
        cx,
    ));
    let (ok, why, msg) = initialized_condition(pod, &init_statuses, &statuses, phase);
    conditions.push(condition("Initialized", ok, why, msg, cx));
    let containers_ready = containers_ready_condition(pod, &init_statuses, &statuses, phase);
    let (ok, why, msg) = ready_condition(pod, &conditions, containers_ready.clone());
    conditions.push(condition("Ready", ok, why, msg, cx));
    let (ok, why, msg) = containers_ready;
    conditions.push(condition("ContainersReady", ok, why, msg, cx));
    conditions.push(condition("PodScheduled", true, None, None, cx));
    if let Some(f) = cx.failure {
        conditions.retain(|c| c.type_ != DISRUPTION_TARGET);
        conditions.push(condition(
            DISRUPTION_TARGET,
            true,
            Some(TERMINATION_BY_KUBELET),
            Some(f.message.clone()),
            cx,
        ));
    }

    let mut status = PodStatus {
        phase: Some(phase.into()),
        reason,
        message,
        conditions: Some(conditions),
        pod_ip: ips.first().cloned(),
        pod_ips: (!ips.is_empty()).then(|| ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        start_time: Some(Time(cx.start_time)),
        host_ip: (!cx.host_ip.is_empty()).then(|| cx.host_ip.to_string()),
        host_ips: (!cx.host_ip.is_empty()).then(|| {
            vec![HostIP {
                ip: cx.host_ip.to_string(),
            }]
        }),
        qos_class: Some(resources::pod_qos(pod).as_str().into()),
        init_container_statuses: (!inits.is_empty()).then_some(init_statuses),
        container_statuses: Some(statuses),
        ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral_statuses),
        ..Default::default()
    };
    cap_termination_messages(pod, &mut status);
    status
}

/// Upstream status manager `normalizeStatus`: the pod's containers share
/// `MaxPodTerminationMessageLogLength` (12 KiB) of termination messages equally.
fn cap_termination_messages(pod: &Pod, status: &mut PodStatus) {
    let spec = pod.spec.as_ref();
    let n = podutil::init_containers(pod).len()
        + podutil::containers(pod).len()
        + spec
            .and_then(|s| s.ephemeral_containers.as_ref())
            .map_or(0, |e| e.len());
    let per = termination::MAX_POD_MESSAGE_LENGTH / n.max(1);
    let all = status
        .init_container_statuses
        .iter_mut()
        .chain(status.container_statuses.iter_mut())
        .flatten();
    for c in all {
        for st in [c.state.as_mut(), c.last_state.as_mut()]
            .into_iter()
            .flatten()
        {
            if let Some(m) = st.terminated.as_mut().and_then(|t| t.message.as_mut()) {
                termination::truncate(m, per);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{labels, SandboxStatus};
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(policy: &str, inits: &[&str], containers: &[&str]) -> Pod {
        let mk = |n: &&str| Container {
            name: n.to_string(),
            image: Some("img:1".into()),
            ..Default::default()
        };
        let mut p = Pod::default();
        p.metadata.name = Some("p".into());
        p.metadata.uid = Some("u".into());
        p.spec = Some(PodSpec {
            restart_policy: Some(policy.into()),
            init_containers: (!inits.is_empty()).then(|| inits.iter().map(mk).collect()),
            containers: containers.iter().map(mk).collect(),
            ..Default::default()
        });
        p
    }

    fn ctr(
        p: &Pod,
        name: &str,
        state: ContainerState,
        exit: i32,
        created: i64,
        restarts: i32,
    ) -> ContainerStatus {
        let spec = podutil::containers(p)
            .iter()
            .chain(podutil::init_containers(p))
            .find(|c| c.name == name)
            .unwrap();
        ContainerStatus {
            id: format!("{name}-{created}"),
            name: name.into(),
            state,
            exit_code: exit,
            created_at: created,
            started_at: created * 1_000_000_000,
            finished_at: if state == ContainerState::Exited {
                (created + 1) * 1_000_000_000
            } else {
                0
            },
            hash: labels::container_hash(spec),
            restart_count: restarts,
            image: format!("docker.io/library/{}", spec.image.as_deref().unwrap_or("")),
            image_ref: "sha256:abc".into(),
            is_init: podutil::init_containers(p).iter().any(|c| c.name == name),
            ..Default::default()
        }
    }

    fn sandbox() -> SandboxStatus {
        SandboxStatus {
            id: "sb".into(),
            ready: true,
            ip: "10.0.0.9".into(),
            ..Default::default()
        }
    }

    fn gen(
        p: &Pod,
        rt: &PodRuntimeStatus,
        reasons: &Reasons,
        old: Option<&PodStatus>,
    ) -> PodStatus {
        gen_probed(p, rt, reasons, old, &ProbeResults::new())
    }

    fn gen_probed(
        p: &Pod,
        rt: &PodRuntimeStatus,
        reasons: &Reasons,
        old: Option<&PodStatus>,
        probes: &ProbeResults,
    ) -> PodStatus {
        let t = Timestamp::from_second(1_700_000_000).unwrap();
        generate(
            p,
            rt,
            &StatusContext {
                reasons,
                old,
                now: t,
                runtime_name: "containerd",
                start_time: t,
                host_ip: "10.1.1.1",
                probes,
                failure: None,
            },
        )
    }

    fn cond<'a>(s: &'a PodStatus, kind: &str) -> &'a PodCondition {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == kind)
            .unwrap()
    }

    use ContainerState::*;

    /// The sandbox of a host-network pod has no IP of its own: podIP(s) are the node's.
    #[test]
    fn host_network_pod_has_the_node_ip() {
        let mut p = pod("Always", &[], &["a"]);
        p.spec.as_mut().unwrap().host_network = Some(true);
        let rt = PodRuntimeStatus {
            sandboxes: vec![SandboxStatus {
                ip: String::new(),
                host_network: true,
                ..sandbox()
            }],
            containers: vec![ctr(&p, "a", Running, 0, 1, 0)],
        };
        let s = gen(&p, &rt, &Reasons::new(), None);
        assert_eq!(s.pod_ip.as_deref(), Some("10.1.1.1"));
        let ips: Vec<_> = s.pod_ips.unwrap().into_iter().map(|i| i.ip).collect();
        assert_eq!(ips, ["10.1.1.1"]);
        // A pod network pod without an IP yet gets none.
        p.spec.as_mut().unwrap().host_network = None;
        let rt = PodRuntimeStatus {
            sandboxes: vec![SandboxStatus {
                ip: String::new(),
                ..sandbox()
            }],
            containers: vec![],
        };
        assert_eq!(gen(&p, &rt, &Reasons::new(), None).pod_ip, None);
    }

    #[test]
    fn running_pod() {
        let p = pod("Always", &[], &["a", "b"]);
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![
                ctr(&p, "a", Running, 0, 2, 0),
                ctr(&p, "b", Running, 0, 1, 0),
            ],
        };
        let s = gen(&p, &rt, &Reasons::new(), None);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.0.0.9"));
        assert_eq!(s.host_ip.as_deref(), Some("10.1.1.1"));
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
        for c in [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
        ] {
            assert_eq!(cond(&s, c).status, "True", "{c}");
        }
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(cs.container_id.as_deref(), Some("containerd://a-2"));
        assert!(cs.ready && cs.started == Some(true));
        assert_eq!(cs.image_id, "sha256:abc");
        assert_eq!(cs.image, "docker.io/library/img:1", "the runtime's image");
    }

    /// A container the runtime has not created yet shows the spec's image, a created one the
    /// runtime's (upstream: the default status, then `toKubeContainerStatus`).
    #[test]
    fn image_is_the_spec_until_the_runtime_has_one() {
        use ContainerState::*;
        let p = pod("Always", &[], &["a", "b"]);
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr(&p, "a", Running, 0, 2, 0)],
        };
        let s = gen(&p, &rt, &Reasons::new(), None);
        let images: Vec<_> = s
            .container_statuses
            .unwrap()
            .into_iter()
            .map(|c| (c.name, c.image))
            .collect();
        assert_eq!(
            images,
            [
                ("a".to_string(), "docker.io/library/img:1".to_string()),
                ("b".to_string(), "img:1".to_string())
            ]
        );
    }

    #[test]
    fn probes_decide_started_and_ready() {
        use crate::prober::ProbeResult;
        use k8s_openapi::api::core::v1::{ExecAction, Probe};
        let mut p = pod("Always", &[], &["a", "b"]);
        let probe = Some(Probe {
            exec: Some(ExecAction {
                command: Some(vec!["true".into()]),
            }),
            ..Default::default()
        });
        let spec = p.spec.as_mut().unwrap();
        spec.containers[0].readiness_probe = probe.clone();
        spec.containers[1].startup_probe = probe;
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![
                ctr(&p, "a", Running, 0, 2, 0),
                ctr(&p, "b", Running, 0, 1, 0),
            ],
        };
        let flags = |s: &PodStatus| -> Vec<(bool, Option<bool>)> {
            s.container_statuses
                .as_ref()
                .unwrap()
                .iter()
                .map(|c| (c.ready, c.started))
                .collect()
        };
        // No results yet: a has not passed readiness, b has not passed startup.
        let mut probes = ProbeResults::new();
        let s = gen_probed(&p, &rt, &Reasons::new(), None, &probes);
        assert_eq!(flags(&s), [(false, Some(true)), (false, Some(false))]);
        assert_eq!(cond(&s, "Ready").status, "False");
        assert_eq!(
            cond(&s, "ContainersReady").message.as_deref(),
            Some("containers with unready status: [a b]")
        );
        probes.set("u", "a-2", ProbeKind::Readiness, ProbeResult::Success);
        probes.set("u", "b-1", ProbeKind::Startup, ProbeResult::Success);
        let s = gen_probed(&p, &rt, &Reasons::new(), None, &probes);
        assert_eq!(flags(&s), [(true, Some(true)), (true, Some(true))]);
        assert_eq!(cond(&s, "Ready").status, "True");
        // A result for an earlier instance of the container does not count.
        let mut stale = ProbeResults::new();
        stale.set("u", "a-1", ProbeKind::Readiness, ProbeResult::Success);
        let s = gen_probed(&p, &rt, &Reasons::new(), None, &stale);
        assert!(!flags(&s)[0].0);
    }

    #[test]
    fn active_deadline_fails_an_active_pod() {
        let mut p = pod("Always", &[], &["a"]);
        p.spec.as_mut().unwrap().active_deadline_seconds = Some(30);
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr(&p, "a", Running, 0, 2, 0)],
        };
        let t = |s: i64| Timestamp::from_second(1_700_000_000 + s).unwrap();
        assert_eq!(
            active_deadline_left(&p, t(0), t(10)),
            Some(std::time::Duration::from_secs(20))
        );
        assert_eq!(
            active_deadline_left(&p, t(0), t(99)),
            Some(std::time::Duration::ZERO)
        );
        let probes = ProbeResults::new();
        let gen_at = |now: i64, rt: &PodRuntimeStatus| {
            generate(
                &p,
                rt,
                &StatusContext {
                    reasons: &Reasons::new(),
                    old: None,
                    now: t(now),
                    runtime_name: "containerd",
                    start_time: t(0),
                    host_ip: "",
                    probes: &probes,
                    failure: None,
                },
            )
        };
        assert_eq!(gen_at(29, &rt).phase.as_deref(), Some("Running"));
        let s = gen_at(30, &rt);
        assert_eq!(
            (s.phase.as_deref(), s.reason.as_deref()),
            (Some("Failed"), Some("DeadlineExceeded"))
        );
        // A pod that already succeeded keeps its phase.
        let done = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr(&p, "a", Exited, 0, 2, 0)],
        };
        let mut never = p.clone();
        never.spec.as_mut().unwrap().restart_policy = Some("Never".into());
        let s = generate(
            &never,
            &done,
            &StatusContext {
                reasons: &Reasons::new(),
                old: None,
                now: t(99),
                runtime_name: "containerd",
                start_time: t(0),
                host_ip: "",
                probes: &probes,
                failure: None,
            },
        );
        assert_eq!((s.phase.as_deref(), s.reason), (Some("Succeeded"), None));
        // An eviction fails even a running pod, with a DisruptionTarget condition.
        let f = PodFailure {
            reason: "Evicted".into(),
            message: "The node was low on resource: memory. ".into(),
        };
        let s = generate(
            &p,
            &rt,
            &StatusContext {
                reasons: &Reasons::new(),
                old: None,
                now: t(1),
                runtime_name: "containerd",
                start_time: t(0),
                host_ip: "",
                probes: &probes,
                failure: Some(&f),
            },
        );
        assert_eq!(
            (
                s.phase.as_deref(),
                s.reason.as_deref(),
                s.message.as_deref()
            ),
            (
                Some("Failed"),
                Some("Evicted"),
                Some("The node was low on resource: memory. ")
            )
        );
        let c = cond(&s, DISRUPTION_TARGET);
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("True", Some(TERMINATION_BY_KUBELET))
        );
        assert_eq!(
            active_deadline_left(&pod("Always", &[], &["a"]), t(0), t(5)),
            None
        );
    }

    #[test]
    fn crash_loop_shows_waiting_with_last_state() {
        let p = pod("Always", &[], &["a"]);
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr(&p, "a", Exited, 1, 5, 2), ctr(&p, "a", Exited, 1, 3, 1)],
        };
        let mut reasons = Reasons::new();
        reasons.insert(
            "a".into(),
            (
                "CrashLoopBackOff".into(),
                "back-off 20s restarting failed container".into(),
            ),
        );
        let s = gen(&p, &rt, &reasons, None);
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        let w = cs.state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(w.reason.as_deref(), Some("CrashLoopBackOff"));
        let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
        assert_eq!(cs.restart_count, 2);
        assert!(!cs.ready);
        // Always restarts, so the pod stays Running while it crash-loops (upstream getPhase).
        assert_eq!(s.phase.as_deref(), Some("Running"));
        let ready = cond(&s, "Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("ContainersNotReady"))
        );
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [a]")
        );
    }

    #[test]
    fn pending_pieces() {
        let p = pod("Always", &["init"], &["a"]);
        let s = gen(&p, &PodRuntimeStatus::default(), &Reasons::new(), None);
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(cond(&s, "PodReadyToStartContainers").status, "False");
        let init = cond(&s, "Initialized");
        assert_eq!(init.status, "False");
        assert_eq!(
            init.message.as_deref(),
            Some("containers with incomplete status: [init]")
        );
        let w = |cs: &ApiContainerStatus| {
            cs.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .clone()
        };
        assert_eq!(
            w(&s.init_container_statuses.as_ref().unwrap()[0]).as_deref(),
            Some("PodInitializing")
        );
        assert_eq!(
            w(&s.container_statuses.as_ref().unwrap()[0]).as_deref(),
            Some("PodInitializing")
        );
        let p = pod("Always", &[], &["a"]);
        let mut reasons = Reasons::new();
        reasons.insert(
            "a".into(),
            ("ErrImageNeverPull".into(), "not present".into()),
        );
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![],
        };
        let s = gen(&p, &rt, &reasons, None);
        assert_eq!(
            w(&s.container_statuses.as_ref().unwrap()[0]).as_deref(),
            Some("ErrImageNeverPull")
        );
        assert_eq!(s.phase.as_deref(), Some("Pending"));
    }

    #[test]
    fn sidecars_in_phase_and_conditions() {
        let mut p = pod("Never", &["side", "init"], &["a"]);
        p.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[0].restart_policy =
            Some("Always".into());
        let rt = |cs: Vec<ContainerStatus>| PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: cs,
        };
        let none = Reasons::new();
        // Sidecar running, regular init still running: Pending, not initialized (only `init`
        // is incomplete: a started sidecar counts as initialized).
        let s = gen(
            &p,
            &rt(vec![
                ctr(&p, "init", Running, 0, 2, 0),
                ctr(&p, "side", Running, 0, 1, 0),
            ]),
            &none,
            None,
        );
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(
            cond(&s, "Initialized").message.as_deref(),
            Some("containers with incomplete status: [init]")
        );
        // Both regular init done, app and sidecar running: Running, initialized, and the
        // sidecar's readiness counts for ContainersReady.
        let s = gen(
            &p,
            &rt(vec![
                ctr(&p, "a", Running, 0, 3, 0),
                ctr(&p, "init", Exited, 0, 2, 0),
                ctr(&p, "side", Running, 0, 1, 0),
            ]),
            &none,
            None,
        );
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Initialized").status, "True");
        assert_eq!(cond(&s, "ContainersReady").status, "True");
        let inits = s.init_container_statuses.as_ref().unwrap();
        assert!(
            inits[0].ready && inits[1].ready,
            "sidecar running, init succeeded"
        );
        // App done under Never, sidecar killed when the pod stopped: Succeeded; the sidecar's
        // non-zero exit does not fail the pod.
        let s = gen(
            &p,
            &rt(vec![
                ctr(&p, "a", Exited, 0, 3, 0),
                ctr(&p, "init", Exited, 0, 2, 0),
                ctr(&p, "side", Exited, 137, 1, 0),
            ]),
            &none,
            None,
        );
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        assert_eq!(
            cond(&s, "Initialized").reason.as_deref(),
            Some("PodCompleted")
        );
        // A sidecar restarting after initialization does not send the pod back to Pending.
        let mut crash = Reasons::new();
        crash.insert(
            "side".into(),
            ("CrashLoopBackOff".into(), "back-off".into()),
        );
        let mut always = p.clone();
        always.spec.as_mut().unwrap().restart_policy = Some("Always".into());
        let s = gen(
            &always,
            &rt(vec![
                ctr(&always, "a", Running, 0, 3, 0),
                ctr(&always, "init", Exited, 0, 2, 0),
                ctr(&always, "side", Exited, 1, 1, 0),
            ]),
            &crash,
            None,
        );
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Initialized").status, "True");
        assert_eq!(
            cond(&s, "ContainersReady").message.as_deref(),
            Some("containers with unready status: [side]")
        );
    }

    #[test]
    fn readiness_gates_and_foreign_conditions() {
        let mut p = pod("Always", &[], &["a"]);
        p.spec.as_mut().unwrap().readiness_gates =
            Some(vec![k8s_openapi::api::core::v1::PodReadinessGate {
                condition_type: "example.com/lb".into(),
            }]);
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr(&p, "a", Running, 0, 1, 0)],
        };
        let s = gen(&p, &rt, &Reasons::new(), None);
        let ready = cond(&s, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some(
                "corresponding condition of pod readiness gate \"example.com/lb\" does not exist."
            )
        );
        assert_eq!(cond(&s, "ContainersReady").status, "True");
        assert_eq!(cond(&s, "PodScheduled").status, "True");
        // A controller sets the gate's condition: kept in the status, and Ready follows it.
        p.status = Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "example.com/lb".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let s = gen(&p, &rt, &Reasons::new(), None);
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(cond(&s, "example.com/lb").status, "True");
    }

    #[test]
    fn terminal_phases() {
        let never = pod("Never", &[], &["a", "b"]);
        let rt = PodRuntimeStatus {
            sandboxes: vec![],
            containers: vec![
                ctr(&never, "a", Exited, 0, 2, 0),
                ctr(&never, "b", Exited, 3, 1, 0),
            ],
        };
        assert_eq!(
            gen(&never, &rt, &Reasons::new(), None).phase.as_deref(),
            Some("Failed")
        );
        let ok = PodRuntimeStatus {
            sandboxes: vec![],
            containers: vec![
                ctr(&never, "a", Exited, 0, 2, 0),
                ctr(&never, "b", Exited, 0, 1, 0),
            ],
        };
        let s = gen(&never, &ok, &Reasons::new(), None);
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
        let onf = pod("OnFailure", &[], &["a"]);
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr(&onf, "a", Exited, 1, 1, 0)],
        };
        assert_eq!(
            gen(&onf, &rt, &Reasons::new(), None).phase.as_deref(),
            Some("Running")
        );
        let inits = pod("Never", &["i"], &["a"]);
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr(&inits, "i", Exited, 1, 1, 0)],
        };
        assert_eq!(
            gen(&inits, &rt, &Reasons::new(), None).phase.as_deref(),
            Some("Failed")
        );
    }

    #[test]
    fn transition_times_survive_unchanged_conditions_and_ips_survive_sandbox_stop() {
        let p = pod("Always", &[], &["a"]);
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr(&p, "a", Running, 0, 1, 0)],
        };
        let mut old = gen(&p, &rt, &Reasons::new(), None);
        let early = Time(Timestamp::from_second(1_600_000_000).unwrap());
        for c in old.conditions.as_mut().unwrap() {
            c.last_transition_time = Some(early.clone());
        }
        let s = gen(&p, &rt, &Reasons::new(), Some(&old));
        assert_eq!(
            cond(&s, "Ready").last_transition_time.as_ref(),
            Some(&early)
        );
        let stopped = PodRuntimeStatus {
            sandboxes: vec![],
            containers: vec![ctr(&p, "a", Exited, 0, 1, 0)],
        };
        let s = gen(&p, &stopped, &Reasons::new(), Some(&old));
        assert_ne!(
            cond(&s, "Ready").last_transition_time.as_ref(),
            Some(&early)
        );
        assert_eq!(s.pod_ip.as_deref(), Some("10.0.0.9"));
    }

    #[test]
    fn termination_messages_share_the_pod_budget() {
        let p = pod("Never", &[], &["a", "b", "c"]);
        let mut a = ctr(&p, "a", Exited, 1, 3, 0);
        a.message = "é".repeat(3000); // 6000 bytes
        let mut b = ctr(&p, "b", Exited, 0, 2, 0);
        b.message = "bye\n".into();
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![a, b, ctr(&p, "c", Exited, 0, 1, 0)],
        };
        let s = gen(&p, &rt, &Reasons::new(), None);
        let msg = |name: &str| {
            s.container_statuses
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.name == name)
                .unwrap()
                .state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .message
                .clone()
        };
        // 12 KiB / 3 containers = 4096 bytes each, cut at a character boundary.
        assert_eq!(msg("a").unwrap(), "é".repeat(2048));
        assert_eq!(msg("b").as_deref(), Some("bye\n"));
        assert_eq!(msg("c"), None);
    }
}
