//! `computePodActions` (upstream `kuberuntime_manager.go`): the pure decision of what a sync must do
//! to move the runtime towards the pod spec. No I/O here, so every rule has a table test.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod};

use super::{labels, ContainerState, ContainerStatus, PodRuntimeStatus};
use crate::podutil;
use crate::prober::{
    is_restartable_init, probe_grace_override, probe_of, ProbeKind, ProbeResult, ProbeResults,
};

/// A container to stop, with why (logged and, later, an event).
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerToKill {
    pub id: String,
    pub name: String,
    pub message: String,
    /// A probe's `terminationGracePeriodSeconds`, which overrides the pod's for this kill.
    pub grace_override: Option<i64>,
}

/// What one sync must do (upstream `podActions`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodActions {
    /// Stop every container and the sandbox (before recreating it, or because nothing should run).
    pub kill_pod: bool,
    pub create_sandbox: bool,
    /// The sandbox to reuse, or the one being replaced.
    pub sandbox_id: String,
    /// Attempt number for a new sandbox.
    pub attempt: u32,
    /// Indexes into `spec.initContainers` to start, in order: the next init container to run,
    /// and sidecars to (re)start.
    pub init_containers_to_start: Vec<usize>,
    /// Indexes into `spec.containers`.
    pub containers_to_start: Vec<usize>,
    /// Indexes into `spec.ephemeralContainers`: those never started (they never restart).
    pub ephemeral_containers_to_start: Vec<usize>,
    pub containers_to_kill: Vec<ContainerToKill>,
    /// Containers to start (init or regular, by name) whose newest instance is `Created` in the
    /// current sandbox with the current spec: an interrupted start, so that instance (this ID) is
    /// started as it is and its restart count stays. Beyond upstream, which replaces it.
    pub start_existing: BTreeMap<String, String>,
    /// IDs of `Created` instances that will never be started (spec changed, older sandbox, not
    /// the newest instance, or the pod is being stopped), and of instances whose start was
    /// cancelled half-way: removed, so an interrupted start leaks nothing.
    pub interrupted_to_remove: Vec<String>,
    /// Containers to start (by name) whose newest instance never ran because its start was
    /// cancelled (the kubelet died during StartContainer; containerd then marks it exited with a
    /// `StartError` naming the cancellation): the replacement keeps its restart count.
    pub replace_uncounted: BTreeSet<String>,
}

impl PodActions {
    /// Nothing to do in the runtime: the pod is as it should be.
    pub fn is_noop(&self) -> bool {
        !self.kill_pod
            && !self.create_sandbox
            && self.init_containers_to_start.is_empty()
            && self.containers_to_start.is_empty()
            && self.ephemeral_containers_to_start.is_empty()
            && self.containers_to_kill.is_empty()
            && self.start_existing.is_empty()
            && self.interrupted_to_remove.is_empty()
    }
}

fn should_restart_on_failure(pod: &Pod) -> bool {
    podutil::restart_policy(pod) != "Never"
}

/// Upstream `PodSandboxChanged`: (create a new sandbox?, attempt, id of the current one).
fn sandbox_changed(pod: &Pod, status: &PodRuntimeStatus) -> (bool, u32, String) {
    let Some(newest) = status.sandboxes.first() else {
        return (true, 0, String::new());
    };
    let ready = status.sandboxes.iter().filter(|s| s.ready).count();
    if ready > 1 || !newest.ready {
        return (true, newest.attempt + 1, newest.id.clone());
    }
    if newest.host_network != podutil::host_network(pod) {
        return (true, newest.attempt + 1, String::new());
    }
    if !podutil::host_network(pod) && newest.ip.is_empty() {
        return (true, newest.attempt + 1, newest.id.clone());
    }
    (false, newest.attempt, newest.id.clone())
}

/// Upstream `ShouldContainerBeRestarted`.
pub fn should_container_be_restarted(c: &Container, pod: &Pod, status: &PodRuntimeStatus) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(s) = status.find(&c.name) else {
        return true;
    };
    match s.state {
        ContainerState::Running => false,
        ContainerState::Unknown | ContainerState::Created => true,
        ContainerState::Exited => match podutil::restart_policy(pod) {
            "Never" => false,
            "OnFailure" => s.exit_code != 0,
            _ => true,
        },
    }
}

