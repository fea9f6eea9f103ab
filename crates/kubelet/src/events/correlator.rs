//! Upstream `EventCorrelator`: aggregation, repeat counting and the spam filter, pure and
//! clock-driven so that it is table-tested.

use super::*;

// ---------------------------------------------------------------------------------------------
// Bounded LRU map (upstream uses groupcache's lru with 4096 entries).
// ---------------------------------------------------------------------------------------------

/// String-keyed LRU: a map plus a recency index. Owned by the recorder task, so no locking.
#[derive(Debug)]
pub(super) struct Lru<V> {
    pub(super) cap: usize,
    pub(super) tick: u64,
    pub(super) map: HashMap<String, (u64, V)>,
    pub(super) order: BTreeMap<u64, String>,
}

impl<V> Lru<V> {
    pub(super) fn new(cap: usize) -> Self {
        Lru {
            cap: cap.max(1),
            tick: 0,
            map: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// Looks `key` up and marks it most recently used.
    pub(super) fn get(&mut self, key: &str) -> Option<&V> {
        let entry = self.map.get_mut(key)?;
        self.order.remove(&entry.0);
        self.tick += 1;
        entry.0 = self.tick;
        self.order.insert(self.tick, key.to_string());
        Some(&entry.1)
    }

    pub(super) fn remove(&mut self, key: &str) -> Option<V> {
        let (tick, value) = self.map.remove(key)?;
        self.order.remove(&tick);
        Some(value)
    }

    /// Inserts or replaces `key` as most recently used, evicting the least recently used entries
    /// beyond the capacity.
    pub(super) fn insert(&mut self, key: String, value: V) {
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
    pub(super) qps: f64,
    pub(super) burst: f64,
    pub(super) tokens: f64,
    pub(super) last: Duration,
}

/// Float slack so that a refill of exactly one token (e.g. after 300 s at 1/300 qps) counts.
pub(super) const TOKEN_EPSILON: f64 = 1e-9;

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

    pub(super) fn refill(&mut self, now: Duration) {
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
pub(super) fn join_key(parts: &[&str]) -> String {
    parts.join("\u{0}")
}

pub(super) fn s(o: &Option<String>) -> &str {
    o.as_deref().unwrap_or_default()
}

pub(super) fn source_fields(e: &Event) -> (&str, &str) {
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
pub(super) struct AggregateRecord {
    /// Distinct messages seen in the current window.
    pub(super) local_keys: BTreeSet<String>,
    /// When a similar event was last seen.
    pub(super) last: SystemTime,
}

/// Upstream `eventLog`: what the API server holds for one correlated key. Read from the server's
/// answer to a write through [`WrittenEvent`], which parses only these fields.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(from = "WrittenEvent")]
pub struct EventLog {
    pub(super) count: i32,
    pub(super) first_timestamp: Option<Time>,
    pub(super) name: String,
    pub(super) resource_version: Option<String>,
}

/// The fields of an event the API server sends back that the correlator keeps. Why not `Event`:
/// the answer is the whole event (its object reference, source, message and managedFields), and
/// parsing it all, three events per pod started, was most of the recorder's CPU (perf, 100 pods);
/// serde skips the rest without building it.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenEvent {
    #[serde(default)]
    metadata: WrittenMeta,
    count: Option<i32>,
    first_timestamp: Option<Time>,
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenMeta {
    name: Option<String>,
    resource_version: Option<String>,
}

impl From<WrittenEvent> for EventLog {
    fn from(w: WrittenEvent) -> Self {
        EventLog {
            count: w.count.unwrap_or(1),
            first_timestamp: w.first_timestamp,
            name: w.metadata.name.unwrap_or_default(),
            resource_version: w.metadata.resource_version,
        }
    }
}

impl EventLog {
    pub(super) fn of(e: &Event) -> Self {
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
    pub(super) aggregates: Lru<AggregateRecord>,
    pub(super) logs: Lru<EventLog>,
    pub(super) spam: Lru<TokenBucket>,
    pub(super) max_events: usize,
    pub(super) interval: Duration,
    pub(super) spam_qps: f64,
    pub(super) spam_burst: u32,
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
    pub fn update_state(&mut self, key: &str, server: EventLog) {
        self.logs.insert(key.to_string(), server);
    }

    /// Upstream `EventAggregate`.
    pub(super) fn aggregate(&mut self, event: Event, now: SystemTime) -> (Event, String) {
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
    pub(super) fn observe(&mut self, mut event: Event, key: &str) -> (Event, Write) {
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
    pub(super) fn spam_filtered(&mut self, event: &Event, now: SystemTime) -> bool {
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
