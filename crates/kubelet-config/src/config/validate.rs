//! Validation of the loaded configuration (upstream `validation.ValidateKubeletConfiguration`):
//! every invalid value is collected with its field path, none stops the others being reported.

use std::time::Duration;

use serde_json::Value;

use super::{format_duration, schema, KubeletConfig};

/// Checks values that have no valid meaning (upstream `validation.ValidateKubeletConfiguration`).
pub fn validate(cfg: &KubeletConfig, errors: &mut Vec<String>) {
    if cfg.tls_cert_file.is_some() != cfg.tls_private_key_file.is_some() {
        errors.push("tlsCertFile and tlsPrivateKeyFile: set both or neither".into());
    }
    if cfg.sync_frequency.is_zero() {
        errors.push("syncFrequency: must be greater than 0".into());
    }
    if cfg.file_check_frequency.is_zero() {
        errors.push("fileCheckFrequency: must be greater than 0".into());
    }
    if cfg.pod_housekeeping_period.is_zero() {
        errors.push("podHousekeepingPeriod: must be greater than 0".into());
    }
    if let Some(url) = &cfg.static_pod_url {
        validate_pod_url(url, cfg, errors);
    }
    if cfg.runtime_request_timeout.is_zero() {
        errors.push("runtimeRequestTimeout: must be greater than 0".into());
    }
    if cfg.max_pods == 0 {
        errors.push("maxPods: must be greater than 0".into());
    }
    super::node_status::validate(&cfg.node_status, &cfg.image_pulls, errors);
    if !cfg.pod_logs_dir.is_absolute() {
        errors.push(format!(
            "podLogsDir: must be an absolute path, got {:?}",
            cfg.pod_logs_dir
        ));
    }
    if let Err(e) = crate::sysctl::validate_patterns(&cfg.allowed_unsafe_sysctls) {
        errors.push(format!("allowedUnsafeSysctls: {e}"));
    }
    if let Err(e) = crate::endpoint::parse_endpoint(&cfg.container_runtime_endpoint) {
        errors.push(format!("containerRuntimeEndpoint: {e}"));
    }
    if cfg.container_log_max_files < 2 {
        errors.push(format!(
            "containerLogMaxFiles: must be greater than 1, got {}",
            cfg.container_log_max_files
        ));
    }
    if cfg.container_log_monitor_interval < Duration::from_secs(3) {
        errors.push(format!(
            "containerLogMonitorInterval: must be at least 3s, got {}",
            format_duration(cfg.container_log_monitor_interval)
        ));
    }
    super::cgroups::validate(&cfg.cgroups, errors);
    super::cpu::validate(&cfg.cpu_manager, &cfg.cgroups, errors);
    super::gc::validate(&cfg.image_gc, errors);
    // Upstream parses the thresholds at start (`ParseThresholdConfig`) and refuses to run on
    // an error; every one is listed here.
    let pods = cfg.cgroups.enforces(super::cgroups::ENFORCE_PODS);
    if let Err(e) = cfg.eviction.thresholds(pods) {
        errors.extend(e);
    }
    if cfg.eviction.max_pod_grace_period < 0 {
        errors.push(format!(
            "evictionMaxPodGracePeriod (--eviction-max-pod-grace-period): {} must not be a negative number",
            cfg.eviction.max_pod_grace_period
        ));
    }
    if !cfg.container_logs_dir.is_absolute() {
        errors.push(format!(
            "container logs dir: must be an absolute path, got {:?}",
            cfg.container_logs_dir
        ));
    }
}

