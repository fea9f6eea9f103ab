//! The pod worker's transaction scripts (upstream `SyncPod`, `SyncTerminatingPod`,
//! `SyncTerminatedPod` and `kuberuntime_manager.SyncPod`): read the runtime, decide with
//! `compute_pod_actions`, act through the runtime manager, publish the status.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Container, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::backoff::Backoff;
use crate::container::cache::Started;
use crate::events::{self, EventType, Recorder};
use crate::images::ImageManager;
use crate::objects::ObjectSource;
use crate::podutil::{self, ContainerKind};
use crate::prober::{self, ContainerInfo, ProbeHandle, ProbeKind, ProbeResults, RunState};
use crate::runtime::container;
use crate::runtime::manager::StartFailure;
use crate::runtime::{
    adopt, compute_pod_actions, labels, ContainerState, PodRuntimeStatus, RuntimeError,
    RuntimeManager,
};
use crate::status::compute::{self, Reasons, StatusContext};
use crate::status::StatusHandle;
use crate::timeline::Mark;
use crate::volumes::{self, PodVolumes};

mod hooks;
mod run_options;
mod syncer;

pub use crate::pod_workers::{SyncOutcome, ERROR_RETRY};
pub use syncer::Syncer;

pub use crate::types::reasons::{Reason, StartError};

/// Handles every pod worker shares; immutable.
#[derive(Clone)]
pub struct SyncContext {
    pub runtime: RuntimeManager,
    /// The runtime pod cache PLEG writes; workers read pod status only from it.
    pub cache: crate::container::RuntimeCache,
    pub images: ImageManager,
    pub status: StatusHandle,
    pub root_dir: PathBuf,
    pub runtime_name: String,
    /// The node's IP for pods' hostIP; empty in standalone mode without one.
    pub node_ip: String,
    pub recorder: Recorder,
    /// Tells the prober which container instances run, so it probes the current ones.
    pub prober: ProbeHandle,
    /// The latest probe results, kept by the SyncLoop from the prober's result stream.
    pub probes: tokio::sync::watch::Receiver<Arc<ProbeResults>>,
    /// Node allocatable: what `resourceFieldRef` reports for a limit the container does not set.
    pub allocatable:
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    /// ConfigMaps and Secrets for env and volumes, read with the kubelet's client (none in
    /// standalone mode, where pods referencing them fail to start with a message saying so).
    pub objects: ObjectSource,
    /// Service account tokens for projected volumes (TokenRequest with the kubelet's client).
    pub tokens: crate::token::TokenManager,
    /// Services for the containers' service environment variables (empty in standalone mode).
    pub services: crate::services::ServiceLister,
    /// The container manager: pod cgroups, OOM scores, CFS settings.
    pub cm: crate::cm::ContainerManager,
    /// The container garbage collector: the owner of dead instances and replaced sandboxes.
    pub container_gc: crate::runtime::ContainerGcHandle,
    /// `crashLoopBackOff.maxContainerRestartPeriod`: each pod's CrashLoopBackOff cap.
    pub crash_loop_max: Option<Duration>,
    /// `seccompDefault`: RuntimeDefault seccomp for containers that set no profile.
    pub seccomp_default: bool,
    /// RuntimeClass handlers for RunPodSandbox (read with the kubelet's client).
    pub runtime_classes: crate::runtime::runtime_class::RuntimeClasses,
    /// PVCs and their PVs, read on each sync of a pod that uses one.
    pub claims: crate::volumes::claims::ClaimSource,
    /// The CSI volume plugin: stage/publish through the registered drivers.
    pub csi: crate::volumes::csi::CsiVolumes,
    /// The node's labels as it registers them (PV node affinity).
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// Each pod's start-up milestones (volumes, sandbox, images, containers, Ready).
    pub timeline: crate::timeline::TimelineHandle,
}

/// What a worker keeps between syncs of its pod.
pub struct PodState {
    pub crash_backoff: Backoff,
    pub image_backoff: Backoff,
    pub reasons: Reasons,
    pub last_status: Option<PodStatus>,
    pub first_seen: Timestamp,
    /// Monotonic twin of `first_seen`, for the pod start metrics.
    pub first_seen_at: Instant,
    /// Time spent getting images ready, which the pod start SLI leaves out.
    pub image_time: Duration,
    /// A phase before Running was published: the pod started under this worker's eyes, so its
    /// start is measured (an adopted running pod is not).
    pub start_pending: bool,
    /// Whether this worker synced the pod before (`create` vs `sync` in the worker metric).
    pub synced: bool,
    /// The pod's volumes as the last sync set them up, for the containers' mounts.
    pub volumes: PodVolumes,
    /// When the last sync's runtime actions ended: the next sync needs a runtime status read
    /// after it (upstream `lastSyncTime`). Before the first sync: when an earlier worker of
    /// the same UID finished, or None.
    pub last_sync: Option<tokio::time::Instant>,
    /// The kubelet is failing this pod (an eviction): every status published from now on is
    /// `Failed` with this reason and message.
    pub failure: Option<compute::PodFailure>,
    /// A sync left a container start when the pod began terminating: a CreateContainer or
    /// StartContainer dropped at the client may still complete in the runtime, so the
    /// termination reads the whole pod after its kill rather than only what it stopped.
    pub start_dropped: bool,
    /// Its cleanup removed the pod cgroup and let the status manager delete the object; what
    /// is left is the runtime's removal (retried on its own if it fails).
    pub reclaimed: bool,
}

impl PodState {
    pub fn new() -> Self {
        Self::with_crash_loop_max(None)
    }

    /// A fresh state whose CrashLoopBackOff is capped at `crash_loop_max`
    /// (`crashLoopBackOff.maxContainerRestartPeriod`).
    pub fn with_crash_loop_max(crash_loop_max: Option<Duration>) -> Self {
        PodState {
            crash_backoff: Backoff::crash_loop(crash_loop_max),
            image_backoff: Backoff::image_pull(),
            reasons: HashMap::new(),
            last_status: None,
            first_seen: compute::now(),
            first_seen_at: Instant::now(),
            image_time: Duration::ZERO,
            start_pending: false,
            synced: false,
            volumes: PodVolumes::default(),
            last_sync: None,
            failure: None,
            start_dropped: false,
            reclaimed: false,
        }
    }
}

impl Default for PodState {
    fn default() -> Self {
        Self::new()
    }
}

