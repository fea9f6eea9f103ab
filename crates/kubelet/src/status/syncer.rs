//! Writes pod statuses to the API server (upstream `status_manager.go` `syncPod`): the newest status
//! per pod, patched only when it changed, with the pod UID in the patch as precondition (a pod
//! deleted and re-created under the same name is never written to by mistake). A failed write is
//! retried with [`crate::backoff::API`] (a few seconds at most, so statuses converge soon after an
//! outage), and while backing off new statuses are only recorded; a flush stops at the first
//! request that did not reach the API server, so an outage costs one request per retry, not one
//! per pod. Strategic merge keeps conditions owned by others (PodScheduled, readiness gates); fields
//! a condition no longer has are sent as null so that they are cleared (see [`status_patch`]). Once a
//! deleted pod is fully terminated, the object is deleted with grace 0, as upstream.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{Patch, PatchParams};
use kube::{Client, Resource};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// Upstream `syncPeriod` of the status manager.
pub const RESYNC: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

#[derive(Debug)]
pub enum SyncCmd {
    Patch(PodKey, Box<PodStatus>),
    Delete(PodKey),
}

/// Optional fields of a pod condition: strategic merge merges a condition into the stored one by
/// `type`, so one the new condition lacks would survive from the old.
const CONDITION_OPTIONAL: &[&str] = &["reason", "message", "lastProbeTime"];

/// The strategic merge patch of a pod's status, with the UID as precondition. Upstream's
/// `PatchPodStatus` sends a two-way diff in which a field the new condition lacks is null (e.g.
/// `reason: ContainersNotReady` of a Ready condition that turned True); this sends the whole
/// status and nulls every optional condition field it lacks, which clears the same fields.
pub fn status_patch(uid: &str, st: &PodStatus) -> serde_json::Value {
    let mut status = serde_json::to_value(st).unwrap_or_default();
    if let Some(conds) = status
        .get_mut("conditions")
        .and_then(serde_json::Value::as_array_mut)
    {
        for c in conds
            .iter_mut()
            .filter_map(serde_json::Value::as_object_mut)
        {
            for f in CONDITION_OPTIONAL {
                c.entry(*f).or_insert(serde_json::Value::Null);
            }
        }
    }
    serde_json::json!({ "metadata": { "uid": uid }, "status": status })
}

