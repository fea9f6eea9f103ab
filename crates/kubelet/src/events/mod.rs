//! The kubelet's event recorder (upstream client-go `tools/record`: `event.go` and
//! `events_cache.go`, wired up the way `cmd/kubelet` does).
//!
//! Events are written as core/v1 `Event`s, not `events.k8s.io/v1`: a 1.20 API server refuses the
//! latter to nodes, and every kubelet up to today still writes core/v1 through `tools/record`.
//!
//! Shape: callers hold a [`Recorder`], a cheap cloneable handle that builds the `Event` (stamped with
//! the wall time of the call, as upstream `makeEvent`), logs it, and `try_send`s it into a bounded
//! queue; a full queue drops the event, so recording never blocks a pod worker (upstream's
//! broadcaster is `DropIfChannelFull` with 1000 queued events). One [`EventRecorder`] task owns
//! everything else: the correlator caches, the per-object spam filter, the client-side QPS limit and
//! the API client.
//!
//! Upstream semantics kept (see [`Correlator`]):
//! - exact repeats (same source, object incl. fieldPath, type, reason, message) are counted: the
//!   existing event is patched with `count+1`, the new `lastTimestamp` and the message; a patch
//!   answered NotFound (the event expired, TTL 1 h) creates the event anew;
//! - similar events (same source, object without fieldPath, type, reason, differing only in
//!   message): when the 10th distinct message is seen within 10 minutes of the previous similar
//!   one, a single aggregate event "(combined from similar events): <msg>" is created and then
//!   counted like a repeat;
//! - a token bucket per source+object (burst 25, one token per 5 minutes) drops the rest;
//! - the kubelet's event client QPS limit (`eventRecordQPS`/`eventBurst`) is a global token bucket
//!   that delays writes (client-go's limiter waits rather than drops); qps 0 means unlimited.
//!
//! Deliberate differences are noted where they are made (retry cap, retrying 429/5xx, cache keys).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Client;
use kube::Resource;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

// ---------------------------------------------------------------------------------------------
// Tunables (upstream values).
// ---------------------------------------------------------------------------------------------

/// `source.component` and `reportingComponent` of every event.
pub const COMPONENT: &str = "kubelet";
/// Upstream `maxQueuedEvents`: events queued beyond this are dropped, never waited for.
pub const MAX_QUEUED_EVENTS: usize = 1000;
/// Upstream `maxLruCacheEntries`, for each of the three correlator caches.
pub const LRU_CACHE_ENTRIES: usize = 4096;
/// Upstream `defaultAggregateMaxEvents`: distinct messages that trigger aggregation.
pub const AGGREGATE_MAX_EVENTS: usize = 10;
/// Upstream `defaultAggregateIntervalInSeconds`: a similar event older than this starts afresh.
pub const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
/// Upstream `EventAggregatorByReasonMessageFunc` prefix.
pub const AGGREGATE_MESSAGE_PREFIX: &str = "(combined from similar events): ";
/// Upstream `defaultSpamBurst`: events a source may burst about one object.
pub const SPAM_BURST: u32 = 25;
/// Upstream `defaultSpamQPS`: one more event per object every 5 minutes, to cut the long tail of
/// things that are always unhealthy.
pub const SPAM_QPS: f64 = 1.0 / 300.0;
/// Upstream `maxTriesPerEvent` is 12 tries 10 s apart (~2 minutes per event). The queue is worked
/// serially, so during an API outage every queued event would hold the queue that long and fresh
/// events would be dropped behind stale ones; we give up after about a minute instead. Node
/// conditions and the Lease, not events, are what reports the node's health through an outage.
pub const MAX_TRIES_PER_EVENT: u32 = 6;
/// Upstream `defaultSleepDuration` between tries (the first sleep is randomized in [0, this)).
pub const RETRY_INTERVAL: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Building events.
// ---------------------------------------------------------------------------------------------

/// core/v1 event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn since_epoch(t: SystemTime) -> Duration {
    t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO)
}

/// `later - earlier`, zero if the wall clock went backwards (never negative, never a panic).
fn elapsed(earlier: SystemTime, later: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or(Duration::ZERO)
}

