//! `/configz` (upstream `pkg/util/configz`): the effective configuration as a
//! `KubeletConfiguration` v1beta1 under the `kubeletconfig` key, with upstream's field names and
//! Go duration strings, so tooling that reads a node's config (kubeadm upgrade checks, scripts
//! doing `kubectl get --raw /api/v1/nodes/<n>/proxy/configz`) reads rkubelet's too.

use serde_json::{json, Value};

use crate::config::{format_duration as d, AuthorizationMode, KubeletConfig};

/// The `/configz` body for `cfg`.
pub fn configz(cfg: &KubeletConfig) -> Value {
    let path = |p: &std::path::Path| p.display().to_string();
    let mut kc = json!({
        "kind": "KubeletConfiguration",
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "enableServer": true,
        "staticPodPath": cfg.static_pod_path.as_deref().map(path).unwrap_or_default(),
        "podLogsDir": path(&cfg.pod_logs_dir),
        "syncFrequency": d(cfg.sync_frequency),
        "fileCheckFrequency": d(cfg.file_check_frequency),
        "address": cfg.address.to_string(),
        "port": cfg.port,
        "readOnlyPort": cfg.read_only_port,
        "authentication": {
            "x509": {"clientCAFile": cfg.authentication.client_ca_file.as_deref().map(path).unwrap_or_default()},
            "webhook": {
                "enabled": cfg.authentication.webhook_enabled,
                "cacheTTL": d(cfg.authentication.webhook_cache_ttl),
            },
            "anonymous": {"enabled": cfg.authentication.anonymous_enabled},
        },
        "authorization": {
            "mode": match cfg.authorization.mode {
                AuthorizationMode::AlwaysAllow => "AlwaysAllow",
                AuthorizationMode::Webhook => "Webhook",
            },
            "webhook": {
                "cacheAuthorizedTTL": d(cfg.authorization.cache_authorized_ttl),
                "cacheUnauthorizedTTL": d(cfg.authorization.cache_unauthorized_ttl),
            },
        },
        "eventRecordQPS": cfg.event_record_qps,
        "eventBurst": cfg.event_burst,
        "enableDebuggingHandlers": cfg.enable_debugging_handlers,
        "healthzPort": cfg.healthz_port,
        "healthzBindAddress": cfg.healthz_bind_address.to_string(),
        "clusterDomain": cfg.cluster_domain,
        "clusterDNS": cfg.cluster_dns.iter().map(|ip| ip.to_string()).collect::<Vec<_>>(),
        "runtimeRequestTimeout": d(cfg.runtime_request_timeout),
        "streamingConnectionIdleTimeout": d(cfg.streaming_connection_idle_timeout),
        "maxPods": cfg.max_pods,
        "podsPerCore": cfg.pods_per_core,
        "oomScoreAdj": cfg.oom_score_adj,
        "maxOpenFiles": cfg.max_open_files,
        "providerID": cfg.provider_id,
        "resolvConf": path(&cfg.resolv_conf),
        "serializeImagePulls": cfg.image_pulls.serialize,
        "configMapAndSecretChangeDetectionStrategy":
            format!("{:?}", cfg.config_map_and_secret_change_detection_strategy),
        "allowedUnsafeSysctls": cfg.allowed_unsafe_sysctls,
        "containerLogMaxSize": format!("{}Ki", cfg.container_log_max_size / 1024),
        "containerLogMaxFiles": cfg.container_log_max_files,
        "containerLogMonitorInterval": d(cfg.container_log_monitor_interval),
        "containerRuntimeEndpoint": cfg.container_runtime_endpoint,
        "registerNode": cfg.register_node,
        "featureGates": {"KubeletFineGrainedAuthz": cfg.fine_grained_authz},
    });
    let opt = |p: &Option<std::path::PathBuf>| p.as_deref().map(path);
    if let (Some(obj), Some(cert), Some(key)) = (
        kc.as_object_mut(),
        opt(&cfg.tls_cert_file),
        opt(&cfg.tls_private_key_file),
    ) {
        obj.insert("tlsCertFile".into(), cert.into());
        obj.insert("tlsPrivateKeyFile".into(), key.into());
    }
    if !cfg.register_with_taints.is_empty() {
        if let Some(obj) = kc.as_object_mut() {
            obj.insert(
                "registerWithTaints".into(),
                serde_json::to_value(&cfg.register_with_taints).unwrap_or_default(),
            );
        }
    }
    // Every upstream field from the effective tree, with what rkubelet actually runs with on top.
    let mut full = cfg.v1beta1.clone();
    overlay(&mut full, kc);
    json!({ "kubeletconfig": full })
}

fn overlay(base: &mut Value, top: Value) {
    match (base, top) {
        (Value::Object(b), Value::Object(t)) => {
            for (k, v) in t {
                match b.get_mut(&k) {
                    Some(slot) if slot.is_object() && v.is_object() => overlay(slot, v),
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, t) => *b = t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_names_and_go_durations() {
        let v = configz(&KubeletConfig::default());
        let kc = &v["kubeletconfig"];
        assert_eq!(kc["syncFrequency"], "1m0s");
        assert_eq!(kc["fileCheckFrequency"], "20s");
        assert_eq!(kc["runtimeRequestTimeout"], "2m0s");
        assert_eq!(kc["maxPods"], 110);
        assert_eq!(kc["authorization"]["mode"], "Webhook");
        assert_eq!(kc["authentication"]["webhook"]["cacheTTL"], "2m0s");
        assert_eq!(kc["containerLogMaxSize"], "10240Ki");
        assert_eq!(kc["port"], 10250);
        assert!(kc.get("tlsCertFile").is_none());
        // Fields rkubelet does not act on still show with upstream's defaults.
        assert_eq!(kc["cgroupDriver"], "cgroupfs");
        assert_eq!(kc["evictionHard"]["memory.available"], "100Mi");
        assert_eq!(kc["logging"]["format"], "text");
        assert_eq!(kc["kind"], "KubeletConfiguration");
    }
}
