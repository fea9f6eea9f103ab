//! The whole kubelet in process on the fake runtime, under tokio's paused clock: the SyncLoop,
//! pod workers, syncer, PLEG and runtime cache, probes and hooks exactly as in the binary, with
//! `rkubelet_cri::fake::FakeRuntime` behind the CRI seam and pods fed by a test source. Minutes of
//! kubelet time pass in milliseconds. These complement, never replace, the tests against real
//! containerd in crates/rkubelet/tests.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ExecAction, Lifecycle, LifecycleHandler, Pod, PodSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use rkubelet_cri::fake::{Call, FakeRuntime};
use rkubelet_cri::{api, CriClient};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{run_with, Deps};

const SOURCE: &str = "test";

pub(super) struct Harness {
    pub(super) fake: FakeRuntime,
    /// The in-memory cgroup manager pod cgroups are made with.
    cgroups: Arc<cgroups::fake::FakeManager>,
    pods: mpsc::Sender<Vec<Pod>>,
    cancel: CancellationToken,
    kubelet: JoinHandle<()>,
    dir: tempfile::TempDir,
}

impl Harness {
    /// A kubelet on a fresh fake runtime that has the busybox image, before any pods exist.
    pub(super) async fn start() -> Harness {
        let fake = FakeRuntime::new(Arc::new(crate::clock::now_unix_nanos));
        fake.add_image("busybox");
        Self::start_on(fake).await
    }

    pub(super) async fn start_on(fake: FakeRuntime) -> Harness {
        Self::start_with(fake, |_| {}).await
    }

    /// Like [`Harness::start_on`], with `tweak` applied to the config last.
    async fn start_with(
        fake: FakeRuntime,
        tweak: impl FnOnce(&mut crate::config::KubeletConfig),
    ) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cfg = crate::config::load(&Default::default())
            .expect("default config")
            .config;
        cfg.node_name = "fake-node".into();
        cfg.root_dir = dir.path().join("root");
        cfg.pod_logs_dir = dir.path().join("pods-logs");
        cfg.container_logs_dir = dir.path().join("containers");
        cfg.resolv_conf = Default::default();
        cfg.healthz_port = 0;
        cfg.read_only_port = 0;
        cfg.port = 0;
        cfg.static_pod_path = None;
        cfg.kubeconfig = None;
        // The host's swap is not the fake node's business, nor is its disk or memory: eviction
        // would read the real host's figures against the fake runtime's pods.
        cfg.cgroups.fail_swap_on = false;
        cfg.eviction.hard.clear();
        cfg.cgroups.eviction_hard.clear();
        tweak(&mut cfg);
        let cri = CriClient::with_backend(
            Arc::new(fake.clone()),
            "fake".into(),
            rkubelet_cri::DEFAULT_TIMEOUT,
        );
        let (pods, rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        let cgroups = Arc::new(cgroups::fake::FakeManager::default());
        // A /proc/sys of its own, every tunable at a value the kubelet must change: never the
        // host's, which the test process may not (and must not) touch.
        let proc_sys = dir.path().join("proc-sys");
        crate::cm::kernel_tunables::write_proc_sys(&proc_sys, &[Some("2"); 6]);
        let deps = Deps {
            cri,
            extra_source: Some((SOURCE, rx)),
            cgroups: Some(cgroups.clone()),
            proc_sys,
        };
        let stop = cancel.clone();
        let kubelet = tokio::spawn(async move {
            run_with(cfg, deps, stop).await.expect("kubelet runs");
        });
        Harness {
            fake,
            cgroups,
            pods,
            cancel,
            kubelet,
            dir,
        }
    }

    /// The source now wants exactly these pods.
    pub(super) async fn want(&self, pods: Vec<Pod>) {
        self.pods.send(pods).await.expect("kubelet is running");
    }

    /// Wants `p`, whose containers include `app`, and waits until `app` runs.
    pub(super) async fn run_app(&self, p: Pod) {
        let name = p.metadata.name.clone().unwrap_or_default();
        self.want(vec![p]).await;
        self.until("app running", Duration::from_secs(30), |f| {
            running(f, &name, "app")
        })
        .await;
    }

