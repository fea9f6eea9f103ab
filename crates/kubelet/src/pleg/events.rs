//! PLEG's fast path: the runtime's event stream (upstream `pkg/kubelet/pleg/evented.go`).
//!
//! As upstream's current evented PLEG, events are hints only: each one makes PLEG re-read the
//! pod it concerns at once ([`Hint`]), while the generic relist goes on every second as the
//! source of truth and PLEG stays the runtime cache's only writer. (rkubelet keeps the 1 s relist
//! with CRI events too: its relist also publishes the runtime's pod listing that housekeeping,
//! eviction and the server read, which upstream keeps in a separate runtime cache.)
//!
//! Sources, tried in this order:
//! 1. CRI `GetContainerEvents` (containerd 1.7+, CRI-O): the event names the pod.
//! 2. containerd's events service (`Events/Subscribe` on the same socket), for containerd 1.6
//!    which answers the CRI call `Unimplemented`: the events of a task's end in the CRI
//!    namespace (`k8s.io`, [`rt::cri_filters`]); PLEG maps the container or sandbox ID to its pod.
//!
//! A runtime that answers `Unimplemented` to both has no fast path. Any other failure, or a
//! stream that ends (a runtime restart), reconnects with backoff (250 ms doubling to 5 s), for
//! ever: a pod is never staler than one relist meanwhile. `RKUBELET_PLEG_EVENTS=off` (an
//! rkubelet-specific environment variable) turns the fast path off, for benchmarks.

use std::time::{Duration, SystemTime};

use futures::StreamExt;
use rkubelet_cri::events::{self as rt, Topic};
use rkubelet_cri::{api, CriClient};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::backoff::{self, Exponential};

/// The environment variable that turns the fast path off (`off`, `false` or `0`).
pub const DISABLE_ENV: &str = "RKUBELET_PLEG_EVENTS";

/// True unless [`DISABLE_ENV`] says off.
pub fn enabled_by_env() -> bool {
    !matches!(
        std::env::var(DISABLE_ENV).as_deref(),
        Ok("off" | "false" | "0")
    )
}

/// What a container or sandbox should look like in a read made after its event; a read that
/// does not show it yet (the runtime's CRI view can trail its own event) is made again shortly.
///
/// Only exits are read (see [`expect_of_topic`]), so only an exit is ever expected; the enum
/// names what a read is checked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Exited (a container) or not ready (a sandbox), or gone.
    Exited,
}

/// Which stream an event came on (the metrics' `source` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Cri,
    Containerd,
}

impl Source {
    pub fn label(self) -> &'static str {
        match self {
            Source::Cri => "cri",
            Source::Containerd => "containerd",
        }
    }
}

/// One event reduced to what PLEG acts on: re-read the pod of `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint {
    /// The container or sandbox ID.
    pub id: String,
    /// The pod's UID when the event names it (CRI events do, containerd's do not).
    pub uid: Option<String>,
    pub expect: Expect,
}

/// What a containerd topic leads PLEG to expect (None: nothing to read for it).
///
/// Only what happens to a container on its own is read: its exit. Creations, starts and
/// removals are the kubelet's own doing, and the worker that did them reads its pod itself
/// (`PodCache::fresh`); reading them again for the event doubled the CRI calls at start-up and,
/// with containerd's CRI view trailing its events, the retries made 100 pods start 4 s later
/// and cost 0.8 s more of the kubelet's CPU (bench/api-pods.sh, N = 100). The relist still sees
/// anyone else's.
///
/// The exit is read on `/tasks/delete`, not `/tasks/exit`: containerd's CRI plugin handles an
/// exit by deleting the task and only then marks the container exited, so a read on
/// `/tasks/exit` cannot show it yet and was made again and again until it did (about 3 reads of
/// 5 CRI calls each per exit). An OOM kill is followed by its exit, read then.
pub fn expect_of_topic(t: Topic) -> Option<Expect> {
    match t {
        Topic::ContainerCreate
        | Topic::TaskStart
        | Topic::ContainerDelete
        | Topic::TaskExit
        | Topic::TaskOom => None,
        Topic::TaskDelete => Some(Expect::Exited),
    }
}

