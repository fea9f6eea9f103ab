//! The node's presence in the cluster (upstream `kubelet_node_status.go` and `nodelease`):
//! registration with backoff, the status loop (computed every `nodeStatusUpdateFrequency`, posted
//! on change or every `nodeStatusReportFrequency`), and the Lease heartbeat. Runs beside the
//! SyncLoop and never blocks it: static pods keep running while the API server is away.

pub mod images;
pub mod lease;
pub mod machine;
pub mod status;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, NodeStatus};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use rkubelet_cri::{api, CriClient};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use machine::MachineInfo;
use status::NodeSettings;

pub use kubelet_config::config::node_status::NodeStatusConfig;

/// Upstream's jitter factor on `nodeStatusUpdateFrequency`.
const STATUS_UPDATE_JITTER: f64 = 0.04;
/// Registration retries: 100 ms doubling to 4 s, jittered (upstream `registerWithAPIServer`
/// caps at 7 s; [`crate::backoff::API`]'s cap is used so every API loop recovers alike).
const REGISTER_BACKOFF: crate::backoff::Exponential =
    crate::backoff::Exponential::new(Duration::from_millis(100), Duration::from_secs(4))
        .with_jitter(0.5);

/// Owns the Node object's status; spawned once the kubelet has a client.
pub struct NodeAgent {
    /// Registration (upstream `kubeClient`, rate limited by `kubeAPIQPS`).
    pub client: Client,
    /// Node status and the Lease (upstream `heartbeatClient`: no client-side rate limit, so a
    /// busy kubelet's queue never delays its heartbeat).
    pub heartbeat: Client,
    pub settings: NodeSettings,
    pub machine: MachineInfo,
    pub runtime_version: String,
    pub cri: CriClient,
    pub health: Arc<crate::health::Health>,
    pub recorder: crate::events::Recorder,
    /// Node pressure from the eviction manager, for the pressure conditions.
    pub eviction: crate::eviction::EvictionHandle,
    /// The status and Lease cadence and `nodeStatusMaxImages`.
    pub config: NodeStatusConfig,
    /// `<root-dir>/pods`, where `volumesInUse` is read from.
    pub pods_dir: std::path::PathBuf,
    /// Device plugin resources for capacity and allocatable (upstream
    /// `devicePluginResourceCapacityFunc`).
    pub devices: Option<crate::cm::devices::DeviceHandle>,
}

