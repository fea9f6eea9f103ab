//! Small accessors over `v1.Pod` that every manager needs (upstream `kubecontainer.GetPodFullName`,
//! `format.Pod`, `kubetypes.IsStaticPod`, API defaulting).

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod, PodSecurityContext};

use crate::types::RestartPolicy;
// Pod identity lives in `types::pod`; every manager calls it through here.
pub use crate::types::pod::{describe, full_name, is_critical, is_static, name, namespace, uid};

pub fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or(RestartPolicy::default().as_str())
}

pub fn containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[])
}

pub fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[])
}

/// Which list of the spec a container comes from: it decides events' field paths, the container
/// type annotation, and the rules the kubelet applies (init order, never restarting ephemeral
/// containers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerKind {
    Regular,
    Init,
    Ephemeral,
}

impl ContainerKind {
    /// Upstream's `fieldPath` of a container in events: `spec.containers{name}`.
    pub fn field_path(self, name: &str) -> String {
        let list = match self {
            ContainerKind::Regular => "containers",
            ContainerKind::Init => "initContainers",
            ContainerKind::Ephemeral => "ephemeralContainers",
        };
        format!("spec.{list}{{{name}}}")
    }

    /// The `io.kubernetes.container.type` annotation's value.
    pub fn label(self) -> &'static str {
        match self {
            ContainerKind::Regular => "container",
            ContainerKind::Init => "init",
            ContainerKind::Ephemeral => "ephemeral",
        }
    }
}

/// The kind of the spec container named `name` (names are unique across the three lists).
pub fn kind_of(pod: &Pod, name: &str) -> Option<ContainerKind> {
    if containers(pod).iter().any(|c| c.name == name) {
        Some(ContainerKind::Regular)
    } else if init_containers(pod).iter().any(|c| c.name == name) {
        Some(ContainerKind::Init)
    } else if ephemeral_specs(pod).iter().any(|c| c.name == name) {
        Some(ContainerKind::Ephemeral)
    } else {
        None
    }
}

pub fn ephemeral_specs(pod: &Pod) -> &[EphemeralContainer] {
    pod.spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_deref())
        .unwrap_or(&[])
}

/// An ephemeral container as the `Container` it is run as (upstream converts
/// `EphemeralContainerCommon` the same way); `targetContainerName` is read from the spec apart.
pub fn ephemeral_as_container(e: &EphemeralContainer) -> Container {
    Container {
        args: e.args.clone(),
        command: e.command.clone(),
        env: e.env.clone(),
        env_from: e.env_from.clone(),
        image: e.image.clone(),
        image_pull_policy: e.image_pull_policy.clone(),
        lifecycle: e.lifecycle.clone(),
        liveness_probe: e.liveness_probe.clone(),
        name: e.name.clone(),
        ports: e.ports.clone(),
        readiness_probe: e.readiness_probe.clone(),
        resize_policy: e.resize_policy.clone(),
        resources: e.resources.clone(),
        restart_policy: e.restart_policy.clone(),
        security_context: e.security_context.clone(),
        startup_probe: e.startup_probe.clone(),
        stdin: e.stdin,
        stdin_once: e.stdin_once,
        termination_message_path: e.termination_message_path.clone(),
        termination_message_policy: e.termination_message_policy.clone(),
        tty: e.tty,
        volume_devices: e.volume_devices.clone(),
        volume_mounts: e.volume_mounts.clone(),
        working_dir: e.working_dir.clone(),
        ..Default::default()
    }
}

pub fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// The kubelet's final delete of a pod object: grace 0, and only while the object is still the
/// pod with this UID (upstream's status manager and `DeleteMirrorPod` send the same).
pub fn delete_now(uid: &str) -> kube::api::DeleteParams {
    kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    }
}

/// The grace period a deletion uses when nothing overrides it.
pub fn grace_period_seconds(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30)
}

/// Upstream's image pull policy default: Always for `:latest` or no tag (and no digest), else
/// IfNotPresent.
pub fn default_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// The defaults the API server would have applied (`SetDefaults_Pod`, `SetDefaults_Container`), so
/// a static pod reads the same as an API pod and container hashes are stable.
pub fn apply_api_defaults(pod: &mut Pod) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    spec.restart_policy
        .get_or_insert_with(|| RestartPolicy::default().as_str().into());
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.scheduler_name
        .get_or_insert_with(|| "default-scheduler".into());
    spec.security_context
        .get_or_insert_with(PodSecurityContext::default);
    spec.enable_service_links.get_or_insert(true);
    let all = spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut());
    for c in all {
        let image = c.image.clone().unwrap_or_default();
        c.image_pull_policy
            .get_or_insert_with(|| default_pull_policy(&image).into());
        c.termination_message_path
            .get_or_insert_with(|| "/dev/termination-log".into());
        c.termination_message_policy
            .get_or_insert_with(|| "File".into());
        for p in c.ports.iter_mut().flatten() {
            p.protocol.get_or_insert_with(|| "TCP".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_rule() {
        assert_eq!(default_pull_policy("busybox"), "Always");
        assert_eq!(default_pull_policy("busybox:latest"), "Always");
        assert_eq!(default_pull_policy("localhost:5000/busybox"), "Always");
        assert_eq!(
            default_pull_policy("localhost:5000/busybox:1.2"),
            "IfNotPresent"
        );
        assert_eq!(default_pull_policy("busybox@sha256:abc"), "IfNotPresent");
    }
}
