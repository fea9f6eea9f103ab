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
    c.update_state(&first.key, EventLog::of(&server));
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
    assert!(WriteError::classify(kube::Error::Service("connection refused".into())).retryable());
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
    async fn create(&self, event: &Event) -> Result<EventLog, kube::Error> {
        self.calls.lock().unwrap().push(Call::Create(
            s(&event.metadata.name).to_string(),
            event.count,
        ));
        self.outcome()?;
        let mut e = event.clone();
        e.metadata.resource_version = Some("1".into());
        Ok(EventLog::of(&e))
    }

    async fn patch(
        &self,
        event: &Event,
        patch: &serde_json::Value,
    ) -> Result<EventLog, kube::Error> {
        self.calls.lock().unwrap().push(Call::Patch(
            s(&event.metadata.name).to_string(),
            patch.clone(),
        ));
        self.outcome()?;
        Ok(EventLog::of(event))
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

/// The server's answer is read for what the correlator keeps, and only that: the whole event as
/// an API server returns it (managedFields and all) gives the same [`EventLog`] as the parsed
/// `Event` would; a missing count is 1, as upstream's `eventLog` of a first write.
#[test]
fn the_answer_to_a_write_is_read_for_its_log_only() {
    let answer = r#"{"kind":"Event","apiVersion":"v1",
        "metadata":{"name":"web.17979cfe3d85cd15","namespace":"ns","uid":"e1",
          "resourceVersion":"4711","creationTimestamp":"2026-12-05T04:00:00Z",
          "managedFields":[{"manager":"rkubelet","operation":"Update","apiVersion":"v1",
            "time":"2026-12-05T04:00:00Z","fieldsType":"FieldsV1",
            "fieldsV1":{"f:count":{},"f:involvedObject":{"f:name":{}}}}]},
        "involvedObject":{"kind":"Pod","namespace":"ns","name":"web","uid":"uid-web",
          "fieldPath":"spec.containers{main}"},
        "reason":"BackOff","message":"back-off","source":{"component":"kubelet","host":"node-a"},
        "firstTimestamp":"2026-12-05T03:59:00Z","lastTimestamp":"2026-12-05T04:00:00Z",
        "count":3,"type":"Warning","eventTime":null,"reportingComponent":"kubelet",
        "reportingInstance":"node-a"}"#;
    let full: Event = serde_json::from_str(answer).expect("an event");
    let log: EventLog = serde_json::from_str(answer).expect("its log");
    assert_eq!(log, EventLog::of(&full));
    assert_eq!(
        (
            log.count,
            log.name.as_str(),
            log.resource_version.as_deref()
        ),
        (3, "web.17979cfe3d85cd15", Some("4711"))
    );
    assert!(log.first_timestamp.is_some());
    let first: EventLog =
        serde_json::from_str(r#"{"metadata":{"name":"a.1","resourceVersion":"9"}}"#).expect("log");
    assert_eq!((first.count, first.first_timestamp), (1, None));
}

/// The API sink sends what `Api<Event>` sends (POST to the event's namespace, a strategic-merge
/// PATCH of the named event) and gives back the server's log, or its Status as `kube::Error::Api`
/// (a patch of an expired event is NotFound, which the recorder turns into a create).
#[tokio::test]
async fn the_api_sink_keeps_the_requests_and_errors() {
    let (client, seen) = crate::testutil::scripted_client(|path| {
        if path.ends_with("/expired") {
            (
                404,
                r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#,
            )
        } else {
            (
                200,
                r#"{"metadata":{"name":"web.1","resourceVersion":"12"},"count":2,"message":"m"}"#,
            )
        }
    });
    let sink = ApiSink { client };
    let event = ev("web", BACK_OFF_START_CONTAINER, "back-off", at(0));
    let written = sink.create(&event).await.expect("created");
    assert_eq!(
        (written.count, written.name.as_str()),
        (2, "web.1"),
        "the server's answer"
    );
    let patch = serde_json::json!({"count": 2});
    sink.patch(&event, &patch).await.expect("patched");
    let mut expired = event.clone();
    expired.metadata.name = Some("expired".into());
    match sink.patch(&expired, &patch).await {
        Err(kube::Error::Api(st)) => assert!(st.is_not_found(), "{st:?}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    let seen = seen.lock().expect("log").clone();
    assert_eq!(seen.len(), 3, "{seen:#?}");
    let (post, body) = seen[0].split_at(seen[0].find(" {").expect("a body"));
    assert_eq!(post, "POST /api/v1/namespaces/ns/events application/json");
    let sent: Event = serde_json::from_str(body.trim()).expect("an event was sent");
    assert_eq!(sent, event);
    assert_eq!(
        seen[1],
        format!(
            "PATCH /api/v1/namespaces/ns/events/{} application/strategic-merge-patch+json {{\"count\":2}}",
            s(&event.metadata.name)
        )
    );
    assert!(seen[2].starts_with("PATCH /api/v1/namespaces/ns/events/expired "));
}
