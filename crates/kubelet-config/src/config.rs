//! Kubelet configuration: defaults, the `KubeletConfiguration` v1beta1 file, and validation.
//!
//! Mirrors upstream `pkg/kubelet/apis/config` (+ `v1beta1` defaults) and `cmd/kubelet/app`'s
//! layering: v1beta1 defaults (or the flags' legacy defaults without `--config`), the `--config`
//! file, `--config-dir` drop-ins (`*.conf`, lexical order, JSON merge patch), then command-line
//! flags. The file is read leniently like upstream's v1beta1 fallback decoder (unknown fields are
//! warnings naming the field path; wrong types are errors), and every invalid value is reported at
//! once with its field path. The merged tree is kept for `/configz`.

pub mod cgroups;
pub mod cpu;
mod duration;
pub mod eviction;
pub mod gc;
pub mod logging;
pub mod node_status;
pub mod schema;
pub mod tls;
mod validate;
mod zero_defaults;

pub use duration::{format_duration, parse_duration};
pub use validate::validate;
use validate::validate_tree;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// Errors loading or validating the configuration; all problems are listed, not just the first.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config file {path} is not valid YAML/JSON: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid configuration{}:\n  {}", .path.as_ref().map(|p| format!(" in {}", p.display())).unwrap_or_default(), .errors.join("\n  "))]
    Invalid {
        path: Option<PathBuf>,
        errors: Vec<String>,
    },
}

