//! `--api KUBECONFIG`: the API requests a kubelet node makes for its static pods, made beside the
//! floor's CRI calls ("floor+api"). On a node, the API server and etcd share the two cores with
//! the runtime, and the node's phases of `bench/cri-floor.sh` pay for that; the floor without an
//! API server does not. This floor makes the requests any kubelet makes for these pods (upstream
//! makes the same ones; `bench/cri-floor.py` counts rkubelet's), with the node's credentials and
//! rkubelet's default client limits, off the pods' critical path as a kubelet's status manager
//! and event recorder make them:
//! - start: the mirror pod (POST), the status once the sandbox is up (Pending, ContainerCreating)
//!   and once the container runs (Running), and the Pulled, Created and Started events: 6;
//! - teardown: the Killing event before the stop, the final status after it, the mirror's DELETE
//!   once the pod cgroup is gone, before the runtime's removal (upstream's order): 3.
//!
//! Two watches run meanwhile, as in the node's phases: the kubelet's own on its node's pods, and
//! one on the namespace's pods such as `bench/cri-floor.py` holds there to see the pods Running.
//!
//! The objects are rkubelet's own: the mirror from `mirror::mirror_of`, events from
//! `events::make_event`, status patches from the status syncer's `status_patch`.
//!
//! With a user's client as well (`--user KUBECONFIG`, "floor+user") the pods are API pods, as in
//! the benchmark's API phase: no mirror; the user POSTs each pod, bound to the node, and later
//! DELETEs it (grace from its spec), one request after another from one client as
//! `bench/cri-floor.py`'s API phase sends them, and the node writes to those objects and ends
//! each with its own DELETE (grace 0). A kubelet cannot act on a pod before its POST or DELETE
//! is in, so the floor's work on each pod waits for that request's answer. That is the floor
//! for the API phase, whose delete window also holds the user's N DELETEs and their updates to
//! both watches; floor+api, made for static pods, has neither.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node, Pod, PodStatus};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kubelet::events::{make_event, pod_reference, EventType};
use kubelet::status::syncer::status_patch;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// rkubelet's default `kubeAPIQPS`/`kubeAPIBurst` (pods) and `eventRecordQPS`/`eventBurst`.
pub const QPS: f32 = 50.0;
pub const BURST: i64 = 100;

/// The node's clients and what they did.
#[derive(Clone)]
pub struct ApiLoad {
    node: String,
    /// Pod writes, behind the `kubeAPIQPS` limit.
    pods: kube::Client,
    /// Events, behind their own limit, as rkubelet's recorder.
    events: kube::Client,
    /// The node's UID, for the mirror pods' owner reference (NodeRestriction wants it).
    node_uid: String,
    /// The user's client (`--user`), unthrottled as the benchmark's own client: the pods are
    /// API pods it creates and deletes.
    user: Option<kube::Client>,
    /// The user's requests made (not the node's: they are not counted in `requests`).
    pub user_requests: Arc<AtomicUsize>,
    /// Event tasks, and the mirrors' tasks (each ends with its DELETE).
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    mirrors: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// Mirror writes sent and not yet made.
    pending: Arc<AtomicUsize>,
    pub requests: Arc<AtomicUsize>,
    pub failed: Arc<AtomicUsize>,
}

/// One pod's object writes, in order (a kubelet's status manager writes each pod's in order).
pub enum Write {
    Status(Box<PodStatus>),
    Delete,
}

impl ApiLoad {
    pub async fn new(
        kubeconfig: &std::path::Path,
        node: &str,
        user: Option<&std::path::Path>,
    ) -> Result<ApiLoad> {
        let base = client(kubeconfig).await?;
        let user = match user {
            Some(kc) => Some(client(kc).await?),
            None => None,
        };
        // The node must be registered: the bench runs this floor after rkubelet's first phase
        // as a node.
        let node_uid = Api::<Node>::all(base.clone())
            .get(node)
            .await
            .with_context(|| format!("get node {node} (registered by rkubelet)"))?
            .metadata
            .uid
            .unwrap_or_default();
        for fields in [Some(format!("spec.nodeName={node}")), None] {
            watch(base.clone(), fields).await?;
        }
        let limited = |c: kube::Client| kubelet::certificate::throttle::throttled(c, QPS, BURST);
        Ok(ApiLoad {
            node: node.to_string(),
            pods: limited(base.clone()),
            events: limited(base),
            node_uid,
            user,
            user_requests: Arc::default(),
            tasks: Arc::default(),
            mirrors: Arc::default(),
            pending: Arc::default(),
            requests: Arc::default(),
            failed: Arc::default(),
        })
    }