fn container_succeeded(c: &Container, status: &PodRuntimeStatus) -> bool {
    status
        .find(&c.name)
        .is_some_and(|s| s.state == ContainerState::Exited && s.exit_code == 0)
}

fn is_init_failed(s: &ContainerStatus) -> bool {
    (s.state == ContainerState::Exited && s.exit_code != 0) || s.state == ContainerState::Unknown
}

/// Upstream `hasAnyRegularContainerCreated`: a regular container exists, so initialization
/// finished at some point (a recreated sandbox then does not run init containers again for a pod
/// that is done).
fn any_regular_container_created(pod: &Pod, status: &PodRuntimeStatus) -> bool {
    podutil::containers(pod).iter().any(|c| {
        status.find(&c.name).is_some_and(|s| {
            matches!(
                s.state,
                ContainerState::Created | ContainerState::Running | ContainerState::Exited
            )
        })
    })
}

fn kill(s: &ContainerStatus, message: String, grace_override: Option<i64>) -> ContainerToKill {
    ContainerToKill {
        id: s.id.clone(),
        name: s.name.clone(),
        message,
        grace_override,
    }
}

/// Upstream `computeInitContainerActions` (sidecar-aware, the only behaviour since 1.33): fills
/// `init_containers_to_start` and the kills of sidecars that must restart; returns whether the pod
/// is initialized, i.e. regular containers may be looked at.
///
/// Init containers are walked from the last one backwards, because completed init containers may
/// have been removed from the runtime: the last one that left a trace tells how far we got.
/// Sidecars (`restartPolicy: Always`) are kept running once started, even after initialization.
fn compute_init_actions(
    pod: &Pod,
    status: &PodRuntimeStatus,
    probes: &ProbeResults,
    a: &mut PodActions,
) -> bool {
    let inits = podutil::init_containers(pod);
    if inits.is_empty() {
        return true;
    }
    // A created or running regular container means every init container ran at some point.
    let mut initialized = podutil::containers(pod).iter().any(|c| {
        status
            .find(&c.name)
            .is_some_and(|s| matches!(s.state, ContainerState::Created | ContainerState::Running))
    });
    let mut previously_initialized = initialized;
    let restart_on_failure = should_restart_on_failure(pod);
    let last = inits.len() - 1;
    let mut to_start = Vec::new();

    for (i, c) in inits.iter().enumerate().rev() {
        let sidecar = is_restartable_init(c);
        let Some(s) = status.find(&c.name) else {
            // Gone from the runtime after initialization: only a sidecar must come back.
            if previously_initialized && sidecar {
                to_start.push(i);
            }
            continue;
        };
        if previously_initialized && !sidecar {
            continue;
        }
        match s.state {
            // Created but never started (the runtime failed to start it): start it again.
            ContainerState::Created => to_start.push(i),
            ContainerState::Running if sidecar => 'running: {
                if probe_of(c, ProbeKind::Startup).is_some() {
                    match probes.get(&s.id, ProbeKind::Startup) {
                        // Not probed yet: wait for the startup probe before the next one.
                        None | Some(ProbeResult::Unknown) => break 'running,
                        Some(ProbeResult::Failure) => {
                            a.containers_to_kill.push(kill(
                                s,
                                format!("Init container {} failed startup probe", c.name),
                                probe_grace_override(pod, &c.name, ProbeKind::Startup),
                            ));
                            to_start.push(i);
                            break 'running;
                        }
                        Some(ProbeResult::Success) => {}
                    }
                }
                if i == last {
                    initialized = true;
                } else if !previously_initialized {
                    to_start.push(i + 1);
                }
                if s.hash != labels::container_hash(c) {
                    a.containers_to_kill.push(kill(
                        s,
                        format!("Init container {} definition changed", c.name),
                        None,
                    ));
                    to_start.push(i);
                    break 'running;
                }
                if probes.liveness_failed(&s.id) {
                    a.containers_to_kill.push(kill(
                        s,
                        format!("Init container {} failed liveness probe", c.name),
                        probe_grace_override(pod, &c.name, ProbeKind::Liveness),
                    ));
                    to_start.push(i);
                }
            }
            // A regular init container still running: wait for it to finish.
            ContainerState::Running => {}
            ContainerState::Exited if sidecar => to_start.push(i),
            ContainerState::Exited => {
                if is_init_failed(s) {
                    if !restart_on_failure {
                        a.kill_pod = true;
                        a.init_containers_to_start.clear();
                        return false;
                    }
                    to_start.push(i);
                } else if i == last {
                    initialized = true;
                } else {
                    to_start.push(i + 1);
                }
            }
            ContainerState::Unknown => {
                if !sidecar && !restart_on_failure {
                    a.kill_pod = true;
                    a.init_containers_to_start.clear();
                    return false;
                }
                a.containers_to_kill.push(kill(
                    s,
                    "Init container is in \"unknown\" state, try killing it before restart".into(),
                    None,
                ));
                to_start.push(i);
            }
        }
        previously_initialized = true;
    }
    if !previously_initialized {
        // Nothing ran yet: start with the first.
        to_start.push(0);
    }
    // Walked backwards; start in spec order.
    to_start.reverse();
    a.init_containers_to_start = to_start;
    initialized
}

