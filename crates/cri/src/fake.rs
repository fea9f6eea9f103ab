//! An in-process CRI runtime for the kubelet's fast tests (feature `fake`; never in the binary).
//!
//! It keeps sandboxes, containers and images in memory with the CRI's state machine (created ->
//! running -> exited, sandboxes ready -> not ready), answers the list/status calls with filters as
//! containerd does, and lets a test script the world: kill a container, fail or delay the next call
//! of an operation (optionally only for one pod or container), and read back every call made.
//! Upstream's counterpart is `cri-api/pkg/apis/testing/fake_runtime_service.go`.
//!
//! Delays sleep on tokio's clock, so tests under paused time see a slow runtime without waiting.
//! Timestamps come from an injectable clock, so they can follow the same paused time.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use crate::api;
use crate::service::{Reply, Runtime};

/// Unix nanoseconds "now", as the runtime stamps created/started/finished times.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// One call as the fake saw it: the operation and the pod or container name it concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub op: &'static str,
    /// Pod name for sandbox calls, container name for container calls, the command for
    /// exec_sync (space-joined), the image for image calls, empty otherwise.
    pub key: String,
    /// Extra detail: the grace (seconds) of stop_container, the pod UID of sandbox calls.
    pub detail: String,
    /// When the call was made, on tokio's (possibly paused) clock.
    pub at: tokio::time::Instant,
}

/// A container as a test inspects it.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerView {
    pub id: String,
    pub name: String,
    pub pod: String,
    pub attempt: u32,
    pub state: api::ContainerState,
    pub exit_code: i32,
}

struct Sandbox {
    config: api::PodSandboxConfig,
    ready: bool,
    created_at: i64,
    ip: String,
}

struct Container {
    sandbox_id: String,
    config: api::ContainerConfig,
    state: api::ContainerState,
    created_at: i64,
    started_at: i64,
    finished_at: i64,
    exit_code: i32,
    reason: String,
    image_ref: String,
}

#[derive(Default)]
struct State {
    next_id: u64,
    sandboxes: BTreeMap<String, Sandbox>,
    containers: BTreeMap<String, Container>,
    images: BTreeMap<String, String>,
    calls: Vec<Call>,
    /// (op, key or "" for any) -> errors the next calls return.
    faults: HashMap<(&'static str, String), VecDeque<tonic::Status>>,
    /// (op, key or "" for any) -> how long each call takes.
    delays: HashMap<(&'static str, String), Duration>,
    /// Container names whose instances exit with this code right after they start.
    exit_on_start: HashMap<String, i32>,
}

struct Inner {
    state: Mutex<State>,
    clock: Clock,
}

/// The fake runtime; clones share one world.
#[derive(Clone)]
pub struct FakeRuntime {
    inner: Arc<Inner>,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        Self::new(Arc::new(|| {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_nanos() as i64)
                .unwrap_or(0)
        }))
    }
}

