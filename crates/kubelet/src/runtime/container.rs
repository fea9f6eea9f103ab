//! ContainerConfig from a container spec (upstream `kuberuntime_container.go`
//! `generateContainerConfig` and `_linux.go`).

use k8s_openapi::api::core::v1::{Container, Pod};
use rkubelet_cri::api;

use super::labels;
use crate::resources;

/// Why a config could not be built; surfaces as `CreateContainerConfigError`.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Environment from `env` (plain values and the pod fields a node knows without the API server).
/// `$(VAR)` expansion and API-backed sources come with the lifecycle and volumes work.
fn envs(pod: &Pod, c: &Container, pod_ip: &str) -> Result<Vec<api::KeyValue>, ConfigError> {
    let mut out = Vec::new();
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (_, Some(from)) => {
                let Some(f) = from.field_ref.as_ref() else {
                    return Err(ConfigError(format!(
                        "env {:?}: only fieldRef is supported as valueFrom on this node yet",
                        e.name
                    )));
                };
                match f.field_path.as_str() {
                    "metadata.name" => pod.metadata.name.clone().unwrap_or_default(),
                    "metadata.namespace" => pod.metadata.namespace.clone().unwrap_or_default(),
                    "metadata.uid" => pod.metadata.uid.clone().unwrap_or_default(),
                    "spec.nodeName" => pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.clone())
                        .unwrap_or_default(),
                    "spec.serviceAccountName" => pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.service_account_name.clone())
                        .unwrap_or_default(),
                    "status.podIP" => pod_ip.to_string(),
                    other => {
                        return Err(ConfigError(format!(
                            "env {:?}: unsupported fieldRef {other:?}",
                            e.name
                        )))
                    }
                }
            }
            (Some(v), None) => v.clone(),
            (None, None) => String::new(),
        };
        out.push(api::KeyValue {
            key: e.name.clone(),
            value,
        });
    }
    Ok(out)
}

/// Container log path relative to the sandbox log directory: `<name>/<restartCount>.log`.
pub fn log_path(c: &Container, restart_count: i32) -> String {
    format!("{}/{}.log", c.name, restart_count)
}

pub fn container_config(
    pod: &Pod,
    c: &Container,
    image_ref: &str,
    restart_count: i32,
    is_init: bool,
    pod_ip: &str,
) -> Result<api::ContainerConfig, ConfigError> {
    let res = resources::container_resources(c);
    let sc = c.security_context.as_ref();
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let run_as_user = sc
        .and_then(|s| s.run_as_user)
        .or_else(|| pod_sc.and_then(|s| s.run_as_user));
    let run_as_group = sc
        .and_then(|s| s.run_as_group)
        .or_else(|| pod_sc.and_then(|s| s.run_as_group));
    Ok(api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: c.name.clone(),
            attempt: restart_count as u32,
        }),
        image: Some(api::ImageSpec {
            image: image_ref.to_string(),
            user_specified_image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: c.command.clone().unwrap_or_default(),
        args: c.args.clone().unwrap_or_default(),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: envs(pod, c, pod_ip)?,
        labels: labels::container_labels(pod, c),
        annotations: labels::container_annotations(pod, c, restart_count, is_init),
        log_path: log_path(c, restart_count),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(api::LinuxContainerConfig {
            resources: Some(api::LinuxContainerResources {
                cpu_period: res.cpu_period,
                cpu_quota: res.cpu_quota,
                cpu_shares: res.cpu_shares,
                memory_limit_in_bytes: res.memory_limit_bytes,
                ..Default::default()
            }),
            security_context: Some(api::LinuxContainerSecurityContext {
                namespace_options: Some(super::sandbox::pod_namespace_options(pod)),
                privileged: sc.and_then(|s| s.privileged).unwrap_or(false),
                readonly_rootfs: sc
                    .and_then(|s| s.read_only_root_filesystem)
                    .unwrap_or(false),
                run_as_user: run_as_user.map(|value| api::Int64Value { value }),
                run_as_group: run_as_group.map(|value| api::Int64Value { value }),
                ..Default::default()
            }),
        }),
        ..Default::default()
    })
}

/// The bind mount of an instance's termination-log file at `terminationMessagePath` (the
/// termination part of upstream `makeMounts`). Kept apart from [`container_config`], which stays
/// pure: the runtime manager creates the file and adds this mount just before CreateContainer.
pub fn termination_message_mount(c: &Container, host_path: &std::path::Path) -> Option<api::Mount> {
    let path = c
        .termination_message_path
        .as_deref()
        .filter(|p| !p.is_empty())?;
    Some(api::Mount {
        container_path: path.to_string(),
        host_path: host_path.to_string_lossy().into_owned(),
        ..Default::default()
    })
}
