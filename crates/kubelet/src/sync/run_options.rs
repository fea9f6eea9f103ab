//! The I/O half of a container's config (upstream `kubelet_pods.go` `GenerateRunContainerOptions`
//! and `getImageUser`): environment, volume mounts, the managed /etc/hosts and the image's user.
//! Any failure is a `CreateContainerConfigError`, as upstream reports errors from here.

use k8s_openapi::api::core::v1::{Container, Pod};

use super::{pod_dir, Reason, StartError, SyncContext};
use crate::events::EventType;
use crate::hosts;
use crate::objects;
use crate::podutil;
use crate::runtime::container::RunContainerOptions;
use crate::runtime::env::{self, EnvContext};
use crate::runtime::PodRuntimeStatus;
use crate::volumes::{mounts, PodVolumes};

fn config_error(msg: impl Into<String>) -> StartError {
    StartError::new(Reason::CreateContainerConfigError, msg)
}

/// The pod's IPs as upstream's SyncPod sees them: the sandbox's (primary first), or the node's
/// for a host-network pod, whose status shows the node IP.
pub fn pod_ips(pod: &Pod, rt: &PodRuntimeStatus, sandbox_ip: &str, node_ip: &str) -> Vec<String> {
    if !sandbox_ip.is_empty() {
        let mut ips = vec![sandbox_ip.to_string()];
        if let Some(sb) = rt.sandboxes.first().filter(|s| s.ip == sandbox_ip) {
            ips.extend(sb.additional_ips.iter().cloned());
        }
        return ips;
    }
    if podutil::host_network(pod) && !node_ip.is_empty() {
        return vec![node_ip.to_string()];
    }
    Vec::new()
}

/// Upstream `GenerateRunContainerOptions` (env and mounts) plus `getImageUser`.
pub async fn generate(
    ctx: &SyncContext,
    pod: &Pod,
    c: &Container,
    pod_ips: &[String],
    image_ref: &str,
    volumes: &PodVolumes,
) -> Result<RunContainerOptions, StartError> {
    let host_ips: Vec<String> = (!ctx.node_ip.is_empty())
        .then(|| ctx.node_ip.clone())
        .into_iter()
        .collect();
    // One GET per referenced object and container start (see `objects` on the deviation).
    let objects = ctx.objects.fetch(pod, objects::env_refs(c)).await;
    // Upstream defaults `enableServiceLinks` to true in the API server; a pod object read from a
    // file may lack it.
    let links = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true);
    let services = ctx
        .services
        .env_var_map(podutil::namespace(pod), links, podutil::is_static(pod))
        .map_err(|e| config_error(e.to_string()))?;
    let cx = EnvContext {
        pod_ips,
        host_ips: &host_ips,
        allocatable: &ctx.allocatable,
        objects: &objects,
        services: &services,
    };
    let dev = device_options(ctx, pod, c).await?;
    let env = env::make_env(pod, c, &cx).map_err(|e| config_error(e.0))?;
    for message in env.invalid_names {
        ctx.recorder.pod_event(
            pod,
            None,
            EventType::Warning,
            env::INVALID_ENVIRONMENT_VARIABLE_NAMES,
            message,
        );
    }
    // Device plugins' envs first, the container's own after them (the later wins), as
    // upstream appends the environment to the device options.
    let envs: Vec<_> = dev.envs.into_iter().chain(env.vars).collect();
    // Device plugins' mounts, then volume mounts in volumeMounts order, as upstream appends
    // makeMounts' result to the device options.
    let mut mounts: Vec<_> = dev
        .mounts
        .iter()
        .map(|m| rkubelet_cri::api::Mount {
            container_path: m.container_path.clone(),
            host_path: m.host_path.clone(),
            readonly: m.read_only,
            ..Default::default()
        })
        .collect();
    mounts.extend({
        let (c, volumes, envs, dir) = (c.clone(), volumes.clone(), envs.clone(), pod_dir(ctx, pod));
        tokio::task::spawn_blocking(move || mounts::make_mounts(&dir, &c, &volumes, &envs))
            .await
            .map_err(|e| config_error(format!("make mounts: {e}")))?
            .map_err(|e| config_error(e.to_string()))?
    });
    // Upstream mounts the hosts file once the pod has an IP (a host-network pod has the node's),
    // unless the container mounts something of its own there.
    let own_hosts = c
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path == hosts::ETC_HOSTS_PATH);
    if !pod_ips.is_empty() && !own_hosts {
        let dir = pod_dir(ctx, pod);
        let m = hosts::make_hosts_mount(&dir, pod, pod_ips, &ctx.runtime.dns.cluster_domain)
            .await
            .map_err(|e| {
                config_error(format!(
                    "write hosts file {}: {e}",
                    hosts::etc_hosts_path(&dir).display()
                ))
            })?;
        mounts.push(m);
    }
    let image_user = ctx
        .images
        .image_user(image_ref)
        .await
        .map_err(|e| config_error(format!("inspect image {image_ref}: {}", e.message())))?;
    let mut devices = mounts::make_devices(c, volumes).map_err(|e| config_error(e.to_string()))?;
    devices.extend(dev.devices.into_iter().map(|d| rkubelet_cri::api::Device {
        container_path: d.container_path,
        host_path: d.host_path,
        permissions: d.permissions,
    }));
    Ok(RunContainerOptions {
        envs,
        mounts,
        devices,
        image_user,
        seccomp_root: ctx.root_dir.join("seccomp"),
        seccomp_default: ctx.seccomp_default,
        target_container_id: None,
        oom_score_adj: ctx.cm.oom_score_adj(pod, c),
        cfs_quota: ctx.cm.cfs().0,
        cfs_period_us: ctx.cm.cfs().1,
        annotations: dev.annotations,
        cpuset_cpus: cpu_affinity(ctx, pod, c).await?,
    })
}

/// Upstream `internalContainerLifecycle.PreCreateContainer`: the CPU manager's cpuset for the
/// container (nothing without the static policy).
async fn cpu_affinity(ctx: &SyncContext, pod: &Pod, c: &Container) -> Result<String, StartError> {
    let Some(cpu) = ctx.cm.cpu() else {
        return Ok(String::new());
    };
    cpu.affinity(podutil::uid(pod), &c.name)
        .await
        .map(|s| s.to_string())
        .map_err(|e| config_error(e.to_string()))
}

/// Upstream `containerManager.GetResources` → `GetDeviceRunContainerOptions`, for containers
/// that limit an extended resource (nothing to ask for the others).
async fn device_options(
    ctx: &SyncContext,
    pod: &Pod,
    c: &Container,
) -> Result<crate::cm::devices::RunOptions, StartError> {
    let extended = c
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .is_some_and(|l| l.keys().any(|k| crate::resources::is_extended_resource(k)));
    let Some(devices) = ctx.cm.devices().filter(|_| extended) else {
        return Ok(Default::default());
    };
    devices
        .run_options(std::sync::Arc::new(pod.clone()), &c.name)
        .await
        .map_err(|e| config_error(e.to_string()))
}
