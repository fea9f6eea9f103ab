//! The kubelet-managed `/etc/hosts` (upstream `kubelet_pods.go` `makeHostsMount`,
//! `ensureHostsFile`, `managedHostsFileContent`, `nodeHostsFileContent`) and the pod's hostname
//! and domain (`GeneratePodHostNameAndDomain`).
//!
//! The file lives at `<root-dir>/pods/<uid>/etc-hosts` and is bind-mounted read-write at
//! `/etc/hosts` into every container, so the pod's own name and `hostAliases` resolve without DNS.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{HostAlias, Pod};
use rkubelet_cri::api;

use crate::podutil;

/// Upstream's first line of a pod's own hosts file.
pub const MANAGED_HOSTS_HEADER: &str = "# Kubernetes-managed hosts file.\n";
/// Upstream's first line when the file is the node's plus host aliases.
pub const MANAGED_HOSTS_HEADER_HOST_NETWORK: &str =
    "# Kubernetes-managed hosts file (host network).\n";
/// Where containers see it, and where the node's own file is read for host-network pods.
pub const ETC_HOSTS_PATH: &str = "/etc/hosts";

/// Upstream `truncatePodHostnameIfNeeded`: at most 63 bytes, no trailing `-` or `.`.
fn truncate_hostname(h: &str) -> String {
    let mut h: String = h.chars().take(63).collect();
    while h.ends_with(['-', '.']) {
        h.pop();
    }
    h
}

/// Upstream `GeneratePodHostNameAndDomain`: `spec.hostname` or the pod name, and
/// `<subdomain>.<namespace>.svc.<clusterDomain>` when the pod has a subdomain.
pub fn hostname_and_domain(pod: &Pod, cluster_domain: &str) -> (String, String) {
    let spec = pod.spec.as_ref();
    let hostname = spec
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| podutil::name(pod));
    let domain = spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
        .map(|sub| format!("{sub}.{}.svc.{cluster_domain}", podutil::namespace(pod)))
        .unwrap_or_default();
    (truncate_hostname(hostname), domain)
}

/// Upstream `hostsEntriesFromHostAliases`: a blank line, a comment, one line per alias IP.
fn host_alias_entries(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for a in aliases {
        out.push_str(&format!(
            "{}\t{}\n",
            a.ip,
            a.hostnames.as_deref().unwrap_or(&[]).join("\t")
        ));
    }
    out
}

/// Upstream `managedHostsFileContent`: localhost entries, the pod's IPs with its name (and FQDN
/// when it has a domain), then host aliases.
pub fn managed_hosts_content(
    pod_ips: &[String],
    hostname: &str,
    domain: &str,
    aliases: &[HostAlias],
) -> String {
    let mut out = String::from(MANAGED_HOSTS_HEADER);
    out.push_str("127.0.0.1\tlocalhost\n");
    out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    out.push_str("fe00::0\tip6-localnet\n");
    out.push_str("fe00::0\tip6-mcastprefix\n");
    out.push_str("fe00::1\tip6-allnodes\n");
    out.push_str("fe00::2\tip6-allrouters\n");
    for ip in pod_ips {
        if domain.is_empty() {
            out.push_str(&format!("{ip}\t{hostname}\n"));
        } else {
            out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
        }
    }
    out.push_str(&host_alias_entries(aliases));
    out
}

/// Upstream `nodeHostsFileContent`: the node's own file, then host aliases.
pub fn node_hosts_content(node_hosts: &str, aliases: &[HostAlias]) -> String {
    format!(
        "{MANAGED_HOSTS_HEADER_HOST_NETWORK}{node_hosts}{}",
        host_alias_entries(aliases)
    )
}

/// `<pod dir>/etc-hosts` (upstream `getEtcHostsPath`).
pub fn etc_hosts_path(pod_dir: &Path) -> PathBuf {
    pod_dir.join("etc-hosts")
}

