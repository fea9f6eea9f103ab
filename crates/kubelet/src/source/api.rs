//! Pod source `api` (upstream `config/apiserver.go`): list+watch of pods bound to this node
//! (`spec.nodeName=<node>`) through kube-runtime's watcher, which re-lists on 410 Gone. Errors back
//! off with [`crate::backoff::API`] (capped at a few seconds, jittered, reset by any event), a 410
//! relists at once, and while the API server is unreachable a probe notices its return within
//! about a second ([`crate::backoff::watch_wait`]). Sends a full snapshot after each list and
//! then each change alone ([`SourceMsg::Set`] / [`SourceMsg::Delete`]): upstream's
//! `UndeltaStore` sends the whole store per event, which the mux then diffs pod by pod; a watch
//! delivers every change in order, so the change alone says the same for one lookup. Mirror
//! pods are not run (the kubelet owns them, as upstream): they go to the mirror pod manager
//! instead, whenever one of them changes. Pods are read without `metadata.managedFields`
//! ([`LeanPod`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::Client;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::lean_pod::LeanPod;
use super::static_pod::{CONFIG_SOURCE_ANNOTATION, MIRROR_ANNOTATION};
use super::{SourceMsg, SourceSnapshot};
use crate::mirror::MirrorHandle;

pub const API_SOURCE: &str = "api";

/// The pod by UID, as the snapshots share it: a pod to run marked `config.source: api` once,
/// here, rather than in a copy per snapshot.
///
/// `metadata.managedFields` is not there ([`LeanPod`] skips it while parsing): nothing in the
/// kubelet reads it (status goes out as a patch of `status` alone, mirror pods are created and
/// deleted whole), and it was the largest part of every pod kept: heaptrack at 100 API pods put
/// about 1.1 MB of the 9.1 MB heap peak in its field sets' maps. Upstream keeps it (its
/// informers store the object as listed); kube-rs recommends the same trim for reflector
/// stores. The one visible difference: `/pods` on 10250 lists the pods without it.
fn keyed(LeanPod(mut pod): LeanPod) -> Option<(String, Arc<Pod>)> {
    let uid = pod.metadata.uid.clone()?;
    if !is_mirror(&pod) {
        pod.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(CONFIG_SOURCE_ANNOTATION.into(), API_SOURCE.into());
    }
    Some((uid, Arc::new(pod)))
}

fn is_mirror(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
}

/// Splits the store into the pods to run and the mirror pods (shared, not copied).
fn split(store: &BTreeMap<String, Arc<Pod>>) -> (Vec<Arc<Pod>>, Vec<Arc<Pod>>) {
    let (mirrors, pods) = store.values().cloned().partition(|p| is_mirror(p));
    (pods, mirrors)
}

/// What one watch change (`prev` replaced by `now` under `uid`; None for absent) sends: the
/// message for the mux, and whether the mirror pods changed. A pod that is or was a mirror is
/// the mirror manager's; a pod to run that became a mirror (the API server forbids it) leaves
/// the mux as deleted.
fn change(uid: &str, prev: Option<&Arc<Pod>>, now: Option<&Arc<Pod>>) -> (Option<SourceMsg>, bool) {
    let was_mirror = prev.is_some_and(|p| is_mirror(p));
    let is_mirror_now = now.is_some_and(|p| is_mirror(p));
    let msg = match now {
        Some(p) if !is_mirror_now => Some(SourceMsg::Set {
            source: API_SOURCE,
            pod: p.clone(),
        }),
        _ if prev.is_some() && !was_mirror => Some(SourceMsg::Delete {
            source: API_SOURCE,
            uid: uid.to_string(),
        }),
        _ => None,
    };
    (msg, was_mirror || is_mirror_now)
}