fn pod_dir(ctx: &SyncContext, pod: &Pod) -> PathBuf {
    ctx.root_dir.join("pods").join(podutil::uid(pod))
}

/// Publishes the API status computed from `rt` and returns it.
async fn publish(
    ctx: &SyncContext,
    state: &mut PodState,
    pod: &Arc<Pod>,
    rt: &PodRuntimeStatus,
) -> PodStatus {
    feed_prober(ctx, pod, rt);
    let probes = ctx.probes.borrow().clone();
    let cx = StatusContext {
        probes: &probes,
        reasons: &state.reasons,
        old: state.last_status.as_ref(),
        now: compute::now(),
        runtime_name: &ctx.runtime_name,
        start_time: state.first_seen,
        host_ip: &ctx.node_ip,
        failure: state.failure.as_ref(),
    };
    let status = compute::generate(pod, rt, &cx);
    let reason = |s: Option<&PodStatus>| s.and_then(|s| s.reason.clone());
    if reason(Some(&status)).as_deref() == Some(compute::DEADLINE_EXCEEDED)
        && reason(state.last_status.as_ref()).as_deref() != Some(compute::DEADLINE_EXCEEDED)
    {
        ctx.recorder.pod_event(
            pod,
            None,
            EventType::Normal,
            compute::DEADLINE_EXCEEDED,
            compute::DEADLINE_EXCEEDED_MESSAGE.into(),
        );
    }
    record_pod_start(state, &status);
    if is_ready(&status) {
        ctx.timeline.mark(pod, Mark::Ready);
    }
    if state.last_status.as_ref() != Some(&status) {
        ctx.status.set(pod.clone(), status.clone()).await;
        state.last_status = Some(status.clone());
    }
    status
}

