use std::time::{Duration, Instant};

use kubelet_config::config::eviction::{Signal, Threshold, ThresholdValue};

use super::*;
use crate::stats::summary::{FsStats, MemoryStats, NodeStats, RlimitStats, RuntimeStats};

const MI: u64 = 1 << 20;

fn summary(mem_avail: u64, mem_ws: u64, fs_avail: u64, pids: (u64, u64)) -> Summary {
    Summary {
        node: NodeStats {
            memory: Some(MemoryStats {
                available_bytes: Some(mem_avail),
                working_set_bytes: Some(mem_ws),
                ..Default::default()
            }),
            fs: Some(FsStats {
                available_bytes: Some(fs_avail),
                capacity_bytes: Some(1000 * MI),
                inodes_free: Some(900),
                inodes: Some(1000),
                ..Default::default()
            }),
            runtime: Some(RuntimeStats {
                image_fs: Some(FsStats {
                    available_bytes: Some(500 * MI),
                    capacity_bytes: Some(2000 * MI),
                    inodes_free: Some(10),
                    inodes: Some(1000),
                    ..Default::default()
                }),
            }),
            rlimit: Some(RlimitStats {
                time: None,
                maxpid: Some(pids.0),
                curproc: Some(pids.1),
            }),
            ..Default::default()
        },
        pods: vec![],
    }
}

fn hard(signal: Signal, v: ThresholdValue) -> Threshold {
    Threshold {
        signal,
        value: v,
        grace_period: Duration::ZERO,
        min_reclaim: None,
    }
}

#[test]
fn observations_from_the_summary() {
    let s = summary(300 * MI, 700 * MI, 100 * MI, (4_194_304, 200));
    let o = observe(
        &s,
        Some(PodsMemory {
            working_set: 100 * MI,
            limit: 900 * MI,
        }),
    );
    let get = |s: Signal| o.get(&s).map(|o| (o.available, o.capacity));
    let mi = |v: u64| (v * MI) as i64;
    assert_eq!(get(Signal::MemoryAvailable), Some((mi(300), mi(1000))));
    assert_eq!(
        get(Signal::AllocatableMemoryAvailable),
        Some((mi(800), mi(900)))
    );
    assert_eq!(get(Signal::NodeFsAvailable), Some((mi(100), mi(1000))));
    assert_eq!(get(Signal::NodeFsInodesFree), Some((900, 1000)));
    assert_eq!(get(Signal::ImageFsAvailable), Some((mi(500), mi(2000))));
    assert_eq!(get(Signal::ImageFsInodesFree), Some((10, 1000)));
    assert_eq!(get(Signal::PidAvailable), Some((4_194_104, 4_194_304)));
    // Without the kubepods figures there is no allocatable signal; without a summary, nothing.
    assert!(!observe(&s, None).contains_key(&Signal::AllocatableMemoryAvailable));
    assert!(observe(&Summary::default(), None).is_empty());
}

#[test]
fn thresholds_met_table() {
    use ThresholdValue::*;
    let s = summary(300 * MI, 700 * MI, 100 * MI, (1000, 900));
    let o = observe(&s, None);
    let reclaim = |mut t: Threshold, r| {
        t.min_reclaim = Some(r);
        t
    };
    let cases: &[(Threshold, bool, bool)] = &[
        // (threshold, met, met with min reclaim enforced)
        (
            hard(Signal::MemoryAvailable, Quantity((400 * MI) as i64)),
            true,
            true,
        ),
        (
            hard(Signal::MemoryAvailable, Quantity((300 * MI) as i64)),
            false,
            false,
        ),
        (
            reclaim(
                hard(Signal::MemoryAvailable, Quantity((250 * MI) as i64)),
                Quantity((100 * MI) as i64),
            ),
            false,
            true,
        ),
        (hard(Signal::NodeFsAvailable, Percentage(0.15)), true, true),
        (
            hard(Signal::NodeFsAvailable, Percentage(0.05)),
            false,
            false,
        ),
        // containerfs follows nodefs.
        (
            hard(Signal::ContainerFsAvailable, Percentage(0.15)),
            true,
            true,
        ),
        (
            hard(Signal::ImageFsInodesFree, Percentage(0.05)),
            true,
            true,
        ),
        (hard(Signal::PidAvailable, Quantity(101)), true, true),
        (hard(Signal::PidAvailable, Quantity(100)), false, false),
        // No observation: never met.
        (
            hard(Signal::AllocatableMemoryAvailable, Quantity(1 << 40)),
            false,
            false,
        ),
    ];
    for (t, met, met_reclaim) in cases {
        assert_eq!(
            thresholds_met(&[*t], &o, false).len() == 1,
            *met,
            "{t:?} without min reclaim"
        );
        assert_eq!(
            thresholds_met(&[*t], &o, true).len() == 1,
            *met_reclaim,
            "{t:?} with min reclaim"
        );
    }
}

