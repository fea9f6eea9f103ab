//! Real cgroup v2 on this machine's hybrid cgroup2 mount, /sys/fs/cgroup/unified. That mount offers
//! only the hugetlb controller (cpu, memory, pids stay on v1), so this covers the v2 tree
//! operations: create, cgroup.procs, pids, cgroup.kill, cpu.stat/PSI usage, children, destroy, with
//! an empty ResourceConfig. The v2 resource writes (cpu.max, cpu.weight, memory.max, pids.max,
//! hugetlb.*.max, cpuset.*, subtree_control) are covered only by the temp-tree unit tests in
//! src/v2_tests.rs. The test never skips: when what it needs is missing it panics saying what.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use cgroups::v2::V2Manager;
use cgroups::{CgroupManager, CgroupName, ResourceConfig, Version};

const UNIFIED: &str = "/sys/fs/cgroup/unified";

/// Kills the test's process and removes its cgroups, whatever happened; turns off again in the
/// root's cgroup.subtree_control what `create` enabled there (hugetlb), leaving the mount as found.
struct Guard<'a> {
    mgr: &'a V2Manager,
    top: CgroupName,
    child: Option<Child>,
    root_subtree_control: String,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = self.mgr.kill_all(&self.top);
        let _ = self.mgr.destroy(&self.top);
        let top = self.mgr.path(&self.top);
        let _ = std::fs::remove_dir(top.join("child"));
        let _ = std::fs::remove_dir(top);
        let file = Path::new(UNIFIED).join("cgroup.subtree_control");
        let now = std::fs::read_to_string(&file).unwrap_or_default();
        for c in now.split_whitespace().filter(|c| {
            !self
                .root_subtree_control
                .split_whitespace()
                .any(|b| b == *c)
        }) {
            let _ = std::fs::write(&file, format!("-{c}"));
        }
    }
}

fn unified_mount() -> PathBuf {
    // /proc/self belongs to our effective uid.
    let uid = std::os::unix::fs::MetadataExt::uid(
        &std::fs::metadata("/proc/self").unwrap_or_else(|e| panic!("stat /proc/self: {e}")),
    );
    assert_eq!(uid, 0, "these tests create real cgroups and need root");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_else(|e| panic!("read mountinfo: {e}"));
    let m = cgroups::mountinfo::cgroup_mounts(&mounts)
        .unwrap_or_else(|e| panic!("parse mountinfo: {e}"));
    assert_eq!(
        m.cgroup2.as_deref(),
        Some(Path::new(UNIFIED)),
        "this test needs the hybrid cgroup2 mount at {UNIFIED} (mountinfo has {:?})",
        m.cgroup2
    );
    PathBuf::from(UNIFIED)
}

