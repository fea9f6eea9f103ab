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
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

// ---------------------------------------------------------------------------------------------
// Reasons (upstream `pkg/kubelet/events/event.go`; names are the upstream identifiers).
// ---------------------------------------------------------------------------------------------

// Container event reasons.
pub const CREATED_CONTAINER: &str = "Created";
pub const STARTED_CONTAINER: &str = "Started";
pub const FAILED_TO_CREATE_CONTAINER: &str = "Failed";
pub const FAILED_TO_START_CONTAINER: &str = "Failed";
pub const KILLING_CONTAINER: &str = "Killing";
pub const PREEMPT_CONTAINER: &str = "Preempting";
pub const BACK_OFF_START_CONTAINER: &str = "BackOff";
pub const EXCEEDED_GRACE_PERIOD: &str = "ExceededGracePeriod";

// Pod event reasons.
pub const FAILED_TO_KILL_POD: &str = "FailedKillPod";
pub const FAILED_TO_CREATE_POD_CONTAINER: &str = "FailedCreatePodContainer";
pub const FAILED_TO_MAKE_POD_DATA_DIRECTORIES: &str = "Failed";
pub const NETWORK_NOT_READY: &str = "NetworkNotReady";

// Image event reasons.
pub const PULLING_IMAGE: &str = "Pulling";
pub const PULLED_IMAGE: &str = "Pulled";
pub const FAILED_TO_PULL_IMAGE: &str = "Failed";
pub const FAILED_TO_INSPECT_IMAGE: &str = "InspectFailed";
pub const ERR_IMAGE_NEVER_PULL_POLICY: &str = "ErrImageNeverPull";
pub const BACK_OFF_PULL_IMAGE: &str = "BackOff";

// Kubelet (node and pod sandbox) event reasons.
pub const NODE_READY: &str = "NodeReady";
pub const NODE_NOT_READY: &str = "NodeNotReady";
pub const NODE_SCHEDULABLE: &str = "NodeSchedulable";
pub const NODE_NOT_SCHEDULABLE: &str = "NodeNotSchedulable";
/// Upstream message: "Starting kubelet.".
pub const STARTING_KUBELET: &str = "Starting";
pub const KUBELET_SETUP_FAILED: &str = "KubeletSetupFailed";
pub const FAILED_MOUNT_VOLUME: &str = "FailedMount";
/// Warning; upstream message: "Node <node> has been rebooted, boot id: <id>".
pub const NODE_REBOOTED: &str = "Rebooted";
pub const CONTAINER_GC_FAILED: &str = "ContainerGCFailed";
pub const IMAGE_GC_FAILED: &str = "ImageGCFailed";
pub const FAILED_NODE_ALLOCATABLE_ENFORCEMENT: &str = "FailedNodeAllocatableEnforcement";
pub const SUCCESSFUL_NODE_ALLOCATABLE_ENFORCEMENT: &str = "NodeAllocatableEnforced";
pub const SANDBOX_CHANGED: &str = "SandboxChanged";
pub const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
pub const FAILED_STATUS_POD_SANDBOX: &str = "FailedPodSandBoxStatus";

// Node condition transitions. These are not in `events/event.go`: upstream
// `pkg/kubelet/nodestatus/setters.go` records them as literals, as Normal events with the message
// "Node <node> status is now: <reason>". ("RegisteredNode" is not a kubelet event: the
// node-lifecycle controller in kube-controller-manager emits it, so it is not exported here.)
pub const NODE_HAS_SUFFICIENT_MEMORY: &str = "NodeHasSufficientMemory";
pub const NODE_HAS_INSUFFICIENT_MEMORY: &str = "NodeHasInsufficientMemory";
pub const NODE_HAS_NO_DISK_PRESSURE: &str = "NodeHasNoDiskPressure";
pub const NODE_HAS_DISK_PRESSURE: &str = "NodeHasDiskPressure";
pub const NODE_HAS_SUFFICIENT_PID: &str = "NodeHasSufficientPID";
pub const NODE_HAS_INSUFFICIENT_PID: &str = "NodeHasInsufficientPID";

// Image manager event reasons.
pub const INVALID_DISK_CAPACITY: &str = "InvalidDiskCapacity";
pub const FREE_DISK_SPACE_FAILED: &str = "FreeDiskSpaceFailed";

// Probe event reasons.
pub const CONTAINER_UNHEALTHY: &str = "Unhealthy";
pub const CONTAINER_PROBE_WARNING: &str = "ProbeWarning";

// Pod worker event reasons.
pub const FAILED_SYNC: &str = "FailedSync";

