//! The kernel's cgroup files as the tests read them, on either hierarchy a node can have:
//! cgroup v1 (one mount per controller under /sys/fs/cgroup) or cgroup v2 (one tree at
//! /sys/fs/cgroup). The values are named by what they mean (shares, quota, memory limit) and
//! come back in v1's units where the two differ only in spelling, so a test states upstream's
//! value once and reads it on either; where v2 stores another value (cpu.weight for shares), the
//! test converts its expectation with `shares_as_seen`, as upstream's runtime does on writing.
//! cgroup v2 is what hack/vm.sh's guest runs.

use std::path::{Path, PathBuf};

const ROOT: &str = "/sys/fs/cgroup";

/// /sys/fs/cgroup is the unified hierarchy itself (a hybrid host's cgroup2 mount at
/// /sys/fs/cgroup/unified holds no controllers and is not what pods use).
pub fn is_v2() -> bool {
    Path::new(ROOT).join("cgroup.controllers").exists()
}

/// The directory of cgroup `rel` (cgroupfs path) in `controller`'s hierarchy.
pub fn dir(controller: &str, rel: &str) -> PathBuf {
    let base = if is_v2() {
        PathBuf::from(ROOT)
    } else {
        Path::new(ROOT).join(controller)
    };
    base.join(rel.trim_start_matches('/'))
}

/// The directories of cgroup `rel` in every hierarchy pods are placed in (v2: the one).
pub fn dirs(rel: &str) -> Vec<PathBuf> {
    if is_v2() {
        vec![dir("", rel)]
    } else {
        ["cpu", "cpuacct", "memory", "pids", "cpuset"]
            .iter()
            .map(|c| dir(c, rel))
            .collect()
    }
}

pub fn read(controller: &str, rel: &str, file: &str) -> String {
    let p = dir(controller, rel).join(file);
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
        .trim()
        .to_string()
}

/// A number, with "max" (v2's and pids' "no limit") as i64::MAX.
fn number(v: &str, what: &str) -> i64 {
    if v == "max" {
        return i64::MAX;
    }
    v.parse().unwrap_or_else(|_| panic!("{what}: {v:?}"))
}

pub fn num(controller: &str, rel: &str, file: &str) -> i64 {
    number(&read(controller, rel, file), &format!("{rel}/{file}"))
}

/// v1 cpu.shares; v2 cpu.weight.
pub fn cpu_shares(rel: &str) -> i64 {
    if is_v2() {
        num("cpu", rel, "cpu.weight")
    } else {
        num("cpu", rel, "cpu.shares")
    }
}

/// What `cpu_shares` reads for upstream's `shares`: v2 keeps the weight runc converts them to
/// (libcontainer's ConvertCPUSharesToCgroupV2Value).
pub fn shares_as_seen(shares: i64) -> i64 {
    if is_v2() {
        1 + ((shares - 2) * 9999) / 262142
    } else {
        shares
    }
}

/// (quota, period) in microseconds, quota -1 for none: v1 cpu.cfs_quota_us and
/// cpu.cfs_period_us; v2 the two fields of cpu.max.
pub fn cpu_quota_period(rel: &str) -> (i64, i64) {
    if is_v2() {
        let v = read("cpu", rel, "cpu.max");
        let mut f = v.split_whitespace();
        let quota = match f.next() {
            Some("max") => -1,
            Some(q) => number(q, "cpu.max quota"),
            None => panic!("{rel}/cpu.max: {v:?}"),
        };
        let period = number(f.next().unwrap_or_default(), "cpu.max period");
        (quota, period)
    } else {
        (
            num("cpu", rel, "cpu.cfs_quota_us"),
            num("cpu", rel, "cpu.cfs_period_us"),
        )
    }
}

/// v1 memory.limit_in_bytes; v2 memory.max.
pub fn memory_limit(rel: &str) -> i64 {
    num(
        "memory",
        rel,
        if is_v2() {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        },
    )
}

/// Writes a memory limit: v1 memory.limit_in_bytes; v2 memory.max.
pub fn set_memory_limit(rel: &str, bytes: i64) {
    let file = if is_v2() {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    };
    let p = dir("memory", rel).join(file);
    std::fs::write(&p, bytes.to_string()).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
}

