//! The task that owns every pod's timeline, and the cheap handle the SyncLoop, the pod workers
//! and the server reach it through. Recording is a send on an unbounded channel (no await on the
//! pod's critical path); a timeline closes at Ready, where its stages go to the histogram and the
//! summary line to the log; it is forgotten when the pod is cleaned up.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::{At, Mark, PodTimeline};
use crate::podutil;

enum Msg {
    Mark {
        uid: String,
        namespace: String,
        name: String,
        mark: Mark,
        at: At,
    },
    Forget(String),
    Get {
        namespace: String,
        name: String,
        reply: oneshot::Sender<Option<PodTimeline>>,
    },
}

/// Cheap to clone; a handle whose task is gone records nothing and finds nothing.
#[derive(Clone)]
pub struct TimelineHandle {
    tx: mpsc::UnboundedSender<Msg>,
}

impl std::fmt::Debug for TimelineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TimelineHandle")
    }
}

impl TimelineHandle {
    /// A new store: run the task, hand out the handle.
    pub fn new() -> (TimelineTask, TimelineHandle) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            TimelineTask {
                rx,
                pods: HashMap::new(),
            },
            TimelineHandle { tx },
        )
    }

    /// `pod` reached `mark` now.
    pub fn mark(&self, pod: &Pod, mark: Mark) {
        let _ = self.tx.send(Msg::Mark {
            uid: podutil::uid(pod).to_string(),
            namespace: podutil::namespace(pod).to_string(),
            name: podutil::name(pod).to_string(),
            mark,
            at: At::now(),
        });
    }

    /// The pod is gone: its timeline goes too.
    pub fn forget(&self, uid: &str) {
        let _ = self.tx.send(Msg::Forget(uid.to_string()));
    }

    /// The timeline of the pod with this name (the most recently seen, if several UIDs had it).
    pub async fn get(&self, namespace: &str, name: &str) -> Option<PodTimeline> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::Get {
                namespace: namespace.into(),
                name: name.into(),
                reply,
            })
            .ok()?;
        rx.await.ok().flatten()
    }
}

pub struct TimelineTask {
    rx: mpsc::UnboundedReceiver<Msg>,
    pods: HashMap<String, PodTimeline>,
}

impl TimelineTask {
    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            let msg = tokio::select! {
                _ = cancel.cancelled() => return,
                m = self.rx.recv() => match m {
                    Some(m) => m,
                    None => return,
                },
            };
            self.handle(msg);
        }
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Mark {
                uid,
                namespace,
                name,
                mark,
                at,
            } => {
                let t = self
                    .pods
                    .entry(uid)
                    .or_insert_with_key(|uid| PodTimeline::new(uid, &namespace, &name));
                if t.record(mark, at) && t.complete() {
                    closed(t);
                }
            }
            Msg::Forget(uid) => {
                self.pods.remove(&uid);
            }
            Msg::Get {
                namespace,
                name,
                reply,
            } => {
                let found = self
                    .pods
                    .values()
                    .filter(|t| t.namespace == namespace && t.name == name)
                    .max_by_key(|t| t.marks.first().map(|(_, a)| a.mono))
                    .cloned();
                let _ = reply.send(found);
            }
        }
    }
}

/// The pod reached Ready: its stages to the histogram and its summary to the log (klog V(2), see
/// the `::v2` target in rkubelet's log filter), for a pod that started here.
fn closed(t: &PodTimeline) {
    if !t.started_here() {
        return;
    }
    let m = crate::metrics::get();
    for (mark, d) in t.stages() {
        if let Some(stage) = mark.stage() {
            m.pod_start_stage_duration
                .with_label_values(&[stage])
                .observe(d.as_secs_f64());
        }
    }
    info!(
        target: v2!(),
        pod = %format_args!("{}/{}", t.namespace, t.name),
        uid = %t.uid,
        total = %format_args!("{:.3}s", t.total().as_secs_f64()),
        stages = %t.summary(),
        "pod start-up timeline"
    );
}