/// A CRI event as a hint (upstream ignores events without the sandbox's metadata too).
pub fn hint_of_cri(e: &api::ContainerEventResponse) -> Option<Hint> {
    let uid = e
        .pod_sandbox_status
        .as_ref()?
        .metadata
        .as_ref()?
        .uid
        .clone();
    // As for containerd's topics ([`expect_of_topic`]): only a stop is read.
    let expect = match api::ContainerEventType::try_from(e.container_event_type).ok()? {
        api::ContainerEventType::ContainerStoppedEvent => Expect::Exited,
        api::ContainerEventType::ContainerCreatedEvent
        | api::ContainerEventType::ContainerStartedEvent
        | api::ContainerEventType::ContainerDeletedEvent => return None,
    };
    Some(Hint {
        id: e.container_id.clone(),
        uid: Some(uid),
        expect,
    })
}

/// When the current stream was opened (None: no stream now). PLEG counts the relist's diffs as
/// missed by the events only for intervals a stream covered whole.
pub type Live = watch::Receiver<Option<Instant>>;

/// The task that keeps one event stream open and turns its events into hints.
pub struct EventWatcher {
    cri: CriClient,
    hints: mpsc::Sender<Hint>,
    live: watch::Sender<Option<Instant>>,
    enabled: bool,
}

impl EventWatcher {
    pub fn new(cri: CriClient, enabled: bool) -> (Self, mpsc::Receiver<Hint>, Live) {
        let (hints, rx) = mpsc::channel(1024);
        let (live, live_rx) = watch::channel(None);
        (
            EventWatcher {
                cri,
                hints,
                live,
                enabled,
            },
            rx,
            live_rx,
        )
    }

    pub async fn run(self, cancel: CancellationToken) {
        if !self.enabled {
            info!(
                env = DISABLE_ENV,
                "runtime events turned off: PLEG relists only"
            );
            return;
        }
        let mut retry =
            Exponential::new(Duration::from_millis(250), Duration::from_secs(5)).retry();
        loop {
            // Both in order on every (re)connection: the runtime may have been replaced by one
            // of another version meanwhile.
            let mut unimplemented = 0;
            for s in [Source::Cri, Source::Containerd] {
                self.live.send_replace(Some(Instant::now()));
                let outcome = tokio::select! {
                    _ = cancel.cancelled() => return,
                    o = self.stream(s) => o,
                };
                self.live.send_replace(None);
                match outcome {
                    Outcome::Unimplemented => {
                        debug!(
                            source = s.label(),
                            "runtime does not serve this event stream"
                        );
                        unimplemented += 1;
                        continue;
                    }
                    Outcome::Ended { events, error } => {
                        crate::metrics::get().evented_pleg_conn_err.inc();
                        warn!(source = s.label(), events, error = %error, "runtime event stream lost; reconnecting");
                        if events > 0 {
                            retry.reset();
                        }
                    }
                    Outcome::Closed => return,
                }
                break;
            }
            if unimplemented == 2 {
                info!("the runtime publishes no events PLEG can use: PLEG relists only");
                return;
            }
            if !backoff::sleep(retry.next_delay(), &cancel).await {
                return;
            }
        }
    }

    /// Opens `source`'s stream and forwards its events until it ends.
    async fn stream(&self, source: Source) -> Outcome {
        match source {
            Source::Cri => match self.cri.get_container_events().await {
                Ok(s) => {
                    self.forward(source, s, |e| {
                        let at = e.created_at;
                        let topic = api::ContainerEventType::try_from(e.container_event_type)
                            .map(|t| t.as_str_name())
                            .unwrap_or("UNKNOWN");
                        (hint_of_cri(&e), topic, at)
                    })
                    .await
                }
                Err(e) => Outcome::opening(e),
            },
            Source::Containerd => {
                match self
                    .cri
                    .subscribe_containerd_events(rt::cri_filters())
                    .await
                {
                    Ok(s) => {
                        self.forward(source, s, |env| match rt::decode(&env) {
                            Ok(Some(e)) => (
                                expect_of_topic(e.topic).map(|expect| Hint {
                                    id: e.id,
                                    uid: None,
                                    expect,
                                }),
                                e.topic.name(),
                                e.at_ns,
                            ),
                            Ok(None) => (None, "other", 0),
                            Err(err) => {
                                warn!(error = %err, "undecodable containerd event");
                                (None, "undecodable", 0)
                            }
                        })
                        .await
                    }
                    Err(e) => Outcome::opening(e),
                }
            }
        }
    }

