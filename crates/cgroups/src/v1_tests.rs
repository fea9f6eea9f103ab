//! V1Manager over temp-dir trees that mimic the kernel's files (a plain directory gets the files
//! our writes create; the "kernel" values are written by the tests).

use super::*;
use std::fs;

type TestResult = Result<(), Box<dyn std::error::Error>>;

struct Tree {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Tree {
    fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
    fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.p(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    }
    fn put(&self, rel: &str, text: &str) {
        let path = self.p(rel);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).unwrap_or_else(|e| panic!("mkdir for {rel}: {e}"));
        }
        fs::write(&path, text).unwrap_or_else(|e| panic!("write {rel}: {e}"));
    }
}

/// A v1 host like this machine's (cpu and cpuacct apart) when `combined` is false, else one with
/// `cpu,cpuacct` co-mounted; plus hugetlb, a named systemd hierarchy and the hybrid unified mount.
fn host(combined: bool) -> Result<(Tree, V1Manager), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let root = tmp.path().to_path_buf();
    let mut mounts = BTreeMap::new();
    let controllers: &[(&str, &str)] = if combined {
        &[("cpu", "cpu,cpuacct"), ("cpuacct", "cpu,cpuacct")]
    } else {
        &[("cpu", "cpu"), ("cpuacct", "cpuacct")]
    };
    for (c, dir) in controllers.iter().copied().chain([
        ("cpuset", "cpuset"),
        ("memory", "memory"),
        ("pids", "pids"),
        ("hugetlb", "hugetlb"),
        ("freezer", "freezer"),
        ("name=systemd", "systemd"),
    ]) {
        fs::create_dir_all(root.join(dir))?;
        mounts.insert(c.to_string(), root.join(dir));
    }
    fs::create_dir_all(root.join("unified"))?;
    fs::create_dir_all(root.join("mm/hugepages-2048kB"))?;
    fs::create_dir_all(root.join("mm/hugepages-1048576kB"))?;
    let tree = Tree {
        _tmp: tmp,
        root: root.clone(),
    };
    tree.put("cpuset/cpuset.cpus", "0-1\n");
    tree.put("cpuset/cpuset.mems", "0\n");
    let m = V1Manager::with_mounts(mounts, Some(root.join("unified")))
        .with_hugepages_dir(root.join("mm"));
    Ok((tree, m))
}

fn full_config() -> ResourceConfig {
    ResourceConfig {
        memory_limit: Some(64 << 20),
        cpu_shares: Some(512),
        cpu_quota: Some(50_000),
        cpu_period: Some(100_000),
        pids_limit: Some(50),
        hugetlb_limits: BTreeMap::from([(2 << 20, 0), (1 << 30, -1)]),
        cpuset_cpus: None,
        cpuset_mems: None,
    }
}

fn pod() -> CgroupName {
    CgroupName::new(["kubepods", "burstable", "pod12-34"])
}

#[test]
fn create_makes_every_hierarchy_and_writes_the_config() -> TestResult {
    let (t, m) = host(false)?;
    m.create(&pod(), &full_config())?;
    for h in [
        "cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb", "freezer", "systemd", "unified",
    ] {
        assert!(
            t.p(&format!("{h}/kubepods/burstable/pod12-34")).is_dir(),
            "{h}"
        );
    }
    let d = "kubepods/burstable/pod12-34";
    assert_eq!(
        t.read(&format!("memory/{d}/memory.limit_in_bytes")),
        "67108864"
    );
    assert_eq!(t.read(&format!("cpu/{d}/cpu.shares")), "512");
    assert_eq!(t.read(&format!("cpu/{d}/cpu.cfs_quota_us")), "50000");
    assert_eq!(t.read(&format!("cpu/{d}/cpu.cfs_period_us")), "100000");
    assert_eq!(t.read(&format!("pids/{d}/pids.max")), "50");
    assert_eq!(
        t.read(&format!("hugetlb/{d}/hugetlb.2MB.limit_in_bytes")),
        "0"
    );
    assert_eq!(
        t.read(&format!("hugetlb/{d}/hugetlb.1GB.limit_in_bytes")),
        "-1"
    );
    // Nothing cpu-ish went to cpuacct; cpuset copied down level by level.
    assert!(!t.p(&format!("cpuacct/{d}/cpu.shares")).exists());
    for level in ["kubepods", "kubepods/burstable", d] {
        assert_eq!(
            t.read(&format!("cpuset/{level}/cpuset.cpus")),
            "0-1",
            "{level}"
        );
        assert_eq!(
            t.read(&format!("cpuset/{level}/cpuset.mems")),
            "0",
            "{level}"
        );
    }
    assert!(m.exists(&pod()));
    assert!(!m.exists(&pod().child("x")));
    // Idempotent.
    m.create(&pod(), &full_config())?;
    Ok(())
}

