//! Payloads of downwardAPI and projected volumes: pure functions of the pod, its objects and
//! tokens.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, Pod, ProjectedVolumeSource};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::atomic_writer::FileProjection;
use super::projected::{self, Inputs};
use super::{downward_api, VolumeError};
use crate::objects::{ObjectData, ObjectError, ObjectKind, Objects};
use crate::runtime::env::format_map;
use crate::token::{TokenError, TokenSpec, Tokens};

fn pod() -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "web", "namespace": "team", "uid": "1234",
            "labels": {"b": "two", "a": "one \"quoted\""},
            "annotations": {"note": "line1\nline2\ttab\\slash", "Caps": "x"}
        },
        "spec": {
            "serviceAccountName": "robot",
            "containers": [
                {"name": "app", "resources": {"limits": {"cpu": "1500m", "memory": "100Mi"},
                                              "requests": {"cpu": "250m", "memory": "1Gi"}}},
                {"name": "bare"}
            ],
            "initContainers": [{"name": "init", "resources": {"limits": {"cpu": "2"}}}]
        }
    }))
    .unwrap()
}

fn items(v: serde_json::Value) -> Vec<DownwardAPIVolumeFile> {
    serde_json::from_value(v).unwrap()
}

fn text(p: &BTreeMap<String, FileProjection>, k: &str) -> String {
    String::from_utf8(p[k].data.clone()).unwrap()
}

fn allocatable() -> BTreeMap<String, Quantity> {
    [
        ("cpu".to_string(), Quantity("4".into())),
        ("memory".to_string(), Quantity("8Gi".into())),
    ]
    .into()
}

#[test]
fn format_map_sorts_and_escapes_as_go_quote() {
    let m: BTreeMap<String, String> = [
        ("z".to_string(), "plain".to_string()),
        (
            "a".to_string(),
            "say \"hi\"\n\tback\\slash\u{7}".to_string(),
        ),
        ("m".to_string(), "ünïcode".to_string()),
    ]
    .into();
    assert_eq!(
        format_map(&m),
        "a=\"say \\\"hi\\\"\\n\\tback\\\\slash\\x07\"\nm=\"ünïcode\"\nz=\"plain\""
    );
    assert_eq!(format_map(&BTreeMap::new()), "");
}

#[test]
fn field_refs_become_files_with_modes() {
    let it = items(serde_json::json!([
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}, "mode": 0o400},
        {"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}},
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
        {"path": "sub/label-b", "fieldRef": {"fieldPath": "metadata.labels['b']"}},
        {"path": "note", "fieldRef": {"fieldPath": "metadata.annotations['note']"}},
    ]));
    let p = downward_api::collect_data(&it, &pod(), &allocatable(), Some(0o640)).unwrap();
    assert_eq!(text(&p, "name"), "web");
    assert_eq!(text(&p, "ns"), "team");
    assert_eq!(p["ns"].mode, 0o400);
    assert_eq!(p["name"].mode, 0o640);
    assert_eq!(text(&p, "uid"), "1234");
    assert_eq!(text(&p, "labels"), "a=\"one \\\"quoted\\\"\"\nb=\"two\"");
    assert_eq!(
        text(&p, "annotations"),
        "Caps=\"x\"\nnote=\"line1\\nline2\\ttab\\\\slash\""
    );
    assert_eq!(text(&p, "sub/label-b"), "two");
    assert_eq!(text(&p, "note"), "line1\nline2\ttab\\slash");
}

