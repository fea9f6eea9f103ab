//! One pod's worker task (upstream `podWorkerLoop`): takes the newest work for its pod and runs
//! the matching [`PodSyncer`] operation. "Latest wins" is a `watch` channel: a worker busy
//! syncing sees only the newest update when it looks again.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{PodSyncer, SyncOutcome, WorkerEvent};
use crate::runtime::manager::RuntimePodRef;

/// Upstream's pod worker retry period after a failed sync (`backOffPeriod`).
pub const ERROR_RETRY: Duration = Duration::from_secs(10);
/// First retry of a failed termination step; doubles up to [`ERROR_RETRY`].
const TERMINATE_RETRY: Duration = Duration::from_secs(1);

/// How a termination step ended.
pub(super) enum Step {
    Done,
    /// The kubelet is stopping: the worker leaves the pod as it is.
    Stopped,
    /// A shorter grace period arrived before the containers were stopped: run it again.
    Shortened,
}

/// Runs a termination step until it succeeds, backing off from 1 s to [`ERROR_RETRY`], and says
/// how it ended (see [`Step`]). The form with `$shortened` gives up on a failed attempt, or its
/// backoff, once that token is cancelled. (A macro, not a function: each attempt borrows the
/// worker's state anew.)
macro_rules! retry {
    ($cancel:expr, $step:expr) => {{
        let never = CancellationToken::new();
        retry!($cancel, &never, $step)
    }};
    ($cancel:expr, $shortened:expr, $step:expr) => {{
        let mut retry = crate::backoff::Exponential::new(TERMINATE_RETRY, ERROR_RETRY).retry();
        loop {
            match Box::pin($step).await {
                Ok(()) if $cancel.is_cancelled() => break Step::Stopped,
                Ok(()) => break Step::Done,
                Err(_) if $shortened.is_cancelled() => break Step::Shortened,
                Err(e) => {
                    let delay = retry.next_delay();
                    warn!(error = %e, retry_in = ?delay, "failed to terminate pod");
                    tokio::select! {
                        slept = crate::backoff::sleep(delay, $cancel) => if !slept {
                            break Step::Stopped;
                        },
                        _ = $shortened.cancelled() => break Step::Shortened,
                    }
                }
            }
        }
    }};
}

/// Runs `step` while watching for newer work: newer work that `interrupts` cancels `token`,
/// which the step watches where it waits and can stop (upstream's `UpdatePod` cancels the
/// running sync's context when a pod becomes terminating or its grace period gets shorter).
/// Also says whether newer work came meanwhile: `changed()` has seen it, so the worker must
/// take it at once rather than wait for the next change.
async fn watching<T>(
    rx: &mut watch::Receiver<Work>,
    token: &CancellationToken,
    interrupts: fn(&Work) -> bool,
    step: impl Future<Output = T>,
) -> (T, bool) {
    let mut step = std::pin::pin!(step);
    let (mut watching, mut newer) = (true, false);
    loop {
        tokio::select! {
            out = &mut step => return (out, newer),
            changed = rx.changed(), if watching => match changed {
                Ok(()) => {
                    newer = true;
                    if interrupts(&rx.borrow()) {
                        token.cancel();
                        watching = false;
                    }
                }
                // The table is gone: nothing more will come.
                Err(_) => watching = false,
            }
        }
    }
}

/// The newest thing a worker should do.
#[derive(Clone, Debug)]
pub(super) enum Work {
    Sync(Arc<Pod>),
    /// Stop the pod (grace override or the pod's own) and clean everything up.
    Terminate {
        pod: Arc<Pod>,
        grace: Option<Duration>,
        /// The kubelet fails the pod (an eviction).
        failure: Option<super::PodFailure>,
    },
    /// A pod only the runtime knows: stop and remove it, there is no spec to honour.
    TerminateRuntime {
        pod: RuntimePodRef,
        grace: Duration,
    },
}

/// The worker task: [`work`] until the kubelet stops. A stopping kubelet leaves each pod where
/// its worker is, even in the middle of an operation (a postStart hook that hangs, a stop with a
/// long grace period): upstream's kubelet exits with its goroutines running, and the next
/// kubelet adopts what the runtime has and takes the pod up from there. Waiting instead held the
/// kubelet's exit for the shutdown deadline, after which the operation was aborted anyway.
pub(super) async fn run<S: PodSyncer>(
    syncer: Arc<S>,
    rx: watch::Receiver<Work>,
    events: mpsc::UnboundedSender<WorkerEvent>,
    cancel: CancellationToken,
    uid: String,
    after: Option<tokio::time::Instant>,
) {
    let stopping = cancel.clone();
    tokio::select! {
        biased;
        _ = stopping.cancelled() => {}
        _ = work(syncer, rx, events, cancel, uid, after) => {}
    }
}

