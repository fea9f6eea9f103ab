//! `/proc/self/mountinfo` (proc(5)): where each cgroup v1 controller is mounted, and the cgroup2
//! mount (the whole tree on a v2 host, `/sys/fs/cgroup/unified` on a hybrid one). Counterpart:
//! libcontainer `cgroups/v1_utils.go` `getCgroupMountsHelper` / `FindCgroupMountpoint`.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The cgroup v1 controllers the kernel knows (`cgroup_subsys` names); a super option not in this
/// list (`rw`, `xattr`, `noprefix`, `release_agent=…`) is not a controller.
pub const V1_CONTROLLERS: &[&str] = &[
    "blkio",
    "cpu",
    "cpuacct",
    "cpuset",
    "devices",
    "freezer",
    "hugetlb",
    "memory",
    "misc",
    "net_cls",
    "net_prio",
    "perf_event",
    "pids",
    "rdma",
];

/// One line of mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The root of the mount within its filesystem (field 4).
    pub root: String,
    /// Where it is mounted (field 5), octal escapes decoded.
    pub mount_point: PathBuf,
    pub fs_type: String,
    pub super_options: Vec<String>,
}

/// Parses every line; a line without the " - " separator or its three fields after it is an error.
pub fn parse(text: &str) -> Result<Vec<Mount>, String> {
    let mut mounts = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let bad = |what: &str| format!("line {}: {what}: {line:?}", n + 1);
        let sep = fields
            .iter()
            .skip(6)
            .position(|f| *f == "-")
            .map(|p| p + 6)
            .ok_or_else(|| bad("no \"-\" separator after the optional fields"))?;
        let (Some(fs_type), Some(_source), Some(opts)) = (
            fields.get(sep + 1),
            fields.get(sep + 2),
            fields.get(sep + 3),
        ) else {
            return Err(bad("want fstype, source and super options after \"-\""));
        };
        mounts.push(Mount {
            root: unescape(fields[3]),
            mount_point: PathBuf::from(unescape(fields[4])),
            fs_type: fs_type.to_string(),
            super_options: opts.split(',').map(str::to_string).collect(),
        });
    }
    Ok(mounts)
}

/// Decodes mountinfo's octal escapes (`\040` for a space, `\011` tab, `\012` newline, `\134` backslash).
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 4 <= bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let digit = |k: usize| u32::from(bytes[i + k] - b'0');
            let v = digit(1) * 64 + digit(2) * 8 + digit(3);
            if let Ok(b) = u8::try_from(v) {
                out.push(b);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup mounts of a host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupMounts {
    /// v1 controller (and `name=systemd`-style named hierarchy) -> mount point. Controllers
    /// co-mounted (`cpu,cpuacct`) map to the same path.
    pub v1: BTreeMap<String, PathBuf>,
    /// The first cgroup2 mount.
    pub cgroup2: Option<PathBuf>,
}

/// Picks the cgroup mounts out of mountinfo. The first mount of a controller wins (later ones are
/// bind mounts of the same hierarchy, e.g. into containers).
pub fn cgroup_mounts(text: &str) -> Result<CgroupMounts, String> {
    let mut out = CgroupMounts::default();
    for m in parse(text)? {
        match m.fs_type.as_str() {
            "cgroup" => {
                for opt in &m.super_options {
                    if V1_CONTROLLERS.contains(&opt.as_str()) || opt.starts_with("name=") {
                        out.v1
                            .entry(opt.clone())
                            .or_insert_with(|| m.mount_point.clone());
                    }
                }
            }
            "cgroup2" if out.cgroup2.is_none() => out.cgroup2 = Some(m.mount_point.clone()),
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Recorded on this machine: every controller on its own mount (cpu and cpuacct separate),
    /// a named systemd hierarchy, and the hybrid cgroup2 mount.
    pub(crate) const SEPARATE: &str = "\
23 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    /// A systemd-era v1 host (Ubuntu 18.04-style): cpu,cpuacct and net_cls,net_prio co-mounted.
    const COMBINED: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
33 25 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
34 33 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
35 33 0:30 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
38 33 0:33 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct
39 33 0:34 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,net_cls,net_prio
40 33 0:35 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,memory
41 33 0:36 / /sys/fs/cgroup/hugetlb rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,hugetlb
42 33 0:37 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:18 - cgroup cgroup rw,pids
43 33 0:38 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:19 - cgroup cgroup rw,cpuset,clone_children
90 200 0:35 / /var/lib/x/memory rw,relatime - cgroup cgroup rw,memory
";

    /// A pure v2 host.
    const V2: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
35 25 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    #[test]
    fn separate_cpu_and_cpuacct() -> Result<(), String> {
        let m = cgroup_mounts(SEPARATE)?;
        let p = |s: &str| m.v1.get(s).cloned();
        assert_eq!(p("cpu"), Some(PathBuf::from("/sys/fs/cgroup/cpu")));
        assert_eq!(p("cpuacct"), Some(PathBuf::from("/sys/fs/cgroup/cpuacct")));
        assert_eq!(
            p("name=systemd"),
            Some(PathBuf::from("/sys/fs/cgroup/systemd"))
        );
        assert_eq!(p("hugetlb"), None);
        assert_eq!(m.v1.len(), 9, "{:?}", m.v1);
        assert_eq!(m.cgroup2, Some(PathBuf::from("/sys/fs/cgroup/unified")));
        Ok(())
    }

    #[test]
    fn combined_cpu_cpuacct() -> Result<(), String> {
        let m = cgroup_mounts(COMBINED)?;
        let both = Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
        assert_eq!(m.v1.get("cpu").cloned(), both);
        assert_eq!(m.v1.get("cpuacct").cloned(), both);
        assert_eq!(
            m.v1.get("net_prio").cloned(),
            Some(PathBuf::from("/sys/fs/cgroup/net_cls,net_prio"))
        );
        // First mount wins over the later bind mount; flags are not controllers.
        assert_eq!(
            m.v1.get("memory").cloned(),
            Some(PathBuf::from("/sys/fs/cgroup/memory"))
        );
        assert!(
            !m.v1.contains_key("xattr")
                && !m.v1.contains_key("clone_children")
                && !m.v1.contains_key("rw")
        );
        assert_eq!(m.cgroup2, Some(PathBuf::from("/sys/fs/cgroup/unified")));
        Ok(())
    }

    #[test]
    fn pure_v2() -> Result<(), String> {
        let m = cgroup_mounts(V2)?;
        assert!(m.v1.is_empty());
        assert_eq!(m.cgroup2, Some(PathBuf::from("/sys/fs/cgroup")));
        Ok(())
    }

    #[test]
    fn optional_fields_escapes_and_errors() -> Result<(), String> {
        let line = "50 23 0:40 /sub /mnt/my\\040cg rw shared:3 master:1 - cgroup cg rw,pids\n";
        let mounts = parse(line)?;
        assert_eq!(mounts[0].mount_point, PathBuf::from("/mnt/my cg"));
        assert_eq!(mounts[0].root, "/sub");
        assert_eq!(mounts[0].super_options, vec!["rw", "pids"]);
        assert!(parse("1 2 3 4 5 6 7\n").is_err());
        assert!(parse("1 2 0:1 / /x rw - cgroup\n").is_err());
        assert_eq!(unescape("a\\134b\\"), "a\\b\\");
        Ok(())
    }
}
