//! `kubelet::run`: wires the managers and runs the SyncLoop (upstream `kubelet.go` `Run`); the
//! loop itself is in [`sync_loop`].

mod reclaim;
pub mod sync_loop;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_pleg;
mod wiring;

use std::sync::Arc;
use std::time::Duration;

use rkubelet_cri::{api, CriClient};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::config::KubeletConfig;
use crate::health::Health;
use crate::server;
use wiring::Wiring;

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
    #[error("container manager: {0}")]
    ContainerManager(#[from] crate::cm::CmError),
    #[error("cgroups: {0}")]
    Cgroups(#[from] cgroups::Error),
    #[error("device manager: {0}")]
    Devices(#[from] crate::cm::devices::DeviceError),
    #[error("start cpu manager error: {0}")]
    Cpu(#[from] crate::cm::cpu::CpuError),
    #[error("topology manager: {0}")]
    Topology(#[from] crate::cm::topology::numa::NumaError),
    #[error("pod resources API: {0}")]
    PodResources(#[from] crate::podresources::PodResourcesError),
    #[error("eviction thresholds: {0}")]
    Eviction(String),
    #[error("Failed to register CRI auth plugins: {0}")]
    CredentialProviders(#[from] crate::credentials::plugin::ConfigError),
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
    if !cfg.rotate_certificates {
        return Ok(Some(kube_client(kubeconfig).await?));
    }
    // Upstream's client cert manager takes the cert dir's unexpired pair before the kubeconfig's:
    // after a rotation the cert dir holds the cert in use, while a kubeconfig with embedded data
    // (kubeadm's first kubelet.conf) still holds the first one, expired in time.
    let store = crate::certificate::Store::client(&cert_dir);
    let cert = store.current_path();
    let from_kubeconfig = || async {
        let cert_pem = bootstrap::kubeconfig_client_cert(kubeconfig).ok().flatten();
        Ok::<_, KubeletError>((kube_client(kubeconfig).await?, cert_pem))
    };
    let ((client, cert_pem), rotate_at_once) = match manager::client_from_store(
        kubeconfig,
        &store,
        std::time::SystemTime::now(),
    )
    .await
    {
        Ok(manager::StoredPair::Usable(client, cert_pem)) => {
            info!(cert = %cert.display(), "using the client certificate in the cert dir");
            ((client, Some(cert_pem)), false)
        }
        Ok(stored @ (manager::StoredPair::Absent | manager::StoredPair::Expired)) => {
            if matches!(stored, manager::StoredPair::Expired) {
                warn!(cert = %cert.display(), kubeconfig = %kubeconfig.display(), "the cert dir's client certificate has expired; using the kubeconfig's");
            }
            let client = from_kubeconfig().await?;
            (client, store_embedded_pair(kubeconfig, &store)?)
        }
        // Left as it is for the operator to look at (upstream refuses to start on it).
        Err(e) => {
            warn!(error = %e, kubeconfig = %kubeconfig.display(), "cannot make a client with the cert dir's client certificate; using the kubeconfig's");
            (from_kubeconfig().await?, false)
        }
    };
    let (client, slot) = manager::ClientSlot::new(client);
    let rotation = manager::Rotation {
        kind: manager::Kind::Client {
            kubeconfig: kubeconfig.to_path_buf(),
            slot,
            bootstrap_kubeconfig: cfg.bootstrap_kubeconfig.clone(),
        },
        store,
        client: client.clone(),
        node_name: cfg.node_name.clone(),
        initial_cert_pem: cert_pem,
        rotate_at_once,
    };
    tasks.spawn(
        rotation
            .run(cancel.child_token())
            .instrument(tracing::info_span!("client_cert_rotation")),
    );
    Ok(Some(client))
}

/// With rotation on and no usable pair in the cert dir, a kubeconfig that embeds its client pair
/// (kubeadm init's first kubelet.conf) gives it to the cert dir, and the pair is renewed at once:
/// upstream's client cert manager takes an embedded pair as its bootstrap pair
/// (`getCurrentCertificateOrBootstrap`), stores it as `kubelet-client-current.pem` and forces a
/// rotation. kubeadm's `kubelet-finalize` phase looks for that file to point kubelet.conf at it;
/// without it the node kept the embedded cert, which nothing renews on disk. A pair given as files
/// is used from them, as upstream's file store does. Returns whether to renew at once; an
/// embedded pair that is not a key and its cert is an error, as upstream refuses to start on it.
fn store_embedded_pair(
    kubeconfig: &std::path::Path,
    store: &crate::certificate::Store,
) -> Result<bool, KubeletError> {
    use crate::certificate::{bootstrap, manager};
    let Some(ck) = bootstrap::kubeconfig_embedded_pair(kubeconfig)? else {
        return Ok(false);
    };
    manager::pair(
        &ck,
        &format!(
            "the client certificate embedded in {}",
            kubeconfig.display()
        ),
    )?;
    // A failed write leaves the kubelet on the kubeconfig's pair, and the rotation stores the
    // issued one (upstream logs the failed update and goes on too).
    match store.update(&ck) {
        Ok(path) => {
            info!(cert = %path.display(), kubeconfig = %kubeconfig.display(), "stored the kubeconfig's embedded client certificate in the cert dir; renewing it at once")
        }
        Err(e) => {
            warn!(error = %e, "cannot store the kubeconfig's embedded client certificate; renewing it at once")
        }
    }
    Ok(true)
}

/// What the kubelet runs against besides its configuration: the container runtime, and
/// optionally one more pod source (upstream's `PodConfig` channels), through which in-process
/// tests feed pods.
pub struct Deps {
    pub cri: CriClient,
    /// A source name and the complete snapshots of the pods it wants.
    pub extra_source: Option<(
        &'static str,
        mpsc::Receiver<Vec<k8s_openapi::api::core::v1::Pod>>,
    )>,
    /// The cgroup manager pod cgroups are made with when `cgroupsPerQOS` is on; [`run`] detects
    /// the host's (v1 or v2, by `cgroupDriver`), tests pass an in-memory one.
    pub cgroups: Option<Arc<dyn cgroups::CgroupManager>>,
    /// The `/proc/sys` the kernel tunables are checked and set in (upstream
    /// `setupKernelTunables`): the host's in [`run`], a directory of their own in tests.
    pub proc_sys: std::path::PathBuf,
}

/// Runs the kubelet until `cancel` fires. Pods keep running after it returns, as upstream.
pub async fn run(cfg: KubeletConfig, cancel: CancellationToken) -> Result<(), KubeletError> {
    let cri = CriClient::new(&cfg.container_runtime_endpoint, cfg.runtime_request_timeout)?
        .with_observer(Arc::new(crate::metrics::record_runtime_operation));
    let cgroups: Option<Arc<dyn cgroups::CgroupManager>> = if cfg.cgroups.cgroups_per_qos {
        let driver = cgroups::Driver::parse(&cfg.cgroups.cgroup_driver)?;
        let mgr = cgroups::detect(driver)?;
        use cgroups::CgroupManager as _;
        info!(version = ?mgr.version(), driver = %cfg.cgroups.cgroup_driver, "cgroups detected");
        Some(Arc::new(mgr))
    } else {
        None
    };
    run_with(
        cfg,
        Deps {
            cri,
            extra_source: None,
            cgroups,
            proc_sys: "/proc/sys".into(),
        },
        cancel,
    )
    .await
}

/// [`run`] against the given runtime and sources: the start-up order, one builder per area
/// (see [`wiring`]).
pub async fn run_with(
    cfg: KubeletConfig,
    deps: Deps,
    cancel: CancellationToken,
) -> Result<(), KubeletError> {
    let Deps {
        cri,
        extra_source,
        cgroups,
        proc_sys,
    } = deps;
    // Upstream refuses to start with swap on before anything else (`NewContainerManager`).
    crate::cm::check_swap(&cfg.cgroups)?;
    let credential_providers = wiring::credential_providers(&cfg)?;
    wiring::ensure_dirs(&cfg)?;
    crate::metrics::get()
        .node_name
        .with_label_values(&[&cfg.node_name])
        .set(1);
    let mut w = Wiring {
        cfg: &cfg,
        cri: cri.clone(),
        health: Arc::new(Health::default()),
        tasks: JoinSet::new(),
        cancel: &cancel,
        credential_providers,
    };
    let client = match &cfg.kubeconfig {
        Some(path) => match api_client(&cfg, path, &mut w.tasks, &cancel).await? {
            Some(c) => Some(c),
            None => return shutdown(w.tasks, cancel).await,
        },
        None => {
            info!("no --kubeconfig: running standalone with static pods only");
            None
        }
    };
    let api = w.api_side(client);
    let stats = w.stats_source(cgroups.as_ref());
    w.local_servers(&api, &stats).await?;
    let Some(version) = wait_for_runtime(&cri, &cancel).await else {
        return shutdown(w.tasks, cancel).await;
    };
    let node = w.node_identity()?;
    let cm = w.container_manager(&node, cgroups, proc_sys).await?;
    let pods = w.pod_runtime(&version, &node, &api, cm)?;
    stats.set_csi(pods.ctx.csi.clone());
    if cfg.enable_server && cfg.port != 0 {
        w.secure_server(&node, &api, &stats, &pods).await?;
    }
    let eviction = w.eviction(&api, &stats, &pods)?;
    w.pod_resources(&pods, &eviction).await?;
    let devices = pods.ctx.cm.devices().cloned();
    let sources = w.sources(
        extra_source,
        &api,
        &node,
        &version,
        &eviction.handle,
        devices,
    );
    let (sync_loop, inputs) = w.sync_loop(pods, sources, api, eviction);
    sync_loop.run(inputs, cancel.clone()).await;
    shutdown(w.tasks, cancel).await
}

/// Cancels every task and joins them within [`crate::shutdown::TASKS_DEADLINE`]; what is still
/// running then is aborted and named in the log.
async fn shutdown(tasks: JoinSet<()>, cancel: CancellationToken) -> Result<(), KubeletError> {
    cancel.cancel();
    crate::shutdown::drain(tasks, crate::shutdown::TASKS_DEADLINE).await;
    info!("rkubelet stopped; pods keep running");
    Ok(())
}
