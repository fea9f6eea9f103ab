//! `Kubelet::run`: wires the managers and runs the SyncLoop (upstream `kubelet.go` `Run`,
//! `syncLoop`, `syncLoopIteration`, `HandlePodAdditions/Updates/Removes`, `HandlePodCleanups`).
//!
//! The SyncLoop only routes: it records what sources want, hands pods to their workers and keeps
//! the resync queue. Everything that waits on the runtime happens in workers, so it never blocks.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use rkubelet_cri::{api, CriClient};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use crate::admission;
use crate::config::KubeletConfig;
use crate::dns::{self, DnsSettings};
use crate::events::{self, EventRecorder, EventType, Recorder};
use crate::health::Health;
use crate::images::ImageManager;
use crate::logs::{ContainerLogManager, RotationPolicy};
use crate::mirror::{MirrorHandle, MirrorManager};
use crate::node::machine::{self, MachineInfo};
use crate::node::status::{self as node_status, NodeSettings};
use crate::node::NodeAgent;
use crate::pleg::{Pleg, PodLifecycleEvent, RuntimePods};
use crate::pod_workers::{PodWorkers, WorkerEvent};
use crate::podutil;
use crate::prober::{ProbeHandle, ProbeManager, ProbeResults, ResultUpdate};
use crate::runtime::RuntimeManager;
use crate::server;
use crate::source::{self, ConfigEvent, PodOp, PodUpdate};
use crate::status::{compute, syncer, StatusHandle, StatusManager};
use crate::sync::SyncContext;
use crate::volumes;

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

const SYNC_TICK: Duration = Duration::from_secs(1);
/// How long the SyncLoop waits for PLEG's first listing before it handles pods.
const FIRST_RELIST_WAIT: Duration = Duration::from_secs(10);
const HOUSEKEEPING_TICK: Duration = Duration::from_secs(2);

