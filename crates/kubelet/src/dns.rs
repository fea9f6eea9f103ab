//! Pod DNS (upstream `pkg/kubelet/network/dns`): the host's resolv.conf for dnsPolicy Default (and
//! for ClusterFirst while no clusterDNS is configured, as upstream falls back), the cluster's
//! nameservers for ClusterFirst, and the pod's own dnsConfig merged on top.

use std::net::IpAddr;
use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::api;

use crate::podutil;

/// Upstream limits (`validation.MaxDNSNameservers`, `MaxDNSSearchPaths`,
/// `MaxDNSSearchListChars`, and the 253-byte domain glibc aborts on).
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCHES: usize = 32;
const MAX_SEARCH_LINE_CHARS: usize = 2048;
const MAX_SEARCH_LEN: usize = 253;

/// Host resolver settings plus cluster DNS configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DnsSettings {
    pub host: api::DnsConfig,
    pub cluster_dns: Vec<IpAddr>,
    pub cluster_domain: String,
    /// `resolvConf` set to "": pods with the host's DNS get the node's own resolver
    /// (`127.0.0.1`, search `.`), as upstream.
    pub no_resolv_conf: bool,
}

/// Upstream `appendOptions`: a later option replaces an earlier one with the same name.
fn append_options(options: &mut Vec<String>, new: impl IntoIterator<Item = String>) {
    let key = |o: &str| o.split(':').next().unwrap_or("").to_string();
    for o in new {
        let k = key(&o);
        match options.iter_mut().find(|x| key(x) == k) {
            Some(slot) => *slot = o,
            None => options.push(o),
        }
    }
}

/// Parses resolv.conf text as upstream `parseResolvConf`: `nameserver` lines accumulate, the last
/// `search` line wins (trailing dots dropped, `.` ignored), `options` merge by name; `#` lines
/// and everything else (`domain` included) are ignored.
pub fn parse_resolv_conf(text: &str) -> api::DnsConfig {
    let mut cfg = api::DnsConfig::default();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let mut f = line.split_whitespace();
        match f.next() {
            Some("nameserver") => cfg.servers.extend(f.next().map(str::to_string)),
            Some("search") => {
                cfg.searches = f
                    .filter(|s| *s != ".")
                    .map(|s| s.trim_end_matches('.').to_string())
                    .collect()
            }
            Some("options") => append_options(&mut cfg.options, f.map(str::to_string)),
            _ => {}
        }
    }
    cfg
}

/// Reads the host resolver file; a missing file means no host DNS, with the reason for the log.
pub fn load_host(path: &Path) -> Result<api::DnsConfig, std::io::Error> {
    Ok(parse_resolv_conf(&std::fs::read_to_string(path)?))
}

/// Upstream `omitDuplicates`: first occurrence wins, order kept.
fn omit_duplicates(v: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    v.retain(|x| seen.insert(x.clone()));
}

/// Upstream `formDNSSearchFitsLimits`: at most 32 domains, none over 253 bytes, the line at most
/// 2048 characters (domains cut from the end).
fn fit_searches(mut s: Vec<String>) -> Vec<String> {
    s.truncate(MAX_SEARCHES);
    s.retain(|d| d.len() <= MAX_SEARCH_LEN);
    while !s.is_empty() && s.join(" ").len() > MAX_SEARCH_LINE_CHARS {
        s.pop();
    }
    s
}

