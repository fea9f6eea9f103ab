//! The `rkubelet` binary: upstream kubelet flags + `KubeletConfiguration` file -> `KubeletConfig`,
//! logging, signals. Flags override the file, as upstream.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kubelet::config::{self, KubeletConfig};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

fn duration(s: &str) -> Result<Duration, String> {
    config::parse_duration(s)
}

/// rkubelet: a Kubernetes node agent (kubelet) in Rust.
#[derive(Parser, Debug)]
#[command(name = "rkubelet", version, about, long_about = None)]
struct Flags {
    /// Path to a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) file; flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Directory with static pod manifests (staticPodPath).
    #[arg(long, value_name = "DIR")]
    pod_manifest_path: Option<PathBuf>,
    /// CRI endpoint, e.g. unix:///run/containerd/containerd.sock (containerRuntimeEndpoint).
    #[arg(long, value_name = "ENDPOINT")]
    container_runtime_endpoint: Option<String>,
    /// Directory for kubelet files (pod data in <root-dir>/pods).
    #[arg(long, value_name = "DIR")]
    root_dir: Option<PathBuf>,
    /// Use this name instead of the hostname as the node name.
    #[arg(long, value_name = "NAME")]
    hostname_override: Option<String>,
    /// The sandbox image; only informational with CRI runtimes (containerd uses its sandbox_image).
    #[arg(long, value_name = "IMAGE")]
    pod_infra_container_image: Option<String>,
    /// Port of the localhost healthz endpoint; 0 disables (healthzPort).
    #[arg(long, value_name = "PORT")]
    healthz_port: Option<u16>,
    /// Address of the healthz server (healthzBindAddress).
    #[arg(long, value_name = "IP")]
    healthz_bind_address: Option<IpAddr>,
    /// Read-only port with /pods and /healthz; 0 disables. Default 10255 without --config, else the
    /// file's readOnlyPort (default 0), as upstream.
    #[arg(long, value_name = "PORT")]
    read_only_port: Option<u16>,
    /// Port of the authenticated HTTPS server; 0 disables (port).
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
    /// Serving certificate (PEM) of the HTTPS server; without it a self-signed one is generated
    /// in <root-dir>/pki (tlsCertFile).
    #[arg(long, value_name = "FILE")]
    tls_cert_file: Option<PathBuf>,
    /// Key of --tls-cert-file (tlsPrivateKeyFile).
    #[arg(long, value_name = "FILE")]
    tls_private_key_file: Option<PathBuf>,
    /// CA bundle that client certificates are verified against; CN is the user, O the groups
    /// (authentication.x509.clientCAFile).
    #[arg(long, value_name = "FILE")]
    client_ca_file: Option<PathBuf>,
    /// Let requests without credentials in as system:anonymous. Default true without --config
    /// (upstream's flag default), else the file's authentication.anonymous.enabled (default false).
    #[arg(long, value_name = "BOOL")]
    anonymous_auth: Option<bool>,
    /// Authenticate bearer tokens with TokenReview. Default false without --config, else the file's
    /// authentication.webhook.enabled (default true).
    #[arg(long, value_name = "BOOL")]
    authentication_token_webhook: Option<bool>,
    /// AlwaysAllow or Webhook (SubjectAccessReview). Default AlwaysAllow without --config, else the
    /// file's authorization.mode (default Webhook).
    #[arg(long, value_name = "MODE")]
    authorization_mode: Option<config::AuthorizationMode>,
    /// Address the read-only and secure servers bind (address).
    #[arg(long, value_name = "IP")]
    address: Option<IpAddr>,
    /// Resync period of a pod when nothing happens to it (syncFrequency), e.g. 1m0s.
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    sync_frequency: Option<Duration>,
    /// Rescan period of the static pod directory besides inotify (fileCheckFrequency).
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    file_check_frequency: Option<Duration>,
    /// Timeout of every CRI request except long-running ones (runtimeRequestTimeout).
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    runtime_request_timeout: Option<Duration>,
    /// Maximum number of pods (maxPods).
    #[arg(long, value_name = "N")]
    max_pods: Option<u32>,
    /// Events per second the kubelet may write; 0 for no limit (eventRecordQPS).
    #[arg(long, value_name = "QPS")]
    event_qps: Option<u32>,
    /// Burst of events above --event-qps (eventBurst).
    #[arg(long, value_name = "N")]
    event_burst: Option<u32>,
    /// Pull one image at a time (serializeImagePulls).
    #[arg(long, value_name = "BOOL")]
    serialize_image_pulls: Option<bool>,
    /// Resolver file for pods with dnsPolicy Default (resolvConf).
    #[arg(long, value_name = "FILE")]
    resolv_conf: Option<PathBuf>,
    /// Cluster DNS server IPs, comma separated (clusterDNS).
    #[arg(long, value_delimiter = ',', value_name = "IP,...")]
    cluster_dns: Option<Vec<IpAddr>>,
    /// Cluster domain for pod search paths (clusterDomain).
    #[arg(long, value_name = "DOMAIN")]
    cluster_domain: Option<String>,
    /// Kubeconfig to reach the API server; without it rkubelet runs standalone (static pods only).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig with bootstrap credentials (a token) to request a client certificate with when
    /// --kubeconfig has no valid one; the issued cert goes to --cert-dir and --kubeconfig is written.
    #[arg(long, value_name = "FILE")]
    bootstrap_kubeconfig: Option<PathBuf>,
    /// Directory of issued certificates (kubelet-client-current.pem, ...); default <root-dir>/pki.
    #[arg(long, value_name = "DIR")]
    cert_dir: Option<PathBuf>,
    /// Renew the client certificate before it expires (rotateCertificates).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    rotate_certificates: Option<bool>,
    /// Register the node with the API server (registerNode).
    #[arg(long, value_name = "BOOL")]
    register_node: Option<bool>,
    /// The node's IP (InternalIP address, pods' hostIP); detected from the default route if unset.
    #[arg(long, value_name = "IP")]
    node_ip: Option<IpAddr>,
    /// Labels to add when registering the node, key=value,... (--node-labels).
    #[arg(long, value_name = "LABELS")]
    node_labels: Option<String>,
    /// Taints to register the node with, key=value:Effect,... (registerWithTaints).
    #[arg(long, value_name = "TAINTS")]
    register_with_taints: Option<String>,
    /// Unsafe sysctls or sysctl patterns (ending in *) pods may set, comma separated
    /// (allowedUnsafeSysctls).
    #[arg(long, value_delimiter = ',', value_name = "SYSCTLS")]
    allowed_unsafe_sysctls: Option<Vec<String>>,
    /// Rotate a container's log at this size, a quantity such as 10Mi (containerLogMaxSize).
    #[arg(long, value_parser = config::parse_quantity_bytes, value_name = "QUANTITY")]
    container_log_max_size: Option<u64>,
    /// Log files kept per container, the live one included; at least 2 (containerLogMaxFiles).
    #[arg(long, value_name = "N")]
    container_log_max_files: Option<u32>,
    /// rkubelet only: directory of the <pod>_<ns>_<container>-<id>.log symlinks, which upstream
    /// hardcodes to /var/log/containers.
    #[arg(long, value_name = "DIR")]
    container_logs_dir: Option<PathBuf>,
    /// Log verbosity as upstream klog: 0-2 info, 3-4 debug, 5+ trace. RUST_LOG overrides.
    #[arg(short = 'v', long = "v", value_name = "LEVEL", default_value_t = 0)]
    verbosity: u8,
}

