use super::*;
use crate::objects::{ObjectData, ObjectError};
use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVar as KEnvVar, EnvVarSource,
    PodSpec, ResourceRequirements, SecretEnvSource, SecretKeySelector,
};

fn q(s: &str) -> Quantity {
    Quantity(s.into())
}

fn pod() -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some("web".into());
    p.metadata.namespace = Some("prod".into());
    p.metadata.uid = Some("u-1".into());
    p.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    p.metadata.annotations = Some(
        [
            ("b".to_string(), "say \"hi\"".to_string()),
            ("a".to_string(), "x".to_string()),
        ]
        .into(),
    );
    p.spec = Some(PodSpec {
        node_name: Some("node-1".into()),
        service_account_name: Some("sa".into()),
        containers: vec![Container {
            name: "main".into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    p
}

fn field(path: &str) -> ObjectFieldSelector {
    ObjectFieldSelector {
        api_version: Some("v1".into()),
        field_path: path.into(),
    }
}

fn ctx<'a>(
    alloc: &'a BTreeMap<String, Quantity>,
    ips: &'a [String],
    host: &'a [String],
) -> EnvContext<'a> {
    EnvContext {
        pod_ips: ips,
        host_ips: host,
        allocatable: alloc,
        objects: &NO_OBJECTS,
        services: &NO_SERVICES,
    }
}

static NO_OBJECTS: Objects = Objects(BTreeMap::new());
static NO_SERVICES: BTreeMap<String, String> = BTreeMap::new();

#[test]
fn field_refs() {
    let p = pod();
    let alloc = BTreeMap::new();
    let ips = vec!["10.0.0.5".to_string(), "fd00::5".to_string()];
    let host = vec!["192.168.1.2".to_string()];
    let cx = ctx(&alloc, &ips, &host);
    let v = |path: &str| pod_field_value(&field(path), &p, &cx);
    assert_eq!(v("metadata.name").unwrap(), "web");
    assert_eq!(v("metadata.namespace").unwrap(), "prod");
    assert_eq!(v("metadata.uid").unwrap(), "u-1");
    assert_eq!(v("metadata.labels['app']").unwrap(), "web");
    assert_eq!(v("metadata.labels['missing']").unwrap(), "");
    assert_eq!(v("metadata.annotations['b']").unwrap(), "say \"hi\"");
    assert_eq!(
        v("metadata.annotations").unwrap(),
        "a=\"x\"\nb=\"say \\\"hi\\\"\""
    );
    assert_eq!(v("metadata.labels").unwrap(), "app=\"web\"");
    assert_eq!(v("spec.nodeName").unwrap(), "node-1");
    assert_eq!(v("spec.host").unwrap(), "node-1");
    assert_eq!(v("spec.serviceAccountName").unwrap(), "sa");
    assert_eq!(v("status.podIP").unwrap(), "10.0.0.5");
    assert_eq!(v("status.podIPs").unwrap(), "10.0.0.5,fd00::5");
    assert_eq!(v("status.hostIP").unwrap(), "192.168.1.2");
    assert_eq!(v("status.hostIPs").unwrap(), "192.168.1.2");
    assert_eq!(
        v("metadata.generateName").unwrap_err(),
        "field label not supported: metadata.generateName"
    );
    assert_eq!(
        v("status.phase").unwrap_err(),
        "unsupported fieldPath: status.phase"
    );
    assert_eq!(
        v("metadata.name['x']").unwrap_err(),
        "field label does not support subscript: metadata.name['x']"
    );
    assert!(v("metadata.labels['-bad']")
        .unwrap_err()
        .starts_with("invalid key subscript"));
    let mut other = field("metadata.name");
    other.api_version = Some("v2".into());
    assert_eq!(
        pod_field_value(&other, &p, &cx).unwrap_err(),
        "unsupported pod version: v2"
    );
    // Without a node IP upstream fails the container rather than inventing one.
    let none = ctx(&alloc, &ips, &[]);
    assert!(pod_field_value(&field("status.hostIP"), &p, &none).is_err());
}

fn with_resources(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> Container {
    let m = |v: &[(&str, &str)]| {
        (!v.is_empty()).then(|| v.iter().map(|(k, x)| (k.to_string(), q(x))).collect())
    };
    Container {
        name: "main".into(),
        resources: Some(ResourceRequirements {
            limits: m(limits),
            requests: m(requests),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn rf(resource: &str, divisor: Option<&str>) -> ResourceFieldSelector {
    ResourceFieldSelector {
        container_name: None,
        divisor: divisor.map(q),
        resource: resource.into(),
    }
}

#[test]
fn resource_field_refs_round_up_like_upstream() {
    let c = with_resources(
        &[
            ("cpu", "250m"),
            ("memory", "64Mi"),
            ("hugepages-2Mi", "4Mi"),
        ],
        &[
            ("cpu", "100m"),
            ("memory", "1Gi"),
            ("ephemeral-storage", "1500"),
        ],
    );
    let p = pod();
    let v = |r: &str, d: Option<&str>| container_resource_value(&rf(r, d), &p, &c);
    assert_eq!(v("limits.cpu", None).unwrap(), "1");
    assert_eq!(v("limits.cpu", Some("1m")).unwrap(), "250");
    assert_eq!(v("limits.cpu", Some("100m")).unwrap(), "3");
    assert_eq!(v("requests.cpu", Some("1m")).unwrap(), "100");
    assert_eq!(v("limits.memory", None).unwrap(), "67108864");
    assert_eq!(v("limits.memory", Some("1Mi")).unwrap(), "64");
    assert_eq!(v("requests.memory", Some("1M")).unwrap(), "1074");
    assert_eq!(v("requests.ephemeral-storage", Some("1k")).unwrap(), "2");
    assert_eq!(v("limits.hugepages-2Mi", Some("1Mi")).unwrap(), "4");
    // A divisor of 0 means 1, as upstream's zero-Quantity check.
    assert_eq!(v("limits.memory", Some("0")).unwrap(), "67108864");
    // Unset means zero here; make_environment_variables defaults limits first.
    assert_eq!(v("limits.ephemeral-storage", None).unwrap(), "0");
    assert_eq!(
        v("limits.gpu", None).unwrap_err(),
        "unsupported container resource : limits.gpu"
    );
}

#[test]
fn resource_field_ref_by_container_name() {
    let mut p = pod();
    let spec = p.spec.as_mut().unwrap();
    spec.containers
        .push(with_resources(&[("memory", "2Mi")], &[]));
    spec.containers[1].name = "side".into();
    spec.init_containers = Some(vec![with_resources(&[("cpu", "2")], &[])]);
    spec.init_containers.as_mut().unwrap()[0].name = "init".into();
    let main = p.spec.as_ref().unwrap().containers[0].clone();
    let mut sel = rf("limits.memory", Some("1Mi"));
    sel.container_name = Some("side".into());
    assert_eq!(container_resource_value(&sel, &p, &main).unwrap(), "2");
    let mut sel = rf("limits.cpu", None);
    sel.container_name = Some("init".into());
    assert_eq!(container_resource_value(&sel, &p, &main).unwrap(), "2");
    sel.container_name = Some("nope".into());
    assert_eq!(
        container_resource_value(&sel, &p, &main).unwrap_err(),
        "container nope not found"
    );
}

fn env(name: &str, value: &str) -> KEnvVar {
    KEnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn env_from(name: &str, src: EnvVarSource) -> KEnvVar {
    KEnvVar {
        name: name.into(),
        value: None,
        value_from: Some(src),
    }
}

#[test]
fn environment_expands_earlier_vars_and_defaults_limits_to_allocatable() {
    let p = pod();
    let mut c = with_resources(&[("memory", "32Mi")], &[]);
    c.env = Some(vec![
        env("LATER", "$(NAME)"),
        env_from(
            "NAME",
            EnvVarSource {
                field_ref: Some(field("metadata.name")),
                ..Default::default()
            },
        ),
        env("GREETING", "hello-$(NAME)-$$(NAME)-$(UNKNOWN)"),
        env_from(
            "CPU",
            EnvVarSource {
                resource_field_ref: Some(rf("limits.cpu", Some("1m"))),
                ..Default::default()
            },
        ),
        env_from(
            "MEM",
            EnvVarSource {
                resource_field_ref: Some(rf("limits.memory", Some("1Mi"))),
                ..Default::default()
            },
        ),
        env("EMPTY", ""),
        env("NAME", "again-$(NAME)"),
    ]);
    let alloc: BTreeMap<String, Quantity> = [
        ("cpu".to_string(), q("2")),
        ("memory".to_string(), q("4Gi")),
    ]
    .into();
    let ips = vec!["10.0.0.5".to_string()];
    let got = make_environment_variables(&p, &c, &ctx(&alloc, &ips, &[])).unwrap();
    let want: Vec<EnvVar> = [
        ("LATER", "$(NAME)"),
        ("NAME", "again-web"),
        ("GREETING", "hello-web-$(NAME)-$(UNKNOWN)"),
        ("CPU", "2000"),
        ("MEM", "32"),
        ("EMPTY", ""),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(got, want);

    c.command = Some(vec![
        "sh".into(),
        "-c".into(),
        "echo $(GREETING) $$(NAME) $HOME".into(),
    ]);
    c.args = Some(vec!["$(CPU)".into(), "$(NOPE)".into()]);
    let (cmd, args) = expand_command_and_args(&c, &got);
    assert_eq!(cmd[2], "echo hello-web-$(NAME)-$(UNKNOWN) $(NAME) $HOME");
    assert_eq!(args, vec!["2000", "$(NOPE)"]);
    c.command = None;
    c.args = None;
    assert_eq!(expand_command_and_args(&c, &got), (vec![], vec![]));
}

fn objects() -> Objects {
    let data = |kv: &[(&str, &str)]| ObjectData {
        data: kv
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect(),
        binary_data: BTreeMap::new(),
    };
    let mut o = Objects::default();
    o.0.insert(
        (ObjectKind::ConfigMap, "cm".into()),
        Ok(data(&[
            ("A", "a"),
            ("b.c", "bc"),
            ("1bad", "x"),
            ("has space", "y"),
        ])),
    );
    o.0.insert(
        (ObjectKind::Secret, "s".into()),
        Ok(data(&[("PASS", "hunter2")])),
    );
    for (kind, name) in [
        (ObjectKind::ConfigMap, "gone"),
        (ObjectKind::Secret, "gone"),
    ] {
        o.0.insert(
            (kind, name.into()),
            Err(ObjectError::NotFound {
                kind,
                name: name.into(),
            }),
        );
    }
    o
}

fn cm_key(name: &str, key: &str, optional: Option<bool>) -> EnvVarSource {
    EnvVarSource {
        config_map_key_ref: Some(ConfigMapKeySelector {
            name: name.into(),
            key: key.into(),
            optional,
        }),
        ..Default::default()
    }
}

fn secret_key(name: &str, key: &str, optional: Option<bool>) -> EnvVarSource {
    EnvVarSource {
        secret_key_ref: Some(SecretKeySelector {
            name: name.into(),
            key: key.into(),
            optional,
        }),
        ..Default::default()
    }
}

fn resolve(c: &Container, objs: &Objects) -> Result<Env, ConfigError> {
    let alloc = BTreeMap::new();
    let mut cx = ctx(&alloc, &[], &[]);
    cx.objects = objs;
    make_env(&pod(), c, &cx)
}

#[test]
fn key_refs_resolve_and_honour_optional() {
    let objs = objects();
    let mut c = with_resources(&[], &[]);
    c.env = Some(vec![
        env_from("FROM_CM", cm_key("cm", "A", None)),
        env_from("FROM_SECRET", secret_key("s", "PASS", None)),
        env_from("OPT_KEY", cm_key("cm", "nope", Some(true))),
        env_from("OPT_OBJ", secret_key("gone", "x", Some(true))),
        env("BOTH", "$(FROM_CM)-$(FROM_SECRET)"),
    ]);
    let got = resolve(&c, &objs).unwrap().vars;
    assert_eq!(
        got,
        vec![
            ("FROM_CM".to_string(), "a".to_string()),
            ("FROM_SECRET".into(), "hunter2".into()),
            ("BOTH".into(), "a-hunter2".into()),
        ]
    );
}

#[test]
fn missing_required_objects_and_keys_give_upstream_messages() {
    let objs = objects();
    let one = |src: EnvVarSource| {
        let mut c = with_resources(&[], &[]);
        c.env = Some(vec![env_from("X", src)]);
        resolve(&c, &objs).unwrap_err().0
    };
    let ns = "prod".to_string();
    assert_eq!(
        one(cm_key("cm", "FOO", None)),
        "couldn't find key FOO in ConfigMap prod/cm"
    );
    assert_eq!(
        one(secret_key("s", "FOO", Some(false))),
        format!("couldn't find key FOO in Secret {ns}/s")
    );
    assert_eq!(
        one(cm_key("gone", "A", None)),
        "configmap \"gone\" not found"
    );
    assert_eq!(
        one(secret_key("gone", "A", None)),
        "secret \"gone\" not found"
    );
    // Not fetched at all (standalone has no client): the message says so even when optional.
    let standalone = Objects(
        [(
            (ObjectKind::ConfigMap, "cm".to_string()),
            Err(ObjectError::NoClient {
                kind: ObjectKind::ConfigMap,
                namespace: ns.clone(),
                name: "cm".into(),
            }),
        )]
        .into_iter()
        .collect(),
    );
    let mut c = with_resources(&[], &[]);
    c.env = Some(vec![env_from("X", cm_key("cm", "A", Some(true)))]);
    assert_eq!(
        resolve(&c, &standalone).unwrap_err().0,
        format!("couldn't get configMap {ns}/cm, no kubeClient defined")
    );
}

#[test]
fn env_from_prefixes_skips_invalid_names_and_env_wins() {
    let objs = objects();
    let mut c = with_resources(&[], &[]);
    c.env_from = Some(vec![
        EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: "cm".into(),
                optional: None,
            }),
            prefix: Some("P_".into()),
            ..Default::default()
        },
        EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: "s".into(),
                optional: None,
            }),
            ..Default::default()
        },
        EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: "gone".into(),
                optional: Some(true),
            }),
            ..Default::default()
        },
    ]);
    c.env = Some(vec![env("PASS", "override $(P_A)")]);
    let got = resolve(&c, &objs).unwrap();
    assert_eq!(
        got.vars,
        vec![
            // Key order within one source (a map upstream, sorted here).
            ("P_1bad".to_string(), "x".to_string()),
            ("P_A".into(), "a".into()),
            ("P_b.c".into(), "bc".into()),
            ("PASS".into(), "override a".into()),
        ]
    );
    let ns = "prod";
    assert_eq!(
        got.invalid_names,
        vec![format!(
            "Keys [P_has space] from the EnvFrom configMap {ns}/cm were skipped since they are considered invalid environment variable names."
        )]
    );
    // Without a prefix "1bad" is invalid too; a required missing object fails.
    c.env_from.as_mut().unwrap()[0].prefix = None;
    let got = resolve(&c, &objs).unwrap();
    assert!(
        got.invalid_names[0].contains("Keys [1bad, has space]"),
        "{got:?}"
    );
    c.env_from.as_mut().unwrap()[2]
        .config_map_ref
        .as_mut()
        .unwrap()
        .optional = None;
    assert_eq!(
        resolve(&c, &objs).unwrap_err().0,
        "configmap \"gone\" not found"
    );
}

