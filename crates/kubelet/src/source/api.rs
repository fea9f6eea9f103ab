//! Pod source `api` (upstream `config/apiserver.go`): list+watch of pods bound to this node
//! (`spec.nodeName=<node>`) through kube-runtime's watcher, which re-lists on 410 Gone. Errors back
//! off with [`crate::backoff::API`] (capped at a few seconds, jittered, reset by any event), a 410
//! relists at once, and while the API server is unreachable a probe notices its return within
//! about a second ([`crate::backoff::watch_wait`]). Sends a full snapshot after the initial list and after every change. Mirror pods are
//! not run (the kubelet owns them, as upstream): they go to the mirror pod manager instead.

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

use super::static_pod::{CONFIG_SOURCE_ANNOTATION, MIRROR_ANNOTATION};
use super::SourceSnapshot;
use crate::mirror::MirrorHandle;

pub const API_SOURCE: &str = "api";

/// The pod by UID, as the snapshots share it: a pod to run marked `config.source: api` once,
/// here, rather than in a copy per snapshot.
///
/// `metadata.managedFields` is dropped: nothing in the kubelet reads it (status goes out as a
/// patch of `status` alone, mirror pods are created and deleted whole), and it was the largest
/// part of every pod kept: heaptrack at 100 API pods put about 1.1 MB of the 9.1 MB heap peak in
/// its field sets' maps. Upstream keeps it (its informers store the object as listed); kube-rs
/// recommends the same trim for reflector stores. The one visible difference: `/pods` on 10250
/// lists the pods without it.
fn keyed(mut pod: Pod) -> Option<(String, Arc<Pod>)> {
    let uid = pod.metadata.uid.clone()?;
    pod.metadata.managed_fields = None;
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

pub async fn run(
    client: Client,
    node_name: String,
    tx: mpsc::Sender<SourceSnapshot>,
    mirrors: MirrorHandle,
    cancel: CancellationToken,
) {
    let pods: Api<Pod> = Api::all(client.clone());
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
        let changed = match ev {
            Ok(Event::Init) => {
                init.clear();
                false
            }
            Ok(Event::InitApply(p)) => {
                init.extend(keyed(p));
                false
            }
            Ok(Event::InitDone) => {
                store = std::mem::take(&mut init);
                info!(pods = store.len(), "listed pods bound to this node");
                true
            }
            Ok(Event::Apply(p)) => {
                if let Some((uid, p)) = keyed(p) {
                    store.insert(uid, p);
                }
                true
            }
            Ok(Event::Delete(p)) => {
                if let Some(uid) = p.metadata.uid.as_ref() {
                    store.remove(uid);
                }
                true
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
                false
            }
        };
        if !changed {
            continue;
        }
        let (pods, mirror_pods) = split(&store);
        mirrors.observed(mirror_pods);
        if tx
            .send(SourceSnapshot {
                source: API_SOURCE,
                pods,
            })
            .await
            .is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

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
                managed_fields: Some(vec![ManagedFieldsEntry {
                    manager: Some("kubectl".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn keyed_marks_the_source_and_drops_managed_fields() {
        // (pod, expected uid, expected config.source annotation)
        let mirror = [(MIRROR_ANNOTATION, "abc")];
        let cases: [(Pod, Option<&str>, Option<&str>); 3] = [
            (pod(Some("u1"), &[]), Some("u1"), Some(API_SOURCE)),
            (pod(Some("u2"), &mirror), Some("u2"), None),
            (pod(None, &[]), None, None),
        ];
        for (p, uid, source) in cases {
            let got = keyed(p);
            assert_eq!(got.as_ref().map(|(u, _)| u.as_str()), uid);
            let Some((_, p)) = got else { continue };
            assert_eq!(p.metadata.managed_fields, None);
            let ann = p.metadata.annotations.as_ref();
            assert_eq!(
                ann.and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION))
                    .map(String::as_str),
                source
            );
        }
    }
}
