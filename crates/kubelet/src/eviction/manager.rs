//! The eviction manager task (upstream `managerImpl.Start` and `synchronize`): one pass every
//! monitoring interval (10 s), and at once when the memory fast path sees a memory threshold
//! crossed. Upstream's fast path is a memcg threshold notification (`kernelMemcgNotification`,
//! off by default); here the root cgroup's working set (and kubepods') is polled every second
//! instead, which costs two small cgroup file reads and catches the crossing within a second on
//! cgroup v1 and v2 alike. After evicting a pod the manager waits (up to 30 s) for it to be
//! cleaned up before the next pass, as upstream does, so that one pass evicts one pod.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::{api, CriClient};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::rank::{self, is_critical};
use super::signals::{self, Observations, PodsMemory, Tracker};
use super::{EvictionHandle, EvictionRequest, NodeReclaim, Pressure, Signal, Threshold, REASON};
use crate::cm::ContainerManager;
use crate::events::{self, EventType, Recorder};
use crate::pleg::RuntimePods;
use crate::podutil;
use crate::stats::StatsSource;
use crate::status::compute::PodFailure;

/// Upstream's `evictionMonitoringPeriod`.
pub const MONITORING_INTERVAL: Duration = Duration::from_secs(10);
/// How often the memory fast path looks at the node's memory.
pub const MEMORY_POLL: Duration = Duration::from_secs(1);
/// Upstream `podCleanupTimeout` / `podCleanupPollFreq`.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
const CLEANUP_POLL: Duration = Duration::from_secs(1);
/// Upstream `immediateEvictionGracePeriodSeconds`: what hard evictions and local storage
/// evictions give the pod.
pub const IMMEDIATE_GRACE: Duration = Duration::from_secs(1);

/// What the manager is built from.
pub struct Setup {
    pub thresholds: Vec<Threshold>,
    /// `evictionMaxPodGracePeriod`: the grace soft evictions give.
    pub max_pod_grace_period: Duration,
    pub pressure_transition_period: Duration,
    pub monitoring_interval: Duration,
    /// `kernelMemcgNotification`: memory thresholds watched through memcg threshold
    /// notifications (cgroup v1) instead of the 1 s poll.
    pub kernel_memcg_notification: bool,
    /// `localStorageCapacityIsolation` (upstream default on): emptyDir `sizeLimit` and
    /// `ephemeral-storage` limits are enforced by eviction.
    pub local_storage_isolation: bool,
    pub stats: StatsSource,
    pub cri: CriClient,
    pub root_dir: PathBuf,
    pub cm: ContainerManager,
    pub reclaim: Arc<dyn NodeReclaim>,
    pub recorder: Recorder,
    /// The pods the kubelet runs, those still stopping included (upstream `GetActivePods`),
    /// published by the SyncLoop.
    pub active_pods: watch::Receiver<Arc<Vec<Arc<Pod>>>>,
    pub runtime_pods: watch::Receiver<Arc<RuntimePods>>,
    pub requests: mpsc::UnboundedSender<EvictionRequest>,
}

/// The manager task's state.
pub struct EvictionManager {
    s: Setup,
    tracker: Tracker,
    pressure: watch::Sender<Pressure>,
    /// Whether the image filesystem is another device than the root directory's (upstream
    /// `HasDedicatedImageFs`), found on the first pass.
    dedicated_image_fs: Option<bool>,
    /// A memory threshold was met at the last pass: the fast path only reacts to a new
    /// crossing (as a memcg threshold notification fires on the crossing), the regular passes
    /// handle sustained pressure.
    memory_met: bool,
    /// The memcg threshold notifiers, renewed every pass (upstream `thresholdNotifiers`).
    notifiers: Vec<super::memcg::MemcgThreshold>,
    /// Notifiers could not be created (cgroup v2): the poll stands in.
    memcg_failed: bool,
    /// Pods this manager evicted that are still active: see [`again`].
    evicting: HashMap<String, Evicting>,
}

/// What woke the manager.
enum Wake {
    Tick,
    MemoryPoll,
    Memcg,
}

/// A pod this manager evicted: the grace period it gave, and when.
#[derive(Debug, Clone, Copy)]
struct Evicting {
    grace: Duration,
    at: Instant,
}

/// What a pass does with a pod it picks to evict with `grace` at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Again {
    /// Evict it: not evicted before, or this eviction gives less time.
    Evict,
    /// Its eviction is under way: wait for it again, with no new event or count.
    Wait,
    /// It was evicted longer ago than a kill may take and is still there (a process in
    /// uninterruptible sleep): go on to the next pod rather than hold back every eviction.
    PassOver,
}