// Config event reasons.
pub const FAILED_VALIDATION: &str = "FailedValidation";

// Lifecycle hook event reasons.
pub const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
pub const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";

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
// Bounded LRU map (upstream uses groupcache's lru with 4096 entries).
// ---------------------------------------------------------------------------------------------

/// String-keyed LRU: a map plus a recency index. Owned by the recorder task, so no locking.
#[derive(Debug)]
struct Lru<V> {
    cap: usize,
    tick: u64,
    map: HashMap<String, (u64, V)>,
    order: BTreeMap<u64, String>,
}

impl<V> Lru<V> {
    fn new(cap: usize) -> Self {
        Lru {
            cap: cap.max(1),
            tick: 0,
            map: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }

    /// Looks `key` up and marks it most recently used.
    fn get(&mut self, key: &str) -> Option<&V> {
        let entry = self.map.get_mut(key)?;
        self.order.remove(&entry.0);
        self.tick += 1;
        entry.0 = self.tick;
        self.order.insert(self.tick, key.to_string());
        Some(&entry.1)
    }

    fn remove(&mut self, key: &str) -> Option<V> {
        let (tick, value) = self.map.remove(key)?;
        self.order.remove(&tick);
        Some(value)
    }

    /// Inserts or replaces `key` as most recently used, evicting the least recently used entries
    /// beyond the capacity.
    fn insert(&mut self, key: String, value: V) {
        self.remove(&key);
        while self.map.len() >= self.cap {
            match self.order.pop_first() {
                Some((_, oldest)) => {
                    self.map.remove(&oldest);
                }
                None => break,
            }
        }
        self.tick += 1;
        self.order.insert(self.tick, key.clone());
        self.map.insert(key, (self.tick, value));
    }
}

// ---------------------------------------------------------------------------------------------
// Token bucket (upstream `flowcontrol.NewTokenBucketRateLimiter`, i.e. `golang.org/x/time/rate`).
// ---------------------------------------------------------------------------------------------

/// A token bucket on an explicit clock (`now` is any monotone-ish offset, e.g. time since the Unix
/// epoch or since start), so the limiting logic is pure and testable. Starts full, as upstream.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Duration,
}

/// Float slack so that a refill of exactly one token (e.g. after 300 s at 1/300 qps) counts.
const TOKEN_EPSILON: f64 = 1e-9;

impl TokenBucket {
    /// `qps` must be positive (callers model "unlimited" as no bucket). A zero `burst` would never
    /// admit anything, so it is raised to 1.
    pub fn new(qps: f64, burst: u32, now: Duration) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps,
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn refill(&mut self, now: Duration) {
        // A clock that went backwards refills nothing and keeps the later reference point.
        if let Some(dt) = now.checked_sub(self.last) {
            self.tokens = (self.tokens + dt.as_secs_f64() * self.qps).min(self.burst);
            self.last = now;
        }
    }

    /// Takes a token if one is available now (upstream `TryAccept`); never goes into debt.
    pub fn try_take(&mut self, now: Duration) -> bool {
        self.refill(now);
        if self.tokens + TOKEN_EPSILON >= 1.0 {
            self.tokens = (self.tokens - 1.0).max(0.0);
            true
        } else {
            false
        }
    }

    /// Takes a token, possibly in debt, and returns how long the caller must wait before using it
    /// (upstream `Wait`, as `rate.Reserve`): callers waiting in turn get evenly spaced tokens.
    pub fn reserve(&mut self, now: Duration) -> Duration {
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens + TOKEN_EPSILON >= 0.0 || self.qps <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Correlator (upstream `EventCorrelator`: aggregator, logger, spam filter).
// ---------------------------------------------------------------------------------------------

/// Upstream keys are the fields concatenated without separator; a separator rules out two
/// different field tuples colliding on the same key.
fn join_key(parts: &[&str]) -> String {
    parts.join("\u{0}")
}

fn s(o: &Option<String>) -> &str {
    o.as_deref().unwrap_or_default()
}

fn source_fields(e: &Event) -> (&str, &str) {
    e.source
        .as_ref()
        .map(|src| (s(&src.component), s(&src.host)))
        .unwrap_or_default()
}

/// Upstream `getEventKey`: everything that makes two events "the same" (incl. message).
pub fn event_key(e: &Event) -> String {
    let (component, host) = source_fields(e);
    let o = &e.involved_object;
    join_key(&[
        component,
        host,
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.field_path),
        s(&o.uid),
        s(&o.api_version),
        s(&e.type_),
        s(&e.reason),
        s(&e.message),
    ])
}

/// Upstream `getSpamKey`: source + object. Type, reason and fieldPath are not in it, so all events
/// about one pod (all its containers) share one budget, as upstream.
pub fn spam_key(e: &Event) -> String {
    let (component, host) = source_fields(e);
    let o = &e.involved_object;
    join_key(&[
        component,
        host,
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.uid),
        s(&o.api_version),
    ])
}