impl FakeRuntime {
    pub fn new(clock: Clock) -> Self {
        FakeRuntime {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                clock,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock()
    }

    /// Images the runtime already has (no pull needed).
    pub fn add_image(&self, image: &str) {
        let r = image_ref(image);
        self.lock().images.insert(image.to_string(), r);
    }

    /// The next call of `op` (for `key`'s pod/container, or any when `key` is empty) fails with
    /// `status`; several calls queue up.
    pub fn fail_next(&self, op: &'static str, key: &str, status: tonic::Status) {
        self.lock()
            .faults
            .entry((op, key.to_string()))
            .or_default()
            .push_back(status);
    }

    /// Every call of `op` (for `key`, or any when empty) takes `d` before it acts.
    pub fn delay(&self, op: &'static str, key: &str, d: Duration) {
        self.lock().delays.insert((op, key.to_string()), d);
    }

    /// Instances of container `name` exit with `code` as soon as they start (a crash loop).
    pub fn exit_on_start(&self, name: &str, code: i32) {
        self.lock().exit_on_start.insert(name.to_string(), code);
    }

    /// Stops every running instance of container `name` with `code` (the process died).
    pub fn kill_container(&self, name: &str, code: i32) -> usize {
        let now = (self.inner.clock)();
        let mut st = self.lock();
        let mut n = 0;
        for c in st.containers.values_mut() {
            if container_name(&c.config) == name && c.state == api::ContainerState::ContainerRunning
            {
                exit(c, code, now);
                n += 1;
            }
        }
        n
    }

    /// Every call so far, oldest first.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The containers the runtime has, oldest first.
    pub fn containers(&self) -> Vec<ContainerView> {
        let st = self.lock();
        let mut v: Vec<_> = st
            .containers
            .iter()
            .map(|(id, c)| ContainerView {
                id: id.clone(),
                name: container_name(&c.config).to_string(),
                pod: st
                    .sandboxes
                    .get(&c.sandbox_id)
                    .map(|s| pod_name(&s.config).to_string())
                    .unwrap_or_default(),
                attempt: c.config.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
                state: c.state,
                exit_code: c.exit_code,
            })
            .collect();
        v.sort_by_key(|c| c.id.clone());
        v
    }

    /// The ready sandboxes' pod names.
    pub fn ready_sandboxes(&self) -> Vec<String> {
        self.lock()
            .sandboxes
            .values()
            .filter(|s| s.ready)
            .map(|s| pod_name(&s.config).to_string())
            .collect()
    }

    /// Every sandbox the runtime has (ready or not), as pod names.
    pub fn sandboxes(&self) -> Vec<String> {
        self.lock()
            .sandboxes
            .values()
            .map(|s| pod_name(&s.config).to_string())
            .collect()
    }

    /// Runs a CRI call: records it, waits its delay, returns a scripted fault or acts.
    fn call<T: Send + 'static>(
        &self,
        op: &'static str,
        key: impl FnOnce(&State) -> String,
        detail: String,
        act: impl FnOnce(&mut State, i64) -> Result<T, tonic::Status> + Send + 'static,
    ) -> Reply<T> {
        let inner = self.inner.clone();
        let (key, delay) = {
            let mut st = inner.lock();
            let key = key(&st);
            st.calls.push(Call {
                op,
                key: key.clone(),
                detail,
                at: tokio::time::Instant::now(),
            });
            let delay = st
                .delays
                .get(&(op, key.clone()))
                .or_else(|| st.delays.get(&(op, String::new())))
                .copied();
            (key, delay)
        };
        Box::pin(async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            let mut st = inner.lock();
            for k in [key, String::new()] {
                if let Some(e) = st.faults.get_mut(&(op, k)).and_then(|q| q.pop_front()) {
                    return Err(e);
                }
            }
            let now = (inner.clock)();
            act(&mut st, now)
        })
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread poisons nothing we cannot keep using.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn image_ref(image: &str) -> String {
    // Stable and distinct per name; real refs are digests, the kubelet only compares them.
    let h = image.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    });
    format!("sha256:{h:064x}")
}

fn pod_name(c: &api::PodSandboxConfig) -> &str {
    c.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or("")
}

fn container_name(c: &api::ContainerConfig) -> &str {
    c.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or("")
}

fn exit(c: &mut Container, code: i32, now: i64) {
    c.state = api::ContainerState::ContainerExited;
    c.finished_at = now;
    c.exit_code = code;
    c.reason = if code == 0 { "Completed" } else { "Error" }.into();
}

fn not_found(what: &str, id: &str) -> tonic::Status {
    tonic::Status::not_found(format!("{what} {id:?}: not found"))
}

fn labels_match(have: &HashMap<String, String>, want: &HashMap<String, String>) -> bool {
    want.iter().all(|(k, v)| have.get(k) == Some(v))
}

/// The pod UID of sandbox `id` (sandbox calls record it to tell two pods of one name apart).
fn sandbox_uid(st: &State, id: &str) -> String {
    st.sandboxes
        .get(id)
        .and_then(|s| s.config.metadata.as_ref().map(|m| m.uid.clone()))
        .unwrap_or_default()
}

