//! Containers found `Created` but never started: an interrupted start (the kubelet was killed, or
//! lost the runtime, between CreateContainer and StartContainer). Beyond upstream, which replaces
//! such a container and counts a restart, the newest one is started as it is when nothing about it
//! is stale; every other one is removed so nothing leaks.

use k8s_openapi::api::core::v1::{Container, Pod};

use super::PodActions;
use crate::container::{ContainerState, ContainerStatus, PodRuntimeStatus};
use crate::podutil;
use crate::runtime::labels;

/// What happens to each `Created` (never started) container instance: the newest instance of a
/// container about to be started is started as it is when its spec hash still matches and it was
/// created in the current sandbox (not before it: an older attempt's container has the old
/// sandbox's namespaces); every other `Created` instance is removed.
/// An instance that never ran because its StartContainer was cancelled: containerd records such
/// a start as exited with reason `StartError` and the cancellation in the message, either the
/// cancelled context itself or, when the cancel reached containerd while it was starting the
/// shim, the shim start command it kills with it (`failed to start shim: start failed: :
/// signal: killed`, seen in CI). A start that failed for a reason of its own (a missing binary)
/// keeps counting, as upstream.
fn start_cancelled(s: &ContainerStatus) -> bool {
    const CANCELLED: [&str; 2] = [
        "context canceled",
        "failed to start shim: start failed: : signal: killed",
    ];
    s.state == ContainerState::Exited
        && s.started_at == 0
        && s.reason == "StartError"
        && CANCELLED.iter().any(|m| s.message.contains(m))
}

