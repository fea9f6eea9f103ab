//! The Service lister and the service environment variables it feeds (upstream kubelet.go's
//! service reflector, `kubelet_pods.go` `getServiceEnvVarMap` and `pkg/kubelet/envvars`).
//!
//! Every container gets the master service's variables (`KUBERNETES_SERVICE_HOST`, ...), which
//! client-go's `InClusterConfig` reads, and, with `enableServiceLinks` (the default), the
//! Docker-link variables of every service with a ClusterIP in its own namespace. The services come
//! from one list+watch of all namespaces, as upstream's; without an API client (standalone mode)
//! there is none and no service variables are added, as upstream's kubelet without a master.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use kube::Client;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Upstream `masterServices`: the services of the master namespace every pod sees.
const MASTER_SERVICES: &[&str] = &["kubernetes"];
/// Upstream's `--master-service-namespace` default (the flag is deprecated and not offered).
pub const MASTER_SERVICE_NAMESPACE: &str = "default";

#[derive(Debug, thiserror::Error)]
pub enum ServicesError {
    /// Upstream (v1.27+) refuses to make an environment before the first list: a container
    /// started then would silently miss its service variables for good.
    #[error("services have not yet been read at least once, cannot construct envvars")]
    NotSynced,
}

/// Read side of the service reflector; cheap to clone. `None` without an API client.
#[derive(Clone, Default)]
pub struct ServiceLister {
    store: Option<Store<Service>>,
}

impl ServiceLister {
    /// No API client: no services, so no service variables (upstream's `serviceLister == nil`
    /// path and, later, an always-synced empty informer).
    pub fn standalone() -> Self {
        ServiceLister { store: None }
    }

    /// Starts the list+watch of Services in all namespaces; the returned future runs it until
    /// `cancel` (the caller spawns it in its task set). The watcher re-lists on 410 Gone and backs
    /// off on errors.
    pub fn start(
        client: Client,
        cancel: CancellationToken,
    ) -> (Self, impl std::future::Future<Output = ()> + Send) {
        let (store, writer) = reflector::store();
        let api: Api<Service> = Api::all(client);
        let stream = reflector::reflector(
            writer,
            watcher::watcher(api, watcher::Config::default()).default_backoff(),
        );
        let run = async move {
            let mut stream = stream.boxed();
            loop {
                let ev = tokio::select! {
                    _ = cancel.cancelled() => return,
                    ev = stream.next() => ev,
                };
                match ev {
                    None => return,
                    Some(Err(e)) => warn!(error = %e, "watching services"),
                    Some(Ok(_)) => {}
                }
            }
        };
        (ServiceLister { store: Some(store) }, run)
    }

    /// Upstream `getServiceEnvVarMap` for a pod in `ns`. `static_pod`: the pod comes from a
    /// file or URL. Upstream's `makeEnvironmentVariables` waits for the first list only for API
    /// pods (`!kubetypes.IsStaticPod(pod) && !kl.serviceHasSynced()`): a static pod may be the
    /// API server itself (kubeadm's control plane), whose services cannot be listed before it
    /// runs, so it gets what the lister holds so far.
    pub fn env_var_map(
        &self,
        ns: &str,
        enable_service_links: bool,
        static_pod: bool,
    ) -> Result<BTreeMap<String, String>, ServicesError> {
        let Some(store) = &self.store else {
            return Ok(BTreeMap::new());
        };
        // Ready once the first list has been applied; never waits.
        let synced = matches!(store.wait_until_ready().now_or_never(), Some(Ok(())));
        if !synced && !static_pod {
            return Err(ServicesError::NotSynced);
        }
        let services = store.state();
        Ok(service_env_var_map(
            services.iter().map(Arc::as_ref),
            ns,
            enable_service_links,
        ))
    }
}

/// Upstream `v1helper.IsServiceIPSet`: headless (`None`) and ExternalName services have none.
fn is_service_ip_set(s: &Service) -> bool {
    let ip = s.spec.as_ref().and_then(|s| s.cluster_ip.as_deref());
    !matches!(ip, None | Some("") | Some("None"))
}