    async fn forward<T>(
        &self,
        source: Source,
        mut stream: rt::EventStream<T>,
        read: impl Fn(T) -> (Option<Hint>, &'static str, i64),
    ) -> Outcome {
        let m = crate::metrics::get();
        // The stream is open once the runtime answered (a gRPC server answers with its first
        // event): upstream counts a success per stream established.
        m.evented_pleg_conn.inc();
        info!(source = source.label(), "runtime event stream open");
        let mut events = 0u64;
        loop {
            match stream.next().await {
                Some(Ok(item)) => {
                    events += 1;
                    let (hint, topic, at_ns) = read(item);
                    m.pleg_runtime_events
                        .with_label_values(&[source.label(), topic])
                        .inc();
                    if at_ns > 0 {
                        m.evented_pleg_conn_latency.observe(latency(at_ns));
                    }
                    if let Some(h) = hint {
                        if self.hints.send(h).await.is_err() {
                            return Outcome::Closed;
                        }
                    }
                }
                Some(Err(status)) => {
                    return Outcome::Ended {
                        events,
                        error: status.to_string(),
                    }
                }
                None => {
                    return Outcome::Ended {
                        events,
                        error: "stream closed by the runtime".into(),
                    }
                }
            }
        }
    }
}

/// Seconds from the event's time to now (upstream `updateLatencyMetric`); 0 when clocks disagree.
fn latency(at_ns: i64) -> f64 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);
    (now.saturating_sub(at_ns)).max(0) as f64 / 1e9
}

enum Outcome {
    Unimplemented,
    Ended {
        events: u64,
        error: String,
    },
    /// PLEG is gone.
    Closed,
}

impl Outcome {
    fn opening(e: rkubelet_cri::CriError) -> Self {
        if e.code() == Some(tonic::Code::Unimplemented) {
            Outcome::Unimplemented
        } else {
            Outcome::Ended {
                events: 0,
                error: e.to_string(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cri_events_become_hints() {
        let ev = |t: api::ContainerEventType, uid: Option<&str>| api::ContainerEventResponse {
            container_id: "c1".into(),
            container_event_type: t as i32,
            created_at: 1,
            pod_sandbox_status: uid.map(|u| api::PodSandboxStatus {
                metadata: Some(api::PodSandboxMetadata {
                    uid: u.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            containers_statuses: vec![],
        };
        use api::ContainerEventType as T;
        for (t, want) in [
            (T::ContainerCreatedEvent, None),
            (T::ContainerStartedEvent, None),
            (T::ContainerStoppedEvent, Some(Expect::Exited)),
            (T::ContainerDeletedEvent, None),
        ] {
            let h = hint_of_cri(&ev(t, Some("u1")));
            assert_eq!(
                h.as_ref()
                    .map(|h| (h.id.as_str(), h.uid.as_deref(), h.expect)),
                want.map(|w| ("c1", Some("u1"), w)),
                "{t:?}"
            );
        }
        // No sandbox metadata: ignored, as upstream.
        assert_eq!(hint_of_cri(&ev(T::ContainerStoppedEvent, None)), None);
    }

    #[test]
    fn topics_and_expectations() {
        for (t, want) in [
            (Topic::ContainerCreate, None),
            (Topic::TaskStart, None),
            (Topic::TaskExit, None),
            (Topic::ContainerDelete, None),
            (Topic::TaskOom, None),
            (Topic::TaskDelete, Some(Expect::Exited)),
        ] {
            assert_eq!(expect_of_topic(t), want, "{t:?}");
        }
    }
}