pub async fn run(
    client: Client,
    node_name: String,
    tx: mpsc::Sender<SourceMsg>,
    mirrors: MirrorHandle,
    cancel: CancellationToken,
) {
    let pods: Api<LeanPod> = Api::all(client.clone());
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node_name}"));
    // No kube-runtime backoff: the stream is lazy, so not polling it while `watch_wait` sleeps
    // is the backoff.
    let mut stream = watcher::watcher(pods, cfg).boxed();
    let mut retry = crate::backoff::API.retry();
    let mut last_gone = false;
    let mut store: BTreeMap<String, Arc<Pod>> = BTreeMap::new();
    let mut init: BTreeMap<String, Arc<Pod>> = BTreeMap::new();
    loop {
        let ev = tokio::select! {
            _ = cancel.cancelled() => return,
            ev = stream.next() => match ev { Some(ev) => ev, None => return },
        };
        if ev.is_ok() {
            retry.reset();
            last_gone = false;
        }
        let (msg, mirrors_changed) = match ev {
            Ok(Event::Init) => {
                init.clear();
                continue;
            }
            Ok(Event::InitApply(p)) => {
                init.extend(keyed(p));
                continue;
            }
            Ok(Event::InitDone) => {
                store = std::mem::take(&mut init);
                info!(pods = store.len(), "listed pods bound to this node");
                // One pass for both: the mirror manager hears of the list here.
                let (pods, mirror_pods) = split(&store);
                mirrors.observed(mirror_pods);
                let snap = SourceSnapshot {
                    source: API_SOURCE,
                    pods,
                };
                (Some(snap.into()), false)
            }
            Ok(Event::Apply(p)) => {
                let Some((uid, p)) = keyed(p) else { continue };
                let prev = store.insert(uid.clone(), p.clone());
                change(&uid, prev.as_ref(), Some(&p))
            }
            Ok(Event::Delete(p)) => {
                let Some(uid) = p.0.metadata.uid else {
                    continue;
                };
                let prev = store.remove(&uid);
                change(&uid, prev.as_ref(), None)
            }
            Err(e) => {
                warn!(error = %e, "watch of pods bound to this node failed; retrying");
                if !crate::backoff::watch_wait(
                    &mut retry,
                    &e,
                    &mut last_gone,
                    Some(&client),
                    &cancel,
                )
                .await
                {
                    return;
                }
                continue;
            }
        };
        if mirrors_changed {
            mirrors.observed(split(&store).1);
        }
        if let Some(msg) = msg {
            if tx.send(msg).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn pod(uid: Option<&str>, annotations: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                uid: uid.map(Into::into),
                annotations: (!annotations.is_empty()).then(|| {
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect()
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// One watch change: what goes to the mux and whether the mirror manager hears of it.
    #[test]
    fn a_change_goes_to_the_mux_or_the_mirror_manager() {
        let run = Arc::new(pod(Some("u"), &[]));
        let mirror = Arc::new(pod(Some("u"), &[(MIRROR_ANNOTATION, "abc")]));
        #[derive(Debug, PartialEq)]
        enum Want {
            Nothing,
            Set,
            Delete,
        }
        // (previous, now) -> (message, mirrors changed)
        let cases = [
            ((None, Some(&run)), (Want::Set, false)),
            ((Some(&run), Some(&run)), (Want::Set, false)),
            ((Some(&run), None), (Want::Delete, false)),
            ((None, Some(&mirror)), (Want::Nothing, true)),
            ((Some(&mirror), Some(&mirror)), (Want::Nothing, true)),
            ((Some(&mirror), None), (Want::Nothing, true)),
            // Not allowed by the API server, handled all the same.
            ((Some(&run), Some(&mirror)), (Want::Delete, true)),
            ((Some(&mirror), Some(&run)), (Want::Set, true)),
            // The delete of a pod never stored.
            ((None, None), (Want::Nothing, false)),
        ];
        for ((prev, now), (want, want_mirrors)) in cases {
            let (msg, mirrors) = change("u", prev, now);
            let got = match msg {
                None => Want::Nothing,
                Some(SourceMsg::Set { source, pod }) => {
                    assert_eq!(source, API_SOURCE);
                    assert!(Arc::ptr_eq(&pod, now.expect("set of a pod")));
                    Want::Set
                }
                Some(SourceMsg::Delete { source, uid }) => {
                    assert_eq!((source, uid.as_str()), (API_SOURCE, "u"));
                    Want::Delete
                }
                Some(SourceMsg::Snapshot(_)) => panic!("a change sent a snapshot"),
            };
            assert_eq!(
                (got, mirrors),
                (want, want_mirrors),
                "prev {:?} now {:?}",
                prev.map(|p| is_mirror(p)),
                now.map(|p| is_mirror(p))
            );
        }
    }

    #[test]
    fn keyed_marks_the_source() {
        // (pod, expected uid, expected config.source annotation)
        let mirror = [(MIRROR_ANNOTATION, "abc")];
        let cases: [(Pod, Option<&str>, Option<&str>); 3] = [
            (pod(Some("u1"), &[]), Some("u1"), Some(API_SOURCE)),
            (pod(Some("u2"), &mirror), Some("u2"), None),
            (pod(None, &[]), None, None),
        ];
        for (p, uid, source) in cases {
            let got = keyed(LeanPod(p));
            assert_eq!(got.as_ref().map(|(u, _)| u.as_str()), uid);
            let Some((_, p)) = got else { continue };
            let ann = p.metadata.annotations.as_ref();
            assert_eq!(
                ann.and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION))
                    .map(String::as_str),
                source
            );
        }
    }
}
