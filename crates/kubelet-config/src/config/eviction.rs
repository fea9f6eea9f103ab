//! Eviction thresholds (upstream `pkg/kubelet/eviction/api` types and `ParseThresholdConfig` in
//! `eviction/helpers.go`): `evictionHard`, `evictionSoft` + `evictionSoftGracePeriod`,
//! `evictionMinimumReclaim`, with upstream's defaulting (`mergeDefaultEvictionSettings`) and its
//! errors, every one of them listed with the field it came from.
//!
//! Parsed here, once, because two consumers need the same thresholds: node allocatable (which
//! holds the hard `memory.available` and `nodefs.available` back) and the eviction manager.

use std::collections::BTreeMap;
use std::time::Duration;

use super::parse_duration;

/// An eviction signal (upstream `evictionapi.Signal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    MemoryAvailable,
    AllocatableMemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    /// `containerfs.*` (upstream's split image filesystem, `KubeletSeparateDiskGC`): accepted,
    /// and on a node without a separate container filesystem it follows nodefs, as upstream's
    /// `UpdateContainerFsThresholds` makes it; rkubelet acts on the nodefs threshold.
    ContainerFsAvailable,
    ContainerFsInodesFree,
    PidAvailable,
}

impl Signal {
    pub const ALL: [Signal; 9] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::ContainerFsAvailable,
        Signal::ContainerFsInodesFree,
        Signal::PidAvailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::ContainerFsAvailable => "containerfs.available",
            Signal::ContainerFsInodesFree => "containerfs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    pub fn parse(s: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|g| g.as_str() == s)
    }

    /// Upstream `signalToResource`: what an eviction for this signal reclaims.
    pub fn resource(self) -> &'static str {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => "memory",
            Signal::NodeFsAvailable | Signal::ImageFsAvailable | Signal::ContainerFsAvailable => {
                "ephemeral-storage"
            }
            Signal::NodeFsInodesFree
            | Signal::ImageFsInodesFree
            | Signal::ContainerFsInodesFree => "inodes",
            Signal::PidAvailable => "pids",
        }
    }

    /// Upstream `signalToNodeCondition`.
    pub fn node_condition(self) -> &'static str {
        match self.resource() {
            "memory" => "MemoryPressure",
            "pids" => "PIDPressure",
            _ => "DiskPressure",
        }
    }

    pub fn is_memory(self) -> bool {
        self.resource() == "memory"
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A threshold's value (upstream `ThresholdValue`): an absolute quantity (bytes, inodes or
/// pids) or a fraction of the signal's capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ThresholdValue {
    Quantity(i64),
    /// 0 < p <= 1, as upstream's float32.
    Percentage(f32),
}

impl ThresholdValue {
    /// Upstream `GetThresholdQuantity`: the quantity, or `capacity * percentage` truncated.
    pub fn quantity(self, capacity: i64) -> i64 {
        match self {
            ThresholdValue::Quantity(q) => q,
            ThresholdValue::Percentage(p) => (capacity as f64 * f64::from(p)) as i64,
        }
    }
}

/// One threshold (upstream `evictionapi.Threshold`); the operator is always `LessThan`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: ThresholdValue,
    /// Zero for a hard threshold.
    pub grace_period: Duration,
    pub min_reclaim: Option<ThresholdValue>,
}

impl Threshold {
    /// Upstream `isHardEvictionThreshold`.
    pub fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }
}

/// The eviction settings as configured (the raw maps, kept for `/configz`-like reporting and
/// for node allocatable), and the parsed thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct EvictionConfig {
    /// `evictionHard` after defaulting (upstream `DefaultEvictionHard` when unset, merged in
    /// with `mergeDefaultEvictionSettings`).
    pub hard: BTreeMap<String, String>,
    pub soft: BTreeMap<String, String>,
    pub soft_grace_period: BTreeMap<String, String>,
    pub minimum_reclaim: BTreeMap<String, String>,
    /// `evictionMaxPodGracePeriod`: the grace period soft evictions give pods (seconds).
    pub max_pod_grace_period: i64,
    /// `evictionPressureTransitionPeriod`: how long a pressure condition stays after its last
    /// observation.
    pub pressure_transition_period: Duration,
    pub merge_defaults: bool,
    /// `kernelMemcgNotification`: memory thresholds also watched through cgroup v1 memcg
    /// threshold notifications.
    pub kernel_memcg_notification: bool,
}

impl Default for EvictionConfig {
    fn default() -> Self {
        EvictionConfig {
            hard: default_eviction_hard(),
            soft: BTreeMap::new(),
            soft_grace_period: BTreeMap::new(),
            minimum_reclaim: BTreeMap::new(),
            max_pod_grace_period: 0,
            pressure_transition_period: Duration::from_secs(300),
            merge_defaults: false,
            kernel_memcg_notification: false,
        }
    }
}