fn is_ready(s: &PodStatus) -> bool {
    s.conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// `kubelet_pod_start_duration_seconds` and its SLI twin (without image time), observed once, when
/// a pod this worker saw pending first turns Running (upstream: in SyncPod on that transition).
fn record_pod_start(state: &mut PodState, status: &PodStatus) {
    match status.phase.as_deref() {
        Some("Running") if state.start_pending => {
            state.start_pending = false;
            let m = crate::metrics::get();
            let took = state.first_seen_at.elapsed();
            m.pod_start_duration.observe(took.as_secs_f64());
            m.pod_start_sli_duration
                .observe(took.saturating_sub(state.image_time).as_secs_f64());
        }
        Some("Pending") if state.last_status.is_none() => state.start_pending = true,
        _ => {}
    }
}

/// Upstream hands the prober the pod status on every status computation; ours gets each
/// container's current instance (the newest with its name), which is what its workers probe.
fn feed_prober(ctx: &SyncContext, pod: &Arc<Pod>, rt: &PodRuntimeStatus) {
    let has_probes = prober::probed_containers(pod).any(|(c, _)| {
        ProbeKind::ALL
            .iter()
            .any(|k| prober::probe_of(c, *k).is_some())
    });
    if !has_probes {
        return;
    }
    ctx.prober.add_pod(pod.clone());
    let pod_ip = rt.pod_ips().into_iter().next();
    let uid = podutil::uid(pod);
    let mut seen = std::collections::HashSet::new();
    // Newest first, so the first of each name is the current instance.
    for c in &rt.containers {
        if !seen.insert(c.name.as_str()) {
            continue;
        }
        let state = match c.state {
            ContainerState::Running => RunState::Running {
                started_at: SystemTime::UNIX_EPOCH
                    + Duration::from_nanos(c.started_at.max(0) as u64),
            },
            ContainerState::Exited => RunState::Terminated,
            _ => RunState::Waiting,
        };
        ctx.prober.update_container(
            uid,
            &c.name,
            ContainerInfo {
                id: c.id.clone(),
                state,
                pod_ip: pod_ip.clone(),
            },
        );
    }
}

fn is_terminal(s: &PodStatus) -> bool {
    crate::types::PodPhase::of(Some(s)).is_some_and(crate::types::PodPhase::is_terminal)
}

/// Upstream `SyncPod`: one pass towards the spec.
pub async fn sync_pod(
    ctx: &SyncContext,
    state: &mut PodState,
    pod: &Arc<Pod>,
    terminating: &CancellationToken,
) -> SyncOutcome {
    let started = Instant::now();
    let op = if state.synced { "sync" } else { "create" };
    state.synced = true;
    let out = sync_pod_inner(ctx, state, pod, terminating).await;
    crate::metrics::get()
        .pod_worker_duration
        .with_label_values(&[op])
        .observe(started.elapsed().as_secs_f64());
    out
}

/// The pod's data directories (upstream `makePodDataDirs`), made on every sync as upstream does
/// so one removed behind the kubelet's back comes back; one blocking task for the three.
async fn make_pod_data_dirs(dir: &Path) -> std::io::Result<()> {
    let dir = dir.to_path_buf();
    crate::blocking::io(move || {
        ["volumes", "plugins", "containers"]
            .iter()
            .try_for_each(|sub| std::fs::create_dir_all(dir.join(sub)))
    })
    .await
}

async fn sync_pod_inner(
    ctx: &SyncContext,
    state: &mut PodState,
    pod: &Arc<Pod>,
    terminating: &CancellationToken,
) -> SyncOutcome {
    let who = podutil::describe(pod);
    let dir = pod_dir(ctx, pod);
    if let Err(e) = make_pod_data_dirs(&dir).await {
        warn!(pod = %who, error = %e, dir = %dir.display(), "cannot create pod data directory");
        ctx.recorder.pod_event(
            pod,
            None,
            EventType::Warning,
            events::FAILED_TO_MAKE_POD_DATA_DIRECTORIES,
            format!("error making pod data directories: {e}"),
        );
        return SyncOutcome {
            terminal: false,
            retry_after: Some(ERROR_RETRY),
        };
    }
    // Newer than what the last sync saw (upstream `GetNewerThan(uid, lastSyncTime)`); PLEG
    // usually has it already, else it reads the pod now.
    let rt = match ctx.cache.fresh(podutil::uid(pod), state.last_sync).await {
        Ok(rt) => rt,
        Err(e) => {
            warn!(pod = %who, error = %e, "cannot read pod status from the runtime");
            ctx.recorder.pod_event(
                pod,
                None,
                EventType::Warning,
                events::FAILED_SYNC,
                format!("error determining status: {e}"),
            );
            return SyncOutcome {
                terminal: false,
                retry_after: Some(ERROR_RETRY),
            };
        }
    };
    let status = publish(ctx, state, pod, &rt).await;
    if is_terminal(&status) {
        return SyncOutcome {
            terminal: true,
            retry_after: None,
        };
    }
    if let Some(out) = ensure_pod_cgroup(ctx, pod, &rt).await {
        return out;
    }
    // Upstream `WaitForAttachAndMount`: no container starts before every volume is set up; the
    // containers wait with ContainerCreating meanwhile and the worker retries.
    let node_memory = ctx
        .allocatable
        .get("memory")
        .and_then(|q| crate::resources::parse_milli(&q.0))
        .and_then(|m| u64::try_from(m / 1000).ok());
    // The configMaps and secrets the volumes show, fetched on every sync so that a changed
    // object reaches the files (upstream: watch-based cache, re-read on each sync's remount).
    let objects = ctx
        .objects
        .fetch(pod, crate::objects::volume_refs(pod))
        .await;
    // Tokens come from the cache and are requested again only when due for a refresh.
    let tokens = ctx.tokens.fetch(pod).await;
    // Upstream's populator reads each PVC and its PV whenever it processes the pod.
    let claims = ctx.claims.resolve(pod).await;
    // CSI volumes first: their driver calls are async, the rest of the set up is blocking.
    let csi = ctx
        .csi
        .set_up_pod(pod, &dir, &claims, volumes::pod_fs_group(pod))
        .await;
    let inputs = VolumeInputs {
        objects,
        tokens,
        allocatable: ctx.allocatable.clone(),
        pvs: volumes::PvInputs {
            claims,
            node_labels: ctx.node_labels.clone(),
            csi,
        },
    };
    match set_up_volumes(dir.clone(), pod.clone(), node_memory, inputs).await {
        Ok(v) => {
            state.volumes = v;
            ctx.timeline.mark(pod, Mark::VolumesReady);
        }
        Err(errors) => {
            // A volume that was set up before and only failed to refresh (its configMap deleted,
            // the API server unreachable) keeps its last content and does not hold the pod
            // back: upstream's reconciler leaves a failed remount marked mounted.
            let only_refreshes = errors.iter().all(|e| state.volumes.has(&e.volume));
            for e in errors {
                warn!(pod = %who, volume = %e.volume, error = %e.source, "volume set up failed");
                ctx.recorder.pod_event(
                    pod,
                    None,
                    EventType::Warning,
                    events::FAILED_MOUNT_VOLUME,
                    e.to_string(),
                );
            }
            if !only_refreshes {
                return SyncOutcome {
                    terminal: false,
                    retry_after: Some(ERROR_RETRY),
                };
            }
        }
    }
    let acting = ctx.runtime.acting.mark(podutil::uid(pod));
    let Executed {
        retry,
        acted,
        started,
    } = execute(ctx, state, pod, &rt, terminating).await;
    if terminating.is_cancelled() {
        // Nothing of this sync is published: a container whose postStart hook was left would
        // show ready, and the termination reads the pod anew after this stamp anyway.
        state.last_sync = Some(tokio::time::Instant::now());
        drop(acting);
        return SyncOutcome::default();
    }
    // Show the result of what was just done without waiting for the next relist. A sync that
    // changed nothing (a periodic resync, most PLEG events) has published its status above:
    // reading the pod again cost 5 CRI calls per pod per resync for the same status. A pod
    // started from nothing is read as what was started: 1 call per container instead of 4.
    if acted {
        let acted = tokio::time::Instant::now();
        state.last_sync = Some(acted);
        let uid = podutil::uid(pod);
        let read = match started {
            Some(started) => ctx.cache.fresh_after_start(uid, Some(acted), started).await,
            None => ctx.cache.fresh(uid, Some(acted)).await,
        };
        // The mark holds until the worker's own read is in: PLEG's queue of reads is long
        // while many pods change at once, and a relist meanwhile read the pod once more.
        drop(acting);
        if let Ok(rt) = read {
            let status = publish(ctx, state, pod, &rt).await;
            if is_terminal(&status) {
                return SyncOutcome {
                    terminal: true,
                    retry_after: None,
                };
            }
        }
    }
    // Sync again when the active deadline ends, so the pod fails on time.
    let deadline = compute::active_deadline_left(pod, state.first_seen, compute::now())
        .map(|d| d + Duration::from_millis(500));
    SyncOutcome {
        terminal: false,
        retry_after: match (retry, deadline) {
            (Some(r), Some(d)) => Some(r.min(d)),
            (r, d) => r.or(d),
        },
    }
}

/// Upstream `SyncPod`'s cgroup step: the pod's cgroup exists before its sandbox starts. A pod
/// whose containers run without their pod cgroup (it was removed, or they were started without
/// one) is killed first, so that they start again inside it, as upstream does when it is not
/// the pod's first sync. Returns the outcome to stop with when the step failed.
async fn ensure_pod_cgroup(
    ctx: &SyncContext,
    pod: &Arc<Pod>,
    rt: &PodRuntimeStatus,
) -> Option<SyncOutcome> {
    if !ctx.cm.enabled() || ctx.cm.pod_exists(pod).await {
        return None;
    }
    let who = podutil::describe(pod);
    if rt
        .containers
        .iter()
        .any(|c| c.state == ContainerState::Running)
    {
        warn!(pod = %who, cgroup = %ctx.cm.cgroup_parent(pod), "pod cgroup is missing while its containers run; killing the pod to start it again inside one");
        record_killing(ctx, pod, running_names(rt));
        if let Err(e) = ctx.runtime.kill_pod(rt, grace(pod)).await {
            warn!(pod = %who, error = %e, "cannot kill a pod without its cgroup");
            return Some(SyncOutcome {
                terminal: false,
                retry_after: Some(ERROR_RETRY),
            });
        }
    }
    match ctx.cm.ensure_pod(pod).await {
        Ok(_) => None,
        Err(e) => {
            warn!(pod = %who, error = %e, "cannot create the pod's cgroup");
            ctx.recorder.pod_event(
                pod,
                None,
                EventType::Warning,
                events::FAILED_TO_CREATE_POD_CONTAINER,
                format!("unable to ensure pod container exists: {e}"),
            );
            Some(SyncOutcome {
                terminal: false,
                retry_after: Some(ERROR_RETRY),
            })
        }
    }
}

/// What the volumes read, owned so that it can move to the blocking thread.
struct VolumeInputs {
    objects: crate::objects::Objects,
    tokens: crate::token::Tokens,
    allocatable:
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    pvs: volumes::PvInputs,
}

/// [`volumes::set_up_pod`] on a blocking thread: it stats, creates and mounts.
async fn set_up_volumes(
    dir: PathBuf,
    pod: Arc<Pod>,
    node_memory: Option<u64>,
    inputs: VolumeInputs,
) -> Result<PodVolumes, Vec<volumes::SetUpError>> {
    let uid = podutil::uid(&pod).to_string();
    tokio::task::spawn_blocking(move || {
        let i = volumes::projected::Inputs {
            objects: &inputs.objects,
            tokens: &inputs.tokens,
            allocatable: &inputs.allocatable,
        };
        volumes::set_up_pod_with(&dir, &pod, node_memory, &i, &inputs.pvs)
    })
    .await
    .unwrap_or_else(|e| {
        Err(vec![volumes::SetUpError {
            volume: String::new(),
            source: volumes::VolumeError::Io {
                what: "set up volumes of pod",
                path: PathBuf::from(uid),
                source: std::io::Error::other(e.to_string()),
            },
        }])
    })
}

/// The `fieldPath` of the container named `name` in events (upstream `spec.containers{name}`).
pub fn field_path(pod: &Pod, name: &str) -> String {
    podutil::kind_of(pod, name)
        .unwrap_or(ContainerKind::Regular)
        .field_path(name)
}

/// Upstream `killContainer` records Killing for every container it stops.
fn record_killing<'a>(ctx: &SyncContext, pod: &Pod, names: impl Iterator<Item = &'a str>) {
    for name in names {
        ctx.recorder.pod_event(
            pod,
            Some(field_path(pod, name)),
            EventType::Normal,
            events::KILLING_CONTAINER,
            format!("Stopping container {name}"),
        );
    }
}