fn sandbox_key(st: &State, id: &str) -> String {
    st.sandboxes
        .get(id)
        .map(|s| pod_name(&s.config).to_string())
        .unwrap_or_default()
}

fn container_key(st: &State, id: &str) -> String {
    st.containers
        .get(id)
        .map(|c| container_name(&c.config).to_string())
        .unwrap_or_default()
}

impl Runtime for FakeRuntime {
    fn version(&self, _: api::VersionRequest) -> Reply<api::VersionResponse> {
        self.call(
            "version",
            |_| String::new(),
            String::new(),
            |_, _| {
                Ok(api::VersionResponse {
                    version: "0.1.0".into(),
                    runtime_name: "fake".into(),
                    runtime_version: "0.1.0".into(),
                    runtime_api_version: "v1".into(),
                })
            },
        )
    }

    fn status(&self, _: api::StatusRequest) -> Reply<api::StatusResponse> {
        self.call(
            "status",
            |_| String::new(),
            String::new(),
            |_, _| {
                let cond = |t: &str| api::RuntimeCondition {
                    r#type: t.into(),
                    status: true,
                    ..Default::default()
                };
                Ok(api::StatusResponse {
                    status: Some(api::RuntimeStatus {
                        conditions: vec![cond("RuntimeReady"), cond("NetworkReady")],
                    }),
                    ..Default::default()
                })
            },
        )
    }

    fn list_container_stats(
        &self,
        _: api::ListContainerStatsRequest,
    ) -> Reply<api::ListContainerStatsResponse> {
        self.call(
            "list_container_stats",
            |_| String::new(),
            String::new(),
            |_, _| Ok(Default::default()),
        )
    }

    fn list_pod_sandbox_stats(
        &self,
        _: api::ListPodSandboxStatsRequest,
    ) -> Reply<api::ListPodSandboxStatsResponse> {
        self.call(
            "list_pod_sandbox_stats",
            |_| String::new(),
            String::new(),
            |_, _| Ok(Default::default()),
        )
    }

    fn run_pod_sandbox(&self, req: api::RunPodSandboxRequest) -> Reply<api::RunPodSandboxResponse> {
        let config = req.config.unwrap_or_default();
        let key = pod_name(&config).to_string();
        let uid = config
            .metadata
            .as_ref()
            .map(|m| m.uid.clone())
            .unwrap_or_default();
        self.call(
            "run_pod_sandbox",
            |_| key,
            uid,
            move |st, now| {
                st.next_id += 1;
                let id = format!("sandbox-{}", st.next_id);
                let ip = format!("10.88.{}.{}", st.next_id / 250, st.next_id % 250 + 2);
                st.sandboxes.insert(
                    id.clone(),
                    Sandbox {
                        config,
                        ready: true,
                        created_at: now,
                        ip,
                    },
                );
                Ok(api::RunPodSandboxResponse { pod_sandbox_id: id })
            },
        )
    }

    fn stop_pod_sandbox(
        &self,
        req: api::StopPodSandboxRequest,
    ) -> Reply<api::StopPodSandboxResponse> {
        let id = req.pod_sandbox_id;
        let key = |st: &State| sandbox_key(st, &id);
        let id2 = id.clone();
        let uid = sandbox_uid(&self.lock(), &id);
        self.call("stop_pod_sandbox", key, uid, move |st, now| {
            if let Some(s) = st.sandboxes.get_mut(&id2) {
                s.ready = false;
            }
            for c in st.containers.values_mut() {
                if c.sandbox_id == id2 && c.state == api::ContainerState::ContainerRunning {
                    exit(c, 137, now);
                }
            }
            Ok(Default::default())
        })
    }

