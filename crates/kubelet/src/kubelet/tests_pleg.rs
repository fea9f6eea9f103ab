//! PLEG's runtime-event fast path in the whole in-process kubelet (fake runtime, paused clock):
//! a container's death reaches its worker through the event, before the next relist, on each
//! stream (containerd's events, CRI GetContainerEvents); a lost stream reconnects; a runtime with
//! neither falls back to relisting; lost events are found by the relist and counted as missed.
//! "Before the next relist" is an order of calls in the fake's log, not a time.

use std::time::Duration;

use rkubelet_cri::fake::FakeRuntime;
use tokio::time::Instant;

use super::tests::{container, pod, running, Harness};

/// The relists' whole-runtime listings (a pod's own reads are filtered to its UID).
fn relists(f: &FakeRuntime) -> Vec<Instant> {
    f.calls()
        .iter()
        .filter(|c| c.op == "list_pod_sandbox" && c.detail.is_empty())
        .map(|c| c.at)
        .collect()
}

fn stream_opens(f: &FakeRuntime, op: &str) -> usize {
    f.calls().iter().filter(|c| c.op == op).count()
}

/// What happened around one death of `app`.
struct Death {
    killed: Instant,
    restarted: Instant,
    /// The first relist after the kill (None: none yet when the container started again).
    next_relist: Option<Instant>,
}

/// Starts pod `p` with container `app` and waits for it to run and for `ready` to hold.
async fn running_pod(h: &Harness, ready: impl Fn(&FakeRuntime) -> bool) {
    h.run_app(pod("p", "uid-p", vec![container("app")])).await;
    h.until("the event stream", Duration::from_secs(10), ready)
        .await;
}

/// Kills `app` right after a relist (the next one is most of a second away) and waits until
/// its worker started it again (the first restart has no backoff).
async fn kill_after_a_relist(h: &Harness) -> Death {
    let starts = h.calls("start_container", "app").len();
    let n = relists(&h.fake).len();
    h.until("a relist", Duration::from_secs(5), |f| relists(f).len() > n)
        .await;
    let killed = Instant::now();
    assert_eq!(h.fake.kill_container("app", 1), 1);
    h.until("app started again", Duration::from_secs(10), |f| {
        f.calls()
            .iter()
            .filter(|c| c.op == "start_container" && c.key == "app")
            .count()
            > starts
    })
    .await;
    let restarted = h.calls("start_container", "app")[starts].at;
    Death {
        killed,
        restarted,
        next_relist: relists(&h.fake).into_iter().find(|t| *t > killed),
    }
}

fn before_next_relist(d: &Death) -> bool {
    d.next_relist.is_none_or(|r| d.restarted < r)
}

