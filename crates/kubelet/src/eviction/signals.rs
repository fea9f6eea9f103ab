//! Signal observations and the threshold bookkeeping of one monitoring pass (upstream
//! `makeSignalObservations`, `thresholdsMet`, `thresholdsFirstObservedAt`,
//! `thresholdsMetGracePeriod`, `nodeConditions*`, `byEvictionPriority` in `eviction/helpers.go`).
//! Pure: the manager feeds it a summary and the time, tables test it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kubelet_config::config::eviction::{Signal, Threshold};

use crate::stats::summary::Summary;

/// One signal's figures (upstream `signalObservation`): what is available of what capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    pub available: i64,
    pub capacity: i64,
    /// The sample's time (Unix seconds) when the source stamps it; upstream compares it to see
    /// whether a threshold's stats were updated since the last pass.
    pub time: Option<i64>,
}

pub type Observations = BTreeMap<Signal, Observation>;

/// The `kubepods` cgroup's memory, for `allocatableMemory.available` (upstream reads it as the
/// summary's `pods` system container: its limit less its working set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodsMemory {
    pub working_set: u64,
    pub limit: u64,
}

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn secs(t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<i64> {
    t.as_ref().map(|t| t.0.as_second())
}

/// Upstream `makeSignalObservations`, from the same summary `/stats/summary` serves (so an
/// operator sees the figures eviction used): `memory.available` is the node's `availableBytes`
/// (capacity less the root cgroup's working set), nodefs the root directory's filesystem,
/// imagefs the runtime's, `pid.available` `pid_max` less the processes running.
pub fn observe(summary: &Summary, pods_memory: Option<PodsMemory>) -> Observations {
    let mut out = Observations::new();
    let node = &summary.node;
    if let Some(m) = &node.memory {
        if let (Some(avail), Some(ws)) = (m.available_bytes, m.working_set_bytes) {
            out.insert(
                Signal::MemoryAvailable,
                Observation {
                    available: i(avail),
                    capacity: i(avail.saturating_add(ws)),
                    time: secs(&m.time),
                },
            );
        }
    }
    if let Some(p) = pods_memory {
        let available = p.limit.saturating_sub(p.working_set);
        out.insert(
            Signal::AllocatableMemoryAvailable,
            Observation {
                available: i(available),
                capacity: i(available.saturating_add(p.working_set)),
                time: None,
            },
        );
    }
    let fs_pairs = [
        (
            node.fs.as_ref(),
            Signal::NodeFsAvailable,
            Signal::NodeFsInodesFree,
        ),
        (
            node.runtime.as_ref().and_then(|r| r.image_fs.as_ref()),
            Signal::ImageFsAvailable,
            Signal::ImageFsInodesFree,
        ),
    ];
    for (fs, bytes, inodes) in fs_pairs {
        let Some(fs) = fs else { continue };
        if let (Some(a), Some(c)) = (fs.available_bytes, fs.capacity_bytes) {
            out.insert(
                bytes,
                Observation {
                    available: i(a),
                    capacity: i(c),
                    time: secs(&fs.time),
                },
            );
        }
        if let (Some(a), Some(c)) = (fs.inodes_free, fs.inodes) {
            out.insert(
                inodes,
                Observation {
                    available: i(a),
                    capacity: i(c),
                    time: secs(&fs.time),
                },
            );
        }
    }
    if let Some(r) = &node.rlimit {
        if let (Some(max), Some(cur)) = (r.maxpid, r.curproc) {
            out.insert(
                Signal::PidAvailable,
                Observation {
                    available: i(max) - i(cur),
                    capacity: i(max),
                    time: secs(&r.time),
                },
            );
        }
    }
    out
}

/// The signal a threshold is observed through: `containerfs.*` follows nodefs on a node whose
/// containers share its filesystem (upstream `UpdateContainerFsThresholds`).
pub fn observed_signal(s: Signal) -> Signal {
    match s {
        Signal::ContainerFsAvailable => Signal::NodeFsAvailable,
        Signal::ContainerFsInodesFree => Signal::NodeFsInodesFree,
        s => s,
    }
}

/// Upstream `thresholdsMet`: the thresholds whose signal is below its value (plus its minimum
/// reclaim when `enforce_min_reclaim`, which keeps a threshold met until that much is back).
pub fn thresholds_met(
    thresholds: &[Threshold],
    obs: &Observations,
    enforce_min_reclaim: bool,
) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|t| {
            let Some(o) = obs.get(&observed_signal(t.signal)) else {
                return false;
            };
            let mut q = t.value.quantity(o.capacity);
            if enforce_min_reclaim {
                if let Some(r) = t.min_reclaim {
                    q = q.saturating_add(r.quantity(o.capacity));
                }
            }
            q > o.available
        })
        .copied()
        .collect()
}

/// Upstream `mergeThresholds`.
pub fn merge(mut a: Vec<Threshold>, b: Vec<Threshold>) -> Vec<Threshold> {
    for t in b {
        if !a.contains(&t) {
            a.push(t);
        }
    }
    a
}