/// Decides what the sync must do. `probes` holds the liveness and startup results that make a
/// running container be killed (and restarted, unless the pod never restarts).
pub fn compute_pod_actions(
    pod: &Pod,
    status: &PodRuntimeStatus,
    probes: &ProbeResults,
) -> PodActions {
    let mut a = compute_starts_and_kills(pod, status, probes);
    created::dispositions(pod, status, &mut a);
    a
}

/// The start and kill decisions, before [`created::dispositions`] looks at interrupted starts.
fn compute_starts_and_kills(
    pod: &Pod,
    status: &PodRuntimeStatus,
    probes: &ProbeResults,
) -> PodActions {
    let (create_sandbox, attempt, sandbox_id) = sandbox_changed(pod, status);
    let mut a = PodActions {
        kill_pod: create_sandbox,
        create_sandbox,
        sandbox_id,
        attempt,
        ..Default::default()
    };
    let containers = podutil::containers(pod);
    let inits = podutil::init_containers(pod);

    if create_sandbox {
        if !should_restart_on_failure(pod) && attempt != 0 && !status.containers.is_empty() {
            // Never restarts and something already ran: the pod is done, do not bring it back.
            a.create_sandbox = false;
            return a;
        }
        let to_start: Vec<usize> = containers
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                !(podutil::restart_policy(pod) == "OnFailure" && container_succeeded(c, status))
            })
            .map(|(i, _)| i)
            .collect();
        // Every regular container succeeded under OnFailure: the pod is done, no new sandbox.
        if to_start.is_empty() && (inits.is_empty() || any_regular_container_created(pod, status)) {
            a.create_sandbox = false;
            return a;
        }
        // A new sandbox runs initialization again from the first init container.
        if !inits.is_empty() {
            a.init_containers_to_start = vec![0];
            return a;
        }
        a.containers_to_start = to_start;
        return a;
    }

    // Ephemeral containers may start before initialization finished; once they ran they are
    // never started again, whatever their exit.
    a.ephemeral_containers_to_start = podutil::ephemeral_specs(pod)
        .iter()
        .enumerate()
        .filter(|(_, e)| status.find(&e.name).is_none())
        .map(|(i, _)| i)
        .collect();

    let initialized = compute_init_actions(pod, status, probes, &mut a);
    if a.kill_pod || !initialized {
        return a;
    }

    let mut keep = 0;
    for (idx, c) in containers.iter().enumerate() {
        let s = status.find(&c.name);
        match s {
            Some(s) if s.state == ContainerState::Running => {
                let (message, restart, grace_override) = if s.hash != labels::container_hash(c) {
                    (
                        format!("Container {} definition changed", c.name),
                        true,
                        None,
                    )
                } else if probes.liveness_failed(&s.id) {
                    (
                        format!("Container {} failed liveness probe", c.name),
                        should_restart_on_failure(pod),
                        probe_grace_override(pod, &c.name, ProbeKind::Liveness),
                    )
                } else if probes.startup_failed(&s.id) {
                    (
                        format!("Container {} failed startup probe", c.name),
                        should_restart_on_failure(pod),
                        probe_grace_override(pod, &c.name, ProbeKind::Startup),
                    )
                } else {
                    keep += 1;
                    continue;
                };
                let message = if restart {
                    a.containers_to_start.push(idx);
                    format!("{message}, will be restarted")
                } else {
                    message
                };
                a.containers_to_kill.push(ContainerToKill {
                    id: s.id.clone(),
                    name: c.name.clone(),
                    message,
                    grace_override,
                });
            }
            _ => {
                if should_container_be_restarted(c, pod, status) {
                    a.containers_to_start.push(idx);
                    if let Some(s) = s.filter(|s| s.state == ContainerState::Unknown) {
                        a.containers_to_kill.push(ContainerToKill {
                            id: s.id.clone(),
                            name: c.name.clone(),
                            message: "Container is in unknown state, try killing it before restart"
                                .into(),
                            grace_override: None,
                        });
                    }
                }
            }
        }
    }
    if keep == 0 && a.containers_to_start.is_empty() {
        // Nothing regular runs or will: stop the pod, sidecars included, and do not restart them.
        a.kill_pod = true;
        a.init_containers_to_start.clear();
    }
    a
}

