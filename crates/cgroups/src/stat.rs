//! Pure parsers for the cgroup files usage and read-back need: `memory.stat`, `cpu.stat`,
//! `cpuacct.stat`, single numbers, `max` values and pressure (PSI) files. Callers wrap the `String`
//! errors with the file's path. Counterparts: libcontainer `fscommon.ParseKeyValue`/`GetCgroupParamUint`,
//! `fs2/psi.go` `statPSI`, and cAdvisor's working-set computation (`container/libcontainer/handler.go`
//! `setMemoryStats`).

use std::collections::BTreeMap;

use crate::Psi;

/// USER_HZ: cpuacct.stat counts in these ticks per second on every Linux build kubelets run on.
pub const USER_HZ: u64 = 100;

/// v1 reports "no limit" as the largest page-aligned i64 (9223372036854771712); anything this large
/// is unlimited.
pub const V1_UNLIMITED_THRESHOLD: u64 = 1 << 62;

/// A flat keyed file ("key value" per line: memory.stat, cpu.stat, cpuacct.stat). Lines that are
/// not `key <u64>` are skipped: newer kernels add keys, and some values are not counters.
pub fn parse_flat_keyed(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(key_value)
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// The value of one key in a flat keyed file, without building the map (libcontainer
/// `fscommon.GetValueByKey`): for readers on a periodic path that want one or two keys of
/// memory.stat, cpu.stat or /proc/stat.
pub fn value_by_key(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .filter_map(key_value)
        .find_map(|(k, v)| (k == key).then_some(v))
}

/// One `key <u64>` line of a flat keyed file; None for any other line.
fn key_value(line: &str) -> Option<(&str, u64)> {
    let mut it = line.split_whitespace();
    let key = it.next()?;
    let value = it.next()?.parse().ok()?;
    Some((key, value))
}

/// The value of `key` in /proc/meminfo (`Key:   123 kB`), in KiB.
pub fn meminfo_kib(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// A file holding one unsigned number.
pub fn parse_u64(text: &str) -> Result<u64, String> {
    let t = text.trim();
    t.parse().map_err(|e| format!("{t:?}: {e}"))
}

/// A file holding a number or "max" (pids.max, memory.max, hugetlb.*.max): "max" is -1.
pub fn parse_max(text: &str) -> Result<i64, String> {
    match text.trim() {
        "max" => Ok(-1),
        t => t.parse().map_err(|e| format!("{t:?}: {e}")),
    }
}

/// v2 `cpu.max`: `<quota|max> <period>` -> (quota, -1 for max; period).
pub fn parse_cpu_max(text: &str) -> Result<(i64, u64), String> {
    let mut it = text.split_whitespace();
    let quota = parse_max(it.next().ok_or_else(|| format!("{text:?}: empty"))?)?;
    let period = match it.next() {
        Some(p) => parse_u64(p)?,
        None => return Err(format!("{text:?}: no period")),
    };
    Ok((quota, period))
}

/// A v1 limit value (memory.limit_in_bytes): `None` when it means unlimited.
pub fn v1_limit(raw: u64) -> Option<u64> {
    (raw < V1_UNLIMITED_THRESHOLD).then_some(raw)
}

/// cpuacct.stat ticks to nanoseconds (ticks * 1e9 / USER_HZ).
pub fn ticks_to_ns(ticks: u64) -> u64 {
    ticks.saturating_mul(1_000_000_000 / USER_HZ)
}

/// cAdvisor's working set: usage minus inactive file pages, floored at 0.
pub fn working_set(usage: u64, inactive_file: u64) -> u64 {
    usage.saturating_sub(inactive_file)
}

/// A pressure file (`cpu.pressure`, `memory.pressure`, `io.pressure`):
/// "some avg10=0.00 avg60=0.00 avg300=0.00 total=0" and optionally the same for "full".
pub fn parse_psi(text: &str) -> Result<Psi, String> {
    let mut psi = Psi::default();
    let mut seen_some = false;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let Some(kind) = it.next() else { continue };
        let (a10, a60, a300, total) = match kind {
            "some" => {
                seen_some = true;
                (
                    &mut psi.some_avg10,
                    &mut psi.some_avg60,
                    &mut psi.some_avg300,
                    &mut psi.some_total_us,
                )
            }
            "full" => (
                &mut psi.full_avg10,
                &mut psi.full_avg60,
                &mut psi.full_avg300,
                &mut psi.full_total_us,
            ),
            other => return Err(format!("unknown pressure line kind {other:?}")),
        };
        for field in it {
            let (key, value) = field
                .split_once('=')
                .ok_or_else(|| format!("{field:?}: want key=value"))?;
            let bad = |e: &dyn std::fmt::Display| format!("{field:?}: {e}");
            match key {
                "avg10" => *a10 = value.parse().map_err(|e| bad(&e))?,
                "avg60" => *a60 = value.parse().map_err(|e| bad(&e))?,
                "avg300" => *a300 = value.parse().map_err(|e| bad(&e))?,
                "total" => *total = value.parse().map_err(|e| bad(&e))?,
                _ => {}
            }
        }
    }
    if !seen_some {
        return Err(format!("{text:?}: no \"some\" line"));
    }
    Ok(psi)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Recorded from this machine's /sys/fs/cgroup/memory/memory.stat (v1, trimmed).
    const V1_MEMORY_STAT: &str = "cache 11124736\nrss 4108288\nrss_huge 0\nshmem 9068544\n\
pgfault 32912\npgmajfault 0\ninactive_file 49152\nhierarchical_memory_limit 9223372036854771712\n\
total_cache 1535922176\ntotal_rss 482263040\ntotal_pgfault 23332587\ntotal_pgmajfault 1950\n\
total_inactive_file 1144918016\n";

    // A v2 memory.stat (trimmed), as kernel 6.x writes it.
    const V2_MEMORY_STAT: &str = "anon 1245184\nfile 2506752\nkernel 454656\nshmem 0\n\
inactive_anon 1236992\nactive_anon 8192\ninactive_file 1933312\nactive_file 573440\n\
pgfault 5671\npgmajfault 3\n";

    #[test]
    fn value_by_key_agrees_with_the_map() {
        for (text, key) in [
            (V1_MEMORY_STAT, "total_inactive_file"),
            (V2_MEMORY_STAT, "inactive_file"),
            ("usage_usec 123\nuser_usec 7\n", "usage_usec"),
            ("cpu  1 2 3\nintr 9 0 0\nbtime 1700000000\n", "btime"),
            ("a 1\n", "b"),
        ] {
            assert_eq!(
                value_by_key(text, key),
                parse_flat_keyed(text).get(key).copied(),
                "{key}"
            );
        }
        assert_eq!(
            value_by_key(V1_MEMORY_STAT, "total_inactive_file"),
            Some(1_144_918_016)
        );
    }

    #[test]
    fn flat_keyed_table() {
        let m = parse_flat_keyed(V1_MEMORY_STAT);
        assert_eq!(m.get("total_inactive_file"), Some(&1_144_918_016));
        assert_eq!(m.get("total_rss"), Some(&482_263_040));
        assert_eq!(
            m.get("hierarchical_memory_limit"),
            Some(&9_223_372_036_854_771_712)
        );
        let m = parse_flat_keyed(V2_MEMORY_STAT);
        assert_eq!(
            (
                m["anon"],
                m["file"],
                m["inactive_file"],
                m["pgfault"],
                m["pgmajfault"]
            ),
            (1_245_184, 2_506_752, 1_933_312, 5671, 3)
        );
        // cpu.stat v1 and v2, cpuacct.stat: same shape.
        let m =
            parse_flat_keyed("nr_periods 10\nnr_throttled 2\nthrottled_time 3000\nnr_bursts 0\n");
        assert_eq!(
            (m["nr_periods"], m["nr_throttled"], m["throttled_time"]),
            (10, 2, 3000)
        );
        let m = parse_flat_keyed("user 39182\nsystem 11238\n");
        assert_eq!((m["user"], m["system"]), (39182, 11238));
        // Junk lines are skipped, not fatal.
        let m = parse_flat_keyed("a 1\nweird\nb -2\nc 3 extra\n\n");
        assert_eq!(
            m.into_iter().collect::<Vec<_>>(),
            vec![("a".to_string(), 1), ("c".to_string(), 3)]
        );
    }

    #[test]
    fn numbers_and_max() {
        assert_eq!(parse_u64("42\n"), Ok(42));
        assert!(parse_u64("x").is_err());
        assert_eq!(parse_max("max\n"), Ok(-1));
        assert_eq!(parse_max("50\n"), Ok(50));
        assert!(parse_max("").is_err());
        assert_eq!(parse_cpu_max("max 100000\n"), Ok((-1, 100_000)));
        assert_eq!(parse_cpu_max("50000 100000"), Ok((50_000, 100_000)));
        assert!(parse_cpu_max("50000").is_err());
        assert!(parse_cpu_max("").is_err());
    }

    #[test]
    fn v1_limits_and_conversions() {
        assert_eq!(v1_limit(9_223_372_036_854_771_712), None);
        assert_eq!(v1_limit(1 << 62), None);
        assert_eq!(v1_limit(67_108_864), Some(67_108_864));
        assert_eq!(ticks_to_ns(39182), 391_820_000_000);
        assert_eq!(working_set(100, 30), 70);
        assert_eq!(working_set(30, 100), 0);
    }

    #[test]
    fn psi_table() {
        let text = "some avg10=1.50 avg60=0.25 avg300=0.00 total=123456\nfull avg10=0.10 avg60=0.00 avg300=0.00 total=789\n";
        let psi = parse_psi(text);
        assert_eq!(
            psi,
            Ok(Psi {
                some_avg10: 1.5,
                some_avg60: 0.25,
                some_avg300: 0.0,
                some_total_us: 123_456,
                full_avg10: 0.1,
                full_avg60: 0.0,
                full_avg300: 0.0,
                full_total_us: 789,
            })
        );
        // cpu.pressure on older kernels has no "full" line.
        let psi = parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n");
        assert_eq!(psi.map(|p| (p.some_total_us, p.full_total_us)), Ok((5, 0)));
        assert!(parse_psi("").is_err());
        assert!(parse_psi("some avg10=x").is_err());
        assert!(parse_psi("other avg10=1").is_err());
    }
}