    /// Waits (kubelet time) until `f` holds; panics naming `what` after `within`.
    pub(super) async fn until(
        &self,
        what: &str,
        within: Duration,
        f: impl Fn(&FakeRuntime) -> bool,
    ) {
        let start = Instant::now();
        while !f(&self.fake) {
            assert!(
                start.elapsed() < within,
                "timed out after {within:?} (kubelet time) waiting for {what}; calls: {:#?}",
                self.fake.calls()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(super) fn calls(&self, op: &str, key: &str) -> Vec<Call> {
        self.fake
            .calls()
            .into_iter()
            .filter(|c| c.op == op && c.key == key)
            .collect()
    }

    pub(super) async fn stop(self) {
        self.cancel.cancel();
        self.kubelet.await.expect("kubelet task");
    }
}

/// The kubelet sets the kernel tunables it relies on (upstream `setupKernelTunables`) before
/// the first pod starts.
#[tokio::test(start_paused = true)]
async fn kernel_tunables_are_set_before_pods_start() {
    let h = Harness::start().await;
    h.run_app(pod("first", "uid-first", vec![container("app")]))
        .await;
    for (flag, want) in crate::cm::kernel_tunables::DESIRED {
        let path = h.dir.path().join("proc-sys").join(flag);
        let got = std::fs::read_to_string(&path).expect("read a tunable");
        assert_eq!(got.trim(), want.to_string(), "{flag}");
    }
    h.stop().await;
}

pub(super) fn running(f: &FakeRuntime, pod: &str, container: &str) -> bool {
    f.containers().iter().any(|c| {
        c.pod == pod && c.name == container && c.state == api::ContainerState::ContainerRunning
    })
}

pub(super) fn pod(name: &str, uid: &str, containers: Vec<Container>) -> Pod {
    let mut p = Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers,
            ..Default::default()
        }),
        ..Default::default()
    };
    crate::podutil::apply_api_defaults(&mut p);
    p
}

pub(super) fn container(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some("busybox".into()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["sleep".into(), "3600".into()]),
        ..Default::default()
    }
}

/// Sync -> running -> the process dies -> restarted at once the first time, then with
/// CrashLoopBackOff's 10 s, 20 s, 40 s between exit and the next start (upstream doubling).
#[tokio::test(start_paused = true)]
async fn crashing_container_restarts_with_crash_loop_backoff() {
    let h = Harness::start().await;
    h.run_app(pod("crashy", "uid-crashy", vec![container("app")]))
        .await;
    // From now on every start exits at once; then the running instance dies.
    h.fake.exit_on_start("app", 1);
    assert_eq!(h.fake.kill_container("app", 1), 1);
    h.until("five starts", Duration::from_secs(300), |f| {
        f.calls()
            .iter()
            .filter(|c| c.op == "start_container" && c.key == "app")
            .count()
            >= 5
    })
    .await;
    let starts: Vec<Instant> = h
        .calls("start_container", "app")
        .iter()
        .map(|c| c.at)
        .collect();
    let gaps: Vec<f64> = starts
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    // starts[1] is the first restart: PLEG notices the death within its 1 s relist and the
    // container starts again without backoff. Each later start waits the doubled backoff after
    // the previous instance exited (which was at its start), plus up to a relist of detection.
    assert!(gaps[1] >= 10.0 && gaps[1] < 12.0, "gaps {gaps:?}");
    assert!(gaps[2] >= 20.0 && gaps[2] < 22.0, "gaps {gaps:?}");
    assert!(gaps[3] >= 40.0 && gaps[3] < 42.0, "gaps {gaps:?}");
    // Restart counts go up by one per instance (the CRI attempt).
    let attempts: Vec<u32> = h
        .fake
        .containers()
        .iter()
        .filter(|c| c.name == "app")
        .map(|c| c.attempt)
        .collect();
    assert_eq!(attempts.iter().max(), Some(&4), "attempts {attempts:?}");
    h.stop().await;
}