/// Each [`PodSyncer`] operation is boxed while it runs. Unboxed, the task held the largest of
/// them inline for the pod's whole life: about 11 KB per pod (heaptrack, 100 API pods), idle or
/// not. Boxed, an idle worker keeps only its own state, and an operation's memory lives as
/// long as the operation; one allocation per sync is nothing beside its CRI calls.
async fn work<S: PodSyncer>(
    syncer: Arc<S>,
    mut rx: watch::Receiver<Work>,
    events: mpsc::UnboundedSender<WorkerEvent>,
    cancel: CancellationToken,
    uid: String,
    after: Option<tokio::time::Instant>,
) {
    let mut state: Option<S::State> = None;
    // The pod reached a terminal phase and was stopped: it never syncs again.
    let mut done = false;
    loop {
        let work = rx.borrow_and_update().clone();
        match work {
            Work::TerminateRuntime { pod, grace } => {
                if !matches!(
                    retry!(&cancel, syncer.sync_terminating_runtime_pod(&pod, grace)),
                    Step::Done
                ) {
                    return;
                }
                info!("runtime pod stopped and removed");
                let _ = events.send(WorkerEvent::Finished { uid, pod: None });
                return;
            }
            Work::Terminate {
                pod,
                grace,
                failure,
            } => {
                let st = state.get_or_insert_with(|| syncer.new_state(&pod, after));
                let shortened = CancellationToken::new();
                let stopping = async {
                    retry!(
                        &cancel,
                        &shortened,
                        syncer.sync_terminating_pod(st, &pod, grace, failure.as_ref(), &shortened)
                    )
                };
                // A terminating worker is sent new work only when the grace period gets shorter
                // (`PodWorkers::terminate`).
                match watching(&mut rx, &shortened, |_| true, stopping).await.0 {
                    Step::Done => {}
                    Step::Stopped => return,
                    Step::Shortened => {
                        info!("grace period shortened; stopping the pod again with it");
                        continue;
                    }
                }
                let _ = events.send(WorkerEvent::Terminated { uid: uid.clone() });
                if !matches!(
                    retry!(&cancel, syncer.sync_terminated_pod(st, &pod)),
                    Step::Done
                ) {
                    return;
                }
                info!(target: v2!(), "pod terminated and cleaned up");
                let _ = events.send(WorkerEvent::Finished {
                    uid,
                    pod: Some(pod),
                });
                return;
            }
            Work::Sync(pod) if !done => {
                let st = state.get_or_insert_with(|| syncer.new_state(&pod, after));
                // A termination stops the sync where it waits (an image pull, a postStart hook):
                // a deleted pod does not wait for them to end.
                let terminating = CancellationToken::new();
                let sync = Box::pin(syncer.sync_pod(st, &pod, &terminating));
                let is_termination = |w: &Work| !matches!(w, Work::Sync(_));
                let (out, newer): (SyncOutcome, bool) =
                    watching(&mut rx, &terminating, is_termination, sync).await;
                if terminating.is_cancelled() {
                    info!("pod is terminating; its sync stopped");
                    continue;
                }
                if out.terminal {
                    info!("pod reached a terminal phase; stopping its sandbox");
                    let never = CancellationToken::new();
                    match Box::pin(syncer.sync_terminating_pod(st, &pod, None, None, &never)).await
                    {
                        Ok(()) => done = true,
                        Err(e) => {
                            warn!(error = %e, "failed to stop terminal pod; will retry");
                            let _ = events.send(WorkerEvent::Synced {
                                uid: uid.clone(),
                                retry_after: Some(ERROR_RETRY),
                            });
                        }
                    }
                } else {
                    let _ = events.send(WorkerEvent::Synced {
                        uid: uid.clone(),
                        retry_after: out.retry_after,
                    });
                }
                if newer {
                    continue;
                }
            }
            Work::Sync(_) => {}
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = rx.changed() => if r.is_err() { return },
        }
    }
}
