//! `computePodActions` (upstream `kuberuntime_manager.go`): the pure decision of what a sync must do
//! to move the runtime towards the pod spec. No I/O here, so every rule has a table test.

use k8s_openapi::api::core::v1::{Container, Pod};

use super::{labels, ContainerState, ContainerStatus, PodRuntimeStatus};
use crate::podutil;
use crate::prober::{probe_grace_override, ProbeKind, ProbeResults};

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
    /// Index into `spec.initContainers` of the init container to start next.
    pub next_init_container: Option<usize>,
    /// Indexes into `spec.containers`.
    pub containers_to_start: Vec<usize>,
    pub containers_to_kill: Vec<ContainerToKill>,
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

/// Upstream `findNextInitContainerToRun`: (last failed init status, next to run, done).
fn next_init_container<'a>(
    pod: &Pod,
    status: &'a PodRuntimeStatus,
) -> (Option<&'a ContainerStatus>, Option<usize>, bool) {
    let inits = podutil::init_containers(pod);
    if inits.is_empty() {
        return (None, None, true);
    }
    // A running app container means initialization finished at some point.
    if podutil::containers(pod).iter().any(|c| {
        status
            .find(&c.name)
            .is_some_and(|s| s.state == ContainerState::Running)
    }) {
        return (None, None, true);
    }
    for (i, c) in inits.iter().enumerate().rev() {
        if let Some(s) = status.find(&c.name) {
            if is_init_failed(s) {
                return (Some(s), Some(i), false);
            }
        }
    }
    for (i, c) in inits.iter().enumerate().rev() {
        let Some(s) = status.find(&c.name) else {
            continue;
        };
        match s.state {
            ContainerState::Running => return (None, None, false),
            ContainerState::Exited => {
                if i == inits.len() - 1 {
                    return (None, None, true);
                }
                return (None, Some(i + 1), false);
            }
            _ => {}
        }
    }
    (None, Some(0), false)
}

/// Decides what the sync must do. `probes` holds the liveness and startup results that make a
/// running container be killed (and restarted, unless the pod never restarts).
pub fn compute_pod_actions(
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
        if inits.is_empty() && to_start.is_empty() {
            a.create_sandbox = false;
            return a;
        }
        if !inits.is_empty() {
            a.next_init_container = Some(0);
            return a;
        }
        a.containers_to_start = to_start;
        return a;
    }

    let (init_last, next, done) = next_init_container(pod, status);
    if !done {
        if let Some(next) = next {
            let failed = init_last.is_some_and(is_init_failed);
            if failed && !should_restart_on_failure(pod) {
                a.kill_pod = true;
            } else {
                if let Some(s) = init_last.filter(|s| s.state == ContainerState::Unknown) {
                    a.containers_to_kill.push(ContainerToKill {
                        id: s.id.clone(),
                        name: s.name.clone(),
                        message:
                            "Init container is in unknown state, try killing it before restart"
                                .into(),
                        grace_override: None,
                    });
                }
                a.next_init_container = Some(next);
            }
        }
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
        a.kill_pod = true;
    }
    a
}

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
                    next_init_container: Some(0),
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
                    next_init_container: Some(1),
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
                    next_init_container: Some(0),
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
