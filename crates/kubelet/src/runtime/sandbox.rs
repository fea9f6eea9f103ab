//! PodSandboxConfig from a pod (upstream `kuberuntime_sandbox.go` `generatePodSandboxConfig`).

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::api;

use super::labels;
use crate::dns::{self, DnsSettings};
use crate::hosts;
use crate::podutil;
use crate::sysctl;

/// `<podLogsDir>/<ns>_<name>_<uid>`, upstream `BuildPodLogsDirectory`.
pub fn pod_logs_dir(root: &Path, pod: &Pod) -> PathBuf {
    logs_dir_of(
        root,
        podutil::namespace(pod),
        podutil::name(pod),
        podutil::uid(pod),
    )
}

/// `<podLogsDir>/<namespace>_<name>_<uid>`, upstream's layout, from the pod's identity alone (a
/// pod only the runtime knows has no spec).
pub fn logs_dir_of(root: &Path, namespace: &str, name: &str, uid: &str) -> PathBuf {
    root.join(format!("{namespace}_{name}_{uid}"))
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

/// The sandbox's hostname (upstream `GeneratePodHostNameAndDomain` + `GetNodenameForKernel`): the
/// pod's hostname, or its FQDN with `setHostnameAsFQDN`, which must fit the kernel's 64 bytes.
fn kernel_hostname(pod: &Pod, cluster_domain: &str) -> Result<String, String> {
    let (hostname, domain) = hosts::hostname_and_domain(pod, cluster_domain);
    let as_fqdn = pod
        .spec
        .as_ref()
        .and_then(|s| s.set_hostname_as_fqdn)
        .unwrap_or(false);
    if domain.is_empty() || !as_fqdn {
        return Ok(hostname);
    }
    let fqdn = format!("{hostname}.{domain}");
    if fqdn.len() > 64 {
        return Err(format!(
            "failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long (64 characters is the max, {} characters requested)",
            fqdn.len()
        ));
    }
    Ok(fqdn)
}

fn protocol(p: Option<&str>) -> i32 {
    match p {
        Some("UDP") => api::Protocol::Udp as i32,
        Some("SCTP") => api::Protocol::Sctp as i32,
        _ => api::Protocol::Tcp as i32,
    }
}

/// Every port of the regular containers (upstream `MakePortMappings` per container): the runtime
/// publishes those with a hostPort. A port name (or, unnamed, family/protocol/hostIP/ports) seen
/// twice in one container counts once.
fn port_mappings(pod: &Pod) -> Vec<api::PortMapping> {
    let mut out = Vec::new();
    for c in podutil::containers(pod) {
        let mut names = std::collections::HashSet::new();
        for p in c.ports.iter().flatten() {
            let host_ip = p.host_ip.clone().unwrap_or_default();
            let host_port = p.host_port.unwrap_or(0);
            let family = match host_ip.parse::<std::net::IpAddr>() {
                _ if host_ip.is_empty() => "any",
                Ok(std::net::IpAddr::V6(_)) => "v6",
                _ => "v4",
            };
            let name = p.name.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| {
                format!(
                    "{family}-{}-{host_ip}:{}:{host_port}",
                    p.protocol.as_deref().unwrap_or(""),
                    p.container_port
                )
            });
            if !names.insert(name) {
                continue;
            }
            out.push(api::PortMapping {
                protocol: protocol(p.protocol.as_deref()),
                container_port: p.container_port,
                host_port,
                host_ip,
            });
        }
    }
    out
}

/// Upstream `generatePodSandboxLinuxConfig`'s security context: the pod's user, group and groups,
/// SELinux options, namespaces, privileged when any container is, and RuntimeDefault seccomp for
/// the pause process whatever the containers get.
fn sandbox_security_context(pod: &Pod) -> api::LinuxSandboxSecurityContext {
    let privileged = podutil::containers(pod)
        .iter()
        .chain(podutil::init_containers(pod))
        .any(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        });
    let mut sc = api::LinuxSandboxSecurityContext {
        namespace_options: Some(namespace_options(pod)),
        privileged,
        seccomp: Some(api::SecurityProfile {
            profile_type: api::security_profile::ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        }),
        ..Default::default()
    };
    if let Some(p) = pod.spec.as_ref().and_then(|s| s.security_context.as_ref()) {
        sc.run_as_user = p.run_as_user.map(|value| api::Int64Value { value });
        sc.run_as_group = p.run_as_group.map(|value| api::Int64Value { value });
        sc.supplemental_groups.extend(p.fs_group);
        sc.supplemental_groups
            .extend(p.supplemental_groups.iter().flatten());
        sc.selinux_options = p.se_linux_options.as_ref().map(|o| api::SeLinuxOption {
            user: o.user.clone().unwrap_or_default(),
            role: o.role.clone().unwrap_or_default(),
            r#type: o.type_.clone().unwrap_or_default(),
            level: o.level.clone().unwrap_or_default(),
        });
    }
    sc
}

