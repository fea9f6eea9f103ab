//! V2Manager over temp-dir trees that mimic the kernel's files: every branch, on any host. The
//! kernel's own v2 tree is exercised by the kubelet's integration tests in hack/vm.sh's guest (this
//! host's cgroup2 mount is the hybrid one, which has no cpu/memory/pids).

use super::*;
use std::collections::BTreeMap;
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

/// A v2 root offering `controllers`, with 2MB and 1GB huge pages.
fn host(controllers: &str) -> Result<(Tree, V2Manager), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let root = tmp.path().to_path_buf();
    let t = Tree {
        _tmp: tmp,
        root: root.clone(),
    };
    t.put("cg/cgroup.controllers", controllers);
    t.put("cg/cgroup.subtree_control", "");
    fs::create_dir_all(root.join("mm/hugepages-2048kB"))?;
    fs::create_dir_all(root.join("mm/hugepages-1048576kB"))?;
    let m = V2Manager::new(root.join("cg")).with_hugepages_dir(root.join("mm"));
    Ok((t, m))
}

const ALL: &str = "cpuset cpu io memory hugetlb pids rdma misc\n";

fn pod() -> CgroupName {
    CgroupName::new(["kubepods", "burstable", "pod12-34"])
}

fn full_config() -> ResourceConfig {
    ResourceConfig {
        memory_limit: Some(64 << 20),
        cpu_shares: Some(1024),
        cpu_quota: Some(50_000),
        cpu_period: Some(100_000),
        pids_limit: Some(50),
        hugetlb_limits: BTreeMap::from([(2 << 20, 0), (1 << 30, -1)]),
        cpuset_cpus: Some("0-1".into()),
        cpuset_mems: Some("0".into()),
    }
}

#[test]
fn create_enables_controllers_and_writes_v2_files() -> TestResult {
    let (t, m) = host(ALL)?;
    // An intermediate level offers what its parent enabled (the kernel does this).
    t.put("cg/kubepods/cgroup.controllers", "cpuset cpu memory pids\n");
    t.put(
        "cg/kubepods/burstable/cgroup.controllers",
        "cpu memory pids\n",
    );
    m.create(&pod(), &full_config())?;
    assert_eq!(
        t.read("cg/cgroup.subtree_control"),
        "+cpu +cpuset +memory +pids +hugetlb"
    );
    assert_eq!(
        t.read("cg/kubepods/cgroup.subtree_control"),
        "+cpu +cpuset +memory +pids"
    );
    assert_eq!(
        t.read("cg/kubepods/burstable/cgroup.subtree_control"),
        "+cpu +memory +pids"
    );
    assert!(!t
        .p("cg/kubepods/burstable/pod12-34/cgroup.subtree_control")
        .exists());
    let d = "cg/kubepods/burstable/pod12-34";
    assert_eq!(t.read(&format!("{d}/memory.max")), "67108864");
    assert_eq!(t.read(&format!("{d}/cpu.weight")), "39");
    assert_eq!(t.read(&format!("{d}/cpu.max")), "50000 100000");
    assert_eq!(t.read(&format!("{d}/pids.max")), "50");
    assert_eq!(t.read(&format!("{d}/hugetlb.2MB.max")), "0");
    assert_eq!(t.read(&format!("{d}/hugetlb.1GB.max")), "max");
    assert_eq!(t.read(&format!("{d}/cpuset.cpus")), "0-1");
    assert_eq!(t.read(&format!("{d}/cpuset.mems")), "0");
    assert!(m.exists(&pod()));
    // Already enabled: not written again.
    t.put(
        "cg/cgroup.subtree_control",
        "cpuset cpu memory hugetlb pids\n",
    );
    m.create(&pod(), &full_config())?;
    assert_eq!(
        t.read("cg/cgroup.subtree_control"),
        "cpuset cpu memory hugetlb pids\n"
    );
    Ok(())
}

