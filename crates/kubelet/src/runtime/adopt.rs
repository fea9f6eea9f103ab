//! Adopting containers another kubelet created: the swap from the upstream kubelet to rkubelet on
//! a running node (issue 15) must not restart anything.
//!
//! Upstream's `io.kubernetes.container.hash` (`kubecontainer.HashContainer`) is an FNV-32a hash of
//! go-spew's printing of the Go `v1.Container` struct, which rkubelet cannot reproduce, so a
//! plain hash comparison would call every upstream container "definition changed" and restart it
//! at the first sync. Instead, a container without rkubelet's `rkubelet.io/created-by`
//! annotation ([`ContainerStatus::foreign`]) is taken as matching its spec when the one field of a
//! container that can change on a running pod matches: its image (upstream's API validation lets
//! only `image` change in a pod's containers; a static pod whose manifest changes gets a new UID,
//! hence a new pod). The container then gets rkubelet's hash of the spec, and the decisions in
//! `actions` treat it as rkubelet's own; when the image differs it keeps upstream's hash, which
//! never equals rkubelet's, and is restarted as "definition changed", as upstream would.
//!
//! Nothing is written down: the decision is remade from the runtime at every sync, so an rkubelet
//! restart knows as much as the first run did, and a spec change after the swap (only the image,
//! by the rule above) is seen the moment it happens.
//!
//! "Same image" compares what the container runs (CRI `imageRef`: the image ID, or a repo digest
//! when the image has one) with the ID and repo digests of the spec's image as the runtime has it
//! now (CRI `ImageStatus`): a tag moved to another image since the container started counts as a
//! change. The way back (rkubelet -> upstream) has no such rule upstream: upstream restarts the
//! containers rkubelet created (their hash is rkubelet's) and keeps its own.

use std::borrow::Cow;
use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::api;
use tracing::{debug, warn};

use super::{labels, PodRuntimeStatus, RuntimeManager};
use crate::podutil;

/// The spec image's identities: its ID and repo digests, as CRI `ImageStatus` reports them.
pub type ImageIdentities = HashMap<String, Vec<String>>;

/// `rt` with every foreign container whose image is its spec's image given rkubelet's hash of
/// that spec (pure). `images` maps a spec image to its identities; an image missing from it (not
/// in the runtime) matches nothing.
pub fn adopt(pod: &Pod, rt: &PodRuntimeStatus, images: &ImageIdentities) -> PodRuntimeStatus {
    let mut out = rt.clone();
    for s in out.containers.iter_mut().filter(|s| s.foreign) {
        let Some(spec) = podutil::containers(pod)
            .iter()
            .chain(podutil::init_containers(pod))
            .find(|c| c.name == s.name)
        else {
            continue;
        };
        let image = spec.image.as_deref().unwrap_or_default();
        let same = images
            .get(image)
            .is_some_and(|ids| !s.image_ref.is_empty() && ids.contains(&s.image_ref));
        if same {
            s.hash = labels::container_hash(spec);
            s.foreign = false;
        }
    }
    out
}