/// Writes the pod's hosts file (upstream `ensureHostsFile`, rewritten on every container start so
/// it follows the pod's IPs) and returns the mount for it (`makeHostsMount`). Host-network pods get
/// the node's `/etc/hosts` plus their aliases.
pub async fn make_hosts_mount(
    pod_dir: &Path,
    pod: &Pod,
    pod_ips: &[String],
    cluster_domain: &str,
) -> std::io::Result<api::Mount> {
    let spec = pod.spec.as_ref();
    let aliases = spec.and_then(|s| s.host_aliases.as_deref()).unwrap_or(&[]);
    let content = if podutil::host_network(pod) {
        let node = tokio::fs::read_to_string(ETC_HOSTS_PATH).await?;
        node_hosts_content(&node, aliases)
    } else {
        let (hostname, domain) = hostname_and_domain(pod, cluster_domain);
        managed_hosts_content(pod_ips, &hostname, &domain, aliases)
    };
    let path = etc_hosts_path(pod_dir);
    let file = path.clone();
    crate::blocking::io(move || {
        std::fs::write(&file, content)?;
        // 0644 whatever the umask, as upstream chmods after writing.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
    })
    .await?;
    Ok(api::Mount {
        container_path: ETC_HOSTS_PATH.into(),
        host_path: path.to_string_lossy().into_owned(),
        readonly: false,
        selinux_relabel: true,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn alias(ip: &str, names: &[&str]) -> HostAlias {
        HostAlias {
            ip: ip.into(),
            hostnames: Some(names.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn managed_content_as_upstream() {
        let base = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n";
        assert_eq!(
            managed_hosts_content(&["10.0.0.2".into()], "web", "", &[]),
            format!("{base}10.0.0.2\tweb\n")
        );
        assert_eq!(
            managed_hosts_content(
                &["10.0.0.2".into(), "fd00::2".into()],
                "web",
                "sub.ns.svc.cluster.local",
                &[alias("1.2.3.4", &["foo", "bar"]), alias("5.6.7.8", &["baz"])]
            ),
            format!(
                "{base}10.0.0.2\tweb.sub.ns.svc.cluster.local\tweb\nfd00::2\tweb.sub.ns.svc.cluster.local\tweb\n\n# Entries added by HostAliases.\n1.2.3.4\tfoo\tbar\n5.6.7.8\tbaz\n"
            )
        );
        assert_eq!(
            node_hosts_content("127.0.0.1 localhost\n", &[alias("1.2.3.4", &["foo"])]),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n\n# Entries added by HostAliases.\n1.2.3.4\tfoo\n"
        );
    }

    #[test]
    fn hostname_and_domain_from_spec() {
        let mut pod = Pod::default();
        pod.metadata.name = Some(format!("{}-", "a".repeat(62)));
        pod.metadata.namespace = Some("ns".into());
        pod.spec = Some(PodSpec::default());
        assert_eq!(
            hostname_and_domain(&pod, "cluster.local"),
            ("a".repeat(62), String::new())
        );
        pod.spec = Some(PodSpec {
            hostname: Some("h".into()),
            subdomain: Some("sub".into()),
            ..Default::default()
        });
        assert_eq!(
            hostname_and_domain(&pod, "cluster.local"),
            ("h".into(), "sub.ns.svc.cluster.local".into())
        );
    }

    #[tokio::test]
    async fn writes_the_file_and_mount() {
        let dir = tempfile::tempdir().unwrap();
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.spec = Some(PodSpec {
            host_aliases: Some(vec![alias("1.2.3.4", &["foo"])]),
            ..Default::default()
        });
        let m = make_hosts_mount(dir.path(), &pod, &["10.0.0.9".into()], "")
            .await
            .unwrap();
        assert_eq!(m.container_path, "/etc/hosts");
        let text = std::fs::read_to_string(&m.host_path).unwrap();
        assert!(text.starts_with(MANAGED_HOSTS_HEADER) && text.contains("10.0.0.9\tweb\n"));
        assert!(text.ends_with("1.2.3.4\tfoo\n"), "{text}");
    }
}
