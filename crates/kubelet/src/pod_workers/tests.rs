//! The lifecycle table and worker tasks on a recording syncer (no runtime at all): which of the
//! four operations run, in which order, with which grace, as records move through their phases.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;

/// Records every operation as "op uid [grace]".
#[derive(Default)]
struct Recorder {
    ops: Mutex<Vec<String>>,
}

impl Recorder {
    fn push(&self, s: String) {
        self.ops.lock().unwrap_or_else(|e| e.into_inner()).push(s);
    }
    fn ops(&self) -> Vec<String> {
        self.ops.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl PodSyncer for Recorder {
    type State = ();

    fn new_state(&self, pod: &Pod, after: Option<Instant>) {
        if after.is_some() {
            self.push(format!(
                "new_state {} after a finished worker",
                podutil::uid(pod)
            ));
        }
    }

    async fn sync_pod(
        &self,
        _: &mut (),
        pod: &Arc<Pod>,
        terminating: &CancellationToken,
    ) -> SyncOutcome {
        let uid = podutil::uid(pod);
        self.push(format!("sync {uid}"));
        // A "slow" pod's sync waits 10 min (an image pull, a postStart hook) unless it is left.
        if podutil::name(pod).starts_with("slow") {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(600)) => {}
                _ = terminating.cancelled() => self.push(format!("sync left {uid}")),
            }
        }
        SyncOutcome::default()
    }

    async fn sync_terminating_pod(
        &self,
        _: &mut (),
        pod: &Arc<Pod>,
        grace: Option<Duration>,
        failure: Option<&PodFailure>,
        shortened: &CancellationToken,
    ) -> Result<(), RuntimeError> {
        let uid = podutil::uid(pod);
        match failure {
            Some(f) => self.push(format!("terminating {uid} {grace:?} {}", f.reason)),
            None => self.push(format!("terminating {uid} {grace:?}")),
        }
        // Its containers take the whole grace period to stop (they ignore SIGTERM).
        tokio::select! {
            _ = tokio::time::sleep(grace.unwrap_or_default()) => Ok(()),
            _ = shortened.cancelled() => {
                self.push(format!("interrupted {uid}"));
                Err(RuntimeError::GraceShortened)
            }
        }
    }

    async fn sync_terminating_runtime_pod(
        &self,
        pod: &RuntimePodRef,
        grace: Duration,
    ) -> Result<(), RuntimeError> {
        self.push(format!("runtime {} {grace:?}", pod.uid));
        Ok(())
    }

    async fn sync_terminated_pod(&self, _: &mut (), pod: &Arc<Pod>) -> Result<(), RuntimeError> {
        self.push(format!("terminated {}", podutil::uid(pod)));
        Ok(())
    }
}

fn pod(name: &str, uid: &str) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        ..Default::default()
    })
}

/// The failure a memory eviction gives a pod.
fn memory_eviction() -> PodFailure {
    PodFailure {
        reason: "Evicted".into(),
        message: "The node was low on resource: memory. ".into(),
    }
}

struct Table {
    syncer: Arc<Recorder>,
    workers: PodWorkers<Recorder>,
    events: mpsc::UnboundedReceiver<WorkerEvent>,
}

impl Table {
    fn new() -> Table {
        let syncer = Arc::new(Recorder::default());
        let (tx, events) = mpsc::unbounded_channel();
        let workers = PodWorkers::new(syncer.clone(), tx, CancellationToken::new());
        Table {
            syncer,
            workers,
            events,
        }
    }

    /// Applies worker events until `uid` finished, as the SyncLoop does; returns what to start.
    async fn until_finished(&mut self, uid: &str) -> Vec<Arc<Pod>> {
        loop {
            match self.events.recv().await.expect("worker events") {
                WorkerEvent::Terminated { uid: u } => self.workers.terminated(&u),
                WorkerEvent::Finished { uid: u, pod } if u == uid => {
                    return self.workers.finished(&u, pod.as_deref());
                }
                _ => {}
            }
        }
    }