/// Upstream `generatePodSandboxConfig`. Fails only for a hostname that cannot be set.
pub fn sandbox_config(
    pod: &Pod,
    attempt: u32,
    logs_root: &Path,
    dns: &DnsSettings,
) -> Result<api::PodSandboxConfig, String> {
    let host_network = podutil::host_network(pod);
    // Slash-separated names are the same sysctls (upstream converts them before the runtime).
    let sysctls = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.sysctls.as_ref())
        .map(|v| {
            v.iter()
                .map(|s| (sysctl::normalize_name(&s.name), s.value.clone()))
                .collect()
        })
        .unwrap_or_default();
    Ok(api::PodSandboxConfig {
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
            kernel_hostname(pod, &dns.cluster_domain)?
        },
        log_directory: pod_logs_dir(logs_root, pod).to_string_lossy().into_owned(),
        dns_config: Some(dns::pod_dns_config(pod, dns)),
        port_mappings: port_mappings(pod),
        labels: labels::sandbox_labels(pod),
        annotations: labels::sandbox_annotations(pod),
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: String::new(),
            security_context: Some(sandbox_security_context(pod)),
            sysctls,
            ..Default::default()
        }),
        windows: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, PodSecurityContext, PodSpec, Sysctl,
    };

    fn port(name: Option<&str>, cp: i32, hp: Option<i32>, proto: &str) -> ContainerPort {
        ContainerPort {
            name: name.map(str::to_string),
            container_port: cp,
            host_port: hp,
            protocol: Some(proto.into()),
            host_ip: None,
        }
    }

    fn pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web".into());
        p.metadata.namespace = Some("ns".into());
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                ports: Some(vec![
                    port(Some("http"), 80, Some(8080), "TCP"),
                    port(None, 53, None, "UDP"),
                    port(Some("http"), 81, None, "TCP"),
                ]),
                ..Default::default()
            }],
            security_context: Some(PodSecurityContext {
                run_as_user: Some(1000),
                fs_group: Some(2000),
                supplemental_groups: Some(vec![3000]),
                sysctls: Some(vec![Sysctl {
                    name: "net/ipv4/tcp_syncookies".into(),
                    value: "1".into(),
                }]),
                ..Default::default()
            }),
            subdomain: Some("sub".into()),
            set_hostname_as_fqdn: Some(true),
            ..Default::default()
        });
        p
    }

    #[test]
    fn ports_security_sysctls_and_fqdn() {
        let dns = DnsSettings {
            cluster_domain: "cluster.local".into(),
            ..Default::default()
        };
        let c = sandbox_config(&pod(), 0, Path::new("/logs"), &dns).unwrap();
        let ports: Vec<_> = c
            .port_mappings
            .iter()
            .map(|p| (p.container_port, p.host_port, p.protocol))
            .collect();
        // Every port is passed, a repeated name only once.
        assert_eq!(
            ports,
            vec![
                (80, 8080, api::Protocol::Tcp as i32),
                (53, 0, api::Protocol::Udp as i32)
            ]
        );
        assert_eq!(c.hostname, "web.sub.ns.svc.cluster.local");
        let linux = c.linux.unwrap();
        assert_eq!(
            linux
                .sysctls
                .get("net.ipv4.tcp_syncookies")
                .map(String::as_str),
            Some("1")
        );
        let sc = linux.security_context.unwrap();
        assert_eq!(sc.run_as_user, Some(api::Int64Value { value: 1000 }));
        assert_eq!(sc.supplemental_groups, vec![2000, 3000]);
        assert_eq!(
            sc.seccomp.unwrap().profile_type,
            api::security_profile::ProfileType::RuntimeDefault as i32
        );
        // An FQDN longer than the kernel's 64 bytes fails the sandbox, as upstream.
        let mut long = pod();
        long.spec.as_mut().unwrap().subdomain = Some("s".repeat(50));
        assert!(sandbox_config(&long, 0, Path::new("/logs"), &dns)
            .unwrap_err()
            .contains("is too long"));
    }
}
