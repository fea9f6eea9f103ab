//! Every field of upstream's `KubeletConfiguration` v1beta1 (`k8s.io/kubelet/config/v1beta1`
//! types.go, defaults from `pkg/kubelet/apis/config/v1beta1/defaults.go`), with the type a file
//! must give it and what rkubelet does with it.
//!
//! One table drives four things that must agree: the defaults tree `/configz` starts from, the
//! per-file type check (wrong types are errors, unknown fields warnings as upstream's lenient
//! v1beta1 decoder), the "not supported yet" warnings, and `docs/flags.md`.

use serde_json::{Map, Value};

/// What rkubelet does with a field or flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Takes effect as upstream.
    Implemented,
    /// Planned; accepted with a warning naming it.
    NotYet,
    /// Means nothing for rkubelet (dockershim, cAdvisor, cloud providers, iptables...): accepted
    /// with a warning naming it.
    Ignored,
    /// Upstream removed it before 1.20: rejected as upstream does (`unknown flag: --x`).
    Removed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Implemented => "implemented",
            Status::NotYet => "not yet",
            Status::Ignored => "accepted-ignored",
            Status::Removed => "removed",
        }
    }
}

/// The JSON type a field takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bool,
    Int,
    Float,
    Str,
    /// A Go duration string (`1m0s`); negative values allowed where upstream allows them.
    Duration,
    /// A resource quantity: a string or a number.
    Quantity,
    StrList,
    /// `map[string]string`.
    StrMap,
    /// `map[string]bool` (featureGates).
    BoolMap,
    /// `map[string][]string` (staticPodURLHeader).
    StrListMap,
    /// A nested struct: its fields are the entries below its path.
    Struct,
    /// A list of structs (registerWithTaints, reservedMemory, ...), checked as a list only.
    List,
}

/// One field of the file.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// Dotted JSON path, e.g. `authentication.webhook.cacheTTL`.
    pub path: &'static str,
    pub kind: Kind,
    /// Upstream's default as JSON text; empty for none (omitted / zero value).
    pub default: &'static str,
    pub status: Status,
}

const fn f(path: &'static str, kind: Kind, default: &'static str, status: Status) -> Field {
    Field {
        path,
        kind,
        default,
        status,
    }
}

use Kind::*;
use Status::*;