fn node_name(flag: Option<&str>) -> String {
    let raw = match flag {
        Some(n) if !n.trim().is_empty() => n.trim().to_string(),
        _ => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "localhost".into()),
    };
    raw.to_lowercase()
}

/// Defaults, then the file, then the flags that were given.
fn effective_config(flags: &Flags) -> anyhow::Result<KubeletConfig> {
    let (mut cfg, ro_from_file) = match &flags.config {
        Some(path) => {
            let loaded = config::load_file(path)?;
            for w in &loaded.warnings {
                warn!(file = %path.display(), "{w}");
            }
            (loaded.config, true)
        }
        None => (KubeletConfig::default(), false),
    };
    if !ro_from_file {
        // Upstream `applyLegacyDefaults`: the flags keep their historical, open defaults.
        cfg.read_only_port = 10255;
        cfg.authentication.anonymous_enabled = true;
        cfg.authentication.webhook_enabled = false;
        cfg.authorization.mode = config::AuthorizationMode::AlwaysAllow;
    }
    macro_rules! set {
        ($($field:ident),*) => { $( if let Some(v) = flags.$field.clone() { cfg.$field = v; } )* };
    }
    set!(
        container_runtime_endpoint,
        root_dir,
        pod_infra_container_image,
        healthz_port,
        healthz_bind_address,
        read_only_port,
        address,
        sync_frequency,
        file_check_frequency,
        runtime_request_timeout,
        max_pods,
        serialize_image_pulls,
        resolv_conf,
        cluster_dns,
        cluster_domain,
        allowed_unsafe_sysctls,
        container_log_max_size,
        container_log_max_files,
        container_logs_dir
    );
    if let Some(p) = flags.port {
        cfg.port = p;
    }
    if let Some(f) = &flags.tls_cert_file {
        cfg.tls_cert_file = Some(f.clone());
    }
    if let Some(f) = &flags.tls_private_key_file {
        cfg.tls_private_key_file = Some(f.clone());
    }
    if let Some(f) = &flags.client_ca_file {
        cfg.authentication.client_ca_file = Some(f.clone());
    }
    if let Some(b) = flags.anonymous_auth {
        cfg.authentication.anonymous_enabled = b;
    }
    if let Some(b) = flags.authentication_token_webhook {
        cfg.authentication.webhook_enabled = b;
    }
    if let Some(m) = flags.authorization_mode {
        cfg.authorization.mode = m;
    }
    if let Some(q) = flags.event_qps {
        cfg.event_record_qps = q;
    }
    if let Some(b) = flags.event_burst {
        cfg.event_burst = b;
    }
    if let Some(k) = &flags.kubeconfig {
        cfg.kubeconfig = Some(k.clone());
    }
    if let Some(k) = &flags.bootstrap_kubeconfig {
        cfg.bootstrap_kubeconfig = Some(k.clone());
    }
    if let Some(d) = &flags.cert_dir {
        cfg.cert_dir = Some(d.clone());
    }
    if let Some(b) = flags.rotate_certificates {
        cfg.rotate_certificates = b;
    }
    if let Some(b) = flags.register_node {
        cfg.register_node = b;
    }
    if let Some(ip) = flags.node_ip {
        cfg.node_ip = Some(ip);
    }
    if let Some(l) = &flags.node_labels {
        cfg.node_labels = kubelet::node::status::parse_labels(l)
            .map_err(|e| anyhow::anyhow!("--node-labels: {e}"))?;
    }
    if let Some(t) = &flags.register_with_taints {
        cfg.register_with_taints = kubelet::node::status::parse_taints(t)
            .map_err(|e| anyhow::anyhow!("--register-with-taints: {e}"))?;
    }
    if let Some(p) = &flags.pod_manifest_path {
        cfg.static_pod_path = (!p.as_os_str().is_empty()).then(|| p.clone());
    }
    if cfg.bootstrap_kubeconfig.is_some() && cfg.kubeconfig.is_none() {
        anyhow::bail!("--bootstrap-kubeconfig needs --kubeconfig: the path the bootstrapped kubeconfig is written to");
    }
    cfg.node_name = node_name(flags.hostname_override.as_deref());
    let mut errors = Vec::new();
    config::validate(&cfg, &mut errors);
    if !errors.is_empty() {
        anyhow::bail!("invalid configuration:\n  {}", errors.join("\n  "));
    }
    Ok(cfg)
}