#[test]
fn update_writes_only_some_fields_and_keeps_the_other_cpu_max_half() -> TestResult {
    let (t, m) = host(ALL)?;
    m.create(&pod(), &full_config())?;
    let d = "cg/kubepods/burstable/pod12-34";
    t.put(&format!("{d}/cpu.weight"), "7");
    m.update(
        &pod(),
        &ResourceConfig {
            cpu_quota: Some(-1),
            memory_limit: Some(-1),
            ..Default::default()
        },
    )?;
    assert_eq!(t.read(&format!("{d}/cpu.max")), "max 100000");
    assert_eq!(t.read(&format!("{d}/memory.max")), "max");
    assert_eq!(t.read(&format!("{d}/cpu.weight")), "7");
    assert_eq!(t.read(&format!("{d}/pids.max")), "50");
    m.update(
        &pod(),
        &ResourceConfig {
            cpu_period: Some(20_000),
            pids_limit: Some(-1),
            ..Default::default()
        },
    )?;
    assert_eq!(t.read(&format!("{d}/cpu.max")), "max 20000");
    assert_eq!(t.read(&format!("{d}/pids.max")), "max");
    Ok(())
}

#[test]
fn resource_config_reads_back() -> TestResult {
    let (_t, m) = host(ALL)?;
    m.create(&pod(), &full_config())?;
    let got = m.resource_config(&pod())?;
    // cpu.weight 39 reads back as 998 shares: the conversion is lossy, as upstream's.
    assert_eq!(
        got,
        ResourceConfig {
            cpu_shares: Some(998),
            ..full_config()
        }
    );
    assert!(m
        .resource_config(&pod().child("gone"))
        .err()
        .is_some_and(|e| e.is_not_found()));
    Ok(())
}

#[test]
fn usage_from_v2_files() -> TestResult {
    let (t, m) = host(ALL)?;
    m.create(&pod(), &ResourceConfig::default())?;
    let d = "cg/kubepods/burstable/pod12-34";
    t.put(
        &format!("{d}/cpu.stat"),
        "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 10\nnr_throttled 3\nthrottled_usec 42\n",
    );
    t.put(&format!("{d}/memory.current"), "1000000\n");
    t.put(
        &format!("{d}/memory.stat"),
        "anon 600000\nfile 300000\ninactive_file 250000\npgfault 50\npgmajfault 5\n",
    );
    t.put(&format!("{d}/memory.max"), "max\n");
    t.put(&format!("{d}/pids.current"), "2\n");
    t.put(&format!("{d}/pids.max"), "50\n");
    t.put(&format!("{d}/memory.pressure"), "some avg10=1.00 avg60=0.50 avg300=0.10 total=77\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n");
    t.put(
        &format!("{d}/cpu.pressure"),
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=3\n",
    );
    let u = m.usage(&pod())?;
    assert_eq!(
        (u.cpu_usage_ns, u.cpu_user_ns, u.cpu_system_ns),
        (1_500_000, 1_000_000, 500_000)
    );
    assert_eq!(
        (u.cpu_periods, u.cpu_throttled_periods, u.cpu_throttled_ns),
        (10, 3, 42_000)
    );
    assert_eq!(
        (u.memory_usage_bytes, u.memory_working_set_bytes),
        (1_000_000, 750_000)
    );
    assert_eq!(
        (
            u.memory_rss_bytes,
            u.memory_cache_bytes,
            u.memory_page_faults,
            u.memory_major_page_faults
        ),
        (600_000, 300_000, 50, 5)
    );
    assert_eq!(
        (u.memory_limit_bytes, u.pids_current, u.pids_limit),
        (None, Some(2), Some(50))
    );
    assert_eq!(
        u.memory_pressure
            .as_ref()
            .map(|p| (p.some_avg10, p.some_total_us, p.full_total_us)),
        Some((1.0, 77, 7))
    );
    assert_eq!(u.cpu_pressure.map(|p| p.some_total_us), Some(3));
    assert_eq!(u.io_pressure, None);
    // The root: no memory.current, usage from /proc/meminfo, the rest from its memory.stat.
    t.put("cg/cpu.stat", "usage_usec 9000\n");
    t.put(
        "cg/memory.stat",
        "anon 4096\nfile 8192\ninactive_file 1024\n",
    );
    t.put(
        "meminfo",
        "MemTotal:       1000 kB\nMemFree:         400 kB\nInactive(file):   1 kB\n",
    );
    let root = m.clone().with_meminfo(t.p("meminfo"));
    let u = root.usage(&CgroupName::root())?;
    assert_eq!(
        (
            u.cpu_usage_ns,
            u.memory_usage_bytes,
            u.memory_working_set_bytes
        ),
        (9_000_000, 600 * 1024, 600 * 1024 - 1024)
    );
    assert_eq!((u.memory_rss_bytes, u.memory_cache_bytes), (4096, 8192));
    // Without the memory controller (a hybrid host's unified mount): no memory.stat, no figures.
    fs::remove_file(t.p("cg/memory.stat"))?;
    assert_eq!(root.usage(&CgroupName::root())?.memory_usage_bytes, 0);
    t.put("cg/memory.stat", "anon 4096\n");
    t.put("meminfo", "MemTotal:       1000 kB\n");
    let msg = root
        .usage(&CgroupName::root())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(msg.contains("meminfo") && msg.contains("MemFree"), "{msg}");
    // Without the memory controller only cpu is read; cpu.stat itself is required.
    fs::remove_file(t.p(&format!("{d}/memory.current")))?;
    assert_eq!(m.usage(&pod())?.memory_usage_bytes, 0);
    fs::remove_file(t.p(&format!("{d}/cpu.stat")))?;
    let msg = m
        .usage(&pod())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.starts_with("read ") && msg.contains("cpu.stat"),
        "{msg}"
    );
    Ok(())
}

