//! Pod sysctls admission (upstream `pkg/kubelet/sysctl`): the safe set is always allowed,
//! `allowedUnsafeSysctls` adds names or `prefix*` patterns, and a pod asking for anything else is
//! rejected with `SysctlForbidden` before it starts.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kubelet_config::sysctl::{parse_pattern, Namespace};
// Kept at their old paths: admission, the sandbox and kubelet.rs name them through this module.
pub use kubelet_config::sysctl::{normalize_name, AllowlistError};

// Admission names the reason through this module.
pub use crate::types::reasons::SYSCTL_FORBIDDEN as FORBIDDEN_REASON;

/// Upstream's safe sysctls with the kernel version (major, minor) that namespaces them.
const SAFE_SYSCTLS: &[(&str, Option<(u32, u32)>)] = &[
    ("kernel.shm_rmid_forced", None),
    ("net.ipv4.ip_local_port_range", None),
    ("net.ipv4.tcp_syncookies", None),
    ("net.ipv4.ping_group_range", None),
    ("net.ipv4.ip_unprivileged_port_start", None),
    ("net.ipv4.ip_local_reserved_ports", Some((3, 16))),
    ("net.ipv4.tcp_keepalive_time", Some((4, 5))),
    ("net.ipv4.tcp_fin_timeout", Some((4, 6))),
    ("net.ipv4.tcp_keepalive_intvl", Some((4, 5))),
    ("net.ipv4.tcp_keepalive_probes", Some((4, 5))),
    ("net.ipv4.tcp_rmem", None),
    ("net.ipv4.tcp_wmem", None),
];

/// Upstream `patternAllowlist`: exact names and prefixes, each with its namespace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allowlist {
    sysctls: BTreeMap<String, Namespace>,
    prefixes: BTreeMap<String, Namespace>,
}

/// The running kernel's (major, minor), from `uname -r`.
pub fn kernel_version() -> Option<(u32, u32)> {
    let u = nix::sys::utsname::uname().ok()?;
    parse_kernel_version(&u.release().to_string_lossy())
}

fn parse_kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Upstream `SafeSysctlAllowlist`: the safe sysctls the running kernel namespaces.
pub fn safe_sysctls(kernel: Option<(u32, u32)>) -> Vec<String> {
    SAFE_SYSCTLS
        .iter()
        .filter(|(_, min)| min.is_none_or(|m| kernel.is_some_and(|k| k >= m)))
        .map(|(n, _)| n.to_string())
        .collect()
}

impl Allowlist {
    /// Upstream `NewAllowlist(append(SafeSysctlAllowlist(), allowedUnsafeSysctls...))`.
    pub fn new(patterns: &[String]) -> Result<Allowlist, AllowlistError> {
        let mut w = Allowlist::default();
        for s in patterns {
            let p = parse_pattern(s)?;
            let into = if p.prefix {
                &mut w.prefixes
            } else {
                &mut w.sysctls
            };
            into.insert(p.name, p.namespace);
        }
        Ok(w)
    }

    /// The safe set for this kernel plus `unsafe_allowed`.
    pub fn for_node(unsafe_allowed: &[String]) -> Result<Allowlist, AllowlistError> {
        let mut all = safe_sysctls(kernel_version());
        all.extend(unsafe_allowed.iter().cloned());
        Allowlist::new(&all)
    }

    /// Upstream `validateSysctl`.
    fn validate(&self, name: &str, host_net: bool, host_ipc: bool) -> Result<(), String> {
        let name = normalize_name(name);
        let ns = self.sysctls.get(&name).copied().or_else(|| {
            self.prefixes
                .iter()
                .find(|(p, _)| name.starts_with(p.as_str()))
                .map(|(_, ns)| *ns)
        });
        match ns {
            None => Err(format!("{name:?} not allowlisted")),
            Some(ns @ Namespace::Ipc) if host_ipc => Err(format!(
                "{name:?} not allowed with host {} enabled",
                ns.as_str()
            )),
            Some(ns @ Namespace::Net) if host_net => Err(format!(
                "{name:?} not allowed with host {} enabled",
                ns.as_str()
            )),
            Some(_) => Ok(()),
        }
    }

