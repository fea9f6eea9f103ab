use super::*;

#[test]
fn go_durations() {
    assert_eq!(parse_duration("1m0s").unwrap(), Duration::from_secs(60));
    assert_eq!(parse_duration("20s").unwrap(), Duration::from_secs(20));
    assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
    assert_eq!(parse_duration("300ms").unwrap(), Duration::from_millis(300));
    assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
    assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    assert!(parse_duration("10").is_err());
    assert!(parse_duration("10x").is_err());
    assert!(parse_duration("-1s").is_err());
    assert!(parse_duration("").is_err());
    assert_eq!(format_duration(Duration::from_secs(60)), "1m0s");
    assert_eq!(format_duration(Duration::from_secs(10)), "10s");
    assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
    assert_eq!(format_duration(Duration::from_secs(3725)), "1h2m5s");
}

#[test]
fn change_detection_strategy() {
    use crate::ChangeDetectionStrategy as S;
    let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    let get = |extra: &str| parse(&format!("{head}{extra}"));
    assert_eq!(
        get("")
            .unwrap()
            .config
            .config_map_and_secret_change_detection_strategy,
        S::Watch
    );
    for (v, want) in [("Get", S::Get), ("Cache", S::Cache), ("Watch", S::Watch)] {
        let c = get(&format!("configMapAndSecretChangeDetectionStrategy: {v}\n")).unwrap();
        assert_eq!(
            c.config.config_map_and_secret_change_detection_strategy,
            want
        );
    }
    let e = get("configMapAndSecretChangeDetectionStrategy: Poll\n")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("configMapAndSecretChangeDetectionStrategy"),
        "{e}"
    );
}