#[test]
fn env_var_names_as_upstream() {
    for ok in ["A", "_a", "a.b-c", "-x", ".x", "A1"] {
        assert!(is_env_var_name(ok), "{ok}");
    }
    for bad in ["", "1A", "a b", "a=b", "ä"] {
        assert!(!is_env_var_name(bad), "{bad}");
    }
}

/// Upstream `makeEnvironmentVariables` with services: `$(VAR)` sees the service variables, the
/// container's own definition wins, and the remaining service variables come after the container's.
#[test]
fn service_variables_expand_and_lose_to_explicit_env() {
    let alloc = BTreeMap::new();
    let services: BTreeMap<String, String> = [
        ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
        ("TEST_SERVICE_HOST", "10.0.0.3"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut cx = ctx(&alloc, &[], &[]);
    cx.services = &services;
    let c = Container {
        name: "main".into(),
        env: Some(vec![
            env(
                "URL",
                "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)",
            ),
            env("TEST_SERVICE_HOST", "mine"),
        ]),
        ..Default::default()
    };
    let got = make_environment_variables(&pod(), &c, &cx).unwrap();
    let want: Vec<EnvVar> = [
        ("URL", "https://10.0.0.1:443"),
        ("TEST_SERVICE_HOST", "mine"),
        ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(got, want);
}