    /// Upstream `patternAllowlist.Admit`: the message of the first forbidden sysctl.
    pub fn admit(&self, pod: &Pod) -> Result<(), String> {
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(());
        };
        let Some(sysctls) = spec
            .security_context
            .as_ref()
            .and_then(|s| s.sysctls.as_ref())
        else {
            return Ok(());
        };
        let host_net = spec.host_network.unwrap_or(false);
        let host_ipc = spec.host_ipc.unwrap_or(false);
        for s in sysctls {
            self.validate(&s.name, host_net, host_ipc)
                .map_err(|e| format!("forbidden sysctl: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSecurityContext, PodSpec, Sysctl};

    fn pod(sysctls: &[&str], host_net: bool) -> Pod {
        Pod {
            spec: Some(PodSpec {
                host_network: Some(host_net),
                security_context: Some(PodSecurityContext {
                    sysctls: Some(
                        sysctls
                            .iter()
                            .map(|n| Sysctl {
                                name: n.to_string(),
                                value: "1".into(),
                            })
                            .collect(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn safe_set_follows_the_kernel() {
        assert_eq!(parse_kernel_version("6.1.0-18-amd64"), Some((6, 1)));
        assert_eq!(parse_kernel_version("4.4.0"), Some((4, 4)));
        let old = safe_sysctls(Some((4, 4)));
        assert!(old.contains(&"net.ipv4.ip_local_reserved_ports".to_string()));
        assert!(!old.contains(&"net.ipv4.tcp_keepalive_time".to_string()));
        assert_eq!(safe_sysctls(Some((6, 1))).len(), SAFE_SYSCTLS.len());
        // Unknown kernel: only the unconditional ones.
        assert!(!safe_sysctls(None).contains(&"net.ipv4.tcp_fin_timeout".to_string()));
    }

    #[test]
    fn classification_and_admission() {
        let w = Allowlist::new(&safe_sysctls(Some((6, 1)))).unwrap();
        assert!(w
            .admit(&pod(
                &["kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range"],
                false
            ))
            .is_ok());
        // Slash-separated names are the same sysctls.
        assert!(w.admit(&pod(&["net/ipv4/tcp_syncookies"], false)).is_ok());
        assert_eq!(
            w.admit(&pod(&["net.core.somaxconn"], false)).unwrap_err(),
            "forbidden sysctl: \"net.core.somaxconn\" not allowlisted"
        );
        assert_eq!(
            w.admit(&pod(&["net.ipv4.tcp_syncookies"], true))
                .unwrap_err(),
            "forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host net enabled"
        );
        let mut safe = safe_sysctls(Some((6, 1)));
        safe.extend(["net.core.somaxconn".to_string(), "kernel.msg*".to_string()]);
        let w = Allowlist::new(&safe).unwrap();
        assert!(w
            .admit(&pod(&["net.core.somaxconn", "kernel.msgmax"], false))
            .is_ok());
        assert!(w.admit(&pod(&[], false)).is_ok());
        assert!(w.admit(&Pod::default()).is_ok());
    }

    #[test]
    fn invalid_unsafe_patterns() {
        assert_eq!(
            Allowlist::new(&["kernel.hostname".into()]),
            Err(AllowlistError::NotNamespaced("kernel.hostname".into()))
        );
        assert_eq!(
            Allowlist::new(&["vm.*".into()]),
            Err(AllowlistError::NotNamespaced("vm.*".into()))
        );
        assert!(matches!(
            Allowlist::new(&["Net.Core".into()]),
            Err(AllowlistError::Invalid(_))
        ));
        assert!(matches!(
            Allowlist::new(&["net..core".into()]),
            Err(AllowlistError::Invalid(_))
        ));
        assert!(Allowlist::new(&["net.*".into(), "net/ipv4/conf/all/rp_filter".into()]).is_ok());
        assert_eq!(
            normalize_name("net/ipv4/conf/eth0.100/rp_filter"),
            "net.ipv4.conf.eth0/100.rp_filter"
        );
    }
}