#[test]
fn cpuset_config_and_existing_values_win_over_the_parent() -> TestResult {
    let (t, m) = host(false)?;
    t.put("cpuset/kubepods/cpuset.cpus", "1\n");
    let config = ResourceConfig {
        cpuset_cpus: Some("1".into()),
        cpuset_mems: Some("0".into()),
        ..Default::default()
    };
    m.create(&CgroupName::new(["kubepods", "guaranteed"]), &config)?;
    assert_eq!(t.read("cpuset/kubepods/cpuset.cpus"), "1\n");
    assert_eq!(t.read("cpuset/kubepods/guaranteed/cpuset.cpus"), "1");
    Ok(())
}

#[test]
fn combined_cpu_cpuacct_mount_serves_both() -> TestResult {
    let (t, m) = host(true)?;
    assert_eq!(
        m.all_paths(&pod()).len(),
        8,
        "cpu,cpuacct counted once: {:?}",
        m.all_paths(&pod())
    );
    m.create(&pod(), &full_config())?;
    let d = "cpu,cpuacct/kubepods/burstable/pod12-34";
    assert_eq!(t.read(&format!("{d}/cpu.shares")), "512");
    t.put(&format!("{d}/cpuacct.usage"), "5000\n");
    t.put(&format!("{d}/cpuacct.stat"), "user 3\nsystem 1\n");
    t.put(
        &format!("{d}/cpu.stat"),
        "nr_periods 4\nnr_throttled 1\nthrottled_time 99\n",
    );
    t.put(
        "memory/kubepods/burstable/pod12-34/memory.usage_in_bytes",
        "0\n",
    );
    t.put("memory/kubepods/burstable/pod12-34/memory.stat", "");
    let u = m.usage(&pod())?;
    assert_eq!(
        (u.cpu_usage_ns, u.cpu_user_ns, u.cpu_system_ns),
        (5000, 30_000_000, 10_000_000)
    );
    assert_eq!(
        (u.cpu_periods, u.cpu_throttled_periods, u.cpu_throttled_ns),
        (4, 1, 99)
    );
    Ok(())
}

#[test]
fn update_writes_only_some_fields() -> TestResult {
    let (t, m) = host(false)?;
    m.create(&pod(), &full_config())?;
    let d = "kubepods/burstable/pod12-34";
    t.put(&format!("cpu/{d}/cpu.shares"), "999");
    m.update(
        &pod(),
        &ResourceConfig {
            memory_limit: Some(-1),
            pids_limit: Some(-1),
            ..Default::default()
        },
    )?;
    assert_eq!(t.read(&format!("memory/{d}/memory.limit_in_bytes")), "-1");
    assert_eq!(t.read(&format!("pids/{d}/pids.max")), "max");
    assert_eq!(t.read(&format!("cpu/{d}/cpu.shares")), "999");
    m.update(
        &pod(),
        &ResourceConfig {
            cpu_quota: Some(-1),
            ..Default::default()
        },
    )?;
    assert_eq!(t.read(&format!("cpu/{d}/cpu.cfs_quota_us")), "-1");
    assert_eq!(t.read(&format!("cpu/{d}/cpu.cfs_period_us")), "100000");
    // A cgroup that was never created: the error names the file.
    let err = m.update(
        &pod().child("gone"),
        &ResourceConfig {
            memory_limit: Some(1),
            ..Default::default()
        },
    );
    let msg = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.starts_with("write ") && msg.contains("gone/memory.limit_in_bytes = 1: "),
        "{msg}"
    );
    Ok(())
}

#[test]
fn resource_config_reads_back_with_kernel_spellings() -> TestResult {
    let (t, m) = host(false)?;
    m.create(&pod(), &full_config())?;
    let got = m.resource_config(&pod())?;
    let want = ResourceConfig {
        cpuset_cpus: Some("0-1".into()),
        cpuset_mems: Some("0".into()),
        ..full_config()
    };
    assert_eq!(got, want);
    // What the kernel shows for "no limit".
    let d = "kubepods/burstable/pod12-34";
    t.put(
        &format!("memory/{d}/memory.limit_in_bytes"),
        "9223372036854771712\n",
    );
    t.put(&format!("pids/{d}/pids.max"), "max\n");
    t.put(
        &format!("hugetlb/{d}/hugetlb.2MB.limit_in_bytes"),
        "9223372036854771712\n",
    );
    let got = m.resource_config(&pod())?;
    assert_eq!(
        (
            got.memory_limit,
            got.pids_limit,
            got.hugetlb_limits.get(&(2 << 20))
        ),
        (Some(-1), Some(-1), Some(&-1))
    );
    assert!(m
        .resource_config(&pod().child("gone"))
        .err()
        .is_some_and(|e| e.is_not_found()));
    Ok(())
}

