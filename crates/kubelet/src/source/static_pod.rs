//! Static pod manifests, from a file or a URL: decoding, validation and the defaults upstream
//! applies to them (`config/common.go` `applyDefaults`, `tryDecodeSinglePod`, and the API's
//! `SetDefaults_Pod`).
//!
//! The UID is a hash of the decoded manifest plus where it came from (node and file name, or the
//! URL), so it is stable across kubelet restarts (that is what lets a restarted kubelet adopt the
//! pod's containers) and changes with every edit (an edit replaces the pod, as upstream).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Toleration};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::podutil;
use crate::types::RestartPolicy;

/// Why a manifest was not accepted; the file source logs it with the file name.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ManifestError {
    #[error("not valid YAML or JSON: {0}")]
    Syntax(String),
    #[error("cannot decode as a v1 Pod at {path}: {message}")]
    Decode { path: String, message: String },
    #[error("invalid pod: {}", .0.join("; "))]
    Invalid(Vec<String>),
}

use crate::types::annotations::CONFIG_HASH_ANNOTATION;
// The config annotations live in `types`; the API source names these through this module.
pub use crate::types::annotations::{CONFIG_SOURCE_ANNOTATION, MIRROR_ANNOTATION};

/// Where a manifest came from (upstream passes `applyDefaults` the source and `isFile`): it feeds
/// the UID, names the pod's `kubernetes.io/config.source`, and only file pods get the
/// tolerate-everything-NoExecute toleration, as upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin<'a> {
    /// A file of the static pod directory (its path).
    File(&'a str),
    /// The manifest URL (`staticPodURL`).
    Url(&'a str),
}

impl Origin<'_> {
    /// The config source name (upstream `kubetypes.FileSource` / `HTTPSource`).
    pub fn source(&self) -> &'static str {
        match self {
            Origin::File(_) => super::FILE_SOURCE,
            Origin::Url(_) => super::HTTP_SOURCE,
        }
    }
}

