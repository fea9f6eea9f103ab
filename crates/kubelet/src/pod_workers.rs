//! Pod workers (upstream `pod_workers.go`): one task per pod UID, updates serialized, latest wins,
//! and the phases syncing -> terminating -> terminated.
//!
//! "Latest wins" is a `watch` channel: a worker busy syncing sees only the newest update when it
//! looks again. The SyncLoop owns `PodWorkers`; workers talk back through `WorkerEvent`s only.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::podutil;
use crate::sync::{self, PodState, SyncContext, ERROR_RETRY};

/// The newest thing a worker should do with its pod.
#[derive(Clone, Debug)]
struct Work {
    pod: Arc<Pod>,
    /// The pod is gone from its source (or was never wanted): stop and clean up.
    terminate: bool,
    grace: Option<Duration>,
}

/// What workers report to the SyncLoop.
#[derive(Debug)]
pub enum WorkerEvent {
    /// A sync finished; run the next one after `retry_after` (None: the regular resync period).
    Synced {
        uid: String,
        retry_after: Option<Duration>,
    },
    /// Terminated and cleaned up: the worker is gone and the pod's name is free again.
    Finished {
        uid: String,
        full_name: String,
        /// The pod as the worker last knew it (deletion timestamp included).
        pod: Arc<Pod>,
    },
}

struct Worker {
    tx: watch::Sender<Work>,
    full_name: String,
    terminating: bool,
}

/// The set of workers, owned by the SyncLoop.
pub struct PodWorkers {
    ctx: Arc<SyncContext>,
    workers: HashMap<String, Worker>,
    tasks: JoinSet<()>,
    events: mpsc::UnboundedSender<WorkerEvent>,
    cancel: CancellationToken,
}

impl PodWorkers {
    pub fn new(
        ctx: Arc<SyncContext>,
        events: mpsc::UnboundedSender<WorkerEvent>,
        cancel: CancellationToken,
    ) -> Self {
        PodWorkers {
            ctx,
            workers: HashMap::new(),
            tasks: JoinSet::new(),
            events,
            cancel,
        }
    }

    /// True while the full name is held by another UID's worker, or by this UID's own worker that is
    /// terminating (a manifest removed and re-added before the old pod was gone): the pod must wait
    /// for `Finished`, because a terminating worker never syncs again.
    pub fn name_busy(&self, full_name: &str, uid: &str) -> bool {
        self.workers
            .iter()
            .any(|(u, w)| w.full_name == full_name && (u != uid || w.terminating))
    }

    pub fn has(&self, uid: &str) -> bool {
        self.workers.contains_key(uid)
    }

    pub fn len(&self) -> usize {
        self.workers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Create or sync. Ignored for a pod already terminating (upstream: termination is final).
    pub fn sync(&mut self, pod: Arc<Pod>) {
        let uid = podutil::uid(&pod).to_string();
        if let Some(w) = self.workers.get(&uid) {
            if !w.terminating {
                w.tx.send_replace(Work {
                    pod,
                    terminate: false,
                    grace: None,
                });
            }
            return;
        }
        self.spawn(
            uid,
            Work {
                pod,
                terminate: false,
                grace: None,
            },
        );
    }

    /// Stop the pod and remove everything it had; spawns a worker for a pod only the runtime knows.
    pub fn terminate(&mut self, pod: Arc<Pod>, grace: Option<Duration>) {
        let uid = podutil::uid(&pod).to_string();
        let work = Work {
            pod,
            terminate: true,
            grace,
        };
        match self.workers.get_mut(&uid) {
            Some(w) => {
                if !w.terminating {
                    w.terminating = true;
                    w.tx.send_replace(work);
                }
            }
            None => {
                self.spawn(uid.clone(), work);
                if let Some(w) = self.workers.get_mut(&uid) {
                    w.terminating = true;
                }
            }
        }
    }

    /// The worker reported Finished: forget it.
    pub fn forget(&mut self, uid: &str) {
        self.workers.remove(uid);
    }

    /// Reaps finished tasks so the JoinSet does not grow; a panicked worker is logged.
    pub fn reap(&mut self) {
        while let Some(res) = self.tasks.try_join_next() {
            if let Err(e) = res {
                if e.is_panic() {
                    warn!(error = %e, "pod worker panicked");
                }
            }
        }
    }

    fn spawn(&mut self, uid: String, work: Work) {
        let full_name = podutil::full_name(&work.pod);
        let span =
            tracing::info_span!("pod_worker", pod = %podutil::describe(&work.pod), uid = %uid);
        let (tx, rx) = watch::channel(work);
        let ctx = self.ctx.clone();
        let events = self.events.clone();
        let cancel = self.cancel.child_token();
        self.tasks.spawn(
            run_worker(ctx, rx, events, cancel, uid.clone(), full_name.clone()).instrument(span),
        );
        self.workers.insert(
            uid,
            Worker {
                tx,
                full_name,
                terminating: false,
            },
        );
    }

    /// Waits for every worker to stop after cancellation (kubelet shutdown leaves pods running).
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

async fn run_worker(
    ctx: Arc<SyncContext>,
    mut rx: watch::Receiver<Work>,
    events: mpsc::UnboundedSender<WorkerEvent>,
    cancel: CancellationToken,
    uid: String,
    full_name: String,
) {
    let mut state = PodState::new();
    let mut done = false;
    loop {
        let work = rx.borrow_and_update().clone();
        if work.terminate {
            terminate_and_clean(&ctx, &mut state, &work, &cancel).await;
            if cancel.is_cancelled() {
                return;
            }
            ctx.status.remove(&uid).await;
            let _ = events.send(WorkerEvent::Finished {
                uid,
                full_name,
                pod: work.pod.clone(),
            });
            return;
        }
        if !done {
            let out = sync::sync_pod(&ctx, &mut state, &work.pod).await;
            if out.terminal {
                info!("pod reached a terminal phase; stopping its sandbox");
                if let Err(e) = sync::terminate_pod(&ctx, &mut state, &work.pod, None).await {
                    warn!(error = %e, "failed to stop terminal pod; will retry");
                    let _ = events.send(WorkerEvent::Synced {
                        uid: uid.clone(),
                        retry_after: Some(ERROR_RETRY),
                    });
                } else {
                    done = true;
                }
            } else {
                let _ = events.send(WorkerEvent::Synced {
                    uid: uid.clone(),
                    retry_after: out.retry_after,
                });
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = rx.changed() => if r.is_err() { return },
        }
    }
}

/// Terminating -> terminated, retrying runtime errors until it succeeds or the kubelet stops.
async fn terminate_and_clean(
    ctx: &SyncContext,
    state: &mut PodState,
    work: &Work,
    cancel: &CancellationToken,
) {
    let mut delay = Duration::from_secs(1);
    loop {
        let res = match sync::terminate_pod(ctx, state, &work.pod, work.grace).await {
            Ok(()) => sync::cleanup_pod(ctx, &work.pod).await,
            Err(e) => Err(e),
        };
        match res {
            Ok(()) => {
                info!("pod terminated and cleaned up");
                return;
            }
            Err(e) => {
                warn!(error = %e, retry_in = ?delay, "failed to terminate pod");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(ERROR_RETRY);
            }
        }
    }
}