#[test]
fn grace_periods_conditions_and_transition() {
    use ThresholdValue::*;
    let mem_hard = hard(Signal::MemoryAvailable, Quantity((100 * MI) as i64));
    let mut disk_soft = hard(Signal::NodeFsAvailable, Quantity((200 * MI) as i64));
    disk_soft.grace_period = Duration::from_secs(30);
    let pid_hard = hard(Signal::PidAvailable, Quantity(50));
    let all = [mem_hard, disk_soft, pid_hard];
    let transition = Duration::from_secs(60);
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let low = summary(50 * MI, 950 * MI, 150 * MI, (1000, 980));
    let fine = summary(500 * MI, 500 * MI, 500 * MI, (1000, 10));
    let mut tr = Tracker::default();
    // Everything low: conditions at once, only the hard thresholds act, memory first.
    let p = tr.update(&all, &observe(&low, None), transition, at(0));
    assert_eq!(
        p.conditions,
        ["MemoryPressure", "DiskPressure", "PIDPressure"]
    );
    assert_eq!(p.to_act_on, [mem_hard, pid_hard]);
    // 30 s on: the soft disk threshold's grace period has passed.
    let p = tr.update(&all, &observe(&low, None), transition, at(30));
    assert_eq!(p.to_act_on, [mem_hard, disk_soft, pid_hard]);
    // Recovered: nothing to act on, conditions held for the transition period.
    let p = tr.update(&all, &observe(&fine, None), transition, at(40));
    assert!(p.to_act_on.is_empty());
    assert_eq!(p.conditions.len(), 3);
    let p = tr.update(&all, &observe(&fine, None), transition, at(89));
    assert_eq!(p.conditions.len(), 3);
    let p = tr.update(&all, &observe(&fine, None), transition, at(90));
    assert!(p.conditions.is_empty(), "{:?}", p.conditions);
    // Low again but briefly: the soft threshold starts its grace period from scratch.
    let p = tr.update(&all, &observe(&low, None), transition, at(100));
    assert!(!p.to_act_on.contains(&disk_soft));
}

#[test]
fn min_reclaim_keeps_a_threshold_met_until_enough_is_back() {
    use ThresholdValue::*;
    let mut t = hard(Signal::MemoryAvailable, Quantity((100 * MI) as i64));
    t.min_reclaim = Some(Quantity((100 * MI) as i64));
    let mut tr = Tracker::default();
    let now = Instant::now();
    let obs = |avail: u64| observe(&summary(avail * MI, 1000 * MI, MI, (10, 1)), None);
    assert_eq!(
        tr.update(&[t], &obs(50), Duration::ZERO, now).to_act_on,
        [t]
    );
    // Above the threshold but not above threshold + min reclaim: still met.
    assert_eq!(
        tr.update(&[t], &obs(150), Duration::ZERO, now).to_act_on,
        [t]
    );
    assert!(tr
        .update(&[t], &obs(250), Duration::ZERO, now)
        .to_act_on
        .is_empty());
}

#[test]
fn quantities_print_as_upstream() {
    let cases: &[(i64, &str, &str)] = &[
        (0, "0", "0"),
        (100 << 20, "100Mi", "104857600"),
        (52_428_800, "50Mi", "52428800"),
        (52_430_000, "52430000", "52430k"),
        (1536, "1536", "1536"),
        (2048, "2Ki", "2048"),
        (5000, "5000", "5k"),
        (1 << 30, "1Gi", "1073741824"),
        (-2048, "-2Ki", "-2048"),
    ];
    for (v, bin, dec) in cases {
        assert_eq!(format_binary(*v), *bin, "{v}");
        assert_eq!(format_decimal(*v), *dec, "{v}");
    }
}