#[test]
fn server_authentication_and_authorization_fields() {
    let d = parse("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
        .unwrap()
        .config;
    // v1beta1 file defaults: closed.
    assert_eq!(d.port, 10250);
    assert!(!d.authentication.anonymous_enabled);
    assert!(d.authentication.webhook_enabled);
    assert_eq!(d.authentication.webhook_cache_ttl, Duration::from_secs(120));
    assert_eq!(d.authorization.mode, AuthorizationMode::Webhook);
    assert_eq!(
        d.authorization.cache_authorized_ttl,
        Duration::from_secs(300)
    );
    assert_eq!(
        d.authorization.cache_unauthorized_ttl,
        Duration::from_secs(30)
    );
    assert!(d.enable_debugging_handlers);
    assert_eq!(
        d.streaming_connection_idle_timeout,
        Duration::from_secs(4 * 3600)
    );
    let l = parse(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         port: 10251\ntlsCertFile: /p/c.crt\ntlsPrivateKeyFile: /p/c.key\n\
         enableDebuggingHandlers: false\nstreamingConnectionIdleTimeout: 5m\n\
         authentication:\n  x509: {clientCAFile: /p/ca.crt}\n  webhook: {enabled: false, cacheTTL: 10s}\n  \
         anonymous: {enabled: true}\n  bogus: 1\n\
         authorization:\n  mode: AlwaysAllow\n  webhook: {cacheAuthorizedTTL: 1m, cacheUnauthorizedTTL: 5s}\n",
    )
    .unwrap();
    let c = l.config;
    assert_eq!(c.port, 10251);
    assert_eq!(c.tls_cert_file, Some("/p/c.crt".into()));
    assert_eq!(c.tls_private_key_file, Some("/p/c.key".into()));
    assert!(!c.enable_debugging_handlers);
    assert_eq!(
        c.streaming_connection_idle_timeout,
        Duration::from_secs(300)
    );
    assert_eq!(c.authentication.client_ca_file, Some("/p/ca.crt".into()));
    assert!(!c.authentication.webhook_enabled);
    assert_eq!(c.authentication.webhook_cache_ttl, Duration::from_secs(10));
    assert!(c.authentication.anonymous_enabled);
    assert_eq!(c.authorization.mode, AuthorizationMode::AlwaysAllow);
    assert_eq!(
        c.authorization.cache_authorized_ttl,
        Duration::from_secs(60)
    );
    assert_eq!(
        c.authorization.cache_unauthorized_ttl,
        Duration::from_secs(5)
    );
    assert_eq!(
        l.warnings,
        vec!["unknown config field \"authentication.bogus\"; ignored (upstream's lenient v1beta1 decoding drops it too)"]
    );
    let e = parse(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         tlsCertFile: /p/c.crt\nauthorization: {mode: Node}\n\
         authentication: {webhook: {cacheTTL: x}}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("authorization.mode: unsupported authorization mode"),
        "{e}"
    );
    assert!(e.contains("authentication.webhook.cacheTTL"), "{e}");
    assert!(e.contains("tlsCertFile and tlsPrivateKeyFile"), "{e}");
    let l = parse(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         featureGates: {KubeletFineGrainedAuthz: false, SomethingElse: true}\n",
    )
    .unwrap();
    assert!(!l.config.fine_grained_authz);
    assert_eq!(
        l.warnings,
        vec!["feature gate \"SomethingElse\" is not supported by rkubelet; ignored"]
    );
}

#[test]
fn file_with_supported_unsupported_and_unknown_fields() {
    let l = parse(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         staticPodPath: /etc/kubernetes/manifests\nsyncFrequency: 30s\nreadOnlyPort: 10255\n\
         memoryManagerPolicy: Static\nbogusField: 1\n",
    )
    .unwrap();
    assert_eq!(
        l.config.static_pod_path,
        Some("/etc/kubernetes/manifests".into())
    );
    assert_eq!(l.config.sync_frequency, Duration::from_secs(30));
    assert_eq!(l.config.read_only_port, 10255);
    assert_eq!(l.warnings.len(), 2, "{:?}", l.warnings);
    assert!(l
        .warnings
        .iter()
        .any(|w| w.contains("memoryManagerPolicy") && w.contains("not supported")));
    assert!(l
        .warnings
        .iter()
        .any(|w| w.contains("bogusField") && w.contains("unknown")));
}

#[test]
fn all_errors_listed_at_once() {
    let err = parse(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         syncFrequency: soon\nreadOnlyPort: 70000\nhealthzBindAddress: nope\nmaxPods: -3\n\
         podLogsDir: relative\n",
    )
    .unwrap_err();
    let ConfigError::Invalid { errors, .. } = err else {
        panic!("expected Invalid, got {err}");
    };
    assert_eq!(errors.len(), 5, "{errors:?}");
    for key in [
        "syncFrequency",
        "readOnlyPort",
        "healthzBindAddress",
        "maxPods",
        "podLogsDir",
    ] {
        assert!(
            errors.iter().any(|e| e.starts_with(key)),
            "{key} missing in {errors:?}"
        );
    }
}

#[test]
fn container_log_settings() {
    assert_eq!(parse_quantity_bytes("10Mi"), Ok(10 * 1024 * 1024));
    assert_eq!(parse_quantity_bytes("1k"), Ok(1000));
    assert_eq!(parse_quantity_bytes("1.5Ki"), Ok(1536));
    assert_eq!(parse_quantity_bytes("100"), Ok(100));
    assert!(parse_quantity_bytes("10MB").is_err());
    assert!(parse_quantity_bytes("-1Mi").is_err());
    let l = parse(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         containerLogMaxSize: 5Mi\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 5s\n",
    )
    .unwrap();
    assert_eq!(l.config.container_log_max_size, 5 * 1024 * 1024);
    assert_eq!(l.config.container_log_max_files, 3);
    assert_eq!(
        l.config.container_log_monitor_interval,
        Duration::from_secs(5)
    );
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    let d = KubeletConfig::default();
    assert_eq!(
        (d.container_log_max_size, d.container_log_max_files),
        (10 * 1024 * 1024, 5)
    );
    let ConfigError::Invalid { errors, .. } = parse(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         containerLogMaxSize: lots\ncontainerLogMaxFiles: 1\ncontainerLogMonitorInterval: 1s\n",
    )
    .unwrap_err() else {
        panic!("expected Invalid");
    };
    assert_eq!(errors.len(), 3, "{errors:?}");
}

#[test]
fn wrong_kind_rejected() {
    assert!(matches!(
        parse("apiVersion: v1\nkind: Pod\n"),
        Err(ConfigError::Invalid { .. })
    ));
    assert!(matches!(
        parse("- a\n- b\n"),
        Err(ConfigError::Parse { .. })
    ));
}

#[test]
fn manifest_url_source_fields() {
    let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    let get = |extra: &str| parse(&format!("{head}{extra}"));
    let c = get("").unwrap().config;
    assert_eq!(c.static_pod_url, None);
    assert_eq!(c.http_check_frequency, Duration::from_secs(20));
    let l = get(
        "staticPodURL: http://10.0.0.1:8080/pods\nhttpCheckFrequency: 5s\n\
         staticPodURLHeader: {X-Token: [a, b], Accept: [application/yaml]}\n",
    )
    .unwrap();
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    let c = l.config;
    assert_eq!(
        c.static_pod_url.as_deref(),
        Some("http://10.0.0.1:8080/pods")
    );
    assert_eq!(c.http_check_frequency, Duration::from_secs(5));
    assert_eq!(
        c.static_pod_url_header,
        vec![
            ("Accept".to_string(), "application/yaml".to_string()),
            ("X-Token".to_string(), "a".to_string()),
            ("X-Token".to_string(), "b".to_string()),
        ]
    );
    let e = get("staticPodURL: ftp://x/pods\nhttpCheckFrequency: 0s\n\
         staticPodURLHeader: {\"bad name\": [x], ok: [\"a\\nb\"]}\n")
    .unwrap_err()
    .to_string();
    for want in [
        "staticPodURL (--manifest-url): \"ftp://x/pods\" must be an http:// or https:// URL",
        "\"bad name\" is not a valid HTTP header name",
        "the value of \"ok\" contains a line break",
    ] {
        assert!(e.contains(want), "{want} not in {e}");
    }
    // A zero in the file is unset, as upstream's defaulting has it (see zero_defaults).
    let c = get("staticPodURL: http://10.0.0.1/p\nhttpCheckFrequency: 0s\n").unwrap();
    assert_eq!(c.config.http_check_frequency, Duration::from_secs(20));
}

#[test]
fn tls_fields_resolved_and_checked() {
    let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    let get = |extra: &str| parse(&format!("{head}{extra}"));
    let l = get(
        "tlsMinVersion: VersionTLS12\n\
         tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_RSA_WITH_AES_128_GCM_SHA256]\n",
    )
    .unwrap();
    assert_eq!(l.config.serving_tls.tls12_suites, Some(vec![0xc02f]));
    assert!(
        l.warnings
            .iter()
            .any(|w| w.contains("TLS_RSA_WITH_AES_128_GCM_SHA256 left out")),
        "{:?}",
        l.warnings
    );
    let e = get("tlsMinVersion: VersionTLS14\ntlsCipherSuites: [TLS_NOPE]\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown tls version \"VersionTLS14\""), "{e}");
    assert!(
        e.contains("Cipher suite TLS_NOPE not supported or doesn't exist"),
        "{e}"
    );
}