fn running_names(rt: &PodRuntimeStatus) -> impl Iterator<Item = &str> {
    rt.containers
        .iter()
        .filter(|c| c.state == ContainerState::Running)
        .map(|c| c.name.as_str())
}

fn grace(pod: &Pod) -> Duration {
    Duration::from_secs(podutil::grace_period_seconds(pod).max(0) as u64)
}

/// What [`execute`] did: when to sync again, whether it changed anything, and, for a pod it
/// started from nothing with every step succeeding, what it started (see [`Started`]).
struct Executed {
    retry: Option<Duration>,
    acted: bool,
    started: Option<Started>,
}

/// Carries out `compute_pod_actions`; returns when to retry, if anything failed or waits,
/// whether there was anything to do in the runtime (else the pod needs no new read), and what
/// it started when the runtime had nothing of the pod before.
async fn execute(
    ctx: &SyncContext,
    state: &mut PodState,
    pod: &Arc<Pod>,
    rt: &PodRuntimeStatus,
    terminating: &CancellationToken,
) -> Executed {
    let who = podutil::describe(pod);
    // Containers another kubelet created (before a swap to rkubelet) are judged by their image,
    // not by a hash rkubelet cannot reproduce.
    let rt = &*adopt::adopt_foreign(&ctx.runtime, pod, rt).await;
    let probes = ctx.probes.borrow().clone();
    let actions = compute_pod_actions(pod, rt, &probes);
    let acted = !actions.is_noop();
    let done = |retry| Executed {
        retry,
        acted,
        started: None,
    };
    // The runtime had nothing of the pod: what this sync starts is all it will have.
    let from_nothing = rt.sandboxes.is_empty() && rt.containers.is_empty();
    let mut started: Option<Started> = None;
    let mut all_started = true;
    let mut retry: Option<Duration> = None;
    let mut want_retry = |d: Duration| retry = Some(retry.map_or(d, |r: Duration| r.min(d)));

    if actions.kill_pod {
        if actions.create_sandbox {
            info!(target: v2!(), pod = %who, "sandbox changed or missing; (re)creating the pod sandbox");
            if !rt.sandboxes.is_empty() {
                ctx.recorder.pod_event(
                    pod,
                    None,
                    EventType::Normal,
                    events::SANDBOX_CHANGED,
                    "Pod sandbox changed, it will be killed and re-created.".into(),
                );
            }
        } else {
            info!(pod = %who, "no containers should run; stopping the pod");
        }
        record_killing(ctx, pod, running_names(rt));
        let never = CancellationToken::new();
        if let Err(e) = hooks::kill_pod(ctx, pod, rt, grace(pod), &never).await {
            warn!(pod = %who, error = %e, "failed to kill pod");
            ctx.recorder.pod_event(
                pod,
                None,
                EventType::Warning,
                events::FAILED_TO_KILL_POD,
                format!("error killing pod: {e}"),
            );
            return done(Some(ERROR_RETRY));
        }
        if !actions.create_sandbox {
            return done(None);
        }
    }
    for k in &actions.containers_to_kill {
        info!(pod = %who, container = %k.name, "{}", k.message);
        // Upstream killContainer: the reason for the kill is the Killing event's message.
        ctx.recorder.pod_event(
            pod,
            Some(field_path(pod, &k.name)),
            EventType::Normal,
            events::KILLING_CONTAINER,
            k.message.clone(),
        );
        let g = k
            .grace_override
            .map(|g| Duration::from_secs(g.max(0) as u64))
            .unwrap_or_else(|| grace(pod));
        let ip = rt.pod_ips().into_iter().next();
        if let Err(e) = hooks::stop_container(ctx, pod, &k.id, &k.name, g, ip.as_deref()).await {
            warn!(pod = %who, container = %k.name, error = %e, "failed to stop container");
            want_retry(ERROR_RETRY);
        }
    }

    if terminating.is_cancelled() {
        // No sandbox (and its CNI set up) for a pod that is terminating already.
        return done(None);
    }
    let (sandbox_id, attempt, ip) = if actions.create_sandbox {
        let sandbox = match sandbox_handler(ctx, pod).await {
            Ok(handler) => {
                if !handler.is_empty() {
                    info!(pod = %who, runtime_handler = %handler, "running pod with runtime handler");
                }
                ctx.runtime.run_sandbox(pod, actions.attempt, handler).await
            }
            Err(e) => Err(e),
        };
        match sandbox {
            Ok((id, status)) => {
                let ip = status.as_ref().map(|s| s.ip.clone()).unwrap_or_default();
                if from_nothing {
                    started = status.map(|sandbox| Started {
                        sandbox,
                        containers: Vec::new(),
                    });
                }
                crate::metrics::get().started_pods.inc();
                ctx.timeline.mark(pod, Mark::SandboxCreated);
                info!(target: v2!(), pod = %who, sandbox = %id, ip = %ip, attempt = actions.attempt, "created pod sandbox");
                if !rt.sandboxes.is_empty() {
                    // The replaced sandboxes go with the container GC's next pass, which this
                    // asks for now (upstream waits for its period).
                    ctx.container_gc.collect_soon();
                }
                (id, actions.attempt, ip)
            }
            Err(e) => {
                warn!(pod = %who, error = %e, "failed to create pod sandbox");
                ctx.recorder.pod_event(
                    pod,
                    None,
                    EventType::Warning,
                    events::FAILED_CREATE_POD_SANDBOX,
                    format!("Failed to create pod sandbox: {e}"),
                );
                return done(Some(ERROR_RETRY));
            }
        }
    } else {
        let ip = rt
            .sandboxes
            .first()
            .map(|s| s.ip.clone())
            .unwrap_or_default();
        (actions.sandbox_id.clone(), actions.attempt, ip)
    };
    let restart_counts: HashMap<&str, i32> = rt
        .containers
        .iter()
        .rev()
        .map(|c| (c.name.as_str(), c.restart_count))
        .collect();

    // Upstream's order: ephemeral containers (they may start before initialization finished),
    // then init containers, then regular ones.
    let ephemeral: Vec<Container> = actions
        .ephemeral_containers_to_start
        .iter()
        .filter_map(|&i| podutil::ephemeral_specs(pod).get(i))
        .map(podutil::ephemeral_as_container)
        .collect();
    let mut starts: Vec<(&Container, ContainerKind)> = ephemeral
        .iter()
        .map(|c| (c, ContainerKind::Ephemeral))
        .collect();
    for &i in &actions.init_containers_to_start {
        starts.extend(
            podutil::init_containers(pod)
                .get(i)
                .map(|c| (c, ContainerKind::Init)),
        );
    }
    for &i in &actions.containers_to_start {
        starts.extend(
            podutil::containers(pod)
                .get(i)
                .map(|c| (c, ContainerKind::Regular)),
        );
    }
    let m = crate::metrics::get();
    for (c, kind) in starts {
        let container_type = match kind {
            ContainerKind::Regular => "container",
            ContainerKind::Init => "init_container",
            ContainerKind::Ephemeral => "ephemeral_container",
        };
        // An interrupted start's container is started as it is and keeps its restart count.
        // A start cancelled half-way is replaced without counting a restart either.
        let existing = actions.start_existing.get(&c.name);
        let uncounted = existing.is_some() || actions.replace_uncounted.contains(&c.name);
        let restart_count = restart_counts
            .get(c.name.as_str())
            .map(|&n| if uncounted { n } else { n + 1 })
            .unwrap_or(0);
        // An interrupted start's container that the runtime cannot start any more (seen with
        // containerd: its namespaces were resolved against a sandbox state that did not last)
        // is replaced in the same sync, still without counting a restart.
        let mut res = None;
        if let Some(id) = existing {
            info!(pod = %who, container = %c.name, id = %id, "starting the container an interrupted start created");
            let start = start_existing(ctx, pod, c, kind, id, restart_count, &ip);
            let Some(started) = unless_terminating(terminating, start).await else {
                info!(pod = %who, container = %c.name, "pod is terminating; leaving its starts");
                state.start_dropped = true;
                all_started = false;
                break;
            };
            match started {
                Err(e) if e.reason == Reason::RunContainerError => {
                    warn!(pod = %who, container = %c.name, id = %id, error = %e.message, "cannot start the container an interrupted start created; replacing it");
                    if let Err(e) = ctx.runtime.remove_container(id).await {
                        warn!(pod = %who, id = %id, error = %e, "failed to remove it");
                    }
                }
                other => res = Some(other),
            }
        }
        let res = match res {
            Some(res) => res,
            None => {
                let start = start_container(
                    ctx,
                    state,
                    pod,
                    c,
                    kind,
                    rt,
                    &sandbox_id,
                    attempt,
                    &ip,
                    restart_count,
                );
                let Some(res) = unless_terminating(terminating, start).await else {
                    info!(pod = %who, container = %c.name, "pod is terminating; leaving its starts");
                    state.start_dropped = true;
                    all_started = false;
                    break;
                };
                res
            }
        };
        match res {
            Ok(id) => {
                // Upstream counts every start attempt past the crash-loop backoff.
                m.started_containers
                    .with_label_values(&[container_type])
                    .inc();
                state.reasons.remove(&c.name);
                info!(target: v2!(), pod = %who, container = %c.name, id = %id, restart_count, "started container");
                if let Some(s) = started.as_mut() {
                    s.containers.push(id);
                }
            }
            Err(e) => {
                // It may have left a created container behind: only a whole read shows it.
                all_started = false;
                if e.reason != Reason::CrashLoopBackOff && e.reason != Reason::ImagePullBackOff {
                    warn!(pod = %who, container = %c.name, reason = e.reason.as_str(), message = %e.message, "container failed to start");
                }
                record_start_error(ctx, pod, &c.name, kind, &e);
                if e.reason != Reason::CrashLoopBackOff {
                    m.started_containers
                        .with_label_values(&[container_type])
                        .inc();
                    m.started_containers_errors
                        .with_label_values(&[e.reason.as_str(), container_type])
                        .inc();
                }
                want_retry(e.retry_after.unwrap_or(ERROR_RETRY));
                state
                    .reasons
                    .insert(c.name.clone(), (e.reason.as_str().to_string(), e.message));
                // Upstream: a regular init container that did not start holds back everything
                // after it; a sidecar that did not start does not.
                if kind == ContainerKind::Init && !prober::is_restartable_init(c) {
                    break;
                }
            }
        }
    }
    for id in &actions.interrupted_to_remove {
        info!(pod = %who, id = %id, "removing a container whose start was interrupted");
        if let Err(e) = ctx.runtime.remove_container(id).await {
            warn!(pod = %who, id = %id, error = %e, "failed to remove a created, never started container");
        }
    }
    let now = crate::clock::now();
    state.crash_backoff.gc(now);
    state.image_backoff.gc(now);
    Executed {
        retry,
        acted,
        started: started.filter(|_| all_started && actions.interrupted_to_remove.is_empty()),
    }
}