#[tokio::test(start_paused = true)]
async fn containerd_task_exit_reaches_the_worker_before_the_next_relist() {
    let h = Harness::start().await;
    running_pod(&h, |f| f.event_subscribers() > 0).await;
    let d = kill_after_a_relist(&h).await;
    assert!(
        before_next_relist(&d),
        "restart at +{:?}, next relist at +{:?}",
        d.restarted - d.killed,
        d.next_relist.map(|r| r - d.killed)
    );
    // containerd 1.6 answers GetContainerEvents Unimplemented; its events service is used.
    assert!(stream_opens(&h.fake, "get_container_events") >= 1);
    assert!(stream_opens(&h.fake, "subscribe_containerd_events") >= 1);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn cri_container_events_are_preferred_when_served() {
    let fake = FakeRuntime::new(std::sync::Arc::new(crate::clock::now_unix_nanos));
    fake.add_image("busybox");
    fake.serve_cri_events(true);
    let h = Harness::start_on(fake).await;
    running_pod(&h, |f| f.event_subscribers() > 0).await;
    let d = kill_after_a_relist(&h).await;
    assert!(before_next_relist(&d), "restart after the next relist");
    assert_eq!(stream_opens(&h.fake, "subscribe_containerd_events"), 0);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_runtime_without_events_is_relisted_only() {
    let fake = FakeRuntime::new(std::sync::Arc::new(crate::clock::now_unix_nanos));
    fake.add_image("busybox");
    fake.serve_containerd_events(false);
    let h = Harness::start_on(fake).await;
    running_pod(&h, |f| {
        f.calls()
            .iter()
            .any(|c| c.op == "subscribe_containerd_events")
    })
    .await;
    let d = kill_after_a_relist(&h).await;
    // The relist found the death: the restart follows it.
    let relist = d.next_relist.expect("a relist after the kill");
    assert!(relist <= d.restarted, "restart before any relist");
    // Both answered Unimplemented once; the watcher gave up instead of retrying for ever.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(stream_opens(&h.fake, "get_container_events"), 1);
    assert_eq!(stream_opens(&h.fake, "subscribe_containerd_events"), 1);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_lost_stream_reconnects_and_events_flow_again() {
    let h = Harness::start().await;
    running_pod(&h, |f| f.event_subscribers() > 0).await;
    let opened = stream_opens(&h.fake, "subscribe_containerd_events");
    // A runtime restart: every stream ends with an error.
    h.fake.break_event_streams();
    assert_eq!(h.fake.event_subscribers(), 0);
    h.until("a new subscription", Duration::from_secs(10), |f| {
        f.event_subscribers() > 0
    })
    .await;
    assert!(stream_opens(&h.fake, "subscribe_containerd_events") > opened);
    let d = kill_after_a_relist(&h).await;
    assert!(before_next_relist(&d), "restart after the next relist");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn lost_events_are_found_by_the_relist_and_counted_as_missed() {
    let missed = || {
        crate::metrics::get()
            .pleg_relist_missed_events
            .with_label_values(&["ContainerDied"])
            .get()
    };
    let h = Harness::start().await;
    running_pod(&h, |f| f.event_subscribers() > 0).await;
    // Let a relist pass with the stream open, so the next interval is covered whole.
    let n = relists(&h.fake).len();
    h.until("a relist", Duration::from_secs(5), |f| relists(f).len() > n)
        .await;
    let before = missed();
    h.fake.mute_events(true);
    let d = kill_after_a_relist(&h).await;
    let relist = d.next_relist.expect("a relist after the kill");
    assert!(relist <= d.restarted, "restart before any relist");
    // Other tests of this process may add to the counter; none takes from it.
    assert!(
        missed() > before,
        "the relist's ContainerDied was not counted as missed"
    );
    h.stop().await;
}

/// Reads of one pod's status (each starts with its filtered sandbox listing).
fn pod_reads(f: &FakeRuntime, uid: &str) -> Vec<Instant> {
    f.calls()
        .iter()
        .filter(|c| c.op == "list_pod_sandbox" && c.detail == uid)
        .map(|c| c.at)
        .collect()
}

/// A pod is read when it changes, once: an unchanged pod is not read by the relists nor by its
/// worker's periodic resync, and a change the worker made and read itself is not read again by
/// the relist that finds it (each read is 4 or more CRI calls per pod).
#[tokio::test(start_paused = true)]
async fn a_pod_is_read_once_per_change() {
    let h = Harness::start().await;
    running_pod(&h, |f| f.event_subscribers() > 0).await;
    let n = relists(&h.fake).len();
    h.until("three relists", Duration::from_secs(10), |f| {
        relists(f).len() >= n + 3
    })
    .await;
    let reads = pod_reads(&h.fake, "uid-p").len();
    // Longer than syncFrequency (1 min): a resync of the unchanged pod reads nothing either.
    tokio::time::sleep(Duration::from_secs(70)).await;
    assert_eq!(
        pod_reads(&h.fake, "uid-p").len(),
        reads,
        "reads of an unchanged pod"
    );
    // The worker starts app again and reads the pod; no relist after that reads it.
    let d = kill_after_a_relist(&h).await;
    let n = relists(&h.fake).len();
    h.until("three relists", Duration::from_secs(10), |f| {
        relists(f).len() >= n + 3
    })
    .await;
    let after: Vec<Instant> = relists(&h.fake)
        .into_iter()
        .filter(|t| *t > d.restarted)
        .collect();
    let read_by_relist: Vec<Instant> = pod_reads(&h.fake, "uid-p")
        .into_iter()
        .filter(|t| after.contains(t))
        .collect();
    assert!(
        read_by_relist.is_empty(),
        "relists read the pod again at {read_by_relist:?} (relists at {after:?})"
    );
    h.stop().await;
}

/// Stopping a pod reads it when the stops returned, not for each exit event the stops cause
/// (before, every event's read was retried until CRI showed the exit, 4 to 6 reads per pod):
/// one read after the kill, and at most one more before the removal.
#[tokio::test(start_paused = true)]
async fn a_pod_stopped_by_the_kubelet_is_not_read_per_exit_event() {
    let h = Harness::start().await;
    running_pod(&h, |f| f.event_subscribers() > 0).await;
    let n = relists(&h.fake).len();
    h.until("a relist", Duration::from_secs(5), |f| relists(f).len() > n)
        .await;
    // Every read of the pod, whole or of what the worker knows, asks its sandbox's status.
    let sandbox_reads = || h.calls("pod_sandbox_status", "p").len();
    let before = sandbox_reads();
    h.want(vec![]).await;
    h.until("the sandbox removed", Duration::from_secs(30), |f| {
        f.calls().iter().any(|c| c.op == "remove_pod_sandbox")
    })
    .await;
    assert_eq!(
        h.calls("stop_container", "app").len(),
        1,
        "one stop per container"
    );
    let reads = sandbox_reads() - before;
    let t0 = h.calls("stop_container", "app")[0].at;
    let log: Vec<String> = h
        .fake
        .calls()
        .iter()
        .filter(|c| c.at + Duration::from_secs(2) >= t0)
        .map(|c| format!("{:?} {} {} {}", c.at - t0, c.op, c.key, c.detail))
        .collect();
    assert!(
        (1..=2).contains(&reads),
        "{reads} reads of the pod to stop and remove it: {log:#?}"
    );
    h.stop().await;
}

/// A pod its worker stopped is read as what was stopped: one PodSandboxStatus per sandbox and
/// one ContainerStatus per container the read before the stop showed, where a whole read (as
/// upstream's `SyncTerminatingPod` makes) adds the filtered ListPodSandbox and ListContainers.
/// The final status still shows the container exited, and the removal follows from that read:
/// RemovePodSandbox alone, which removes the sandbox's containers (the CRI contract; the fake
/// does as containerd), where a RemoveContainer per container came first before.
#[tokio::test(start_paused = true)]
async fn a_pod_stopped_by_its_worker_is_read_as_stopped() {
    let h = Harness::start().await;
    running_pod(&h, |f| f.event_subscribers() > 0).await;
    h.want(vec![]).await;
    h.until("the sandbox removed", Duration::from_secs(30), |f| {
        f.calls().iter().any(|c| c.op == "remove_pod_sandbox")
    })
    .await;
    let mut calls: Vec<String> = pod_calls_after(&h.fake, ("stop_container", "app", 0), &["app"])
        .into_iter()
        .take_while(|c| c != "remove_pod_sandbox p")
        .collect();
    // The sandbox status and the container status are asked at once.
    calls[1..3].sort();
    assert_eq!(
        calls,
        [
            "stop_pod_sandbox p",
            "container_status app",
            "pod_sandbox_status p",
        ],
        "calls about the pod from its container's stop to its sandbox's removal"
    );
    h.until(
        "the container removed with its sandbox",
        Duration::from_secs(5),
        |f| f.containers().is_empty(),
    )
    .await;
    assert!(h.calls("remove_container", "app").is_empty());
    h.stop().await;
}

/// A container still running after its StopContainer and its sandbox's StopPodSandbox both
/// answered success (a CRI violation) is caught by the read after the kill, as upstream's
/// `SyncTerminatingPod` catches it: the worker retries the termination, stops the container
/// again, and only then removes the pod.
#[tokio::test(start_paused = true)]
async fn a_container_still_running_after_its_stop_is_stopped_again() {
    let h = Harness::start().await;
    running_pod(&h, |f| f.event_subscribers() > 0).await;
    h.fake.survive_stops("app", 2);
    h.want(vec![]).await;
    h.until("the sandbox removed", Duration::from_secs(30), |f| {
        f.calls().iter().any(|c| c.op == "remove_pod_sandbox")
    })
    .await;
    let stops = h.calls("stop_container", "app");
    assert_eq!(stops.len(), 2, "the ignored stop, then one that stopped it");
    // The retried termination reads the pod after its stop (the final status comes from that
    // read), and the removal follows it: not a removal straight after a second stop.
    let after: Vec<String> = pod_calls_after(&h.fake, ("stop_container", "app", 1), &["app"])
        .into_iter()
        .take_while(|c| c != "remove_pod_sandbox p")
        .collect();
    assert!(
        after.iter().any(|c| c == "container_status app"),
        "no read between the second stop and the removal: {after:?}"
    );
    assert!(!running(&h.fake, "p", "app"));
    h.stop().await;
}

/// While its worker is creating the pod's container (a CreateContainer of 3 s here), the
/// relists that find the new sandbox leave the pod to the worker, which reads it when done.
#[tokio::test(start_paused = true)]
async fn a_pod_its_worker_is_changing_is_left_to_the_worker() {
    let h = Harness::start().await;
    h.fake
        .delay("create_container", "app", Duration::from_secs(3));
    running_pod(&h, |_| true).await;
    let created = h.calls("create_container", "app")[0].at;
    let started = h.calls("start_container", "app")[0].at;
    let during = |ts: Vec<Instant>| -> Vec<Instant> {
        ts.into_iter()
            .filter(|t| *t > created && *t < started)
            .collect()
    };
    let relisted = during(relists(&h.fake));
    assert!(relisted.len() >= 2, "relists while creating: {relisted:?}");
    let reads = during(pod_reads(&h.fake, "uid-p"));
    assert!(
        reads.is_empty(),
        "the pod was read at {reads:?} while its worker acted"
    );
    // Once done, the worker's read shows it running, and the relists after it find it so.
    let n = relists(&h.fake).len();
    h.until("two relists", Duration::from_secs(5), |f| {
        relists(f).len() >= n + 2
    })
    .await;
    assert!(running(&h.fake, "p", "app"));
    h.stop().await;
}

/// The calls about pod `p` (uid `uid-p`, containers named in `containers`) made after the
/// `nth` (from 0) call `op` of `key`, in the fake's order (paused time gives many calls one
/// instant).
fn pod_calls_after(
    f: &FakeRuntime,
    (op, key, nth): (&str, &str, usize),
    containers: &[&str],
) -> Vec<String> {
    let calls = f.calls();
    let from = calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.op == op && c.key == key)
        .nth(nth)
        .map(|(i, _)| i + 1)
        .expect("the call to start after");
    calls[from..]
        .iter()
        .filter(|c| c.detail == "uid-p" || c.key == "p" || containers.contains(&c.key.as_str()))
        .map(|c| format!("{} {}", c.op, c.key))
        .collect()
}

/// A pod started from nothing is read as what its worker started: one ContainerStatus per
/// container, with the sandbox as RunPodSandbox's status read gave it, where a whole read adds
/// ListPodSandbox, PodSandboxStatus and ListContainers (upstream reads the whole pod at the next
/// relist). The relists after it find the pod as read and read it no more; the read showed the
/// containers running, so nothing was started twice.
#[tokio::test(start_paused = true)]
async fn a_pod_started_from_nothing_is_read_as_started() {
    let h = Harness::start().await;
    h.run_app(pod("p", "uid-p", vec![container("app"), container("side")]))
        .await;
    h.until("side running", Duration::from_secs(10), |f| {
        running(f, "p", "side")
    })
    .await;
    let n = relists(&h.fake).len();
    h.until("three relists", Duration::from_secs(10), |f| {
        relists(f).len() >= n + 3
    })
    .await;
    // Regular containers start in their spec's order.
    let mut after = pod_calls_after(&h.fake, ("start_container", "side", 0), &["app", "side"]);
    after.sort();
    assert_eq!(
        after,
        ["container_status app", "container_status side"],
        "calls about the pod after its starts"
    );
    assert_eq!(h.calls("start_container", "app").len(), 1);
    assert_eq!(h.calls("start_container", "side").len(), 1);
    h.stop().await;
}

/// A start that failed may have left a container the worker has no ID of: the worker's read
/// after it is a whole read of the pod, and the next sync starts the container.
#[tokio::test(start_paused = true)]
async fn a_failed_start_is_followed_by_a_whole_read() {
    let h = Harness::start().await;
    h.fake.fail_next(
        "start_container",
        "app",
        tonic::Status::internal("injected start failure"),
    );
    h.run_app(pod("p", "uid-p", vec![container("app")])).await;
    let starts = h.calls("start_container", "app");
    assert_eq!(starts.len(), 2, "one failed start, then one that ran");
    let between: Vec<String> = pod_calls_after(&h.fake, ("start_container", "app", 0), &["app"])
        .into_iter()
        .take_while(|c| c != "start_container app")
        .collect();
    assert!(
        between.iter().any(|c| c == "list_pod_sandbox "),
        "a whole read of the pod after the failed start: {between:?}"
    );
    h.stop().await;
}

/// The log rotation knows a container's log path from its start (the path rkubelet gave the
/// runtime), so its rounds ask the runtime nothing per container: after two rounds (10 s
/// apart), `app`'s only ContainerStatus is its worker's read after the start.
#[tokio::test(start_paused = true)]
async fn log_rotation_asks_no_status_of_a_container_it_saw_start() {
    let h = Harness::start().await;
    h.run_app(pod("p", "uid-p", vec![container("app")])).await;
    let rounds = |f: &FakeRuntime| {
        f.calls()
            .iter()
            .filter(|c| c.op == "list_containers" && c.detail.is_empty())
            .count()
    };
    let n = rounds(&h.fake);
    tokio::time::sleep(Duration::from_secs(25)).await;
    // Relists list containers too; 25 s has two rotation rounds among them.
    assert!(rounds(&h.fake) >= n + 2);
    assert_eq!(
        h.calls("container_status", "app").len(),
        1,
        "ContainerStatus calls of app: {:#?}",
        h.calls("container_status", "app")
    );
    assert!(running(&h.fake, "p", "app"));
    h.stop().await;
}