    fn spawn(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        let t = tokio::spawn(f);
        self.tasks.lock().unwrap_or_else(|e| e.into_inner()).push(t);
    }

    /// Sends one of a mirror's writes (see [`Self::mirror`]).
    pub fn write(&self, to: &mpsc::UnboundedSender<Write>, w: Write) {
        self.pending.fetch_add(1, Ordering::Relaxed);
        if to.send(w).is_err() {
            self.pending.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn count(&self, what: &str, r: Result<(), kube::Error>) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = r {
            self.failed.fetch_add(1, Ordering::Relaxed);
            eprintln!("floor+api: {what}: {e}");
        }
    }

    /// Whether the pods are the user's API pods (`--user`) rather than static pods with mirrors.
    pub fn has_user(&self) -> bool {
        self.user.is_some()
    }

    /// The user's POST of pod `name`, bound to the node, as `bench/cri-floor.py`'s API phase
    /// sends it: returns the object's UID.
    pub async fn user_create(&self, name: &str, image: &str) -> Result<String> {
        let user = self.user.clone().context("no user client (--user)")?;
        let mut manifest = crate::shape::manifest(name, image);
        manifest["spec"]["nodeName"] = self.node.clone().into();
        manifest["spec"]["automountServiceAccountToken"] = false.into();
        let pod: Pod = serde_json::from_value(manifest).context("the user's pod")?;
        self.user_requests.fetch_add(1, Ordering::Relaxed);
        let created = Api::<Pod>::namespaced(user, "default")
            .create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("the user's POST of pod {name}"))?;
        created.metadata.uid.context("the created pod has no UID")
    }

    /// The user's DELETE of pod `name`, with the grace period of its spec.
    pub async fn user_delete(&self, name: &str) -> Result<()> {
        let user = self.user.clone().context("no user client (--user)")?;
        self.user_requests.fetch_add(1, Ordering::Relaxed);
        Api::<Pod>::namespaced(user, "default")
            .delete(name, &DeleteParams::default())
            .await
            .with_context(|| format!("the user's DELETE of pod {name}"))?;
        Ok(())
    }