/// Upstream `EventAggregatorByReasonFunc`: (aggregate key, local key = message). The aggregate key
/// leaves out fieldPath, so similar events about different containers of a pod aggregate together.
pub fn aggregate_key(e: &Event) -> (String, String) {
    let (component, host) = source_fields(e);
    let o = &e.involved_object;
    let key = join_key(&[
        component,
        host,
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.uid),
        s(&o.api_version),
        s(&e.type_),
        s(&e.reason),
        s(&e.reporting_component),
        s(&e.reporting_instance),
    ]);
    (key, s(&e.message).to_string())
}

#[derive(Debug)]
struct AggregateRecord {
    /// Distinct messages seen in the current window.
    local_keys: BTreeSet<String>,
    /// When a similar event was last seen.
    last: SystemTime,
}

/// Upstream `eventLog`: what the API server holds for one correlated key.
#[derive(Debug, Clone)]
struct EventLog {
    count: i32,
    first_timestamp: Option<Time>,
    name: String,
    resource_version: Option<String>,
}

impl EventLog {
    fn of(e: &Event) -> Self {
        EventLog {
            count: e.count.unwrap_or(1),
            first_timestamp: e.first_timestamp.clone(),
            name: s(&e.metadata.name).to_string(),
            resource_version: e.metadata.resource_version.clone(),
        }
    }
}

/// How a correlated event is to be written.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// A first occurrence (or the first aggregate): POST.
    Create,
    /// A repeat: strategic-merge PATCH of the existing event with this body (`count`,
    /// `lastTimestamp`, `message`, the fields upstream's two-way merge patch ends up with).
    Patch(serde_json::Value),
}

/// A correlated event ready to be written.
#[derive(Debug, Clone)]
pub struct Correlated {
    pub event: Event,
    /// The correlator key the server's answer is to be recorded under (see
    /// [`Correlator::update_state`]).
    pub key: String,
    pub write: Write,
}

/// Upstream `EventCorrelator` with its default options: aggregation, repeat counting and the
/// per-object spam filter, each with a bounded LRU cache. Pure: time is passed in.
#[derive(Debug)]
pub struct Correlator {
    aggregates: Lru<AggregateRecord>,
    logs: Lru<EventLog>,
    spam: Lru<TokenBucket>,
    max_events: usize,
    interval: Duration,
    spam_qps: f64,
    spam_burst: u32,
}

impl Default for Correlator {
    fn default() -> Self {
        Self::new(LRU_CACHE_ENTRIES)
    }
}

impl Correlator {
    pub fn new(cache_entries: usize) -> Self {
        Correlator {
            aggregates: Lru::new(cache_entries),
            logs: Lru::new(cache_entries),
            spam: Lru::new(cache_entries),
            max_events: AGGREGATE_MAX_EVENTS,
            interval: AGGREGATE_INTERVAL,
            spam_qps: SPAM_QPS,
            spam_burst: SPAM_BURST,
        }
    }

    /// Upstream `EventCorrelate`: aggregate, then observe (count), then spam-filter. `None` means
    /// the spam filter dropped it. As upstream, a dropped event still counts in the caches, so the
    /// next written repeat carries the true count.
    pub fn correlate(&mut self, event: Event, now: SystemTime) -> Option<Correlated> {
        let (event, key) = self.aggregate(event, now);
        let (event, write) = self.observe(event, &key);
        if self.spam_filtered(&event, now) {
            return None;
        }
        Some(Correlated { event, key, write })
    }

    /// Upstream `UpdateState`: remember what the server returned (name, resourceVersion, count).
    /// Recorded under the key the event was correlated with; upstream recomputes the full key from
    /// the returned event, which for an aggregate is a key nothing ever looks up, so the aggregate's
    /// own entry keeps the name it was created with. Same effect, one fewer surprise.
    pub fn update_state(&mut self, key: &str, server: &Event) {
        self.logs.insert(key.to_string(), EventLog::of(server));
    }