/// The pure part of upstream `getServiceEnvVarMap`: the master services of the master namespace
/// always; with service links, every service of `ns` too, which wins over a master service of the
/// same name (upstream puts the master's in first and lets `ns`'s overwrite it).
pub fn service_env_var_map<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    ns: &str,
    enable_service_links: bool,
) -> BTreeMap<String, String> {
    let mut chosen: BTreeMap<&str, &Service> = BTreeMap::new();
    for s in services {
        if !is_service_ip_set(s) {
            continue;
        }
        let name = s.metadata.name.as_deref().unwrap_or("");
        let namespace = s.metadata.namespace.as_deref().unwrap_or("");
        if namespace == MASTER_SERVICE_NAMESPACE && MASTER_SERVICES.contains(&name) {
            chosen.entry(name).or_insert(s);
        } else if namespace == ns && enable_service_links {
            chosen.insert(name, s);
        }
    }
    from_services(chosen.into_values()).into_iter().collect()
}

/// Upstream `envvars.FromServices`: `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT` (the first port),
/// `<NAME>_SERVICE_PORT_<PORTNAME>` per named port, then the Docker link variables.
pub fn from_services<'a>(services: impl IntoIterator<Item = &'a Service>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for s in services {
        if !is_service_ip_set(s) {
            continue;
        }
        let Some(spec) = s.spec.as_ref() else {
            continue;
        };
        let ip = spec.cluster_ip.clone().unwrap_or_default();
        let prefix = env_name(s.metadata.name.as_deref().unwrap_or(""));
        out.push((format!("{prefix}_SERVICE_HOST"), ip.clone()));
        let ports = spec.ports.as_deref().unwrap_or(&[]);
        // Validation demands a port of every ClusterIP service; upstream would index [0] blindly.
        let Some(first) = ports.first() else {
            continue;
        };
        let port_var = format!("{prefix}_SERVICE_PORT");
        out.push((port_var.clone(), first.port.to_string()));
        for p in ports {
            if let Some(n) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((format!("{port_var}_{}", env_name(n)), p.port.to_string()));
            }
        }
        // Upstream `makeLinkVariables`.
        for (i, p) in ports.iter().enumerate() {
            let proto = p
                .protocol
                .as_deref()
                .filter(|p| !p.is_empty())
                .unwrap_or("TCP");
            let lower = proto.to_lowercase();
            let url = format!("{lower}://{}", join_host_port(&ip, p.port));
            if i == 0 {
                // Docker special-cases the first port.
                out.push((format!("{prefix}_PORT"), url.clone()));
            }
            let pp = format!("{prefix}_PORT_{}_{}", p.port, proto.to_uppercase());
            out.push((format!("{pp}_PROTO"), lower));
            out.push((format!("{pp}_PORT"), p.port.to_string()));
            out.push((format!("{pp}_ADDR"), ip.clone()));
            out.push((pp, url));
        }
    }
    out
}

/// Upstream `makeEnvVariableName`: upper case, `-` as `_`.
pub fn env_name(s: &str) -> String {
    s.replace('-', "_").to_uppercase()
}