#[test]
fn create_move_kill_destroy_on_the_hybrid_unified_mount() {
    let mgr = V2Manager::new(unified_mount());
    assert_eq!(mgr.version(), Version::V2);
    let top = CgroupName::new([format!("rkt-cgtest-v2-{}", std::process::id())]);
    let name = top.child("child");
    let root_subtree_control =
        std::fs::read_to_string(Path::new(UNIFIED).join("cgroup.subtree_control"))
            .unwrap_or_else(|e| panic!("read {UNIFIED}/cgroup.subtree_control: {e}"));
    let mut guard = Guard {
        mgr: &mgr,
        top: top.clone(),
        child: None,
        root_subtree_control,
    };

    mgr.create(&name, &ResourceConfig::default())
        .unwrap_or_else(|e| panic!("create: {e}"));
    assert!(mgr.exists(&name) && mgr.path(&name).is_dir());
    // The offered controllers were enabled for the children on the way down.
    let offered =
        std::fs::read_to_string(Path::new(UNIFIED).join("cgroup.controllers")).unwrap_or_default();
    let top_offers =
        std::fs::read_to_string(mgr.path(&top).join("cgroup.controllers")).unwrap_or_default();
    for c in offered
        .split_whitespace()
        .filter(|c| cgroups::v2::WANTED_CONTROLLERS.contains(c))
    {
        assert!(
            top_offers.split_whitespace().any(|t| t == c),
            "{c} not enabled below the root: {top_offers:?}"
        );
    }
    assert_eq!(
        mgr.children(&top)
            .unwrap_or_else(|e| panic!("children: {e}")),
        vec!["child"]
    );
    let kill_file = mgr.path(&name).join("cgroup.kill");
    assert!(
        kill_file.exists(),
        "{} is missing: the kernel predates cgroup.kill (5.14)",
        kill_file.display()
    );

    let child = Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap_or_else(|e| panic!("spawn sleep: {e}"));
    let pid = child.id() as i32;
    guard.child = Some(child);
    mgr.add_process(&name, pid)
        .unwrap_or_else(|e| panic!("add_process: {e}"));
    assert_eq!(
        mgr.pids(&name).unwrap_or_else(|e| panic!("pids: {e}")),
        vec![pid]
    );
    assert_eq!(
        mgr.pids(&top).unwrap_or_else(|e| panic!("pids: {e}")),
        vec![pid],
        "pids() is not recursive"
    );

    // cpu.stat is in every v2 cgroup; pressure files where the root has them.
    let u = mgr.usage(&name).unwrap_or_else(|e| panic!("usage: {e}"));
    assert!(u.cpu_usage_ns >= u.cpu_user_ns, "{u:?}");
    if Path::new(UNIFIED).join("cpu.pressure").exists() {
        assert!(
            u.cpu_pressure.is_some() && u.memory_pressure.is_some() && u.io_pressure.is_some(),
            "{u:?}"
        );
    }
    assert_eq!(
        u.memory_usage_bytes, 0,
        "no memory controller on this mount"
    );
    let root = mgr
        .usage(&CgroupName::root())
        .unwrap_or_else(|e| panic!("usage of the root: {e}"));
    assert!(root.cpu_usage_ns > 0, "{root:?}");
    assert!(mgr.resource_config(&name).is_ok());

    // hugetlb is the one controller offered here.
    let offered =
        std::fs::read_to_string(Path::new(UNIFIED).join("cgroup.controllers")).unwrap_or_default();
    if offered.split_whitespace().any(|c| c == "hugetlb") {
        assert!(
            !mgr.hugetlb_page_sizes().is_empty() || !Path::new("/sys/kernel/mm/hugepages").exists()
        );
    } else {
        assert!(mgr.hugetlb_page_sizes().is_empty());
    }

    // A process in it, and a child cgroup under the top: the kernel refuses each rmdir and
    // nothing is removed.
    assert!(!mgr.remove_if_empty(&name), "removed with a process in it");
    assert!(
        !mgr.remove_if_empty(&top),
        "removed with a child cgroup in it"
    );
    assert!(mgr.path(&name).is_dir() && mgr.path(&top).is_dir());

    let killed = mgr
        .kill_all(&top)
        .unwrap_or_else(|e| panic!("kill_all: {e}"));
    assert_eq!(killed, 1);
    let status = guard
        .child
        .take()
        .map(|mut c| c.wait())
        .transpose()
        .unwrap_or_else(|e| panic!("wait: {e}"));
    assert_eq!(
        status.and_then(|s| s.signal()),
        Some(nix::sys::signal::Signal::SIGKILL as i32)
    );
    assert!(mgr
        .pids(&top)
        .unwrap_or_else(|e| panic!("pids: {e}"))
        .is_empty());

    // Empty now: one rmdir per hierarchy removes it, and leaves its parent.
    assert!(
        mgr.remove_if_empty(&name),
        "an empty cgroup was not removed"
    );
    assert!(!mgr.path(&name).exists(), "the empty cgroup is still there");
    assert!(mgr.exists(&top));
    assert!(mgr.remove_if_empty(&name), "a gone cgroup is gone");

    mgr.destroy(&top).unwrap_or_else(|e| panic!("destroy: {e}"));
    assert!(!mgr.path(&name).exists() && !mgr.path(&top).exists());
    mgr.destroy(&top)
        .unwrap_or_else(|e| panic!("destroy of a gone cgroup: {e}"));
}