/// cAdvisor's working set: usage less inactive file pages (v1 memory.usage_in_bytes and
/// total_inactive_file; v2 memory.current and inactive_file).
pub fn working_set(rel: &str) -> u64 {
    let (usage, key) = if is_v2() {
        ("memory.current", "inactive_file ")
    } else {
        ("memory.usage_in_bytes", "total_inactive_file ")
    };
    let usage = num("memory", rel, usage) as u64;
    let inactive: u64 = read("memory", rel, "memory.stat")
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map_or(0, |v| v.trim().parse().unwrap());
    usage.saturating_sub(inactive)
}

/// CPU used, in nanoseconds: v1 cpuacct.usage; v2 cpu.stat's usage_usec.
pub fn cpu_usage_ns(rel: &str) -> u64 {
    if is_v2() {
        read("cpu", rel, "cpu.stat")
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .map(|v| v.trim().parse::<u64>().unwrap() * 1000)
            .unwrap_or_else(|| panic!("no usage_usec in {rel}/cpu.stat"))
    } else {
        num("cpuacct", rel, "cpuacct.usage") as u64
    }
}

/// Makes cgroup `rel` and moves `pid` into it: v2 the one tree; v1 the cpu, cpuacct, memory
/// (charges moving along) and name=systemd hierarchies, so that it is the same in each.
pub fn move_into(rel: &str, pid: u32) {
    let targets: Vec<PathBuf> = if is_v2() {
        vec![dir("", rel)]
    } else {
        ["cpu", "cpuacct", "memory", "systemd"]
            .iter()
            .filter(|h| Path::new(ROOT).join(h).is_dir())
            .map(|h| dir(h, rel))
            .collect()
    };
    for d in targets {
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        if !is_v2() && d.starts_with(Path::new(ROOT).join("memory")) {
            let _ = std::fs::write(d.join("memory.move_charge_at_immigrate"), "3");
        }
        std::fs::write(d.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("move {pid} into {}: {e}", d.display()));
    }
}

/// No memory limit: v1 shows the page-rounded maximum, v2 "max".
pub fn unlimited(v: i64) -> bool {
    v >= 1 << 62
}

/// The processes of cgroup `dir` and every cgroup below it.
pub fn subtree_pids(dir: &Path) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.path().is_dir() {
                pids.extend(subtree_pids(&e.path()));
            }
        }
    }
    pids
}

/// The `max` counts of `pids.events` in a cgroup directory and every one below it (v1 counts
/// where the fork happened, v2 where the limit is).
pub fn refused_forks(dir: &Path) -> u64 {
    let own = std::fs::read_to_string(dir.join("pids.events"))
        .ok()
        .and_then(|t| t.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        .unwrap_or(0);
    let children: u64 = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| refused_forks(&e.path()))
                .sum()
        })
        .unwrap_or(0);
    own + children
}

/// Creates cgroup `rel` in every hierarchy, as a runtime would (v1's cpuset needs its cpus and
/// mems before it takes a process).
pub fn create(rel: &str) {
    for d in dirs(rel) {
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
        if !is_v2() && d.starts_with(Path::new(ROOT).join("cpuset")) {
            for f in ["cpuset.cpus", "cpuset.mems"] {
                let parent = std::fs::read_to_string(d.parent().unwrap().join(f)).unwrap();
                std::fs::write(d.join(f), parent.trim()).unwrap();
            }
        }
    }
}

/// Every cgroup directory at `root` (cgroupfs-style), in every hierarchy, removed deepest
/// first; the runtime is down by now, so they are empty. Left-overs are reported, and
/// hack/test.sh fails on them.
pub fn remove_tree(root: &str) {
    let tops: Vec<PathBuf> = if is_v2() {
        vec![dir("", root)]
    } else {
        let Ok(mounts) = std::fs::read_dir(ROOT) else {
            return;
        };
        mounts
            .flatten()
            .map(|m| m.path().join(root.trim_start_matches('/')))
            .collect()
    };
    for top in tops.into_iter().filter(|t| t.is_dir()) {
        let mut found = Vec::new();
        let mut stack = vec![top];
        while let Some(d) = stack.pop() {
            if let Ok(rd) = std::fs::read_dir(&d) {
                stack.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
            }
            found.push(d);
        }
        found.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in found {
            let mut tries = 0;
            while let Err(e) = std::fs::remove_dir(&d) {
                tries += 1;
                if tries > 50 || e.kind() == std::io::ErrorKind::NotFound {
                    if tries > 50 {
                        eprintln!("cannot remove cgroup {}: {e}", d.display());
                    }
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}