/// The fields, in types.go order. Defaults are those of v1.33 (the release rkubelet reports as
/// its kubeletVersion); fields newer upstream releases added are accepted too.
pub const FIELDS: &[Field] = &[
    f("enableServer", Bool, "true", Implemented),
    f("staticPodPath", Str, "", Implemented),
    f("podLogsDir", Str, r#""/var/log/pods""#, Implemented),
    f("syncFrequency", Duration, r#""1m0s""#, Implemented),
    f("fileCheckFrequency", Duration, r#""20s""#, Implemented),
    f("httpCheckFrequency", Duration, r#""20s""#, Implemented),
    f("staticPodURL", Str, "", Implemented),
    f("staticPodURLHeader", StrListMap, "", Implemented),
    f("address", Str, r#""0.0.0.0""#, Implemented),
    f("port", Int, "10250", Implemented),
    f("readOnlyPort", Int, "", Implemented),
    f("tlsCertFile", Str, "", Implemented),
    f("tlsPrivateKeyFile", Str, "", Implemented),
    f("tlsCipherSuites", StrList, "", Implemented),
    f("tlsMinVersion", Str, "", Implemented),
    // TLS bootstrap and rotation (certificate/).
    f("rotateCertificates", Bool, "", Implemented),
    f("serverTLSBootstrap", Bool, "", Implemented),
    f("authentication", Struct, "", Implemented),
    f("authentication.x509", Struct, "", Implemented),
    f("authentication.x509.clientCAFile", Str, "", Implemented),
    f("authentication.webhook", Struct, "", Implemented),
    f("authentication.webhook.enabled", Bool, "true", Implemented),
    f(
        "authentication.webhook.cacheTTL",
        Duration,
        r#""2m0s""#,
        Implemented,
    ),
    f("authentication.anonymous", Struct, "", Implemented),
    f(
        "authentication.anonymous.enabled",
        Bool,
        "false",
        Implemented,
    ),
    f("authorization", Struct, "", Implemented),
    f("authorization.mode", Str, r#""Webhook""#, Implemented),
    f("authorization.webhook", Struct, "", Implemented),
    f(
        "authorization.webhook.cacheAuthorizedTTL",
        Duration,
        r#""5m0s""#,
        Implemented,
    ),
    f(
        "authorization.webhook.cacheUnauthorizedTTL",
        Duration,
        r#""30s""#,
        Implemented,
    ),
    f("registryPullQPS", Int, "5", Implemented),
    f("registryBurst", Int, "10", Implemented),
    f("imagePullCredentialsVerificationPolicy", Str, "", NotYet),
    f("preloadedImagesVerificationAllowlist", StrList, "", NotYet),
    f("eventRecordQPS", Int, "50", Implemented),
    f("eventBurst", Int, "100", Implemented),
    f("enableDebuggingHandlers", Bool, "true", Implemented),
    f("enableContentionProfiling", Bool, "", Ignored),
    f("healthzPort", Int, "10248", Implemented),
    f("healthzBindAddress", Str, r#""127.0.0.1""#, Implemented),
    f("oomScoreAdj", Int, "-999", Implemented),
    f("clusterDomain", Str, "", Implemented),
    f("clusterDNS", StrList, "", Implemented),
    f(
        "streamingConnectionIdleTimeout",
        Duration,
        r#""4h0m0s""#,
        Implemented,
    ),
    f(
        "nodeStatusUpdateFrequency",
        Duration,
        r#""10s""#,
        Implemented,
    ),
    f(
        "nodeStatusReportFrequency",
        Duration,
        r#""5m0s""#,
        Implemented,
    ),
    f("nodeLeaseDurationSeconds", Int, "40", Implemented),
    f("imageMinimumGCAge", Duration, r#""2m0s""#, Implemented),
    f("imageMaximumGCAge", Duration, "", Implemented),
    f("imageGCHighThresholdPercent", Int, "85", Implemented),
    f("imageGCLowThresholdPercent", Int, "80", Implemented),
    f("volumeStatsAggPeriod", Duration, r#""1m0s""#, NotYet),
    f("kubeletCgroups", Str, "", NotYet),
    f("systemCgroups", Str, "", NotYet),
    f("cgroupRoot", Str, "", Implemented),
    f("cgroupsPerQOS", Bool, "true", Implemented),
    f("cgroupDriver", Str, r#""cgroupfs""#, Implemented),
    f("cpuManagerPolicy", Str, r#""none""#, Implemented),
    f("singleProcessOOMKill", Bool, "", NotYet),
    f("cpuManagerPolicyOptions", StrMap, "", Implemented),
    f(
        "cpuManagerReconcilePeriod",
        Duration,
        r#""10s""#,
        Implemented,
    ),
    f("memoryManagerPolicy", Str, r#""None""#, NotYet),
    f("topologyManagerPolicy", Str, r#""none""#, Implemented),
    f("topologyManagerScope", Str, r#""container""#, Implemented),
    f("topologyManagerPolicyOptions", StrMap, "", Implemented),
    f("qosReserved", StrMap, "", NotYet),
    f("runtimeRequestTimeout", Duration, r#""2m0s""#, Implemented),
    f("hairpinMode", Str, r#""promiscuous-bridge""#, Ignored),
    f("maxPods", Int, "110", Implemented),
    f("podCIDR", Str, "", NotYet),
    f("podPidsLimit", Int, "-1", Implemented),
    f("resolvConf", Str, r#""/etc/resolv.conf""#, Implemented),
    f("runOnce", Bool, "", NotYet),
    f("cpuCFSQuota", Bool, "true", Implemented),
    f("cpuCFSQuotaPeriod", Duration, r#""100ms""#, Implemented),
    f("nodeStatusMaxImages", Int, "50", Implemented),
    f("maxOpenFiles", Int, "1000000", Implemented),
    f(
        "contentType",
        Str,
        r#""application/vnd.kubernetes.protobuf""#,
        Ignored,
    ),
    f("kubeAPIQPS", Int, "50", Implemented),
    f("kubeAPIBurst", Int, "100", Implemented),
    f("serializeImagePulls", Bool, "true", Implemented),
    f("maxParallelImagePulls", Int, "", Implemented),
    // Upstream's DefaultEvictionHard (Linux), applied when the file does not set the map.
    f(
        "evictionHard",
        StrMap,
        r#"{"imagefs.available":"15%","imagefs.inodesFree":"5%","memory.available":"100Mi","nodefs.available":"10%","nodefs.inodesFree":"5%"}"#,
        Implemented,
    ),
    f("evictionSoft", StrMap, "", Implemented),
    f("evictionSoftGracePeriod", StrMap, "", Implemented),
    f(
        "evictionPressureTransitionPeriod",
        Duration,
        r#""5m0s""#,
        Implemented,
    ),
    f("evictionMaxPodGracePeriod", Int, "", Implemented),
    f("evictionMinimumReclaim", StrMap, "", Implemented),
    f("mergeDefaultEvictionSettings", Bool, "false", Implemented),
    f("podsPerCore", Int, "", Implemented),
    f("enableControllerAttachDetach", Bool, "true", NotYet),
    f("protectKernelDefaults", Bool, "", Implemented),
    f("makeIPTablesUtilChains", Bool, "true", Ignored),
    f("iptablesMasqueradeBit", Int, "14", Ignored),
    f("iptablesDropBit", Int, "15", Ignored),
    f("featureGates", BoolMap, "", Implemented),
    f("failSwapOn", Bool, "true", Implemented),
    f("memorySwap", Struct, "", NotYet),
    f("memorySwap.swapBehavior", Str, "", NotYet),
    f("containerLogMaxSize", Str, r#""10Mi""#, Implemented),
    f("containerLogMaxFiles", Int, "5", Implemented),
    f("containerLogMaxWorkers", Int, "1", NotYet),
    f(
        "containerLogMonitorInterval",
        Duration,
        r#""10s""#,
        Implemented,
    ),
    f(
        "configMapAndSecretChangeDetectionStrategy",
        Str,
        r#""Watch""#,
        Implemented,
    ),
    f("systemReserved", StrMap, "", Implemented),
    f("kubeReserved", StrMap, "", Implemented),
    f("reservedSystemCPUs", Str, "", Implemented),
    f("showHiddenMetricsForVersion", Str, "", NotYet),
    f("systemReservedCgroup", Str, "", Implemented),
    f("kubeReservedCgroup", Str, "", Implemented),
    f(
        "enforceNodeAllocatable",
        StrList,
        r#"["pods"]"#,
        Implemented,
    ),
    f("allowedUnsafeSysctls", StrList, "", Implemented),
    f(
        "volumePluginDir",
        Str,
        r#""/usr/libexec/kubernetes/kubelet-plugins/volume/exec/""#,
        NotYet,
    ),
    f("providerID", Str, "", Implemented),
    f("kernelMemcgNotification", Bool, "", Implemented),
    f("logging", Struct, "", Implemented),
    f("logging.format", Str, r#""text""#, Implemented),
    f("logging.flushFrequency", Duration, r#""5s""#, Implemented),
    f("logging.verbosity", Int, "0", Implemented),
    f("logging.vmodule", List, "", Implemented),
    f("logging.options", Struct, "", Implemented),
    f("logging.options.json", Struct, "", Implemented),
    f("logging.options.json.splitStream", Bool, "", Implemented),
    f(
        "logging.options.json.infoBufferSize",
        Quantity,
        r#""0""#,
        Implemented,
    ),
    f("logging.options.text", Struct, "", Implemented),
    f("logging.options.text.splitStream", Bool, "", Implemented),
    f(
        "logging.options.text.infoBufferSize",
        Quantity,
        r#""0""#,
        Implemented,
    ),
    f("enableSystemLogHandler", Bool, "true", NotYet),
    f("enableSystemLogQuery", Bool, "", NotYet),
    f("shutdownGracePeriod", Duration, r#""0s""#, NotYet),
    f(
        "shutdownGracePeriodCriticalPods",
        Duration,
        r#""0s""#,
        NotYet,
    ),
    f("shutdownGracePeriodByPodPriority", List, "", NotYet),
    f("crashLoopBackOff", Struct, "", Implemented),
    f(
        "crashLoopBackOff.maxContainerRestartPeriod",
        Duration,
        "",
        Implemented,
    ),
    f("reservedMemory", List, "", NotYet),
    f("enableProfilingHandler", Bool, "true", NotYet),
    f("enableDebugFlagsHandler", Bool, "true", NotYet),
    f("seccompDefault", Bool, "false", Implemented),
    f("memoryThrottlingFactor", Float, "0.9", NotYet),
    f("memoryReservationPolicy", Str, "", NotYet),
    f("registerWithTaints", List, "", Implemented),
    f("registerNode", Bool, "true", Implemented),
    f("tracing", Struct, "", NotYet),
    f("tracing.endpoint", Str, "", NotYet),
    f("tracing.samplingRatePerMillion", Int, "", NotYet),
    f("localStorageCapacityIsolation", Bool, "true", NotYet),
    f(
        "containerRuntimeEndpoint",
        Str,
        r#""unix:///run/containerd/containerd.sock""#,
        Implemented,
    ),
    f("imageServiceEndpoint", Str, "", NotYet),
    f("failCgroupV1", Bool, "false", NotYet),
    f("userNamespaces", Struct, "", NotYet),
    f("userNamespaces.idsPerPod", Int, "", NotYet),
    f("podHousekeepingPeriod", Duration, r#""2s""#, Implemented),
];

/// The entry for a dotted path.
pub fn field(path: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.path == path)
}

/// Upstream's v1beta1 defaults as a JSON tree (what an empty `KubeletConfiguration` decodes to).
pub fn defaults_tree() -> Value {
    let mut root = Value::Object(Map::new());
    for fld in FIELDS {
        let v = if fld.kind == Struct {
            Value::Object(Map::new())
        } else if fld.default.is_empty() {
            continue;
        } else {
            match serde_json::from_str(fld.default) {
                Ok(v) => v,
                Err(_) => continue,
            }
        };
        set_path(&mut root, fld.path, v);
    }
    root
}

/// Sets `path` (dotted) in `root`, creating intermediate objects.
pub fn set_path(root: &mut Value, path: &str, v: Value) {
    let mut cur = root;
    let mut parts = path.split('.').peekable();
    while let Some(p) = parts.next() {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let Some(obj) = cur.as_object_mut() else {
            return;
        };
        if parts.peek().is_none() {
            obj.insert(p.to_string(), v);
            return;
        }
        cur = obj
            .entry(p.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// What checking one layer (a file or drop-in) found.
#[derive(Debug, Default)]
pub struct Checked {
    /// Type errors, `path: message`.
    pub errors: Vec<String>,
    /// Unknown fields, by path (upstream's lenient decoder logs and drops them).
    pub unknown: Vec<String>,
    /// Leaf paths the layer sets, for "not supported yet" warnings.
    pub set: Vec<String>,
}

/// Checks `obj` (a layer's top-level mapping, `kind` and `apiVersion` removed) against the
/// schema, removing unknown and wrongly typed fields so only good values are merged.
pub fn check_layer(obj: &mut Map<String, Value>, prefix: &str, out: &mut Checked) {
    let keys: Vec<String> = obj.keys().cloned().collect();
    for key in keys {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let Some(fld) = field(&path) else {
            out.unknown.push(path);
            obj.remove(&key);
            continue;
        };
        let Some(v) = obj.get_mut(&key) else { continue };
        if v.is_null() {
            // Go's decoder leaves a null field at its zero value: upstream then defaults it.
            obj.remove(&key);
            continue;
        }
        if fld.kind == Struct {
            match v.as_object_mut() {
                Some(m) => check_layer(m, &path, out),
                None => {
                    out.errors
                        .push(format!("{path}: must be a mapping, got {}", short(v)));
                    obj.remove(&key);
                }
            }
            continue;
        }
        match type_error(fld.kind, v) {
            Some(e) => {
                out.errors.push(format!("{path}: {e}"));
                obj.remove(&key);
            }
            None => out.set.push(path),
        }
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 60 {
        format!("{}...", &s[..57])
    } else {
        s
    }
}

fn type_error(kind: Kind, v: &Value) -> Option<String> {
    let ok = match kind {
        Bool => v.is_boolean(),
        Int => v.as_i64().is_some(),
        Float => v.is_number(),
        Str => v.is_string(),
        Duration => match v.as_str() {
            Some(s) => return super::parse_duration(s.strip_prefix('-').unwrap_or(s)).err(),
            None => false,
        },
        Quantity => v.is_string() || v.is_number(),
        StrList => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
        StrMap => v
            .as_object()
            .is_some_and(|m| m.values().all(Value::is_string)),
        BoolMap => v
            .as_object()
            .is_some_and(|m| m.values().all(Value::is_boolean)),
        StrListMap => v.as_object().is_some_and(|m| {
            m.values()
                .all(|l| l.as_array().is_some_and(|a| a.iter().all(Value::is_string)))
        }),
        List => v.is_array(),
        Struct => v.is_object(),
    };
    (!ok).then(|| {
        let what = match kind {
            Bool => "must be a boolean",
            Int => "must be an integer",
            Float => "must be a number",
            Str => "must be a string",
            Duration => "must be a duration string such as \"1m0s\"",
            Quantity => "must be a quantity",
            StrList => "must be a list of strings",
            StrMap => "must be a mapping of strings to strings",
            BoolMap => "must be a mapping of names to booleans",
            StrListMap => "must be a mapping of strings to lists of strings",
            List => "must be a list",
            Struct => "must be a mapping",
        };
        format!("{what}, got {}", short(v))
    })
}

/// Where a layer goes into the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// The main `--config` file over the defaults: structs merge, every other field replaces.
    File,
    /// A `--config-dir` drop-in: RFC 7386 JSON merge patch, as upstream (maps merge key-wise,
    /// lists replace).
    DropIn,
}

/// Applies a checked layer to `base`.
pub fn merge(base: &mut Value, layer: &Map<String, Value>, how: Merge, prefix: &str) {
    if !base.is_object() {
        *base = Value::Object(Map::new());
    }
    let Some(b) = base.as_object_mut() else {
        return;
    };
    for (k, v) in layer {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        let is_struct = field(&path).is_some_and(|f| f.kind == Struct);
        let is_map = v.is_object();
        if is_struct || (how == Merge::DropIn && is_map) {
            if let Some(m) = v.as_object() {
                let slot = b
                    .entry(k.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                merge(slot, m, how, &path);
                continue;
            }
        }
        b.insert(k.clone(), v.clone());
    }
}

/// Reads `path` from `tree`.
pub fn get_path<'a>(tree: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(tree, |cur, p| cur.get(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_nested_field_has_its_struct_and_paths_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for fld in FIELDS {
            assert!(seen.insert(fld.path), "duplicate {}", fld.path);
            if let Some((parent, _)) = fld.path.rsplit_once('.') {
                assert_eq!(field(parent).map(|p| p.kind), Some(Struct), "{}", fld.path);
            }
            if !fld.default.is_empty() {
                let v: Value = serde_json::from_str(fld.default).expect(fld.path);
                assert!(type_error(fld.kind, &v).is_none(), "{}", fld.path);
            }
        }
    }

    #[test]
    fn defaults_tree_has_upstream_shape() {
        let t = defaults_tree();
        assert_eq!(t["syncFrequency"], "1m0s");
        assert_eq!(t["authentication"]["webhook"]["cacheTTL"], "2m0s");
        assert_eq!(t["authentication"]["anonymous"]["enabled"], false);
        assert_eq!(t["evictionHard"]["memory.available"], "100Mi");
        assert_eq!(t["logging"]["options"]["json"]["infoBufferSize"], "0");
        assert!(t.get("staticPodPath").is_none());
    }

    #[test]
    fn drop_in_merge_patch_merges_maps_and_replaces_lists() {
        let mut base = defaults_tree();
        let file: Value = serde_json::json!({"featureGates": {"A": true}, "clusterDNS": ["10.0.0.10"],
            "evictionHard": {"memory.available": "1Gi"}});
        merge(&mut base, file.as_object().unwrap(), Merge::File, "");
        // The file replaces the whole evictionHard map, as upstream's decoder does.
        assert_eq!(
            base["evictionHard"],
            serde_json::json!({"memory.available": "1Gi"})
        );
        let drop: Value = serde_json::json!({"featureGates": {"B": false}, "clusterDNS": ["10.0.0.11"],
            "authentication": {"webhook": {"enabled": false}}});
        merge(&mut base, drop.as_object().unwrap(), Merge::DropIn, "");
        assert_eq!(
            base["featureGates"],
            serde_json::json!({"A": true, "B": false})
        );
        assert_eq!(base["clusterDNS"], serde_json::json!(["10.0.0.11"]));
        assert_eq!(base["authentication"]["webhook"]["enabled"], false);
        assert_eq!(base["authentication"]["webhook"]["cacheTTL"], "2m0s");
    }
}