fn to_time(t: SystemTime) -> Time {
    let ns = since_epoch(t).as_nanos() as i128;
    Time(Timestamp::from_nanosecond(ns).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Upstream event name: `<object name>.<unix nanos in lowercase hex>`; unique per object as long as
/// two events are not made in the same nanosecond.
pub fn event_name(object_name: &str, t: SystemTime) -> String {
    format!("{}.{:x}", object_name, since_epoch(t).as_nanos() as i64)
}

/// The reference upstream `GetReference`/`GetPartialReference` builds for a pod (or one of its
/// containers when `field_path` is set, e.g. `spec.containers{main}`).
pub fn pod_reference(pod: &Pod, field_path: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path,
    }
}

/// The kubelet's `nodeRef`: kind Node, the node name also as UID (the kubelet does not wait for the
/// Node object to learn its real UID), no namespace and no apiVersion, exactly as upstream.
pub fn node_reference(node: &str) -> ObjectReference {
    ObjectReference {
        kind: Some("Node".into()),
        name: Some(node.to_string()),
        uid: Some(node.to_string()),
        ..Default::default()
    }
}

/// Upstream `makeEvent` + `generateEvent`: a first occurrence (count 1, first = last = `now`) in
/// the object's namespace, "default" for cluster-scoped objects. `eventTime` stays unset: core/v1
/// validation only accepts the legacy namespace rules for events without it.
pub fn make_event(
    reference: ObjectReference,
    host: &str,
    type_: EventType,
    reason: &str,
    message: String,
    now: SystemTime,
) -> Event {
    let namespace = reference
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_string());
    let t = to_time(now);
    Event {
        metadata: ObjectMeta {
            name: Some(event_name(
                reference.name.as_deref().unwrap_or_default(),
                now,
            )),
            namespace: Some(namespace),
            ..Default::default()
        },
        involved_object: reference,
        reason: Some(reason.to_string()),
        message: Some(message),
        first_timestamp: Some(t.clone()),
        last_timestamp: Some(t),
        count: Some(1),
        type_: Some(type_.as_str().to_string()),
        source: Some(EventSource {
            component: Some(COMPONENT.to_string()),
            host: Some(host.to_string()),
        }),
        reporting_component: Some(COMPONENT.to_string()),
        reporting_instance: Some(host.to_string()),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Writing to the API server.
// ---------------------------------------------------------------------------------------------

/// Why writing an event failed, sorted by whether trying again can help.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The API server answered and refused the event (invalid, forbidden, already exists,
    /// namespace terminating...): it would refuse it again.
    #[error("API server rejected the event: {0}")]
    Rejected(#[source] Box<kube::core::Status>),
    /// The request could not be built: it would fail the same way again.
    #[error("could not build the event request: {0}")]
    Request(#[source] kube::Error),
    /// Transport failure, throttling (429) or a server-side error (5xx): worth retrying.
    #[error("API server unavailable: {0}")]
    Unavailable(#[source] kube::Error),
    /// The recorder was cancelled while waiting.
    #[error("event recorder is shutting down")]
    Shutdown,
}

impl WriteError {
    /// Upstream retries everything but `StatusError`s and request-construction errors. client-go's
    /// REST client already retries 429 and 5xx answers internally; kube's does not, so those are
    /// retried here instead of abandoned.
    pub fn classify(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(status) if status.code == 429 || status.code >= 500 => {
                WriteError::Unavailable(kube::Error::Api(status))
            }
            kube::Error::Api(status) => WriteError::Rejected(status),
            e @ (kube::Error::BuildRequest(_) | kube::Error::HttpError(_)) => {
                WriteError::Request(e)
            }
            e => WriteError::Unavailable(e),
        }
    }

    pub fn retryable(&self) -> bool {
        matches!(self, WriteError::Unavailable(_))
    }

    /// Rejections upstream logs only at V(5): the event raced another writer, or its namespace is
    /// going away (events about pods being deleted with their namespace).
    fn expected(&self) -> bool {
        match self {
            WriteError::Rejected(st) => {
                st.is_already_exists()
                    || st.details.as_ref().is_some_and(|d| {
                        d.causes.iter().any(|c| c.reason == "NamespaceTerminating")
                    })
            }
            _ => false,
        }
    }
}

/// Where events go (upstream `EventSink`); a trait so the retry logic is testable without a server.
/// Each write answers with what the correlator keeps of the server's event, not the event.
trait EventSink {
    fn create(&self, event: &Event) -> impl Future<Output = Result<EventLog, kube::Error>> + Send;
    fn patch(
        &self,
        event: &Event,
        patch: &serde_json::Value,
    ) -> impl Future<Output = Result<EventLog, kube::Error>> + Send;
}

fn event_namespace(e: &Event) -> &str {
    e.metadata
        .namespace
        .as_deref()
        .filter(|ns| !ns.is_empty())
        .unwrap_or("default")
}

/// core/v1 events (upstream `EventSinkImpl` over `CoreV1().Events("")`). The requests are the ones
/// `Api<Event>::create` and `::patch` send; the answer is parsed as an [`EventLog`] only.
struct ApiSink {
    client: Client,
}

/// The request builder for events in `event`'s namespace (what `Api::<Event>::namespaced` holds).
fn events_of(event: &Event) -> kube::core::Request {
    kube::core::Request::new(Event::url_path(&(), Some(event_namespace(event))))
}

impl EventSink for ApiSink {
    async fn create(&self, event: &Event) -> Result<EventLog, kube::Error> {
        let body = serde_json::to_vec(event).map_err(kube::Error::SerdeError)?;
        let mut req = events_of(event)
            .create(&PostParams::default(), body)
            .map_err(kube::Error::BuildRequest)?;
        req.extensions_mut().insert("create");
        self.client.request(req).await
    }

    async fn patch(
        &self,
        event: &Event,
        patch: &serde_json::Value,
    ) -> Result<EventLog, kube::Error> {
        let mut req = events_of(event)
            .patch(
                s(&event.metadata.name),
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .map_err(kube::Error::BuildRequest)?;
        req.extensions_mut().insert("patch");
        self.client.request(req).await
    }
}

// ---------------------------------------------------------------------------------------------
// The handle.
// ---------------------------------------------------------------------------------------------

/// Cheap cloneable handle to record events. Never blocks and never fails: events that cannot be
/// queued are logged and dropped, as upstream.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// `None`: a recorder that only logs.
    tx: Option<mpsc::Sender<Box<Event>>>,
    /// The node name (`source.host`, `reportingInstance`, the node event's object).
    host: Arc<str>,
}

impl Recorder {
    /// A recorder that only logs (tests, code paths without an [`EventRecorder`]). Node events name
    /// no node; use `EventRecorder::new(None, ..)` for a logging-only recorder that knows its node.
    pub fn disabled() -> Recorder {
        Recorder {
            tx: None,
            host: Arc::from(""),
        }
    }

    /// Event about a pod (or a container of it when `field_path` is Some, e.g.
    /// `spec.containers{main}`, as upstream `kubecontainer.GenerateContainerRef`).
    pub fn pod_event(
        &self,
        pod: &Pod,
        field_path: Option<String>,
        type_: EventType,
        reason: &str,
        message: String,
    ) {
        let event = make_event(
            pod_reference(pod, field_path),
            &self.host,
            type_,
            reason,
            message,
            SystemTime::now(),
        );
        self.emit(type_, event);
    }

    /// Event about this node (involvedObject kind Node, name and uid the node name, as the
    /// upstream kubelet's `nodeRef`; written to the "default" namespace).
    pub fn node_event(&self, type_: EventType, reason: &str, message: String) {
        let event = make_event(
            node_reference(&self.host),
            &self.host,
            type_,
            reason,
            message,
            SystemTime::now(),
        );
        self.emit(type_, event);
    }

    /// Logs the event (upstream `StartStructuredLogging`; Warnings at info so they are seen
    /// without debug logging) and queues it without waiting.
    fn emit(&self, type_: EventType, event: Event) {
        log_event(type_, &event);
        let Some(tx) = &self.tx else { return };
        match tx.try_send(Box::new(event)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(ev)) => debug!(
                reason = s(&ev.reason),
                object = %object_ref(&ev.involved_object),
                "too many queued events, dropped event"
            ),
            Err(mpsc::error::TrySendError::Closed(ev)) => debug!(
                reason = s(&ev.reason),
                object = %object_ref(&ev.involved_object),
                "event recorder stopped, dropped event"
            ),
        }
    }
}

/// `kind namespace/name` (or `kind name`) for logs.
fn object_ref(o: &ObjectReference) -> String {
    match s(&o.namespace) {
        "" => format!("{} {}", s(&o.kind), s(&o.name)),
        ns => format!("{} {}/{}", s(&o.kind), ns, s(&o.name)),
    }
}

fn log_event(type_: EventType, e: &Event) {
    let o = &e.involved_object;
    let object = object_ref(o);
    let field_path = s(&o.field_path);
    let reason = s(&e.reason);
    let message = s(&e.message);
    match type_ {
        EventType::Warning => {
            info!(%object, field_path, r#type = %type_, reason, message, "event occurred")
        }
        EventType::Normal => {
            debug!(%object, field_path, r#type = %type_, reason, message, "event occurred")
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The task.
// ---------------------------------------------------------------------------------------------

/// Owns the event pipeline: queue, correlator, rate limits and client. Run it once with
/// [`EventRecorder::run`]; hand out the [`Recorder`].
pub struct EventRecorder {
    /// `None`: standalone, events are only logged (by the handle).
    client: Option<Client>,
    /// The node name, for logs.
    host: String,
    rx: mpsc::Receiver<Box<Event>>,
    correlator: Correlator,
    /// The event client's QPS limit; `None` when unlimited.
    limiter: Option<TokenBucket>,
    started: Instant,
    max_tries: u32,
    retry_interval: Duration,
}

impl EventRecorder {
    /// `qps`/`burst` are the kubelet's `eventRecordQPS`/`eventBurst`; `qps` 0 (or negative) means
    /// no client-side limit, as the kubelet config documents.
    pub fn new(client: Option<Client>, host: String, qps: f32, burst: u32) -> (Self, Recorder) {
        let (tx, rx) = mpsc::channel(MAX_QUEUED_EVENTS);
        let qps = f64::from(qps);
        let limiter =
            (qps.is_finite() && qps > 0.0).then(|| TokenBucket::new(qps, burst, Duration::ZERO));
        let recorder = Recorder {
            tx: Some(tx),
            host: Arc::from(host.as_str()),
        };
        (
            EventRecorder {
                client,
                host,
                rx,
                correlator: Correlator::default(),
                limiter,
                started: Instant::now(),
                max_tries: MAX_TRIES_PER_EVENT,
                retry_interval: RETRY_INTERVAL,
            },
            recorder,
        )
    }

    /// Writes queued events until cancelled or until every [`Recorder`] is dropped. Events still
    /// queued at cancellation are dropped (they were already logged).
    pub async fn run(mut self, cancel: CancellationToken) {
        let sink = self.client.take().map(|client| ApiSink { client });
        if sink.is_none() {
            debug!(node = %self.host, "event recorder standalone: events are only logged");
        }
        self.run_with(sink, cancel).await
    }

    async fn run_with<S: EventSink>(mut self, sink: Option<S>, cancel: CancellationToken) {
        loop {
            let event = tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                ev = self.rx.recv() => match ev {
                    Some(ev) => *ev,
                    None => return,
                },
            };
            let Some(sink) = &sink else { continue };
            let Some(correlated) = self.correlator.correlate(event, SystemTime::now()) else {
                debug!("event dropped by the per-object spam filter");
                continue;
            };
            self.record(sink, correlated, &cancel).await;
        }
    }

    /// Upstream `recordToSink`: tries until written, refused, or out of tries.
    async fn record<S: EventSink>(
        &mut self,
        sink: &S,
        mut c: Correlated,
        cancel: &CancellationToken,
    ) {
        let mut tries = 0;
        loop {
            let err = match self.write(sink, &mut c, cancel).await {
                Ok(server) => {
                    self.correlator.update_state(&c.key, server);
                    return;
                }
                Err(e) => e,
            };
            let object = object_ref(&c.event.involved_object);
            let reason = s(&c.event.reason);
            if matches!(err, WriteError::Shutdown) {
                debug!(%object, reason, "event recorder shutting down, event not written");
                return;
            }
            if !err.retryable() {
                if err.expected() {
                    debug!(%object, reason, error = %err, "server rejected event (will not retry)");
                } else {
                    warn!(%object, reason, error = %err, "server rejected event (will not retry)");
                }
                return;
            }
            tries += 1;
            if tries >= self.max_tries {
                warn!(%object, reason, error = %err, tries, "unable to write event (retry limit exceeded)");
                return;
            }
            // Randomize the first sleep so that kubelets do not all retry in step after an outage.
            let delay = if tries == 1 {
                self.retry_interval.mul_f64(fastrand::f64())
            } else {
                self.retry_interval
            };
            warn!(%object, reason, error = %err, retry_in = ?delay, "unable to write event (may retry)");
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Upstream `recordEvent`: patch a repeat (creating it anew if it is gone), else create.
    async fn write<S: EventSink>(
        &mut self,
        sink: &S,
        c: &mut Correlated,
        cancel: &CancellationToken,
    ) -> Result<EventLog, WriteError> {
        if let Write::Patch(patch) = &c.write {
            self.throttle(cancel).await?;
            match sink.patch(&c.event, patch).await {
                Ok(server) => return Ok(server),
                // Expired (events live an hour) or deleted: create it again with the full count.
                Err(kube::Error::Api(st)) if st.is_not_found() => {}
                Err(e) => return Err(WriteError::classify(e)),
            }
        }
        c.event.metadata.resource_version = None;
        self.throttle(cancel).await?;
        sink.create(&c.event).await.map_err(WriteError::classify)
    }

    /// Waits for the client-side QPS limit (every request takes a token, as client-go's limiter).
    async fn throttle(&mut self, cancel: &CancellationToken) -> Result<(), WriteError> {
        let Some(bucket) = self.limiter.as_mut() else {
            return Ok(());
        };
        let wait = bucket.reserve(self.started.elapsed());
        if wait.is_zero() {
            return Ok(());
        }
        tokio::select! {
            _ = cancel.cancelled() => Err(WriteError::Shutdown),
            _ = tokio::time::sleep(wait) => Ok(()),
        }
    }
}

mod correlator;
mod reasons;
#[cfg(test)]
mod tests;

pub use correlator::*;
pub use reasons::*;