    /// Lets the workers run what they were handed.
    async fn settle(&self) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn termination_is_final_until_the_pod_is_added_again() {
    let mut t = Table::new();
    let p = pod("a", "u1");
    t.workers.update(p.clone());
    t.settle().await;
    t.workers.terminate(p.clone(), Some(Duration::from_secs(5)));
    // A second termination with a longer grace period changes nothing.
    t.workers
        .terminate(p.clone(), Some(Duration::from_secs(10)));
    assert!(t.until_finished("u1").await.is_empty());
    assert!(matches!(
        t.workers.phase("u1"),
        Some(Phase::Finished { .. })
    ));
    // A late wake (a PLEG event for the removed containers) starts nothing.
    t.workers.sync("u1");
    t.settle().await;
    assert_eq!(
        t.syncer.ops(),
        ["sync u1", "terminating u1 Some(5s)", "terminated u1"]
    );
    // Added again by its source: a new worker, whose state is told when the old one finished
    // (its first read must not be the cache's from before the cleanup).
    t.workers.update(p.clone());
    t.settle().await;
    assert_eq!(
        t.syncer.ops()[3..],
        ["new_state u1 after a finished worker", "sync u1"]
    );
    assert_eq!(t.workers.phase("u1"), Some(Phase::Syncing));
}

#[tokio::test(start_paused = true)]
async fn a_uid_forgotten_after_a_listing_starts_afresh() {
    let mut t = Table::new();
    let p = pod("a", "u1");
    t.workers.update(p.clone());
    t.settle().await;
    t.workers.terminate(p.clone(), None);
    assert!(t.until_finished("u1").await.is_empty());
    // A runtime listing taken after the cleanup: the PLEG cache no longer holds the pod's
    // old read, and the record goes.
    tokio::time::advance(Duration::from_millis(1)).await;
    t.workers.forget_finished(Instant::now());
    assert!(!t.workers.knows("u1"));
    t.workers.update(p);
    t.settle().await;
    assert_eq!(
        t.syncer.ops(),
        [
            "sync u1",
            "terminating u1 Some(30s)",
            "terminated u1",
            "sync u1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_name_held_by_a_terminating_pod_makes_the_new_one_wait() {
    let mut t = Table::new();
    let old = pod("db", "old");
    t.workers.update(old.clone());
    t.settle().await;
    t.workers.terminate(old, None);
    t.workers.update(pod("db", "new"));
    assert_eq!(t.workers.phase("new"), Some(Phase::WaitingForName));
    let next = t.until_finished("old").await;
    assert_eq!(next.len(), 1, "the waiting pod is handed back to start");
    for p in next {
        t.workers.update(p);
    }
    t.settle().await;
    assert_eq!(t.workers.phase("new"), Some(Phase::Syncing));
    let ops = t.syncer.ops();
    let terminated = ops.iter().position(|o| o == "terminated old");
    let started = ops.iter().position(|o| o == "sync new");
    assert!(terminated < started && started.is_some(), "{ops:?}");
}

#[tokio::test(start_paused = true)]
async fn a_pod_readded_while_terminating_restarts_after_it_finished() {
    let mut t = Table::new();
    let p = pod("web", "u");
    t.workers.update(p.clone());
    t.settle().await;
    t.workers.terminate(p.clone(), None);
    // The source wants it again before the worker finished (upstream restartRequested).
    t.workers.add(p.clone());
    let next = t.until_finished("u").await;
    assert_eq!(next.len(), 1);
    for p in next {
        t.workers.update(p);
    }
    t.settle().await;
    assert_eq!(
        t.syncer.ops(),
        [
            "sync u",
            "terminating u Some(30s)",
            "terminated u",
            "new_state u after a finished worker",
            "sync u"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn runtime_only_pods_get_their_own_operation_and_no_spec() {
    let mut t = Table::new();
    let r = RuntimePodRef {
        uid: "orphan".into(),
        name: "o".into(),
        namespace: "default".into(),
    };
    t.workers
        .terminate_runtime_pod(r.clone(), Duration::from_secs(2));
    // Asked twice (two housekeeping passes): one worker.
    t.workers.terminate_runtime_pod(r, Duration::from_secs(2));
    assert!(t.until_finished("orphan").await.is_empty());
    assert_eq!(t.syncer.ops(), ["runtime orphan 2s"]);
    assert!(t.workers.get("orphan").is_some_and(|r| r.pod.is_none()));
}

#[tokio::test(start_paused = true)]
async fn an_eviction_terminates_a_syncing_pod_once_with_its_failure() {
    let mut t = Table::new();
    let p = pod("a", "u1");
    // Not known yet: nothing to evict.
    let failure = memory_eviction();
    assert!(!t
        .workers
        .evict(p.clone(), Duration::from_secs(1), failure.clone()));
    t.workers.update(p.clone());
    t.settle().await;
    assert!(t
        .workers
        .evict(p.clone(), Duration::from_secs(1), failure.clone()));
    // Already terminating with 1 s: a second eviction's grace period is no shorter, so it
    // changes nothing.
    assert!(!t.workers.evict(p.clone(), Duration::ZERO, failure));
    assert!(t.until_finished("u1").await.is_empty());
    assert_eq!(
        t.syncer.ops(),
        [
            "sync u1",
            "terminating u1 Some(1s) Evicted",
            "terminated u1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_shorter_grace_period_stops_a_terminating_pod_again_with_it() {
    let mut t = Table::new();
    let mut p = pod("a", "u1");
    Arc::make_mut(&mut p).spec = Some(k8s_openapi::api::core::v1::PodSpec {
        termination_grace_period_seconds: Some(300),
        ..Default::default()
    });
    t.workers.update(p.clone());
    t.settle().await;
    // Deleted with the pod's own grace period; its containers take all of it.
    let start = Instant::now();
    t.workers.terminate(p.clone(), None);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        t.workers.phase("u1"),
        Some(Phase::Terminating {
            grace: Duration::from_secs(300)
        })
    );
    // A force delete: the API shows the deletion's grace period as 0, which upstream's floor
    // makes 1 s.
    let mut forced = (*p).clone();
    forced.metadata.deletion_grace_period_seconds = Some(0);
    t.workers.terminate(Arc::new(forced.clone()), None);
    assert_eq!(
        t.workers.phase("u1"),
        Some(Phase::Terminating {
            grace: Duration::from_secs(1)
        })
    );
    // Its removal from the source after that changes nothing: 1 s is no shorter.
    t.workers.terminate(Arc::new(forced), None);
    assert!(t.until_finished("u1").await.is_empty());
    // 3 s in the 300 s stop, then the 1 s one: not the 300 s.
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(
        t.syncer.ops(),
        [
            "sync u1",
            "terminating u1 Some(300s)",
            "interrupted u1",
            "terminating u1 Some(1s)",
            "terminated u1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_evicted_pod_keeps_its_failure_when_its_deletion_shortens_the_stop() {
    let mut t = Table::new();
    let p = pod("a", "u1");
    t.workers.update(p.clone());
    t.settle().await;
    let failure = memory_eviction();
    assert!(t.workers.evict(p.clone(), Duration::from_secs(30), failure));
    t.settle().await;
    t.workers.terminate(p, Some(Duration::from_secs(2)));
    assert!(t.until_finished("u1").await.is_empty());
    assert_eq!(
        t.syncer.ops(),
        [
            "sync u1",
            "terminating u1 Some(30s) Evicted",
            "interrupted u1",
            "terminating u1 Some(2s) Evicted",
            "terminated u1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_eviction_shortens_the_stop_of_a_deleted_pod_and_fails_it() {
    let mut t = Table::new();
    let p = pod("a", "u1");
    t.workers.update(p.clone());
    t.settle().await;
    t.workers
        .terminate(p.clone(), Some(Duration::from_secs(300)));
    t.settle().await;
    let failure = memory_eviction();
    // Upstream's eviction manager counts a terminating pod active and may pick it: its hard
    // eviction's 1 s replaces the deletion's 300 s.
    assert!(t
        .workers
        .evict(p.clone(), Duration::from_secs(1), failure.clone()));
    t.settle().await;
    assert_eq!(
        t.workers.phase("u1"),
        Some(Phase::Terminating {
            grace: Duration::from_secs(1)
        })
    );
    assert!(t.until_finished("u1").await.is_empty());
    assert_eq!(
        t.syncer.ops(),
        [
            "sync u1",
            "terminating u1 Some(300s)",
            "interrupted u1",
            "terminating u1 Some(1s) Evicted",
            "terminated u1"
        ]
    );
    // Finished: nothing left to evict.
    assert!(!t.workers.evict(p, Duration::from_secs(1), failure));
}

/// A pod its source wanted again while it stopped restarts after an eviction shortened that
/// stop: the eviction is the kubelet's, not the source's (upstream's kill keeps
/// `restartRequested`). A second, no shorter, eviction changes nothing.
#[tokio::test(start_paused = true)]
async fn an_eviction_keeps_a_restart_the_source_asked_for() {
    let mut t = Table::new();
    let p = pod("web", "u");
    t.workers.update(p.clone());
    t.settle().await;
    t.workers
        .terminate(p.clone(), Some(Duration::from_secs(300)));
    t.settle().await;
    t.workers.add(p.clone());
    let failure = memory_eviction();
    assert!(t
        .workers
        .evict(p.clone(), Duration::from_secs(1), failure.clone()));
    assert!(!t.workers.evict(p.clone(), Duration::from_secs(5), failure));
    let next = t.until_finished("u").await;
    assert_eq!(next.len(), 1, "restarted after the evicted stop");
    assert_eq!(
        t.syncer.ops(),
        [
            "sync u",
            "terminating u Some(300s)",
            "interrupted u",
            "terminating u Some(1s) Evicted",
            "terminated u"
        ]
    );
}

/// An update of a pod being evicted (its own Failed status coming back through the watch, a
/// label change) does not restart it once it finished: only its source adding it again does
/// (upstream sets `restartRequested` on `SyncPodCreate` alone). Before, any update did, and an
/// evicted API pod ran again after its stop.
#[tokio::test(start_paused = true)]
async fn an_update_of_an_evicted_pod_does_not_restart_it() {
    let mut t = Table::new();
    let p = pod("web", "u");
    t.workers.update(p.clone());
    t.settle().await;
    let failure = memory_eviction();
    assert!(t.workers.evict(p.clone(), Duration::from_secs(30), failure));
    t.settle().await;
    t.workers.update(p.clone());
    assert!(t.until_finished("u").await.is_empty(), "not restarted");
    assert_eq!(
        t.syncer.ops(),
        ["sync u", "terminating u Some(30s) Evicted", "terminated u"]
    );
}

/// Upstream `calculateEffectiveGracePeriod` for a pod's first termination: the request, else the
/// deletion's grace period, else the spec's, else 30 s; never under 1 s.
#[test]
fn effective_grace_period_table() {
    let secs = Duration::from_secs;
    // (requested s, deletionGracePeriodSeconds, terminationGracePeriodSeconds, effective)
    type Row = (Option<u64>, Option<i64>, Option<i64>, Duration);
    let rows: [Row; 7] = [
        (None, None, None, secs(30)),
        (None, None, Some(45), secs(45)),
        (None, Some(10), Some(45), secs(10)),
        (None, Some(0), Some(45), secs(1)),
        (Some(5), Some(10), Some(45), secs(5)),
        (Some(0), None, None, secs(1)),
        (None, Some(-3), None, secs(1)),
    ];
    for (requested, deletion, spec, want) in rows {
        let mut p = (*pod("a", "u")).clone();
        p.metadata.deletion_grace_period_seconds = deletion;
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            termination_grace_period_seconds: spec,
            ..Default::default()
        });
        let got = effective_grace(&p, requested.map(secs));
        assert_eq!(
            got, want,
            "requested {requested:?} deletion {deletion:?} spec {spec:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_termination_stops_a_sync_that_waits() {
    let mut t = Table::new();
    let p = pod("slow", "u1");
    t.workers.update(p.clone());
    t.settle().await;
    let deleted = Instant::now();
    t.workers.terminate(p, Some(Duration::from_secs(2)));
    assert!(t.until_finished("u1").await.is_empty());
    assert!(
        deleted.elapsed() < Duration::from_secs(3),
        "{:?}",
        deleted.elapsed()
    );
    assert_eq!(
        t.syncer.ops(),
        [
            "sync u1",
            "sync left u1",
            "terminating u1 Some(2s)",
            "terminated u1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_spec_change_during_a_sync_is_synced_after_it() {
    let mut t = Table::new();
    let p = pod("slow", "u1");
    t.workers.update(p.clone());
    t.settle().await;
    // A newer spec does not stop the sync, and is not lost either: the next sync runs once
    // this one is done.
    let mut newer = (*p).clone();
    newer.metadata.labels = Some([("v".to_string(), "2".to_string())].into());
    t.workers.update(Arc::new(newer));
    tokio::time::sleep(Duration::from_secs(601)).await;
    assert_eq!(t.syncer.ops(), ["sync u1", "sync u1"]);
    assert_eq!(t.workers.phase("u1"), Some(Phase::Syncing));
}

#[tokio::test(start_paused = true)]
async fn a_stopping_kubelet_leaves_pods_where_their_workers_are() {
    let mut t = Table::new();
    // One pod waits in its sync (a hung postStart hook), one in a 300 s stop.
    t.workers.update(pod("slow", "u1"));
    let p = pod("a", "u2");
    t.workers.update(p.clone());
    t.settle().await;
    t.workers.terminate(p, Some(Duration::from_secs(300)));
    t.settle().await;
    let Table {
        syncer, workers, ..
    } = t;
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(60), workers.shutdown())
        .await
        .expect("workers stop when the kubelet does, not when their operations end");
    assert!(started.elapsed() < Duration::from_secs(1));
    // Neither operation was finished, stopped or followed by another: the next kubelet takes the
    // pods up from what the runtime has.
    assert_eq!(
        syncer.ops(),
        ["sync u1", "sync u2", "terminating u2 Some(300s)"]
    );
}

/// A static pod's mirror stays while its containers stop and goes once they have (upstream
/// `IsPodForMirrorPodTerminatingByFullName`), not after the sandbox's removal.
#[tokio::test(start_paused = true)]
async fn a_pod_is_stopping_until_it_terminated_not_until_it_finished() {
    let mut t = Table::new();
    let p = pod("web", "u");
    t.workers.update(p.clone());
    t.settle().await;
    let stopping = |t: &Table| -> Vec<String> {
        t.workers
            .stopping_pod("u")
            .map(|p| podutil::uid(p).to_string())
            .into_iter()
            .collect()
    };
    assert!(stopping(&t).is_empty(), "a syncing pod is not stopping");
    t.workers.terminate(p, Some(Duration::from_secs(5)));
    t.settle().await;
    assert_eq!(stopping(&t), ["u"], "its containers take the grace period");
    loop {
        match t.events.recv().await.expect("worker events") {
            WorkerEvent::Terminated { uid } => break t.workers.terminated(&uid),
            WorkerEvent::Synced { .. } => {}
            other => panic!("expected Terminated, got {other:?}"),
        }
    }
    assert_eq!(t.workers.phase("u"), Some(Phase::Terminated));
    assert!(
        stopping(&t).is_empty(),
        "terminated, its cleanup still running: its mirror may go"
    );
    assert!(t.until_finished("u").await.is_empty());
}
