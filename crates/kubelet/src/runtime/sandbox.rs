//! PodSandboxConfig from a pod (upstream `kuberuntime_sandbox.go` `generatePodSandboxConfig`).

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::api;

use super::labels;
use crate::dns::{self, DnsSettings};
use crate::podutil;

/// `<podLogsDir>/<ns>_<name>_<uid>`, upstream `BuildPodLogsDirectory`.
pub fn pod_logs_dir(root: &Path, pod: &Pod) -> PathBuf {
    root.join(format!(
        "{}_{}_{}",
        podutil::namespace(pod),
        podutil::name(pod),
        podutil::uid(pod)
    ))
}

fn namespace_options(pod: &Pod) -> api::NamespaceOption {
    let spec = pod.spec.as_ref();
    let node = api::NamespaceMode::Node as i32;
    api::NamespaceOption {
        network: if podutil::host_network(pod) {
            node
        } else {
            api::NamespaceMode::Pod as i32
        },
        pid: if spec.and_then(|s| s.host_pid).unwrap_or(false) {
            node
        } else if spec
            .and_then(|s| s.share_process_namespace)
            .unwrap_or(false)
        {
            api::NamespaceMode::Pod as i32
        } else {
            api::NamespaceMode::Container as i32
        },
        ipc: if spec.and_then(|s| s.host_ipc).unwrap_or(false) {
            node
        } else {
            api::NamespaceMode::Pod as i32
        },
        ..Default::default()
    }
}

pub(crate) fn pod_namespace_options(pod: &Pod) -> api::NamespaceOption {
    namespace_options(pod)
}

/// Hostname as upstream `GeneratePodHostNameAndDomain`: spec.hostname or the pod name, cut to 63.
fn hostname(pod: &Pod) -> String {
    let h = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| podutil::name(pod).to_string());
    let mut h: String = h.chars().take(63).collect();
    while h.ends_with(['-', '.']) {
        h.pop();
    }
    h
}

pub fn sandbox_config(
    pod: &Pod,
    attempt: u32,
    logs_root: &Path,
    dns: &DnsSettings,
) -> api::PodSandboxConfig {
    let host_network = podutil::host_network(pod);
    let port_mappings = podutil::containers(pod)
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.unwrap_or(0) > 0)
        .map(|p| api::PortMapping {
            protocol: match p.protocol.as_deref() {
                Some("UDP") => api::Protocol::Udp as i32,
                Some("SCTP") => api::Protocol::Sctp as i32,
                _ => api::Protocol::Tcp as i32,
            },
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect();
    let privileged = podutil::containers(pod)
        .iter()
        .chain(podutil::init_containers(pod))
        .any(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        });
    let sysctls = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.sysctls.as_ref())
        .map(|v| {
            v.iter()
                .map(|s| (s.name.clone(), s.value.clone()))
                .collect()
        })
        .unwrap_or_default();
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: podutil::name(pod).into(),
            uid: podutil::uid(pod).into(),
            namespace: podutil::namespace(pod).into(),
            attempt,
        }),
        // With the host network the sandbox keeps the node's hostname, as upstream.
        hostname: if host_network {
            String::new()
        } else {
            hostname(pod)
        },
        log_directory: pod_logs_dir(logs_root, pod).to_string_lossy().into_owned(),
        dns_config: Some(dns::pod_dns_config(pod, dns)),
        port_mappings,
        labels: labels::sandbox_labels(pod),
        annotations: labels::sandbox_annotations(pod),
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: String::new(),
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                privileged,
                ..Default::default()
            }),
            sysctls,
            ..Default::default()
        }),
        windows: None,
    }
}