/// The effective configuration the kubelet runs with (upstream `KubeletConfiguration` + flags).
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletConfig {
    /// `--hostname-override` or the machine's hostname, lower-cased as upstream.
    pub node_name: String,
    /// `--root-dir`: pod data lives in `<root-dir>/pods/<uid>`.
    pub root_dir: PathBuf,
    /// `staticPodPath` / `--pod-manifest-path`.
    pub static_pod_path: Option<PathBuf>,
    /// `podLogsDir`: container logs go to `<podLogsDir>/<ns>_<name>_<uid>/<container>/<n>.log`.
    pub pod_logs_dir: PathBuf,
    /// `containerRuntimeEndpoint` / `--container-runtime-endpoint`.
    pub container_runtime_endpoint: String,
    /// `--pod-infra-container-image`: upstream only uses it to keep the image from GC; the runtime
    /// picks the sandbox image itself.
    pub pod_infra_container_image: String,
    /// `syncFrequency`: how often a pod is resynced when nothing happens to it.
    pub sync_frequency: Duration,
    /// `podHousekeepingPeriod`: how often the SyncLoop's housekeeping runs (pods no source
    /// wants are stopped, orphaned pod directories and cgroups removed).
    pub pod_housekeeping_period: Duration,
    /// `fileCheckFrequency`: rescan of the static pod directory besides inotify.
    pub file_check_frequency: Duration,
    /// `staticPodURL` / `--manifest-url`: a URL whose body (a Pod or PodList) gives static pods.
    pub static_pod_url: Option<String>,
    /// `staticPodURLHeader` / `--manifest-url-header`: headers sent with every GET of the URL,
    /// each value of a name in order, names sorted.
    pub static_pod_url_header: Vec<(String, String)>,
    /// `httpCheckFrequency` / `--http-check-frequency`: how often the manifest URL is read.
    pub http_check_frequency: Duration,
    /// `runtimeRequestTimeout`: bound of every CRI call.
    pub runtime_request_timeout: Duration,
    /// `streamingConnectionIdleTimeout`: idle exec/attach/port-forward streams are closed.
    pub streaming_connection_idle_timeout: Duration,
    /// `address`: bind address of the read-only (and later secure) server.
    pub address: IpAddr,
    /// `readOnlyPort`: 0 disables.
    pub read_only_port: u16,
    /// `healthzPort`: 0 disables.
    pub healthz_port: u16,
    /// `healthzBindAddress`.
    pub healthz_bind_address: IpAddr,
    /// `maxPods`.
    pub max_pods: u32,
    /// `podsPerCore` / `--pods-per-core`: 0 leaves the pods capacity at `maxPods`; otherwise it is
    /// `min(maxPods, podsPerCore * cores)` (upstream's `MachineInfo` node status setter).
    pub pods_per_core: u32,
    /// `oomScoreAdj` / `--oom-score-adj`: written to the kubelet's own `oom_score_adj` at start.
    pub oom_score_adj: i32,
    /// `maxOpenFiles` / `--max-open-files`: the kubelet's `RLIMIT_NOFILE`, soft and hard.
    pub max_open_files: u64,
    /// `providerID` / `--provider-id`: the Node's `spec.providerID` when it is registered.
    pub provider_id: String,
    /// `serializeImagePulls`, `maxParallelImagePulls`, `registryPullQPS`, `registryBurst`.
    pub image_pulls: node_status::ImagePullConfig,
    /// `nodeStatusUpdateFrequency`, `nodeStatusReportFrequency`, `nodeLeaseDurationSeconds`,
    /// `nodeStatusMaxImages`.
    pub node_status: node_status::NodeStatusConfig,
    /// `configMapAndSecretChangeDetectionStrategy`: how ConfigMaps and Secrets are read.
    pub config_map_and_secret_change_detection_strategy: crate::ChangeDetectionStrategy,
    /// `resolvConf`: the host resolver file pods with dnsPolicy Default get.
    pub resolv_conf: PathBuf,
    /// `clusterDomain`.
    pub cluster_domain: String,
    /// `clusterDNS`.
    pub cluster_dns: Vec<IpAddr>,
    /// `--kubeconfig`: without it the kubelet runs standalone (static pods only).
    pub kubeconfig: Option<PathBuf>,
    /// `--bootstrap-kubeconfig`: credentials (a bootstrap token) to request a client cert with when
    /// `--kubeconfig` has no valid one (TLS bootstrap).
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `--cert-dir`: where issued certs live (`kubelet-client-current.pem`, ...); default
    /// `<root-dir>/pki`, resolved when unset.
    pub cert_dir: Option<PathBuf>,
    /// `rotateCertificates` / `--rotate-certificates`: renew the client cert before it expires.
    pub rotate_certificates: bool,
    /// `serverTLSBootstrap`: the serving cert comes from a `kubernetes.io/kubelet-serving` CSR.
    pub server_tls_bootstrap: bool,
    /// `registerNode`.
    pub register_node: bool,
    /// `--node-ip`; detected from the default route when unset.
    pub node_ip: Option<IpAddr>,
    /// `--runtime-cgroups`: the runtime's cgroup, reported as the `runtime` system container (for
    /// a remote runtime upstream uses it for nothing else). Empty: the cgroup of the process
    /// serving the CRI socket.
    pub runtime_cgroups: String,
    /// `--image-credential-provider-config` (a file or a directory of them) and
    /// `--image-credential-provider-bin-dir`: image credential provider plugins, enabled when
    /// either is set (upstream then requires both, and checks them at start).
    pub image_credential_provider_config: Option<PathBuf>,
    pub image_credential_provider_bin_dir: Option<PathBuf>,
    /// `--node-labels`.
    pub node_labels: BTreeMap<String, String>,
    /// `registerWithTaints` / `--register-with-taints`.
    pub register_with_taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// `kubeAPIQPS` / `--kube-api-qps`: the API client's token-bucket rate (0: client-go's 5).
    pub kube_api_qps: u32,
    /// `kubeAPIBurst` / `--kube-api-burst` (0: client-go's 10).
    pub kube_api_burst: u32,
    /// `eventRecordQPS` / `--event-qps` (0: unlimited).
    pub event_record_qps: u32,
    /// `eventBurst` / `--event-burst`.
    pub event_burst: u32,
    /// `allowedUnsafeSysctls` / `--allowed-unsafe-sysctls`: sysctl names or `prefix*` patterns pods
    /// may set besides the safe set.
    pub allowed_unsafe_sysctls: Vec<String>,
    /// `containerLogMaxSize` / `--container-log-max-size` in bytes: a log is rotated at this size.
    pub container_log_max_size: u64,
    /// `containerLogMaxFiles` / `--container-log-max-files`: files kept per container, live one
    /// included.
    pub container_log_max_files: u32,
    /// `containerLogMonitorInterval`: how often logs are checked for rotation.
    pub container_log_monitor_interval: Duration,
    /// Where the `<pod>_<ns>_<container>-<id>.log` symlinks go. Upstream hardcodes
    /// /var/log/containers; rkubelet's `--container-logs-dir` lets tests and odd layouts move it.
    pub container_logs_dir: PathBuf,
    /// `port` / `--port`: the authenticated HTTPS server (upstream 10250).
    pub port: u16,
    /// `enableServer` / `--enable-server`: whether that server runs at all (upstream's way to
    /// turn it off; `port: 0` in a file is defaulted to 10250, as upstream's defaulting does).
    pub enable_server: bool,
    /// `tlsCertFile` / `--tls-cert-file`; with the key file unset too, a self-signed cert is
    /// generated under `<root-dir>/pki` as upstream.
    pub tls_cert_file: Option<PathBuf>,
    /// `tlsPrivateKeyFile` / `--tls-private-key-file`.
    pub tls_private_key_file: Option<PathBuf>,
    /// `tlsMinVersion` and `tlsCipherSuites`, resolved to what the server negotiates.
    pub serving_tls: tls::ServingTls,
    /// `authentication`: how requests to `port` prove who they are.
    pub authentication: Authentication,
    /// `authorization`: what an authenticated user may do on this node.
    pub authorization: Authorization,
    /// `enableDebuggingHandlers`: false turns containerLogs (and exec/attach/portForward/run)
    /// off with 405, as upstream.
    pub enable_debugging_handlers: bool,
    /// `featureGates.KubeletFineGrainedAuthz` (upstream beta, on by default since 1.33): `/pods`,
    /// `/healthz` and `/configz` are first checked against their own subresource, then `proxy`.
    pub fine_grained_authz: bool,
    /// `crashLoopBackOff.maxContainerRestartPeriod` (needs `featureGates.KubeletCrashLoopBackOffMax`,
    /// beta and on by default since upstream 1.35): the CrashLoopBackOff cap, 1s..300s; None keeps
    /// upstream's 300 s.
    pub crash_loop_max_restart_period: Option<Duration>,
    /// `seccompDefault` / `--seccomp-default`: RuntimeDefault seccomp for containers whose pod
    /// and container set no profile.
    pub seccomp_default: bool,
    /// `logging` (`-v`, `--vmodule`, `--logging-format`, ...): applied by the binary's subscriber.
    pub logging: logging::LoggingConfig,
    /// The container manager's settings (cgroups, reservations, node allocatable).
    pub cgroups: cgroups::CgroupConfig,
    /// The CPU and topology managers' settings.
    pub cpu_manager: cpu::CpuManagerConfig,
    /// `imageGC*` and `image*GCAge`: the image garbage collector's policy.
    pub image_gc: gc::ImageGcPolicy,
    /// The container garbage collector's policy (deprecated flags only, as upstream).
    pub container_gc: gc::ContainerGcPolicy,
    /// The eviction manager's settings (`evictionHard`, `evictionSoft`, ...).
    pub eviction: eviction::EvictionConfig,
    /// The effective `KubeletConfiguration` v1beta1 tree (defaults, file, drop-ins, flags), every
    /// field included, for `/configz`; the typed fields above are what rkubelet acts on.
    pub v1beta1: Value,
}