/// Upstream's `DefaultEvictionHard` on Linux.
pub fn default_eviction_hard() -> BTreeMap<String, String> {
    [
        ("imagefs.available", "15%"),
        ("imagefs.inodesFree", "5%"),
        ("memory.available", "100Mi"),
        ("nodefs.available", "10%"),
        ("nodefs.inodesFree", "5%"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

impl EvictionConfig {
    /// Upstream `ParseThresholdConfig`: hard, then soft (each with its grace period), minimum
    /// reclaims attached, and with `pods` in `enforceNodeAllocatable` an
    /// `allocatableMemory.available` copy of every hard `memory.available`. Unlike upstream,
    /// which stops at the first, every error is returned, each naming its field and signal.
    pub fn thresholds(&self, enforce_pods: bool) -> Result<Vec<Threshold>, Vec<String>> {
        let mut errors = Vec::new();
        let mut out = parse_statements("evictionHard", &self.hard, &mut errors);
        let mut soft = parse_statements("evictionSoft", &self.soft, &mut errors);
        let mut graces = BTreeMap::new();
        for (k, v) in &self.soft_grace_period {
            let Some(signal) = Signal::parse(k) else {
                errors.push(format!(
                    "evictionSoftGracePeriod[{k}]: unsupported eviction signal {k}"
                ));
                continue;
            };
            match parse_duration(v) {
                Ok(d) => {
                    graces.insert(signal, d);
                }
                Err(e) => errors.push(format!(
                    "evictionSoftGracePeriod[{k}]: invalid eviction grace period specified: {e}"
                )),
            }
        }
        let mut reclaims = BTreeMap::new();
        for (k, v) in &self.minimum_reclaim {
            let Some(signal) = Signal::parse(k) else {
                errors.push(format!(
                    "evictionMinimumReclaim[{k}]: unsupported eviction signal {k}"
                ));
                continue;
            };
            match parse_min_reclaim(signal, v) {
                Ok(r) => {
                    reclaims.insert(signal, r);
                }
                Err(e) => errors.push(format!("evictionMinimumReclaim[{k}]: {e}")),
            }
        }
        for t in &mut soft {
            match graces.get(&t.signal) {
                // Upstream keeps a zero grace period, which makes the soft threshold hard.
                Some(g) => t.grace_period = *g,
                None => errors.push(format!(
                    "evictionSoft[{}]: grace period must be specified for the soft eviction threshold {}",
                    t.signal, t.signal
                )),
            }
        }
        out.extend(soft);
        for t in &mut out {
            t.min_reclaim = reclaims.get(&t.signal).copied();
        }
        if enforce_pods {
            let extra: Vec<Threshold> = out
                .iter()
                .filter(|t| t.signal == Signal::MemoryAvailable && t.is_hard())
                .map(|t| Threshold {
                    signal: Signal::AllocatableMemoryAvailable,
                    ..*t
                })
                .collect();
            out.extend(extra);
        }
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(errors)
        }
    }
}

/// `signal -> value` statements (upstream `parseThresholdStatements`); `0%` and `100%` mean no
/// threshold, as upstream.
pub fn parse_statements(
    field: &str,
    map: &BTreeMap<String, String>,
    errors: &mut Vec<String>,
) -> Vec<Threshold> {
    let mut out = Vec::new();
    for (k, v) in map {
        let Some(signal) = Signal::parse(k) else {
            errors.push(format!("{field}[{k}]: unsupported eviction signal {k}"));
            continue;
        };
        match parse_value(signal, v) {
            Ok(Some(value)) => out.push(Threshold {
                signal,
                value,
                grace_period: Duration::ZERO,
                min_reclaim: None,
            }),
            Ok(None) => {}
            Err(e) => errors.push(format!("{field}[{k}]: {e}")),
        }
    }
    out
}

/// Upstream `parseThresholdStatement`'s value half.
pub fn parse_value(signal: Signal, v: &str) -> Result<Option<ThresholdValue>, String> {
    if v.ends_with('%') {
        if v == "0%" || v == "100%" {
            return Ok(None);
        }
        let p = parse_percentage(v)?;
        if p < 0.0 {
            return Err(format!(
                "eviction percentage threshold {signal} must be >= 0%: {v}"
            ));
        }
        if p > 1.0 {
            return Err(format!(
                "eviction percentage threshold {signal} must be <= 100%: {v}"
            ));
        }
        return Ok(Some(ThresholdValue::Percentage(p)));
    }
    let q = quantity(v)?;
    if q <= 0 {
        return Err(format!("eviction threshold {signal} must be positive: {v}"));
    }
    Ok(Some(ThresholdValue::Quantity(q)))
}

fn parse_min_reclaim(signal: Signal, v: &str) -> Result<ThresholdValue, String> {
    if v.ends_with('%') {
        let p = parse_percentage(v)?;
        if p <= 0.0 {
            return Err(format!(
                "eviction percentage minimum reclaim {signal} must be positive: {v}"
            ));
        }
        return Ok(ThresholdValue::Percentage(p));
    }
    let q = quantity(v)?;
    if q < 0 {
        return Err(format!(
            "negative eviction minimum reclaim specified for {signal}"
        ));
    }
    Ok(ThresholdValue::Quantity(q))
}

fn parse_percentage(v: &str) -> Result<f32, String> {
    v.trim_end_matches('%')
        .parse::<f32>()
        .map(|p| p / 100.0)
        .map_err(|_| format!("{v:?} is not a valid percentage"))
}

/// A quantity's `Value()` (rounded up), upstream `resource.ParseQuantity`.
fn quantity(v: &str) -> Result<i64, String> {
    let milli =
        crate::quantity::parse_milli(v).ok_or_else(|| format!("{v:?} is not a valid quantity"))?;
    i64::try_from(milli.div_euclid(1000) + i128::from(milli.rem_euclid(1000) != 0))
        .map_err(|_| format!("{v:?} is too large"))
}

/// Upstream's defaulting of `evictionHard`: the defaults when the configuration does not set
/// it; with `mergeDefaultEvictionSettings`, each default signal the configuration leaves out.
pub fn effective_hard(
    configured: Option<BTreeMap<String, String>>,
    merge_defaults: bool,
) -> BTreeMap<String, String> {
    match configured {
        None => default_eviction_hard(),
        Some(mut m) => {
            if merge_defaults {
                for (k, v) in default_eviction_hard() {
                    m.entry(k).or_insert(v);
                }
            }
            m
        }
    }
}

#[cfg(test)]
mod tests;