pub(super) fn dispositions(pod: &Pod, status: &PodRuntimeStatus, a: &mut PodActions) {
    let inits = podutil::init_containers(pod);
    let containers = podutil::containers(pod);
    let to_start: Vec<&Container> = a
        .init_containers_to_start
        .iter()
        .filter_map(|&i| inits.get(i))
        .chain(
            a.containers_to_start
                .iter()
                .filter_map(|&i| containers.get(i)),
        )
        .collect();
    let current = status.sandboxes.first();
    for (n, s) in status.containers.iter().enumerate() {
        let newest = status.containers[..n].iter().all(|o| o.name != s.name);
        let spec = to_start.iter().find(|c| c.name == s.name);
        if newest && spec.is_some() && start_cancelled(s) {
            a.replace_uncounted.insert(s.name.clone());
            a.interrupted_to_remove.push(s.id.clone());
            continue;
        }
        if s.state != ContainerState::Created {
            continue;
        }
        let in_current_sandbox = !a.create_sandbox
            && !a.kill_pod
            && current.is_some_and(|sb| s.created_at >= sb.created_at);
        match spec {
            Some(c) if newest && in_current_sandbox && s.hash == labels::container_hash(c) => {
                a.start_existing.insert(s.name.clone(), s.id.clone());
            }
            // Not to be started now (e.g. initialization not reached it yet) and still the
            // one to start later: left alone.
            None if newest && in_current_sandbox => {}
            _ => a.interrupted_to_remove.push(s.id.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{Container, PodSpec};

    use super::super::compute_pod_actions;
    use super::*;
    use crate::container::SandboxStatus;
    use crate::prober::ProbeResults;
    use ContainerState::*;

    fn pod(inits: &[&str], containers: &[&str]) -> Pod {
        let mk = |n: &&str| Container {
            name: n.to_string(),
            image: Some("img:1".into()),
            ..Default::default()
        };
        let mut p = Pod::default();
        p.metadata.name = Some("p".into());
        p.metadata.uid = Some("u".into());
        p.spec = Some(PodSpec {
            init_containers: (!inits.is_empty()).then(|| inits.iter().map(mk).collect()),
            containers: containers.iter().map(mk).collect(),
            ..Default::default()
        });
        p
    }

    /// The current sandbox, created at t=100.
    fn sandbox(ready: bool) -> SandboxStatus {
        SandboxStatus {
            id: "sb1".into(),
            attempt: 1,
            ready,
            ip: "10.0.0.2".into(),
            created_at: 100,
            ..Default::default()
        }
    }

    /// An instance of `name` created at `at`, with the spec's hash unless `stale`.
    fn ctr(
        p: &Pod,
        id: &str,
        name: &str,
        state: ContainerState,
        at: i64,
        stale: bool,
    ) -> ContainerStatus {
        let spec = podutil::containers(p)
            .iter()
            .chain(podutil::init_containers(p))
            .find(|c| c.name == name)
            .cloned()
            .unwrap_or_default();
        ContainerStatus {
            id: id.into(),
            name: name.into(),
            state,
            created_at: at,
            hash: if stale {
                "old".into()
            } else {
                labels::container_hash(&spec)
            },
            restart_count: 3,
            ..Default::default()
        }
    }

    fn existing(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(n, id)| (n.to_string(), id.to_string()))
            .collect()
    }

    /// (case, pod, sandbox ready, containers newest first, want start_existing, want removed,
    /// want containers_to_start, want init_containers_to_start)
    #[test]
    fn created_containers_are_started_or_removed() {
        type Case = (
            &'static str,
            Pod,
            bool,
            fn(&Pod) -> Vec<ContainerStatus>,
            &'static [(&'static str, &'static str)],
            &'static [&'static str],
            &'static [usize],
            &'static [usize],
        );
        let cases: Vec<Case> = vec![
            (
                "interrupted start in the current sandbox: start it as it is",
                pod(&[], &["a", "b"]),
                true,
                |p| {
                    vec![
                        ctr(p, "c1", "a", Created, 150, false),
                        ctr(p, "c2", "b", Running, 150, false),
                    ]
                },
                &[("a", "c1")],
                &[],
                &[0],
                &[],
            ),
            (
                "spec changed since it was created: replace it, remove the old one",
                pod(&[], &["a"]),
                true,
                |p| vec![ctr(p, "c1", "a", Created, 150, true)],
                &[],
                &["c1"],
                &[0],
                &[],
            ),
            (
                "created before the current sandbox (older attempt): replace and remove",
                pod(&[], &["a"]),
                true,
                |p| vec![ctr(p, "c1", "a", Created, 50, false)],
                &[],
                &["c1"],
                &[0],
                &[],
            ),
            (
                "sandbox dead, a new one comes: every Created instance is removed",
                pod(&[], &["a"]),
                false,
                |p| vec![ctr(p, "c1", "a", Created, 150, false)],
                &[],
                &["c1"],
                &[0],
                &[],
            ),
            (
                "an older Created instance behind a running one is removed",
                pod(&[], &["a"]),
                true,
                |p| {
                    vec![
                        ctr(p, "c2", "a", Running, 160, false),
                        ctr(p, "c1", "a", Created, 150, false),
                    ]
                },
                &[],
                &["c1"],
                &[],
                &[],
            ),
            (
                "interrupted init container start: started as it is",
                pod(&["i"], &["a"]),
                true,
                |p| vec![ctr(p, "c1", "i", Created, 150, false)],
                &[("i", "c1")],
                &[],
                &[],
                &[0],
            ),
            (
                "start cancelled by a kubelet crash: replaced, not counted, removed",
                pod(&[], &["a"]),
                true,
                |p| {
                    let mut c = ctr(p, "c1", "a", Exited, 150, false);
                    c.reason = "StartError".into();
                    c.message = "failed to start containerd task: context canceled".into();
                    vec![c]
                },
                &[],
                &["c1"],
                &[0],
                &[],
            ),
            (
                "start cancelled while containerd started the shim: replaced, not counted, removed",
                pod(&[], &["a"]),
                true,
                |p| {
                    let mut c = ctr(p, "c1", "a", Exited, 150, false);
                    c.reason = "StartError".into();
                    c.message = "failed to create containerd task: failed to start shim: start failed: : signal: killed: unknown".into();
                    vec![c]
                },
                &[],
                &["c1"],
                &[0],
                &[],
            ),
            (
                "a start that failed on its own still counts",
                pod(&[], &["a"]),
                true,
                |p| {
                    let mut c = ctr(p, "c1", "a", Exited, 150, false);
                    c.reason = "StartError".into();
                    c.message = "exec: \"nope\": executable file not found in $PATH".into();
                    vec![c]
                },
                &[],
                &[],
                &[0],
                &[],
            ),
            (
                "nothing Created: no change to the usual decision",
                pod(&[], &["a"]),
                true,
                |p| vec![ctr(p, "c1", "a", Exited, 150, false)],
                &[],
                &[],
                &[0],
                &[],
            ),
        ];
        for (name, p, ready, containers, want_existing, want_removed, want_start, want_init) in
            cases
        {
            let status = PodRuntimeStatus {
                sandboxes: vec![sandbox(ready)],
                containers: containers(&p),
            };
            let a = compute_pod_actions(&p, &status, &ProbeResults::default());
            assert_eq!(a.start_existing, existing(want_existing), "{name}");
            assert_eq!(a.interrupted_to_remove, want_removed, "{name}");
            let cancelled = name.starts_with("start cancelled");
            assert_eq!(
                a.replace_uncounted.contains("a"),
                cancelled,
                "{name}: replace_uncounted"
            );
            assert_eq!(a.containers_to_start, want_start, "{name}");
            assert_eq!(a.init_containers_to_start, want_init, "{name}");
        }
    }
}
