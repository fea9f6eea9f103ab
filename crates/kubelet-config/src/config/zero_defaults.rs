//! Zero values in a config file count as unset, as upstream's v1beta1 defaulting treats them.
//!
//! Upstream decodes `--config` into `v1beta1.KubeletConfiguration`, whose non-pointer fields
//! cannot tell "absent" from "zero", and `SetDefaults_KubeletConfiguration`
//! (pkg/kubelet/apis/config/v1beta1/defaults.go) replaces those zeros with the defaults. Tools
//! write such files: kubeadm 1.20 writes every Duration as `0s` (`syncFrequency: 0s`,
//! `runtimeRequestTimeout: 0s`, ...) and relies on that defaulting. rkubelet keeps the config as a
//! JSON tree over its defaults, so without this pass those zeros would stay and fail validation
//! ("syncFrequency: must be greater than 0") where upstream starts.
//!
//! Only the non-pointer fields upstream defaults on zero are listed; pointer fields (`healthzPort`,
//! `imageGCHighThresholdPercent`, `kubeAPIQPS`, ...) keep an explicit zero, as upstream does.
//! Applied to the merged file and drop-in layers, before the flags: an explicit `--sync-frequency=0`
//! is still refused, as upstream's flag path does not default. The node status fields
//! (`nodeStatusUpdateFrequency`, `nodeStatusReportFrequency` with its backward-compatibility rule,
//! `nodeLeaseDurationSeconds`) are defaulted by [`super::node_status::apply_defaults`], called
//! right after this pass with the same idea of "set": a file or drop-in, never a flag.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use super::duration::parse_duration;
use super::schema;

/// Durations upstream defaults when `== zeroDuration`, with the default it gives them.
const DURATIONS: &[(&str, &str)] = &[
    ("syncFrequency", "1m0s"),
    ("fileCheckFrequency", "20s"),
    ("httpCheckFrequency", "20s"),
    ("authentication.webhook.cacheTTL", "2m0s"),
    ("authorization.webhook.cacheAuthorizedTTL", "5m0s"),
    ("authorization.webhook.cacheUnauthorizedTTL", "30s"),
    ("streamingConnectionIdleTimeout", "4h0m0s"),
    ("imageMinimumGCAge", "2m0s"),
    ("volumeStatsAggPeriod", "1m0s"),
    ("cpuManagerReconcilePeriod", "10s"),
    ("runtimeRequestTimeout", "2m0s"),
    ("evictionPressureTransitionPeriod", "5m0s"),
];

/// Integers upstream defaults when `== 0`.
const INTS: &[(&str, i64)] = &[
    ("port", 10250),
    ("registryBurst", 10),
    ("eventBurst", 100),
    ("maxPods", 110),
    ("maxOpenFiles", 1_000_000),
    ("kubeAPIBurst", 100),
];

/// Strings upstream defaults when `== ""`.
const STRINGS: &[(&str, &str)] = &[
    ("address", "0.0.0.0"),
    ("authorization.mode", "Webhook"),
    ("healthzBindAddress", "127.0.0.1"),
    ("cgroupDriver", "cgroupfs"),
    ("cpuManagerPolicy", "none"),
    ("memoryManagerPolicy", "None"),
    ("topologyManagerPolicy", "none"),
    ("topologyManagerScope", "container"),
    ("hairpinMode", "promiscuous-bridge"),
    ("contentType", "application/vnd.kubernetes.protobuf"),
    ("containerLogMaxSize", "10Mi"),
    ("configMapAndSecretChangeDetectionStrategy", "Watch"),
    (
        "volumePluginDir",
        "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/",
    ),
    (
        "containerRuntimeEndpoint",
        "unix:///run/containerd/containerd.sock",
    ),
    ("podLogsDir", "/var/log/pods"),
];

fn is_zero_duration(v: &Value) -> bool {
    match v {
        Value::String(s) => parse_duration(s).is_ok_and(|d| d == Duration::ZERO),
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

/// Replaces the zero values the file layers (`set`: the paths they set) gave to the fields above
/// with upstream's defaults; returns the paths it defaulted, for the tests and a debug line.
pub(super) fn apply(tree: &mut Value, set: &BTreeSet<String>) -> Vec<&'static str> {
    let mut done = Vec::new();
    let get = |t: &Value, p: &str| schema::get_path(t, p).cloned();
    for (path, default) in DURATIONS {
        if set.contains(*path) && get(tree, path).is_some_and(|v| is_zero_duration(&v)) {
            schema::set_path(tree, path, Value::String((*default).into()));
            done.push(*path);
        }
    }
    for (path, default) in INTS {
        if set.contains(*path) && get(tree, path).and_then(|v| v.as_i64()) == Some(0) {
            schema::set_path(tree, path, (*default).into());
            done.push(*path);
        }
    }
    for (path, default) in STRINGS {
        if set.contains(*path) && get(tree, path).as_ref().and_then(Value::as_str) == Some("") {
            schema::set_path(tree, path, Value::String((*default).into()));
            done.push(*path);
        }
    }
    done
}