/// Upstream `KubeletAuthentication`. The file's defaults (anonymous off, webhook on) differ from
/// the flags' legacy defaults (anonymous on, webhook off); the binary applies the latter without
/// `--config`, as upstream's `applyLegacyDefaults`.
#[derive(Debug, Clone, PartialEq)]
pub struct Authentication {
    /// `x509.clientCAFile` / `--client-ca-file`: client certs signed by it authenticate as their
    /// CN (user) and O (groups).
    pub client_ca_file: Option<PathBuf>,
    /// `webhook.enabled` / `--authentication-token-webhook`: bearer tokens via TokenReview.
    pub webhook_enabled: bool,
    /// `webhook.cacheTTL`: how long a TokenReview answer is reused.
    pub webhook_cache_ttl: Duration,
    /// `anonymous.enabled` / `--anonymous-auth`: unauthenticated requests become
    /// `system:anonymous` (and are then authorized) instead of getting 401.
    pub anonymous_enabled: bool,
}

impl Default for Authentication {
    fn default() -> Self {
        Authentication {
            client_ca_file: None,
            webhook_enabled: true,
            webhook_cache_ttl: Duration::from_secs(120),
            anonymous_enabled: false,
        }
    }
}

/// Upstream `KubeletAuthorizationMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationMode {
    AlwaysAllow,
    /// SubjectAccessReview against the API server.
    Webhook,
}

impl std::str::FromStr for AuthorizationMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
            "Webhook" => Ok(AuthorizationMode::Webhook),
            other => Err(format!(
                "unsupported authorization mode {other:?}: must be AlwaysAllow or Webhook"
            )),
        }
    }
}

/// Upstream `KubeletAuthorization`.
#[derive(Debug, Clone, PartialEq)]
pub struct Authorization {
    pub mode: AuthorizationMode,
    /// `webhook.cacheAuthorizedTTL`.
    pub cache_authorized_ttl: Duration,
    /// `webhook.cacheUnauthorizedTTL`.
    pub cache_unauthorized_ttl: Duration,
}

impl Default for Authorization {
    fn default() -> Self {
        Authorization {
            mode: AuthorizationMode::Webhook,
            cache_authorized_ttl: Duration::from_secs(300),
            cache_unauthorized_ttl: Duration::from_secs(30),
        }
    }
}

impl Default for KubeletConfig {
    fn default() -> Self {
        KubeletConfig {
            node_name: String::new(),
            root_dir: PathBuf::from("/var/lib/kubelet"),
            static_pod_path: None,
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            container_runtime_endpoint: "unix:///run/containerd/containerd.sock".into(),
            pod_infra_container_image: "registry.k8s.io/pause:3.9".into(),
            sync_frequency: Duration::from_secs(60),
            file_check_frequency: Duration::from_secs(20),
            pod_housekeeping_period: Duration::from_secs(2),
            static_pod_url: None,
            static_pod_url_header: Vec::new(),
            http_check_frequency: Duration::from_secs(20),
            runtime_request_timeout: Duration::from_secs(120),
            streaming_connection_idle_timeout: Duration::from_secs(4 * 3600),
            address: IpAddr::from([0, 0, 0, 0]),
            read_only_port: 0,
            healthz_port: 10248,
            healthz_bind_address: IpAddr::from([127, 0, 0, 1]),
            max_pods: 110,
            pods_per_core: 0,
            oom_score_adj: -999,
            max_open_files: 1_000_000,
            provider_id: String::new(),
            image_pulls: node_status::ImagePullConfig::default(),
            node_status: node_status::NodeStatusConfig::default(),
            config_map_and_secret_change_detection_strategy: Default::default(),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            cluster_domain: String::new(),
            cluster_dns: Vec::new(),
            kubeconfig: None,
            bootstrap_kubeconfig: None,
            cert_dir: None,
            rotate_certificates: false,
            server_tls_bootstrap: false,
            register_node: true,
            node_ip: None,
            runtime_cgroups: String::new(),
            image_credential_provider_config: None,
            image_credential_provider_bin_dir: None,
            node_labels: BTreeMap::new(),
            register_with_taints: Vec::new(),
            kube_api_qps: 50,
            kube_api_burst: 100,
            event_record_qps: 50,
            event_burst: 100,
            allowed_unsafe_sysctls: Vec::new(),
            container_log_max_size: crate::defaults::CONTAINER_LOG_MAX_SIZE,
            container_log_max_files: crate::defaults::CONTAINER_LOG_MAX_FILES as u32,
            container_log_monitor_interval: crate::defaults::CONTAINER_LOG_MONITOR_INTERVAL,
            container_logs_dir: PathBuf::from(crate::defaults::CONTAINER_LOGS_DIR),
            port: 10250,
            enable_server: true,
            tls_cert_file: None,
            tls_private_key_file: None,
            serving_tls: tls::ServingTls::default(),
            authentication: Authentication::default(),
            authorization: Authorization::default(),
            enable_debugging_handlers: true,
            fine_grained_authz: true,
            crash_loop_max_restart_period: None,
            seccomp_default: false,
            logging: logging::LoggingConfig::default(),
            cgroups: cgroups::CgroupConfig::default(),
            cpu_manager: cpu::CpuManagerConfig::default(),
            image_gc: gc::ImageGcPolicy::default(),
            container_gc: gc::ContainerGcPolicy::default(),
            eviction: eviction::EvictionConfig::default(),
            v1beta1: schema::defaults_tree(),
        }
    }
}