/// The DNS config the pod's sandbox gets (upstream `Configurer.GetPodDNS`). ClusterFirst without
/// clusterDNS falls back to the host's resolver as upstream does (which also records a
/// `MissingClusterDNS` event; this kubelet only logs at start-up).
pub fn pod_dns_config(pod: &Pod, s: &DnsSettings) -> api::DnsConfig {
    let spec = pod.spec.as_ref();
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let host_net = podutil::host_network(pod);
    let cluster = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_net,
        "Default" | "None" => false,
        // An invalid policy is treated as ClusterFirst, as upstream's fallback.
        _ => true,
    } && !s.cluster_dns.is_empty();
    let mut cfg = match policy {
        "None" => api::DnsConfig::default(),
        _ if cluster => {
            let mut searches = s.host.searches.clone();
            if !s.cluster_domain.is_empty() {
                let ns = podutil::namespace(pod);
                let d = &s.cluster_domain;
                searches = [format!("{ns}.svc.{d}"), format!("svc.{d}"), d.clone()]
                    .into_iter()
                    .chain(searches)
                    .collect();
                omit_duplicates(&mut searches);
            }
            api::DnsConfig {
                servers: s.cluster_dns.iter().map(|ip| ip.to_string()).collect(),
                searches,
                options: vec!["ndots:5".into()],
            }
        }
        _ if s.no_resolv_conf => api::DnsConfig {
            servers: vec!["127.0.0.1".into()],
            searches: vec![".".into()],
            options: Vec::new(),
        },
        _ => s.host.clone(),
    };
    if let Some(pc) = spec.and_then(|s| s.dns_config.as_ref()) {
        cfg.servers.extend(pc.nameservers.iter().flatten().cloned());
        omit_duplicates(&mut cfg.servers);
        cfg.searches.extend(pc.searches.iter().flatten().cloned());
        omit_duplicates(&mut cfg.searches);
        append_options(
            &mut cfg.options,
            pc.options.iter().flatten().filter_map(|o| {
                let name = o.name.as_deref()?;
                Some(match o.value.as_deref().filter(|v| !v.is_empty()) {
                    Some(v) => format!("{name}:{v}"),
                    None => name.to_string(),
                })
            }),
        );
    }
    cfg.servers.truncate(MAX_NAMESERVERS);
    cfg.searches = fit_searches(std::mem::take(&mut cfg.searches));
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodDNSConfig, PodDNSConfigOption, PodSpec};

    #[test]
    fn resolv_conf_and_policies() {
        let host = parse_resolv_conf("# c\nnameserver 1.1.1.1\nnameserver 8.8.8.8\ndomain ignored.example\nsearch old.example\nsearch a.example. b.example .\noptions ndots:2 edns0\noptions ndots:3\n");
        assert_eq!(host.servers, vec!["1.1.1.1", "8.8.8.8"]);
        assert_eq!(host.searches, vec!["a.example", "b.example"]);
        assert_eq!(host.options, vec!["ndots:3", "edns0"]);
        let mut s = DnsSettings {
            host: host.clone(),
            ..Default::default()
        };
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("web".into());
        pod.spec = Some(PodSpec::default());
        // ClusterFirst without clusterDNS falls back to the host.
        assert_eq!(pod_dns_config(&pod, &s), host);
        s.cluster_dns = vec!["10.96.0.10".parse().unwrap()];
        s.cluster_domain = "cluster.local".into();
        let c = pod_dns_config(&pod, &s);
        assert_eq!(c.servers, vec!["10.96.0.10"]);
        assert_eq!(c.searches[0], "web.svc.cluster.local");
        assert_eq!(c.options, vec!["ndots:5"]);
        assert_eq!(
            c.searches,
            vec![
                "web.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "a.example",
                "b.example"
            ]
        );
        // dnsConfig on top of ClusterFirst: merged without duplicates, options by name.
        pod.spec.as_mut().unwrap().dns_config = Some(PodDNSConfig {
            nameservers: Some(vec!["10.96.0.10".into(), "1.2.3.4".into()]),
            searches: Some(vec!["svc.cluster.local".into(), "extra".into()]),
            options: Some(vec![
                PodDNSConfigOption {
                    name: Some("ndots".into()),
                    value: Some("2".into()),
                },
                PodDNSConfigOption {
                    name: Some("edns0".into()),
                    value: None,
                },
            ]),
        });
        let c = pod_dns_config(&pod, &s);
        assert_eq!(c.servers, vec!["10.96.0.10", "1.2.3.4"]);
        assert_eq!(c.searches.last().map(String::as_str), Some("extra"));
        assert_eq!(c.searches.len(), 6);
        assert_eq!(c.options, vec!["ndots:2", "edns0"]);
        // Default with resolvConf "": the node's own resolver.
        pod.spec = Some(PodSpec {
            dns_policy: Some("Default".into()),
            ..Default::default()
        });
        let local = DnsSettings {
            no_resolv_conf: true,
            ..s.clone()
        };
        let c = pod_dns_config(&pod, &local);
        assert_eq!(
            (c.servers, c.searches),
            (vec!["127.0.0.1".to_string()], vec![".".to_string()])
        );
        // ClusterFirst on the host network is the host's resolver; WithHostNet is the cluster's.
        pod.spec = Some(PodSpec {
            host_network: Some(true),
            ..Default::default()
        });
        assert_eq!(pod_dns_config(&pod, &s), host);
        pod.spec.as_mut().unwrap().dns_policy = Some("ClusterFirstWithHostNet".into());
        assert_eq!(pod_dns_config(&pod, &s).servers, vec!["10.96.0.10"]);
        // None + dnsConfig.
        pod.spec = Some(PodSpec {
            dns_policy: Some("None".into()),
            dns_config: Some(PodDNSConfig {
                nameservers: Some(vec!["9.9.9.9".into()]),
                searches: Some(vec!["x".into()]),
                options: Some(vec![PodDNSConfigOption {
                    name: Some("ndots".into()),
                    value: Some("1".into()),
                }]),
            }),
            ..Default::default()
        });
        let c = pod_dns_config(&pod, &s);
        assert_eq!(
            (c.servers, c.searches, c.options),
            (
                vec!["9.9.9.9".into()],
                vec!["x".into()],
                vec!["ndots:1".into()]
            )
        );
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    #[test]
    fn search_limits_as_upstream() {
        let many: Vec<String> = (0..40).map(|i| format!("d{i}.example")).collect();
        assert_eq!(fit_searches(many).len(), 32);
        let long = vec!["a".repeat(254), "ok".into()];
        assert_eq!(fit_searches(long), vec!["ok"]);
        let wide: Vec<String> = (0..10).map(|i| format!("{i}{}", "x".repeat(250))).collect();
        let fitted = fit_searches(wide);
        assert!(
            fitted.join(" ").len() <= 2048 && fitted.len() == 8,
            "{}",
            fitted.len()
        );
    }
}
