//! The node Lease heartbeat (upstream `pkg/kubelet/nodelease` / `component-helpers` lease
//! controller): `kube-node-lease/<node>`, `nodeLeaseDurationSeconds` (40 s) long, renewed every
//! quarter of that (upstream `nodeLeaseRenewIntervalFraction`), owned by the Node so it
//! is garbage-collected with it. A failed renewal is retried with backoff and logged, never fatal;
//! while the API server is unreachable a probe each second notices its return, so the Lease is
//! renewed at the first chance (a node whose Lease lapses is marked NotReady by the node
//! lifecycle controller), and the status loop is told to post the node status at once.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::NodeStatusConfig;
use crate::backoff::Exponential;

pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// Retrying a failed renewal: 200 ms doubling to 4 s with up to 50 % jitter (upstream's lease
/// controller caps at 7 s; [`crate::backoff::API`]'s cap is used instead so every API loop
/// recovers alike), from the start again after a success.
const RETRY: Exponential =
    Exponential::new(Duration::from_millis(200), Duration::from_secs(4)).with_jitter(0.5);

fn now_micro() -> MicroTime {
    let us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    MicroTime(Timestamp::from_microsecond(us).unwrap_or(Timestamp::UNIX_EPOCH))
}

pub struct LeaseKeeper {
    client: Client,
    api: Api<Lease>,
    node: String,
    node_uid: String,
    /// `nodeLeaseDurationSeconds`.
    duration_seconds: i32,
    /// A quarter of it ([`NodeStatusConfig::lease_renew_interval`]).
    renew_interval: Duration,
    /// What the API server returned for our last write, so a renewal is a single update.
    latest: Option<Lease>,
}

impl LeaseKeeper {
    pub fn new(client: Client, node: String, node_uid: String, cfg: &NodeStatusConfig) -> Self {
        LeaseKeeper {
            api: Api::namespaced(client.clone(), LEASE_NAMESPACE),
            client,
            node,
            node_uid,
            duration_seconds: cfg.lease_duration_seconds,
            // Validation keeps the duration positive; the floor only guards a busy loop.
            renew_interval: cfg.lease_renew_interval().max(Duration::from_millis(100)),
            latest: None,
        }
    }

    fn desired_spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.node.clone()),
            lease_duration_seconds: Some(self.duration_seconds),
            renew_time: Some(now_micro()),
            ..Default::default()
        }
    }

    /// The lease with a fresh renew time and us as holder.
    fn renewed(&self, mut lease: Lease) -> Lease {
        let mut spec = lease.spec.take().unwrap_or_default();
        let d = self.desired_spec();
        spec.holder_identity = d.holder_identity;
        spec.lease_duration_seconds = d.lease_duration_seconds;
        spec.renew_time = d.renew_time;
        lease.spec = Some(spec);
        lease
    }

    /// Upstream's controller: update from the lease the last write returned (one request per
    /// renewal); without one, or when it is stale (conflict, gone), get, then create or update.
    async fn renew(&mut self) -> Result<(), kube::Error> {
        let pp = PostParams::default();
        if let Some(latest) = self.latest.take() {
            match self
                .api
                .replace(&self.node, &pp, &self.renewed(latest))
                .await
            {
                Ok(l) => {
                    self.latest = Some(l);
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.is_conflict() || s.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        let lease = match self.api.get_opt(&self.node).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.node.clone()),
                        namespace: Some(LEASE_NAMESPACE.into()),
                        owner_references: (!self.node_uid.is_empty()).then(|| {
                            vec![OwnerReference {
                                api_version: "v1".into(),
                                kind: "Node".into(),
                                name: self.node.clone(),
                                uid: self.node_uid.clone(),
                                ..Default::default()
                            }]
                        }),
                        ..Default::default()
                    },
                    spec: Some(self.desired_spec()),
                };
                self.api.create(&pp, &lease).await?
            }
            Some(lease) => {
                self.api
                    .replace(&self.node, &pp, &self.renewed(lease))
                    .await?
            }
        };
        self.latest = Some(lease);
        Ok(())
    }

    /// Renews every quarter of the Lease duration; `recovered` is notified by the first renewal after a
    /// failure (the API server is back, and may hold a node status the controller changed).
    pub async fn run(mut self, recovered: Arc<Notify>, cancel: CancellationToken) {
        let mut retry = RETRY.retry();
        let mut failing = false;
        loop {
            match self.renew().await {
                Ok(()) => {
                    debug!(node = %self.node, "lease renewed");
                    retry.reset();
                    if std::mem::take(&mut failing) {
                        info!(node = %self.node, "lease renewed again after failures");
                        recovered.notify_one();
                    }
                    if !crate::backoff::sleep(self.renew_interval, &cancel).await {
                        return;
                    }
                }
                Err(e) => {
                    failing = true;
                    warn!(node = %self.node, error = %e, "failed to renew node lease; retrying");
                    if !crate::backoff::api_wait(&mut retry, &e, &self.client, &cancel).await {
                        return;
                    }
                }
            }
        }
    }
}