/// `crashLoopBackOff.maxContainerRestartPeriod`: upstream's range and feature gate checks.
#[test]
fn crash_loop_max_restart_period_table() {
    let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    let ok: &[(&str, Option<u64>)] = &[
        ("", None),
        (
            "crashLoopBackOff: {maxContainerRestartPeriod: 2s}\n",
            Some(2),
        ),
        (
            "crashLoopBackOff: {maxContainerRestartPeriod: 5m}\n",
            Some(300),
        ),
        (
            "featureGates: {KubeletCrashLoopBackOffMax: true}\n\
             crashLoopBackOff: {maxContainerRestartPeriod: 1s}\n",
            Some(1),
        ),
        ("featureGates: {KubeletCrashLoopBackOffMax: false}\n", None),
    ];
    for (body, want) in ok {
        let l = parse(&format!("{head}{body}")).unwrap();
        assert_eq!(
            l.config.crash_loop_max_restart_period,
            want.map(Duration::from_secs),
            "{body}"
        );
        assert!(l.warnings.is_empty(), "{body}: {:?}", l.warnings);
    }
    let bad: &[(&str, &str)] = &[
        (
            "crashLoopBackOff: {maxContainerRestartPeriod: 500ms}\n",
            "CrashLoopBackOff.MaxContainerRestartPeriod (got: 0.5 seconds) must be set between 1s and 300s",
        ),
        (
            "crashLoopBackOff: {maxContainerRestartPeriod: 301s}\n",
            "(got: 301 seconds) must be set between 1s and 300s",
        ),
        (
            "featureGates: {KubeletCrashLoopBackOffMax: false}\n\
             crashLoopBackOff: {maxContainerRestartPeriod: 2s}\n",
            "FeatureGate KubeletCrashLoopBackOffMax not enabled, \
             CrashLoopBackOff.MaxContainerRestartPeriod must not be set",
        ),
        (
            "crashLoopBackOff: {maxContainerRestartPeriod: soon}\n",
            "crashLoopBackOff.maxContainerRestartPeriod:",
        ),
    ];
    for (body, want) in bad {
        let e = parse(&format!("{head}{body}")).unwrap_err().to_string();
        assert!(e.contains(want), "{body}: {e}");
    }
}

