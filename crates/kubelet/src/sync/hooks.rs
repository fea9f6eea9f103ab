//! Container lifecycle hooks (upstream `pkg/kubelet/lifecycle/handlers.go` and the hook parts of
//! `kuberuntime_container.go`): postStart right after StartContainer, preStop before
//! StopContainer, counted against the grace period.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{field_path, SyncContext};
use crate::events::{self, EventType};
use crate::podutil::{self, ContainerKind};
use crate::prober::handlers::{exec_probe, expand_command};
use crate::prober::http::{HttpProber, HttpTarget};
use crate::prober::{is_restartable_init, Outcome};
use crate::runtime::{ContainerState, PodRuntimeStatus, RuntimeError};

/// Upstream `minimumGracePeriodInSeconds`: what a container gets after a long preStop hook.
const MIN_GRACE: Duration = Duration::from_secs(2);
/// A postStart hook has no timeout of its own upstream; the runtime request timeout bounds exec.
const POST_START_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs one hook handler; `Err` carries upstream's event message.
async fn run_handler(
    ctx: &SyncContext,
    pod: &Pod,
    c: &Container,
    container_id: &str,
    h: &LifecycleHandler,
    pod_ip: Option<&str>,
    timeout: Duration,
) -> Result<(), String> {
    let who = podutil::describe(pod);
    if let Some(exec) = &h.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        let expanded = expand_command(&cmd, c.env.as_deref().unwrap_or_default());
        return match exec_probe(&ctx.runtime.cri, container_id, expanded, timeout).await {
            Ok((Outcome::Success, _)) => Ok(()),
            Ok((_, out)) => Err(format!(
                "Exec lifecycle hook ({cmd:?}) for Container {:?} in Pod {who:?} failed - error: command exited non-zero or timed out, message: {out:?}",
                c.name
            )),
            Err(e) => Err(format!(
                "Exec lifecycle hook ({cmd:?}) for Container {:?} in Pod {who:?} failed - error: {e}, message: \"\"",
                c.name
            )),
        };
    }
    if let Some(get) = &h.http_get {
        let path = get.path.clone().unwrap_or_default();
        let fail = |e: String| {
            format!(
                "HTTP lifecycle hook ({path}) for Container {:?} in Pod {who:?} failed - error: {e}",
                c.name
            )
        };
        let target = HttpTarget::from_action(get, c, pod_ip).map_err(|e| fail(e.to_string()))?;
        return match HttpProber::new().probe(&target, timeout).await {
            Ok((Outcome::Success | Outcome::Warning, _)) => Ok(()),
            Ok((_, out)) => Err(fail(out)),
            Err(e) => Err(fail(e.to_string())),
        };
    }
    if let Some(sleep) = &h.sleep {
        let d = Duration::from_secs(sleep.seconds.max(0) as u64);
        tokio::time::sleep(d.min(timeout)).await;
        return Ok(());
    }
    Err(format!(
        "Lifecycle hook for Container {:?} in Pod {who:?} has no handler (exec, httpGet or sleep)",
        c.name
    ))
}

/// The spec of a container that may have hooks (ephemeral containers may not).
fn spec_of<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    podutil::containers(pod)
        .iter()
        .chain(podutil::init_containers(pod))
        .find(|c| c.name == name)
}

/// Upstream: a failed postStart hook is a Warning event, and the container is killed so that it
/// restarts per policy. `Err` is the message the container waits with (`PostStartHookError`).
pub async fn post_start(
    ctx: &SyncContext,
    pod: &Pod,
    c: &Container,
    kind: ContainerKind,
    container_id: &str,
    pod_ip: &str,
) -> Result<(), String> {
    let Some(h) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) else {
        return Ok(());
    };
    let ip = (!pod_ip.is_empty()).then_some(pod_ip);
    let Err(msg) = run_handler(ctx, pod, c, container_id, h, ip, POST_START_TIMEOUT).await else {
        return Ok(());
    };
    let fp = Some(kind.field_path(&c.name));
    warn!(pod = %podutil::describe(pod), container = %c.name, "{msg}");
    ctx.recorder.pod_event(
        pod,
        fp.clone(),
        EventType::Warning,
        events::FAILED_POST_START_HOOK,
        msg.clone(),
    );
    ctx.recorder.pod_event(
        pod,
        fp,
        EventType::Normal,
        events::KILLING_CONTAINER,
        "FailedPostStartHook".into(),
    );
    if let Err(e) = ctx
        .runtime
        .stop_container(container_id, super::grace(pod))
        .await
    {
        warn!(pod = %podutil::describe(pod), container = %c.name, error = %e, "failed to kill container after its postStart hook failed");
    }
    Err(msg)
}

/// Upstream `terminationOrdering`: while a pod stops, a sidecar stops only after every regular
/// container and every sidecar declared after it have stopped, so it serves them to the end.
/// Containers outside the set being stopped do not hold anyone back.
struct TerminationOrdering {
    /// For each container being stopped, the names it waits for.
    prerequisites: HashMap<String, Vec<String>>,
    stopped: watch::Sender<HashSet<String>>,
}