    fn remove_pod_sandbox(
        &self,
        req: api::RemovePodSandboxRequest,
    ) -> Reply<api::RemovePodSandboxResponse> {
        let id = req.pod_sandbox_id;
        let id2 = id.clone();
        let uid = sandbox_uid(&self.lock(), &id);
        self.call(
            "remove_pod_sandbox",
            |st| sandbox_key(st, &id),
            uid,
            move |st, _| {
                st.sandboxes.remove(&id2);
                st.containers.retain(|_, c| c.sandbox_id != id2);
                Ok(Default::default())
            },
        )
    }

    fn pod_sandbox_status(
        &self,
        req: api::PodSandboxStatusRequest,
    ) -> Reply<api::PodSandboxStatusResponse> {
        let id = req.pod_sandbox_id;
        let id2 = id.clone();
        self.call(
            "pod_sandbox_status",
            |st| sandbox_key(st, &id),
            String::new(),
            move |st, _| {
                let s = st
                    .sandboxes
                    .get(&id2)
                    .ok_or_else(|| not_found("sandbox", &id2))?;
                let ns_options = s
                    .config
                    .linux
                    .as_ref()
                    .and_then(|l| l.security_context.as_ref())
                    .and_then(|c| c.namespace_options.clone());
                let host_network = ns_options
                    .as_ref()
                    .is_some_and(|o| o.network == api::NamespaceMode::Node as i32);
                Ok(api::PodSandboxStatusResponse {
                    status: Some(api::PodSandboxStatus {
                        id: id2.clone(),
                        metadata: s.config.metadata.clone(),
                        state: if s.ready {
                            api::PodSandboxState::SandboxReady
                        } else {
                            api::PodSandboxState::SandboxNotready
                        } as i32,
                        created_at: s.created_at,
                        network: Some(api::PodSandboxNetworkStatus {
                            ip: if host_network {
                                String::new()
                            } else {
                                s.ip.clone()
                            },
                            ..Default::default()
                        }),
                        linux: Some(api::LinuxPodSandboxStatus {
                            namespaces: Some(api::Namespace {
                                options: ns_options,
                            }),
                        }),
                        labels: s.config.labels.clone(),
                        annotations: s.config.annotations.clone(),
                        runtime_handler: String::new(),
                    }),
                    ..Default::default()
                })
            },
        )
    }

    fn list_pod_sandbox(
        &self,
        req: api::ListPodSandboxRequest,
    ) -> Reply<api::ListPodSandboxResponse> {
        let filter = req.filter.unwrap_or_default();
        self.call(
            "list_pod_sandbox",
            |_| String::new(),
            String::new(),
            move |st, _| {
                let items = st
                    .sandboxes
                    .iter()
                    .filter(|(id, s)| {
                        (filter.id.is_empty() || **id == filter.id)
                            && labels_match(&s.config.labels, &filter.label_selector)
                            && filter.state.as_ref().is_none_or(|w| {
                                (w.state == api::PodSandboxState::SandboxReady as i32) == s.ready
                            })
                    })
                    .map(|(id, s)| api::PodSandbox {
                        id: id.clone(),
                        metadata: s.config.metadata.clone(),
                        state: if s.ready {
                            api::PodSandboxState::SandboxReady
                        } else {
                            api::PodSandboxState::SandboxNotready
                        } as i32,
                        created_at: s.created_at,
                        labels: s.config.labels.clone(),
                        annotations: s.config.annotations.clone(),
                        runtime_handler: String::new(),
                    })
                    .collect();
                Ok(api::ListPodSandboxResponse { items })
            },
        )
    }

    fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> Reply<api::CreateContainerResponse> {
        let config = req.config.unwrap_or_default();
        let key = container_name(&config).to_string();
        let sandbox_id = req.pod_sandbox_id;
        self.call(
            "create_container",
            |_| key,
            String::new(),
            move |st, now| {
                if !st.sandboxes.get(&sandbox_id).is_some_and(|s| s.ready) {
                    return Err(tonic::Status::failed_precondition(format!(
                        "sandbox {sandbox_id:?} is not ready"
                    )));
                }
                let image = config
                    .image
                    .as_ref()
                    .map(|i| i.image.clone())
                    .unwrap_or_default();
                // By name or by the ref the kubelet resolved it to, as containerd accepts both.
                let image_ref = st
                    .images
                    .get(&image)
                    .or_else(|| st.images.values().find(|r| **r == image))
                    .cloned()
                    .ok_or_else(|| not_found("image", &image))?;
                st.next_id += 1;
                let id = format!("container-{}", st.next_id);
                st.containers.insert(
                    id.clone(),
                    Container {
                        sandbox_id,
                        config,
                        state: api::ContainerState::ContainerCreated,
                        created_at: now,
                        started_at: 0,
                        finished_at: 0,
                        exit_code: 0,
                        reason: String::new(),
                        image_ref,
                    },
                );
                Ok(api::CreateContainerResponse { container_id: id })
            },
        )
    }

    fn start_container(
        &self,
        req: api::StartContainerRequest,
    ) -> Reply<api::StartContainerResponse> {
        let id = req.container_id;
        let id2 = id.clone();
        self.call(
            "start_container",
            |st| container_key(st, &id),
            String::new(),
            move |st, now| {
                let exit_code = st
                    .containers
                    .get(&id2)
                    .and_then(|c| st.exit_on_start.get(container_name(&c.config)).copied());
                let c = st
                    .containers
                    .get_mut(&id2)
                    .ok_or_else(|| not_found("container", &id2))?;
                if c.state != api::ContainerState::ContainerCreated {
                    return Err(tonic::Status::failed_precondition(format!(
                        "container {id2:?} is not in created state"
                    )));
                }
                c.state = api::ContainerState::ContainerRunning;
                c.started_at = now;
                if let Some(code) = exit_code {
                    exit(c, code, now);
                }
                Ok(Default::default())
            },
        )
    }

    fn stop_container(&self, req: api::StopContainerRequest) -> Reply<api::StopContainerResponse> {
        let id = req.container_id;
        let id2 = id.clone();
        self.call(
            "stop_container",
            |st| container_key(st, &id),
            req.timeout.to_string(),
            move |st, now| {
                if let Some(c) = st.containers.get_mut(&id2) {
                    if c.state == api::ContainerState::ContainerRunning {
                        exit(c, 137, now);
                    }
                }
                Ok(Default::default())
            },
        )
    }

    fn remove_container(
        &self,
        req: api::RemoveContainerRequest,
    ) -> Reply<api::RemoveContainerResponse> {
        let id = req.container_id;
        let id2 = id.clone();
        self.call(
            "remove_container",
            |st| container_key(st, &id),
            String::new(),
            move |st, _| {
                st.containers.remove(&id2);
                Ok(Default::default())
            },
        )
    }

    fn list_containers(
        &self,
        req: api::ListContainersRequest,
    ) -> Reply<api::ListContainersResponse> {
        let filter = req.filter.unwrap_or_default();
        self.call(
            "list_containers",
            |_| String::new(),
            String::new(),
            move |st, _| {
                let containers = st
                    .containers
                    .iter()
                    .filter(|(id, c)| {
                        (filter.id.is_empty() || **id == filter.id)
                            && (filter.pod_sandbox_id.is_empty()
                                || c.sandbox_id == filter.pod_sandbox_id)
                            && labels_match(&c.config.labels, &filter.label_selector)
                            && filter
                                .state
                                .as_ref()
                                .is_none_or(|w| w.state == c.state as i32)
                    })
                    .map(|(id, c)| api::Container {
                        id: id.clone(),
                        pod_sandbox_id: c.sandbox_id.clone(),
                        metadata: c.config.metadata.clone(),
                        image: c.config.image.clone(),
                        image_ref: c.image_ref.clone(),
                        state: c.state as i32,
                        created_at: c.created_at,
                        labels: c.config.labels.clone(),
                        annotations: c.config.annotations.clone(),
                        ..Default::default()
                    })
                    .collect();
                Ok(api::ListContainersResponse { containers })
            },
        )
    }