fn init_tracing(v: u8) {
    let level = match v {
        0..=2 => "info",
        3..=4 => "info,kubelet=debug,rkubelet=debug,rkubelet_cri=debug",
        _ => "info,kubelet=trace,rkubelet=trace,rkubelet_cri=trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();
}

/// Upstream sets the kubelet's own oom_score_adj to -999; without CAP_SYS_RESOURCE that is refused,
/// which is worth a warning, not a failure.
fn protect_from_oom() {
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", "-999") {
        warn!(error = %e, "cannot set rkubelet's oom_score_adj to -999; continuing");
    }
}

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    init_tracing(flags.verbosity);
    let cfg = match effective_config(&flags) {
        Ok(c) => c,
        Err(e) => {
            error!("{e:#}");
            std::process::exit(1);
        }
    };
    protect_from_oom();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    rt.block_on(async move {
        info!(node = %cfg.node_name, endpoint = %cfg.container_runtime_endpoint,
            static_pod_path = ?cfg.static_pod_path, version = env!("CARGO_PKG_VERSION"), "starting rkubelet");
        let cancel = CancellationToken::new();
        let signals = cancel.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
                error!("cannot install signal handlers");
                return;
            };
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            info!("signal received; stopping (pods keep running). Signal again to force.");
            signals.cancel();
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            error!("second signal; exiting now");
            std::process::exit(1);
        });
        kubelet::kubelet::run(cfg, cancel).await.context("rkubelet failed")
    })
}