/// The manifest URL source's settings: upstream would fail every poll (and log it) on these; an
/// error at start names the field instead.
fn validate_pod_url(url: &str, cfg: &KubeletConfig, errors: &mut Vec<String>) {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    if rest.is_none_or(|r| r.is_empty() || r.starts_with('/')) {
        errors.push(format!(
            "staticPodURL (--manifest-url): {url:?} must be an http:// or https:// URL with a host"
        ));
    }
    if cfg.http_check_frequency.is_zero() {
        errors.push("httpCheckFrequency (--http-check-frequency): must be greater than 0".into());
    }
    for (name, value) in &cfg.static_pod_url_header {
        // RFC 9110 token characters.
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if name.is_empty() || !name.chars().all(token) {
            errors.push(format!(
                "staticPodURLHeader (--manifest-url-header): {name:?} is not a valid HTTP header name"
            ));
        }
        if value.chars().any(|c| matches!(c, '\r' | '\n' | '\0')) {
            errors.push(format!(
                "staticPodURLHeader (--manifest-url-header): the value of {name:?} contains a line break or NUL"
            ));
        }
    }
}

/// Upstream `validation.ValidateKubeletConfiguration` checks on fields rkubelet keeps only in
/// the tree, with upstream's wording (field, flag, value) so operators recognise them.
pub(super) fn validate_tree(t: &Value, errors: &mut Vec<String>) {
    let int = |p: &str| schema::get_path(t, p).and_then(Value::as_i64);
    let mut nonneg = |field: &str, flag: &str| {
        if let Some(v) = int(field).filter(|v| *v < 0) {
            errors.push(format!(
                "{field} (--{flag}): {v} must not be a negative number"
            ));
        }
    };
    nonneg("registryPullQPS", "registry-qps");
    nonneg("registryBurst", "registry-burst");
    nonneg("kubeAPIQPS", "kube-api-qps");
    nonneg("kubeAPIBurst", "kube-api-burst");
    nonneg("maxOpenFiles", "max-open-files");
    nonneg("podsPerCore", "pods-per-core");
    let high = int("imageGCHighThresholdPercent");
    let low = int("imageGCLowThresholdPercent");
    for (field, flag, v) in [
        (
            "imageGCHighThresholdPercent",
            "image-gc-high-threshold",
            high,
        ),
        ("imageGCLowThresholdPercent", "image-gc-low-threshold", low),
    ] {
        if let Some(v) = v.filter(|v| !(0..=100).contains(v)) {
            errors.push(format!(
                "{field} (--{flag}): {v} must be between 0 and 100, inclusive"
            ));
        }
    }
    if let (Some(h), Some(l)) = (high, low) {
        if l >= h {
            errors.push(format!(
                "imageGCLowThresholdPercent (--image-gc-low-threshold): {l} must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {h}"
            ));
        }
    }
    if let Some(v) = int("oomScoreAdj").filter(|v| !(-1000..=1000).contains(v)) {
        errors.push(format!(
            "oomScoreAdj (--oom-score-adj): {v} must be between -1000 and 1000, inclusive"
        ));
    }
    let s = |p: &str| schema::get_path(t, p).and_then(Value::as_str);
    for (field, flag, allowed) in [
        (
            "hairpinMode",
            "hairpin-mode",
            &["promiscuous-bridge", "hairpin-veth", "none"][..],
        ),
        (
            "cgroupDriver",
            "cgroup-driver",
            &["cgroupfs", "systemd"][..],
        ),
        (
            "topologyManagerPolicy",
            "topology-manager-policy",
            &["none", "best-effort", "restricted", "single-numa-node"][..],
        ),
        (
            "topologyManagerScope",
            "topology-manager-scope",
            &["container", "pod"][..],
        ),
        (
            "configMapAndSecretChangeDetectionStrategy",
            "",
            &["Get", "Cache", "Watch"][..],
        ),
        ("logging.format", "logging-format", &["text", "json"][..]),
    ] {
        if let Some(v) = s(field).filter(|v| !allowed.contains(v)) {
            let flag = if flag.is_empty() {
                String::new()
            } else {
                format!(" (--{flag})")
            };
            errors.push(format!(
                "{field}{flag}: {v:?} must be one of {}",
                allowed.join(", ")
            ));
        }
    }
    if let Some(v) = schema::get_path(t, "memoryThrottlingFactor")
        .and_then(Value::as_f64)
        .filter(|v| *v <= 0.0 || *v > 1.0)
    {
        errors.push(format!(
            "memoryThrottlingFactor: {v} must be greater than 0 and less than or equal to 1.0"
        ));
    }
}