    /// Upstream `EventAggregate`.
    fn aggregate(&mut self, event: Event, now: SystemTime) -> (Event, String) {
        let full_key = event_key(&event);
        let (agg_key, local_key) = aggregate_key(&event);
        let interval = self.interval;
        let mut record = self
            .aggregates
            .remove(&agg_key)
            .filter(|r| elapsed(r.last, now) <= interval)
            .unwrap_or_else(|| AggregateRecord {
                local_keys: BTreeSet::new(),
                last: now,
            });
        record.local_keys.insert(local_key);
        record.last = now;
        let over = record.local_keys.len() >= self.max_events;
        if over {
            // Do not grow the set beyond the maximum (upstream `PopAny`).
            record.local_keys.pop_first();
        }
        self.aggregates.insert(agg_key.clone(), record);
        if !over {
            return (event, full_key);
        }
        let t = to_time(now);
        let aggregate = Event {
            metadata: ObjectMeta {
                name: Some(event_name(s(&event.involved_object.name), now)),
                namespace: event.metadata.namespace.clone(),
                ..Default::default()
            },
            count: Some(1),
            first_timestamp: Some(t.clone()),
            last_timestamp: Some(t),
            message: Some(format!("{AGGREGATE_MESSAGE_PREFIX}{}", s(&event.message))),
            type_: event.type_,
            reason: event.reason,
            source: event.source,
            // Upstream's aggregate copy drops these; keeping them keeps the event consistent with
            // every other event this kubelet writes (and they are part of the aggregate key).
            reporting_component: event.reporting_component,
            reporting_instance: event.reporting_instance,
            involved_object: event.involved_object,
            ..Default::default()
        };
        (aggregate, agg_key)
    }

    /// Upstream `eventObserve`: a key seen before becomes a patch of the existing event.
    fn observe(&mut self, mut event: Event, key: &str) -> (Event, Write) {
        let write = match self.logs.get(key).cloned() {
            Some(last) if last.count > 0 => {
                event.metadata.name = Some(last.name);
                event.metadata.resource_version = last.resource_version;
                event.first_timestamp = last.first_timestamp;
                event.count = Some(last.count.saturating_add(1));
                Write::Patch(serde_json::json!({
                    "count": event.count,
                    "lastTimestamp": event.last_timestamp,
                    "message": event.message,
                }))
            }
            _ => Write::Create,
        };
        self.logs.insert(key.to_string(), EventLog::of(&event));
        (event, write)
    }