/// Upstream's eviction waits for the kill (`killPodNow`: 1.5 times the grace period, at least
/// 10 s) and moves on to the next pod when it times out; a pass here waits for the pod's
/// cleanup instead (30 s), so it decides from the time since the eviction.
fn again(prev: Option<&Evicting>, grace: Duration, now: Instant) -> Again {
    match prev {
        Some(e) if grace >= e.grace => {
            let kill_timeout = (e.grace + e.grace / 2).max(Duration::from_secs(10));
            match now < e.at + kill_timeout {
                true => Again::Wait,
                false => Again::PassOver,
            }
        }
        _ => Again::Evict,
    }
}

/// A pod this pass asked to evict.
struct Evicted {
    uid: String,
    pod: String,
    decided_at: Instant,
    /// A new eviction (false: one under way, waited for again).
    new: bool,
}

impl EvictionManager {
    pub fn new(s: Setup) -> (EvictionManager, EvictionHandle) {
        let (pressure, rx) = watch::channel(Pressure::default());
        (
            EvictionManager {
                s,
                tracker: Tracker::default(),
                pressure,
                dedicated_image_fs: None,
                memory_met: false,
                notifiers: Vec::new(),
                memcg_failed: false,
                evicting: HashMap::new(),
            },
            EvictionHandle { pressure: rx },
        )
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.s.monitoring_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut memory = tokio::time::interval(MEMORY_POLL);
        memory.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let watches_memory = self.s.thresholds.iter().any(|t| t.signal.is_memory());
        let mut again = false;
        loop {
            if !again {
                let poll =
                    watches_memory && (!self.s.kernel_memcg_notification || self.memcg_failed);
                let wake = {
                    let notifiers = &self.notifiers;
                    // (select_all panics on an empty list.)
                    let memcg = async move {
                        if notifiers.is_empty() {
                            std::future::pending::<()>().await;
                        }
                        let crossed = notifiers.iter().map(|n| Box::pin(n.crossed()));
                        let _ = futures::future::select_all(crossed).await;
                    };
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tick.tick() => Wake::Tick,
                        _ = memory.tick(), if poll => Wake::MemoryPoll,
                        _ = memcg => Wake::Memcg,
                    }
                };
                match wake {
                    Wake::Tick => {}
                    Wake::MemoryPoll => {
                        if self.memory_met || !self.memory_threshold_crossed().await {
                            continue;
                        }
                        debug!("memory threshold crossed; synchronizing now");
                    }
                    Wake::Memcg => {
                        info!("eviction manager: memcg threshold notification; synchronizing now");
                    }
                }
            }
            let started = Instant::now();
            let cpu0 = process_cpu_ms();
            let evicted = self.synchronize().await;
            // The process's CPU over the pass (other tasks' included: an upper bound), for
            // bench/eviction.sh.
            let cpu_ms = process_cpu_ms().zip(cpu0).map(|(b, a)| b.saturating_sub(a));
            debug!(
                took_us = started.elapsed().as_micros() as u64,
                cpu_ms = cpu_ms.unwrap_or(0),
                pods = self.s.active_pods.borrow().len(),
                "eviction manager pass"
            );
            again = false;
            if let Some(e) = evicted {
                info!(pod = %e.pod, "eviction manager: pods evicted, waiting for pod to be cleaned up");
                if !self.wait_for_cleanup(&e, &cancel).await {
                    return;
                }
                again = true;
                tick.reset();
            }
        }
    }

    /// The fast path: is a memory threshold crossed now (grace periods aside)?
    async fn memory_threshold_crossed(&self) -> bool {
        let node = tokio::task::spawn_blocking(crate::stats::node_usage).await;
        let mut obs = Observations::new();
        if let Ok(Ok(n)) = node {
            if let Some(cap) = n.memory_capacity_bytes {
                let ws = n.memory_working_set_bytes;
                obs.insert(
                    Signal::MemoryAvailable,
                    signals::Observation {
                        available: i64::try_from(cap.saturating_sub(ws)).unwrap_or(i64::MAX),
                        capacity: i64::try_from(cap).unwrap_or(i64::MAX),
                        time: None,
                    },
                );
            }
        }
        if self
            .s
            .thresholds
            .iter()
            .any(|t| t.signal == Signal::AllocatableMemoryAvailable)
        {
            if let Some((ws, limit)) = self.s.cm.kubepods_memory().await {
                let o = signals::observe(
                    &Default::default(),
                    Some(PodsMemory {
                        working_set: ws,
                        limit,
                    }),
                );
                obs.extend(o);
            }
        }
        let memory: Vec<Threshold> = self
            .s
            .thresholds
            .iter()
            .filter(|t| t.signal.is_memory())
            .copied()
            .collect();
        !signals::thresholds_met(&memory, &obs, false).is_empty()
    }

    /// Upstream `UpdateThreshold` for every memory threshold: a fresh memcg threshold on the
    /// root memory cgroup (`memory.available`) or kubepods (`allocatableMemory.available`), at
    /// the usage where available memory falls under it. Replacing a notifier closes the old
    /// eventfd, which unregisters it.
    async fn update_notifiers(&mut self, obs: &Observations) {
        let root = PathBuf::from(super::memcg::MEMORY_HIERARCHY);
        let mut wanted = Vec::new();
        for t in self.s.thresholds.iter().filter(|t| t.signal.is_memory()) {
            let Some(o) = obs.get(&t.signal) else {
                continue;
            };
            let dir = match t.signal {
                Signal::MemoryAvailable => root.clone(),
                _ => match self.s.cm.kubepods_cgroup() {
                    Some(k) => root.join(k.trim_start_matches('/')),
                    None => continue,
                },
            };
            let capacity = u64::try_from(o.capacity).unwrap_or(0);
            let quantity = u64::try_from(t.value.quantity(o.capacity)).unwrap_or(0);
            wanted.push((dir, capacity, quantity));
        }
        let made = tokio::task::spawn_blocking(move || {
            wanted
                .into_iter()
                .map(|(dir, capacity, quantity)| {
                    let (_, inactive) = super::memcg::usage_and_inactive(&dir)?;
                    let at = super::memcg::usage_threshold(capacity, quantity, inactive)
                        .ok_or_else(|| std::io::Error::other("threshold above capacity"))?;
                    Ok((dir, at))
                })
                .collect::<std::io::Result<Vec<(PathBuf, u64)>>>()
        })
        .await;
        let result = match made {
            Ok(Ok(list)) => list
                .into_iter()
                .map(|(dir, at)| super::memcg::MemcgThreshold::new(&dir, at))
                .collect::<std::io::Result<Vec<_>>>(),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(std::io::Error::other(e.to_string())),
        };
        match result {
            Ok(n) => {
                for x in &n {
                    debug!(cgroup = %x.cgroup.display(), usage_threshold = x.threshold, "memcg threshold set");
                }
                self.notifiers = n;
            }
            Err(e) => {
                warn!(error = %e, "eviction manager: failed to create memory threshold notifier; polling memory every second instead");
                self.notifiers.clear();
                self.memcg_failed = true;
            }
        }
    }

    async fn dedicated_image_fs(&mut self) -> bool {
        if let Some(d) = self.dedicated_image_fs {
            return d;
        }
        let found = match self.s.cri.image_fs_info(api::ImageFsInfoRequest {}).await {
            Ok(r) => r
                .image_filesystems
                .first()
                .and_then(|f| f.fs_id.as_ref())
                .and_then(|id| same_device(&self.s.root_dir, &id.mountpoint))
                .map(|same| !same),
            Err(e) => {
                warn!(error = %e, "eviction manager: cannot read the image filesystem");
                None
            }
        };
        if let Some(d) = found {
            info!(
                dedicated_image_fs = d,
                "eviction manager: filesystem layout detected"
            );
            self.dedicated_image_fs = Some(d);
        }
        found.unwrap_or(false)
    }

    /// Upstream `synchronize`: observe, track, report pressure, then evict at most one pod.
    async fn synchronize(&mut self) -> Option<Evicted> {
        if self.s.thresholds.is_empty() && !self.s.local_storage_isolation {
            return None;
        }
        let dedicated = self.dedicated_image_fs().await;
        let active: Vec<Arc<Pod>> = self.s.active_pods.borrow().as_ref().clone();
        let uids: HashSet<&str> = active.iter().map(|p| podutil::uid(p)).collect();
        self.evicting.retain(|uid, _| uids.contains(uid.as_str()));
        let summary = crate::stats::summary(&self.s.stats).await;
        let pods_memory = self
            .s
            .cm
            .kubepods_memory()
            .await
            .map(|(working_set, limit)| PodsMemory { working_set, limit });
        let obs = signals::observe(&summary, pods_memory);
        let now = Instant::now();
        let pass = self.tracker.update(
            &self.s.thresholds,
            &obs,
            self.s.pressure_transition_period,
            now,
        );
        self.memory_met = signals::thresholds_met(&self.s.thresholds, &obs, false)
            .iter()
            .any(|t| t.signal.is_memory());
        if self.s.kernel_memcg_notification && !self.memcg_failed {
            self.update_notifiers(&obs).await;
        }
        let conditions = pass.conditions.clone();
        self.pressure.send_if_modified(|p| {
            if p.conditions == conditions {
                return false;
            }
            info!(conditions = ?conditions, "eviction manager: node conditions changed");
            p.conditions = conditions;
            true
        });
        let stats = rank::by_uid(&summary.pods);
        if self.s.local_storage_isolation {
            for pod in &active {
                let Some(st) = stats.get(podutil::uid(pod)) else {
                    continue;
                };
                if let Some((label, msg)) = rank::local_storage_violation(pod, st, dedicated) {
                    if let Some(e) = self.evict(pod, IMMEDIATE_GRACE, msg, now) {
                        if e.new {
                            count_eviction(label);
                        }
                        return Some(e);
                    }
                }
            }
        }
        let Some(t) = pass.to_act_on.first().copied() else {
            debug!("eviction manager: no resources are starved");
            return None;
        };
        let resource = t.signal.resource();
        info!(resource, signal = %t.signal, "eviction manager: attempting to reclaim");
        self.s.recorder.node_event(
            EventType::Warning,
            events::EVICTION_THRESHOLD_MET,
            format!("Attempting to reclaim {resource}"),
        );
        if self.reclaim_node_level(t.signal, dedicated).await {
            info!(
                resource,
                "eviction manager: able to reduce resource pressure without evicting pods"
            );
            return None;
        }
        if active.is_empty() {
            warn!("eviction manager: eviction thresholds have been met, but no pods are active to evict");
            return None;
        }
        let mut ranked = active;
        rank::rank(&mut ranked, &stats, t.signal, dedicated);
        let grace = if t.is_hard() {
            IMMEDIATE_GRACE
        } else {
            self.s.max_pod_grace_period
        };
        let decided = self.tracker.first_observed(&t).unwrap_or(now);
        for pod in &ranked {
            let st = stats.get(podutil::uid(pod)).copied();
            let msg = rank::message(resource, pod, st, &pass.met, &obs);
            if let Some(e) = self.evict(pod, grace, msg, decided) {
                if e.new {
                    count_eviction(t.signal.as_str());
                }
                return Some(e);
            }
        }
        warn!("eviction manager: unable to evict any pods from the node");
        None
    }

    /// Upstream `reclaimNodeLevelResources`: for disk signals, dead containers then unused
    /// images; true when a fresh look shows no threshold met any more.
    async fn reclaim_node_level(&mut self, signal: Signal, dedicated: bool) -> bool {
        let disk = matches!(signal.resource(), "ephemeral-storage" | "inodes");
        let image_side = matches!(signal, Signal::ImageFsAvailable | Signal::ImageFsInodesFree);
        // With a dedicated image filesystem, nodefs pressure has nothing node-level to reclaim.
        if !disk || (dedicated && !image_side) {
            return false;
        }
        if let Err(e) = self.s.reclaim.delete_all_unused_containers().await {
            warn!(error = %e, "eviction manager: unexpected error when attempting to reduce resource pressure");
        }
        match self.s.reclaim.delete_unused_images().await {
            Ok(freed) => debug!(freed, "eviction manager: unused images deleted"),
            Err(e) => {
                warn!(error = %e, "eviction manager: unexpected error when attempting to reduce resource pressure")
            }
        }
        let summary = crate::stats::summary(&self.s.stats).await;
        let obs = signals::observe(&summary, None);
        let disk_thresholds: Vec<Threshold> = self
            .s
            .thresholds
            .iter()
            .filter(|t| !t.signal.is_memory())
            .copied()
            .collect();
        signals::thresholds_met(&disk_thresholds, &obs, true).is_empty()
    }

    /// Upstream `evictPod`: never a critical pod; an `Evicted` Warning event, then the
    /// termination request.
    fn evict(
        &mut self,
        pod: &Arc<Pod>,
        grace: Duration,
        message: String,
        decided_at: Instant,
    ) -> Option<Evicted> {
        let who = podutil::describe(pod);
        if is_critical(pod) {
            warn!(pod = %who, "eviction manager: cannot evict a critical pod");
            return None;
        }
        let uid = podutil::uid(pod);
        match again(self.evicting.get(uid), grace, Instant::now()) {
            Again::Evict => {}
            Again::Wait => {
                debug!(pod = %who, "eviction manager: pod is being evicted already; waiting for it");
                return Some(Evicted {
                    uid: uid.to_string(),
                    pod: who,
                    decided_at,
                    new: false,
                });
            }
            Again::PassOver => {
                warn!(pod = %who, "eviction manager: pod evicted before is still not stopped; evicting the next one");
                return None;
            }
        }
        self.s
            .recorder
            .pod_event(pod, None, EventType::Warning, REASON, message.clone());
        info!(pod = %who, grace = ?grace, message = %message, decided_after_ms = decided_at.elapsed().as_millis() as u64, "evicting pod");
        let req = EvictionRequest {
            pod: pod.clone(),
            grace,
            failure: PodFailure {
                reason: REASON.into(),
                message,
            },
            decided_at: Instant::now(),
        };
        if self.s.requests.send(req).is_err() {
            return None;
        }
        self.evicting.insert(
            podutil::uid(pod).to_string(),
            Evicting {
                grace,
                at: Instant::now(),
            },
        );
        Some(Evicted {
            uid: podutil::uid(pod).to_string(),
            pod: who,
            decided_at: Instant::now(),
            new: true,
        })
    }

    /// Upstream `waitForPodsCleanup`: until the pod is neither active nor known to the runtime,
    /// at most 30 s. False when cancelled.
    async fn wait_for_cleanup(&self, e: &Evicted, cancel: &CancellationToken) -> bool {
        let deadline = Instant::now() + CLEANUP_TIMEOUT;
        loop {
            let active = self
                .s
                .active_pods
                .borrow()
                .iter()
                .any(|p| podutil::uid(p) == e.uid);
            let running: HashSet<String> = self
                .s
                .runtime_pods
                .borrow()
                .pods
                .iter()
                .map(|r| r.uid.clone())
                .collect();
            if !active && !running.contains(&e.uid) {
                info!(pod = %e.pod, stopped_after_ms = e.decided_at.elapsed().as_millis() as u64, "eviction manager: pod successfully cleaned up");
                return true;
            }
            if Instant::now() >= deadline {
                info!(pod = %e.pod, "eviction manager: timed out waiting for pod to be cleaned up");
                return true;
            }
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(CLEANUP_POLL) => {}
            }
        }
    }
}