/// The container GC (not the pod worker) bounds a crash-looping container's dead instances:
/// after a pass, the default policy leaves the newest dead instance besides the current one, and
/// the newest instance, whose attempt is the restart count, is never removed.
#[tokio::test(start_paused = true)]
async fn container_gc_bounds_dead_instances_and_keeps_the_newest() {
    let h = Harness::start().await;
    h.run_app(pod("loop", "uid-loop", vec![container("app")]))
        .await;
    h.fake.exit_on_start("app", 1);
    assert_eq!(h.fake.kill_container("app", 1), 1);
    h.until("six starts", Duration::from_secs(600), |f| {
        f.calls()
            .iter()
            .filter(|c| c.op == "start_container" && c.key == "app")
            .count()
            >= 6
    })
    .await;
    let removed_before = h
        .fake
        .calls()
        .iter()
        .filter(|c| c.op == "remove_container")
        .count();
    assert!(removed_before > 0, "earlier passes removed dead instances");
    // Every instance exits at once now: after the next pass one dead instance is left.
    h.until("one instance left", Duration::from_secs(120), |f| {
        f.containers().iter().filter(|c| c.name == "app").count() == 1
    })
    .await;
    let left: Vec<u32> = h
        .fake
        .containers()
        .iter()
        .filter(|c| c.name == "app")
        .map(|c| c.attempt)
        .collect();
    let starts = h.calls("start_container", "app").len() as u32;
    assert!(
        left[0] + 1 >= starts,
        "the newest instance stays: attempt {left:?}, {starts} starts"
    );
    h.stop().await;
}