#[test]
fn eviction_settings_from_file_and_flags() {
    let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    let l = parse(&format!(
        "{head}evictionHard: {{memory.available: 1Gi}}\nmergeDefaultEvictionSettings: true\n\
         evictionSoft: {{nodefs.available: 20%}}\nevictionSoftGracePeriod: {{nodefs.available: 1m}}\n\
         evictionMaxPodGracePeriod: 30\nevictionPressureTransitionPeriod: 10s\n"
    ))
    .unwrap();
    let e = &l.config.eviction;
    assert_eq!(e.hard["memory.available"], "1Gi");
    assert_eq!(e.hard["nodefs.inodesFree"], "5%", "merged default");
    assert_eq!(
        l.config.cgroups.eviction_hard, e.hard,
        "one map for allocatable"
    );
    assert_eq!(
        l.config.v1beta1["evictionHard"]["imagefs.available"], "15%",
        "configz shows the merged map"
    );
    assert_eq!(e.max_pod_grace_period, 30);
    assert_eq!(e.pressure_transition_period, Duration::from_secs(10));
    assert_eq!(e.thresholds(true).unwrap().len(), 7);
    // Flags replace the file's map, as upstream's flag precedence does.
    let l = layered(
        Some((
            &format!("{head}evictionHard: {{memory.available: 1Gi}}\n"),
            None,
        )),
        &[],
        &[(
            "evictionHard".into(),
            serde_json::json!({"memory.available": "200Mi"}),
        )],
    )
    .unwrap();
    assert_eq!(l.config.eviction.hard.len(), 1);
    assert_eq!(l.config.eviction.hard["memory.available"], "200Mi");
    // Every bad value is listed at once.
    let e = parse(&format!(
        "{head}evictionHard: {{memory.avail: 1Gi, nodefs.available: 200%}}\n\
         evictionSoft: {{memory.available: 1Gi}}\nevictionMaxPodGracePeriod: -1\n"
    ))
    .unwrap_err()
    .to_string();
    for want in [
        "evictionHard[memory.avail]: unsupported eviction signal memory.avail",
        "evictionHard[nodefs.available]: eviction percentage threshold nodefs.available must be <= 100%: 200%",
        "evictionSoft[memory.available]: grace period must be specified for the soft eviction threshold memory.available",
        "evictionMaxPodGracePeriod (--eviction-max-pod-grace-period): -1 must not be a negative number",
    ] {
        assert!(e.contains(want), "{want:?} in {e}");
    }
}

