//! The fake runtime's event streams: every state change it makes (and every container a test
//! kills) is published as containerd publishes it (`/containers/create`, `/tasks/start`,
//! `/tasks/exit` followed by `/tasks/delete`, `/containers/delete`) and, when a test turns it on, as CRI
//! `GetContainerEvents` responses. Tests can lose events ([`FakeRuntime::mute_events`]) and
//! break every open stream ([`FakeRuntime::break_event_streams`], a containerd restart).

use tokio::sync::broadcast;
use tokio_stream::StreamExt;

use super::*;
use crate::events::{self, Envelope, EventStream, Topic};

/// One published change, in both forms a subscriber may ask for (None: CRI has no event for
/// it).
#[derive(Clone)]
pub(super) struct Published {
    envelope: Envelope,
    cri: Option<api::ContainerEventResponse>,
}

/// The event side of the fake's state.
pub(super) struct Events {
    tx: broadcast::Sender<Published>,
    /// Lost events: nothing is published while set.
    pub(super) muted: bool,
    /// GetContainerEvents is served (a containerd 1.7+ or CRI-O); off by default, as containerd 1.6.
    pub(super) cri: bool,
    /// containerd's events service is served (on by default, as containerd 1.6).
    pub(super) containerd: bool,
}

impl Default for Events {
    fn default() -> Self {
        Events {
            tx: broadcast::channel(1024).0,
            muted: false,
            cri: false,
            containerd: true,
        }
    }
}

impl State {
    /// Records the opening of a stream in the call log.
    fn record(&mut self, op: &'static str) {
        self.calls.push(Call {
            op,
            key: String::new(),
            detail: String::new(),
            at: tokio::time::Instant::now(),
        });
    }

    /// Publishes `topic` about container or sandbox `id` (call after the change is made).
    pub(super) fn emit(&mut self, topic: Topic, id: &str, now: i64) {
        if self.events.muted || self.events.tx.receiver_count() == 0 {
            return;
        }
        let sandbox_id = self
            .containers
            .get(id)
            .map(|c| c.sandbox_id.clone())
            .unwrap_or_else(|| id.to_string());
        let metadata = self
            .sandboxes
            .get(&sandbox_id)
            .and_then(|s| s.config.metadata.clone());
        let kind = match topic {
            Topic::ContainerCreate => api::ContainerEventType::ContainerCreatedEvent,
            Topic::TaskStart => api::ContainerEventType::ContainerStartedEvent,
            Topic::ContainerDelete => api::ContainerEventType::ContainerDeletedEvent,
            _ => api::ContainerEventType::ContainerStoppedEvent,
        };
        let published = Published {
            envelope: events::envelope(events::CRI_NAMESPACE, topic, id, "", now),
            cri: Some(api::ContainerEventResponse {
                container_id: id.to_string(),
                container_event_type: kind as i32,
                created_at: now,
                pod_sandbox_status: Some(api::PodSandboxStatus {
                    id: sandbox_id,
                    metadata,
                    ..Default::default()
                }),
                containers_statuses: Vec::new(),
            }),
        };
        // No receiver left is not an error: nobody listens.
        let _ = self.events.tx.send(published);
        // containerd's CRI plugin handles an exit by deleting the task (`/tasks/delete`), and
        // only then shows the container exited; CRI's own stream has the one stop event.
        if topic == Topic::TaskExit {
            let _ = self.events.tx.send(Published {
                envelope: events::envelope(events::CRI_NAMESPACE, Topic::TaskDelete, id, "", now),
                cri: None,
            });
        }
    }
}

fn stream<T: Send + 'static>(
    rx: broadcast::Receiver<Published>,
    pick: fn(Published) -> Option<T>,
) -> EventStream<T> {
    let s = tokio_stream::wrappers::BroadcastStream::new(rx).filter_map(move |r| match r {
        Ok(p) => pick(p).map(Ok),
        Err(e) => Some(Err(tonic::Status::data_loss(e.to_string()))),
    });
    // The sender is replaced by break_event_streams: the stream then ends with an error, as a
    // stream whose connection broke.
    let ended = tokio_stream::once(Err(tonic::Status::unavailable(
        "fake runtime: event stream closed",
    )));
    Box::pin(s.chain(ended))
}

impl FakeRuntime {
    /// Drops (true) or publishes (false) events from now on, as a runtime that loses some.
    pub fn mute_events(&self, muted: bool) {
        self.lock().events.muted = muted;
    }

    /// Serves CRI GetContainerEvents (false: Unimplemented, as containerd 1.6).
    pub fn serve_cri_events(&self, on: bool) {
        self.lock().events.cri = on;
    }

    /// Serves containerd's events service (false: Unimplemented, as a runtime that is not
    /// containerd).
    pub fn serve_containerd_events(&self, on: bool) {
        self.lock().events.containerd = on;
    }

    /// Ends every open event stream with an error, as a runtime restart does.
    pub fn break_event_streams(&self) {
        self.lock().events.tx = broadcast::channel(1024).0;
    }

    /// How many event streams are open now.
    pub fn event_subscribers(&self) -> usize {
        self.lock().events.tx.receiver_count()
    }

    /// Publishes `topic` about `id` by hand (a change the fake did not make itself).
    pub fn publish(&self, topic: Topic, id: &str) {
        let now = (self.inner.clock)();
        self.lock().emit(topic, id, now);
    }

    pub(super) fn containerd_events(&self) -> Reply<EventStream<Envelope>> {
        let mut st = self.lock();
        st.record("subscribe_containerd_events");
        if !st.events.containerd {
            return Box::pin(async {
                Err(tonic::Status::unimplemented(
                    "unknown service containerd.services.events.v1.Events",
                ))
            });
        }
        let rx = st.events.tx.subscribe();
        Box::pin(async move { Ok(stream(rx, |p| Some(p.envelope))) })
    }

    pub(super) fn cri_events(&self) -> Reply<EventStream<api::ContainerEventResponse>> {
        let mut st = self.lock();
        st.record("get_container_events");
        if !st.events.cri {
            return Box::pin(async {
                Err(tonic::Status::unimplemented(
                    "unknown method GetContainerEvents for service runtime.v1.RuntimeService",
                ))
            });
        }
        let rx = st.events.tx.subscribe();
        Box::pin(async move { Ok(stream(rx, |p| p.cri)) })
    }
}
