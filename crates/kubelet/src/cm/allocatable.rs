//! Node allocatable (upstream `node_container_manager_linux.go`): what the node holds back from
//! pods, and the limits the `kubepods` cgroup gets. Pure, in upstream units: cpu in millicores,
//! memory, storage and hugepages in bytes, pid a count.
//!
//! Two figures, as upstream: the Node's `allocatable` is capacity less `kubeReserved`,
//! `systemReserved` and the hard eviction thresholds for memory and nodefs
//! (`GetNodeAllocatableReservation`), less pre-allocated hugepages from memory; the `kubepods`
//! cgroup is limited to capacity less the two reservations only
//! (`getNodeAllocatableInternalAbsolute`), so that eviction acts before the cgroup's OOM killer.

use std::collections::BTreeMap;

use kubelet_config::config::cgroups::CgroupConfig;

use crate::resources::parse_milli;

/// A resource list in upstream units.
pub type Amounts = BTreeMap<String, i64>;

/// A reservation or threshold that cannot be used, naming the field.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{field}[{key}]: {message}")]
pub struct AllocatableError {
    pub field: &'static str,
    pub key: String,
    pub message: String,
}

/// A quantity in upstream units (`MilliValue()` for cpu, `Value()` rounded up otherwise).
fn units(resource: &str, value: &str) -> Option<i64> {
    let milli = parse_milli(value)?;
    let v = if resource == "cpu" {
        milli
    } else {
        (milli + 999).div_euclid(1000)
    };
    i64::try_from(v).ok()
}

fn reserved(
    field: &'static str,
    map: &BTreeMap<String, String>,
) -> Result<Amounts, AllocatableError> {
    let mut out = Amounts::new();
    for (k, v) in map {
        let n = units(k, v).ok_or_else(|| AllocatableError {
            field,
            key: k.clone(),
            message: format!("{v:?} is not a valid quantity"),
        })?;
        *out.entry(k.clone()).or_insert(0) += n;
    }
    Ok(out)
}

/// Upstream `hardEvictionReservation`: `memory.available` holds memory back, `nodefs.available`
/// ephemeral storage; other signals reserve nothing. Thresholds are parsed by the same code the
/// eviction manager's come from (`kubelet_config::config::eviction`).
fn hard_eviction(cfg: &CgroupConfig, capacity: &Amounts) -> Result<Amounts, AllocatableError> {
    use kubelet_config::config::eviction::{parse_value, Signal};
    let mut out = Amounts::new();
    for (signal, resource) in [
        (Signal::MemoryAvailable, "memory"),
        (Signal::NodeFsAvailable, "ephemeral-storage"),
    ] {
        let Some(v) = cfg.eviction_hard.get(signal.as_str()) else {
            continue;
        };
        let cap = capacity.get(resource).copied().unwrap_or(0);
        match parse_value(signal, v) {
            Ok(Some(t)) => {
                out.insert(resource.into(), t.quantity(cap));
            }
            Ok(None) => {}
            Err(message) => {
                return Err(AllocatableError {
                    field: "evictionHard",
                    key: signal.as_str().into(),
                    message,
                })
            }
        }
    }
    Ok(out)
}

fn add(acc: &mut Amounts, other: &Amounts) {
    for (k, v) in other {
        *acc.entry(k.clone()).or_insert(0) += v;
    }
}

/// `capacity - reservation` per resource, never below zero (upstream sets negatives to 0).
fn subtract(capacity: &Amounts, reservation: &Amounts) -> Amounts {
    capacity
        .iter()
        .map(|(k, v)| {
            let r = reservation.get(k).copied().unwrap_or(0);
            (k.clone(), v.saturating_sub(r).max(0))
        })
        .collect()
}

/// What the node status reports as allocatable (upstream `GetNodeAllocatableReservation` applied
/// by `nodestatus.MachineInfo`), from the capacity it reports (which has no `pid`).
pub fn node_allocatable(
    cfg: &CgroupConfig,
    capacity: &Amounts,
) -> Result<Amounts, AllocatableError> {
    let mut reservation = reserved("kubeReserved", &cfg.kube_reserved)?;
    add(
        &mut reservation,
        &reserved("systemReserved", &cfg.system_reserved)?,
    );
    add(&mut reservation, &hard_eviction(cfg, capacity)?);
    let mut alloc = subtract(capacity, &reservation);
    // Pre-allocated hugepages are not memory pods can use.
    let hugepages: i64 = capacity
        .iter()
        .filter(|(k, _)| k.starts_with("hugepages-"))
        .map(|(_, v)| *v)
        .sum();
    if let Some(m) = alloc.get_mut("memory") {
        *m = m.saturating_sub(hugepages).max(0);
    }
    Ok(alloc)
}