/// The file kubeadm 1.20's kubelet-start phase writes: every Duration `0s`. Upstream's v1beta1
/// defaulting turns those zeros into the defaults, so the kubelet starts; rkubelet must too.
#[test]
fn kubeadm_zero_durations_default_as_upstream() {
    let kubeadm = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
authentication:\n  anonymous: {enabled: false}\n  webhook: {cacheTTL: 0s, enabled: true}\n  x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}\n\
authorization:\n  mode: Webhook\n  webhook: {cacheAuthorizedTTL: 0s, cacheUnauthorizedTTL: 0s}\n\
clusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\ncpuManagerReconcilePeriod: 0s\n\
evictionPressureTransitionPeriod: 0s\nfileCheckFrequency: 0s\nhealthzBindAddress: 127.0.0.1\n\
healthzPort: 10248\nhttpCheckFrequency: 0s\nimageMinimumGCAge: 0s\nlogging: {}\n\
nodeStatusReportFrequency: 0s\nnodeStatusUpdateFrequency: 0s\nrotateCertificates: true\n\
runtimeRequestTimeout: 0s\nshutdownGracePeriod: 0s\nshutdownGracePeriodCriticalPods: 0s\n\
staticPodPath: /etc/kubernetes/manifests\nstreamingConnectionIdleTimeout: 0s\nsyncFrequency: 0s\n\
volumeStatsAggPeriod: 0s\n";
    let l = parse(kubeadm).unwrap_or_else(|e| panic!("kubeadm's config refused: {e}"));
    let c = &l.config;
    assert_eq!(c.sync_frequency, Duration::from_secs(60));
    assert_eq!(c.file_check_frequency, Duration::from_secs(20));
    assert_eq!(c.http_check_frequency, Duration::from_secs(20));
    assert_eq!(c.runtime_request_timeout, Duration::from_secs(120));
    assert_eq!(
        c.streaming_connection_idle_timeout,
        Duration::from_secs(4 * 3600)
    );
    let t = &c.v1beta1;
    for (path, want) in [
        ("syncFrequency", "1m0s"),
        ("authentication.webhook.cacheTTL", "2m0s"),
        ("authorization.webhook.cacheAuthorizedTTL", "5m0s"),
        ("authorization.webhook.cacheUnauthorizedTTL", "30s"),
        ("cpuManagerReconcilePeriod", "10s"),
        ("evictionPressureTransitionPeriod", "5m0s"),
        ("imageMinimumGCAge", "2m0s"),
        ("nodeStatusUpdateFrequency", "10s"),
        ("nodeStatusReportFrequency", "5m0s"),
        ("volumeStatsAggPeriod", "1m0s"),
        // Not defaulted on zero upstream either: 0s means "no graceful node shutdown".
        ("shutdownGracePeriod", "0s"),
    ] {
        assert_eq!(
            schema::get_path(t, path).and_then(Value::as_str),
            Some(want),
            "{path} as /configz shows it"
        );
    }
}

/// Table over upstream's zero-defaulted kinds, the report-frequency rule and what stays zero.
#[test]
fn zero_values_in_files_follow_upstream_defaulting() {
    let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    let tree = |extra: &str| parse(&format!("{head}{extra}")).map(|l| l.config.v1beta1);
    let get = |extra: &str, path: &str| {
        let t = tree(extra).unwrap_or_else(|e| panic!("{extra:?} refused: {e}"));
        schema::get_path(&t, path).cloned()
    };
    for (extra, path, want) in [
        ("maxPods: 0\n", "maxPods", Value::from(110)),
        ("port: 0\n", "port", Value::from(10250)),
        (
            "nodeLeaseDurationSeconds: 0\n",
            "nodeLeaseDurationSeconds",
            Value::from(40),
        ),
        ("kubeAPIBurst: 0\n", "kubeAPIBurst", Value::from(100)),
        ("address: \"\"\n", "address", Value::from("0.0.0.0")),
        (
            "cgroupDriver: \"\"\n",
            "cgroupDriver",
            Value::from("cgroupfs"),
        ),
        (
            "containerLogMaxSize: \"\"\n",
            "containerLogMaxSize",
            Value::from("10Mi"),
        ),
        (
            "podLogsDir: \"\"\n",
            "podLogsDir",
            Value::from("/var/log/pods"),
        ),
        // An explicitly set update frequency carries an unset report frequency with it.
        (
            "nodeStatusUpdateFrequency: 20s\n",
            "nodeStatusReportFrequency",
            Value::from("20s"),
        ),
        (
            "nodeStatusUpdateFrequency: 20s\nnodeStatusReportFrequency: 0s\n",
            "nodeStatusReportFrequency",
            Value::from("20s"),
        ),
        (
            "nodeStatusUpdateFrequency: 20s\nnodeStatusReportFrequency: 1m0s\n",
            "nodeStatusReportFrequency",
            Value::from("1m0s"),
        ),
        ("", "nodeStatusReportFrequency", Value::from("5m0s")),
        // Pointer fields upstream: an explicit zero stays zero.
        ("healthzPort: 0\n", "healthzPort", Value::from(0)),
        ("kubeAPIQPS: 0\n", "kubeAPIQPS", Value::from(0)),
        (
            "imageGCHighThresholdPercent: 10\nimageGCLowThresholdPercent: 0\n",
            "imageGCLowThresholdPercent",
            Value::from(0),
        ),
        ("readOnlyPort: 0\n", "readOnlyPort", Value::from(0)),
        ("podsPerCore: 0\n", "podsPerCore", Value::from(0)),
    ] {
        assert_eq!(get(extra, path), Some(want), "{extra:?} -> {path}");
    }
}