/// `start`, unless the pod begins terminating first (None then; see
/// [`crate::pod_workers::PodSyncer::sync_pod`]). The start is dropped where it waits: an image
/// pull (containerd stops it with the request), a postStart hook, a CRI call. Whatever it had
/// created is the termination's to stop and remove: the termination reads the pod anew, and
/// the removal after it reads it once more.
async fn unless_terminating<T>(
    terminating: &CancellationToken,
    start: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        biased;
        _ = terminating.cancelled() => None,
        res = start => Some(res),
    }
}

/// Upstream's events for a container that did not start: `BackOff` while crash-looping, else
/// `Failed` with `Error: <reason>` for image errors and `Error: <message>` for the rest.
fn record_start_error(
    ctx: &SyncContext,
    pod: &Pod,
    name: &str,
    kind: ContainerKind,
    e: &StartError,
) {
    if e.reason == Reason::PostStartHookError {
        // Already recorded as FailedPostStartHook, as upstream does.
        return;
    }
    let fp = Some(kind.field_path(name));
    let (reason, message) = match e.reason {
        Reason::CrashLoopBackOff => (
            events::BACK_OFF_START_CONTAINER,
            format!(
                "Back-off restarting failed container {name} in pod {}_{}({})",
                podutil::name(pod),
                podutil::namespace(pod),
                podutil::uid(pod)
            ),
        ),
        Reason::ErrImagePull
        | Reason::ImagePullBackOff
        | Reason::ErrImageNeverPull
        | Reason::InvalidImageName
        | Reason::ImageInspectError => (
            events::FAILED_TO_CREATE_CONTAINER,
            format!("Error: {}", e.reason.as_str()),
        ),
        _ => (
            events::FAILED_TO_CREATE_CONTAINER,
            format!("Error: {}", e.message),
        ),
    };
    ctx.recorder
        .pod_event(pod, fp, EventType::Warning, reason, message);
}