impl TerminationOrdering {
    fn new(pod: &Pod, stopping: &[&str]) -> Self {
        let stopping: HashSet<&str> = stopping.iter().copied().collect();
        let regular: Vec<String> = podutil::containers(pod)
            .iter()
            .filter(|c| stopping.contains(c.name.as_str()))
            .map(|c| c.name.clone())
            .collect();
        let sidecars: Vec<&Container> = podutil::init_containers(pod)
            .iter()
            .filter(|c| is_restartable_init(c) && stopping.contains(c.name.as_str()))
            .collect();
        let mut prerequisites = HashMap::new();
        for (i, c) in sidecars.iter().enumerate() {
            let mut wait = regular.clone();
            wait.extend(sidecars[i + 1..].iter().map(|s| s.name.clone()));
            prerequisites.insert(c.name.clone(), wait);
        }
        TerminationOrdering {
            prerequisites,
            stopped: watch::Sender::new(HashSet::new()),
        }
    }

    /// Waits until `name` may stop, at most `limit`; returns how long it waited.
    async fn wait_for_turn(&self, name: &str, limit: Duration) -> Duration {
        let started = Instant::now();
        let Some(wait) = self.prerequisites.get(name).filter(|w| !w.is_empty()) else {
            return Duration::ZERO;
        };
        let mut rx = self.stopped.subscribe();
        let turn = rx.wait_for(|done| wait.iter().all(|w| done.contains(w)));
        // Err means the sender is gone, which cannot happen while `self` lives.
        let _ = tokio::time::timeout(limit, turn).await;
        started.elapsed()
    }

    fn stopped(&self, name: &str) {
        self.stopped.send_modify(|done| {
            done.insert(name.to_string());
        });
    }
}

/// Upstream `killContainer`: the preStop hook first (bounded by the grace period, which it uses
/// up), then StopContainer with what is left, at least 2 s.
pub async fn stop_container(
    ctx: &SyncContext,
    pod: &Pod,
    container_id: &str,
    name: &str,
    grace: Duration,
    pod_ip: Option<&str>,
) -> Result<(), RuntimeError> {
    stop_container_ordered(ctx, pod, container_id, name, grace, pod_ip, None).await
}

async fn stop_container_ordered(
    ctx: &SyncContext,
    pod: &Pod,
    container_id: &str,
    name: &str,
    grace: Duration,
    pod_ip: Option<&str>,
    ordering: Option<&TerminationOrdering>,
) -> Result<(), RuntimeError> {
    let mut grace = grace;
    let spec = spec_of(pod, name);
    let hook = spec.and_then(|c| Some((c, c.lifecycle.as_ref()?.pre_stop.as_ref()?)));
    if let Some((c, h)) = hook.filter(|_| !grace.is_zero()) {
        let started = Instant::now();
        info!(pod = %podutil::describe(pod), container = %name, grace = ?grace, "running preStop hook");
        let run = run_handler(ctx, pod, c, container_id, h, pod_ip, grace);
        match tokio::time::timeout(grace, run).await {
            Ok(Ok(())) => {}
            Ok(Err(msg)) => ctx.recorder.pod_event(
                pod,
                Some(field_path(pod, name)),
                EventType::Warning,
                events::FAILED_PRE_STOP_HOOK,
                msg,
            ),
            Err(_) => {
                info!(pod = %podutil::describe(pod), container = %name, "preStop hook did not finish within the grace period")
            }
        }
        grace = grace.saturating_sub(started.elapsed());
    }
    if let Some(o) = ordering.filter(|_| !grace.is_zero()) {
        grace = grace.saturating_sub(o.wait_for_turn(name, grace).await);
    }
    let res = ctx
        .runtime
        .stop_container(container_id, grace.max(MIN_GRACE))
        .await;
    if let Some(o) = ordering {
        o.stopped(name);
    }
    res
}

/// Upstream `killPodWithSyncResult`: every running container through [`stop_container`] at once
/// (hooks in parallel; sidecars wait for their turn), then the sandbox.
///
/// `shortened` ends the wait for the containers' stops (a shorter grace period arrived, see
/// [`super::terminate_pod`]): the sandbox is then left for the stop that follows.
pub async fn kill_pod(
    ctx: &SyncContext,
    pod: &Pod,
    rt: &PodRuntimeStatus,
    grace: Duration,
    shortened: &CancellationToken,
) -> Result<(), RuntimeError> {
    let ip = rt.pod_ips().into_iter().next();
    let running: Vec<_> = rt
        .containers
        .iter()
        .filter(|c| c.state == ContainerState::Running)
        .collect();
    let names: Vec<&str> = running.iter().map(|c| c.name.as_str()).collect();
    let ordering = TerminationOrdering::new(pod, &names);
    let stops = running.iter().map(|c| {
        stop_container_ordered(
            ctx,
            pod,
            &c.id,
            &c.name,
            grace,
            ip.as_deref(),
            Some(&ordering),
        )
    });
    let first_err = tokio::select! {
        biased;
        stopped = join_all(stops) => stopped.into_iter().find_map(Result::err),
        _ = shortened.cancelled() => return Err(RuntimeError::GraceShortened),
    };
    // Stops what is left (created or unknown containers, the sandbox), without a second
    // StopContainer for those stopped above.
    let rest = PodRuntimeStatus {
        containers: rt
            .containers
            .iter()
            .filter(|c| c.state != ContainerState::Running)
            .cloned()
            .collect(),
        ..rt.clone()
    };
    ctx.runtime.kill_pod(&rest, grace).await?;
    first_err.map_or(Ok(()), Err)
}
