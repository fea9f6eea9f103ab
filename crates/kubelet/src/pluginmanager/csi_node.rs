//! What a registered CSI driver changes in the API (upstream `pkg/volume/csi/nodeinfomanager`):
//! the node's `csi.volume.kubernetes.io/nodeid` annotation (a JSON map driver -> node ID), the
//! driver's topology segments as node labels, and the driver's entry in the `CSINode` object
//! (storage.k8s.io/v1) named after the node and owned by it. Deregistration removes the entry
//! and the annotation key (labels stay, as upstream).
//!
//! The merges are pure functions with table tests; the writes are optimistic (resourceVersion
//! preconditions) and a conflict fails the registration, which the reconciler retries.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec, VolumeNodeResources};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams, PostParams};

use super::PluginError;

/// Upstream `annotationKeyNodeID`.
pub const NODE_ID_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";

/// What `NodeGetInfo` said about this node.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeInfo {
    pub node_id: String,
    /// `max_volumes_per_node`; 0 means no limit (no `allocatable` in the CSINode entry).
    pub max_volumes: i64,
    pub topology: BTreeMap<String, String>,
}

/// The annotation's new value with `driver` set to `node_id` (None: removed); None when the
/// map ends up empty (upstream deletes the annotation then).
pub fn node_id_annotation(
    current: Option<&str>,
    driver: &str,
    node_id: Option<&str>,
) -> Result<Option<String>, PluginError> {
    let mut map: BTreeMap<String, String> = match current {
        Some(s) if !s.is_empty() => serde_json::from_str(s).map_err(|e| {
            PluginError::Api(format!(
                "failed to parse node's {NODE_ID_ANNOTATION} annotation value {s:?}: {e}"
            ))
        })?,
        _ => BTreeMap::new(),
    };
    match node_id {
        Some(id) => {
            map.insert(driver.to_string(), id.to_string());
        }
        None => {
            map.remove(driver);
        }
    }
    if map.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(&map)
        .map(Some)
        .map_err(|e| PluginError::Api(e.to_string()))
}