/// The spec images of `pod`'s foreign containers (those [`adopt`] needs identities for).
fn images_to_resolve(pod: &Pod, rt: &PodRuntimeStatus) -> Vec<String> {
    let mut out: Vec<String> = rt
        .containers
        .iter()
        .filter(|s| s.foreign)
        .filter_map(|s| {
            podutil::containers(pod)
                .iter()
                .chain(podutil::init_containers(pod))
                .find(|c| c.name == s.name)
                .and_then(|c| c.image.clone())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// [`adopt`] with the identities of the images it needs, read from the runtime; `rt` unchanged
/// (borrowed) when no container is foreign, the common case.
pub async fn adopt_foreign<'a>(
    runtime: &RuntimeManager,
    pod: &Pod,
    rt: &'a PodRuntimeStatus,
) -> Cow<'a, PodRuntimeStatus> {
    let wanted = images_to_resolve(pod, rt);
    if wanted.is_empty() {
        return Cow::Borrowed(rt);
    }
    let mut images = ImageIdentities::new();
    for image in wanted {
        let req = api::ImageStatusRequest {
            image: Some(api::ImageSpec {
                image: image.clone(),
                ..Default::default()
            }),
            verbose: false,
        };
        match runtime.cri.image_status(req).await {
            Ok(r) => {
                if let Some(i) = r.image {
                    let mut ids = i.repo_digests.clone();
                    ids.push(i.id.clone());
                    images.insert(image, ids);
                }
            }
            // Unknown identity: the container is not adopted and will be replaced, the safe side.
            Err(e) => warn!(%image, error = %e, "image status for adopting a container failed"),
        }
    }
    let out = adopt(pod, rt, &images);
    for s in out.containers.iter().filter(|s| !s.foreign) {
        if rt.containers.iter().any(|o| o.id == s.id && o.foreign) {
            debug!(pod = %podutil::describe(pod), container = %s.name, id = %s.id,
                "adopted a container another kubelet created");
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    use super::*;
    use crate::container::{ContainerState, ContainerStatus};
    use crate::prober::ProbeResults;
    use crate::runtime::{compute_pod_actions, SandboxStatus};

    fn pod(image: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("p".into());
        p.metadata.uid = Some("u".into());
        p.spec = Some(PodSpec {
            init_containers: Some(vec![Container {
                name: "init".into(),
                image: Some("img:1".into()),
                ..Default::default()
            }]),
            containers: vec![Container {
                name: "main".into(),
                image: Some(image.into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    fn ctr(name: &str, state: ContainerState, image_ref: &str, foreign: bool) -> ContainerStatus {
        ContainerStatus {
            id: format!("id-{name}"),
            name: name.into(),
            state,
            hash: "2f4a1b3c".into(),
            image_ref: image_ref.into(),
            restart_count: 2,
            foreign,
            ..Default::default()
        }
    }

    fn status(main: ContainerStatus) -> PodRuntimeStatus {
        PodRuntimeStatus {
            sandboxes: vec![SandboxStatus {
                id: "sb".into(),
                ready: true,
                ip: "10.0.0.2".into(),
                ..Default::default()
            }],
            containers: vec![main, ctr("init", ContainerState::Exited, "sha256:i", true)],
        }
    }

    fn identities() -> ImageIdentities {
        HashMap::from([
            ("img:1".into(), vec!["sha256:i".into()]),
            (
                "img:2".into(),
                vec!["reg/img@sha256:d2".into(), "sha256:two".into()],
            ),
        ])
    }

    /// (case, spec image, running container's imageRef, foreign, adopted, restarted)
    #[test]
    fn foreign_containers_are_adopted_when_their_image_matches() {
        let cases = [
            (
                "upstream's, same image ID",
                "img:1",
                "sha256:i",
                true,
                true,
                false,
            ),
            (
                "upstream's, same repo digest",
                "img:2",
                "reg/img@sha256:d2",
                true,
                true,
                false,
            ),
            (
                "upstream's, image changed since",
                "img:2",
                "sha256:i",
                true,
                false,
                true,
            ),
            (
                "upstream's, spec image unknown",
                "img:3",
                "sha256:i",
                true,
                false,
                true,
            ),
            (
                "upstream's, no imageRef reported",
                "img:1",
                "",
                true,
                false,
                true,
            ),
            // rkubelet's own with another hash: compared by hash as always.
            (
                "rkubelet's own, stale hash",
                "img:1",
                "sha256:i",
                false,
                false,
                true,
            ),
        ];
        for (name, image, image_ref, foreign, adopted, restarted) in cases {
            let p = pod(image);
            let rt = status(ctr("main", ContainerState::Running, image_ref, foreign));
            let out = adopt(&p, &rt, &identities());
            let main = &out.containers[0];
            assert_eq!(
                main.hash == labels::container_hash(&podutil::containers(&p)[0]),
                adopted,
                "{name}: adopted"
            );
            assert_eq!(main.restart_count, 2, "{name}: restart count kept");
            let a = compute_pod_actions(&p, &out, &ProbeResults::default());
            assert_eq!(
                a.containers_to_kill.iter().any(|k| k.id == "id-main"),
                restarted,
                "{name}: restarted"
            );
            assert_eq!(a.containers_to_start.contains(&0), restarted, "{name}");
            assert!(!a.create_sandbox && !a.kill_pod, "{name}: sandbox kept");
            assert!(
                a.init_containers_to_start.is_empty(),
                "{name}: init not rerun"
            );
        }
    }

    #[test]
    fn only_foreign_containers_need_image_identities() {
        let p = pod("img:2");
        let rt = status(ctr("main", ContainerState::Running, "sha256:two", true));
        assert_eq!(images_to_resolve(&p, &rt), ["img:1", "img:2"]);
        let mut own = rt.clone();
        own.containers.iter_mut().for_each(|c| c.foreign = false);
        assert!(images_to_resolve(&p, &own).is_empty());
    }
}