/// utime + stime of this process from /proc/self/stat, in milliseconds (clock-tick resolution).
fn process_cpu_ms() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let mut f = stat.rsplit_once(')')?.1.split_whitespace();
    let utime: u64 = f.nth(11)?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    let tck = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|t| u64::try_from(t).ok())
        .filter(|t| *t > 0)
        .unwrap_or(100);
    Some((utime + stime) * 1000 / tck)
}

/// Upstream `metrics.Evictions`: `kubelet_evictions{eviction_signal}`.
fn count_eviction(signal: &str) {
    crate::metrics::get()
        .evictions
        .with_label_values(&[signal])
        .inc();
}

/// Whether two paths are on one device.
fn same_device(a: &std::path::Path, b: &str) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    let da = std::fs::metadata(a).ok()?.dev();
    let db = std::fs::metadata(b).ok()?.dev();
    Some(da == db)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_being_evicted_is_waited_for_then_passed_over_unless_evicted_shorter() {
        let s = Duration::from_secs;
        let t0 = Instant::now();
        let soft = Evicting {
            grace: s(30),
            at: t0,
        };
        let hard = Evicting {
            grace: s(1),
            at: t0,
        };
        for (prev, grace, after, want) in [
            (None, s(1), s(0), Again::Evict),
            // A soft eviction's 30 s: waited for during 45 s (1.5 x), then passed over.
            (Some(soft), s(30), s(31), Again::Wait),
            (Some(soft), s(60), s(44), Again::Wait),
            (Some(soft), s(30), s(46), Again::PassOver),
            // A hard threshold after a soft eviction: 1 s is shorter, evicted again.
            (Some(soft), s(1), s(5), Again::Evict),
            // A hard eviction's 1 s: at least 10 s.
            (Some(hard), s(1), s(9), Again::Wait),
            (Some(hard), s(30), s(11), Again::PassOver),
        ] {
            assert_eq!(
                again(prev.as_ref(), grace, t0 + after),
                want,
                "{prev:?} {grace:?} after {after:?}"
            );
        }
    }
}