/// Backoff check, image, config, create and start for one container (upstream `startContainer`
/// preceded by `doBackOff`).
#[allow(clippy::too_many_arguments)]
async fn start_container(
    ctx: &SyncContext,
    state: &mut PodState,
    pod: &Pod,
    c: &Container,
    kind: ContainerKind,
    rt: &PodRuntimeStatus,
    sandbox_id: &str,
    sandbox_attempt: u32,
    ip: &str,
    restart_count: i32,
) -> Result<String, StartError> {
    // Upstream `doBackOff`: the newest *exited* instance, not the newest one. A container killed
    // by its liveness probe is still running in `rt` while this sync replaces it, and the
    // instance that exited before it is what the backoff counts from.
    if let Some(last) = rt
        .containers
        .iter()
        .find(|s| s.name == c.name && s.state == ContainerState::Exited)
    {
        let key = format!(
            "{}_{}_{}_{}_{}",
            podutil::name(pod),
            podutil::namespace(pod),
            podutil::uid(pod),
            c.name,
            labels::container_hash(c)
        );
        let finished =
            SystemTime::UNIX_EPOCH + Duration::from_nanos(last.finished_at.max(0) as u64);
        let now = crate::clock::now();
        if let Some(left) = state.crash_backoff.in_backoff_since(&key, finished, now) {
            let msg = format!(
                "back-off {} restarting failed container={} pod={}_{}({})",
                crate::config::format_duration(state.crash_backoff.get(&key)),
                c.name,
                podutil::name(pod),
                podutil::namespace(pod),
                podutil::uid(pod)
            );
            return Err(StartError::new(Reason::CrashLoopBackOff, msg).retry_after(left));
        }
        state.crash_backoff.next(&key, finished, now);
    }
    let fp = kind.field_path(&c.name);
    let pulling = Instant::now();
    let image = ctx
        .images
        .ensure(pod, c, &fp, &mut state.image_backoff)
        .await;
    state.image_time += pulling.elapsed();
    let image_ref = image?;
    ctx.timeline.mark(pod, Mark::ImagePulled(c.name.clone()));
    let pod_ips = run_options::pod_ips(pod, rt, ip, &ctx.node_ip);
    let mut opts = run_options::generate(ctx, pod, c, &pod_ips, &image_ref, &state.volumes).await?;
    if kind == ContainerKind::Ephemeral {
        opts.target_container_id = ephemeral_target(pod, c, rt)?;
    }
    let config = container::container_config(pod, c, &image_ref, restart_count, kind, &opts)
        .map_err(|e| StartError::new(Reason::CreateContainerConfigError, e.0))?;
    let res = ctx
        .runtime
        .create_and_start(pod, c, config, sandbox_id, sandbox_attempt, || {
            ctx.timeline
                .mark(pod, Mark::ContainerCreated(c.name.clone()))
        })
        .await;
    let created = |msg: String| {
        ctx.recorder.pod_event(
            pod,
            Some(fp.clone()),
            EventType::Normal,
            events::CREATED_CONTAINER,
            msg,
        )
    };
    match res {
        Ok(id) => {
            created(format!("Created container {}", c.name));
            ctx.recorder.pod_event(
                pod,
                Some(fp.clone()),
                EventType::Normal,
                events::STARTED_CONTAINER,
                format!("Started container {}", c.name),
            );
            // Not Running-ready before the hook finished: the worker publishes no status meanwhile.
            hooks::post_start(ctx, pod, c, kind, &id, ip)
                .await
                .map_err(|m| StartError::new(Reason::PostStartHookError, m))?;
            ctx.timeline
                .mark(pod, Mark::ContainerStarted(c.name.clone()));
            Ok(id)
        }
        Err(StartFailure::Create(m)) => Err(StartError::new(Reason::CreateContainerError, m)),
        Err(StartFailure::Start(m)) => {
            created(format!("Created container {}", c.name));
            Err(StartError::new(Reason::RunContainerError, m))
        }
    }
}

