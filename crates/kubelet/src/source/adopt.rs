//! Static pods another kubelet ran before a swap to rkubelet keep their UID (issue 15).
//!
//! A static pod's UID is a hash of its manifest (upstream `applyDefaults`: md5 over go-spew's
//! printing of the decoded Go pod, the node and the file), which rkubelet cannot reproduce: with
//! its own UID rkubelet would see a new pod, kill the running one as an orphan and replace the
//! mirror pod. So at start rkubelet looks at the sandboxes the runtime already runs: a ready one
//! another kubelet created (no `rkubelet.io/created-by` annotation) for a file-source pod
//! (`kubernetes.io/config.source: file`, from the pod annotations upstream copies onto the
//! sandbox) names the UID of the static pod with that namespace and name. The first time the file
//! source delivers a pod of that name, rkubelet's UID for that manifest is mapped to the adopted
//! one, and kept mapped while the manifest does not change; an edited manifest gets rkubelet's
//! own new UID, a new pod, as upstream does on an edit. The containers of the adopted pod are
//! then adopted by image (`runtime::adopt`).
//!
//! A manifest edited while no kubelet ran is not detected by the name match (upstream's sandbox
//! carries no spec); its containers are still replaced if their image changed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::api;

use crate::podutil;
use crate::types::annotations::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION};
use crate::types::labels::{CREATED_BY, CREATED_BY_RKUBELET, POD_NAME, POD_NAMESPACE, POD_UID};

/// (namespace, name) of a pod.
type PodKey = (String, String);

/// The UIDs of static pods another kubelet left running, by namespace and name (pure).
pub fn foreign_static_sandboxes(sandboxes: &[api::PodSandbox]) -> HashMap<PodKey, String> {
    sandboxes
        .iter()
        .filter(|s| s.state == api::PodSandboxState::SandboxReady as i32)
        .filter(|s| s.annotations.get(CREATED_BY).map(String::as_str) != Some(CREATED_BY_RKUBELET))
        .filter(|s| {
            s.annotations
                .get(CONFIG_SOURCE_ANNOTATION)
                .map(String::as_str)
                == Some("file")
        })
        .filter_map(|s| {
            let l = |k: &str| s.labels.get(k).filter(|v| !v.is_empty()).cloned();
            Some(((l(POD_NAMESPACE)?, l(POD_NAME)?), l(POD_UID)?))
        })
        .collect()
}

/// Rewrites the UIDs of the file source's pods to the adopted ones; see the module doc.
#[derive(Debug, Default)]
pub struct StaticUidAdoption {
    /// Not claimed by a manifest yet.
    unclaimed: HashMap<PodKey, String>,
    /// rkubelet's UID for an unchanged manifest -> the adopted UID.
    claimed: BTreeMap<String, String>,
}

impl StaticUidAdoption {
    pub fn new(foreign: HashMap<PodKey, String>) -> Self {
        StaticUidAdoption {
            unclaimed: foreign,
            claimed: BTreeMap::new(),
        }
    }

    /// Applies the adoption to one snapshot of the file source.
    pub fn apply(&mut self, pods: &mut [Arc<Pod>]) {
        let mut claimed = BTreeMap::new();
        for pod in pods.iter_mut() {
            let own = podutil::uid(pod).to_string();
            let key = (
                podutil::namespace(pod).to_string(),
                podutil::name(pod).to_string(),
            );
            let adopted = match self.claimed.get(&own) {
                Some(a) => Some(a.clone()),
                None => self.unclaimed.remove(&key),
            };
            let Some(adopted) = adopted else { continue };
            claimed.insert(own, adopted.clone());
            // The file source's own copy keeps rkubelet's UID: a copy for the adopted one.
            let pod = Arc::make_mut(pod);
            pod.metadata.uid = Some(adopted.clone());
            pod.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(CONFIG_HASH_ANNOTATION.into(), adopted);
        }
        // A manifest that changed or went away gives up its adopted UID for good.
        self.claimed = claimed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(
        ns: &str,
        name: &str,
        uid: &str,
        source: &str,
        ours: bool,
        ready: bool,
    ) -> api::PodSandbox {
        let mut s = api::PodSandbox {
            id: format!("sb-{uid}"),
            state: if ready {
                api::PodSandboxState::SandboxReady as i32
            } else {
                api::PodSandboxState::SandboxNotready as i32
            },
            ..Default::default()
        };
        s.labels = [
            (POD_NAMESPACE.to_string(), ns.to_string()),
            (POD_NAME.to_string(), name.to_string()),
            (POD_UID.to_string(), uid.to_string()),
        ]
        .into();
        s.annotations
            .insert(CONFIG_SOURCE_ANNOTATION.into(), source.into());
        if ours {
            s.annotations
                .insert(CREATED_BY.into(), CREATED_BY_RKUBELET.into());
        }
        s
    }

    #[test]
    fn only_ready_foreign_file_sandboxes_count() {
        let found = foreign_static_sandboxes(&[
            sandbox("kube-system", "etcd-n", "up1", "file", false, true),
            sandbox("default", "api-pod", "up2", "api", false, true),
            sandbox("default", "mine-n", "rk1", "file", true, true),
            sandbox("default", "dead-n", "up3", "file", false, false),
        ]);
        assert_eq!(
            found,
            HashMap::from([(("kube-system".into(), "etcd-n".into()), "up1".into())])
        );
    }

    fn static_pod(name: &str, uid: &str) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("kube-system".into());
        p.metadata.uid = Some(uid.into());
        p.metadata.annotations =
            Some([(CONFIG_HASH_ANNOTATION.to_string(), uid.to_string())].into());
        Arc::new(p)
    }

    fn uids(pods: &[Arc<Pod>]) -> Vec<(String, String)> {
        pods.iter()
            .map(|p| {
                let hash = p.metadata.annotations.as_ref().unwrap()[CONFIG_HASH_ANNOTATION].clone();
                (podutil::uid(p).to_string(), hash)
            })
            .collect()
    }

    #[test]
    fn adopted_uid_lasts_while_the_manifest_is_unchanged() {
        let mut a = StaticUidAdoption::new(HashMap::from([(
            ("kube-system".into(), "etcd-n".into()),
            "up1".into(),
        )]));
        let pair = |u: &str| (u.to_string(), u.to_string());
        // (step, pods the file source read, UIDs (uid, config.hash) after adoption)
        type Step = (&'static str, Vec<Arc<Pod>>, Vec<(String, String)>);
        let steps: Vec<Step> = vec![
            (
                "first read: upstream's UID for the running pod, others untouched",
                vec![static_pod("etcd-n", "rk1"), static_pod("other-n", "rk9")],
                vec![pair("up1"), pair("rk9")],
            ),
            (
                "re-read, unchanged: still adopted",
                vec![static_pod("etcd-n", "rk1")],
                vec![pair("up1")],
            ),
            (
                "manifest edited: rkubelet's new UID, a new pod",
                vec![static_pod("etcd-n", "rk2")],
                vec![pair("rk2")],
            ),
            (
                "edited back: the adopted UID is gone for good",
                vec![static_pod("etcd-n", "rk1")],
                vec![pair("rk1")],
            ),
        ];
        for (step, mut pods, want) in steps {
            a.apply(&mut pods);
            assert_eq!(uids(&pods), want, "{step}");
        }
    }
}