#[test]
fn default_mode_is_0644() {
    let it = items(serde_json::json!([{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]));
    let p = downward_api::collect_data(&it, &pod(), &allocatable(), None).unwrap();
    assert_eq!(p["n"].mode, 0o644);
}

#[test]
fn resource_field_refs_round_up_and_default_to_allocatable() {
    let it = items(serde_json::json!([
        {"path": "cpu", "resourceFieldRef": {"containerName": "app", "resource": "limits.cpu"}},
        {"path": "cpu-m", "resourceFieldRef": {"containerName": "app", "resource": "limits.cpu", "divisor": "1m"}},
        {"path": "cpu-req", "resourceFieldRef": {"containerName": "app", "resource": "requests.cpu", "divisor": "100m"}},
        {"path": "mem-mi", "resourceFieldRef": {"containerName": "app", "resource": "limits.memory", "divisor": "1Mi"}},
        {"path": "mem-gi", "resourceFieldRef": {"containerName": "app", "resource": "limits.memory", "divisor": "1Gi"}},
        {"path": "req-mem", "resourceFieldRef": {"containerName": "app", "resource": "requests.memory", "divisor": "1M"}},
        {"path": "bare-cpu", "resourceFieldRef": {"containerName": "bare", "resource": "limits.cpu"}},
        {"path": "bare-mem", "resourceFieldRef": {"containerName": "bare", "resource": "limits.memory", "divisor": "1Gi"}},
        {"path": "bare-req", "resourceFieldRef": {"containerName": "bare", "resource": "requests.cpu"}},
        {"path": "init", "resourceFieldRef": {"containerName": "init", "resource": "limits.cpu", "divisor": "1m"}},
    ]));
    let p = downward_api::collect_data(&it, &pod(), &allocatable(), None).unwrap();
    // 1.5 cores in whole cores rounds up.
    assert_eq!(text(&p, "cpu"), "2");
    assert_eq!(text(&p, "cpu-m"), "1500");
    assert_eq!(text(&p, "cpu-req"), "3");
    assert_eq!(text(&p, "mem-mi"), "100");
    // 100Mi in Gi is a fraction: rounded up to 1.
    assert_eq!(text(&p, "mem-gi"), "1");
    // 1Gi = 1073741824 bytes in decimal megabytes: 1073.7 rounds up.
    assert_eq!(text(&p, "req-mem"), "1074");
    // No limits: node allocatable. Requests are not defaulted.
    assert_eq!(text(&p, "bare-cpu"), "4");
    assert_eq!(text(&p, "bare-mem"), "8");
    assert_eq!(text(&p, "bare-req"), "0");
    assert_eq!(text(&p, "init"), "2000");
}

#[test]
fn bad_items_are_reported_together() {
    let it = items(serde_json::json!([
        {"path": "a", "resourceFieldRef": {"containerName": "ghost", "resource": "limits.cpu"}},
        {"path": "b", "fieldRef": {"fieldPath": "spec.nodeName"}},
        {"path": "c", "fieldRef": {"fieldPath": "metadata.name"}},
    ]));
    let err = downward_api::collect_data(&it, &pod(), &allocatable(), None).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, VolumeError::DownwardApi(_)));
    assert!(msg.contains("container ghost not found"), "{msg}");
    assert!(msg.contains("spec.nodeName"), "{msg}");
}

fn objects() -> Objects {
    let cm = ObjectData {
        data: [
            ("ca.crt".to_string(), b"CERT".to_vec()),
            ("other".to_string(), b"o".to_vec()),
        ]
        .into(),
        binary_data: BTreeMap::new(),
    };
    let secret = ObjectData {
        data: [("password".to_string(), b"hunter2".to_vec())].into(),
        binary_data: BTreeMap::new(),
    };
    let mut o = Objects::default();
    o.0.insert((ObjectKind::ConfigMap, "kube-root-ca.crt".into()), Ok(cm));
    o.0.insert((ObjectKind::Secret, "creds".into()), Ok(secret));
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

fn token_spec(exp: i64) -> TokenSpec {
    TokenSpec {
        audience: String::new(),
        expiration_seconds: Some(exp),
    }
}

fn tokens() -> Tokens {
    Tokens([(token_spec(3607), Ok("TOKEN".to_string()))].into())
}

/// What 1.20's ServiceAccount admission injects with BoundServiceAccountTokenVolume.
fn kube_api_access() -> ProjectedVolumeSource {
    serde_json::from_value(serde_json::json!({
        "defaultMode": 0o644,
        "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
        ]
    }))
    .unwrap()
}

#[test]
fn kube_api_access_has_token_ca_and_namespace() {
    let (o, t, a) = (objects(), tokens(), allocatable());
    let inputs = Inputs {
        objects: &o,
        tokens: &t,
        allocatable: &a,
    };
    let p = projected::collect_data(&kube_api_access(), &pod(), &inputs).unwrap();
    assert_eq!(
        p.keys().collect::<Vec<_>>(),
        ["ca.crt", "namespace", "token"]
    );
    assert_eq!(text(&p, "token"), "TOKEN");
    assert_eq!(text(&p, "ca.crt"), "CERT");
    assert_eq!(text(&p, "namespace"), "team");
    assert!(p.values().all(|f| f.mode == 0o644));
}