    /// Upstream `EventSourceObjectSpamFilter.Filter`: true when the object's budget is spent.
    fn spam_filtered(&mut self, event: &Event, now: SystemTime) -> bool {
        let key = spam_key(event);
        let now = since_epoch(now);
        let mut bucket = self
            .spam
            .remove(&key)
            .unwrap_or_else(|| TokenBucket::new(self.spam_qps, self.spam_burst, now));
        let admitted = bucket.try_take(now);
        self.spam.insert(key, bucket);
        !admitted
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
trait EventSink {
    fn create(&self, event: &Event) -> impl Future<Output = Result<Event, kube::Error>> + Send;
    fn patch(
        &self,
        event: &Event,
        patch: &serde_json::Value,
    ) -> impl Future<Output = Result<Event, kube::Error>> + Send;
}

fn event_namespace(e: &Event) -> &str {
    e.metadata
        .namespace
        .as_deref()
        .filter(|ns| !ns.is_empty())
        .unwrap_or("default")
}

/// core/v1 events through `Api<Event>` (upstream `EventSinkImpl` over `CoreV1().Events("")`).
struct ApiSink {
    client: Client,
}

impl EventSink for ApiSink {
    async fn create(&self, event: &Event) -> Result<Event, kube::Error> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), event_namespace(event));
        api.create(&PostParams::default(), event).await
    }

    async fn patch(&self, event: &Event, patch: &serde_json::Value) -> Result<Event, kube::Error> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), event_namespace(event));
        api.patch(
            s(&event.metadata.name),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await
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
                    self.correlator.update_state(&c.key, &server);
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
    ) -> Result<Event, WriteError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::Mutex;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn pod(name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("uid-{name}")),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn ev(pod_name: &str, reason: &str, message: &str, now: SystemTime) -> Event {
        make_event(
            pod_reference(&pod(pod_name), Some("spec.containers{main}".into())),
            "node-a",
            EventType::Warning,
            reason,
            message.into(),
            now,
        )
    }

    #[test]
    fn name_is_object_name_and_hex_nanos() {
        let t = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        assert_eq!(event_name("web", t), "web.17979cfe3d85cd15");
        assert_eq!(
            format!("{:x}", 1_700_000_000_123_456_789_i64),
            "17979cfe3d85cd15"
        );
    }

    #[test]
    fn pod_event_fields() {
        let now = at(0);
        let e = ev("web", PULLING_IMAGE, "Pulling image \"nginx\"", now);
        let o = &e.involved_object;
        assert_eq!(o.kind.as_deref(), Some("Pod"));
        assert_eq!(o.api_version.as_deref(), Some("v1"));
        assert_eq!(o.namespace.as_deref(), Some("ns"));
        assert_eq!(o.name.as_deref(), Some("web"));
        assert_eq!(o.uid.as_deref(), Some("uid-web"));
        assert_eq!(o.field_path.as_deref(), Some("spec.containers{main}"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(e.metadata.name, Some(event_name("web", now)));
        assert_eq!(e.count, Some(1));
        assert_eq!(e.first_timestamp, Some(to_time(now)));
        assert_eq!(e.last_timestamp, Some(to_time(now)));
        assert_eq!(e.event_time, None);
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reason.as_deref(), Some("Pulling"));
        let src = e.source.as_ref().unwrap();
        assert_eq!(src.component.as_deref(), Some("kubelet"));
        assert_eq!(src.host.as_deref(), Some("node-a"));
        assert_eq!(e.reporting_component.as_deref(), Some("kubelet"));
        assert_eq!(e.reporting_instance.as_deref(), Some("node-a"));
    }

    #[test]
    fn node_event_fields() {
        let e = make_event(
            node_reference("node-a"),
            "node-a",
            EventType::Normal,
            NODE_HAS_SUFFICIENT_MEMORY,
            "Node node-a status is now: NodeHasSufficientMemory".into(),
            at(0),
        );
        let o = &e.involved_object;
        assert_eq!(o.kind.as_deref(), Some("Node"));
        assert_eq!(o.name.as_deref(), Some("node-a"));
        assert_eq!(o.uid.as_deref(), Some("node-a"));
        assert_eq!(o.namespace, None);
        assert_eq!(o.api_version, None);
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert!(e.metadata.name.as_deref().unwrap().starts_with("node-a."));
    }

    #[test]
    fn exact_repeats_patch_the_first_event() {
        let mut c = Correlator::default();
        let first = c.correlate(
            ev("web", BACK_OFF_START_CONTAINER, "back-off", at(0)),
            at(0),
        );
        let first = first.unwrap();
        assert_eq!(first.write, Write::Create);
        let name = first.event.metadata.name.clone();

        let second = c
            .correlate(
                ev("web", BACK_OFF_START_CONTAINER, "back-off", at(5)),
                at(5),
            )
            .unwrap();
        assert_eq!(second.event.metadata.name, name);
        assert_eq!(second.event.count, Some(2));
        assert_eq!(second.event.first_timestamp, Some(to_time(at(0))));
        assert_eq!(second.event.last_timestamp, Some(to_time(at(5))));
        assert_eq!(second.key, first.key);
        let Write::Patch(p) = &second.write else {
            panic!("expected a patch, got {:?}", second.write)
        };
        assert_eq!(
            p,
            &serde_json::json!({
                "count": 2,
                "lastTimestamp": "2023-11-14T22:13:25Z",
                "message": "back-off",
            })
        );

        let third = c
            .correlate(
                ev("web", BACK_OFF_START_CONTAINER, "back-off", at(9)),
                at(9),
            )
            .unwrap();
        assert_eq!(third.event.count, Some(3));

        // Another container's repeat is a different event.
        let mut other = ev("web", BACK_OFF_START_CONTAINER, "back-off", at(10));
        other.involved_object.field_path = Some("spec.containers{side}".into());
        assert_eq!(c.correlate(other, at(10)).unwrap().write, Write::Create);
    }

    #[test]
    fn server_state_is_remembered() {
        let mut c = Correlator::default();
        let first = c
            .correlate(ev("web", FAILED_SYNC, "boom", at(0)), at(0))
            .unwrap();
        let mut server = first.event.clone();
        server.metadata.resource_version = Some("42".into());
        c.update_state(&first.key, &server);
        let second = c
            .correlate(ev("web", FAILED_SYNC, "boom", at(1)), at(1))
            .unwrap();
        assert_eq!(
            second.event.metadata.resource_version.as_deref(),
            Some("42")
        );
        assert_eq!(second.event.metadata.name, server.metadata.name);
    }

    #[test]
    fn tenth_distinct_message_aggregates() {
        let mut c = Correlator::default();
        for i in 1..AGGREGATE_MAX_EVENTS {
            let r = c
                .correlate(
                    ev("web", FAILED_SYNC, &format!("m{i}"), at(i as u64)),
                    at(i as u64),
                )
                .unwrap();
            assert_eq!(r.write, Write::Create, "message {i}");
            assert_eq!(r.event.message.as_deref(), Some(format!("m{i}").as_str()));
        }
        let tenth = c
            .correlate(ev("web", FAILED_SYNC, "m10", at(10)), at(10))
            .unwrap();
        assert_eq!(tenth.write, Write::Create);
        assert_eq!(
            tenth.event.message.as_deref(),
            Some("(combined from similar events): m10")
        );
        assert_eq!(tenth.event.metadata.name, Some(event_name("web", at(10))));
        assert_eq!(tenth.event.count, Some(1));
        assert_eq!(tenth.event.reason.as_deref(), Some(FAILED_SYNC));
        assert_eq!(tenth.event.type_.as_deref(), Some("Warning"));
        assert_eq!(tenth.event.involved_object.name.as_deref(), Some("web"));

        // The next new message is counted on the aggregate.
        let eleventh = c
            .correlate(ev("web", FAILED_SYNC, "m11", at(11)), at(11))
            .unwrap();
        assert_eq!(eleventh.key, tenth.key);
        assert_eq!(eleventh.event.metadata.name, tenth.event.metadata.name);
        assert_eq!(eleventh.event.count, Some(2));
        let Write::Patch(p) = &eleventh.write else {
            panic!("expected a patch")
        };
        assert_eq!(p["message"], "(combined from similar events): m11");

        // Another pod is not affected.
        let other = c
            .correlate(ev("api", FAILED_SYNC, "m12", at(12)), at(12))
            .unwrap();
        assert_eq!(other.event.message.as_deref(), Some("m12"));
    }

    #[test]
    fn aggregation_window_restarts_after_ten_quiet_minutes() {
        let mut c = Correlator::default();
        for i in 1..AGGREGATE_MAX_EVENTS {
            c.correlate(ev("web", FAILED_SYNC, &format!("m{i}"), at(0)), at(0))
                .unwrap();
        }
        let later = at(601);
        let r = c
            .correlate(ev("web", FAILED_SYNC, "m10", later), later)
            .unwrap();
        assert_eq!(r.event.message.as_deref(), Some("m10"));
        assert_eq!(r.write, Write::Create);
    }

    #[test]
    fn spam_filter_allows_burst_then_one_per_five_minutes() {
        let mut c = Correlator::default();
        let mut admitted = 0;
        for i in 0..30 {
            // Distinct reasons so aggregation never kicks in; all about the same pod.
            if c.correlate(ev("web", &format!("R{i}"), "m", at(0)), at(0))
                .is_some()
            {
                admitted += 1;
            }
        }
        assert_eq!(admitted, SPAM_BURST);
        assert!(c
            .correlate(ev("web", "R99", "m", at(299)), at(299))
            .is_none());
        assert!(c
            .correlate(ev("web", "R98", "m", at(300)), at(300))
            .is_some());
        assert!(c
            .correlate(ev("web", "R97", "m", at(301)), at(301))
            .is_none());
        // Another object has its own budget.
        assert!(c
            .correlate(ev("api", "R1", "m", at(301)), at(301))
            .is_some());
    }

    #[test]
    fn filtered_repeats_still_count() {
        let mut c = Correlator::default();
        for _ in 0..SPAM_BURST {
            c.correlate(ev("web", FAILED_SYNC, "boom", at(0)), at(0))
                .unwrap();
        }
        assert!(c
            .correlate(ev("web", FAILED_SYNC, "boom", at(0)), at(0))
            .is_none());
        let r = c
            .correlate(ev("web", FAILED_SYNC, "boom", at(300)), at(300))
            .unwrap();
        assert_eq!(r.event.count, Some(SPAM_BURST as i32 + 2));
    }

    #[test]
    fn lru_is_bounded_and_evicts_least_recently_used() {
        let mut l = Lru::new(3);
        l.insert("a".into(), 1);
        l.insert("b".into(), 2);
        l.insert("c".into(), 3);
        assert_eq!(l.get("a"), Some(&1)); // a is now the newest
        l.insert("d".into(), 4);
        assert_eq!(l.len(), 3);
        assert_eq!(l.get("b"), None);
        assert_eq!(l.get("a"), Some(&1));
        l.insert("c".into(), 30); // replace keeps the size
        assert_eq!(l.len(), 3);
        assert_eq!(l.get("c"), Some(&30));
        assert_eq!(l.remove("c"), Some(30));
        assert_eq!(l.len(), 2);

        let mut c = Correlator::new(8);
        for i in 0..100 {
            c.correlate(ev(&format!("p{i}"), FAILED_SYNC, "m", at(0)), at(0));
        }
        assert!(c.logs.len() <= 8 && c.spam.len() <= 8 && c.aggregates.len() <= 8);
    }

    #[test]
    fn token_bucket_burst_and_refill() {
        let s = Duration::from_secs;
        let mut b = TokenBucket::new(2.0, 3, s(0));
        assert!(b.try_take(s(0)));
        assert!(b.try_take(s(0)));
        assert!(b.try_take(s(0)));
        assert!(!b.try_take(s(0)));
        assert!(b.try_take(Duration::from_millis(500)));
        assert!(!b.try_take(Duration::from_millis(500)));
        // Refill is capped at the burst.
        for _ in 0..3 {
            assert!(b.try_take(s(100)));
        }
        assert!(!b.try_take(s(100)));
        // A clock going backwards neither panics nor refills.
        assert!(!b.try_take(s(50)));
    }

    #[test]
    fn token_bucket_reserve_spaces_waiters() {
        let mut b = TokenBucket::new(10.0, 2, Duration::ZERO);
        assert_eq!(b.reserve(Duration::ZERO), Duration::ZERO);
        assert_eq!(b.reserve(Duration::ZERO), Duration::ZERO);
        let w1 = b.reserve(Duration::ZERO);
        let w2 = b.reserve(Duration::ZERO);
        assert!((w1.as_secs_f64() - 0.1).abs() < 1e-6, "{w1:?}");
        assert!((w2.as_secs_f64() - 0.2).abs() < 1e-6, "{w2:?}");
        // Zero burst still admits one.
        let mut z = TokenBucket::new(1.0, 0, Duration::ZERO);
        assert!(z.try_take(Duration::ZERO));
        assert!(!z.try_take(Duration::ZERO));
    }

    #[test]
    fn global_limiter_zero_qps_is_unlimited() {
        let (r, _h) = EventRecorder::new(None, "n".into(), 0.0, 0);
        assert!(r.limiter.is_none());
        let (r, _h) = EventRecorder::new(None, "n".into(), 50.0, 100);
        assert!(r.limiter.is_some());
    }

    #[test]
    fn classify_errors() {
        use kube::core::Status;
        let api = |code: u16, reason: &str| {
            kube::Error::Api(Status::failure("x", reason).with_code(code).boxed())
        };
        assert!(WriteError::classify(api(503, "ServiceUnavailable")).retryable());
        assert!(WriteError::classify(api(500, "InternalError")).retryable());
        assert!(WriteError::classify(api(429, "TooManyRequests")).retryable());
        assert!(!WriteError::classify(api(422, "Invalid")).retryable());
        assert!(!WriteError::classify(api(403, "Forbidden")).retryable());
        let exists = WriteError::classify(api(409, "AlreadyExists"));
        assert!(!exists.retryable() && exists.expected());
        assert!(!WriteError::classify(api(403, "Forbidden")).expected());
        assert!(
            WriteError::classify(kube::Error::Service("connection refused".into())).retryable()
        );
    }

    // --- the write path against a fake sink ---

    #[derive(Debug, Clone, PartialEq)]
    enum Call {
        Create(String, Option<i32>),
        Patch(String, serde_json::Value),
    }

    #[derive(Default)]
    struct Fake {
        calls: Mutex<Vec<Call>>,
        /// Scripted failures, consumed one per call; an empty script succeeds.
        script: Mutex<VecDeque<kube::Error>>,
    }

    impl Fake {
        fn fail_next(&self, e: kube::Error) {
            self.script.lock().unwrap().push_back(e);
        }
        fn calls(&self) -> Vec<Call> {
            self.calls.lock().unwrap().clone()
        }
        fn outcome(&self) -> Result<(), kube::Error> {
            match self.script.lock().unwrap().pop_front() {
                Some(e) => Err(e),
                None => Ok(()),
            }
        }
    }

    impl EventSink for Arc<Fake> {
        async fn create(&self, event: &Event) -> Result<Event, kube::Error> {
            self.calls.lock().unwrap().push(Call::Create(
                s(&event.metadata.name).to_string(),
                event.count,
            ));
            self.outcome()?;
            let mut e = event.clone();
            e.metadata.resource_version = Some("1".into());
            Ok(e)
        }

        async fn patch(
            &self,
            event: &Event,
            patch: &serde_json::Value,
        ) -> Result<Event, kube::Error> {
            self.calls.lock().unwrap().push(Call::Patch(
                s(&event.metadata.name).to_string(),
                patch.clone(),
            ));
            self.outcome()?;
            Ok(event.clone())
        }
    }

    fn not_found() -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("gone", "NotFound")
                .with_code(404)
                .boxed(),
        )
    }

    async fn run_fake(fake: &Arc<Fake>, send: impl FnOnce(&Recorder)) {
        let (mut r, h) = EventRecorder::new(None, "node-a".into(), 0.0, 0);
        r.retry_interval = Duration::from_millis(1);
        send(&h);
        drop(h);
        r.run_with(Some(fake.clone()), CancellationToken::new())
            .await;
    }

    #[tokio::test]
    async fn repeats_are_created_then_patched() {
        let fake = Arc::new(Fake::default());
        let p = pod("web");
        run_fake(&fake, |h| {
            for _ in 0..3 {
                h.pod_event(&p, None, EventType::Normal, PULLED_IMAGE, "pulled".into());
            }
        })
        .await;
        let calls = fake.calls();
        assert_eq!(calls.len(), 3, "{calls:?}");
        let Call::Create(name, Some(1)) = &calls[0] else {
            panic!("{calls:?}")
        };
        assert!(name.starts_with("web."));
        assert!(matches!(&calls[1], Call::Patch(n, p) if n == name && p["count"] == 2));
        assert!(matches!(&calls[2], Call::Patch(n, p) if n == name && p["count"] == 3));
    }

    #[tokio::test]
    async fn patch_not_found_creates_anew() {
        let (mut r, h) = EventRecorder::new(None, "node-a".into(), 0.0, 0);
        r.retry_interval = Duration::from_millis(1);
        let p = pod("web");
        for _ in 0..2 {
            h.pod_event(&p, None, EventType::Normal, PULLED_IMAGE, "pulled".into());
        }
        drop(h);
        let fake = Arc::new(Fake::default());
        // The create succeeds; the patch of the repeat is NotFound, so it is created again.
        for fail in [None, Some(not_found())] {
            if let Some(e) = fail {
                fake.fail_next(e);
            }
            let event = r.rx.recv().await.unwrap();
            let c = r.correlator.correlate(*event, SystemTime::now()).unwrap();
            r.record(&fake, c, &CancellationToken::new()).await;
        }
        let calls = fake.calls();
        assert_eq!(calls.len(), 3, "{calls:?}");
        let Call::Create(name, _) = &calls[0] else {
            panic!("{calls:?}")
        };
        assert!(matches!(&calls[1], Call::Patch(n, _) if n == name));
        assert_eq!(calls[2], Call::Create(name.clone(), Some(2)));
    }

    #[tokio::test]
    async fn unavailable_is_retried_and_rejections_are_not() {
        let fake = Arc::new(Fake::default());
        fake.fail_next(kube::Error::Service("connection refused".into()));
        fake.fail_next(kube::Error::Service("connection refused".into()));
        let p = pod("web");
        run_fake(&fake, |h| {
            h.pod_event(&p, None, EventType::Warning, FAILED_SYNC, "a".into());
        })
        .await;
        assert_eq!(fake.calls().len(), 3);

        let fake = Arc::new(Fake::default());
        fake.fail_next(kube::Error::Api(
            kube::core::Status::failure("bad", "Invalid")
                .with_code(422)
                .boxed(),
        ));
        run_fake(&fake, |h| {
            h.pod_event(&p, None, EventType::Warning, FAILED_SYNC, "a".into());
        })
        .await;
        assert_eq!(fake.calls().len(), 1);

        let fake = Arc::new(Fake::default());
        for _ in 0..MAX_TRIES_PER_EVENT + 3 {
            fake.fail_next(kube::Error::Service("down".into()));
        }
        run_fake(&fake, |h| {
            h.pod_event(&p, None, EventType::Warning, FAILED_SYNC, "a".into());
        })
        .await;
        assert_eq!(fake.calls().len(), MAX_TRIES_PER_EVENT as usize);
    }

    #[tokio::test]
    async fn full_queue_drops_without_blocking() {
        let (_r, h) = EventRecorder::new(None, "node-a".into(), 0.0, 0);
        let p = pod("web");
        for i in 0..MAX_QUEUED_EVENTS + 10 {
            h.pod_event(&p, None, EventType::Normal, PULLED_IMAGE, format!("{i}"));
        }
        assert_eq!(h.tx.as_ref().unwrap().capacity(), 0);
        Recorder::disabled().node_event(EventType::Normal, STARTING_KUBELET, "x".into());
    }

    #[tokio::test]
    async fn standalone_drains_and_stops_when_handles_drop() {
        let (r, h) = EventRecorder::new(None, "node-a".into(), 50.0, 100);
        h.node_event(
            EventType::Normal,
            STARTING_KUBELET,
            "Starting kubelet.".into(),
        );
        drop(h);
        r.run(CancellationToken::new()).await;
    }
}
