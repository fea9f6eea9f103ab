use super::*;
use crate::config::{self, Sources};

fn p(args: &[&str]) -> Parsed {
    parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn field<'a>(parsed: &'a Parsed, path: &str) -> Option<&'a Value> {
    parsed
        .fields
        .iter()
        .find(|(p, _)| p == path)
        .map(|(_, v)| v)
}

#[test]
fn pflag_syntax_forms() {
    let x = p(&[
        "--root-dir=/r",
        "--hostname-override",
        "n1",
        "--fail-swap-on",
        "--register-node=false",
        "-v=2",
        "--node_ip=10.0.0.1",
        "--sync-frequency",
        "90s",
    ]);
    assert_eq!(x.last("root-dir"), Some("/r"));
    assert_eq!(x.last("hostname-override"), Some("n1"));
    assert_eq!(x.last("node-ip"), Some("10.0.0.1"), "underscores normalise");
    assert_eq!(field(&x, "failSwapOn"), Some(&Value::Bool(true)));
    assert_eq!(field(&x, "registerNode"), Some(&Value::Bool(false)));
    assert_eq!(field(&x, "logging.verbosity"), Some(&Value::from(2)));
    assert_eq!(field(&x, "syncFrequency"), Some(&Value::from("1m30s")));
    for args in [&["-v", "3"][..], &["--v=3"], &["--v", "3"], &["-v3"]] {
        assert_eq!(
            field(&p(args), "logging.verbosity"),
            Some(&Value::from(3)),
            "{args:?}"
        );
    }
    // A bool flag never takes the next word: upstream then sees a positional argument.
    assert_eq!(
        parse(&["--fail-swap-on", "false"]).unwrap_err(),
        FlagError::Positional("false".into())
    );
    assert_eq!(
        parse(&["--root-dir"]).unwrap_err().to_string(),
        "flag needs an argument: --root-dir"
    );
    assert_eq!(
        parse(&["--port=x"]).unwrap_err().to_string(),
        "invalid argument \"x\" for \"--port\" flag: strconv.ParseInt: parsing \"x\": invalid syntax"
    );
    assert!(parse(&["--address=nope"]).is_err());
    assert!(parse(&["--sync-frequency=10"]).is_err());
}

#[test]
fn map_flags_parse_and_accumulate() {
    let x = p(&[
        "--node-labels=a=b,c=d",
        "--kube-reserved=cpu=100m,memory=100Mi",
        "--eviction-hard=memory.available<100Mi,nodefs.available<10%",
        "--feature-gates=A=true,B=false",
        "--feature-gates=C=true",
        "--system-reserved=cpu=1",
        "--system-reserved=memory=1Gi",
        "--cluster-dns=10.0.0.10,10.0.0.11",
        "--register-with-taints=k=v:NoSchedule",
        "--manifest-url-header=a:hello,b:again",
        "--manifest-url-header=b:beautiful,c:x,c: y",
        "--reserved-memory=0:memory=1Gi,hugepages-1M=2Gi",
        "--reserved-memory=1:memory=2Gi",
    ]);
    assert_eq!(x.values["node-labels"], vec!["a=b,c=d"]);
    assert_eq!(
        field(&x, "kubeReserved"),
        Some(&serde_json::json!({"cpu": "100m", "memory": "100Mi"}))
    );
    assert_eq!(
        field(&x, "evictionHard"),
        Some(&serde_json::json!({"memory.available": "100Mi", "nodefs.available": "10%"}))
    );
    assert_eq!(
        field(&x, "featureGates"),
        Some(&serde_json::json!({"A": true, "B": false, "C": true}))
    );
    assert_eq!(
        field(&x, "systemReserved"),
        Some(&serde_json::json!({"cpu": "1", "memory": "1Gi"}))
    );
    assert_eq!(
        field(&x, "clusterDNS"),
        Some(&serde_json::json!(["10.0.0.10", "10.0.0.11"]))
    );
    assert_eq!(
        field(&x, "registerWithTaints"),
        Some(&serde_json::json!([{"key": "k", "value": "v", "effect": "NoSchedule"}]))
    );
    assert_eq!(
        field(&x, "staticPodURLHeader"),
        Some(&serde_json::json!({"a": ["hello"], "b": ["again", "beautiful"], "c": ["x", "y"]}))
    );
    assert_eq!(
        field(&x, "reservedMemory"),
        Some(&serde_json::json!([
            {"numaNode": 0, "limits": {"memory": "1Gi", "hugepages-1M": "2Gi"}},
            {"numaNode": 1, "limits": {"memory": "2Gi"}}
        ]))
    );
    assert!(parse(&["--eviction-hard=memory.available=1Gi"]).is_err());
    assert!(parse(&["--feature-gates=A=maybe"]).is_err());
}

