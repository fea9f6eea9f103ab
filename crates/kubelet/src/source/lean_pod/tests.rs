use k8s_openapi::api::core::v1::Pod;
use kube::core::{ObjectList, WatchEvent};

use super::LeanPod;

/// A pod as the API server sends it: managed fields from two managers, an annotation and a
/// label that happen to be called `managedFields`, and a spec and status.
const POD: &str = r#"{
  "kind": "Pod",
  "apiVersion": "v1",
  "metadata": {
    "name": "web",
    "namespace": "default",
    "uid": "0b5f1f5e-1111-2222-3333-444455556666",
    "resourceVersion": "42",
    "labels": {"app": "web", "managedFields": "a label"},
    "annotations": {"managedFields": "an annotation"},
    "managedFields": [
      {"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
       "time": "2026-12-05T10:00:00Z", "fieldsType": "FieldsV1",
       "fieldsV1": {"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}}}}}},
      {"manager": "rkubelet", "operation": "Update", "apiVersion": "v1", "subresource": "status",
       "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}
    ],
    "finalizers": ["x/y"]
  },
  "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox",
           "env": [{"name": "managedFields", "value": "v"}]}]},
  "status": {"phase": "Running", "podIP": "10.0.0.5"}
}"#;

fn plain_without_managed_fields(json: &str) -> Pod {
    let mut p: Pod = serde_json::from_str(json).expect("the plain parse");
    p.metadata.managed_fields = None;
    p
}

#[test]
fn a_pod_is_read_whole_but_for_its_managed_fields() {
    let lean: LeanPod = serde_json::from_str(POD).expect("the lean parse");
    let plain: Pod = serde_json::from_str(POD).expect("the plain parse");
    assert_eq!(
        plain.metadata.managed_fields.as_ref().map(Vec::len),
        Some(2)
    );
    assert_eq!(lean.0.metadata.managed_fields, None);
    assert_eq!(lean.0, plain_without_managed_fields(POD));
    // Keys of that name elsewhere are data, not the field.
    let meta = &lean.0.metadata;
    assert_eq!(meta.labels.as_ref().unwrap()["managedFields"], "a label");
    assert_eq!(
        meta.annotations.as_ref().unwrap()["managedFields"],
        "an annotation"
    );
    assert_eq!(meta.finalizers.as_deref(), Some(&["x/y".to_string()][..]));
}

#[test]
fn key_order_and_escaped_keys_do_not_matter() {
    // Metadata last, managedFields first in it, and keys written with escapes (serde_json
    // hands those over as owned strings).
    let json = r#"{"spec": {"containers": [{"name": "c"}]},
        "metadata": {"managed\u0046ields": [{"manager": "m", "fieldsV1": {"f:a": {}}}],
                     "n\u0061me": "p", "uid": "u1"},
        "kind": "Pod", "apiVersion": "v1"}"#;
    let lean: LeanPod = serde_json::from_str(json).expect("the lean parse");
    assert_eq!(lean.0.metadata.managed_fields, None);
    assert_eq!(lean.0.metadata.name.as_deref(), Some("p"));
    assert_eq!(lean.0, plain_without_managed_fields(json));
}

#[test]
fn watch_events_and_lists_carry_lean_pods() {
    let ev = format!(r#"{{"type": "MODIFIED", "object": {POD}}}"#);
    match serde_json::from_str::<WatchEvent<LeanPod>>(&ev).expect("the watch event") {
        WatchEvent::Modified(p) => assert_eq!(p.0, plain_without_managed_fields(POD)),
        other => panic!("not a MODIFIED event: {other:?}"),
    }
    let list = format!(
        r#"{{"kind": "PodList", "apiVersion": "v1", "metadata": {{"resourceVersion": "7"}},
            "items": [{POD}, {POD}]}}"#
    );
    let list: ObjectList<LeanPod> = serde_json::from_str(&list).expect("the list");
    assert_eq!(list.items.len(), 2);
    assert!(list
        .items
        .iter()
        .all(|p| p.0 == plain_without_managed_fields(POD)));
}

#[test]
fn a_broken_pod_fails_as_the_plain_parse_does() {
    for json in [
        r#"{"metadata": {"name": 5}}"#,
        r#"{"metadata": {"managedFields": [}}"#,
        r#"{"metadata": "x"}"#,
        r#"{"spec": {"containers": "x"}}"#,
    ] {
        let lean = serde_json::from_str::<LeanPod>(json);
        let plain = serde_json::from_str::<Pod>(json);
        assert!(lean.is_err(), "{json} was accepted");
        assert!(plain.is_err(), "{json} was accepted by the plain parse");
    }
    // A type error names the same field and place.
    let json = r#"{"metadata": {"name": 5}}"#;
    let lean = serde_json::from_str::<LeanPod>(json)
        .unwrap_err()
        .to_string();
    let plain = serde_json::from_str::<Pod>(json).unwrap_err().to_string();
    assert_eq!(lean, plain);
}