#[test]
fn pids_kill_file_children_destroy() -> TestResult {
    let (t, m) = host(ALL)?;
    m.create(&pod().child("ctr"), &ResourceConfig::default())?;
    m.add_process(&pod(), 40)?;
    assert_eq!(t.read("cg/kubepods/burstable/pod12-34/cgroup.procs"), "40");
    t.put("cg/kubepods/burstable/pod12-34/ctr/cgroup.procs", "41\n");
    assert_eq!(m.pids(&pod())?, vec![40, 41]);
    assert_eq!(m.children(&pod())?, vec!["ctr"]);
    // With cgroup.kill present, one write kills the subtree (no signals sent to these fake pids).
    t.put("cg/kubepods/burstable/pod12-34/cgroup.kill", "");
    assert_eq!(m.kill_all(&pod())?, 2);
    assert_eq!(t.read("cg/kubepods/burstable/pod12-34/cgroup.kill"), "1");
    m.destroy(&pod())?;
    assert!(!t.p("cg/kubepods/burstable/pod12-34").exists());
    assert!(t.p("cg/kubepods/burstable").is_dir());
    m.destroy(&pod())?;
    assert!(m.pids(&pod())?.is_empty());
    Ok(())
}

#[test]
fn hugetlb_offered_or_not_and_systemd_names() -> TestResult {
    let (_t, m) = host(ALL)?;
    assert_eq!(m.hugetlb_page_sizes(), vec![2 << 20, 1 << 30]);
    let (t, m) = host("cpu memory pids\n")?;
    assert!(m.hugetlb_page_sizes().is_empty());
    let m = m.with_driver(Driver::Systemd);
    m.create(
        &pod(),
        &ResourceConfig {
            cpu_shares: Some(2),
            ..Default::default()
        },
    )?;
    assert_eq!(t.read("cg/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice/cpu.weight"), "1");
    assert_eq!(t.read("cg/cgroup.subtree_control"), "+cpu +memory +pids");
    Ok(())
}
