//! The upstream kubelet command line, 1.20 through current, as one table and a pflag-compatible
//! parser.
//!
//! Why not clap: upstream parses with spf13/pflag, whose semantics clap does not share — bool
//! flags never take the next word (`--fail-swap-on false` makes `false` a positional), `-v=2`
//! and `-v 2` both work, `_` and `-` are the same in names (`--log_dir`), map flags accumulate
//! over repeats (`--node-labels=a=b --node-labels=c=d`), and deprecated flags print
//! `Flag --x has been deprecated, ...` when used. Around 180 flags, most of them accepted only
//! for compatibility, are simpler to keep honest as data: the same table generates
//! `docs/flags.md` (a test keeps it in sync) and says which flag sets which config field.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

pub use crate::config::schema::Status;

/// How a flag's value is parsed (pflag's value types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No value needed (`--x` is `--x=true`); never takes the next word.
    Bool,
    Str,
    Int,
    Float,
    /// Go duration (`15m`, `1m30s`).
    Duration,
    Ip,
    /// Comma-separated; repeats append.
    StrSlice,
    /// `k=v,k2=v2`; repeats accumulate.
    Map,
    /// `k=v` pairs, not split on commas (cpu/topology manager policy options).
    MapNoSplit,
    /// `memory.available<100Mi,...` (eviction thresholds).
    LangleMap,
    /// `Gate=true,Other=false` (feature gates).
    BoolMap,
    /// `a:hello,b:again` to `{a: [hello], b: [again]}` (manifest-url-header).
    ColonMultimap,
    /// `key=value:Effect,...` (register-with-taints).
    Taints,
    /// `0:memory=1Gi,hugepages-1M=2Gi` (reserved-memory); repeats append.
    ReservedMemory,
}

/// Where a flag's value goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A `KubeletConfiguration` field (dotted path); the flag overrides the file.
    Field(&'static str),
    /// A flag-only setting (`KubeletFlags` upstream), read by the binary from [`Parsed`].
    Flag,
}

/// One flag.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub name: &'static str,
    pub short: Option<char>,
    pub kind: Kind,
    pub target: Target,
    pub status: Status,
    /// Upstream's `MarkDeprecated` message (the last one upstream printed).
    pub deprecated: Option<&'static str>,
    /// The upstream release that removed it, for flags 1.20 had and current upstream does not;
    /// rkubelet keeps accepting them so 1.20-era unit files keep working.
    pub removed_in: Option<&'static str>,
}

const D: Spec = Spec {
    name: "",
    short: None,
    kind: Kind::Str,
    target: Target::Flag,
    status: Status::Implemented,
    deprecated: None,
    removed_in: None,
};

/// Upstream marks every flag backed by a config field deprecated with this text.
pub const CONFIG_DEPRECATED: &str = "This parameter should be set via the config file specified by the Kubelet's --config flag. See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more information.";
const CADVISOR: &str = "This is a cadvisor flag that was mistakenly registered with the Kubelet. Due to legacy concerns, it will follow the standard CLI deprecation timeline before being removed.";
const DOCKERSHIM: &str = "will be removed along with dockershim.";
const KLOG: &str = "will be removed in a future release, see https://github.com/kubernetes/enhancements/tree/master/keps/sig-instrumentation/2845-deprecate-klog-specific-flags-in-k8s-components";
const EVICTION: &str =
    "Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.";
const FUTURE: &str = "will be removed in a future version";

use Kind::*;
use Status::*;

const fn flag(name: &'static str, kind: Kind, status: Status) -> Spec {
    Spec {
        name,
        kind,
        status,
        ..D
    }
}

/// A flag backed by a config field; upstream deprecates those in favour of `--config`.
const fn cfg(name: &'static str, kind: Kind, field: &'static str, status: Status) -> Spec {
    Spec {
        name,
        kind,
        status,
        target: Target::Field(field),
        deprecated: Some(CONFIG_DEPRECATED),
        ..D
    }
}

const fn dep(mut s: Spec, msg: &'static str) -> Spec {
    s.deprecated = Some(msg);
    s
}

const fn gone(mut s: Spec, release: &'static str) -> Spec {
    s.removed_in = Some(release);
    s
}

const fn not_deprecated(mut s: Spec) -> Spec {
    s.deprecated = None;
    s
}

const fn removed(name: &'static str) -> Spec {
    flag(name, Bool, Removed)
}