/// A flag is not defaulted (upstream applies defaults to the file only): `--sync-frequency=0s`
/// is still refused.
#[test]
fn zero_flag_still_refused() {
    let text = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    let flags = vec![("syncFrequency".to_string(), Value::from("0s"))];
    let e = layered(Some((text, None)), &[], &flags).expect_err("a zero flag is refused");
    assert!(e.to_string().contains("syncFrequency"), "{e}");
}

#[test]
fn logging_section_read_and_checked() {
    use super::logging::{LogFormat, StreamOptions, VModule};
    let l = parse(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         logging:\n  format: json\n  verbosity: 3\n  flushFrequency: 2s\n\
         \x20 vmodule:\n  - filePattern: prober\n    verbosity: 5\n\
         \x20 options:\n    json:\n      splitStream: true\n      infoBufferSize: 64Ki\n",
    )
    .unwrap();
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    let g = &l.config.logging;
    assert_eq!(g.format, LogFormat::Json);
    assert_eq!(g.verbosity, 3);
    assert_eq!(g.flush_frequency, Duration::from_secs(2));
    assert_eq!(
        g.vmodule,
        vec![VModule {
            pattern: "prober".into(),
            verbosity: 5
        }]
    );
    assert_eq!(
        g.stream(),
        StreamOptions {
            split_stream: true,
            info_buffer_size: 64 * 1024
        }
    );
    assert_eq!(g.text, StreamOptions::default());
    let d = KubeletConfig::default().logging;
    assert_eq!((d.format, d.verbosity), (LogFormat::Text, 0));

    let ConfigError::Invalid { errors, .. } = parse(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         logging:\n  format: xml\n  vmodule: prober=5\n\
         \x20 options:\n    text:\n      infoBufferSize: lots\n",
    )
    .unwrap_err() else {
        panic!("expected Invalid");
    };
    let all = errors.join("\n");
    for want in [
        "logging.format (--logging-format): \"xml\" must be one of text, json",
        "logging.vmodule: must be a list",
        "logging.options.text.infoBufferSize: \"lots\" is not a valid quantity",
    ] {
        assert!(all.contains(want), "{want} in {all}");
    }
}

/// `enableServer: false` turns the 10250 server off; `port: 0` in a file is 10250 (upstream).
#[test]
fn enable_server_and_zero_port() {
    let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    let c = parse(&format!("{head}port: 0\nenableServer: false\n"))
        .unwrap()
        .config;
    assert_eq!((c.port, c.enable_server), (10250, false));
    let c = parse(head).unwrap().config;
    assert!(c.enable_server);
}

/// The node status defaulting runs on the file, before the flags, as upstream's: a flag update
/// frequency leaves the report frequency at its default, where the same value in the file makes
/// the report frequency follow it (upstream's backward-compatibility rule).
#[test]
fn node_status_defaulting_sees_the_file_not_the_flags() {
    let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    let flag = vec![("nodeStatusUpdateFrequency".to_string(), Value::from("4s"))];
    let by_flag = layered(Some((head, None)), &[], &flag).expect("flag accepted");
    let by_file = layered(
        Some((&format!("{head}nodeStatusUpdateFrequency: 4s\n"), None)),
        &[],
        &[],
    )
    .expect("file accepted");
    let report = |l: &Loaded| {
        (
            l.config.node_status.update_frequency,
            l.config.node_status.report_frequency,
        )
    };
    assert_eq!(
        report(&by_flag),
        (Duration::from_secs(4), Duration::from_secs(300)),
        "flag: report stays 5m"
    );
    assert_eq!(
        report(&by_file),
        (Duration::from_secs(4), Duration::from_secs(4)),
        "file: report follows"
    );
}