/// The `kubepods` cgroup's limits (upstream `enforceNodeAllocatableCgroups`): capacity less the
/// reservations when `enforceNodeAllocatable` has `pods`, else the whole capacity (which still
/// gives kubepods cpu shares by the node's size). `internal_capacity` includes `pid`.
pub fn kubepods_limits(
    cfg: &CgroupConfig,
    internal_capacity: &Amounts,
) -> Result<Amounts, AllocatableError> {
    if !cfg.enforces(kubelet_config::config::cgroups::ENFORCE_PODS) {
        return Ok(internal_capacity.clone());
    }
    let mut reservation = reserved("kubeReserved", &cfg.kube_reserved)?;
    add(
        &mut reservation,
        &reserved("systemReserved", &cfg.system_reserved)?,
    );
    Ok(subtract(internal_capacity, &reservation))
}

/// A reservation's limits for its own cgroup (upstream `enforceExistingCgroup` with
/// `getCgroupConfig(kubeReserved)`).
pub fn reservation_limits(
    field: &'static str,
    map: &BTreeMap<String, String>,
) -> Result<Amounts, AllocatableError> {
    reserved(field, map)
}

/// The lines of /proc/swaps after its header: active swap (upstream's `failSwapOn` check).
pub fn active_swap(proc_swaps: &str) -> Vec<String> {
    proc_swaps
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: i64 = 1 << 30;
    const MI: i64 = 1 << 20;

    fn capacity() -> Amounts {
        [
            ("cpu".to_string(), 2000),
            ("memory".into(), 8 * GI),
            ("ephemeral-storage".into(), 100 * GI),
            ("hugepages-2Mi".into(), 0),
            ("pods".into(), 110),
        ]
        .into()
    }

    fn map(v: &[(&str, &str)]) -> BTreeMap<String, String> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_hold_back_upstreams_eviction_thresholds() {
        let a = node_allocatable(&CgroupConfig::default(), &capacity()).unwrap();
        assert_eq!(a["memory"], 8 * GI - 100 * MI);
        // 10% as upstream computes it: float32(0.1) times the capacity, truncated.
        assert_eq!(a["ephemeral-storage"], 100 * GI - 10_737_418_400);
        assert_eq!(a["cpu"], 2000);
        assert_eq!(a["pods"], 110);
    }

    #[test]
    fn reservations_and_thresholds_add_up() {
        let cfg = CgroupConfig {
            kube_reserved: map(&[
                ("cpu", "100m"),
                ("memory", "256Mi"),
                ("ephemeral-storage", "1Gi"),
            ]),
            system_reserved: map(&[("cpu", "0.2"), ("memory", "512Mi")]),
            eviction_hard: map(&[("memory.available", "5%"), ("nodefs.available", "2Gi")]),
            ..CgroupConfig::default()
        };
        let a = node_allocatable(&cfg, &capacity()).unwrap();
        assert_eq!(a["cpu"], 1700);
        // Upstream multiplies by the float32 percentage.
        let five_pct = (8 * GI) as f64 * f64::from(0.05f32);
        assert_eq!(a["memory"], 8 * GI - 768 * MI - five_pct as i64);
        assert_eq!(a["ephemeral-storage"], 97 * GI);
        // kubepods: the reservations only, not the eviction threshold; pid included.
        let mut internal = capacity();
        internal.insert("pid".into(), 4_194_304);
        let k = kubepods_limits(&cfg, &internal).unwrap();
        assert_eq!(k["memory"], 8 * GI - 768 * MI);
        assert_eq!(k["cpu"], 1700);
        assert_eq!(k["pid"], 4_194_304);
        // Without "pods" enforcement kubepods gets the whole capacity.
        let none = CgroupConfig {
            enforce_node_allocatable: vec![],
            ..cfg
        };
        assert_eq!(kubepods_limits(&none, &internal).unwrap(), internal);
    }

    #[test]
    fn hugepages_leave_memory_and_negatives_are_zero() {
        let mut cap = capacity();
        cap.insert("hugepages-2Mi".into(), 512 * MI);
        let cfg = CgroupConfig {
            system_reserved: map(&[("cpu", "3")]),
            ..CgroupConfig::default()
        };
        let a = node_allocatable(&cfg, &cap).unwrap();
        assert_eq!(a["memory"], 8 * GI - 100 * MI - 512 * MI);
        assert_eq!(a["hugepages-2Mi"], 512 * MI);
        assert_eq!(a["cpu"], 0);
    }

    #[test]
    fn bad_threshold_names_its_field() {
        let cfg = CgroupConfig {
            eviction_hard: map(&[("memory.available", "lots")]),
            ..CgroupConfig::default()
        };
        let e = node_allocatable(&cfg, &capacity()).unwrap_err();
        assert_eq!(e.field, "evictionHard");
        assert!(
            e.to_string().starts_with("evictionHard[memory.available]:"),
            "{e}"
        );
    }

    #[test]
    fn swap_lines() {
        let none = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
        assert!(active_swap(none).is_empty());
        let on =
            format!("{none}/swapfile                               file\t\t1048572\t\t0\t\t-2\n");
        assert_eq!(active_swap(&on).len(), 1);
    }
}
