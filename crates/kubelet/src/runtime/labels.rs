//! The CRI labels and annotations upstream puts on sandboxes and containers
//! (`kuberuntime/labels.go`), so crictl, other tools and a restarted kubelet recognise them.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use sha2::{Digest, Sha256};

use crate::podutil::{self, ContainerKind};

// The keys live in `types::labels` so that logs, stats and the server need not depend on the
// runtime; `runtime::labels::*` keeps naming them.
pub use crate::types::labels::*;

/// Sandbox labels: the pod's labels plus the identity labels.
pub fn sandbox_labels(pod: &Pod) -> HashMap<String, String> {
    let mut l: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    l.insert(POD_NAME.into(), podutil::name(pod).into());
    l.insert(POD_NAMESPACE.into(), podutil::namespace(pod).into());
    l.insert(POD_UID.into(), podutil::uid(pod).into());
    l
}

/// Sandbox annotations: the pod's annotations, as upstream, plus rkubelet's [`CREATED_BY`].
pub fn sandbox_annotations(pod: &Pod) -> HashMap<String, String> {
    let mut a: HashMap<String, String> = pod
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    a.insert(CREATED_BY.into(), CREATED_BY_RKUBELET.into());
    a
}

pub fn container_labels(pod: &Pod, c: &Container) -> HashMap<String, String> {
    HashMap::from([
        (POD_NAME.into(), podutil::name(pod).into()),
        (POD_NAMESPACE.into(), podutil::namespace(pod).into()),
        (POD_UID.into(), podutil::uid(pod).into()),
        (CONTAINER_NAME.into(), c.name.clone()),
    ])
}

pub fn container_annotations(
    pod: &Pod,
    c: &Container,
    restart_count: i32,
    kind: ContainerKind,
) -> HashMap<String, String> {
    let mut a = HashMap::from([
        (CONTAINER_HASH.into(), container_hash(c)),
        (CONTAINER_RESTART_COUNT.into(), restart_count.to_string()),
        (
            TERMINATION_MESSAGE_PATH.into(),
            c.termination_message_path.clone().unwrap_or_default(),
        ),
        (
            TERMINATION_MESSAGE_POLICY.into(),
            c.termination_message_policy.clone().unwrap_or_default(),
        ),
        (
            POD_TERMINATION_GRACE_PERIOD.into(),
            podutil::grace_period_seconds(pod).to_string(),
        ),
        (CONTAINER_TYPE.into(), kind.label().into()),
        // The hash above is rkubelet's: see `runtime::adopt` for containers without it.
        (CREATED_BY.into(), CREATED_BY_RKUBELET.into()),
    ]);
    if let Some(ports) = c.ports.as_ref().filter(|p| !p.is_empty()) {
        a.insert(
            CONTAINER_PORTS.into(),
            serde_json::to_string(ports).unwrap_or_default(),
        );
    }
    a
}

/// Hash of the container spec (upstream `kubecontainer.HashContainer`): a change of any field
/// restarts the container. Serialization of the k8s-openapi struct is deterministic (fixed field
/// order, sorted maps), so the hash is stable across restarts of rkubelet.
pub fn container_hash(c: &Container) -> String {
    let bytes = serde_json::to_vec(c).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    let mut n = [0u8; 8];
    n.copy_from_slice(&digest[..8]);
    format!("{:x}", u64::from_be_bytes(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_and_sensitive() {
        let c = Container {
            name: "a".into(),
            image: Some("x:1".into()),
            ..Default::default()
        };
        assert_eq!(container_hash(&c), container_hash(&c.clone()));
        let mut d = c.clone();
        d.args = Some(vec!["y".into()]);
        assert_ne!(container_hash(&c), container_hash(&d));
    }
}
