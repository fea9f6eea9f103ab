//! Pod DNS (upstream `pkg/kubelet/network/dns`): the host's resolv.conf for dnsPolicy Default (and
//! for ClusterFirst while no clusterDNS is configured, as upstream falls back), the cluster's
//! nameservers for ClusterFirst, and the pod's own dnsConfig merged on top.

use std::net::IpAddr;
use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::api;

use crate::podutil;

/// Upstream limits: 3 nameservers, 32 search domains.
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCHES: usize = 32;

/// Host resolver settings plus cluster DNS configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DnsSettings {
    pub host: api::DnsConfig,
    pub cluster_dns: Vec<IpAddr>,
    pub cluster_domain: String,
}

/// Parses resolv.conf text (nameserver / search / domain / options lines).
pub fn parse_resolv_conf(text: &str) -> api::DnsConfig {
    let mut cfg = api::DnsConfig::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("").trim();
        let mut f = line.split_whitespace();
        match f.next() {
            Some("nameserver") => cfg.servers.extend(f.next().map(str::to_string)),
            Some("search") | Some("domain") => cfg.searches = f.map(str::to_string).collect(),
            Some("options") => cfg.options.extend(f.map(str::to_string)),
            _ => {}
        }
    }
    cfg
}

/// Reads the host resolver file; a missing file means no host DNS, with the reason for the log.
pub fn load_host(path: &Path) -> Result<api::DnsConfig, std::io::Error> {
    Ok(parse_resolv_conf(&std::fs::read_to_string(path)?))
}

/// The DNS config the pod's sandbox gets.
pub fn pod_dns_config(pod: &Pod, s: &DnsSettings) -> api::DnsConfig {
    let spec = pod.spec.as_ref();
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let host_net = podutil::host_network(pod);
    let cluster = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_net,
        _ => false,
    } && !s.cluster_dns.is_empty();
    let mut cfg = match policy {
        "None" => api::DnsConfig::default(),
        _ if cluster => {
            let ns = podutil::namespace(pod);
            let d = &s.cluster_domain;
            let mut searches = vec![format!("{ns}.svc.{d}"), format!("svc.{d}"), d.clone()];
            searches.extend(s.host.searches.iter().cloned());
            api::DnsConfig {
                servers: s.cluster_dns.iter().map(|ip| ip.to_string()).collect(),
                searches,
                options: vec!["ndots:5".into()],
            }
        }
        _ => s.host.clone(),
    };
    if let Some(pc) = spec.and_then(|s| s.dns_config.as_ref()) {
        cfg.servers.extend(pc.nameservers.iter().flatten().cloned());
        cfg.searches.extend(pc.searches.iter().flatten().cloned());
        for o in pc.options.iter().flatten() {
            let Some(name) = o.name.as_deref() else {
                continue;
            };
            let opt = match o.value.as_deref() {
                Some(v) => format!("{name}:{v}"),
                None => name.to_string(),
            };
            let key = |x: &String| x.split(':').next().unwrap_or("").to_string();
            cfg.options.retain(|x| key(x) != name);
            cfg.options.push(opt);
        }
    }
    cfg.servers.dedup();
    cfg.servers.truncate(MAX_NAMESERVERS);
    let mut seen = std::collections::HashSet::new();
    cfg.searches.retain(|x| seen.insert(x.clone()));
    cfg.searches.truncate(MAX_SEARCHES);
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodDNSConfig, PodDNSConfigOption, PodSpec};

    #[test]
    fn resolv_conf_and_policies() {
        let host = parse_resolv_conf("# c\nnameserver 1.1.1.1\nnameserver 8.8.8.8 ; x\nsearch a.example b.example\noptions ndots:2 edns0\n");
        assert_eq!(host.servers, vec!["1.1.1.1", "8.8.8.8"]);
        assert_eq!(host.searches, vec!["a.example", "b.example"]);
        assert_eq!(host.options, vec!["ndots:2", "edns0"]);
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