impl NodeAgent {
    /// Registers (retrying 100 ms -> 7 s), then runs the Lease and status loops until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        let Some(node) = self.register(&cancel).await else {
            return;
        };
        let uid = node.metadata.uid.clone().unwrap_or_default();
        let lease = lease::LeaseKeeper::new(
            self.heartbeat.clone(),
            self.settings.name.clone(),
            uid,
            &self.config,
        );
        let recovered = Arc::new(tokio::sync::Notify::new());
        tokio::join!(
            lease.run(recovered.clone(), cancel.clone()),
            self.status_loop(node.status, recovered, cancel.clone())
        );
    }

    /// Upstream `registerWithAPIServer`: create, or on AlreadyExists reconcile our labels onto the
    /// existing Node (a restart updates, never duplicates).
    async fn register(&self, cancel: &CancellationToken) -> Option<Node> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node = status::initial_node(&self.settings, &self.machine, &self.runtime_version);
        let mut retry = REGISTER_BACKOFF.retry();
        loop {
            let res = match nodes.create(&PostParams::default(), &node).await {
                Ok(n) => {
                    info!(node = %self.settings.name, "registered node");
                    self.recorder.node_event(
                        crate::events::EventType::Normal,
                        crate::events::REGISTERED_NODE,
                        format!("Node {} registered with the API server", self.settings.name),
                    );
                    // Upstream's setters record the initial conditions while building the Node.
                    if let Some(st) = &n.status {
                        self.record_condition_events(None, st);
                    }
                    Ok(n)
                }
                Err(kube::Error::Api(s)) if s.is_already_exists() => {
                    let patch = serde_json::json!({
                        "metadata": {"labels": node.metadata.labels},
                    });
                    nodes
                        .patch(&self.settings.name, &PatchParams::default(), &Patch::Strategic(&patch))
                        .await
                        .inspect(|_| info!(node = %self.settings.name, "node already registered; updated its labels"))
                }
                Err(e) => Err(e),
            };
            match res {
                Ok(n) => return Some(n),
                Err(e) => {
                    warn!(node = %self.settings.name, error = %e, "unable to register node with the API server; retrying");
                    if !crate::backoff::api_wait(&mut retry, &e, &self.client, cancel).await {
                        return None;
                    }
                }
            }
        }
    }

    /// Why the node is not ready, from the kubelet's loops and the runtime's own conditions.
    async fn health(&self) -> status::Health {
        let mut not_ready = Vec::new();
        if let Err(errs) = self.health.check() {
            not_ready.extend(
                errs.into_iter()
                    .map(|e| format!("PLEG is not healthy: {e}")),
            );
        }
        match self.cri.status(api::StatusRequest { verbose: false }).await {
            Ok(s) => {
                for c in s.status.map(|s| s.conditions).unwrap_or_default() {
                    if !c.status && (c.r#type == "RuntimeReady" || c.r#type == "NetworkReady") {
                        not_ready.push(format!(
                            "container runtime {} not ready: {}={} reason:{} message:{}",
                            if c.r#type == "NetworkReady" {
                                "network"
                            } else {
                                "status"
                            },
                            c.r#type,
                            c.status,
                            c.reason,
                            c.message
                        ));
                    }
                }
            }
            Err(e) => not_ready.push(format!("container runtime is down: {e}")),
        }
        status::Health {
            not_ready,
            pressure: self.eviction.pressure().conditions,
        }
    }

    /// Upstream `nodestatus.Images`: on a listing error the list is left empty (and logged),
    /// as upstream does. Listed at every status computation: upstream reads a copy its image
    /// manager refreshes every 30 s, so this is the same list, never staler.
    async fn images(&self) -> Option<Vec<k8s_openapi::api::core::v1::ContainerImage>> {
        match self
            .cri
            .list_images(api::ListImagesRequest { filter: None })
            .await
        {
            Ok(r) => images::node_images(&r.images, self.config.max_images),
            Err(e) => {
                warn!(error = %e, "error getting image list for the node status");
                None
            }
        }
    }

    /// All Normal, NodeNotReady included, as upstream's setters record them.
    fn record_condition_events(&self, last: Option<&NodeStatus>, st: &NodeStatus) {
        for reason in status::condition_events(last, st) {
            self.recorder.node_event(
                crate::events::EventType::Normal,
                reason,
                format!("Node {} status is now: {reason}", self.settings.name),
            );
        }
    }

    /// `recovered` (from the Lease loop) posts the status at once, unconditionally: during an
    /// outage the node lifecycle controller may have set Ready=Unknown, which upstream notices by
    /// comparing with the Node it reads; we have only our own last write to compare with.
    async fn status_loop(
        &self,
        mut last: Option<NodeStatus>,
        recovered: Arc<tokio::sync::Notify>,
        cancel: CancellationToken,
    ) {
        let nodes: Api<Node> = Api::all(self.heartbeat.clone());
        let mut last_report: Option<Instant> = None;
        // Validation keeps it above zero; the floor only guards against a busy loop.
        let every = self.config.update_frequency.max(Duration::from_millis(10));
        let mut wait = Duration::ZERO;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
                _ = recovered.notified() => last_report = None,
            }
            // Upstream `wait.JitterUntil(syncNodeStatus, nodeStatusUpdateFrequency, 0.04, true)`:
            // the next computation a jittered period after this one ends.
            wait = every + every.mul_f64(STATUS_UPDATE_JITTER * fastrand::f64());
            let health = self.health().await;
            let mut st = status::node_status(
                &self.settings,
                &self.machine,
                &self.runtime_version,
                &health,
                crate::status::compute::now(),
                last.as_ref(),
            );
            st.images = self.images().await;
            let in_use = {
                let dir = self.pods_dir.clone();
                tokio::task::spawn_blocking(move || crate::volumes::volumes_in_use(&dir))
                    .await
                    .unwrap_or_default()
            };
            st.volumes_in_use = (!in_use.is_empty()).then_some(in_use);
            if let Some(d) = &self.devices {
                match d.capacity().await {
                    Ok(cap) => status::add_device_resources(&mut st, &cap),
                    Err(e) => warn!(error = %e, "device plugin capacity unavailable"),
                }
            }
            let due = last_report.is_none_or(|t| t.elapsed() >= self.config.report_frequency);
            if !due && last.as_ref().is_some_and(|l| !status::changed(l, &st)) {
                continue;
            }
            let mut patch = serde_json::json!({ "status": st });
            if st.images.is_none() {
                // An emptied list must clear the field, not leave the last one in place.
                patch["status"]["images"] = serde_json::Value::Null;
            }
            if st.volumes_in_use.is_none() {
                // Likewise the last volume's tear down must clear `volumesInUse`.
                patch["status"]["volumesInUse"] = serde_json::Value::Null;
            }
            match nodes
                .patch_status(
                    &self.settings.name,
                    &PatchParams::default(),
                    &Patch::Strategic(&patch),
                )
                .await
            {
                Ok(_) => {
                    self.record_condition_events(last.as_ref(), &st);
                    if last.as_ref().is_none_or(|l| status::changed(l, &st)) {
                        info!(node = %self.settings.name, ready = health.not_ready.is_empty(), "node status updated");
                    }
                    last = Some(st);
                    last_report = Some(Instant::now());
                }
                Err(e) => {
                    warn!(node = %self.settings.name, error = %e, "error updating node status, will retry")
                }
            }
        }
    }
}