#[test]
fn removed_and_unknown_flags_are_rejected_as_upstream() {
    for f in [
        "--allow-privileged=true",
        "--cadvisor-port=0",
        "--no-such-flag",
    ] {
        let e = parse(&[f]).unwrap_err().to_string();
        let name = f.trim_start_matches("--").split('=').next().unwrap();
        assert_eq!(e, format!("unknown flag: --{name}"));
    }
    assert_eq!(
        parse(&["-x"]).unwrap_err().to_string(),
        "unknown shorthand flag: 'x' in -x"
    );
    assert_eq!(
        parse(&["run"]).unwrap_err().to_string(),
        "unknown command run"
    );
}

#[test]
fn one_notice_per_flag_naming_it() {
    let x = p(&[
        "--network-plugin=cni",
        "--network-plugin=cni",
        "--memory-manager-policy=Static",
        "--containerd=/run/containerd/containerd.sock",
        "--logtostderr=true",
        "--root-dir=/r",
        "--sync-frequency=1m",
        "--lock-file=/x",
    ]);
    assert_eq!(x.notices.len(), 6, "{:#?}", x.notices);
    assert_eq!(
        x.notices[0],
        "Flag --network-plugin has been deprecated, will be removed along with dockershim. \
         (rkubelet: no effect; ignored)"
    );
    assert!(x.notices[1].starts_with("Flag --memory-manager-policy has been deprecated, This parameter should be set via the config file"));
    assert!(x.notices[1].ends_with("(rkubelet: not implemented; ignored)"));
    assert!(
        x.notices[2].starts_with("Flag --containerd has been deprecated, This is a cadvisor flag")
    );
    // klog's flags were deprecated in 1.23; rkubelet logs to stderr, so only upstream's line.
    assert!(x.notices[3].starts_with("Flag --logtostderr has been deprecated, will be removed"));
    assert!(!x.notices[3].contains("rkubelet"));
    // Implemented but deprecated upstream: upstream's line only.
    assert_eq!(
        x.notices[4],
        format!("Flag --sync-frequency has been deprecated, {CONFIG_DEPRECATED}")
    );
    assert_eq!(
        x.notices[5],
        "Flag --lock-file is not implemented by rkubelet; ignored"
    );
    // --logtostderr=true is what rkubelet does anyway; =false is not.
    assert!(p(&["--logtostderr=false"]).notices[0].ends_with("; ignored)"));
}

#[test]
fn flag_targets_exist_in_the_schema() {
    for f in FLAGS {
        if let Target::Field(path) = f.target {
            let field = config::schema::field(path);
            assert!(field.is_some(), "--{} targets unknown field {path}", f.name);
            // A flag that sets a field is implemented exactly when the field is: otherwise the
            // flag's notice says "ignored" for a value that takes effect, or the reverse.
            assert_eq!(
                field.map(|fl| fl.status),
                Some(f.status),
                "--{} and {path} disagree on their status",
                f.name
            );
        }
    }
    let mut names = std::collections::BTreeSet::new();
    for f in FLAGS {
        assert!(names.insert(f.name), "duplicate --{}", f.name);
    }
}