/// Starts a container found `Created` (an interrupted start; see `runtime::actions`), then runs
/// its post-start hook as for a new one.
async fn start_existing(
    ctx: &SyncContext,
    pod: &Pod,
    c: &Container,
    kind: ContainerKind,
    id: &str,
    restart_count: i32,
    ip: &str,
) -> Result<String, StartError> {
    let fp = kind.field_path(&c.name);
    ctx.runtime
        .start_existing(pod, c, id, restart_count)
        .await
        .map_err(|e| match e {
            StartFailure::Create(m) | StartFailure::Start(m) => {
                StartError::new(Reason::RunContainerError, m)
            }
        })?;
    ctx.recorder.pod_event(
        pod,
        Some(fp),
        EventType::Normal,
        events::STARTED_CONTAINER,
        format!("Started container {}", c.name),
    );
    hooks::post_start(ctx, pod, c, kind, id, ip)
        .await
        .map_err(|m| StartError::new(Reason::PostStartHookError, m))?;
    Ok(id.to_string())
}

/// The running container an ephemeral container targets (upstream: the target's PID namespace
/// is joined by ID; a target that is not running is an error the next sync retries).
fn ephemeral_target(
    pod: &Pod,
    c: &Container,
    rt: &PodRuntimeStatus,
) -> Result<Option<String>, StartError> {
    let target = podutil::ephemeral_specs(pod)
        .iter()
        .find(|e| e.name == c.name)
        .and_then(|e| e.target_container_name.as_deref())
        .filter(|t| !t.is_empty());
    let Some(target) = target else {
        return Ok(None);
    };
    match rt.find(target) {
        Some(s) if s.state == ContainerState::Running => Ok(Some(s.id.clone())),
        _ => Err(StartError::new(
            Reason::CreateContainerConfigError,
            format!(
                "target container {target:?} of ephemeral container {:?} is not running",
                c.name
            ),
        )),
    }
}

/// Upstream `SyncTerminatingPod`: stop everything with the grace period, publish the final status
/// (`Failed` with the failure's reason and message when the kubelet fails the pod, as an
/// eviction does).
pub async fn terminate_pod(
    ctx: &SyncContext,
    state: &mut PodState,
    pod: &Arc<Pod>,
    grace_override: Option<Duration>,
    failure: Option<&compute::PodFailure>,
    shortened: &CancellationToken,
) -> Result<(), RuntimeError> {
    if let Some(f) = failure {
        state.failure = Some(f.clone());
    }
    let rt = ctx.cache.fresh(podutil::uid(pod), state.last_sync).await?;
    let g = grace_override.unwrap_or_else(|| grace(pod));
    info!(target: v2!(), pod = %podutil::describe(pod), grace = ?g, "terminating pod");
    if state.failure.is_some() {
        // The failure shows at once, before the containers are stopped (upstream writes the
        // pod status of a killed pod before killing it).
        publish(ctx, state, pod, &rt).await;
    }
    // Upstream stops liveness and startup probes of a terminating pod: it is being killed anyway.
    ctx.prober.stop_liveness_and_startup(podutil::uid(pod));
    record_killing(ctx, pod, running_names(&rt));
    let acting = ctx.runtime.acting.mark(podutil::uid(pod));
    // A shorter grace period ends the wait for the containers' stops, and the worker stops the
    // pod again with it. Dropping the requests ends containerd's wait for them; the next
    // StopContainer signals again and kills after the shorter timeout.
    let stopped = hooks::kill_pod(ctx, pod, &rt, g, shortened).await;
    if let Err(RuntimeError::GraceShortened) = stopped {
        // The next attempt reads the pod anew, as upstream's `lastSyncTime` moves on a
        // cancelled attempt too: the cache still holds the read from before this kill (PLEG
        // skips a pod its worker acts on), which shows containers stopped since as running.
        state.last_sync = Some(tokio::time::Instant::now());
    }
    stopped?;
    let killed = tokio::time::Instant::now();
    state.last_sync = Some(killed);
    let read = if state.start_dropped {
        ctx.cache.fresh(podutil::uid(pod), Some(killed)).await
    } else {
        ctx.cache
            .fresh_after_stop(podutil::uid(pod), Some(killed), &rt)
            .await
    };
    // Held until this read is in, as in `sync_pod_inner`: with 100 pods deleted at once a relist
    // read each pod again, once more than the read here (5 CRI calls a read).
    drop(acting);
    // Without a read there is no final status, and nothing shows the containers stopped: the
    // termination is retried, as upstream's `SyncTerminatingPod` returns GetPodStatus's error.
    let rt = read?;
    let ids: Vec<String> = rt
        .containers
        .iter()
        .filter(|c| c.state == ContainerState::Running)
        .map(|c| c.id.clone())
        .collect();
    if !ids.is_empty() {
        // The worker retries the termination from a read that shows them running.
        return Err(RuntimeError::StillRunning { ids });
    }
    publish(ctx, state, pod, &rt).await;
    // Upstream `killPod`: once the containers are stopped, the pod cgroup keeps minimum shares.
    ctx.cm.reduce_cpu_limits(pod).await;
    // Nothing runs any more: a finished pod whose object stays (restartPolicy Never, Succeeded)
    // must not pin its tmpfs volumes until deletion, as upstream.
    tear_down_volumes(ctx, pod).await;
    state.volumes = PodVolumes::default();
    Ok(())
}

/// [`volumes::tear_down_volumes`] off the async threads. A failure is logged, not returned:
/// cleanup after the pod's deletion and housekeeping try again.
async fn tear_down_volumes(ctx: &SyncContext, pod: &Pod) {
    let dir = pod_dir(ctx, pod);
    // CSI volumes go through their driver first; while one fails nothing else is unmounted, so
    // the driver's unpublish and unstage still find their mounts on the retry.
    if let Err(e) = ctx.csi.tear_down_pod(&dir).await {
        warn!(pod = %podutil::describe(pod), error = %e, "cannot tear down CSI volumes of a stopped pod; retrying later");
        return;
    }
    let res = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || volumes::tear_down_volumes(&dir)
    })
    .await;
    match res {
        Ok(Ok(())) => debug!(pod = %podutil::describe(pod), "volumes torn down"),
        Ok(Err(e)) => {
            warn!(pod = %podutil::describe(pod), error = %e, "cannot tear down volumes of a stopped pod")
        }
        Err(e) => warn!(pod = %podutil::describe(pod), error = %e, "volume tear down panicked"),
    }
}

