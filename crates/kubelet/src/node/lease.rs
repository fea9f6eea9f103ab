//! The node Lease heartbeat (upstream `pkg/kubelet/nodelease` / `component-helpers` lease
//! controller): `kube-node-lease/<node>`, 40 s duration, renewed every 10 s, owned by the Node so it
//! is garbage-collected with it. A failed renewal is retried with backoff and logged, never fatal.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::backoff::Exponential;

pub const LEASE_NAMESPACE: &str = "kube-node-lease";
pub const LEASE_DURATION_SECONDS: i32 = 40;
/// Upstream renews at a quarter of the duration.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// Retrying a failed renewal: 200 ms doubling to 7 s (the cap is upstream's lease controller
/// `maxBackoff`), from the start again after a success.
const RETRY: Exponential = Exponential::new(Duration::from_millis(200), Duration::from_secs(7));

fn now_micro() -> MicroTime {
    let us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    MicroTime(Timestamp::from_microsecond(us).unwrap_or(Timestamp::UNIX_EPOCH))
}

pub struct LeaseKeeper {
    api: Api<Lease>,
    node: String,
    node_uid: String,
    /// What the API server returned for our last write, so a renewal is a single update.
    latest: Option<Lease>,
}

impl LeaseKeeper {
    pub fn new(client: Client, node: String, node_uid: String) -> Self {
        LeaseKeeper {
            api: Api::namespaced(client, LEASE_NAMESPACE),
            node,
            node_uid,
            latest: None,
        }
    }

    fn desired_spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.node.clone()),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
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

    pub async fn run(mut self, cancel: CancellationToken) {
        let mut retry = RETRY.retry();
        loop {
            let wait = match self.renew().await {
                Ok(()) => {
                    debug!(node = %self.node, "lease renewed");
                    retry.reset();
                    RENEW_INTERVAL
                }
                Err(e) => {
                    let delay = retry.next_delay();
                    warn!(node = %self.node, error = %e, retry_in = ?delay, "failed to renew node lease");
                    delay
                }
            };
            if !crate::backoff::sleep(wait, &cancel).await {
                return;
            }
        }
    }
}
