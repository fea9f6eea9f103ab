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

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use crate::api;
use crate::service::Reply;

/// Unix nanoseconds "now", as the runtime stamps created/started/finished times.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// One call as the fake saw it: the operation and the pod or container name it concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub op: &'static str,
    /// Pod name for sandbox calls, container name for container calls, the command for
    /// exec_sync (space-joined), the image for image calls, empty otherwise.
    pub key: String,
    /// Extra detail: the grace (seconds) of stop_container, the pod UID of sandbox calls and of
    /// listings filtered to one pod.
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
    /// Container names -> how many more stops (its StopContainer, its sandbox's
    /// StopPodSandbox) leave it running while answering success.
    survive_stops: HashMap<String, u32>,
    /// Container names whose StopContainer waits its whole timeout before it kills.
    ignore_sigterm: HashSet<String>,
    events: events::Events,
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

    /// The next `n` stops of container `name` (StopContainer, or StopPodSandbox of its
    /// sandbox) answer success and leave it running: a runtime breaking the CRI contract, which
    /// upstream's `SyncTerminatingPod` guards against.
    pub fn survive_stops(&self, name: &str, n: u32) {
        self.lock().survive_stops.insert(name.to_string(), n);
    }

    /// StopContainer of container `name` takes its whole timeout before the container exits, as
    /// containerd's does for a process that ignores SIGTERM (a shell running as PID 1). A
    /// request dropped meanwhile leaves it running, as containerd does when the caller cancels.
    pub fn ignore_sigterm(&self, name: &str) {
        self.lock().ignore_sigterm.insert(name.to_string());
    }

    /// Stops every running instance of container `name` with `code` (the process died).
    pub fn kill_container(&self, name: &str, code: i32) -> usize {
        let now = (self.inner.clock)();
        let mut st = self.lock();
        let mut killed = Vec::new();
        for (id, c) in st.containers.iter_mut() {
            if container_name(&c.config) == name && c.state == api::ContainerState::ContainerRunning
            {
                exit(c, code, now);
                killed.push(id.clone());
            }
        }
        for id in &killed {
            st.emit(crate::events::Topic::TaskExit, id, now);
        }
        killed.len()
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

/// Whether a stop of container `name` leaves it running (see [`FakeRuntime::survive_stops`]),
/// counting the stop.
fn survives_stop(survive: &mut HashMap<String, u32>, name: &str) -> bool {
    match survive.get_mut(name) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    }
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

mod events;
mod service;
#[cfg(test)]
mod tests;