/// Upstream `SyncTerminatedPod` plus the container/sandbox GC of a deleted pod: remove containers,
/// sandboxes, logs and the pod directory.
///
/// `state.last_sync` is when termination stopped the pod's containers; the read made after that
/// (or any newer) shows everything to remove, as the worker created nothing since.
///
/// In upstream's order: once nothing runs (its volumes went when it stopped), the pod cgroup
/// goes and then the status manager may delete a deleted pod's object; the containers and
/// sandboxes are removed after that. Upstream leaves them to container GC in the background,
/// so `kubectl delete` (and a StatefulSet waiting to reuse the name) never waits for the
/// runtime's removal; here they go at once, but after the object, not before it.
pub async fn cleanup_pod(
    ctx: &SyncContext,
    state: &mut PodState,
    pod: &Arc<Pod>,
) -> Result<(), RuntimeError> {
    let id = crate::runtime::manager::RuntimePodRef::of(pod);
    // After a dropped start, what the runtime has now: a start it completed late shows.
    let since = state.last_sync.filter(|_| !state.start_dropped);
    let rt = stop_in_runtime(ctx, &id, Duration::from_secs(2), since).await?;
    if !state.reclaimed {
        remove_pod_cgroup(ctx, &id.uid, Some(pod)).await;
        if pod.metadata.deletion_timestamp.is_some() {
            ctx.status.terminated(pod.clone()).await;
        }
        // A retry of the removal below neither destroys the cgroup nor deletes the object again.
        state.reclaimed = true;
    }
    ctx.runtime.remove_pod(&id, &rt.status).await?;
    drop(rt);
    // Upstream `DeleteServiceAccountToken`: the pod's tokens leave the cache with it.
    ctx.tokens.forget_pod(podutil::uid(pod));
    ctx.timeline.forget(podutil::uid(pod));
    remove_pod_dir(ctx, &id).await;
    Ok(())
}

/// The pod's cgroup goes once its containers are gone (upstream destroys it in housekeeping;
/// here at once, and housekeeping catches what fails). A failure is logged, not returned.
/// `pod`: its spec when known, which names the one cgroup it has
/// ([`crate::cm::ContainerManager::destroy_pod`]).
pub async fn remove_pod_cgroup(ctx: &SyncContext, uid: &str, pod: Option<&Pod>) {
    if let Err(e) = ctx.cm.destroy_pod(uid, pod).await {
        warn!(uid = %uid, error = %e, "cannot remove pod cgroup; housekeeping retries");
    }
}

/// Stops whatever still runs with `grace` (a racing restart; a pod only the runtime knows) and
/// removes the pod's containers, sandboxes and logs, as a read newer than `since` shows them
/// (None: what the runtime has now).
pub async fn remove_from_runtime(
    ctx: &SyncContext,
    pod: &crate::runtime::manager::RuntimePodRef,
    grace: Duration,
    since: Option<tokio::time::Instant>,
) -> Result<(), RuntimeError> {
    let rt = stop_in_runtime(ctx, pod, grace, since).await?;
    ctx.runtime.remove_pod(pod, &rt.status).await
}

/// The pod read newer than `since` (None: now), with whatever still runs in it stopped with
/// `grace`, and the pod marked acting on until the result is dropped: while its containers and
/// sandboxes go one by one, a relist would find the pod changed and read it, for nothing (the
/// relist after the removal finds it gone without a read).
async fn stop_in_runtime(
    ctx: &SyncContext,
    pod: &crate::runtime::manager::RuntimePodRef,
    grace: Duration,
    since: Option<tokio::time::Instant>,
) -> Result<Stopped, RuntimeError> {
    let since = since.unwrap_or_else(tokio::time::Instant::now);
    let status = ctx.cache.fresh(&pod.uid, Some(since)).await?;
    let acting = ctx.runtime.acting.mark(&pod.uid);
    ctx.runtime.kill_pod(&status, grace).await?;
    Ok(Stopped {
        status,
        _acting: acting,
    })
}

/// A pod with nothing running any more, as [`stop_in_runtime`] read it.
struct Stopped {
    status: Arc<crate::container::PodRuntimeStatus>,
    _acting: crate::runtime::manager::MarkGuard,
}

/// Unmounts the pod's volumes and removes its directory. A failure is logged, not returned: the
/// pod is gone from the runtime, and housekeeping retries the orphaned directory, so a volume
/// never keeps a pod Terminating.
pub async fn remove_pod_dir(ctx: &SyncContext, pod: &crate::runtime::manager::RuntimePodRef) {
    let dir = ctx.root_dir.join("pods").join(&pod.uid);
    let who = format!("{}/{}", pod.namespace, pod.name);
    if let Err(e) = ctx.csi.tear_down_pod(&dir).await {
        warn!(pod = %who, error = %e, "cannot tear down CSI volumes; housekeeping retries");
        return;
    }
    let res = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || volumes::remove_pod_dir(&dir)
    })
    .await;
    match res {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            warn!(pod = %who, dir = %dir.display(), error = %e, "cannot clean up pod directory; housekeeping retries")
        }
        Err(e) => {
            warn!(pod = %who, dir = %dir.display(), error = %e, "pod directory clean up panicked")
        }
    }
}

/// The CRI runtime handler for the pod's sandbox (its RuntimeClass's), refused when the pod
/// asks for a user namespace (`hostUsers: false`) the handler cannot give (upstream
/// `NamespacesForPod` -> `GetOrCreateUserNamespaceMappings`, against the runtime's reported
/// handlers).
async fn sandbox_handler(ctx: &SyncContext, pod: &Pod) -> Result<String, RuntimeError> {
    use crate::runtime::runtime_class::check_host_users;
    let handler = ctx.runtime_classes.handler(pod).await?;
    let host_users = pod.spec.as_ref().and_then(|s| s.host_users);
    if host_users == Some(false) {
        let status = ctx
            .runtime
            .cri
            .status(rkubelet_cri::api::StatusRequest { verbose: false })
            .await
            .map_err(|source| RuntimeError::Cri {
                what: "Status".into(),
                source,
            })?;
        check_host_users(host_users, &handler, &status.runtime_handlers)
            .map_err(|what| RuntimeError::Config { what })?;
    }
    Ok(handler)
}