    fn container_status(
        &self,
        req: api::ContainerStatusRequest,
    ) -> Reply<api::ContainerStatusResponse> {
        let id = req.container_id;
        let id2 = id.clone();
        self.call(
            "container_status",
            |st| container_key(st, &id),
            String::new(),
            move |st, _| {
                let c = st
                    .containers
                    .get(&id2)
                    .ok_or_else(|| not_found("container", &id2))?;
                Ok(api::ContainerStatusResponse {
                    status: Some(api::ContainerStatus {
                        id: id2.clone(),
                        metadata: c.config.metadata.clone(),
                        state: c.state as i32,
                        created_at: c.created_at,
                        started_at: c.started_at,
                        finished_at: c.finished_at,
                        exit_code: c.exit_code,
                        image: c.config.image.clone(),
                        image_ref: c.image_ref.clone(),
                        reason: c.reason.clone(),
                        labels: c.config.labels.clone(),
                        annotations: c.config.annotations.clone(),
                        log_path: c.config.log_path.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
            },
        )
    }

    fn exec_sync(&self, req: api::ExecSyncRequest) -> Reply<api::ExecSyncResponse> {
        let key = req.cmd.join(" ");
        let id = req.container_id;
        self.call(
            "exec_sync",
            |_| key,
            String::new(),
            move |st, _| match st.containers.get(&id) {
                Some(c) if c.state == api::ContainerState::ContainerRunning => {
                    Ok(api::ExecSyncResponse::default())
                }
                _ => Err(tonic::Status::not_found(format!(
                    "container {id:?} is not running"
                ))),
            },
        )
    }

    fn exec(&self, _: api::ExecRequest) -> Reply<api::ExecResponse> {
        self.call(
            "exec",
            |_| String::new(),
            String::new(),
            |_, _| {
                Err(tonic::Status::unimplemented(
                    "the fake runtime does not stream",
                ))
            },
        )
    }

    fn attach(&self, _: api::AttachRequest) -> Reply<api::AttachResponse> {
        self.call(
            "attach",
            |_| String::new(),
            String::new(),
            |_, _| {
                Err(tonic::Status::unimplemented(
                    "the fake runtime does not stream",
                ))
            },
        )
    }

    fn port_forward(&self, _: api::PortForwardRequest) -> Reply<api::PortForwardResponse> {
        self.call(
            "port_forward",
            |_| String::new(),
            String::new(),
            |_, _| {
                Err(tonic::Status::unimplemented(
                    "the fake runtime does not stream",
                ))
            },
        )
    }

    fn reopen_container_log(
        &self,
        _: api::ReopenContainerLogRequest,
    ) -> Reply<api::ReopenContainerLogResponse> {
        self.call(
            "reopen_container_log",
            |_| String::new(),
            String::new(),
            |_, _| Ok(Default::default()),
        )
    }

    fn list_images(&self, _: api::ListImagesRequest) -> Reply<api::ListImagesResponse> {
        self.call(
            "list_images",
            |_| String::new(),
            String::new(),
            |st, _| {
                let images = st
                    .images
                    .iter()
                    .map(|(name, r)| api::Image {
                        id: r.clone(),
                        repo_tags: vec![name.clone()],
                        ..Default::default()
                    })
                    .collect();
                Ok(api::ListImagesResponse { images })
            },
        )
    }

    fn image_status(&self, req: api::ImageStatusRequest) -> Reply<api::ImageStatusResponse> {
        let image = req.image.map(|i| i.image).unwrap_or_default();
        let key = image.clone();
        self.call(
            "image_status",
            move |_| key,
            String::new(),
            move |st, _| {
                Ok(api::ImageStatusResponse {
                    image: st.images.get(&image).map(|r| api::Image {
                        id: r.clone(),
                        repo_tags: vec![image.clone()],
                        ..Default::default()
                    }),
                    ..Default::default()
                })
            },
        )
    }

    fn pull_image(&self, req: api::PullImageRequest) -> Reply<api::PullImageResponse> {
        let image = req.image.map(|i| i.image).unwrap_or_default();
        let key = image.clone();
        self.call(
            "pull_image",
            move |_| key,
            String::new(),
            move |st, _| {
                let r = image_ref(&image);
                st.images.insert(image, r.clone());
                Ok(api::PullImageResponse { image_ref: r })
            },
        )
    }

    fn remove_image(&self, req: api::RemoveImageRequest) -> Reply<api::RemoveImageResponse> {
        let image = req.image.map(|i| i.image).unwrap_or_default();
        let key = image.clone();
        self.call(
            "remove_image",
            move |_| key,
            String::new(),
            move |st, _| {
                st.images.retain(|name, r| *name != image && *r != image);
                Ok(Default::default())
            },
        )
    }

    fn image_fs_info(&self, _: api::ImageFsInfoRequest) -> Reply<api::ImageFsInfoResponse> {
        self.call(
            "image_fs_info",
            |_| String::new(),
            String::new(),
            |_, _| Ok(Default::default()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CriClient;

    fn client(f: &FakeRuntime) -> CriClient {
        CriClient::with_backend(Arc::new(f.clone()), "fake".into(), Duration::from_secs(2))
    }

    fn sandbox_config(name: &str, uid: &str) -> api::PodSandboxConfig {
        api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            labels: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
            ..Default::default()
        }
    }

    fn container_config(name: &str) -> api::ContainerConfig {
        api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(api::ImageSpec {
                image: "busybox".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn lifecycle_filters_and_scripted_faults() {
        let f = FakeRuntime::default();
        let c = client(&f);
        let sb = c
            .run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(sandbox_config("p", "u1")),
                ..Default::default()
            })
            .await
            .unwrap()
            .pod_sandbox_id;
        let create = api::CreateContainerRequest {
            pod_sandbox_id: sb.clone(),
            config: Some(container_config("app")),
            sandbox_config: None,
        };
        // No image yet: NotFound, as containerd answers.
        let err = c.create_container(create.clone()).await.unwrap_err();
        assert!(err.is_not_found(), "{err}");
        f.add_image("busybox");
        let id = c.create_container(create).await.unwrap().container_id;
        c.start_container(api::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
        assert_eq!(
            f.containers()[0].state,
            api::ContainerState::ContainerRunning
        );
        assert_eq!(f.kill_container("app", 2), 1);
        let st = c
            .container_status(api::ContainerStatusRequest {
                container_id: id.clone(),
                verbose: false,
            })
            .await
            .unwrap()
            .status
            .unwrap();
        assert_eq!(st.state, api::ContainerState::ContainerExited as i32);
        assert_eq!((st.exit_code, st.reason.as_str()), (2, "Error"));
        let listed = c
            .list_pod_sandbox(api::ListPodSandboxRequest {
                filter: Some(api::PodSandboxFilter {
                    label_selector: [("io.kubernetes.pod.uid".to_string(), "u2".to_string())]
                        .into(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap();
        assert!(listed.items.is_empty(), "label filter");

        f.fail_next("stop_pod_sandbox", "p", tonic::Status::unavailable("boom"));
        let err = c
            .stop_pod_sandbox(api::StopPodSandboxRequest {
                pod_sandbox_id: sb.clone(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(tonic::Code::Unavailable));
        c.stop_pod_sandbox(api::StopPodSandboxRequest { pod_sandbox_id: sb })
            .await
            .unwrap();
        assert!(f.ready_sandboxes().is_empty());
        let ops: Vec<_> = f.calls().iter().map(|c| c.op).collect();
        assert_eq!(ops.iter().filter(|o| **o == "stop_pod_sandbox").count(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn delays_follow_tokio_time_and_hit_the_client_timeout() {
        let f = FakeRuntime::default();
        let c = client(&f);
        f.delay("version", "", Duration::from_secs(5));
        let started = tokio::time::Instant::now();
        let err = c.version(api::VersionRequest::default()).await.unwrap_err();
        assert!(
            matches!(err, crate::CriError::Timeout { op: "version", .. }),
            "{err}"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }
}
