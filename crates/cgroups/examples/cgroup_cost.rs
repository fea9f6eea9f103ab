//! What a pod cgroup costs the kubelet on this host: N burstable-pod cgroups created with the
//! values the container manager writes (shares, quota/period, memory, pids), then N removed,
//! each timed, with this process's CPU time. Prints figures, asserts nothing (bench/cgroups.sh).
//!
//!   cargo run --release -p rkubelet-cgroups --example cgroup_cost -- [N...]

use std::time::{Duration, Instant};

use cgroups::{CgroupManager, CgroupName, Driver, ResourceConfig};

/// This process's time on a CPU (the first field of /proc/self/schedstat, nanoseconds).
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/schedstat")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
        .map(|ns| ns / 1e9)
        .unwrap_or(0.0)
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn report(what: &str, mut d: Vec<Duration>, cpu: f64) {
    d.sort();
    let total: f64 = d.iter().map(Duration::as_secs_f64).sum();
    println!(
        "  {what:<8} p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms  total {:.1} ms  CPU {:.1} ms ({:.3} ms/pod)",
        pct(&d, 0.5),
        pct(&d, 0.99),
        pct(&d, 1.0),
        total * 1e3,
        cpu * 1e3,
        cpu * 1e3 / d.len() as f64
    );
}

fn main() {
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let counts = if counts.is_empty() {
        vec![30, 100]
    } else {
        counts
    };
    let mgr = cgroups::detect(Driver::Cgroupfs).expect("detect cgroups");
    println!("cgroup {:?}, driver cgroupfs", mgr.version());
    let root = CgroupName::new([format!("rkt-bench-{}", std::process::id())]);
    let tier = root.child("kubepods").child("burstable");
    mgr.create(&tier, &ResourceConfig::default())
        .expect("create tier");
    let config = ResourceConfig {
        cpu_shares: Some(102),
        cpu_quota: Some(30_000),
        cpu_period: Some(100_000),
        memory_limit: Some(96 << 20),
        pids_limit: Some(1024),
        ..Default::default()
    };
    for n in counts {
        println!("N = {n}");
        let names: Vec<CgroupName> = (0..n).map(|i| tier.child(format!("pod{i:08}"))).collect();
        let cpu0 = cpu_seconds();
        let mut created = Vec::with_capacity(n);
        for name in &names {
            let t = Instant::now();
            mgr.create(name, &config).expect("create pod cgroup");
            created.push(t.elapsed());
        }
        report("create", created, cpu_seconds() - cpu0);
        let cpu0 = cpu_seconds();
        let mut removed = Vec::with_capacity(n);
        for name in &names {
            let t = Instant::now();
            mgr.kill_all(name).expect("kill (none there)");
            mgr.destroy(name).expect("destroy pod cgroup");
            removed.push(t.elapsed());
        }
        report("remove", removed, cpu_seconds() - cpu0);
    }
    mgr.destroy(&root).expect("remove the bench root");
}