fn tmpdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("rkubelet-flags-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

#[test]
fn precedence_flags_over_dropins_over_file_over_defaults() {
    let d = tmpdir("prec");
    let file = d.join("config.yaml");
    std::fs::write(
        &file,
        format!(
            "{HEAD}syncFrequency: 30s\nmaxPods: 50\nclusterDomain: file.local\n\
             featureGates: {{A: true, B: true}}\nreadOnlyPort: 0\nmemoryManagerPolicy: Static\n"
        ),
    )
    .unwrap();
    let dir = d.join("conf.d");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    // Lexical order: 10 then 20 (20 wins); the subdirectory is walked too, non-.conf skipped.
    std::fs::write(dir.join("20-b.conf"), format!("{HEAD}maxPods: 70\n")).unwrap();
    std::fs::write(
        dir.join("10-a.conf"),
        format!("{HEAD}maxPods: 60\nclusterDomain: dropin.local\nfeatureGates: {{B: false}}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("sub/30-c.conf"), format!("{HEAD}eventBurst: 7\n")).unwrap();
    std::fs::write(dir.join("99-z.yaml"), format!("{HEAD}maxPods: 1\n")).unwrap();
    let flags = p(&["--max-pods=80", "--feature-gates=C=true"]);
    let l = config::load(&Sources {
        file: Some(file.clone()),
        dir: Some(dir.clone()),
        flags: flags.fields.clone(),
    })
    .unwrap();
    let c = &l.config;
    assert_eq!(c.max_pods, 80, "flag wins");
    assert_eq!(c.cluster_domain, "dropin.local", "drop-in over file");
    assert_eq!(
        c.sync_frequency,
        std::time::Duration::from_secs(30),
        "file over defaults"
    );
    assert_eq!(c.event_burst, 7, "subdirectory drop-in");
    assert_eq!(
        c.runtime_request_timeout,
        std::time::Duration::from_secs(120),
        "default"
    );
    assert_eq!(
        c.v1beta1["featureGates"],
        serde_json::json!({"A": true, "B": false, "C": true})
    );
    assert_eq!(c.read_only_port, 0);
    assert!(
        l.warnings
            .iter()
            .any(|w| w.contains("\"memoryManagerPolicy\"") && w.contains("not supported")),
        "{:?}",
        l.warnings
    );
    // Without a file: the flags' legacy defaults, drop-ins still apply over them.
    let l = config::load(&Sources {
        file: None,
        dir: Some(dir.clone()),
        flags: vec![],
    })
    .unwrap();
    assert_eq!(l.config.read_only_port, 10255);
    assert!(l.config.authentication.anonymous_enabled);
    assert_eq!(l.config.max_pods, 70);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn every_invalid_value_reported_at_once_with_paths() {
    let d = tmpdir("invalid");
    let file = d.join("config.yaml");
    std::fs::write(
        &file,
        format!(
            "{HEAD}syncFrequency: soon\nimageGCHighThresholdPercent: 101\n\
             authentication: {{webhook: {{cacheTTL: 5}}}}\nhairpinMode: bogus\nbogusField: 1\n"
        ),
    )
    .unwrap();
    let dir = d.join("conf.d");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("10-x.conf"), format!("{HEAD}maxPods: many\n")).unwrap();
    let err = config::load(&Sources {
        file: Some(file.clone()),
        dir: Some(dir.clone()),
        flags: p(&["--event-qps=-1"]).fields,
    })
    .unwrap_err();
    let config::ConfigError::Invalid { errors, path } = err else {
        panic!("expected Invalid");
    };
    assert_eq!(path.as_deref(), Some(file.as_path()));
    let want = [
        "syncFrequency: invalid duration \"soon\"",
        "imageGCHighThresholdPercent (--image-gc-high-threshold): 101 must be between 0 and 100, inclusive",
        "authentication.webhook.cacheTTL: must be a duration string",
        "hairpinMode (--hairpin-mode): \"bogus\" must be one of",
        "10-x.conf: maxPods: must be an integer",
        "eventRecordQPS: must be >= 0, got -1",
    ];
    for w in want {
        assert!(
            errors.iter().any(|e| e.contains(w)),
            "{w:?} not in {errors:#?}"
        );
    }
    assert_eq!(errors.len(), want.len(), "{errors:#?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn docs_in_sync() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/flags.md");
    let want = markdown();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/flags.md is stale: run UPDATE_DOCS=1 cargo test -p rkubelet-config --lib flags::tests::docs_in_sync"
    );
}

#[test]
fn node_labels_in_kubernetes_io_are_restricted_as_upstream() {
    let labels = |s: &str| crate::node::parse_labels(s).unwrap();
    assert!(validate_node_labels(&labels(
        "a=b,kubernetes.io/arch=amd64,node.kubernetes.io/pool=x,x.kubelet.kubernetes.io/y=z,topology.kubernetes.io/zone=z1"
    ))
    .is_ok());
    let e =
        validate_node_labels(&labels("node-role.kubernetes.io/master=,a.k8s.io/b=c")).unwrap_err();
    assert!(
        e.starts_with("unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [a.k8s.io/b node-role.kubernetes.io/master]"),
        "{e}"
    );
}