/// Decodes one manifest (a Pod, or a PodList / List of pods) and applies static pod defaults.
pub fn parse_manifest(
    text: &str,
    origin: Origin<'_>,
    node_name: &str,
) -> Result<Vec<Pod>, ManifestError> {
    let value: Value =
        serde_saphyr::from_str(text).map_err(|e| ManifestError::Syntax(e.to_string()))?;
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    let raw_pods: Vec<Value> = match kind {
        "Pod" => vec![value],
        "PodList" | "List" => match value.get("items") {
            Some(Value::Array(items)) => items.clone(),
            _ => {
                return Err(ManifestError::Invalid(vec![
                    "items: a list is required".into()
                ]))
            }
        },
        "" => {
            return Err(ManifestError::Invalid(vec![
                "kind: required (\"Pod\")".into()
            ]))
        }
        other => {
            return Err(ManifestError::Invalid(vec![format!(
                "kind: {other:?} is not a Pod or PodList"
            )]))
        }
    };
    raw_pods
        .into_iter()
        .map(|raw| {
            if let Some(v) = raw.get("apiVersion").and_then(Value::as_str) {
                if v != "v1" {
                    return Err(ManifestError::Invalid(vec![format!(
                        "apiVersion: {v:?} is not \"v1\""
                    )]));
                }
            }
            let pod: Pod =
                serde_path_to_error::deserialize(raw).map_err(|e| ManifestError::Decode {
                    path: e.path().to_string(),
                    message: e.inner().to_string(),
                })?;
            validate(&pod)?;
            Ok(apply_static_defaults(pod, origin, node_name))
        })
        .collect()
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// The subset of upstream pod validation a node can check alone and that would otherwise fail
/// obscurely in the runtime.
fn validate(pod: &Pod) -> Result<(), ManifestError> {
    let mut errs = Vec::new();
    match pod.metadata.name.as_deref() {
        None | Some("") => errs.push("metadata.name: required".to_string()),
        Some(n) if !is_dns_subdomain(n) => errs.push(format!(
            "metadata.name: {n:?} must be a lower-case DNS subdomain"
        )),
        _ => {}
    }
    if let Some(ns) = pod.metadata.namespace.as_deref() {
        if !ns.is_empty() && !is_dns_label(ns) {
            errs.push(format!(
                "metadata.namespace: {ns:?} must be a lower-case DNS label"
            ));
        }
    }
    let Some(spec) = pod.spec.as_ref() else {
        errs.push("spec: required".into());
        return Err(ManifestError::Invalid(errs));
    };
    if spec.containers.is_empty() {
        errs.push("spec.containers: at least one container is required".into());
    }
    let mut names = std::collections::HashSet::new();
    let all = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| (format!("spec.initContainers[{i}]"), c))
        .chain(
            spec.containers
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("spec.containers[{i}]"), c)),
        );
    for (at, c) in all {
        if !is_dns_label(&c.name) {
            errs.push(format!(
                "{at}.name: {:?} must be a lower-case DNS label",
                c.name
            ));
        } else if !names.insert(c.name.clone()) {
            errs.push(format!("{at}.name: duplicate container name {:?}", c.name));
        }
        if c.image.as_deref().unwrap_or("").trim().is_empty() {
            errs.push(format!("{at}.image: required"));
        }
        if let Some(p) = c.image_pull_policy.as_deref() {
            if !["Always", "IfNotPresent", "Never"].contains(&p) {
                errs.push(format!("{at}.imagePullPolicy: unsupported value {p:?}"));
            }
        }
        for port in c.ports.iter().flatten() {
            if !(1..=65535).contains(&port.container_port) {
                errs.push(format!(
                    "{at}.ports: containerPort {} out of range",
                    port.container_port
                ));
            }
        }
    }
    if let Some(p) = spec.restart_policy.as_deref() {
        if RestartPolicy::parse(p).is_none() {
            errs.push(format!("spec.restartPolicy: unsupported value {p:?}"));
        }
    }
    if let Some(g) = spec.termination_grace_period_seconds {
        if g < 0 {
            errs.push("spec.terminationGracePeriodSeconds: must be >= 0".into());
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ManifestError::Invalid(errs))
    }
}

/// `applyDefaults` plus the API server's defaulting a static pod never gets.
pub fn apply_static_defaults(mut pod: Pod, origin: Origin<'_>, node_name: &str) -> Pod {
    if pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
        let mut h = Sha256::new();
        h.update(serde_json::to_vec(&pod).unwrap_or_default());
        // Upstream hashes the node and file for a file, only the URL for a URL.
        match origin {
            Origin::File(file) => {
                h.update(format!("host:{node_name}"));
                h.update(format!("file:{file}"));
            }
            Origin::Url(url) => h.update(format!("url:{url}")),
        }
        // 32 hex digits, the length of upstream's md5-based UID.
        pod.metadata.uid = Some(hex::encode(&h.finalize()[..16]));
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    pod.metadata.name = Some(format!("{name}-{}", node_name.to_lowercase()));
    if pod.metadata.namespace.as_deref().unwrap_or("").is_empty() {
        pod.metadata.namespace = Some("default".into());
    }
    let ann = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.insert(CONFIG_HASH_ANNOTATION.into(), uid);
    ann.insert(CONFIG_SOURCE_ANNOTATION.into(), origin.source().into());
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node_name.to_string());
    }
    if let (Origin::File(_), Some(spec)) = (origin, pod.spec.as_mut()) {
        // Not evicted on node problems (upstream adds it to file pods only).
        let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
        let all_no_execute = Toleration {
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            ..Default::default()
        };
        if !tolerations.contains(&all_no_execute) {
            tolerations.push(all_no_execute);
        }
    }
    podutil::apply_api_defaults(&mut pod);
    pod
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: httpd
    image: rkubelet.local/busybox:1.35
    command: ["httpd", "-f", "-p", "80"]
    resources:
      limits: {cpu: 1, memory: 64Mi}