/// Upstream `nodeConditions`: the conditions the thresholds stand for, deduplicated, in order.
pub fn node_conditions(thresholds: &[Threshold]) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for t in thresholds {
        let c = t.signal.node_condition();
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// What the manager remembers between passes (upstream `managerImpl`'s
/// `thresholdsFirstObservedAt`, `nodeConditionsLastObservedAt`, `thresholdsMet`,
/// `lastObservations`).
#[derive(Debug, Default)]
pub struct Tracker {
    first_observed: Vec<(Threshold, Instant)>,
    conditions_last_observed: BTreeMap<&'static str, Instant>,
    met: Vec<Threshold>,
    last_observations: Observations,
}

/// What one pass decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Pass {
    /// Node conditions to report: observed now, or within the transition period.
    pub conditions: Vec<&'static str>,
    /// Thresholds past their grace period whose stats changed since the last pass, memory
    /// first: what eviction acts on.
    pub to_act_on: Vec<Threshold>,
    /// Every threshold past its grace period (for the eviction message).
    pub met: Vec<Threshold>,
}

impl Tracker {
    /// When `t` was first seen met in the current run of passes that met it.
    pub fn first_observed(&self, t: &Threshold) -> Option<Instant> {
        self.first_observed
            .iter()
            .find(|(o, _)| o == t)
            .map(|(_, at)| *at)
    }

    /// Upstream `synchronize`'s bookkeeping: thresholds met now (and those met before whose
    /// minimum reclaim is not satisfied yet), when each was first met, the conditions they
    /// imply held for `transition`, and the thresholds whose grace period has passed.
    pub fn update(
        &mut self,
        thresholds: &[Threshold],
        obs: &Observations,
        transition: Duration,
        now: Instant,
    ) -> Pass {
        let mut met = thresholds_met(thresholds, obs, false);
        if !self.met.is_empty() {
            let unresolved = thresholds_met(&self.met, obs, true);
            met = merge(met, unresolved);
        }
        self.first_observed = met
            .iter()
            .map(|t| {
                let at = self
                    .first_observed
                    .iter()
                    .find(|(o, _)| o == t)
                    .map_or(now, |(_, at)| *at);
                (*t, at)
            })
            .collect();
        for c in node_conditions(&met) {
            self.conditions_last_observed.insert(c, now);
        }
        let conditions: Vec<&'static str> = ["MemoryPressure", "DiskPressure", "PIDPressure"]
            .into_iter()
            .filter(|c| {
                self.conditions_last_observed
                    .get(c)
                    .is_some_and(|at| now.duration_since(*at) < transition)
            })
            .collect();
        let past_grace: Vec<Threshold> = self
            .first_observed
            .iter()
            .filter(|(t, at)| now.duration_since(*at) >= t.grace_period)
            .map(|(t, _)| *t)
            .collect();
        self.met = past_grace.clone();
        // Upstream `thresholdsUpdatedStats`: act only on figures newer than last pass's.
        let mut to_act_on: Vec<Threshold> = past_grace
            .iter()
            .filter(|t| {
                let s = observed_signal(t.signal);
                let Some(o) = obs.get(&s) else { return false };
                match (o.time, self.last_observations.get(&s).and_then(|l| l.time)) {
                    (Some(now_t), Some(last_t)) => now_t > last_t,
                    _ => true,
                }
            })
            .copied()
            .collect();
        self.last_observations = obs.clone();
        // Upstream `byEvictionPriority`: memory signals first.
        to_act_on.sort_by_key(|t| !t.signal.is_memory());
        Pass {
            conditions,
            to_act_on,
            met: past_grace,
        }
    }
}

/// A quantity as upstream's `Quantity.String()` prints one made by `NewQuantity(v, BinarySI)`:
/// the largest power-of-1024 suffix that divides it exactly (`100Mi`, `51200Ki`), or the plain
/// number (`52430000`); values under 1024 are plain.
pub fn format_binary(v: i64) -> String {
    if v.abs() < 1024 {
        return v.to_string();
    }
    let mut n = v;
    let mut exp = 0;
    while n % 1024 == 0 && exp < 6 {
        n /= 1024;
        exp += 1;
    }
    const SUFFIX: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    format!("{n}{}", SUFFIX[exp])
}

/// `NewQuantity(v, DecimalSI).String()`: the largest power-of-1000 suffix that divides it
/// exactly (`5k`), else the plain number.
pub fn format_decimal(v: i64) -> String {
    if v == 0 {
        return "0".into();
    }
    let mut n = v;
    let mut exp = 0;
    while n % 1000 == 0 && exp < 6 {
        n /= 1000;
        exp += 1;
    }
    const SUFFIX: [&str; 7] = ["", "k", "M", "G", "T", "P", "E"];
    format!("{n}{}", SUFFIX[exp])
}

#[cfg(test)]
#[path = "signals_tests.rs"]
mod tests;
