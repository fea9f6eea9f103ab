use super::*;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn cfg(
    hard: &[(&str, &str)],
    soft: &[(&str, &str)],
    grace: &[(&str, &str)],
    reclaim: &[(&str, &str)],
) -> EvictionConfig {
    EvictionConfig {
        hard: map(hard),
        soft: map(soft),
        soft_grace_period: map(grace),
        minimum_reclaim: map(reclaim),
        ..EvictionConfig::default()
    }
}

/// (signal, value, parsed or the error).
type Case = (
    &'static str,
    &'static str,
    Result<Option<ThresholdValue>, &'static str>,
);

#[test]
fn threshold_statements() {
    use ThresholdValue::*;
    let cases: &[Case] = &[
        ("memory.available", "100Mi", Ok(Some(Quantity(104_857_600)))),
        ("memory.available", "1Gi", Ok(Some(Quantity(1 << 30)))),
        ("nodefs.available", "10%", Ok(Some(Percentage(0.1)))),
        ("nodefs.available", "0%", Ok(None)),
        ("nodefs.available", "100%", Ok(None)),
        ("pid.available", "1000", Ok(Some(Quantity(1000)))),
        ("nodefs.inodesFree", "1.5k", Ok(Some(Quantity(1500)))),
        (
            "memory.available",
            "-1Mi",
            Err("eviction threshold memory.available must be positive: -1Mi"),
        ),
        (
            "memory.available",
            "0",
            Err("eviction threshold memory.available must be positive: 0"),
        ),
        (
            "nodefs.available",
            "150%",
            Err("eviction percentage threshold nodefs.available must be <= 100%: 150%"),
        ),
        (
            "nodefs.available",
            "-5%",
            Err("eviction percentage threshold nodefs.available must be >= 0%: -5%"),
        ),
        (
            "nodefs.available",
            "x%",
            Err("\"x%\" is not a valid percentage"),
        ),
        (
            "memory.available",
            "lots",
            Err("\"lots\" is not a valid quantity"),
        ),
    ];
    for (signal, v, want) in cases {
        let got = parse_value(Signal::parse(signal).unwrap(), v);
        assert_eq!(got, want.map_err(str::to_string), "{signal}={v}");
    }
}

#[test]
fn hard_soft_grace_and_reclaim() {
    let c = cfg(
        &[("memory.available", "100Mi"), ("nodefs.available", "10%")],
        &[("memory.available", "300Mi")],
        &[("memory.available", "1m30s")],
        &[("memory.available", "50Mi"), ("nodefs.available", "1%")],
    );
    let t = c.thresholds(true).unwrap();
    let got: Vec<(Signal, ThresholdValue, Duration, Option<ThresholdValue>)> = t
        .iter()
        .map(|t| (t.signal, t.value, t.grace_period, t.min_reclaim))
        .collect();
    use ThresholdValue::*;
    let mem_reclaim = Some(Quantity(50 << 20));
    assert_eq!(
        got,
        vec![
            (
                Signal::MemoryAvailable,
                Quantity(100 << 20),
                Duration::ZERO,
                mem_reclaim
            ),
            (
                Signal::NodeFsAvailable,
                Percentage(0.1),
                Duration::ZERO,
                Some(Percentage(0.01))
            ),
            (
                Signal::MemoryAvailable,
                Quantity(300 << 20),
                Duration::from_secs(90),
                mem_reclaim
            ),
            // Only the hard memory.available is copied for allocatable, as upstream.
            (
                Signal::AllocatableMemoryAvailable,
                Quantity(100 << 20),
                Duration::ZERO,
                mem_reclaim
            ),
        ]
    );
    assert!(t[0].is_hard() && !t[2].is_hard());
    // Without `pods` enforcement there is no allocatable threshold.
    assert_eq!(c.thresholds(false).unwrap().len(), 3);
}

#[test]
fn every_error_is_listed_with_its_field() {
    let c = cfg(
        &[("memory.available", "-1"), ("memory.avail", "1Gi")],
        &[("nodefs.available", "20%"), ("pid.available", "100")],
        &[("pid.available", "-1s"), ("bogus", "1m")],
        &[("memory.available", "-5Mi"), ("nodefs.available", "0%")],
    );
    let errs = c.thresholds(true).unwrap_err();
    assert_eq!(
        errs,
        vec![
            "evictionHard[memory.avail]: unsupported eviction signal memory.avail",
            "evictionHard[memory.available]: eviction threshold memory.available must be positive: -1",
            "evictionSoftGracePeriod[bogus]: unsupported eviction signal bogus",
            "evictionSoftGracePeriod[pid.available]: invalid eviction grace period specified: duration \"-1s\" must not be negative",
            "evictionMinimumReclaim[memory.available]: negative eviction minimum reclaim specified for memory.available",
            "evictionMinimumReclaim[nodefs.available]: eviction percentage minimum reclaim nodefs.available must be positive: 0%",
            "evictionSoft[nodefs.available]: grace period must be specified for the soft eviction threshold nodefs.available",
            "evictionSoft[pid.available]: grace period must be specified for the soft eviction threshold pid.available",
        ]
    );
}

#[test]
fn threshold_quantity_of_a_percentage_truncates() {
    // Upstream multiplies by the float32 percentage and truncates.
    assert_eq!(ThresholdValue::Percentage(0.1).quantity(1000), 100);
    assert_eq!(ThresholdValue::Percentage(0.05).quantity(999), 49);
    assert_eq!(ThresholdValue::Quantity(7).quantity(1000), 7);
}

#[test]
fn merge_default_eviction_settings() {
    let set = map(&[("memory.available", "1Gi")]);
    assert_eq!(effective_hard(None, false), default_eviction_hard());
    assert_eq!(effective_hard(Some(set.clone()), false), set);
    let merged = effective_hard(Some(set), true);
    assert_eq!(merged.len(), 5);
    assert_eq!(merged["memory.available"], "1Gi");
    assert_eq!(merged["nodefs.available"], "10%");
}

#[test]
fn signals_map_to_resources_and_conditions() {
    for s in Signal::ALL {
        assert_eq!(Signal::parse(s.as_str()), Some(s));
    }
    assert_eq!(Signal::MemoryAvailable.node_condition(), "MemoryPressure");
    assert_eq!(
        Signal::AllocatableMemoryAvailable.node_condition(),
        "MemoryPressure"
    );
    assert_eq!(Signal::ImageFsInodesFree.node_condition(), "DiskPressure");
    assert_eq!(Signal::ImageFsInodesFree.resource(), "inodes");
    assert_eq!(Signal::NodeFsAvailable.resource(), "ephemeral-storage");
    assert_eq!(Signal::PidAvailable.node_condition(), "PIDPressure");
}