#[test]
fn all_sources_share_default_mode_and_items_keep_theirs() {
    let src: ProjectedVolumeSource = serde_json::from_value(serde_json::json!({
        "defaultMode": 0o440,
        "sources": [
            {"secret": {"name": "creds"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "other", "path": "cfg/other", "mode": 0o600}]}},
            {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"serviceAccountToken": {"path": "tok", "expirationSeconds": 3607}},
            {"configMap": {"name": "gone", "optional": true}},
            {"secret": {"name": "gone", "optional": true, "items": [{"key": "x", "path": "x"}]}}
        ]
    }))
    .unwrap();
    let (o, t, a) = (objects(), tokens(), allocatable());
    let inputs = Inputs {
        objects: &o,
        tokens: &t,
        allocatable: &a,
    };
    let p = projected::collect_data(&src, &pod(), &inputs).unwrap();
    assert_eq!(
        p.keys().collect::<Vec<_>>(),
        ["cfg/other", "labels", "password", "tok"]
    );
    assert_eq!(p["password"].mode, 0o440);
    assert_eq!(p["cfg/other"].mode, 0o600);
    assert_eq!(p["labels"].mode, 0o440);
    assert_eq!(p["tok"].mode, 0o440);
}

#[test]
fn token_is_0600_with_fs_group() {
    let mut pod = pod();
    pod.spec.as_mut().unwrap().security_context = Some(Default::default());
    pod.spec
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap()
        .fs_group = Some(2000);
    let (o, t, a) = (objects(), tokens(), allocatable());
    let inputs = Inputs {
        objects: &o,
        tokens: &t,
        allocatable: &a,
    };
    let p = projected::collect_data(&kube_api_access(), &pod, &inputs).unwrap();
    assert_eq!(p["token"].mode, 0o600);
    assert_eq!(p["ca.crt"].mode, 0o644);
}

#[test]
fn missing_required_sources_and_tokens_fail_together() {
    let src: ProjectedVolumeSource = serde_json::from_value(serde_json::json!({
        "sources": [
            {"configMap": {"name": "gone"}},
            {"secret": {"name": "creds", "items": [{"key": "nope", "path": "n"}]}},
            {"serviceAccountToken": {"path": "t", "expirationSeconds": 600}}
        ]
    }))
    .unwrap();
    let o = objects();
    let a = allocatable();
    let t = Tokens(
        [(
            token_spec(600),
            Err(TokenError::Api(
                "serviceaccounts \"robot\" not found".into(),
            )),
        )]
        .into(),
    );
    let inputs = Inputs {
        objects: &o,
        tokens: &t,
        allocatable: &a,
    };
    let msg = projected::collect_data(&src, &pod(), &inputs)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("configmap \"gone\" not found"), "{msg}");
    assert!(
        msg.contains("references non-existent secret key: nope"),
        "{msg}"
    );
    assert!(
        msg.contains("failed to fetch token: serviceaccounts \"robot\" not found"),
        "{msg}"
    );
}

#[test]
fn a_refreshed_token_is_written_through_a_new_data_dir() {
    use super::atomic_writer::{self, DATA_DIR};
    let tmp = tempfile::tempdir().unwrap();
    let (o, a) = (objects(), allocatable());
    let with_token = |token: &str| {
        let t = Tokens([(token_spec(3607), Ok(token.to_string()))].into());
        let inputs = Inputs {
            objects: &o,
            tokens: &t,
            allocatable: &a,
        };
        projected::collect_data(&kube_api_access(), &pod(), &inputs).unwrap()
    };
    let dir = tmp.path();
    assert!(atomic_writer::write(dir, &with_token("first"), 0).unwrap());
    let data = std::fs::read_link(dir.join(DATA_DIR)).unwrap();
    // A sync with the cached token writes nothing.
    assert!(!atomic_writer::write(dir, &with_token("first"), 0).unwrap());
    assert_eq!(std::fs::read_link(dir.join(DATA_DIR)).unwrap(), data);
    // The refreshed token swaps ..data; the other files come along unchanged.
    assert!(atomic_writer::write(dir, &with_token("second"), 0).unwrap());
    assert_ne!(std::fs::read_link(dir.join(DATA_DIR)).unwrap(), data);
    assert_eq!(
        std::fs::read_to_string(dir.join("token")).unwrap(),
        "second"
    );
    assert_eq!(std::fs::read_to_string(dir.join("ca.crt")).unwrap(), "CERT");
    assert!(!dir.join(&data).exists(), "old ..data target removed");
}