/// The answer to a status patch whose pod is not the one the patch was for: gone (404), a
/// conflict (409), or, as the API server answers a patch whose `metadata.uid` precondition names
/// an older pod of the same name, 422 Invalid with cause `metadata.uid` ("field is immutable").
/// The last one happens to every static pod whose manifest changed: its mirror pod is re-created
/// with a new UID while the old pod's final statuses are still queued. Upstream's `syncPod` GETs
/// the pod first and drops the status when the UID differs ("Pod was deleted and then recreated,
/// skipping status update"); retrying it would fail forever.
fn another_pod(s: &kube::core::Status) -> bool {
    s.is_not_found()
        || s.is_conflict()
        || (s.is_invalid()
            && s.details
                .as_ref()
                .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid")))
}

/// The API-writing half of the status manager; owns the client and what is still to be written.
pub struct Syncer {
    client: Client,
    rx: mpsc::UnboundedReceiver<SyncCmd>,
    /// Statuses not yet accepted by the API server.
    pending: BTreeMap<PodKey, PodStatus>,
    /// What the API server last accepted, to skip unchanged writes.
    written: BTreeMap<PodKey, PodStatus>,
    deletes: BTreeMap<PodKey, ()>,
}

impl Syncer {
    pub fn new(client: Client) -> (Self, mpsc::UnboundedSender<SyncCmd>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Syncer {
                client,
                rx,
                pending: BTreeMap::new(),
                written: BTreeMap::new(),
                deletes: BTreeMap::new(),
            },
            tx,
        )
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(RESYNC);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut retry = crate::backoff::API.retry();
        // Set while backing off after a failed flush.
        let mut retry_at: Option<tokio::time::Instant> = None;
        loop {
            let backoff = async {
                match retry_at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                cmd = self.rx.recv() => match cmd {
                    Some(c) => {
                        self.take(c);
                        if retry_at.is_some() {
                            continue;
                        }
                    }
                    None => return,
                },
                _ = tick.tick() => {
                    if retry_at.is_some() {
                        continue;
                    }
                }
                _ = backoff => retry_at = None,
            }
            // Coalesce whatever else is queued: only the newest status per pod is written.
            while let Ok(c) = self.rx.try_recv() {
                self.take(c);
            }
            if self.flush().await {
                retry.reset();
            } else {
                retry_at = Some(tokio::time::Instant::now() + retry.next_delay());
            }
        }
    }

    fn take(&mut self, cmd: SyncCmd) {
        match cmd {
            SyncCmd::Patch(k, st) => {
                if self.written.get(&k) == Some(&*st) {
                    self.pending.remove(&k);
                } else {
                    self.pending.insert(k, *st);
                }
            }
            // The final status still pending is written first (`flush`), as upstream's
            // `syncPod` patches before it deletes: with a finalizer the object stays, and its
            // owner (the Job controller) counts the pod from that status.
            SyncCmd::Delete(k) => {
                self.deletes.insert(k, ());
            }
        }
    }

    /// Writes what is pending; false when a write failed (retry after a backoff). Stops at the
    /// first request that did not reach the API server: the rest would fail the same way.
    async fn flush(&mut self) -> bool {
        let mut failed = false;
        let mut down = false;
        let pending = std::mem::take(&mut self.pending);
        for (k, st) in pending {
            if down {
                self.pending.insert(k, st);
                continue;
            }
            let patch = status_patch(&k.uid, &st);
            let req = pods(&k.namespace).patch_subresource(
                "status",
                &k.name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            );
            match send(&self.client, req).await {
                Ok(_) => {
                    debug!(pod = %format!("{}/{}", k.namespace, k.name), phase = ?st.phase, "status patched");
                    self.written.insert(k, st);
                }
                // The pod is gone or is another pod now: nothing to write.
                Err(kube::Error::Api(s)) if another_pod(&s) => {
                    debug!(pod = %format!("{}/{}", k.namespace, k.name), uid = %k.uid, "pod was deleted and then recreated, skipping status update");
                    self.written.remove(&k);
                }
                Err(e) => {
                    warn!(pod = %format!("{}/{}", k.namespace, k.name), error = %e, "failed to update pod status; will retry");
                    failed = true;
                    down = crate::backoff::unreachable(&e);
                    self.pending.insert(k, st);
                }
            }
        }
        let deletes = std::mem::take(&mut self.deletes);
        for (k, ()) in deletes {
            // Not before its final status: a write that failed is retried first.
            if down || self.pending.contains_key(&k) {
                self.deletes.insert(k, ());
                continue;
            }
            let req = pods(&k.namespace).delete(&k.name, &crate::podutil::delete_now(&k.uid));
            match send(&self.client, req).await {
                Ok(_) => {
                    info!(target: v2!(), pod = %format!("{}/{}", k.namespace, k.name), "pod fully terminated; deleted from the API server");
                    self.written.remove(&k);
                }
                Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => {
                    self.written.remove(&k);
                }
                Err(e) => {
                    warn!(pod = %format!("{}/{}", k.namespace, k.name), error = %e, "failed to delete pod; will retry");
                    failed = true;
                    down = crate::backoff::unreachable(&e);
                    self.deletes.insert(k, ());
                }
            }
        }
        !failed
    }
}

/// The request builder for pods in `namespace` (what `Api::<Pod>::namespaced` holds).
fn pods(namespace: &str) -> kube::core::Request {
    kube::core::Request::new(Pod::url_path(&(), Some(namespace)))
}