/// Every flag, upstream's registration order.
pub const FLAGS: &[Spec] = &[
    // KubeletFlags.
    flag("config", Str, Implemented),
    flag("config-dir", Str, Implemented),
    flag("kubeconfig", Str, Implemented),
    // TLS bootstrap (issue 7 item 3): parsed here, acted on by the bootstrap code.
    flag("bootstrap-kubeconfig", Str, Implemented),
    gone(
        dep(flag("experimental-bootstrap-kubeconfig", Str, Implemented), "Use --bootstrap-kubeconfig"),
        "1.23",
    ),
    flag("hostname-override", Str, Implemented),
    flag("node-ip", Str, Implemented),
    flag("cert-dir", Str, Implemented),
    flag("cloud-provider", Str, Ignored),
    flag("root-dir", Str, Implemented),
    cfg("seccomp-default", Bool, "seccompDefault", Implemented),
    flag("node-labels", Map, Implemented),
    flag("lock-file", Str, NotYet),
    flag("exit-on-lock-contention", Bool, NotYet),
    dep(flag("minimum-container-ttl-duration", Duration, Implemented), EVICTION),
    dep(flag("maximum-dead-containers-per-container", Int, Implemented), EVICTION),
    dep(flag("maximum-dead-containers", Int, Implemented), EVICTION),
    gone(dep(flag("register-schedulable", Bool, Ignored), FUTURE), "1.25"),
    gone(dep(flag("keep-terminated-pod-volumes", Bool, Ignored), FUTURE), "1.31"),
    dep(
        flag("experimental-mounter-path", Str, Ignored),
        "will be removed in 1.25 or later. in favor of using CSI.",
    ),
    dep(
        flag("cloud-config", Str, Ignored),
        "will be removed in 1.25 or later, in favor of removing cloud provider code from Kubelet.",
    ),
    dep(
        flag("experimental-allocatable-ignore-eviction", Bool, NotYet),
        "will be removed in 1.25 or later.",
    ),
    gone(
        dep(
            flag("dynamic-config-dir", Str, Ignored),
            "Feature DynamicKubeletConfig is deprecated in 1.22 and will not move to GA. It is planned to be removed from Kubernetes in the version 1.23. Please use alternative ways to update kubelet configuration.",
        ),
        "1.24",
    ),
    gone(
        dep(
            flag("master-service-namespace", Str, Ignored),
            "This flag will be removed in a future version.",
        ),
        "1.26",
    ),
    gone(dep(flag("non-masquerade-cidr", Str, Ignored), FUTURE), "1.24"),
    gone(dep(flag("enable-cadvisor-json-endpoints", Bool, Ignored), FUTURE), "1.23"),
    gone(
        dep(flag("really-crash-for-testing", Bool, Ignored), "will be removed in a future version."),
        "1.23",
    ),
    gone(
        dep(flag("chaos-chance", Float, Ignored), "will be removed in a future version."),
        "1.23",
    ),
    gone(
        dep(
            flag("seccomp-profile-root", Str, Ignored),
            "will be removed in 1.23, in favor of using the `<root-dir>/seccomp` directory",
        ),
        "1.23",
    ),
    gone(
        dep(
            flag("experimental-check-node-capabilities-before-mount", Bool, Ignored),
            "will be removed in 1.23. in favor of using CSI.",
        ),
        "1.23",
    ),
    // Container runtime options.
    gone(
        dep(
            flag("container-runtime", Str, Implemented),
            "will be removed in 1.27 as the only valid value is 'remote'",
        ),
        "1.27",
    ),
    flag("runtime-cgroups", Str, Implemented),
    gone(
        dep(
            flag("redirect-container-streaming", Bool, Ignored),
            "Container streaming redirection has been removed from the kubelet as of v1.20, and this flag will be removed in v1.22. For more details, see http://git.k8s.io/enhancements/keps/sig-node/20191205-container-streaming-requests.md",
        ),
        "1.22",
    ),
    gone(
        dep(flag("experimental-dockershim-root-directory", Str, Ignored), DOCKERSHIM),
        "1.24",
    ),
    dep(
        flag("pod-infra-container-image", Str, Implemented),
        "will be removed in 1.35. Image garbage collector will get sandbox image information from CRI.",
    ),
    gone(dep(flag("docker-endpoint", Str, Ignored), DOCKERSHIM), "1.24"),
    gone(dep(flag("image-pull-progress-deadline", Duration, Ignored), DOCKERSHIM), "1.24"),
    gone(dep(flag("network-plugin", Str, Ignored), DOCKERSHIM), "1.24"),
    gone(dep(flag("cni-conf-dir", Str, Ignored), DOCKERSHIM), "1.24"),
    gone(dep(flag("cni-bin-dir", Str, Ignored), DOCKERSHIM), "1.24"),
    gone(dep(flag("cni-cache-dir", Str, Ignored), DOCKERSHIM), "1.24"),
    gone(dep(flag("network-plugin-mtu", Int, Ignored), DOCKERSHIM), "1.24"),
    flag("image-credential-provider-config", Str, Implemented),
    flag("image-credential-provider-bin-dir", Str, Implemented),
    // KubeletConfiguration flags.
    cfg("enable-server", Bool, "enableServer", Implemented),
    cfg("fail-swap-on", Bool, "failSwapOn", Implemented),
    cfg("pod-manifest-path", Str, "staticPodPath", Implemented),
    cfg("sync-frequency", Duration, "syncFrequency", Implemented),
    cfg("file-check-frequency", Duration, "fileCheckFrequency", Implemented),
    cfg("http-check-frequency", Duration, "httpCheckFrequency", Implemented),
    cfg("manifest-url", Str, "staticPodURL", Implemented),
    cfg("manifest-url-header", ColonMultimap, "staticPodURLHeader", Implemented),
    cfg("address", Ip, "address", Implemented),
    cfg("port", Int, "port", Implemented),
    cfg("read-only-port", Int, "readOnlyPort", Implemented),
    cfg("container-runtime-endpoint", Str, "containerRuntimeEndpoint", Implemented),
    cfg("image-service-endpoint", Str, "imageServiceEndpoint", NotYet),
    cfg("anonymous-auth", Bool, "authentication.anonymous.enabled", Implemented),
    cfg("authentication-token-webhook", Bool, "authentication.webhook.enabled", Implemented),
    cfg(
        "authentication-token-webhook-cache-ttl",
        Duration,
        "authentication.webhook.cacheTTL",
        Implemented,
    ),
    cfg("client-ca-file", Str, "authentication.x509.clientCAFile", Implemented),
    cfg("authorization-mode", Str, "authorization.mode", Implemented),
    cfg(
        "authorization-webhook-cache-authorized-ttl",
        Duration,
        "authorization.webhook.cacheAuthorizedTTL",
        Implemented,
    ),
    cfg(
        "authorization-webhook-cache-unauthorized-ttl",
        Duration,
        "authorization.webhook.cacheUnauthorizedTTL",
        Implemented,
    ),
    cfg("tls-cert-file", Str, "tlsCertFile", Implemented),
    cfg("tls-private-key-file", Str, "tlsPrivateKeyFile", Implemented),
    cfg("rotate-server-certificates", Bool, "serverTLSBootstrap", Implemented),
    cfg("tls-cipher-suites", StrSlice, "tlsCipherSuites", Implemented),
    cfg("tls-min-version", Str, "tlsMinVersion", Implemented),
    cfg("rotate-certificates", Bool, "rotateCertificates", Implemented),
    cfg("registry-qps", Int, "registryPullQPS", Implemented),
    cfg("registry-burst", Int, "registryBurst", Implemented),
    cfg("event-qps", Int, "eventRecordQPS", Implemented),
    cfg("event-burst", Int, "eventBurst", Implemented),
    cfg("enable-debugging-handlers", Bool, "enableDebuggingHandlers", Implemented),
    cfg("contention-profiling", Bool, "enableContentionProfiling", Ignored),
    cfg("healthz-port", Int, "healthzPort", Implemented),
    cfg("healthz-bind-address", Ip, "healthzBindAddress", Implemented),
    cfg("oom-score-adj", Int, "oomScoreAdj", Implemented),
    cfg("cluster-domain", Str, "clusterDomain", Implemented),
    cfg("volume-plugin-dir", Str, "volumePluginDir", NotYet),
    cfg("cluster-dns", StrSlice, "clusterDNS", Implemented),
    cfg(
        "streaming-connection-idle-timeout",
        Duration,
        "streamingConnectionIdleTimeout",
        Implemented,
    ),
    cfg("node-status-update-frequency", Duration, "nodeStatusUpdateFrequency", Implemented),
    cfg("minimum-image-ttl-duration", Duration, "imageMinimumGCAge", Implemented),
    cfg("image-gc-high-threshold", Int, "imageGCHighThresholdPercent", Implemented),
    cfg("image-gc-low-threshold", Int, "imageGCLowThresholdPercent", Implemented),
    cfg("volume-stats-agg-period", Duration, "volumeStatsAggPeriod", NotYet),
    cfg("feature-gates", BoolMap, "featureGates", Implemented),
    cfg("kubelet-cgroups", Str, "kubeletCgroups", NotYet),
    cfg("system-cgroups", Str, "systemCgroups", NotYet),
    not_deprecated(cfg("provider-id", Str, "providerID", Implemented)),
    cfg("cgroups-per-qos", Bool, "cgroupsPerQOS", Implemented),
    cfg("cgroup-driver", Str, "cgroupDriver", Implemented),
    cfg("cgroup-root", Str, "cgroupRoot", Implemented),
    cfg("cpu-manager-policy", Str, "cpuManagerPolicy", Implemented),
    cfg("cpu-manager-policy-options", MapNoSplit, "cpuManagerPolicyOptions", Implemented),
    cfg("cpu-manager-reconcile-period", Duration, "cpuManagerReconcilePeriod", Implemented),
    cfg("qos-reserved", Map, "qosReserved", NotYet),
    cfg("topology-manager-policy", Str, "topologyManagerPolicy", Implemented),
    cfg("runtime-request-timeout", Duration, "runtimeRequestTimeout", Implemented),
    cfg("hairpin-mode", Str, "hairpinMode", Ignored),
    cfg("max-pods", Int, "maxPods", Implemented),
    cfg("pod-cidr", Str, "podCIDR", NotYet),
    cfg("pod-max-pids", Int, "podPidsLimit", Implemented),
    cfg("resolv-conf", Str, "resolvConf", Implemented),
    cfg("runonce", Bool, "runOnce", NotYet),
    cfg("cpu-cfs-quota", Bool, "cpuCFSQuota", Implemented),
    cfg("cpu-cfs-quota-period", Duration, "cpuCFSQuotaPeriod", Implemented),
    cfg("enable-controller-attach-detach", Bool, "enableControllerAttachDetach", NotYet),
    cfg("make-iptables-util-chains", Bool, "makeIPTablesUtilChains", Ignored),
    dep(
        cfg("iptables-masquerade-bit", Int, "iptablesMasqueradeBit", Ignored),
        "This flag has no effect and will be removed in a future version.",
    ),
    dep(
        cfg("iptables-drop-bit", Int, "iptablesDropBit", Ignored),
        "This flag has no effect and will be removed in a future version.",
    ),
    cfg("container-log-max-size", Str, "containerLogMaxSize", Implemented),
    cfg("container-log-max-files", Int, "containerLogMaxFiles", Implemented),
    cfg("allowed-unsafe-sysctls", StrSlice, "allowedUnsafeSysctls", Implemented),
    cfg("node-status-max-images", Int, "nodeStatusMaxImages", Implemented),
    cfg("kernel-memcg-notification", Bool, "kernelMemcgNotification", Implemented),
    gone(
        dep(
            cfg("experimental-kernel-memcg-notification", Bool, "kernelMemcgNotification", Implemented),
            "Use kernelMemcgNotification configuration, this flag will be removed in 1.23.",
        ),
        "1.23",
    ),
    cfg("local-storage-capacity-isolation", Bool, "localStorageCapacityIsolation", NotYet),
    cfg("max-open-files", Int, "maxOpenFiles", Implemented),
    cfg("kube-api-content-type", Str, "contentType", Ignored),
    cfg("kube-api-qps", Int, "kubeAPIQPS", Implemented),
    cfg("kube-api-burst", Int, "kubeAPIBurst", Implemented),
    cfg("serialize-image-pulls", Bool, "serializeImagePulls", Implemented),
    cfg("eviction-hard", LangleMap, "evictionHard", Implemented),
    cfg("eviction-soft", LangleMap, "evictionSoft", Implemented),
    cfg("eviction-soft-grace-period", Map, "evictionSoftGracePeriod", Implemented),
    cfg(
        "eviction-pressure-transition-period",
        Duration,
        "evictionPressureTransitionPeriod",
        Implemented,
    ),
    cfg("eviction-max-pod-grace-period", Int, "evictionMaxPodGracePeriod", Implemented),
    cfg("eviction-minimum-reclaim", Map, "evictionMinimumReclaim", Implemented),
    cfg("pods-per-core", Int, "podsPerCore", Implemented),
    cfg("protect-kernel-defaults", Bool, "protectKernelDefaults", Implemented),
    cfg("reserved-cpus", Str, "reservedSystemCPUs", Implemented),
    cfg("topology-manager-scope", Str, "topologyManagerScope", Implemented),
    cfg(
        "topology-manager-policy-options",
        MapNoSplit,
        "topologyManagerPolicyOptions",
        Implemented,
    ),
    cfg("system-reserved", Map, "systemReserved", Implemented),
    cfg("kube-reserved", Map, "kubeReserved", Implemented),
    cfg("enforce-node-allocatable", StrSlice, "enforceNodeAllocatable", Implemented),
    cfg("system-reserved-cgroup", Str, "systemReservedCgroup", Implemented),
    cfg("kube-reserved-cgroup", Str, "kubeReservedCgroup", Implemented),
    cfg("memory-manager-policy", Str, "memoryManagerPolicy", NotYet),
    cfg("reserved-memory", ReservedMemory, "reservedMemory", NotYet),
    cfg("register-node", Bool, "registerNode", Implemented),
    cfg("register-with-taints", Taints, "registerWithTaints", Implemented),
    // Logging (component-base logs API); -v and --vmodule are not deprecated upstream.
    Spec {
        short: Some('v'),
        ..not_deprecated(cfg("v", Int, "logging.verbosity", Implemented))
    },
    flag("vmodule", Str, Implemented),
    not_deprecated(cfg("log-flush-frequency", Duration, "logging.flushFrequency", Implemented)),
    cfg("logging-format", Str, "logging.format", Implemented),
    cfg("log-json-split-stream", Bool, "logging.options.json.splitStream", Implemented),
    cfg("log-json-info-buffer-size", Str, "logging.options.json.infoBufferSize", Implemented),
    cfg("log-text-split-stream", Bool, "logging.options.text.splitStream", Implemented),
    cfg("log-text-info-buffer-size", Str, "logging.options.text.infoBufferSize", Implemented),
    gone(flag("experimental-logging-sanitization", Bool, Ignored), "1.26"),
    // klog's own flags (1.20-1.25); rkubelet always logs to stderr.
    gone(dep(flag("logtostderr", Bool, Implemented), KLOG), "1.26"),
    gone(dep(flag("alsologtostderr", Bool, Implemented), KLOG), "1.26"),
    gone(dep(flag("log-dir", Str, Ignored), KLOG), "1.26"),
    gone(dep(flag("log-file", Str, Ignored), KLOG), "1.26"),
    gone(dep(flag("log-file-max-size", Int, Ignored), KLOG), "1.26"),
    gone(dep(flag("add-dir-header", Bool, Ignored), KLOG), "1.26"),
    gone(dep(flag("skip-headers", Bool, Ignored), KLOG), "1.26"),
    gone(dep(flag("skip-log-headers", Bool, Ignored), KLOG), "1.26"),
    gone(dep(flag("one-output", Bool, Ignored), KLOG), "1.26"),
    gone(dep(flag("stderrthreshold", Str, Ignored), KLOG), "1.26"),
    gone(dep(flag("log-backtrace-at", Str, Ignored), KLOG), "1.26"),
    // cAdvisor's flags that leaked into the kubelet (1.20); rkubelet has no cAdvisor.
    gone(flag("docker-root", Str, Ignored), "1.24"),
    gone(flag("housekeeping-interval", Duration, Ignored), "1.24"),
    gone(dep(flag("application-metrics-count-limit", Int, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("boot-id-file", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("container-hints", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("containerd", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("docker", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("docker-env-metadata-whitelist", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("docker-only", Bool, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("docker-tls", Bool, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("docker-tls-ca", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("docker-tls-cert", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("docker-tls-key", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("enable-load-reader", Bool, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("event-storage-age-limit", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("event-storage-event-limit", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("global-housekeeping-interval", Duration, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("log-cadvisor-usage", Bool, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("machine-id-file", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("storage-driver-user", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("storage-driver-password", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("storage-driver-host", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("storage-driver-db", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("storage-driver-table", Str, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("storage-driver-secure", Bool, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("storage-driver-buffer-duration", Duration, Ignored), CADVISOR), "1.24"),
    gone(dep(flag("containerd-namespace", Str, Ignored), CADVISOR), "1.24"),
    gone(flag("azure-container-registry-config", Str, Ignored), "1.30"),
    // Global.
    flag("version", Str, Implemented),
    Spec {
        short: Some('h'),
        ..flag("help", Bool, Implemented)
    },
    // rkubelet only: upstream hardcodes /var/log/containers.
    flag("container-logs-dir", Str, Implemented),
    // Removed before 1.20: upstream rejects them, and so does rkubelet.
    removed("allow-privileged"),
    removed("cadvisor-port"),
    removed("api-servers"),
    removed("require-kubeconfig"),
    removed("auth-path"),
    removed("host-network-sources"),
    removed("host-pid-sources"),
    removed("host-ipc-sources"),
    removed("low-diskspace-threshold-mb"),
    removed("network-plugin-dir"),
    removed("resource-container"),
    removed("system-container"),
    removed("configure-cbr0"),
    removed("reconcile-cidr"),
    removed("babysit-daemons"),
    removed("experimental-fail-swap-on"),
    removed("enable-custom-metrics"),
    removed("rkt-path"),
    removed("rkt-api-endpoint"),
    removed("rkt-stage1-image"),
    removed("experimental-cri"),
    removed("enable-cri"),
    removed("google-json-key"),
    removed("docker-disable-shared-pid"),
    removed("experimental-qos-reserved"),
];

/// The spec for a normalised flag name.
pub fn spec(name: &str) -> Option<&'static Spec> {
    FLAGS.iter().find(|s| s.name == name && s.status != Removed)
}

/// A command-line problem, worded as upstream's pflag words it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlagError {
    #[error("unknown flag: --{0}")]
    Unknown(String),
    #[error("unknown shorthand flag: '{0}' in -{1}")]
    UnknownShorthand(char, String),
    #[error("flag needs an argument: --{0}")]
    NeedsArgument(String),
    #[error("invalid argument {value:?} for \"--{flag}\" flag: {reason}")]
    Invalid {
        flag: String,
        value: String,
        reason: String,
    },
    /// A non-flag argument; upstream: `unknown command <arg>`.
    #[error("unknown command {0}")]
    Positional(String),
}

/// What the command line said.
#[derive(Debug, Default)]
pub struct Parsed {
    /// Raw values of every flag given, in order (a bool given bare is `"true"`).
    pub values: BTreeMap<&'static str, Vec<String>>,
    /// Config-field values, in command-line order, for [`crate::config::Sources::flags`].
    pub fields: Vec<(String, Value)>,
    /// One line per flag given that upstream deprecates or rkubelet does not act on, naming it.
    pub notices: Vec<String>,
}

impl Parsed {
    /// The last value given for a flag.
    pub fn last(&self, name: &str) -> Option<&str> {
        self.values
            .get(name)
            .and_then(|v| v.last())
            .map(String::as_str)
    }

    pub fn given(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    /// A bool flag's value (`Some(true)` for a bare `--flag`).
    pub fn bool(&self, name: &str) -> Option<bool> {
        self.last(name).and_then(|v| parse_bool(v).ok())
    }
}

/// pflag's `WordSepNormalizeFunc`: `_` and `-` are the same.
fn normalize(name: &str) -> String {
    name.replace('_', "-")
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(v: &str) -> Result<bool, String> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("strconv.ParseBool: parsing {v:?}: invalid syntax")),
    }
}

/// Parses `args` (without the program name) as upstream's kubelet does.
pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Parsed, FlagError> {
    let mut out = Parsed::default();
    let mut fields: Vec<(String, Value)> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_ref();
        i += 1;
        if arg == "--" {
            if let Some(rest) = args.get(i) {
                return Err(FlagError::Positional(rest.as_ref().to_string()));
            }
            break;
        }
        let (spec, inline) = if let Some(long) = arg.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let name = normalize(name);
            let spec = spec(&name).ok_or(FlagError::Unknown(name))?;
            (spec, value)
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let mut chars = short.chars();
            let c = chars.next().unwrap_or('-');
            let rest = chars.as_str();
            let spec = FLAGS
                .iter()
                .find(|s| s.short == Some(c))
                .ok_or_else(|| FlagError::UnknownShorthand(c, short.to_string()))?;
            let value = match rest.strip_prefix('=') {
                Some(v) => Some(v.to_string()),
                None if !rest.is_empty() => Some(rest.to_string()),
                None => None,
            };
            (spec, value)
        } else {
            return Err(FlagError::Positional(arg.to_string()));
        };
        let value = match inline {
            Some(v) => v,
            // pflag: bool flags (and --version, NoOptDefVal "true") never take the next word.
            None if spec.kind == Bool || spec.name == "version" => "true".into(),
            None => match args.get(i) {
                Some(v) => {
                    i += 1;
                    v.as_ref().to_string()
                }
                None => return Err(FlagError::NeedsArgument(spec.name.into())),
            },
        };
        let json = convert(spec, &value)?;
        if !out.values.contains_key(spec.name) {
            if let Some(n) = notice(spec, &value) {
                out.notices.push(n);
            }
        }
        let first = !out.values.contains_key(spec.name);
        out.values.entry(spec.name).or_default().push(value.clone());
        if let (Target::Field(path), Some(json)) = (spec.target, json) {
            accumulate(&mut fields, spec, path, json, first);
        }
    }
    out.fields = fields;
    Ok(out)
}

/// Map and slice flags accumulate over repeats (the first use replaces the default), scalars
/// keep the last value.
fn accumulate(
    fields: &mut Vec<(String, Value)>,
    spec: &Spec,
    path: &str,
    json: Value,
    first: bool,
) {
    let existing = fields.iter_mut().find(|(p, _)| p == path);
    match (existing, json) {
        (Some((_, Value::Object(have))), Value::Object(new)) if !first => {
            for (k, v) in new {
                match (have.get_mut(&k), v) {
                    (Some(Value::Array(a)), Value::Array(b)) if spec.kind == ColonMultimap => {
                        a.extend(b)
                    }
                    (_, v) => {
                        have.insert(k, v);
                    }
                }
            }
        }
        (Some((_, Value::Array(have))), Value::Array(new)) if !first => have.extend(new),
        (Some((_, slot)), v) => *slot = v,
        (None, v) => fields.push((path.to_string(), v)),
    }
}

/// The line printed for a flag given on the command line, if any.
fn notice(spec: &Spec, value: &str) -> Option<String> {
    let unimplemented = match (spec.name, spec.status) {
        // rkubelet always logs to stderr: only =false is a request it does not follow.
        ("logtostderr", _) => parse_bool(value) == Ok(false),
        (_, Implemented) => false,
        _ => true,
    };
    let what = match spec.status {
        Ignored => "has no effect in rkubelet",
        _ => "is not implemented by rkubelet",
    };
    let short = match spec.status {
        Ignored => "no effect",
        _ => "not implemented",
    };
    match (spec.deprecated, unimplemented) {
        (Some(msg), true) => Some(format!(
            "Flag --{} has been deprecated, {msg} (rkubelet: {short}; ignored)",
            spec.name
        )),
        (Some(msg), false) => Some(format!("Flag --{} has been deprecated, {msg}", spec.name)),
        (None, true) => Some(format!("Flag --{} {what}; ignored", spec.name)),
        (None, false) => None,
    }
}

fn invalid(spec: &Spec, value: &str, reason: impl Into<String>) -> FlagError {
    FlagError::Invalid {
        flag: spec.name.into(),
        value: value.into(),
        reason: reason.into(),
    }
}

/// Checks a value and, for config-field flags, turns it into the field's JSON.
fn convert(spec: &Spec, value: &str) -> Result<Option<Value>, FlagError> {
    let err = |r: String| invalid(spec, value, r);
    let pairs = |sep: char, split: bool| -> Result<Map<String, Value>, FlagError> {
        let mut m = Map::new();
        let items: Vec<&str> = if split {
            value.split(',').collect()
        } else {
            vec![value]
        };
        for item in items.into_iter().map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = item
                .split_once(sep)
                .ok_or_else(|| err(format!("malformed pair, expect string{sep}string")))?;
            m.insert(k.trim().to_string(), Value::String(v.trim().to_string()));
        }
        Ok(m)
    };
    let v = match spec.kind {
        Bool => Value::Bool(parse_bool(value).map_err(err)?),
        Str => Value::String(value.to_string()),
        Int => Value::from(value.parse::<i64>().map_err(|_| {
            err(format!(
                "strconv.ParseInt: parsing {value:?}: invalid syntax"
            ))
        })?),
        Float => Value::from(value.parse::<f64>().map_err(|_| {
            err(format!(
                "strconv.ParseFloat: parsing {value:?}: invalid syntax"
            ))
        })?),
        Duration => {
            let (neg, body) = match value.strip_prefix('-') {
                Some(b) => ("-", b),
                None => ("", value),
            };
            let d = crate::config::parse_duration(body).map_err(|e| err(format!("time: {e}")))?;
            Value::String(format!("{neg}{}", crate::config::format_duration(d)))
        }
        Ip => {
            value
                .parse::<std::net::IpAddr>()
                .map_err(|_| err(format!("{value:?} is not a valid IP address")))?;
            Value::String(value.to_string())
        }
        StrSlice => Value::Array(
            value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_string()))
                .collect(),
        ),
        Map => Value::Object(pairs('=', true)?),
        MapNoSplit => Value::Object(pairs('=', false)?),
        LangleMap => Value::Object(pairs('<', true)?),
        BoolMap => {
            let mut m = Map::new();
            for (k, v) in pairs('=', true)? {
                let s = v.as_str().unwrap_or_default();
                let b = parse_bool(s)
                    .map_err(|e| err(format!("invalid value of {k}: {s}, err: {e}")))?;
                m.insert(k, Value::Bool(b));
            }
            Value::Object(m)
        }
        ColonMultimap => {
            // Upstream `ColonSeparatedMultimapStringString`: a key repeated within one value
            // keeps every value too (`a:x,a:y`), so not through `pairs`' map.
            let mut m = Map::new();
            for item in value.split(',').filter(|s| !s.is_empty()) {
                let (k, v) = item
                    .split_once(':')
                    .ok_or_else(|| err("malformed pair, expect string:string".into()))?;
                let v = Value::String(v.trim().to_string());
                match m
                    .entry(k.trim().to_string())
                    .or_insert_with(|| Value::Array(Vec::new()))
                {
                    Value::Array(a) => a.push(v),
                    other => *other = Value::Array(vec![v]),
                }
            }
            Value::Object(m)
        }
        Taints => {
            let taints = crate::node::parse_taints(value).map_err(err)?;
            serde_json::to_value(taints).map_err(|e| err(e.to_string()))?
        }
        ReservedMemory => {
            let (numa, limits) = value
                .split_once(':')
                .ok_or_else(|| err("the reserved memory has incorrect format, expected numaNodeID:type=quantity[,type=quantity...]".into()))?;
            let numa: i64 = numa
                .trim()
                .parse()
                .map_err(|_| err(format!("failed to parse the NUMA node ID {numa:?}")))?;
            let mut m = Map::new();
            for item in limits.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let (k, q) = item
                    .split_once('=')
                    .ok_or_else(|| err("malformed pair, expect string=string".into()))?;
                m.insert(k.to_string(), Value::String(q.to_string()));
            }
            Value::Array(vec![serde_json::json!({"numaNode": numa, "limits": m})])
        }
    };
    Ok(match spec.target {
        Target::Field(_) => Some(v),
        Target::Flag => None,
    })
}

/// Upstream `kubeletapis.KubeletLabels()`: the `kubernetes.io` labels a kubelet may set itself.
const KUBELET_LABELS: &[&str] = &[
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "kubernetes.io/arch",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];
/// Upstream `kubeletapis.KubeletLabelNamespaces()`.
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

/// Upstream `ValidateKubeletFlags`: `--node-labels` may not claim `kubernetes.io`/`k8s.io`
/// labels outside the kubelet's own set (NodeRestriction would refuse them anyway).
pub fn validate_node_labels(labels: &BTreeMap<String, String>) -> Result<(), String> {
    let in_ns = |ns: &str, base: &str| ns == base || ns.ends_with(&format!(".{base}"));
    let unknown: Vec<&str> = labels
        .keys()
        .map(String::as_str)
        .filter(|k| {
            let ns = k.split_once('/').map(|(ns, _)| ns).unwrap_or_default();
            (in_ns(ns, "kubernetes.io") || in_ns(ns, "k8s.io"))
                && !KUBELET_LABELS.contains(k)
                && !KUBELET_LABEL_NAMESPACES.iter().any(|b| in_ns(ns, b))
        })
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(format!(
        "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [{}]\n\
         --node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix ({}) \
         or be in the specifically allowed set ({})",
        unknown.join(" "),
        KUBELET_LABEL_NAMESPACES.join(", "),
        KUBELET_LABELS.join(", ")
    ))
}

/// `docs/flags.md`: every flag and config field with its status, from the tables the parser and
/// the config loader use.
pub fn markdown() -> String {
    let mut s = String::from(
        "# rkubelet command line and KubeletConfiguration fields\n\n\
         Generated from `crates/kubelet-config/src/flags.rs` and `crates/kubelet-config/src/config/schema.rs`\n\
         (`cargo test -p rkubelet-config --lib flags::tests::docs_in_sync` fails when this file is\n\
         stale; `UPDATE_DOCS=1` rewrites it).\n\n\
         Status: **implemented** takes effect as upstream; **not yet** and **accepted-ignored** are\n\
         accepted with one warning naming the flag or field (ignored: means nothing without\n\
         dockershim/cAdvisor/cloud providers); **removed** flags (gone before 1.20) are rejected\n\
         with upstream's `unknown flag: --x`. Flags upstream deprecates print upstream's\n\
         `Flag --x has been deprecated, ...` line when used. \"Upstream removed in\" flags are kept\n\
         so 1.20-era unit files keep starting.\n\n\
         `evictionHard` (`--eviction-hard`) is acted on by the eviction manager, and its\n\
         `memory.available` and `nodefs.available` thresholds are also held back from node\n\
         allocatable as upstream's `GetNodeAllocatableReservation` does.\n\n\
         Precedence as upstream: flags > `--config-dir` drop-ins (`*.conf`, lexical order, JSON\n\
         merge patch) > `--config` file > defaults (the flags' legacy defaults without `--config`:\n\
         read-only port 10255, anonymous auth on, webhook authn off, AlwaysAllow).\n\n\
         ## Flags\n\n\
         | flag | config field | status | upstream deprecated | upstream removed in |\n\
         |---|---|---|---|---|\n",
    );
    for f in FLAGS {
        let name = match f.short {
            Some(c) => format!("`-{c}`, `--{}`", f.name),
            None => format!("`--{}`", f.name),
        };
        let field = match f.target {
            Target::Field(p) => format!("`{p}`"),
            Target::Flag => String::new(),
        };
        let dep = if f.deprecated.is_some() { "yes" } else { "" };
        s.push_str(&format!(
            "| {name} | {field} | {} | {dep} | {} |\n",
            f.status.as_str(),
            f.removed_in.unwrap_or_default()
        ));
    }
    s.push_str(
        "\n## KubeletConfiguration (kubelet.config.k8s.io/v1beta1) fields\n\n\
         | field | default | status |\n|---|---|---|\n",
    );
    for f in crate::config::schema::FIELDS {
        let default = if f.default.is_empty() {
            String::new()
        } else {
            format!("`{}`", f.default)
        };
        s.push_str(&format!(
            "| `{}` | {default} | {} |\n",
            f.path,
            f.status.as_str()
        ));
    }
    s
}

#[cfg(test)]
mod tests;