/// Labels to add for the driver's topology (upstream `updateTopologyLabels`): an existing label
/// with another value is an error naming it.
pub fn topology_labels(
    current: &BTreeMap<String, String>,
    topology: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, PluginError> {
    let mut add = BTreeMap::new();
    for (k, v) in topology {
        match current.get(k) {
            Some(cur) if cur == v => {}
            Some(cur) => {
                return Err(PluginError::Api(format!(
                    "detected topology value collision: driver reported {k:?}:{v:?} but existing label is {k:?}:{cur:?}"
                )))
            }
            None => {
                add.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(add)
}

/// The CSINode entry for a driver (upstream `installDriverToCSINode`).
pub fn driver_entry(name: &str, info: &NodeInfo) -> CSINodeDriver {
    CSINodeDriver {
        name: name.to_string(),
        node_id: info.node_id.clone(),
        topology_keys: Some(info.topology.keys().cloned().collect()),
        allocatable: (info.max_volumes > 0).then(|| VolumeNodeResources {
            count: i32::try_from(info.max_volumes).ok(),
        }),
    }
}

/// `drivers` with `name`'s entry replaced by `entry` (None: removed); None when nothing changes.
pub fn with_driver(
    drivers: &[CSINodeDriver],
    name: &str,
    entry: Option<CSINodeDriver>,
) -> Option<Vec<CSINodeDriver>> {
    let existing = drivers.iter().find(|d| d.name == name);
    if existing == entry.as_ref() {
        return None;
    }
    let mut out: Vec<CSINodeDriver> = drivers.iter().filter(|d| d.name != name).cloned().collect();
    out.extend(entry);
    Some(out)
}

fn api_err(what: &str, e: kube::Error) -> PluginError {
    PluginError::Api(format!("{what}: {e}"))
}

/// Upstream `InstallCSIDriver` (None: `UninstallCSIDriver`).
pub async fn update(
    client: &kube::Client,
    node_name: &str,
    driver: &str,
    info: Option<&NodeInfo>,
) -> Result<(), PluginError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .get(node_name)
        .await
        .map_err(|e| api_err("error getting node", e))?;
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let current = annotations.get(NODE_ID_ANNOTATION).map(String::as_str);
    let new_annotation = node_id_annotation(current, driver, info.map(|i| i.node_id.as_str()))?;
    let new_labels = match info {
        Some(i) => topology_labels(&labels, &i.topology)?,
        None => BTreeMap::new(),
    };
    if new_annotation.as_deref() != current || !new_labels.is_empty() {
        let patch = serde_json::json!({"metadata": {
            "resourceVersion": node.metadata.resource_version,
            "annotations": {NODE_ID_ANNOTATION: new_annotation},
            "labels": new_labels,
        }});
        nodes
            .patch(node_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| api_err("error updating node", e))?;
    }

    let csinodes: Api<CSINode> = Api::all(client.clone());
    let entry = info.map(|i| driver_entry(driver, i));
    match csinodes
        .get_opt(node_name)
        .await
        .map_err(|e| api_err("error getting CSINode", e))?
    {
        None => {
            let Some(entry) = entry else {
                return Ok(());
            };
            let obj = CSINode {
                metadata: ObjectMeta {
                    name: Some(node_name.to_string()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: node_name.to_string(),
                        uid: node.metadata.uid.clone().unwrap_or_default(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                spec: CSINodeSpec {
                    drivers: vec![entry],
                },
                ..Default::default()
            };
            csinodes
                .create(&PostParams::default(), &obj)
                .await
                .map_err(|e| api_err("error creating CSINode", e))?;
        }
        Some(mut obj) => {
            if let Some(drivers) = with_driver(&obj.spec.drivers, driver, entry) {
                obj.spec.drivers = drivers;
                csinodes
                    .replace(node_name, &PostParams::default(), &obj)
                    .await
                    .map_err(|e| api_err("error updating CSINode", e))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotation() {
        let cases: &[(Option<&str>, Option<&str>, Option<&str>)] = &[
            (None, Some("n1"), Some(r#"{"d":"n1"}"#)),
            (
                Some(r#"{"a":"x"}"#),
                Some("n1"),
                Some(r#"{"a":"x","d":"n1"}"#),
            ),
            (Some(r#"{"d":"old"}"#), Some("n1"), Some(r#"{"d":"n1"}"#)),
            (Some(r#"{"d":"n1"}"#), None, None),
            (Some(r#"{"a":"x","d":"n1"}"#), None, Some(r#"{"a":"x"}"#)),
            (Some(""), None, None),
        ];
        for (cur, id, want) in cases {
            let got = node_id_annotation(*cur, "d", *id).expect("valid");
            assert_eq!(got.as_deref(), *want, "{cur:?} {id:?}");
        }
        let err = node_id_annotation(Some("not json"), "d", None).expect_err("bad json");
        assert!(err.to_string().contains(NODE_ID_ANNOTATION), "{err}");
    }

    #[test]
    fn labels() {
        let m = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        let cur = m(&[("zone", "a"), ("x", "1")]);
        assert_eq!(
            topology_labels(&cur, &m(&[("zone", "a")])).expect("same"),
            m(&[])
        );
        assert_eq!(
            topology_labels(&cur, &m(&[("rack", "r1")])).expect("new"),
            m(&[("rack", "r1")])
        );
        let err = topology_labels(&cur, &m(&[("zone", "b")])).expect_err("collision");
        assert!(err.to_string().contains("collision"), "{err}");
    }

    #[test]
    fn drivers() {
        let info = NodeInfo {
            node_id: "n1".into(),
            max_volumes: 0,
            topology: BTreeMap::from([("k".to_string(), "v".to_string())]),
        };
        let e = driver_entry("d", &info);
        assert_eq!(e.allocatable, None);
        assert_eq!(e.topology_keys, Some(vec!["k".to_string()]));
        let limited = driver_entry(
            "d",
            &NodeInfo {
                max_volumes: 7,
                ..info.clone()
            },
        );
        assert_eq!(limited.allocatable.and_then(|a| a.count), Some(7));
        let other = driver_entry("o", &info);
        // Added, unchanged (None), replaced, removed, removing an absent one (None).
        assert_eq!(
            with_driver(std::slice::from_ref(&other), "d", Some(e.clone())),
            Some(vec![other.clone(), e.clone()])
        );
        assert_eq!(
            with_driver(std::slice::from_ref(&e), "d", Some(e.clone())),
            None
        );
        let renamed = CSINodeDriver {
            node_id: "n2".into(),
            ..e.clone()
        };
        assert_eq!(
            with_driver(std::slice::from_ref(&e), "d", Some(renamed.clone())),
            Some(vec![renamed])
        );
        assert_eq!(
            with_driver(&[other.clone(), e.clone()], "d", None),
            Some(vec![other.clone()])
        );
        assert_eq!(with_driver(&[other], "d", None), None);
    }
}