"#;

    #[test]
    fn static_pod_naming_hash_and_defaults() {
        let pods = parse_manifest(GOOD, Origin::File("/etc/m/web.yaml"), "Node-1").unwrap();
        assert_eq!(pods.len(), 1);
        let p = &pods[0];
        assert_eq!(p.metadata.name.as_deref(), Some("web-node-1"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
        let uid = p.metadata.uid.clone().unwrap();
        assert_eq!(uid.len(), 32);
        let ann = p.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[CONFIG_HASH_ANNOTATION], uid);
        assert_eq!(ann[CONFIG_SOURCE_ANNOTATION], "file");
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
        assert_eq!(spec.node_name.as_deref(), Some("Node-1"));
        let c = &spec.containers[0];
        assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(
            c.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        assert_eq!(c.termination_message_policy.as_deref(), Some("File"));

        // Same content, same UID (restart safety); other content or file, another UID.
        let again = parse_manifest(GOOD, Origin::File("/etc/m/web.yaml"), "Node-1").unwrap();
        assert_eq!(again[0].metadata.uid.as_deref(), Some(uid.as_str()));
        let edited = parse_manifest(
            &GOOD.replace("80", "81"),
            Origin::File("/etc/m/web.yaml"),
            "Node-1",
        )
        .unwrap();
        assert_ne!(edited[0].metadata.uid.as_deref(), Some(uid.as_str()));
        let moved = parse_manifest(GOOD, Origin::File("/etc/m/web2.yaml"), "Node-1").unwrap();
        assert_ne!(moved[0].metadata.uid.as_deref(), Some(uid.as_str()));
    }

    #[test]
    fn json_and_lists() {
        let json = r#"{"apiVersion":"v1","kind":"PodList","items":[
            {"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"x:latest"}]}},
            {"metadata":{"name":"b","namespace":"kube-system"},"spec":{"containers":[{"name":"c","image":"x"}]}}]}"#;
        let pods = parse_manifest(json, Origin::File("/f.json"), "n").unwrap();
        assert_eq!(pods.len(), 2);
        assert_eq!(
            pods[0].spec.as_ref().unwrap().containers[0]
                .image_pull_policy
                .as_deref(),
            Some("Always")
        );
        assert_eq!(pods[1].metadata.namespace.as_deref(), Some("kube-system"));
    }

    #[test]
    fn manifest_errors_name_what_is_wrong() {
        let e = parse_manifest("kind: Pod\nmetadata: [oops", Origin::File("f"), "n").unwrap_err();
        assert!(matches!(e, ManifestError::Syntax(_)), "{e}");
        let e = parse_manifest("kind: Service\n", Origin::File("f"), "n").unwrap_err();
        assert!(e.to_string().contains("Service"), "{e}");
        let e = parse_manifest(
            "kind: Pod\nmetadata: {name: x}\nspec:\n  containers:\n  - name: c\n    image: i\n    ports: oops\n",
            Origin::File("f"),
            "n",
        )
        .unwrap_err();
        match e {
            ManifestError::Decode { path, .. } => assert_eq!(path, "spec.containers[0].ports"),
            other => panic!("{other}"),
        }
        let e = parse_manifest(
            "kind: Pod\nmetadata: {name: Bad_Name}\nspec:\n  restartPolicy: Sometimes\n  containers:\n  - name: c\n  - name: c\n    image: i\n",
            Origin::File("f"),
            "n",
        )
        .unwrap_err();
        let ManifestError::Invalid(errs) = e else {
            panic!()
        };
        let all = errs.join("|");
        for want in [
            "metadata.name",
            "image: required",
            "duplicate container name",
            "restartPolicy",
        ] {
            assert!(all.contains(want), "{want} missing in {all}");
        }
    }
}