#[test]
fn usage_computes_working_set_and_limits() -> TestResult {
    let (t, m) = host(false)?;
    m.create(&pod(), &ResourceConfig::default())?;
    let d = "kubepods/burstable/pod12-34";
    t.put(&format!("cpuacct/{d}/cpuacct.usage"), "123456789\n");
    t.put(&format!("cpuacct/{d}/cpuacct.stat"), "user 10\nsystem 2\n");
    t.put(
        &format!("cpu/{d}/cpu.stat"),
        "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n",
    );
    t.put(&format!("memory/{d}/memory.usage_in_bytes"), "1000000\n");
    t.put(
        &format!("memory/{d}/memory.stat"),
        "cache 1\nrss 2\ntotal_cache 300000\ntotal_rss 600000\ntotal_pgfault 50\ntotal_pgmajfault 5\ntotal_inactive_file 250000\n",
    );
    t.put(
        &format!("memory/{d}/memory.limit_in_bytes"),
        "9223372036854771712\n",
    );
    t.put(&format!("pids/{d}/pids.current"), "3\n");
    t.put(&format!("pids/{d}/pids.max"), "max\n");
    let u = m.usage(&pod())?;
    assert_eq!(
        u,
        Usage {
            cpu_usage_ns: 123_456_789,
            cpu_user_ns: 100_000_000,
            cpu_system_ns: 20_000_000,
            memory_usage_bytes: 1_000_000,
            memory_working_set_bytes: 750_000,
            memory_rss_bytes: 600_000,
            memory_cache_bytes: 300_000,
            memory_page_faults: 50,
            memory_major_page_faults: 5,
            memory_limit_bytes: None,
            pids_current: Some(3),
            pids_limit: None,
            ..Default::default()
        }
    );
    // inactive_file above usage floors at 0; a set limit is reported.
    t.put(
        &format!("memory/{d}/memory.stat"),
        "total_inactive_file 2000000\n",
    );
    t.put(&format!("memory/{d}/memory.limit_in_bytes"), "67108864\n");
    t.put(&format!("pids/{d}/pids.max"), "50\n");
    let u = m.usage(&pod())?;
    assert_eq!(
        (
            u.memory_working_set_bytes,
            u.memory_limit_bytes,
            u.pids_limit
        ),
        (0, Some(64 << 20), Some(50))
    );
    // A missing required file is an error naming it.
    fs::remove_file(t.p(&format!("memory/{d}/memory.stat")))?;
    let msg = m
        .usage(&pod())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(msg.contains("memory.stat"), "{msg}");
    assert!(m
        .usage(&pod().child("gone"))
        .err()
        .is_some_and(|e| e.is_not_found()));
    Ok(())
}

#[test]
fn pids_children_add_process_and_destroy_deepest_first() -> TestResult {
    let (t, m) = host(false)?;
    m.create(&pod(), &ResourceConfig::default())?;
    m.create(&pod().child("ctr1"), &ResourceConfig::default())?;
    t.put(
        "pids/kubepods/burstable/pod12-34/ctr1/cgroup.procs",
        "41\n42\n",
    );
    m.add_process(&pod(), 40)?;
    for h in ["cpu", "memory", "pids", "systemd", "unified"] {
        assert_eq!(
            t.read(&format!("{h}/kubepods/burstable/pod12-34/cgroup.procs")),
            "40",
            "{h}"
        );
    }
    assert_eq!(m.pids(&pod())?, vec![40, 41, 42]);
    assert_eq!(m.pids(&pod().child("ctr1"))?, vec![41, 42]);
    assert!(m.pids(&pod().child("gone"))?.is_empty());
    // Stats read one hierarchy: memory on this host, which has no devices hierarchy; 41 and
    // 42 were placed in pids only.
    assert_eq!(m.pids_for_stats(&pod())?, vec![40]);
    assert!(m.pids_for_stats(&pod().child("gone"))?.is_empty());
    assert_eq!(
        m.children(&CgroupName::new(["kubepods", "burstable"]))?,
        vec!["pod12-34"]
    );
    assert_eq!(m.children(&pod())?, vec!["ctr1"]);
    assert!(m
        .children(&pod().child("gone"))
        .err()
        .is_some_and(|e| e.is_not_found()));
    // A child directory the kubelet did not create is removed too (deepest first).
    fs::create_dir_all(t.p("freezer/kubepods/burstable/pod12-34/ctr1/deeper"))?;
    m.destroy(&pod())?;
    for h in [
        "cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb", "freezer", "systemd", "unified",
    ] {
        assert!(
            !t.p(&format!("{h}/kubepods/burstable/pod12-34")).exists(),
            "{h}"
        );
        assert!(t.p(&format!("{h}/kubepods/burstable")).is_dir(), "{h}");
    }
    assert!(!m.exists(&pod()));
    m.destroy(&pod())?;
    Ok(())
}