/// Sends a write and keeps only whether it worked: the API's error (`kube::Error::Api`, parsed
/// from the server's Status as kube's `Api` methods do) or nothing. `Api::patch_status` and
/// `Api::delete` parse the whole pod the server answers with, which the syncer never reads:
/// at 100 pods started and deleted that was a third of the kubelet's JSON decoding (perf). The
/// body is still read to its end, so the connection is reused.
async fn send(
    client: &Client,
    req: Result<hyper::Request<Vec<u8>>, kube::core::request::Error>,
) -> Result<(), kube::Error> {
    let req = req.map_err(kube::Error::BuildRequest)?;
    client.request_text(req).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodCondition;
    use kube::core::response::{StatusCause, StatusDetails};
    use kube::core::Status;

    /// A pod's final status queued with its delete is not dropped for it: both wait, the status
    /// first, while the API server cannot be reached (port 1 on loopback refuses).
    #[tokio::test]
    async fn a_delete_keeps_the_final_status_before_it() {
        let cfg = kube::Config::new("http://127.0.0.1:1".parse().expect("url"));
        let client = Client::try_from(cfg).expect("client");
        let (mut s, _tx) = Syncer::new(client);
        let k = PodKey {
            namespace: "default".into(),
            name: "kept".into(),
            uid: "u1".into(),
        };
        let done = PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        };
        s.take(SyncCmd::Patch(k.clone(), Box::new(done.clone())));
        s.take(SyncCmd::Delete(k.clone()));
        assert_eq!(s.pending.get(&k), Some(&done));
        assert!(!s.flush().await, "nothing reached the API server");
        assert_eq!(s.pending.get(&k), Some(&done), "the status is retried");
        assert!(s.deletes.contains_key(&k), "the delete is retried after it");
    }

    /// The requests go as kube's `Api` methods send them (method, path, patch type, the delete's
    /// UID precondition); a 2xx is success whatever its body, and an error body comes back as the
    /// API's Status, which the flush reads (a 404 is "another pod", nothing is retried).
    #[tokio::test]
    async fn writes_keep_the_api_requests_and_errors() {
        let (client, seen) = crate::testutil::scripted_client(|path| {
            if path.ends_with("/gone/status") {
                (
                    404,
                    r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#,
                )
            } else {
                (200, "not a pod: the syncer does not read it")
            }
        });
        let (mut s, _tx) = Syncer::new(client);
        let key = |name: &str| PodKey {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        };
        let running = PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        };
        s.take(SyncCmd::Patch(key("web"), Box::new(running.clone())));
        s.take(SyncCmd::Patch(key("gone"), Box::new(running.clone())));
        s.take(SyncCmd::Delete(key("web")));
        assert!(s.flush().await, "every write answered");
        assert_eq!(s.written.get(&key("web")), None, "deleted: forgotten");
        assert!(!s.written.contains_key(&key("gone")) && s.pending.is_empty());
        assert!(s.deletes.is_empty(), "nothing to retry");
        let seen = seen.lock().expect("log").clone();
        assert_eq!(seen.len(), 3, "{seen:#?}");
        let patch = |name: &str| {
            format!(
                "PATCH /api/v1/namespaces/ns/pods/{name}/status application/strategic-merge-patch+json {}",
                status_patch(&format!("uid-{name}"), &running)
            )
        };
        assert!(seen.contains(&patch("web")), "{seen:#?}");
        assert!(seen.contains(&patch("gone")), "{seen:#?}");
        let delete = seen.last().expect("a delete");
        assert!(
            delete.starts_with("DELETE /api/v1/namespaces/ns/pods/web application/json ")
                && delete.contains(r#""uid":"uid-web""#)
                && delete.contains(r#""gracePeriodSeconds":0"#),
            "{delete}"
        );
    }

    #[test]
    fn which_errors_mean_another_pod() {
        let invalid = |field: &str| Status {
            code: 422,
            reason: "Invalid".into(),
            details: Some(StatusDetails {
                name: "kube-apiserver-n".into(),
                group: String::new(),
                kind: "Pod".into(),
                uid: String::new(),
                causes: vec![StatusCause {
                    reason: "FieldValueInvalid".into(),
                    message: "field is immutable".into(),
                    field: field.into(),
                }],
                retry_after_seconds: 0,
            }),
            ..Default::default()
        };
        let plain = |code: u16, reason: &str| Status {
            code,
            reason: reason.into(),
            ..Default::default()
        };
        for (s, want) in [
            (invalid("metadata.uid"), true),
            (plain(404, "NotFound"), true),
            (plain(409, "Conflict"), true),
            // Anything else invalid in the status is a real error to retry and log.
            (invalid("status.podIP"), false),
            (plain(422, "Invalid"), false),
            (plain(500, "InternalError"), false),
        ] {
            assert_eq!(another_pod(&s), want, "{s:?}");
        }
    }

    #[test]
    fn absent_condition_fields_are_sent_as_null() {
        let st = PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![
                PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                },
                PodCondition {
                    type_: "ContainersReady".into(),
                    status: "False".into(),
                    reason: Some("ContainersNotReady".into()),
                    message: Some("containers with unready status: [main]".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let want = serde_json::json!({
            "metadata": { "uid": "u1" },
            "status": {
                "phase": "Running",
                "conditions": [
                    { "type": "Ready", "status": "True", "reason": null, "message": null,
                      "lastProbeTime": null },
                    { "type": "ContainersReady", "status": "False",
                      "reason": "ContainersNotReady",
                      "message": "containers with unready status: [main]",
                      "lastProbeTime": null },
                ],
            },
        });
        assert_eq!(status_patch("u1", &st), want);
    }
}