/// Deletion runs preStop first, then stops the container with what is left of the grace period,
/// then removes the sandbox.
#[tokio::test(start_paused = true)]
async fn deletion_runs_pre_stop_then_stops_with_the_grace_period() {
    let h = Harness::start().await;
    let mut c = container("app");
    c.lifecycle = Some(Lifecycle {
        pre_stop: Some(LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(vec!["/bin/sh".into(), "-c".into(), "echo bye".into()]),
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let mut p = pod("web", "uid-web", vec![c]);
    if let Some(s) = p.spec.as_mut() {
        s.termination_grace_period_seconds = Some(45);
    }
    h.run_app(p).await;
    // The hook takes 5 s of the grace period.
    h.fake
        .delay("exec_sync", "/bin/sh -c echo bye", Duration::from_secs(5));
    h.want(vec![]).await;
    h.until("sandbox removed", Duration::from_secs(120), |f| {
        f.sandboxes().is_empty()
    })
    .await;
    let calls = h.fake.calls();
    let pos = |op: &str, key: &str| {
        calls
            .iter()
            .position(|c| c.op == op && c.key == key)
            .unwrap_or_else(|| panic!("no {op} {key}: {calls:#?}"))
    };
    let hook = pos("exec_sync", "/bin/sh -c echo bye");
    let stop = pos("stop_container", "app");
    let remove = pos("remove_pod_sandbox", "web");
    assert!(hook < stop && stop < remove, "order: {calls:#?}");
    // StopContainer gets the grace left after the hook: 45 s minus its 5 s.
    let grace: i64 = calls[stop].detail.parse().expect("stop grace");
    assert!((39..=40).contains(&grace), "stop grace {grace}");
    assert!(h.fake.containers().is_empty(), "containers removed");
    h.stop().await;
}

/// A force delete of a pod that stops slowly (its container ignores SIGTERM; 300 s of grace)
/// stops it again with the shorter grace period, as upstream's pod worker does when
/// `calculateEffectiveGracePeriod` shortens it: the pod is gone in seconds, not minutes.
#[tokio::test(start_paused = true)]
async fn a_force_delete_stops_a_slowly_stopping_pod_again_with_its_shorter_grace() {
    let h = Harness::start().await;
    h.fake.ignore_sigterm("app");
    // `fast` stops at once: the second stop must not stop it again from the read made before
    // the first (PLEG leaves a pod its worker acts on alone).
    let mut p = pod("web", "uid-web", vec![container("app"), container("fast")]);
    if let Some(s) = p.spec.as_mut() {
        s.termination_grace_period_seconds = Some(300);
    }
    h.run_app(p.clone()).await;
    let deleted = |grace: i64| {
        let mut d = p.clone();
        d.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        d.metadata.deletion_grace_period_seconds = Some(grace);
        d
    };
    let stops = || -> Vec<String> {
        h.calls("stop_container", "app")
            .into_iter()
            .map(|c| c.detail)
            .collect()
    };
    h.until("fast running", Duration::from_secs(30), |f| {
        running(f, "web", "fast")
    })
    .await;
    h.want(vec![deleted(300)]).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(running(&h.fake, "web", "app"), "still in its grace period");
    assert!(!running(&h.fake, "web", "fast"), "fast stopped at once");
    assert_eq!(stops(), ["300"]);
    // The API's force delete: the object shows a grace period of 0 before it goes.
    let forced = Instant::now();
    h.want(vec![deleted(0)]).await;
    h.until("sandbox removed", Duration::from_secs(60), |f| {
        f.sandboxes().is_empty()
    })
    .await;
    // Upstream's minimum grace period for a stop is 2 s.
    assert_eq!(stops(), ["300", "2"]);
    assert_eq!(
        h.calls("stop_container", "fast").len(),
        1,
        "fast stopped once"
    );
    assert!(
        forced.elapsed() < Duration::from_secs(10),
        "stopped {:?} after the force delete",
        forced.elapsed()
    );
    assert!(h.fake.containers().is_empty(), "containers removed");
    h.stop().await;
}

/// A kubelet running pod `web` whose container `app` has a postStart hook (`sleep 600`) that the
/// runtime holds for 600 s; returns once the hook runs.
async fn hanging_post_start() -> Harness {
    let h = Harness::start().await;
    h.fake
        .delay("exec_sync", "sleep 600", Duration::from_secs(600));
    let mut c = container("app");
    c.lifecycle = Some(Lifecycle {
        post_start: Some(LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(vec!["sleep".into(), "600".into()]),
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    h.want(vec![pod("web", "uid-web", vec![c])]).await;
    h.until("postStart hook running", Duration::from_secs(30), |f| {
        f.calls().iter().any(|c| c.op == "exec_sync")
    })
    .await;
    h
}

/// A pod removed while its postStart hook hangs is stopped at once: the termination stops the
/// sync that waits for the hook (upstream cancels the sync's context), rather than waiting out
/// the hook's 2 minutes.
#[tokio::test(start_paused = true)]
async fn a_pod_removed_during_a_hanging_post_start_hook_stops_at_once() {
    let h = hanging_post_start().await;
    let removed = Instant::now();
    h.want(vec![]).await;
    h.until("sandbox removed", Duration::from_secs(60), |f| {
        f.sandboxes().is_empty()
    })
    .await;
    assert!(
        removed.elapsed() < Duration::from_secs(10),
        "removed {:?} after the pod went",
        removed.elapsed()
    );
    assert!(h.fake.containers().is_empty(), "containers removed");
    h.stop().await;
}

/// A kubelet stopping while a postStart hook hangs exits at once and leaves the container
/// running, as upstream's process exit does: it neither waits for the hook (until the shutdown
/// deadline aborted the worker) nor kills anything.
#[tokio::test(start_paused = true)]
async fn a_stopping_kubelet_does_not_wait_for_a_hanging_post_start_hook() {
    let h = hanging_post_start().await;
    let fake = h.fake.clone();
    let stopping = Instant::now();
    h.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "the kubelet took {:?} to stop",
        stopping.elapsed()
    );
    assert!(
        running(&fake, "web", "app"),
        "the container is left running"
    );
    assert!(
        !fake.calls().iter().any(|c| c.op == "stop_container"),
        "nothing stopped: {:#?}",
        fake.calls()
    );
}

/// A fake runtime with the busybox image and a running pod no source wants (`orphan`).
async fn runtime_with_orphan() -> FakeRuntime {
    let fake = FakeRuntime::new(Arc::new(crate::clock::now_unix_nanos));
    fake.add_image("busybox");
    let cri = CriClient::with_backend(
        Arc::new(fake.clone()),
        "fake".into(),
        Duration::from_secs(5),
    );
    let labels: std::collections::HashMap<String, String> = [
        ("io.kubernetes.pod.uid", "uid-orphan"),
        ("io.kubernetes.pod.name", "orphan"),
        ("io.kubernetes.pod.namespace", "default"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let sb = cri
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(api::PodSandboxConfig {
                metadata: Some(api::PodSandboxMetadata {
                    name: "orphan".into(),
                    uid: "uid-orphan".into(),
                    namespace: "default".into(),
                    attempt: 0,
                }),
                labels: labels.clone(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("sandbox")
        .pod_sandbox_id;
    let id = cri
        .create_container(api::CreateContainerRequest {
            pod_sandbox_id: sb,
            config: Some(api::ContainerConfig {
                metadata: Some(api::ContainerMetadata {
                    name: "leftover".into(),
                    attempt: 0,
                }),
                image: Some(api::ImageSpec {
                    image: "busybox".into(),
                    ..Default::default()
                }),
                labels,
                ..Default::default()
            }),
            sandbox_config: None,
        })
        .await
        .expect("container")
        .container_id;
    cri.start_container(api::StartContainerRequest { container_id: id })
        .await
        .expect("start");
    fake
}

/// A pod the runtime has that no source wants (left from before a restart) is stopped and
/// removed once the sources are read, without any API object or hook.
#[tokio::test(start_paused = true)]
async fn runtime_only_pod_is_killed_and_removed() {
    let fake = runtime_with_orphan().await;
    let h = Harness::start_on(fake).await;
    // The source is read (and wants nothing): housekeeping may now clean up.
    h.want(vec![]).await;
    h.until("orphan removed", Duration::from_secs(60), |f| {
        f.sandboxes().is_empty() && f.containers().is_empty()
    })
    .await;
    let stop = h.calls("stop_container", "leftover");
    assert_eq!(stop.len(), 1, "stopped once");
    assert_eq!(stop[0].detail, "2", "runtime-only grace");
    assert!(
        h.fake.calls().iter().all(|c| c.op != "exec_sync"),
        "no hooks for a pod without a spec"
    );
    h.stop().await;
}

/// `podHousekeepingPeriod`: runtime pods no source wants are only looked at by housekeeping,
/// so with a 30 s period the orphan outlives the default 2 s and goes at the next pass.
#[tokio::test(start_paused = true)]
async fn housekeeping_runs_every_pod_housekeeping_period() {
    let fake = runtime_with_orphan().await;
    let h = Harness::start_with(fake, |cfg| {
        cfg.pod_housekeeping_period = Duration::from_secs(30);
    })
    .await;
    let start = Instant::now();
    h.want(vec![]).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(
        h.calls("stop_container", "leftover").is_empty(),
        "no housekeeping pass before the period: {:#?}",
        h.fake.calls()
    );
    h.until("orphan removed", Duration::from_secs(60), |f| {
        f.sandboxes().is_empty() && f.containers().is_empty()
    })
    .await;
    let stopped = h.calls("stop_container", "leftover");
    assert_eq!(stopped.len(), 1);
    assert!(
        start.elapsed() >= Duration::from_secs(28),
        "{:?}",
        start.elapsed()
    );
    h.stop().await;
}

/// A new pod whose name is held by a terminating pod of another UID starts only once the old
/// one is gone (upstream: pods are keyed by full name while terminating).
#[tokio::test(start_paused = true)]
async fn reused_name_waits_for_the_old_pod() {
    let h = Harness::start().await;
    h.want(vec![pod("db", "uid-old", vec![container("main")])])
        .await;
    h.until("old running", Duration::from_secs(30), |f| {
        running(f, "db", "main")
    })
    .await;
    // Stopping the old pod takes 20 s.
    h.fake
        .delay("stop_container", "main", Duration::from_secs(20));
    h.want(vec![pod("db", "uid-new", vec![container("main")])])
        .await;
    h.until("new sandbox", Duration::from_secs(120), |f| {
        f.calls()
            .iter()
            .any(|c| c.op == "run_pod_sandbox" && c.detail == "uid-new")
    })
    .await;
    let calls = h.fake.calls();
    let removed_old = calls
        .iter()
        .position(|c| c.op == "remove_pod_sandbox" && c.detail == "uid-old")
        .expect("old sandbox removed");
    let new_sandbox = calls
        .iter()
        .position(|c| c.op == "run_pod_sandbox" && c.detail == "uid-new")
        .expect("new sandbox");
    assert!(removed_old < new_sandbox, "calls: {calls:#?}");
    assert!(
        calls[new_sandbox].at - calls[removed_old].at < Duration::from_secs(3),
        "the new pod starts promptly once the name is free"
    );
    h.until("new running", Duration::from_secs(30), |f| {
        running(f, "db", "main")
    })
    .await;
    h.stop().await;
}

/// A runtime call that hangs for one pod holds up neither the SyncLoop nor other pods.
#[tokio::test(start_paused = true)]
async fn slow_runtime_call_does_not_block_other_pods() {
    let h = Harness::start().await;
    h.fake
        .delay("run_pod_sandbox", "slow", Duration::from_secs(3600));
    h.want(vec![pod("slow", "uid-slow", vec![container("a")])])
        .await;
    h.until(
        "slow pod's sandbox call made",
        Duration::from_secs(30),
        |f| f.calls().iter().any(|c| c.op == "run_pod_sandbox"),
    )
    .await;
    let asked = Instant::now();
    h.want(vec![
        pod("slow", "uid-slow", vec![container("a")]),
        pod("fast", "uid-fast", vec![container("b")]),
    ])
    .await;
    h.until("fast running", Duration::from_secs(30), |f| {
        running(f, "fast", "b")
    })
    .await;
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    assert!(
        !h.fake.ready_sandboxes().contains(&"slow".to_string()),
        "the slow call is still pending"
    );
    h.stop().await;
}

/// `c` with requests equal to limits of `cpu` and `memory` (a Guaranteed pod's container).
fn guaranteed(mut c: Container, cpu: &str, memory: &str) -> Container {
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let limits: std::collections::BTreeMap<String, Quantity> = [
        ("cpu".to_string(), Quantity(cpu.into())),
        ("memory".to_string(), Quantity(memory.into())),
    ]
    .into();
    c.resources = Some(ResourceRequirements {
        limits: Some(limits.clone()),
        requests: Some(limits),
        ..Default::default()
    });
    c
}

/// The pod's cgroup exists, with upstream's values, before its sandbox runs, under the QoS tiers
/// made at start; a deleted pod's cgroup goes once nothing runs in it, before its sandbox is
/// removed (upstream `SyncTerminatedPod`: the cgroup, then the object's deletion; the sandbox
/// is the runtime's removal, after both).
#[tokio::test(start_paused = true)]
async fn pod_cgroup_made_before_the_sandbox_and_removed_before_it() {
    use cgroups::{CgroupManager as _, CgroupName, ResourceConfig};
    let h = Harness::start().await;
    let kubepods = CgroupName::new(["kubepods"]);
    // The container manager starts with the kubelet, before any pod is synced.
    let start = Instant::now();
    while !["burstable", "besteffort"]
        .iter()
        .all(|t| h.cgroups.exists(&kubepods.child(*t)))
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "QoS tiers made at start"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        h.cgroups
            .config(&kubepods.child("besteffort"))
            .and_then(|c| c.cpu_shares),
        Some(2)
    );
    let c = guaranteed(container("app"), "500m", "64Mi");
    h.run_app(pod("web", "uid-web", vec![c])).await;
    let pod_cg = kubepods.child("poduid-web");
    let got = h.cgroups.config(&pod_cg).expect("pod cgroup exists");
    assert_eq!(
        got,
        ResourceConfig {
            cpu_shares: Some(512),
            cpu_quota: Some(50_000),
            cpu_period: Some(100_000),
            memory_limit: Some(64 << 20),
            ..Default::default()
        }
    );
    // The runtime takes 30 s to remove the sandbox.
    h.fake
        .delay("remove_pod_sandbox", "web", Duration::from_secs(30));
    h.want(vec![]).await;
    let start = Instant::now();
    while h.cgroups.exists(&pod_cg) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "pod cgroup still there: {:?}",
            h.cgroups.calls()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        h.fake.calls().iter().any(|c| c.op == "stop_pod_sandbox"),
        "the cgroup goes once the sandbox is stopped"
    );
    assert_eq!(h.fake.sandboxes().len(), 1, "the sandbox is removed after");
    h.until("sandbox removed", Duration::from_secs(60), |f| {
        f.sandboxes().is_empty()
    })
    .await;
    let calls = h.cgroups.calls();
    let reduce = calls
        .iter()
        .position(|c| c.starts_with("update /kubepods/poduid-web"));
    let destroy = calls.iter().position(|c| {
        c.starts_with("remove_if_empty /kubepods/poduid-web")
            || c.starts_with("destroy /kubepods/poduid-web")
    });
    assert!(
        matches!((reduce, destroy), (Some(r), Some(d)) if r < d),
        "cpu shares reduced once stopped, then destroyed: {calls:#?}"
    );
    h.stop().await;
}

/// A deleted pod's empty cgroup goes with one rmdir per hierarchy and nothing is killed; one
/// that still holds a process (left by a crashed shim, say) is killed and destroyed, as upstream
/// `podContainerManagerImpl.Destroy` does.
#[tokio::test(start_paused = true)]
async fn pod_cgroup_goes_by_rmdir_when_empty_and_is_killed_when_not() {
    use cgroups::CgroupManager;
    let h = Harness::start().await;
    let kubepods = cgroups::CgroupName::new(["kubepods"]);
    let c = guaranteed(container("app"), "100m", "16Mi");
    h.run_app(pod("empty", "uid-empty", vec![c.clone()])).await;
    h.run_app(pod("left", "uid-left", vec![c])).await;
    let (empty_cg, left_cg) = (
        kubepods.child("poduid-empty"),
        kubepods.child("poduid-left"),
    );
    assert!(h.cgroups.exists(&empty_cg) && h.cgroups.exists(&left_cg));
    h.cgroups.set_pids(&left_cg.child("stray"), vec![4242]);
    h.want(vec![]).await;
    let start = Instant::now();
    while h.cgroups.exists(&empty_cg) || h.cgroups.exists(&left_cg) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "pod cgroups still there: {:#?}",
            h.cgroups.calls()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let calls = h.cgroups.calls();
    let has = |c: &str| calls.iter().any(|x| x == c);
    assert!(has("remove_if_empty /kubepods/poduid-empty"), "{calls:#?}");
    assert!(
        !has("kill_all /kubepods/poduid-empty") && !has("destroy /kubepods/poduid-empty"),
        "an empty cgroup is neither walked nor killed: {calls:#?}"
    );
    for c in [
        "remove_if_empty /kubepods/poduid-left",
        "kill_all /kubepods/poduid-left",
        "destroy /kubepods/poduid-left",
    ] {
        assert!(has(c), "{c} missing: {calls:#?}");
    }
    assert!(
        !calls
            .iter()
            .any(|x| x.contains("/burstable/poduid-") || x.contains("/besteffort/poduid-")),
        "a known pod's cgroup is looked for in its own QoS tier only: {calls:#?}"
    );
    h.stop().await;
}

/// A pod cgroup whose create failed half-way (made, a limit not written) is not kept: the pod
/// does not start in it, and the retry makes it whole, limits and all.
#[tokio::test(start_paused = true)]
async fn half_made_pod_cgroup_is_remade_whole() {
    use cgroups::{CgroupName, ResourceConfig};
    let h = Harness::start().await;
    let pod_cg = CgroupName::new(["kubepods", "poduid-lim"]);
    h.cgroups.fail(
        "create_half",
        &pod_cg,
        "cpu.weight: No such file or directory",
    );
    let c = guaranteed(container("app"), "250m", "32Mi");
    h.want(vec![pod("lim", "uid-lim", vec![c])]).await;
    let start = Instant::now();
    while !h
        .cgroups
        .calls()
        .iter()
        .any(|c| c == "destroy /kubepods/poduid-lim")
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "half-made cgroup removed: {:#?}",
            h.cgroups.calls()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        h.fake.sandboxes().is_empty(),
        "no sandbox without the cgroup"
    );
    h.cgroups.clear_failures();
    h.until("app running", Duration::from_secs(60), |f| {
        running(f, "lim", "app")
    })
    .await;
    assert_eq!(
        h.cgroups.config(&pod_cg),
        Some(ResourceConfig {
            cpu_shares: Some(256),
            cpu_quota: Some(25_000),
            cpu_period: Some(100_000),
            memory_limit: Some(32 << 20),
            ..Default::default()
        })
    );
    h.stop().await;
}

/// A pod that comes back with the same UID right after its cleanup (a static pod whose manifest
/// was moved out and back) starts afresh: the PLEG cache's read from before the cleanup is not
/// taken for its state, so its sandbox is attempt 0, its container restart count 0, and it gets
/// one sandbox, not one per stale read.
#[tokio::test(start_paused = true)]
async fn a_uid_back_right_after_its_cleanup_starts_afresh() {
    let h = Harness::start().await;
    let p = pod("web", "uid-web", vec![container("main")]);
    h.want(vec![p.clone()]).await;
    h.until("running", Duration::from_secs(30), |f| {
        running(f, "web", "main")
    })
    .await;
    h.want(vec![]).await;
    h.until("removed", Duration::from_secs(60), |f| {
        f.sandboxes().is_empty() && f.containers().is_empty()
    })
    .await;
    h.want(vec![p]).await;
    h.until("running again", Duration::from_secs(30), |f| {
        running(f, "web", "main")
    })
    .await;
    // Long enough for a sync on a stale read to have made another sandbox.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let containers = h.fake.containers();
    assert_eq!(containers.len(), 1, "{containers:?}");
    assert_eq!(containers[0].attempt, 0, "restart count: {containers:?}");
    let sandboxes = h.calls("run_pod_sandbox", "web");
    assert_eq!(
        sandboxes.len(),
        2,
        "one sandbox per incarnation: {sandboxes:#?}"
    );
    assert_eq!(h.fake.sandboxes().len(), 1);
    h.stop().await;
}