/// With a devices hierarchy, stats read that one (libcontainer's `GetAllPids`), children too.
#[test]
fn pids_for_stats_reads_the_devices_hierarchy() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let root = tmp.path().to_path_buf();
    let mut mounts = BTreeMap::new();
    for c in ["cpu", "cpuacct", "memory", "devices"] {
        fs::create_dir_all(root.join(c))?;
        mounts.insert(c.to_string(), root.join(c));
    }
    let m = V1Manager::with_mounts(mounts, None);
    let t = Tree {
        _tmp: tmp,
        root: root.clone(),
    };
    let d = "kubepods/burstable/pod12-34";
    t.put(&format!("devices/{d}/cgroup.procs"), "7\n");
    t.put(&format!("devices/{d}/ctr/cgroup.procs"), "9\n8\n");
    t.put(&format!("memory/{d}/cgroup.procs"), "7\n5\n");
    assert_eq!(m.pids_for_stats(&pod())?, vec![7, 8, 9]);
    assert_eq!(m.pids(&pod())?, vec![5, 7, 8, 9]);
    Ok(())
}

#[test]
fn systemd_driver_spells_slices() -> TestResult {
    let (t, m) = host(false)?;
    let m = m.with_driver(Driver::Systemd);
    assert_eq!(
        m.name(&pod()),
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice"
    );
    m.create(
        &pod(),
        &ResourceConfig {
            cpu_shares: Some(2),
            ..Default::default()
        },
    )?;
    let d = "cpu/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice";
    assert_eq!(t.read(&format!("{d}/cpu.shares")), "2");
    assert_eq!(
        m.children(&CgroupName::new(["kubepods", "burstable"]))?,
        vec!["kubepods-burstable-pod12_34.slice"]
    );
    Ok(())
}

#[test]
fn hugetlb_sizes_and_missing_controllers() -> TestResult {
    let (_t, m) = host(false)?;
    assert_eq!(m.hugetlb_page_sizes(), vec![2 << 20, 1 << 30]);
    let mut mounts = m.mounts().clone();
    mounts.remove("hugetlb");
    mounts.remove("pids");
    let m = V1Manager::with_mounts(mounts, None);
    assert!(m.hugetlb_page_sizes().is_empty());
    let err = m.create(
        &pod(),
        &ResourceConfig {
            pids_limit: Some(5),
            ..Default::default()
        },
    );
    let msg = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert_eq!(
        msg,
        "cgroup controller pids is not available: not mounted on this cgroup v1 host"
    );
    // pids() falls back to the memory hierarchy.
    assert!(m.pids(&pod())?.is_empty());
    Ok(())
}

#[test]
fn from_mountinfo_needs_the_required_controllers() -> TestResult {
    let m = V1Manager::from_mountinfo(crate::mountinfo::tests::SEPARATE)?;
    assert_eq!(
        m.path("cpuacct", &pod()),
        Some(PathBuf::from(
            "/sys/fs/cgroup/cpuacct/kubepods/burstable/pod12-34"
        ))
    );
    assert_eq!(m.unified(), Some(Path::new("/sys/fs/cgroup/unified")));
    assert_eq!(m.all_paths(&pod()).len(), 10);
    let no_memory: String = crate::mountinfo::tests::SEPARATE
        .lines()
        .filter(|l| !l.contains("rw,memory"))
        .map(|l| format!("{l}\n"))
        .collect();
    let msg = V1Manager::from_mountinfo(&no_memory)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.starts_with("cgroup controller memory is not available"),
        "{msg}"
    );
    Ok(())
}
