//! `kubelet::run`: wires the managers and runs the SyncLoop (upstream `kubelet.go` `Run`); the
//! loop itself is in [`sync_loop`].

pub mod sync_loop;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rkubelet_cri::{api, CriClient};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::admission;
use crate::config::KubeletConfig;
use crate::dns::{self, DnsSettings};
use crate::events::{self, EventRecorder, EventType};
use crate::health::Health;
use crate::images::ImageManager;
use crate::logs::{ContainerLogManager, RotationPolicy};
use crate::mirror::MirrorManager;
use crate::node::machine::{self, MachineInfo};
use crate::node::status::{self as node_status, NodeSettings};
use crate::node::NodeAgent;
use crate::pleg::Pleg;
use crate::pod_workers::PodWorkers;
use crate::prober::{ProbeManager, ProbeResults};
use crate::runtime::RuntimeManager;
use crate::server;
use crate::source;
use crate::status::{syncer, StatusManager};
use crate::sync::{SyncContext, Syncer};
use sync_loop::SyncLoop;

/// Errors that stop the kubelet from starting at all.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error(transparent)]
    Cri(#[from] rkubelet_cri::CriError),
    #[error(transparent)]
    Serve(#[from] server::ServeError),
    #[error("loading kubeconfig {path}: {message}")]
    Kubeconfig {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("serving certificate: {0}")]
    Tls(#[from] server::tls::TlsError),
    #[error("certificates: {0}")]
    Certificate(#[from] crate::certificate::CertError),
    #[error("allowedUnsafeSysctls: {0}")]
    Sysctls(#[from] crate::sysctl::AllowlistError),
    #[error("creating {path}: {source}")]
    Dir {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Waits until the runtime answers Version and reports RuntimeReady, retrying with backoff and
/// saying clearly what is missing (upstream retries too instead of exiting).
async fn wait_for_runtime(
    cri: &CriClient,
    cancel: &CancellationToken,
) -> Option<api::VersionResponse> {
    let mut retry =
        crate::backoff::Exponential::new(Duration::from_millis(200), Duration::from_secs(10))
            .retry();
    loop {
        let err = match cri.version(api::VersionRequest::default()).await {
            Ok(v) => match cri.status(api::StatusRequest { verbose: false }).await {
                Ok(s) => {
                    let conds = s.status.map(|s| s.conditions).unwrap_or_default();
                    let not_ready: Vec<_> = conds
                        .iter()
                        .filter(|c| c.r#type == "RuntimeReady" && !c.status)
                        .map(|c| format!("{}: {} {}", c.r#type, c.reason, c.message))
                        .collect();
                    if not_ready.is_empty() {
                        info!(runtime = %v.runtime_name, version = %v.runtime_version, api = %v.runtime_api_version, "container runtime is ready");
                        for c in conds.iter().filter(|c| !c.status) {
                            warn!(condition = %c.r#type, reason = %c.reason, message = %c.message, "runtime condition not met");
                        }
                        return Some(v);
                    }
                    format!("runtime not ready: {}", not_ready.join(", "))
                }
                Err(e) => e.to_string(),
            },
            Err(e) => e.to_string(),
        };
        let delay = retry.next_delay();
        warn!(endpoint = %cri.socket().display(), error = %err, retry_in = ?delay,
            "container runtime is not available; is containerd running with its CRI plugin?");
        if !crate::backoff::sleep(delay, cancel).await {
            return None;
        }
    }
}

/// A client from the kubeconfig file (client cert/key, CA, bearer token), as `--kubeconfig`.
async fn kube_client(path: &std::path::Path) -> Result<kube::Client, KubeletError> {
    Ok(crate::certificate::client::from_kubeconfig(path).await?)
}

/// `<root-dir>/pki` unless `--cert-dir` says otherwise, as upstream.
fn cert_dir(cfg: &KubeletConfig) -> std::path::PathBuf {
    cfg.cert_dir
        .clone()
        .unwrap_or_else(|| cfg.root_dir.join("pki"))
}

/// The kubelet's API client: TLS bootstrap first when `--bootstrap-kubeconfig` is given, and with
/// `rotateCertificates` a client whose cert a rotation task renews. None when cancelled while
/// waiting for the bootstrap certificate.
async fn api_client(
    cfg: &KubeletConfig,
    kubeconfig: &std::path::Path,
    tasks: &mut JoinSet<()>,
    cancel: &CancellationToken,
) -> Result<Option<kube::Client>, KubeletError> {
    use crate::certificate::{bootstrap, manager};
    let cert_dir = cert_dir(cfg);
    if let Some(boot) = &cfg.bootstrap_kubeconfig {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(None),
            r = bootstrap::load_client_cert(kubeconfig, boot, &cert_dir, &cfg.node_name) => { r?; }
        }
    }
    let client = kube_client(kubeconfig).await?;
    if !cfg.rotate_certificates {
        return Ok(Some(client));
    }
    let (client, slot) = manager::ClientSlot::new(client);
    let rotation = manager::Rotation {
        kind: manager::Kind::Client {
            kubeconfig: kubeconfig.to_path_buf(),
            slot,
            bootstrap_kubeconfig: cfg.bootstrap_kubeconfig.clone(),
        },
        store: crate::certificate::Store::client(&cert_dir),
        client: client.clone(),
        node_name: cfg.node_name.clone(),
        initial_cert_pem: bootstrap::kubeconfig_client_cert(kubeconfig).ok().flatten(),
    };
    tasks.spawn(
        rotation
            .run(cancel.child_token())
            .instrument(tracing::info_span!("client_cert_rotation")),
    );
    Ok(Some(client))
}

/// Runs the kubelet until `cancel` fires. Pods keep running after it returns, as upstream.
pub async fn run(cfg: KubeletConfig, cancel: CancellationToken) -> Result<(), KubeletError> {
    for dir in [
        cfg.root_dir.join("pods"),
        cfg.pod_logs_dir.clone(),
        cfg.container_logs_dir.clone(),
    ] {
        std::fs::create_dir_all(&dir).map_err(|source| KubeletError::Dir {
            path: dir.clone(),
            source,
        })?;
    }
    let cri = CriClient::new(&cfg.container_runtime_endpoint, cfg.runtime_request_timeout)?
        .with_observer(Arc::new(crate::metrics::record_runtime_operation));
    crate::metrics::get()
        .node_name
        .with_label_values(&[&cfg.node_name])
        .set(1);
    let health = Arc::new(Health::default());
    let mut tasks = JoinSet::new();
    let client = match &cfg.kubeconfig {
        Some(path) => match api_client(&cfg, path, &mut tasks, &cancel).await? {
            Some(c) => Some(c),
            None => return shutdown(tasks, cancel).await,
        },
        None => {
            info!("no --kubeconfig: running standalone with static pods only");
            None
        }
    };
    let api_queue = client.clone().map(|c| {
        let (syncer, tx) = syncer::Syncer::new(c);
        tasks.spawn(
            syncer
                .run(cancel.child_token())
                .instrument(tracing::info_span!("status_syncer")),
        );
        tx
    });
    let (event_recorder, recorder) = EventRecorder::new(
        client.clone(),
        cfg.node_name.clone(),
        cfg.event_record_qps as f32,
        cfg.event_burst,
    );
    tasks.spawn(
        event_recorder
            .run(cancel.child_token())
            .instrument(tracing::info_span!("events")),
    );
    recorder.node_event(
        EventType::Normal,
        events::STARTING_KUBELET,
        "Starting kubelet.".into(),
    );
    let (status_mgr, status) = StatusManager::new(api_queue);
    tasks.spawn(status_mgr.run(cancel.child_token()));

    let stats_source = crate::stats::StatsSource::new(
        cri.clone(),
        cfg.node_name.clone(),
        cfg.root_dir.clone(),
        cfg.pod_logs_dir.clone(),
    );
    if cfg.healthz_port != 0 {
        let addr = SocketAddr::new(cfg.healthz_bind_address, cfg.healthz_port);
        let srv = server::bind(
            "healthz",
            addr,
            false,
            health.clone(),
            status.clone(),
            stats_source.clone(),
            cancel.child_token(),
        )
        .await?;
        tasks.spawn(srv);
    }
    if cfg.read_only_port != 0 {
        let addr = SocketAddr::new(cfg.address, cfg.read_only_port);
        let srv = server::bind(
            "read-only",
            addr,
            true,
            health.clone(),
            status.clone(),
            stats_source.clone(),
            cancel.child_token(),
        )
        .await?;
        tasks.spawn(srv);
    }

    let Some(version) = wait_for_runtime(&cri, &cancel).await else {
        return shutdown(tasks, cancel).await;
    };
    let runtime_name = version.runtime_name.clone();
    let node_ip = cfg.node_ip.or_else(machine::detect_node_ip);
    if node_ip.is_none() {
        warn!("cannot detect the node IP; pass --node-ip");
    }
    let no_resolv_conf = cfg.resolv_conf.as_os_str().is_empty();
    let host_dns = if no_resolv_conf {
        Default::default()
    } else {
        dns::load_host(&cfg.resolv_conf).unwrap_or_else(|e| {
            warn!(file = %cfg.resolv_conf.display(), error = %e, "cannot read resolvConf; pods get no host DNS");
            Default::default()
        })
    };
    if cfg.cluster_dns.is_empty() {
        warn!("no clusterDNS configured: pods with dnsPolicy ClusterFirst fall back to dnsPolicy Default (upstream MissingClusterDNS)");
    }
    let (log_mgr, logs) = ContainerLogManager::new(
        cri.clone(),
        RotationPolicy {
            max_size: cfg.container_log_max_size,
            max_files: cfg.container_log_max_files as usize,
            interval: cfg.container_log_monitor_interval,
        },
        cfg.container_logs_dir.clone(),
    );
    tasks.spawn(
        log_mgr
            .run(cancel.child_token())
            .instrument(tracing::info_span!("container_logs")),
    );
    let runtime = RuntimeManager {
        cri: cri.clone(),
        root_dir: cfg.root_dir.clone(),
        logs,
        pod_logs_dir: cfg.pod_logs_dir.clone(),
        dns: DnsSettings {
            host: host_dns,
            cluster_dns: cfg.cluster_dns.clone(),
            cluster_domain: cfg.cluster_domain.clone(),
            no_resolv_conf,
        },
    };
    let settings = NodeSettings {
        name: cfg.node_name.clone(),
        ip: node_ip.unwrap_or(std::net::IpAddr::from([127, 0, 0, 1])),
        hostname: cfg.node_name.clone(),
        extra_labels: cfg.node_labels.clone(),
        taints: cfg.register_with_taints.clone(),
        max_pods: cfg.max_pods,
        kubelet_port: cfg.port,
    };
    let machine_info = MachineInfo::read(&cfg.root_dir);
    // Upstream admits against the Node object; ours is what this kubelet registers (labels and
    // taints set later by an admin through the API are not seen yet).
    let node_view = admission::NodeView {
        name: cfg.node_name.clone(),
        labels: node_status::node_labels(&settings, &machine_info),
        taints: cfg.register_with_taints.clone(),
        allocatable: node_status::resources(&settings, &machine_info).1,
        sysctls: crate::sysctl::Allowlist::for_node(&cfg.allowed_unsafe_sysctls)?,
    };
    let (probe_mgr, prober, probe_rx) = ProbeManager::new(cri.clone(), recorder.clone());
    tasks.spawn(
        probe_mgr
            .run(cancel.child_token())
            .instrument(tracing::info_span!("prober")),
    );
    let (probe_results, probes) = watch::channel(Arc::new(ProbeResults::new()));
    // Upstream's configMap/secret managers: with Watch, one watch per referenced object, and a
    // change wakes the pods that reference it (SyncLoop below).
    let (object_changes_tx, object_changes) = mpsc::unbounded_channel();
    let object_cache = match &client {
        Some(c)
            if cfg.config_map_and_secret_change_detection_strategy
                == crate::object_cache::ChangeDetectionStrategy::Watch =>
        {
            let (cache, run) = crate::object_cache::ObjectCache::start(
                c.clone(),
                object_changes_tx,
                cancel.child_token(),
            );
            tasks.spawn(run.instrument(tracing::info_span!("object_cache")));
            Some(cache)
        }
        Some(_)
            if cfg.config_map_and_secret_change_detection_strategy
                == crate::object_cache::ChangeDetectionStrategy::Cache =>
        {
            let (cache, run) = crate::object_cache::ObjectCache::start_ttl(
                crate::object_cache::CACHE_TTL,
                cancel.child_token(),
            );
            tasks.spawn(run.instrument(tracing::info_span!("object_cache")));
            Some(cache)
        }
        _ => None,
    };
    let objects = match (&client, &object_cache) {
        (Some(c), Some(cache)) => {
            crate::objects::ObjectSource::with_cache(c.clone(), cache.clone())
        }
        _ => crate::objects::ObjectSource::new(client.clone()),
    };
    // Upstream's service reflector (all namespaces), only with an API client.
    let services = match &client {
        Some(c) => {
            let (lister, run) =
                crate::services::ServiceLister::start(c.clone(), cancel.child_token());
            tasks.spawn(run.instrument(tracing::info_span!("services")));
            lister
        }
        None => crate::services::ServiceLister::standalone(),
    };
    let (pleg_tx, pleg_rx) = mpsc::channel(1024);
    let (pleg, runtime_pods, runtime_cache) = Pleg::new(runtime.clone(), pleg_tx, health.clone());
    tasks.spawn(
        pleg.run(cancel.child_token())
            .instrument(tracing::info_span!("pleg")),
    );
    let ctx = Arc::new(SyncContext {
        cache: runtime_cache,
        prober: prober.clone(),
        probes,
        runtime: runtime.clone(),
        images: ImageManager::new(
            cri.clone(),
            cfg.serialize_image_pulls,
            recorder.clone(),
            client.clone(),
        ),
        recorder: recorder.clone(),
        status: status.clone(),
        root_dir: cfg.root_dir.clone(),
        runtime_name,
        node_ip: node_ip.map(|ip| ip.to_string()).unwrap_or_default(),
        allocatable: node_view.allocatable.clone(),
        objects,
        tokens: crate::token::TokenManager::new(client.clone()),
        services,
    });

    if cfg.port != 0 {
        let serving = match (&client, cfg.server_tls_bootstrap) {
            (Some(c), true) => {
                let cert = Arc::new(crate::certificate::manager::ServingCert::default());
                let ips = node_ip.into_iter().collect();
                tasks.spawn(
                    crate::certificate::manager::Rotation {
                        kind: crate::certificate::manager::Kind::Serving {
                            cert: cert.clone(),
                            request: crate::certificate::csr::Request::serving(
                                &cfg.node_name,
                                vec![cfg.node_name.clone()],
                                ips,
                            ),
                        },
                        store: crate::certificate::Store::server(&cert_dir(&cfg)),
                        client: c.clone(),
                        node_name: cfg.node_name.clone(),
                        initial_cert_pem: None,
                    }
                    .run(cancel.child_token())
                    .instrument(tracing::info_span!("serving_cert_rotation")),
                );
                Some(cert)
            }
            (None, true) => {
                warn!("serverTLSBootstrap needs --kubeconfig; serving a self-signed certificate");
                None
            }
            _ => None,
        };
        let srv = secure_server(
            &cfg,
            node_ip,
            serving,
            server::SecureDeps {
                health: health.clone(),
                status: status.clone(),
                runtime_pods: runtime_pods.clone(),
                cri: cri.clone(),
                stats: stats_source.clone(),
                configz: Arc::new(crate::configz::configz(&cfg)),
                authn: Arc::new(server::auth::Authenticator::new(
                    &cfg.authentication,
                    client.clone(),
                )),
                authz: Arc::new(server::auth::Authorizer::new(
                    &cfg.authorization,
                    cfg.node_name.clone(),
                    client.clone(),
                )),
                debugging_handlers: cfg.enable_debugging_handlers,
                fine_grained_authz: cfg.fine_grained_authz,
                streaming_idle_timeout: cfg.streaming_connection_idle_timeout,
            },
            cancel.child_token(),
        )
        .await?;
        tasks.spawn(srv);
    }

    let (snap_tx, snap_rx) = mpsc::channel(16);
    let (cfg_tx, cfg_rx) = mpsc::channel(256);
    tasks.spawn(source::mux::run(snap_rx, cfg_tx, cancel.child_token()));
    let mut expected_sources = HashSet::new();
    if let Some(dir) = cfg.static_pod_path.clone() {
        expected_sources.insert(source::FILE_SOURCE);
        let fs = source::file::FileSource::new(
            dir,
            cfg.node_name.clone(),
            cfg.file_check_frequency,
            snap_tx.clone(),
        );
        tasks.spawn(
            fs.run(cancel.child_token())
                .instrument(tracing::info_span!("file_source")),
        );
    }
    let mut mirrors = None;
    if let Some(client) = client.clone() {
        expected_sources.insert(source::api::API_SOURCE);
        let (mirror_mgr, mirror) =
            MirrorManager::new(client.clone(), cfg.node_name.clone(), status.clone());
        tasks.spawn(
            mirror_mgr
                .run(cancel.child_token())
                .instrument(tracing::info_span!("mirror_pods")),
        );
        let src = source::api::run(
            client.clone(),
            cfg.node_name.clone(),
            snap_tx.clone(),
            mirror.clone(),
            cancel.child_token(),
        );
        mirrors = Some(mirror);
        tasks.spawn(src.instrument(tracing::info_span!("api_source")));
        if cfg.register_node {
            let agent = NodeAgent {
                client,
                settings: settings.clone(),
                machine: machine_info.clone(),
                recorder: recorder.clone(),
                runtime_version: format!("{}://{}", version.runtime_name, version.runtime_version),
                cri: cri.clone(),
                health: health.clone(),
            };
            tasks.spawn(
                agent
                    .run(cancel.child_token())
                    .instrument(tracing::info_span!("node")),
            );
        }
    }
    drop(snap_tx);

    let (worker_tx, worker_rx) = mpsc::unbounded_channel();
    let workers = PodWorkers::new(Arc::new(Syncer { ctx }), worker_tx, cancel.child_token());
    let sync_loop = SyncLoop {
        sync_frequency: cfg.sync_frequency,
        root_dir: cfg.root_dir.clone(),
        pods: HashMap::new(),
        seen_sources: HashSet::new(),
        expected_sources,
        workers,
        status,
        health,
        runtime_pods,
        mirrors,
        recorder,
        node_view,
        prober,
        probe_results,
        object_cache,
    };
    let inputs = sync_loop::Inputs {
        config: cfg_rx,
        pleg: pleg_rx,
        worker_events: worker_rx,
        probe_updates: probe_rx,
        object_changes,
    };
    sync_loop.run(inputs, cancel.clone()).await;
    shutdown(tasks, cancel).await
}

/// The 10250 server: TLS from the configured files or a self-signed pair in `<root-dir>/pki`.
/// Without an API server client the webhooks cannot work (upstream refuses to start then); we
/// start anyway, say so, and such requests fail closed (401 / 500).
async fn secure_server(
    cfg: &KubeletConfig,
    node_ip: Option<std::net::IpAddr>,
    serving: Option<Arc<crate::certificate::manager::ServingCert>>,
    deps: server::SecureDeps,
    cancel: CancellationToken,
) -> Result<impl std::future::Future<Output = ()>, KubeletError> {
    let client_ca = cfg.authentication.client_ca_file.as_deref();
    let tls = match serving {
        Some(cert) => server::tls::server_config_with_resolver(cert, client_ca)?,
        None => {
            let (crt, key) = match (&cfg.tls_cert_file, &cfg.tls_private_key_file) {
                (Some(c), Some(k)) => (c.clone(), k.clone()),
                _ => server::tls::ensure_self_signed(&cfg.root_dir, &cfg.node_name, node_ip)?,
            };
            server::tls::server_config(&crt, &key, client_ca)?
        }
    };
    if cfg.kubeconfig.is_none()
        && (cfg.authentication.webhook_enabled
            || cfg.authorization.mode == crate::config::AuthorizationMode::Webhook)
    {
        warn!("webhook authentication/authorization is configured without --kubeconfig: bearer tokens get 401 and Webhook authorization answers 500 on the secure port");
    }
    let addr = SocketAddr::new(cfg.address, cfg.port);
    Ok(server::bind_secure(addr, tls, deps, cancel).await?)
}

/// Cancels every task and joins them within [`crate::shutdown::TASKS_DEADLINE`]; what is still
/// running then is aborted and named in the log.
async fn shutdown(tasks: JoinSet<()>, cancel: CancellationToken) -> Result<(), KubeletError> {
    cancel.cancel();
    crate::shutdown::drain(tasks, crate::shutdown::TASKS_DEADLINE).await;
    info!("rkubelet stopped; pods keep running");
    Ok(())
}