/// What loading produced: the config and warnings to log.
#[derive(Debug)]
pub struct Loaded {
    pub config: KubeletConfig,
    pub warnings: Vec<String>,
}

/// Where the configuration comes from, lowest precedence first (after the defaults).
#[derive(Debug, Default, Clone)]
pub struct Sources {
    /// `--config`.
    pub file: Option<PathBuf>,
    /// `--config-dir`: `*.conf` drop-ins, walked recursively in lexical order as upstream.
    pub dir: Option<PathBuf>,
    /// Values of flags that set config fields, by field path in command-line order; they win
    /// over everything (upstream's `kubeletConfigFlagPrecedence`). `featureGates` merges with the
    /// file's gates, every other field replaces.
    pub flags: Vec<(String, Value)>,
}

/// Reads a single `KubeletConfiguration` file (YAML or JSON) over the defaults.
pub fn load_file(path: &Path) -> Result<Loaded, ConfigError> {
    load(&Sources {
        file: Some(path.to_path_buf()),
        ..Sources::default()
    })
}

/// Defaults, `--config`, `--config-dir` drop-ins, then flags; see the module doc.
pub fn load(src: &Sources) -> Result<Loaded, ConfigError> {
    let file = match &src.file {
        Some(path) => Some((read(path)?, path.clone())),
        None => None,
    };
    let mut dropins = Vec::new();
    if let Some(dir) = &src.dir {
        let mut paths = Vec::new();
        walk_conf(dir, &mut paths)?;
        paths.sort();
        for p in paths {
            dropins.push((read(&p)?, p));
        }
    }
    layered(
        file.as_ref().map(|(t, p)| (t.as_str(), Some(p.as_path()))),
        &dropins,
        &src.flags,
    )
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Upstream walks the drop-in directory recursively (`filepath.WalkDir`) and takes `*.conf`.
fn walk_conf(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ConfigError> {
    let rd = std::fs::read_dir(dir).map_err(|source| ConfigError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in rd {
        let entry = entry.map_err(|source| ConfigError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        let p = entry.path();
        if p.is_dir() {
            walk_conf(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "conf") {
            out.push(p);
        }
    }
    Ok(())
}

/// Parses config text as the `--config` file; see [`load`].
pub fn parse(text: &str) -> Result<Loaded, ConfigError> {
    layered(Some((text, None)), &[], &[])
}

/// One file's mapping, `kind`/`apiVersion` checked and removed, wrong types and unknown fields
/// taken out (reported through `errors`/`warnings`).
fn layer(
    text: &str,
    path: Option<&Path>,
    errors: &mut Vec<String>,
    warnings: &mut Vec<String>,
    set: &mut BTreeSet<String>,
) -> Result<serde_json::Map<String, Value>, ConfigError> {
    let parse_err = |message: String| ConfigError::Parse {
        path: path.map(Path::to_path_buf).unwrap_or_default(),
        message,
    };
    let value: Value = serde_saphyr::from_str(text).map_err(|e| parse_err(e.to_string()))?;
    let Value::Object(mut map) = value else {
        return Err(parse_err("top level must be a mapping".into()));
    };
    let mut errs = Vec::new();
    match map.remove("kind").as_ref().and_then(Value::as_str) {
        Some("KubeletConfiguration") => {}
        other => errs.push(format!(
            "kind: must be \"KubeletConfiguration\", got {other:?}"
        )),
    }
    match map.remove("apiVersion").as_ref().and_then(Value::as_str) {
        Some("kubelet.config.k8s.io/v1beta1") => {}
        other => errs.push(format!(
            "apiVersion: must be \"kubelet.config.k8s.io/v1beta1\", got {other:?}"
        )),
    }
    let mut checked = schema::Checked::default();
    schema::check_layer(&mut map, "", &mut checked);
    errs.extend(checked.errors);
    let whence = path
        .map(|p| format!(" in {}", p.display()))
        .unwrap_or_default();
    for u in checked.unknown {
        warnings.push(format!(
            "unknown config field {u:?}{whence}; ignored (upstream's lenient v1beta1 decoding drops it too)"
        ));
    }
    set.extend(checked.set);
    errors.extend(errs);
    Ok(map)
}

/// The layering itself, on texts already read.
fn layered(
    file: Option<(&str, Option<&Path>)>,
    dropins: &[(String, PathBuf)],
    flags: &[(String, Value)],
) -> Result<Loaded, ConfigError> {
    let mut tree = schema::defaults_tree();
    let mut warnings = Vec::new();
    let mut errors = Vec::new();
    let mut set = BTreeSet::new();
    match file {
        Some((text, path)) => {
            let l = layer(text, path, &mut errors, &mut warnings, &mut set)?;
            schema::merge(&mut tree, &l, schema::Merge::File, "");
        }
        None => {
            // Upstream `applyLegacyDefaults`: without a file the flags keep their historical,
            // open defaults.
            schema::set_path(&mut tree, "readOnlyPort", 10255.into());
            schema::set_path(&mut tree, "authentication.anonymous.enabled", true.into());
            schema::set_path(&mut tree, "authentication.webhook.enabled", false.into());
            schema::set_path(&mut tree, "authorization.mode", "AlwaysAllow".into());
        }
    }
    for (text, path) in dropins {
        let mut errs = Vec::new();
        let l = layer(text, Some(path), &mut errs, &mut warnings, &mut set)?;
        errors.extend(errs.into_iter().map(|e| format!("{}: {e}", path.display())));
        schema::merge(&mut tree, &l, schema::Merge::DropIn, "");
    }
    // Upstream's v1beta1 defaulting runs on the decoded file (and drop-ins), then the flags are
    // applied over the result without defaulting: one pass, here, before the flags.
    zero_defaults::apply(&mut tree, &set);
    node_status::apply_defaults(&mut tree, |p| set.contains(p));
    for (path, v) in flags {
        match (path.as_str(), v) {
            ("featureGates", Value::Object(gates)) => {
                let mut m = serde_json::Map::new();
                m.insert("featureGates".into(), Value::Object(gates.clone()));
                schema::merge(&mut tree, &m, schema::Merge::DropIn, "");
            }
            _ => schema::set_path(&mut tree, path, v.clone()),
        }
    }
    for p in &set {
        let status = schema::field(p).map(|f| f.status);
        match status {
            Some(schema::Status::NotYet) => warnings.push(format!(
                "config field {p:?} is not supported by rkubelet yet; ignored"
            )),
            Some(schema::Status::Ignored) => warnings.push(format!(
                "config field {p:?} has no effect in rkubelet; ignored"
            )),
            _ => {}
        }
    }
    validate_tree(&tree, &mut errors);
    let cfg = from_tree(tree, &mut errors, &mut warnings);
    validate(&cfg, &mut errors);
    if !errors.is_empty() {
        return Err(ConfigError::Invalid {
            path: file.and_then(|(_, p)| p).map(Path::to_path_buf),
            errors,
        });
    }
    Ok(Loaded {
        config: cfg,
        warnings,
    })
}

/// The typed config rkubelet acts on, read from the merged tree (which stays in `v1beta1`).
fn from_tree(tree: Value, errors: &mut Vec<String>, warnings: &mut Vec<String>) -> KubeletConfig {
    let map = match &tree {
        Value::Object(m) => m.clone().into_iter().collect(),
        _ => BTreeMap::new(),
    };
    let mut r = Reader {
        map,
        errors: Vec::new(),
    };
    let mut cfg = KubeletConfig {
        v1beta1: tree,
        ..KubeletConfig::default()
    };
    r.path("staticPodPath", &mut cfg.static_pod_path);
    if let Some(p) = r.string("podLogsDir") {
        cfg.pod_logs_dir = PathBuf::from(p);
    }
    r.string_into(
        "containerRuntimeEndpoint",
        &mut cfg.container_runtime_endpoint,
    );
    r.duration("syncFrequency", &mut cfg.sync_frequency);
    r.duration("fileCheckFrequency", &mut cfg.file_check_frequency);
    r.duration("podHousekeepingPeriod", &mut cfg.pod_housekeeping_period);
    if let Some(url) = r.string("staticPodURL") {
        cfg.static_pod_url = (!url.is_empty()).then_some(url);
    }
    if let Some(h) = r.string_list_map("staticPodURLHeader") {
        cfg.static_pod_url_header = h
            .into_iter()
            .flat_map(|(k, vs)| vs.into_iter().map(move |v| (k.clone(), v)))
            .collect();
    }
    r.duration("httpCheckFrequency", &mut cfg.http_check_frequency);
    r.duration("runtimeRequestTimeout", &mut cfg.runtime_request_timeout);
    r.duration(
        "streamingConnectionIdleTimeout",
        &mut cfg.streaming_connection_idle_timeout,
    );
    r.ip("address", &mut cfg.address);
    r.port("readOnlyPort", &mut cfg.read_only_port);
    r.port("healthzPort", &mut cfg.healthz_port);
    r.ip("healthzBindAddress", &mut cfg.healthz_bind_address);
    if let Some(n) = r.int("maxPods") {
        match u32::try_from(n) {
            Ok(v) => cfg.max_pods = v,
            Err(_) => r.errors.push(format!("maxPods: must be >= 0, got {n}")),
        }
    }
    // Negative values and out-of-range ones were reported by `validate_tree` in upstream's words.
    if let Some(v) = r.int("podsPerCore").and_then(|n| u32::try_from(n).ok()) {
        cfg.pods_per_core = v;
    }
    if let Some(v) = r.int("oomScoreAdj").and_then(|n| i32::try_from(n).ok()) {
        cfg.oom_score_adj = v;
    }
    if let Some(v) = r.int("maxOpenFiles").and_then(|n| u64::try_from(n).ok()) {
        cfg.max_open_files = v;
    }
    if let Some(id) = r.string("providerID") {
        cfg.provider_id = id;
    }
    for (key, out) in [
        ("eventRecordQPS", &mut cfg.event_record_qps),
        ("eventBurst", &mut cfg.event_burst),
    ] {
        if let Some(n) = r.int(key) {
            match u32::try_from(n) {
                Ok(v) => *out = v,
                Err(_) => r.errors.push(format!("{key}: must be >= 0, got {n}")),
            }
        }
    }
    // Negative values are refused by `validate_tree` in upstream's words.
    for (key, out) in [
        ("kubeAPIQPS", &mut cfg.kube_api_qps),
        ("kubeAPIBurst", &mut cfg.kube_api_burst),
    ] {
        if let Some(v) = r.int(key).and_then(|n| u32::try_from(n).ok()) {
            *out = v;
        }
    }
    if let Some(b) = r.bool("seccompDefault") {
        cfg.seccomp_default = b;
    }
    node_status::read(&mut r, &mut cfg.node_status, &mut cfg.image_pulls);
    if let Some(s) = r.string("configMapAndSecretChangeDetectionStrategy") {
        // Other values were already reported by the enum check of the schema.
        if let Some(v) = crate::ChangeDetectionStrategy::parse(&s) {
            cfg.config_map_and_secret_change_detection_strategy = v;
        }
    }
    if let Some(p) = r.string("resolvConf") {
        cfg.resolv_conf = PathBuf::from(p);
    }
    r.string_into("clusterDomain", &mut cfg.cluster_domain);
    if let Some(b) = r.bool("registerNode") {
        cfg.register_node = b;
    }
    if let Some(b) = r.bool("rotateCertificates") {
        cfg.rotate_certificates = b;
    }
    if let Some(b) = r.bool("serverTLSBootstrap") {
        cfg.server_tls_bootstrap = b;
    }
    if let Some(list) = r.string_list("clusterDNS") {
        for s in list {
            match s.parse() {
                Ok(ip) => cfg.cluster_dns.push(ip),
                Err(_) => r
                    .errors
                    .push(format!("clusterDNS: {s:?} is not an IP address")),
            }
        }
    }
    if let Some(list) = r.string_list("allowedUnsafeSysctls") {
        cfg.allowed_unsafe_sysctls = list;
    }
    if let Some(q) = r.string("containerLogMaxSize") {
        match parse_quantity_bytes(&q) {
            Ok(n) => cfg.container_log_max_size = n,
            Err(e) => r.errors.push(format!("containerLogMaxSize: {e}")),
        }
    }
    if let Some(n) = r.int("containerLogMaxFiles") {
        match u32::try_from(n) {
            Ok(v) => cfg.container_log_max_files = v,
            Err(_) => r.errors.push(format!(
                "containerLogMaxFiles: must be greater than 1, got {n}"
            )),
        }
    }
    r.duration(
        "containerLogMonitorInterval",
        &mut cfg.container_log_monitor_interval,
    );
    r.port("port", &mut cfg.port);
    if let Some(b) = r.bool("enableServer") {
        cfg.enable_server = b;
    }
    r.path("tlsCertFile", &mut cfg.tls_cert_file);
    r.path("tlsPrivateKeyFile", &mut cfg.tls_private_key_file);
    tls::read(&mut r, &mut cfg.serving_tls, warnings);
    if let Some(b) = r.bool("enableDebuggingHandlers") {
        cfg.enable_debugging_handlers = b;
    }
    if let Some(mut a) = r.section("authentication") {
        if let Some(mut x) = a.section("x509") {
            x.path("clientCAFile", &mut cfg.authentication.client_ca_file);
            r.errors.extend(x.finish("authentication.x509", warnings));
        }
        if let Some(mut w) = a.section("webhook") {
            if let Some(b) = w.bool("enabled") {
                cfg.authentication.webhook_enabled = b;
            }
            w.duration("cacheTTL", &mut cfg.authentication.webhook_cache_ttl);
            r.errors
                .extend(w.finish("authentication.webhook", warnings));
        }
        if let Some(mut an) = a.section("anonymous") {
            if let Some(b) = an.bool("enabled") {
                cfg.authentication.anonymous_enabled = b;
            }
            r.errors
                .extend(an.finish("authentication.anonymous", warnings));
        }
        r.errors.extend(a.finish("authentication", warnings));
    }
    if let Some(mut a) = r.section("authorization") {
        if let Some(m) = a.string("mode") {
            match m.parse() {
                Ok(m) => cfg.authorization.mode = m,
                Err(e) => a.errors.push(format!("mode: {e}")),
            }
        }
        if let Some(mut w) = a.section("webhook") {
            w.duration(
                "cacheAuthorizedTTL",
                &mut cfg.authorization.cache_authorized_ttl,
            );
            w.duration(
                "cacheUnauthorizedTTL",
                &mut cfg.authorization.cache_unauthorized_ttl,
            );
            r.errors.extend(w.finish("authorization.webhook", warnings));
        }
        r.errors.extend(a.finish("authorization", warnings));
    }
    let mut crash_loop_max_gate = true;
    if let Some(mut g) = r.section("featureGates") {
        if let Some(b) = g.bool("KubeletFineGrainedAuthz") {
            cfg.fine_grained_authz = b;
        }
        if let Some(b) = g.bool("KubeletCrashLoopBackOffMax") {
            crash_loop_max_gate = b;
        }
        if let Some(b) = g.bool("CustomCPUCFSQuotaPeriod") {
            cfg.cgroups.custom_cfs_quota_period = b;
        }
        if let Some(b) = g.bool("TopologyManagerPolicyOptions") {
            cfg.cpu_manager.topology_options_gate = b;
        }
        if let Some(b) = g.bool("TopologyManagerPolicyBetaOptions") {
            cfg.cpu_manager.topology_beta_options_gate = b;
        }
        for gate in std::mem::take(&mut g.map).into_keys() {
            warnings.push(format!(
                "feature gate {gate:?} is not supported by rkubelet; ignored"
            ));
        }
        r.errors.extend(g.finish("featureGates", warnings));
    }
    if let Some(mut c) = r.section("crashLoopBackOff") {
        let mut max = None;
        if let Some(text) = c.string("maxContainerRestartPeriod") {
            match parse_duration(&text) {
                Ok(d) => max = Some(d),
                Err(e) => c.errors.push(format!("maxContainerRestartPeriod: {e}")),
            }
        }
        r.errors.extend(c.finish("crashLoopBackOff", warnings));
        match max {
            // Upstream `ValidateKubeletConfiguration`'s wording.
            Some(_) if !crash_loop_max_gate => r.errors.push(
                "invalid configuration: FeatureGate KubeletCrashLoopBackOffMax not enabled, \
                 CrashLoopBackOff.MaxContainerRestartPeriod must not be set"
                    .into(),
            ),
            Some(d) if d < Duration::from_secs(1) || d > Duration::from_secs(300) => {
                r.errors.push(format!(
                    "invalid configuration: CrashLoopBackOff.MaxContainerRestartPeriod (got: {} \
                     seconds) must be set between 1s and 300s",
                    d.as_secs_f64()
                ))
            }
            _ => cfg.crash_loop_max_restart_period = max,
        }
    }
    if let Some(v) = r.take("registerWithTaints") {
        match serde_json::from_value(v) {
            Ok(t) => cfg.register_with_taints = t,
            Err(e) => r.errors.push(format!("registerWithTaints: {e}")),
        }
    }
    cgroups::read(&mut r, &mut cfg.cgroups);
    cpu::read(&mut r, &mut cfg.cpu_manager, &mut cfg.cgroups);
    gc::read(&mut r, &mut cfg.image_gc);
    read_eviction(&mut r, &mut cfg);
    logging::read(&mut r, &mut cfg.logging, warnings);
    errors.append(&mut r.errors);
    cfg
}

/// The eviction fields. `evictionHard` is defaulted (and merged with
/// `mergeDefaultEvictionSettings`) here, written back into the tree `/configz` shows, and shared
/// with the container manager's allocatable; the thresholds are parsed by `validate`.
fn read_eviction(r: &mut Reader, cfg: &mut KubeletConfig) {
    let e = &mut cfg.eviction;
    if let Some(b) = r.bool("mergeDefaultEvictionSettings") {
        e.merge_defaults = b;
    }
    let hard = r.string_map("evictionHard");
    e.hard = eviction::effective_hard(hard, e.merge_defaults);
    for (key, out) in [
        ("evictionSoft", &mut e.soft),
        ("evictionSoftGracePeriod", &mut e.soft_grace_period),
        ("evictionMinimumReclaim", &mut e.minimum_reclaim),
    ] {
        if let Some(m) = r.string_map(key) {
            *out = m;
        }
    }
    if let Some(b) = r.bool("kernelMemcgNotification") {
        e.kernel_memcg_notification = b;
    }
    if let Some(n) = r.int("evictionMaxPodGracePeriod") {
        e.max_pod_grace_period = n;
    }
    r.duration(
        "evictionPressureTransitionPeriod",
        &mut e.pressure_transition_period,
    );
    cfg.cgroups.eviction_hard = e.hard.clone();
    if let Ok(v) = serde_json::to_value(&e.hard) {
        schema::set_path(&mut cfg.v1beta1, "evictionHard", v);
    }
}

/// A resource quantity as a byte count (`10Mi`, `500k`, `1G`), rounded up like upstream's
/// `Quantity.Value()`; for `containerLogMaxSize`.
pub fn parse_quantity_bytes(s: &str) -> Result<u64, String> {
    let milli =
        crate::quantity::parse_milli(s).ok_or_else(|| format!("{s:?} is not a valid quantity"))?;
    if milli < 0 {
        return Err(format!("{s:?} must not be negative"));
    }
    u64::try_from((milli + 999) / 1000).map_err(|_| format!("{s:?} is too large"))
}

/// Pulls typed fields out of the file's map, removing each one read and collecting type errors.
struct Reader {
    map: BTreeMap<String, Value>,
    errors: Vec<String>,
}

impl Reader {
    fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key).filter(|v| !v.is_null())
    }
    fn string(&mut self, key: &str) -> Option<String> {
        match self.take(key)? {
            Value::String(s) => Some(s),
            other => {
                self.errors
                    .push(format!("{key}: must be a string, got {other}"));
                None
            }
        }
    }
    fn string_into(&mut self, key: &str, out: &mut String) {
        if let Some(s) = self.string(key) {
            *out = s;
        }
    }
    fn path(&mut self, key: &str, out: &mut Option<PathBuf>) {
        if let Some(s) = self.string(key) {
            *out = (!s.is_empty()).then(|| PathBuf::from(s));
        }
    }
    fn int(&mut self, key: &str) -> Option<i64> {
        match self.take(key)? {
            Value::Number(n) if n.is_i64() => n.as_i64(),
            other => {
                self.errors
                    .push(format!("{key}: must be an integer, got {other}"));
                None
            }
        }
    }
    fn bool(&mut self, key: &str) -> Option<bool> {
        match self.take(key)? {
            Value::Bool(b) => Some(b),
            other => {
                self.errors
                    .push(format!("{key}: must be a boolean, got {other}"));
                None
            }
        }
    }
    fn port(&mut self, key: &str, out: &mut u16) {
        if let Some(n) = self.int(key) {
            match u16::try_from(n) {
                Ok(p) => *out = p,
                Err(_) => self
                    .errors
                    .push(format!("{key}: must be between 0 and 65535, got {n}")),
            }
        }
    }
    fn ip(&mut self, key: &str, out: &mut IpAddr) {
        if let Some(s) = self.string(key) {
            match s.parse() {
                Ok(ip) => *out = ip,
                Err(_) => self
                    .errors
                    .push(format!("{key}: {s:?} is not an IP address")),
            }
        }
    }
    fn duration(&mut self, key: &str, out: &mut Duration) {
        if let Some(s) = self.string(key) {
            match parse_duration(&s) {
                Ok(d) => *out = d,
                Err(e) => self.errors.push(format!("{key}: {e}")),
            }
        }
    }
    /// A nested mapping (`authentication.webhook`, ...) as its own reader; see [`Reader::finish`].
    fn section(&mut self, key: &str) -> Option<Reader> {
        match self.take(key)? {
            Value::Object(map) => Some(Reader {
                map: map.into_iter().collect(),
                errors: Vec::new(),
            }),
            other => {
                self.errors
                    .push(format!("{key}: must be a mapping, got {other}"));
                None
            }
        }
    }
    /// The section's errors prefixed with its path. Unread keys are fields rkubelet does not act
    /// on; the schema pass already warned about those a file set.
    fn finish(self, prefix: &str, _warnings: &mut [String]) -> Vec<String> {
        self.errors
            .into_iter()
            .map(|e| format!("{prefix}.{e}"))
            .collect()
    }
    /// A `map[string]string` (kubeReserved, evictionHard, ...).
    fn string_map(&mut self, key: &str) -> Option<BTreeMap<String, String>> {
        match self.take(key)? {
            Value::Object(items) => {
                let mut out = BTreeMap::new();
                for (k, v) in items {
                    match v {
                        Value::String(s) => {
                            out.insert(k, s);
                        }
                        other => self
                            .errors
                            .push(format!("{key}.{k}: must be a string, got {other}")),
                    }
                }
                Some(out)
            }
            other => {
                self.errors
                    .push(format!("{key}: must be a mapping of strings, got {other}"));
                None
            }
        }
    }
    /// A `map[string][]string` (staticPodURLHeader); the schema pass checked the types.
    fn string_list_map(&mut self, key: &str) -> Option<BTreeMap<String, Vec<String>>> {
        match self.take(key)? {
            Value::Object(items) => Some(
                items
                    .into_iter()
                    .map(|(k, v)| {
                        let vs = v
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .filter_map(|s| s.as_str().map(String::from))
                                    .collect()
                            })
                            .unwrap_or_default();
                        (k, vs)
                    })
                    .collect(),
            ),
            other => {
                self.errors.push(format!(
                    "{key}: must be a mapping of strings to lists of strings, got {other}"
                ));
                None
            }
        }
    }
    fn string_list(&mut self, key: &str) -> Option<Vec<String>> {
        match self.take(key)? {
            Value::Array(items) => {
                let mut out = Vec::new();
                for (i, v) in items.into_iter().enumerate() {
                    match v {
                        Value::String(s) => out.push(s),
                        other => self
                            .errors
                            .push(format!("{key}[{i}]: must be a string, got {other}")),
                    }
                }
                Some(out)
            }
            other => {
                self.errors
                    .push(format!("{key}: must be a list of strings, got {other}"));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
