//! ContainerConfig from a container spec (upstream `kuberuntime_container.go`
//! `generateContainerConfig` and `_linux.go`).
//!
//! Pure: what needs I/O (environment sources, the hosts file, the image's user) is gathered into
//! [`RunContainerOptions`] first, as upstream's `GenerateRunContainerOptions` does.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Container, Pod};
use rkubelet_cri::api;

use super::env::{self, EnvVar};
use super::labels;
use super::security::{self, ImageUser};
use crate::podutil::ContainerKind;
use crate::resources;
use crate::types::ConfigError;

/// What the kubelet prepared for one container start (upstream `RunContainerOptions` plus the
/// image user `getImageUser` reads).
#[derive(Debug, Clone, PartialEq)]
pub struct RunContainerOptions {
    /// The final environment, in declaration order.
    pub envs: Vec<EnvVar>,
    /// Bind mounts the kubelet provides: the volumeMounts (upstream `makeMounts`), then the
    /// managed /etc/hosts.
    pub mounts: Vec<api::Mount>,
    /// Device nodes: block volumes for the container's volumeDevices (upstream
    /// `makeBlockVolumes`), then those of device plugins' `Allocate` answers (upstream
    /// `opts.Devices`).
    pub devices: Vec<api::Device>,
    /// The user the image runs as, for runAsNonRoot and the default runAsUser.
    pub image_user: ImageUser,
    /// `<root-dir>/seccomp`, the base of Localhost seccomp profiles.
    pub seccomp_root: PathBuf,
    /// `seccompDefault`: RuntimeDefault for containers whose pod and container set no profile.
    pub seccomp_default: bool,
    /// An ephemeral container's `targetContainerName`, resolved to the running container's ID:
    /// it joins that container's PID namespace (upstream `TargetId` with `NamespaceMode_TARGET`).
    pub target_container_id: Option<String>,
    /// The container's OOM score adjustment by its pod's QoS (upstream
    /// `GetContainerOOMScoreAdjust`, from the container manager).
    pub oom_score_adj: i64,
    /// `cpuCFSQuota` and the CFS period in microseconds (upstream `cpuCFSQuota`,
    /// `cpuCFSQuotaPeriod`).
    pub cfs_quota: bool,
    pub cfs_period_us: u64,
    /// Annotations from device plugins (upstream `opts.Annotations`); the kubelet's own
    /// annotations win over them.
    pub annotations: Vec<(String, String)>,
    /// The CPUs the container may run on (upstream `PreCreateContainer` with the CPU manager's
    /// `GetCPUAffinity`: its exclusive CPUs or the shared pool); empty without the static policy.
    pub cpuset_cpus: String,
}

/// Container log path relative to the sandbox log directory: `<name>/<restartCount>.log`.
pub fn log_path(c: &Container, restart_count: i32) -> String {
    format!("{}/{}.log", c.name, restart_count)
}

/// The CRI mounts of the container (upstream `makeMounts`).
fn mounts(_c: &Container, opts: &RunContainerOptions) -> Vec<api::Mount> {
    opts.mounts.clone()
}

/// cpu, memory and OOM score as upstream `generateLinuxContainerResources`.
fn linux_resources(c: &Container, opts: &RunContainerOptions) -> api::LinuxContainerResources {
    let res = resources::container_resources(c, opts.cfs_period_us as i64);
    let (cpu_quota, cpu_period) = if opts.cfs_quota {
        (res.cpu_quota, res.cpu_period)
    } else {
        (0, 0)
    };
    api::LinuxContainerResources {
        cpu_period,
        cpu_quota,
        cpu_shares: res.cpu_shares,
        memory_limit_in_bytes: res.memory_limit_bytes,
        oom_score_adj: opts.oom_score_adj,
        cpuset_cpus: opts.cpuset_cpus.clone(),
        ..Default::default()
    }
}

/// Upstream `generateContainerConfig`. Command and args go to the runtime as the spec has them
/// (after `$(VAR)` expansion): empty ones let the runtime apply the image's ENTRYPOINT and CMD
/// by the Kubernetes rules (command replaces ENTRYPOINT and drops CMD; args alone replace CMD).
pub fn container_config(
    pod: &Pod,
    c: &Container,
    image_ref: &str,
    restart_count: i32,
    kind: ContainerKind,
    opts: &RunContainerOptions,
) -> Result<api::ContainerConfig, ConfigError> {
    security::verify_run_as_non_root(pod, c, &opts.image_user)?;
    let (command, args) = env::expand_command_and_args(c, &opts.envs);
    let mut security_context = security::linux_security_context(
        pod,
        c,
        &opts.image_user,
        &opts.seccomp_root,
        opts.seccomp_default,
    )?;
    if let Some(target) = &opts.target_container_id {
        if let Some(ns) = security_context.namespace_options.as_mut() {
            ns.pid = api::NamespaceMode::Target as i32;
            ns.target_id = target.clone();
        }
    }
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
        command,
        args,
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: opts
            .envs
            .iter()
            .map(|(key, value)| api::KeyValue {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        mounts: mounts(c, opts),
        devices: opts.devices.clone(),
        labels: labels::container_labels(pod, c),
        annotations: {
            let mut a: std::collections::HashMap<String, String> =
                opts.annotations.iter().cloned().collect();
            a.extend(labels::container_annotations(pod, c, restart_count, kind));
            a
        },
        log_path: log_path(c, restart_count),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(api::LinuxContainerConfig {
            resources: Some(linux_resources(c, opts)),
            security_context: Some(security_context),
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