// Interrupted starts get their own file: the decision and its table.
#[path = "actions_created.rs"]
mod created;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::SandboxStatus;
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

    fn sandbox(ready: bool, attempt: u32) -> SandboxStatus {
        SandboxStatus {
            id: format!("sb{attempt}"),
            attempt,
            ready,
            ip: if ready {
                "10.0.0.2".into()
            } else {
                String::new()
            },
            ..Default::default()
        }
    }

    fn ctr(pod: &Pod, name: &str, state: ContainerState, exit: i32) -> ContainerStatus {
        let spec = podutil::containers(pod)
            .iter()
            .chain(podutil::init_containers(pod))
            .find(|c| c.name == name)
            .unwrap();
        ContainerStatus {
            id: format!("id-{name}"),
            name: name.into(),
            state,
            exit_code: exit,
            hash: labels::container_hash(spec),
            ..Default::default()
        }
    }

    use ContainerState::*;

    #[test]
    fn table() {
        struct Case {
            name: &'static str,
            pod: Pod,
            status: fn(&Pod) -> PodRuntimeStatus,
            want: fn(&Pod) -> PodActions,
        }
        let cases = vec![
            Case {
                name: "new pod: create sandbox, start all",
                pod: pod("Always", &[], &["a", "b"]),
                status: |_| PodRuntimeStatus::default(),
                want: |_| PodActions {
                    kill_pod: true,
                    create_sandbox: true,
                    containers_to_start: vec![0, 1],
                    ..Default::default()
                },
            },
            Case {
                name: "all running: nothing",
                pod: pod("Always", &[], &["a", "b"]),
                status: |p| PodRuntimeStatus {
                    sandboxes: vec![sandbox(true, 0)],
                    containers: vec![ctr(p, "a", Running, 0), ctr(p, "b", Running, 0)],
                },
                want: |_| PodActions {
                    sandbox_id: "sb0".into(),
                    ..Default::default()
                },
            },
            Case {
                name: "Always: exited 0 is restarted",
                pod: pod("Always", &[], &["a", "b"]),
                status: |p| PodRuntimeStatus {
                    sandboxes: vec![sandbox(true, 0)],
                    containers: vec![ctr(p, "a", Exited, 0), ctr(p, "b", Running, 0)],
                },
                want: |_| PodActions {
                    sandbox_id: "sb0".into(),
                    containers_to_start: vec![0],
                    ..Default::default()
                },
            },
            Case {
                name: "OnFailure: exited 0 stays, exited 1 restarts",
                pod: pod("OnFailure", &[], &["a", "b"]),
                status: |p| PodRuntimeStatus {
                    sandboxes: vec![sandbox(true, 0)],
                    containers: vec![ctr(p, "a", Exited, 0), ctr(p, "b", Exited, 1)],
                },
                want: |_| PodActions {
                    sandbox_id: "sb0".into(),
                    containers_to_start: vec![1],
                    ..Default::default()
                },
            },
            Case {
                name: "Never: all exited, kill pod",
                pod: pod("Never", &[], &["a"]),
                status: |p| PodRuntimeStatus {
                    sandboxes: vec![sandbox(true, 0)],
                    containers: vec![ctr(p, "a", Exited, 1)],
                },
                want: |_| PodActions {
                    kill_pod: true,
                    sandbox_id: "sb0".into(),
                    ..Default::default()
                },
            },
            Case {
                name: "Never: dead sandbox after run, no new sandbox",
                pod: pod("Never", &[], &["a"]),
                status: |p| PodRuntimeStatus {
                    sandboxes: vec![sandbox(false, 0)],
                    containers: vec![ctr(p, "a", Exited, 0)],
                },
                want: |_| PodActions {
                    kill_pod: true,
                    sandbox_id: "sb0".into(),
                    attempt: 1,
                    ..Default::default()
                },
            },
            Case {
                name: "dead sandbox under Always: recreate with next attempt",
                pod: pod("Always", &[], &["a"]),
                status: |p| PodRuntimeStatus {
                    sandboxes: vec![sandbox(false, 2)],
                    containers: vec![ctr(p, "a", Exited, 137)],
                },
                want: |_| PodActions {
                    kill_pod: true,
                    create_sandbox: true,
                    sandbox_id: "sb2".into(),
                    attempt: 3,
                    containers_to_start: vec![0],
                    ..Default::default()
                },
            },
            Case {
                name: "OnFailure: recreated sandbox skips succeeded containers",
                pod: pod("OnFailure", &[], &["a", "b"]),
                status: |p| PodRuntimeStatus {
                    sandboxes: vec![sandbox(false, 0)],
                    containers: vec![ctr(p, "a", Exited, 0), ctr(p, "b", Exited, 2)],
                },
                want: |_| PodActions {
                    kill_pod: true,
                    create_sandbox: true,
                    sandbox_id: "sb0".into(),
                    attempt: 1,
                    containers_to_start: vec![1],
                    ..Default::default()
                },
            },
            Case {
                name: "spec changed: kill and restart",
                pod: pod("Always", &[], &["a"]),
                status: |p| {
                    let mut c = ctr(p, "a", Running, 0);
                    c.hash = "stale".into();
                    PodRuntimeStatus {
                        sandboxes: vec![sandbox(true, 0)],
                        containers: vec![c],
                    }
                },
                want: |_| PodActions {
                    sandbox_id: "sb0".into(),
                    containers_to_start: vec![0],
                    containers_to_kill: vec![ContainerToKill {
                        id: "id-a".into(),
                        name: "a".into(),
                        message: "Container a definition changed, will be restarted".into(),
                        grace_override: None,
                    }],
                    ..Default::default()
                },
            },
            Case {
                name: "unknown state: kill before restart",
                pod: pod("Always", &[], &["a"]),
                status: |p| PodRuntimeStatus {
                    sandboxes: vec![sandbox(true, 0)],
                    containers: vec![ctr(p, "a", Unknown, 0)],
                },
                want: |_| PodActions {
                    sandbox_id: "sb0".into(),
                    containers_to_start: vec![0],
                    containers_to_kill: vec![ContainerToKill {
                        id: "id-a".into(),
                        name: "a".into(),
                        message: "Container is in unknown state, try killing it before restart"
                            .into(),
                        grace_override: None,
                    }],
                    ..Default::default()
                },
            },
            Case {
                name: "init: new pod starts the first init container only",
                pod: pod("Always", &["i1", "i2"], &["a"]),
                status: |_| PodRuntimeStatus::default(),
                want: |_| PodActions {
                    kill_pod: true,
                    create_sandbox: true,
                    init_containers_to_start: vec![0],
                    ..Default::default()
                },
            },
            Case {
                name: "init: first done, second next",
                pod: pod("Always", &["i1", "i2"], &["a"]),
                status: |p| PodRuntimeStatus {
                    sandboxes: vec![sandbox(true, 0)],
                    containers: vec![ctr(p, "i1", Exited, 0)],
                },
                want: |_| PodActions {
                    sandbox_id: "sb0".into(),
                    init_containers_to_start: vec![1],
                    ..Default::default()
                },
            },
            Case {
                name: "init: one running, wait",
                pod: pod("Always", &["i1", "i2"], &["a"]),
                status: |p| PodRuntimeStatus {
                    sandboxes: vec![sandbox(true, 0)],
                    containers: vec![ctr(p, "i2", Running, 0), ctr(p, "i1", Exited, 0)],
                },
                want: |_| PodActions {
                    sandbox_id: "sb0".into(),
                    ..Default::default()
                },
            },
            Case {
                name: "init: failed under Always is retried",
                pod: pod("Always", &["i1"], &["a"]),
                status: |p| PodRuntimeStatus {
                    sandboxes: vec![sandbox(true, 0)],
                    containers: vec![ctr(p, "i1", Exited, 3)],
                },
                want: |_| PodActions {
                    sandbox_id: "sb0".into(),
                    init_containers_to_start: vec![0],
                    ..Default::default()
                },
            },
            Case {
                name: "init: failed under Never kills the pod",
                pod: pod("Never", &["i1"], &["a"]),
                status: |p| PodRuntimeStatus {
                    sandboxes: vec![sandbox(true, 0)],
                    containers: vec![ctr(p, "i1", Exited, 3)],
                },
                want: |_| PodActions {
                    kill_pod: true,
                    sandbox_id: "sb0".into(),
                    ..Default::default()
                },
            },
            Case {
                name: "init: all done, start app containers",
                pod: pod("Always", &["i1", "i2"], &["a", "b"]),
                status: |p| PodRuntimeStatus {
                    sandboxes: vec![sandbox(true, 0)],
                    containers: vec![ctr(p, "i2", Exited, 0), ctr(p, "i1", Exited, 0)],
                },
                want: |_| PodActions {
                    sandbox_id: "sb0".into(),
                    containers_to_start: vec![0, 1],
                    ..Default::default()
                },
            },
        ];
        for c in cases {
            let status = (c.status)(&c.pod);
            assert_eq!(
                compute_pod_actions(&c.pod, &status, &ProbeResults::new()),
                (c.want)(&c.pod),
                "case: {}",
                c.name
            );
        }
    }

    /// Marks init containers whose names start with `side` as sidecars (restartPolicy Always).
    fn sidecar_pod(policy: &str, inits: &[&str], containers: &[&str]) -> Pod {
        let mut p = pod(policy, inits, containers);
        for c in p
            .spec
            .as_mut()
            .unwrap()
            .init_containers
            .iter_mut()
            .flatten()
        {
            if c.name.starts_with("side") {
                c.restart_policy = Some("Always".into());
            }
        }
        p
    }

    fn with_startup_probe(mut p: Pod, name: &str) -> Pod {
        let spec = p.spec.as_mut().unwrap();
        for c in spec.init_containers.iter_mut().flatten() {
            if c.name == name {
                c.startup_probe = Some(Default::default());
            }
        }
        p
    }

    fn actions(p: &Pod, containers: Vec<ContainerStatus>, probes: &ProbeResults) -> PodActions {
        let status = PodRuntimeStatus {
            sandboxes: vec![sandbox(true, 0)],
            containers,
        };
        compute_pod_actions(p, &status, probes)
    }

    #[test]
    fn sidecars_start_in_order_and_keep_running() {
        let none = ProbeResults::new();
        let p = sidecar_pod("Always", &["side", "init"], &["a"]);
        // A new pod starts the sidecar first, alone.
        let a = compute_pod_actions(&p, &PodRuntimeStatus::default(), &none);
        assert_eq!(a.init_containers_to_start, vec![0]);
        assert!(a.containers_to_start.is_empty());
        // The sidecar runs (no startup probe): the next init container starts.
        let a = actions(&p, vec![ctr(&p, "side", Running, 0)], &none);
        assert_eq!(a.init_containers_to_start, vec![1]);
        assert!(a.containers_to_start.is_empty() && !a.kill_pod);
        // The regular init container runs: wait.
        let a = actions(
            &p,
            vec![ctr(&p, "init", Running, 0), ctr(&p, "side", Running, 0)],
            &none,
        );
        assert_eq!(a.init_containers_to_start, Vec::<usize>::new());
        assert!(a.containers_to_start.is_empty());
        // Initialization done: regular containers start, the sidecar is left running.
        let a = actions(
            &p,
            vec![ctr(&p, "init", Exited, 0), ctr(&p, "side", Running, 0)],
            &none,
        );
        assert_eq!(a.init_containers_to_start, Vec::<usize>::new());
        assert_eq!(a.containers_to_start, vec![0]);
        // A sidecar that exits after initialization is restarted, the app keeps running.
        let a = actions(
            &p,
            vec![
                ctr(&p, "a", Running, 0),
                ctr(&p, "side", Exited, 1),
                ctr(&p, "init", Exited, 0),
            ],
            &none,
        );
        assert_eq!(a.init_containers_to_start, vec![0]);
        assert!(a.containers_to_start.is_empty() && a.containers_to_kill.is_empty());
        // A sidecar removed from the runtime after initialization comes back; the regular init
        // container does not run again.
        let a = actions(&p, vec![ctr(&p, "a", Running, 0)], &none);
        assert_eq!(a.init_containers_to_start, vec![0]);
    }

    #[test]
    fn sidecar_startup_probe_gates_the_next_init_container() {
        let p = with_startup_probe(sidecar_pod("Always", &["side", "init"], &["a"]), "side");
        let running = || vec![ctr(&p, "side", Running, 0)];
        // No startup result yet: wait.
        let a = actions(&p, running(), &ProbeResults::new());
        assert_eq!(
            a,
            PodActions {
                sandbox_id: "sb0".into(),
                ..Default::default()
            }
        );
        // Started: the next one goes.
        let mut probes = ProbeResults::new();
        probes.set("u", "id-side", ProbeKind::Startup, ProbeResult::Success);
        assert_eq!(
            actions(&p, running(), &probes).init_containers_to_start,
            vec![1]
        );
        // Startup failed: the sidecar is killed and started again; the next one waits.
        let mut probes = ProbeResults::new();
        probes.set("u", "id-side", ProbeKind::Startup, ProbeResult::Failure);
        let a = actions(&p, running(), &probes);
        assert_eq!(a.init_containers_to_start, vec![0]);
        assert_eq!(
            a.containers_to_kill,
            vec![ContainerToKill {
                id: "id-side".into(),
                name: "side".into(),
                message: "Init container side failed startup probe".into(),
                grace_override: None,
            }]
        );
    }

    #[test]
    fn sidecar_liveness_failure_restarts_it_only() {
        let p = sidecar_pod("Always", &["side"], &["a"]);
        let mut probes = ProbeResults::new();
        probes.set("u", "id-side", ProbeKind::Liveness, ProbeResult::Failure);
        let a = actions(
            &p,
            vec![ctr(&p, "a", Running, 0), ctr(&p, "side", Running, 0)],
            &probes,
        );
        assert_eq!(a.init_containers_to_start, vec![0]);
        assert!(a.containers_to_start.is_empty());
        assert_eq!(a.containers_to_kill.len(), 1);
        assert_eq!(
            a.containers_to_kill[0].message,
            "Init container side failed liveness probe"
        );
    }

    #[test]
    fn sidecars_do_not_keep_a_finished_pod_alive() {
        for policy in ["Never", "OnFailure"] {
            let p = sidecar_pod(policy, &["side"], &["a"]);
            let a = actions(
                &p,
                vec![ctr(&p, "a", Exited, 0), ctr(&p, "side", Running, 0)],
                &ProbeResults::new(),
            );
            assert!(a.kill_pod, "{policy}");
            assert!(a.init_containers_to_start.is_empty(), "{policy}");
            assert!(a.containers_to_start.is_empty(), "{policy}");
        }
        // OnFailure with every regular container succeeded: a dead sandbox is not recreated
        // for the sidecar's sake.
        let p = sidecar_pod("OnFailure", &["side"], &["a"]);
        let status = PodRuntimeStatus {
            sandboxes: vec![sandbox(false, 0)],
            containers: vec![ctr(&p, "a", Exited, 0), ctr(&p, "side", Exited, 137)],
        };
        let a = compute_pod_actions(&p, &status, &ProbeResults::new());
        assert!(!a.create_sandbox);
    }

    #[test]
    fn ephemeral_containers_start_once_and_never_restart() {
        let mut p = sidecar_pod("Always", &["init"], &["a"]);
        p.spec.as_mut().unwrap().ephemeral_containers =
            Some(vec![k8s_openapi::api::core::v1::EphemeralContainer {
                name: "debug".into(),
                image: Some("img:1".into()),
                ..Default::default()
            }]);
        let eph = |name: &str, state, exit| ContainerStatus {
            id: format!("id-{name}"),
            name: name.into(),
            state,
            exit_code: exit,
            ..Default::default()
        };
        let none = ProbeResults::new();
        // Not started yet: started, even while initialization is still going on.
        let a = actions(&p, vec![ctr(&p, "init", Running, 0)], &none);
        assert_eq!(a.ephemeral_containers_to_start, vec![0]);
        assert!(a.containers_to_start.is_empty());
        // Exited (even failed): never again; it does not keep a finished pod alive either.
        let a = actions(
            &p,
            vec![
                eph("debug", Exited, 1),
                ctr(&p, "a", Running, 0),
                ctr(&p, "init", Exited, 0),
            ],
            &none,
        );
        assert!(a.ephemeral_containers_to_start.is_empty());
        assert!(a.containers_to_start.is_empty() && !a.kill_pod);
        // A new sandbox does not bring ephemeral containers back.
        let a = compute_pod_actions(&p, &PodRuntimeStatus::default(), &none);
        assert!(a.create_sandbox && a.ephemeral_containers_to_start.is_empty());
    }

    #[test]
    fn probe_failures_kill_the_container() {
        let running = |p: &Pod| PodRuntimeStatus {
            sandboxes: vec![sandbox(true, 0)],
            containers: vec![ctr(p, "a", Running, 0), ctr(p, "b", Running, 0)],
        };
        let kill = |msg: &str| ContainerToKill {
            id: "id-a".into(),
            name: "a".into(),
            message: msg.into(),
            grace_override: None,
        };
        let cases = [
            (
                "Always",
                ProbeKind::Liveness,
                vec![0],
                "Container a failed liveness probe, will be restarted",
            ),
            (
                "OnFailure",
                ProbeKind::Startup,
                vec![0],
                "Container a failed startup probe, will be restarted",
            ),
            (
                "Never",
                ProbeKind::Liveness,
                vec![],
                "Container a failed liveness probe",
            ),
        ];
        for (policy, kind, start, msg) in cases {
            let p = pod(policy, &[], &["a", "b"]);
            let mut probes = ProbeResults::new();
            probes.set("u", "id-a", kind, crate::prober::ProbeResult::Failure);
            // Other kinds and other containers' results change nothing.
            probes.set(
                "u",
                "id-b",
                ProbeKind::Readiness,
                crate::prober::ProbeResult::Failure,
            );
            let a = compute_pod_actions(&p, &running(&p), &probes);
            assert_eq!(
                a,
                PodActions {
                    sandbox_id: "sb0".into(),
                    containers_to_start: start,
                    containers_to_kill: vec![kill(msg)],
                    ..Default::default()
                },
                "{policy} {kind:?}"
            );
        }
        // A readiness failure never kills.
        let p = pod("Always", &[], &["a", "b"]);
        let mut probes = ProbeResults::new();
        probes.set(
            "u",
            "id-a",
            ProbeKind::Readiness,
            crate::prober::ProbeResult::Failure,
        );
        assert_eq!(
            compute_pod_actions(&p, &running(&p), &probes),
            PodActions {
                sandbox_id: "sb0".into(),
                ..Default::default()
            }
        );
    }
}