    /// Makes the writes sent to the returned channel to `pod`'s object, in order, until its
    /// DELETE. The object is `pod`'s mirror, created first; or, with `created` (the name and
    /// UID of the user's pod), that pod.
    pub fn writes(
        &self,
        pod: &Pod,
        created: Option<(String, String)>,
    ) -> mpsc::UnboundedSender<Write> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut mirror = kubelet::mirror::mirror_of(pod, &self.node, &self.node_uid);
        if let Some(spec) = mirror.spec.as_mut() {
            spec.node_name = Some(self.node.clone());
        }
        let created = created.map(|(name, uid)| {
            mirror.metadata.name = Some(name);
            uid
        });
        let me = self.clone();
        self.pending.fetch_add(1, Ordering::Relaxed);
        let task = tokio::spawn(async move {
            let ns = mirror.metadata.namespace.clone().unwrap_or_default();
            let name = mirror.metadata.name.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(me.pods.clone(), &ns);
            let uid = match created {
                Some(uid) => uid,
                None => {
                    let created = api.create(&PostParams::default(), &mirror).await;
                    let uid = created
                        .as_ref()
                        .ok()
                        .and_then(|p| p.metadata.uid.clone())
                        .unwrap_or_default();
                    me.count("create mirror", created.map(drop));
                    uid
                }
            };
            me.pending.fetch_sub(1, Ordering::Relaxed);
            while let Some(w) = rx.recv().await {
                match w {
                    Write::Status(st) => {
                        let patch = status_patch(&uid, &st);
                        let r = api
                            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                            .await;
                        me.count("patch status", r.map(drop));
                        me.pending.fetch_sub(1, Ordering::Relaxed);
                    }
                    Write::Delete => {
                        let r = api.delete(&name, &kubelet::podutil::delete_now(&uid)).await;
                        me.count("delete pod", r.map(drop));
                        me.pending.fetch_sub(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
        });
        self.mirrors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
        tx
    }

    /// An event about `pod`'s container `sleep` (or the pod, without `container`).
    pub fn event(&self, pod: &Pod, container: bool, reason: &'static str, message: String) {
        let field = container.then(|| "spec.containers{sleep}".to_string());
        let ev = make_event(
            pod_reference(pod, field),
            &self.node,
            EventType::Normal,
            reason,
            message,
            std::time::SystemTime::now(),
        );
        let me = self.clone();
        self.spawn(async move {
            let ns = ev.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Event> = Api::namespaced(me.events.clone(), &ns);
            let r = api.create(&PostParams::default(), &ev).await;
            me.count("create event", r.map(drop));
        });
    }

    /// Waits for every request asked for so far.
    pub async fn settle(&self) {
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in tasks {
            let _ = t.await;
        }
        while self.pending.load(Ordering::Relaxed) > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Waits for every request and for the mirrors' tasks, which end with their DELETE.
    pub async fn finish(&self) {
        self.settle().await;
        let mirrors = std::mem::take(&mut *self.mirrors.lock().unwrap_or_else(|e| e.into_inner()));
        for t in mirrors {
            let _ = t.await;
        }
    }
}

/// A client from `kubeconfig`.
async fn client(kubeconfig: &std::path::Path) -> Result<kube::Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("read {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("kubeconfig {}", kubeconfig.display()))?;
    kube::Client::try_from(config).context("API client")
}

/// Starts a watch on the default namespace's pods (with `fields`, a field selector) from now, and
/// reads it in the background until the process ends.
async fn watch(client: kube::Client, fields: Option<String>) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client, "default");
    let mut lp = ListParams::default();
    let mut wp = WatchParams::default();
    if let Some(f) = &fields {
        lp = lp.fields(f);
        wp = wp.fields(f);
    }
    let rv = api
        .list_metadata(&lp)
        .await
        .context("list pods")?
        .metadata
        .resource_version
        .unwrap_or_default();
    let stream = api.watch(&wp, &rv).await.context("watch pods")?;
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(_)) = stream.next().await {}
    });
    Ok(())
}

/// The status a kubelet writes for the floor's one-container pod at each step.
pub fn status(phase: &str, ip: &str, container: serde_json::Value, ready: bool) -> PodStatus {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let cond = |t: &str, ok: bool| {
        serde_json::json!({"type": t, "status": if ok {"True"} else {"False"},
            "lastTransitionTime": now, "lastProbeTime": null})
    };
    let mut st = serde_json::json!({
        "phase": phase,
        "hostIP": "127.0.0.1",
        "startTime": now,
        "qosClass": "BestEffort",
        "conditions": [cond("Initialized", true), cond("Ready", ready),
                       cond("ContainersReady", ready), cond("PodScheduled", true)],
        "containerStatuses": [container],
    });
    if !ip.is_empty() {
        st["podIP"] = ip.into();
        st["podIPs"] = serde_json::json!([{"ip": ip}]);
    }
    serde_json::from_value(st).unwrap_or_default()
}

/// The container status of each step: waiting to be created, running, exited.
pub fn container(
    state: serde_json::Value,
    image: &str,
    id: &str,
    ready: bool,
) -> serde_json::Value {
    let mut c = serde_json::json!({"name": "sleep", "image": image, "imageID": "",
        "ready": ready, "restartCount": 0, "started": ready, "state": state});
    if !id.is_empty() {
        c["containerID"] = format!("containerd://{id}").into();
    }
    c
}