/// Waits until the runtime answers Version and reports RuntimeReady, retrying with backoff and
/// saying clearly what is missing (upstream retries too instead of exiting).
async fn wait_for_runtime(
    cri: &CriClient,
    cancel: &CancellationToken,
) -> Option<api::VersionResponse> {
    let mut delay = Duration::from_millis(200);
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
        warn!(endpoint = %cri.socket().display(), error = %err, retry_in = ?delay,
            "container runtime is not available; is containerd running with its CRI plugin?");
        tokio::select! {
            _ = cancel.cancelled() => return None,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(10));
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
    let ctx = Arc::new(SyncContext {
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
    });

    let (pleg_tx, pleg_rx) = mpsc::channel(1024);
    let (pleg, runtime_pods) = Pleg::new(runtime, pleg_tx, health.clone());
    tasks.spawn(
        pleg.run(cancel.child_token())
            .instrument(tracing::info_span!("pleg")),
    );

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
    let workers = PodWorkers::new(ctx, worker_tx, cancel.child_token());
    let sync_loop = SyncLoop {
        cfg,
        pods: HashMap::new(),
        rejected: HashSet::new(),
        waiting_for_name: HashMap::new(),
        queue: HashMap::new(),
        seen_sources: HashSet::new(),
        expected_sources,
        workers,
        status,
        health,
        runtime_pods,
        finished: HashMap::new(),
        deleted_in_api: HashSet::new(),
        mirrors,
        recorder,
        node_view,
        prober,
        probe_results,
        object_cache,
    };
    sync_loop
        .run(
            cfg_rx,
            pleg_rx,
            worker_rx,
            probe_rx,
            object_changes,
            cancel.clone(),
        )
        .await;
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

async fn shutdown(mut tasks: JoinSet<()>, cancel: CancellationToken) -> Result<(), KubeletError> {
    cancel.cancel();
    while tasks.join_next().await.is_some() {}
    info!("rkubelet stopped; pods keep running");
    Ok(())
}

/// The SyncLoop's state; owned by the loop alone.
struct SyncLoop {
    cfg: KubeletConfig,
    /// Upstream's pod manager: what the sources want, by UID.
    pods: HashMap<String, Arc<Pod>>,
    /// Pods admission turned down; they keep their Failed status until their source drops them.
    rejected: HashSet<String>,
    /// New pods whose full name is still held by a terminating predecessor.
    waiting_for_name: HashMap<String, Arc<Pod>>,
    /// Upstream's work queue: when each pod is due for its next sync.
    queue: HashMap<String, Instant>,
    seen_sources: HashSet<&'static str>,
    expected_sources: HashSet<&'static str>,
    workers: PodWorkers,
    status: StatusHandle,
    health: Arc<Health>,
    runtime_pods: watch::Receiver<Arc<RuntimePods>>,
    /// When workers finished cleaning pods up: a runtime listing older than that still shows
    /// them, and housekeeping must not tear them down a second time.
    finished: HashMap<String, Instant>,
    /// Pods deleted through the API whose worker finished and whose object deletion (grace 0) was
    /// requested: later updates of them must not start another termination (and another delete).
    deleted_in_api: HashSet<String>,
    /// Told which static pods run, so each has a mirror pod (cluster mode only).
    mirrors: Option<MirrorHandle>,
    recorder: Recorder,
    /// What admission checks pods against: labels, taints and allocatable of this node.
    node_view: admission::NodeView,
    prober: ProbeHandle,
    /// The probe results, owned here and read by pod workers through the receiver in SyncContext.
    probe_results: watch::Sender<Arc<ProbeResults>>,
    /// The watch-based configMap/secret manager; a finished pod unregisters from it.
    object_cache: Option<crate::object_cache::ObjectCache>,
}

impl SyncLoop {
    async fn run(
        mut self,
        mut config: mpsc::Receiver<ConfigEvent>,
        mut pleg: mpsc::Receiver<PodLifecycleEvent>,
        mut worker_events: mpsc::UnboundedReceiver<WorkerEvent>,
        mut probe_updates: mpsc::UnboundedReceiver<ResultUpdate>,
        mut object_changes: mpsc::UnboundedReceiver<String>,
        cancel: CancellationToken,
    ) {
        let mut sync_tick = tokio::time::interval(SYNC_TICK);
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING_TICK);
        sync_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Admission skips pods whose containers already run (they hold their resources), which
        // needs the first runtime listing; without a runtime there is nothing to adopt anyway.
        let mut listing = self.runtime_pods.clone();
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = tokio::time::timeout(FIRST_RELIST_WAIT, listing.changed()) => if r.is_err() {
                warn!(waited = ?FIRST_RELIST_WAIT, "no runtime listing yet; admitting pods without it");
            }
        }
        info!("starting the SyncLoop");
        loop {
            self.health.sync_loop_ran();
            tokio::select! {
                _ = cancel.cancelled() => break,
                Some(ev) = config.recv() => match ev {
                    ConfigEvent::Update(u) => {
                        self.handle_update(u).await;
                        self.publish_static_pods();
                    }
                    ConfigEvent::SourceReady(s) => {
                        info!(source = s, "pod source ready");
                        self.seen_sources.insert(s);
                    }
                },
                Some(ev) = pleg.recv() => self.wake(&ev.uid),
                Some(u) = probe_updates.recv() => self.handle_probe_result(u),
                Some(uid) = object_changes.recv() => {
                    debug!(uid = %uid, "a configMap or secret the pod references changed");
                    self.wake(&uid);
                }
                Some(ev) = worker_events.recv() => self.handle_worker_event(ev).await,
                _ = sync_tick.tick() => self.dispatch_due(),
                _ = housekeeping.tick() => self.housekeeping().await,
            }
        }
        info!("SyncLoop stopping; waiting for pod workers");
        self.workers.shutdown().await;
    }

    async fn handle_update(&mut self, u: PodUpdate) {
        let mut pods = u.pods;
        if u.op == PodOp::Add {
            // Upstream admits additions oldest first, so after a restart the pods that already
            // run claim their resources before newer ones are considered.
            pods.sort_by(|a, b| {
                a.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0)
                    .cmp(&b.metadata.creation_timestamp.as_ref().map(|t| t.0))
            });
        }
        for pod in pods {
            let uid = podutil::uid(&pod).to_string();
            match u.op {
                PodOp::Add | PodOp::Update => {
                    let known = self.pods.contains_key(&uid);
                    if u.op == PodOp::Add {
                        info!(pod = %podutil::describe(&pod), uid = %uid, source = u.source, "pod added");
                    }
                    if !known
                        && pod.metadata.deletion_timestamp.is_none()
                        && !is_terminal_in_api(&pod)
                    {
                        if let Err(r) = self.admit(&pod) {
                            warn!(pod = %podutil::describe(&pod), reason = %r.reason, message = %r.message, "pod rejected");
                            self.recorder.pod_event(
                                &pod,
                                None,
                                EventType::Warning,
                                &r.reason,
                                r.message.clone(),
                            );
                            self.pods.insert(uid.clone(), pod.clone());
                            self.rejected.insert(uid);
                            self.status.set(pod, r.status(compute::now())).await;
                            continue;
                        }
                    }
                    self.pods.insert(uid.clone(), pod.clone());
                    if self.rejected.contains(&uid) {
                        // Rejection is final for this UID (upstream: rejected pods are terminal).
                        continue;
                    }
                    if pod.metadata.deletion_timestamp.is_some() {
                        if self.deleted_in_api.contains(&uid) && !self.workers.has(&uid) {
                            // Already terminated and its deletion requested: this is our own
                            // status write coming back through the watch.
                            continue;
                        }
                        // Graceful deletion: stop with the API's grace period; the object is
                        // deleted once everything is gone (see handle_worker_event).
                        let grace = pod
                            .metadata
                            .deletion_grace_period_seconds
                            .map(|g| Duration::from_secs(g.max(0) as u64));
                        info!(pod = %podutil::describe(&pod), grace = ?grace, "pod deleted in the API; terminating");
                        self.waiting_for_name.retain(|_, p| podutil::uid(p) != uid);
                        self.workers.terminate(pod, grace);
                        continue;
                    }
                    if !self.workers.has(&uid) && is_terminal_in_api(&pod) {
                        // Finished before (e.g. before a kubelet restart): never run it again.
                        self.rejected.insert(uid);
                        continue;
                    }
                    self.status.add(pod.clone()).await;
                    self.start_or_wait(pod);
                }
                PodOp::Remove => {
                    info!(pod = %podutil::describe(&pod), uid = %uid, source = u.source, "pod removed");
                    self.pods.remove(&uid);
                    self.queue.remove(&uid);
                    self.deleted_in_api.remove(&uid);
                    if self.rejected.remove(&uid) {
                        self.status.remove(&uid).await;
                        continue;
                    }
                    let full = podutil::full_name(&pod);
                    if self
                        .waiting_for_name
                        .get(&full)
                        .is_some_and(|p| podutil::uid(p) == uid)
                    {
                        self.waiting_for_name.remove(&full);
                        self.status.remove(&uid).await;
                    } else if !self.finished.contains_key(&uid) || self.workers.has(&uid) {
                        // (A pod whose worker already finished, e.g. deleted through the API, has
                        // nothing left to stop.)
                        self.workers.terminate(pod, None);
                    }
                }
            }
        }
    }

    /// Upstream `canAdmitPod`: the predicates against the pods already admitted and still active.
    /// A pod whose containers already run (adopted after a restart) holds its resources already
    /// and is not re-checked.
    fn admit(&self, pod: &Pod) -> Result<(), admission::Rejection> {
        let uid = podutil::uid(pod);
        if self.runtime_pods.borrow().pods.iter().any(|r| r.uid == uid) {
            return Ok(());
        }
        let active: Vec<&Pod> = self
            .pods
            .iter()
            .filter(|(u, _)| !self.rejected.contains(*u) && !self.finished.contains_key(*u))
            .map(|(_, p)| &**p)
            .collect();
        admission::admit(pod, &self.node_view, &active)
    }

    /// The static pods that should have a mirror: wanted by their source, admitted, not deleted.
    fn publish_static_pods(&self) {
        let Some(m) = &self.mirrors else { return };
        let pods = self
            .pods
            .iter()
            .filter(|(uid, p)| podutil::is_static(p) && !self.rejected.contains(*uid))
            .map(|(_, p)| p.clone())
            .collect();
        m.desired(pods);
    }

    /// A new pod runs once no other UID with its full name still has a worker.
    fn start_or_wait(&mut self, pod: Arc<Pod>) {
        let full = podutil::full_name(&pod);
        if self.workers.name_busy(&full, podutil::uid(&pod)) {
            debug!(pod = %full, "waiting for the previous pod of this name to terminate");
            self.waiting_for_name.insert(full, pod);
        } else {
            self.workers.sync(pod);
        }
    }

    async fn handle_worker_event(&mut self, ev: WorkerEvent) {
        match ev {
            WorkerEvent::Synced { uid, retry_after } => {
                if self.pods.contains_key(&uid) {
                    let after = retry_after.unwrap_or_else(|| jitter(self.cfg.sync_frequency));
                    self.queue.insert(uid, Instant::now() + after);
                }
            }
            WorkerEvent::Finished {
                uid,
                full_name,
                pod,
            } => {
                if pod.metadata.deletion_timestamp.is_some() {
                    self.deleted_in_api.insert(uid.clone());
                    self.status.terminated(pod).await;
                }
                self.forget_probes(&uid);
                if let Some(c) = &self.object_cache {
                    c.unregister(&uid);
                }
                self.workers.forget(&uid);
                self.workers.reap();
                self.queue.remove(&uid);
                self.finished.insert(uid, Instant::now());
                if let Some(pod) = self.waiting_for_name.remove(&full_name) {
                    self.start_or_wait(pod);
                }
            }
        }
    }

    fn dispatch_due(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .queue
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(u, _)| u.clone())
            .collect();
        for uid in due {
            self.queue.remove(&uid);
            self.wake(&uid);
        }
    }

    /// Hands a known, admitted pod that is not waiting for its name to its worker.
    /// Upstream's SyncLoop probe channels: a changed result is recorded, then the pod is synced
    /// (a failed liveness/startup probe kills the container; readiness changes the status).
    fn handle_probe_result(&mut self, u: ResultUpdate) {
        debug!(uid = %u.pod_uid, container = %u.container_name, kind = u.kind.as_str(), result = u.result.as_str(), "probe result changed");
        self.probe_results
            .send_modify(|r| Arc::make_mut(r).apply(&u));
        self.wake(&u.pod_uid);
    }

    /// Forgets a pod's probes: its workers stop and its results go.
    fn forget_probes(&mut self, uid: &str) {
        self.prober.remove_pod(uid);
        self.probe_results.send_if_modified(|r| {
            let before = r.len();
            Arc::make_mut(r).remove_pod(uid);
            r.len() != before
        });
    }

    fn wake(&mut self, uid: &str) {
        let Some(pod) = self.pods.get(uid) else {
            return;
        };
        let waiting = self
            .waiting_for_name
            .get(&podutil::full_name(pod))
            .is_some_and(|p| podutil::uid(p) == uid);
        if !waiting && !self.rejected.contains(uid) {
            self.workers.sync(pod.clone());
        }
    }

    /// Upstream `HandlePodCleanups`: pods the runtime has that no source wants are killed and
    /// removed, and pod directories nobody owns are cleaned up. Only once every source has been
    /// read, or a restart would kill everything.
    async fn housekeeping(&mut self) {
        self.workers.reap();
        if !self.expected_sources.is_subset(&self.seen_sources) {
            return;
        }
        let listing = self.runtime_pods.borrow().clone();
        // Cleanups the listing already reflects need no memory any more.
        self.finished.retain(|_, at| *at >= listing.at);
        for r in &listing.pods {
            if self.pods.contains_key(&r.uid)
                || self.workers.has(&r.uid)
                || self.finished.contains_key(&r.uid)
            {
                continue;
            }
            info!(pod = %format!("{}/{}", r.namespace, r.name), uid = %r.uid, "cleaning up runtime pod no source wants");
            let mut pod = Pod::default();
            pod.metadata.name = Some(r.name.clone());
            pod.metadata.namespace = Some(r.namespace.clone());
            pod.metadata.uid = Some(r.uid.clone());
            pod.spec = Some(PodSpec::default());
            self.workers
                .terminate(Arc::new(pod), Some(Duration::from_secs(2)));
        }
        self.cleanup_orphaned_pod_dirs(&listing).await;
    }

    /// Upstream `cleanupOrphanedPodDirs`: a pod directory whose pod no source wants, no worker
    /// handles and the runtime does not run is left from a crash or a failed clean up; its
    /// volumes are unmounted and it is removed. Pods still known keep theirs: their worker
    /// removes it after tearing the pod down.
    async fn cleanup_orphaned_pod_dirs(&self, listing: &RuntimePods) {
        let pods_root = self.cfg.root_dir.join("pods");
        let running: HashSet<&str> = listing.pods.iter().map(|r| r.uid.as_str()).collect();
        let known = |uid: &str| {
            self.pods.contains_key(uid) || self.workers.has(uid) || running.contains(uid)
        };
        let uids = {
            let root = pods_root.clone();
            tokio::task::spawn_blocking(move || volumes::pod_dir_uids(&root)).await
        };
        let orphans: Vec<String> = match uids {
            Ok(Ok(uids)) => uids.into_iter().filter(|u| !known(u)).collect(),
            Ok(Err(e)) => {
                warn!(error = %e, "cannot list pod directories");
                return;
            }
            Err(_) => return,
        };
        if orphans.is_empty() {
            return;
        }
        let res = tokio::task::spawn_blocking(move || {
            orphans
                .into_iter()
                .map(|uid| {
                    let res = volumes::remove_pod_dir(&pods_root.join(&uid));
                    (uid, res)
                })
                .collect::<Vec<_>>()
        })
        .await;
        for (uid, r) in res.into_iter().flatten() {
            match r {
                Ok(()) => info!(uid = %uid, "removed orphaned pod directory"),
                Err(e) => warn!(uid = %uid, error = %e, "cannot remove orphaned pod directory"),
            }
        }
    }
}

fn is_terminal_in_api(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

/// Upstream resyncs with up to 50% jitter so pods do not sync in lockstep.
fn jitter(d: Duration) -> Duration {
    d + d.mul_f64(fastrand::f64() * 0.5)
}