/// Go's `net.JoinHostPort`: IPv6 addresses in brackets.
fn join_host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use kube::api::ObjectMeta;

    fn svc(ns: &str, name: &str, ip: &str, ports: &[(&str, i32, &str)]) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(ip.into()),
                ports: Some(
                    ports
                        .iter()
                        .map(|(n, port, proto)| ServicePort {
                            name: (!n.is_empty()).then(|| n.to_string()),
                            port: *port,
                            protocol: (!proto.is_empty()).then(|| proto.to_string()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn map(v: &[(&str, &str)]) -> BTreeMap<String, String> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Upstream `TestFromServices` (pkg/kubelet/envvars/envvars_test.go), same inputs and output.
    #[test]
    fn from_services_as_upstream() {
        let services = [
            svc(
                "",
                "foo-bar",
                "1.2.3.4",
                &[("http", 8080, "TCP"), ("udp", 8081, "UDP")],
            ),
            svc(
                "",
                "abc-123",
                "5.6.7.8",
                &[("", 8081, "UDP"), ("", 8083, "UDP")],
            ),
            svc(
                "",
                "q-u-u-x",
                "9.8.7.6",
                &[("", 8081, "TCP"), ("", 8083, "TCP")],
            ),
            svc("", "svrc-clusterip-none", "None", &[("", 8082, "TCP")]),
            svc("", "svrc-clusterip-empty", "", &[("", 8082, "TCP")]),
            svc("", "super-ipv6", "2001:DB8::", &[("", 8084, "")]),
        ];
        let got: BTreeMap<String, String> = from_services(&services).into_iter().collect();
        let want = map(&[
            ("FOO_BAR_SERVICE_HOST", "1.2.3.4"),
            ("FOO_BAR_SERVICE_PORT", "8080"),
            ("FOO_BAR_SERVICE_PORT_HTTP", "8080"),
            ("FOO_BAR_SERVICE_PORT_UDP", "8081"),
            ("FOO_BAR_PORT", "tcp://1.2.3.4:8080"),
            ("FOO_BAR_PORT_8080_TCP", "tcp://1.2.3.4:8080"),
            ("FOO_BAR_PORT_8080_TCP_PROTO", "tcp"),
            ("FOO_BAR_PORT_8080_TCP_PORT", "8080"),
            ("FOO_BAR_PORT_8080_TCP_ADDR", "1.2.3.4"),
            ("FOO_BAR_PORT_8081_UDP", "udp://1.2.3.4:8081"),
            ("FOO_BAR_PORT_8081_UDP_PROTO", "udp"),
            ("FOO_BAR_PORT_8081_UDP_PORT", "8081"),
            ("FOO_BAR_PORT_8081_UDP_ADDR", "1.2.3.4"),
            ("ABC_123_SERVICE_HOST", "5.6.7.8"),
            ("ABC_123_SERVICE_PORT", "8081"),
            ("ABC_123_PORT", "udp://5.6.7.8:8081"),
            ("ABC_123_PORT_8081_UDP", "udp://5.6.7.8:8081"),
            ("ABC_123_PORT_8081_UDP_PROTO", "udp"),
            ("ABC_123_PORT_8081_UDP_PORT", "8081"),
            ("ABC_123_PORT_8081_UDP_ADDR", "5.6.7.8"),
            ("ABC_123_PORT_8083_UDP", "udp://5.6.7.8:8083"),
            ("ABC_123_PORT_8083_UDP_PROTO", "udp"),
            ("ABC_123_PORT_8083_UDP_PORT", "8083"),
            ("ABC_123_PORT_8083_UDP_ADDR", "5.6.7.8"),
            ("Q_U_U_X_SERVICE_HOST", "9.8.7.6"),
            ("Q_U_U_X_SERVICE_PORT", "8081"),
            ("Q_U_U_X_PORT", "tcp://9.8.7.6:8081"),
            ("Q_U_U_X_PORT_8081_TCP", "tcp://9.8.7.6:8081"),
            ("Q_U_U_X_PORT_8081_TCP_PROTO", "tcp"),
            ("Q_U_U_X_PORT_8081_TCP_PORT", "8081"),
            ("Q_U_U_X_PORT_8081_TCP_ADDR", "9.8.7.6"),
            ("Q_U_U_X_PORT_8083_TCP", "tcp://9.8.7.6:8083"),
            ("Q_U_U_X_PORT_8083_TCP_PROTO", "tcp"),
            ("Q_U_U_X_PORT_8083_TCP_PORT", "8083"),
            ("Q_U_U_X_PORT_8083_TCP_ADDR", "9.8.7.6"),
            ("SUPER_IPV6_SERVICE_HOST", "2001:DB8::"),
            ("SUPER_IPV6_SERVICE_PORT", "8084"),
            ("SUPER_IPV6_PORT", "tcp://[2001:DB8::]:8084"),
            ("SUPER_IPV6_PORT_8084_TCP", "tcp://[2001:DB8::]:8084"),
            ("SUPER_IPV6_PORT_8084_TCP_PROTO", "tcp"),
            ("SUPER_IPV6_PORT_8084_TCP_PORT", "8084"),
            ("SUPER_IPV6_PORT_8084_TCP_ADDR", "2001:DB8::"),
        ]);
        assert_eq!(got, want);
        // No service lacking a ClusterIP contributes anything.
        assert!(!got.keys().any(|k| k.starts_with("SVRC_")));
    }

    /// Upstream `TestMakeEnvironmentVariables`' service cases: which services a namespace sees.
    #[test]
    fn which_services_a_pod_sees() {
        let services = [
            svc("default", "kubernetes", "1.2.3.1", &[("https", 443, "TCP")]),
            svc("test1", "kubernetes", "1.2.3.4", &[("", 8084, "TCP")]),
            svc("test1", "test", "1.2.3.3", &[("", 8083, "TCP")]),
            svc("test1", "headless", "None", &[("", 80, "TCP")]),
            svc("default", "not-master", "1.2.3.9", &[("", 80, "TCP")]),
            svc("other", "elsewhere", "1.2.3.8", &[("", 80, "TCP")]),
        ];
        let host = |m: &BTreeMap<String, String>, k: &str| m.get(k).cloned();
        // Links on: the namespace's own services, and its `kubernetes` wins over default's.
        let m = service_env_var_map(&services, "test1", true);
        assert_eq!(
            host(&m, "KUBERNETES_SERVICE_HOST").as_deref(),
            Some("1.2.3.4")
        );
        assert_eq!(host(&m, "TEST_SERVICE_HOST").as_deref(), Some("1.2.3.3"));
        assert_eq!(host(&m, "TEST_PORT").as_deref(), Some("tcp://1.2.3.3:8083"));
        for absent in [
            "HEADLESS_SERVICE_HOST",
            "NOT_MASTER_SERVICE_HOST",
            "ELSEWHERE_SERVICE_HOST",
        ] {
            assert!(!m.contains_key(absent), "{absent} in {m:?}");
        }
        // Links off: only the master service, from the master namespace.
        let m = service_env_var_map(&services, "test1", false);
        let want = map(&[
            ("KUBERNETES_SERVICE_HOST", "1.2.3.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://1.2.3.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://1.2.3.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "1.2.3.1"),
        ]);
        assert_eq!(m, want);
        // A pod in default with links on sees default's other services too.
        let m = service_env_var_map(&services, "default", true);
        assert_eq!(
            host(&m, "KUBERNETES_SERVICE_HOST").as_deref(),
            Some("1.2.3.1")
        );
        assert_eq!(
            host(&m, "NOT_MASTER_SERVICE_HOST").as_deref(),
            Some("1.2.3.9")
        );
    }

    #[test]
    fn standalone_has_no_service_env() {
        let m = ServiceLister::standalone().env_var_map("default", true, false);
        assert!(m.is_ok_and(|m| m.is_empty()));
    }

    /// Before the first list: API pods wait (NotSynced), static pods start with what is known,
    /// as upstream's `makeEnvironmentVariables`; kubeadm's kube-apiserver is such a pod.
    #[test]
    fn only_api_pods_wait_for_the_first_list() {
        let (store, _writer) = reflector::store::<Service>();
        let lister = ServiceLister { store: Some(store) };
        assert!(matches!(
            lister.env_var_map("kube-system", true, false),
            Err(ServicesError::NotSynced)
        ));
        let m = lister.env_var_map("kube-system", true, true);
        assert!(m.is_ok_and(|m| m.is_empty()));
    }
}
