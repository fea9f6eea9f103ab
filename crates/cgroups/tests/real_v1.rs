//! Real cgroup v1 on this machine: root, v1 hierarchies mounted per controller (cpu and cpuacct
//! apart) and the hybrid cgroup2 mount at /sys/fs/cgroup/unified. The test never skips: when what
//! it needs is missing it panics saying what. It cleans up through a Drop guard even when an
//! assertion fails.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use cgroups::{
    detect, AnyManager, CgroupManager, CgroupName, Driver, Error, ResourceConfig, Version,
};

/// Kills the test's process and removes its cgroups in every hierarchy, whatever happened.
struct Guard<'a> {
    mgr: &'a dyn CgroupManager,
    top: CgroupName,
    dirs: Vec<PathBuf>,
    child: Option<Child>,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = self.mgr.kill_all(&self.top);
        let _ = self.mgr.destroy(&self.top);
        // Belt and braces, deepest first, should destroy itself have failed.
        let mut dirs = self.dirs.clone();
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .trim()
        .to_string()
}

fn require_root() {
    // /proc/self belongs to our effective uid.
    let uid = std::os::unix::fs::MetadataExt::uid(
        &std::fs::metadata("/proc/self").unwrap_or_else(|e| panic!("stat /proc/self: {e}")),
    );
    assert_eq!(uid, 0, "these tests create real cgroups and need root");
}

#[test]
fn create_limit_move_kill_destroy_on_real_v1() {
    require_root();
    let any = detect(Driver::Cgroupfs).unwrap_or_else(|e| panic!("detect(cgroupfs): {e}"));
    let AnyManager::V1(v1) = &any else {
        panic!("this test needs a cgroup v1 host (/sys/fs/cgroup is cgroup2 here)");
    };
    assert_eq!(
        (any.version(), any.driver()),
        (Version::V1, Driver::Cgroupfs)
    );
    for c in ["cpu", "cpuacct", "cpuset", "memory", "pids"] {
        assert!(
            v1.mounts().contains_key(c),
            "cgroup v1 controller {c} is not mounted: {:?}",
            v1.mounts()
        );
    }
    let unified = v1
        .unified()
        .unwrap_or_else(|| panic!("no hybrid cgroup2 mount (/sys/fs/cgroup/unified) found"));
    assert_eq!(unified, Path::new("/sys/fs/cgroup/unified"));

    let top = CgroupName::new([format!("rkt-cgtest-{}", std::process::id())]);
    let name = top.child("child");
    let mut guard = Guard {
        mgr: &any,
        top: top.clone(),
        dirs: v1.all_paths(&name),
        child: None,
    };
    guard.dirs.extend(v1.all_paths(&top));

    let config = ResourceConfig {
        memory_limit: Some(64 << 20),
        cpu_shares: Some(512),
        cpu_quota: Some(50_000),
        cpu_period: Some(100_000),
        pids_limit: Some(50),
        ..Default::default()
    };
    any.create(&name, &config)
        .unwrap_or_else(|e| panic!("create: {e}"));
    assert!(any.exists(&name));
    for dir in v1.all_paths(&name) {
        assert!(dir.is_dir(), "{} was not created", dir.display());
    }
    assert!(
        v1.all_paths(&name).iter().any(|d| d.starts_with(unified)),
        "not created in the unified mount"
    );

    // What the kernel holds now.
    let path = |c: &str, file: &str| {
        v1.path(c, &name)
            .unwrap_or_else(|| panic!("{c} not mounted"))
            .join(file)
    };
    assert_eq!(read(&path("memory", "memory.limit_in_bytes")), "67108864");
    assert_eq!(read(&path("cpu", "cpu.shares")), "512");
    assert_eq!(read(&path("cpu", "cpu.cfs_quota_us")), "50000");
    assert_eq!(read(&path("cpu", "cpu.cfs_period_us")), "100000");
    assert_eq!(read(&path("pids", "pids.max")), "50");
    let cpus = read(&path("cpuset", "cpuset.cpus"));
    assert!(
        !cpus.is_empty(),
        "cpuset.cpus was not copied from the parent"
    );
    assert_eq!(
        cpus,
        read(
            &v1.path("cpuset", &CgroupName::root())
                .unwrap_or_default()
                .join("cpuset.cpus")
        )
    );

    let back = any
        .resource_config(&name)
        .unwrap_or_else(|e| panic!("resource_config: {e}"));
    assert_eq!(
        (
            back.memory_limit,
            back.cpu_shares,
            back.cpu_quota,
            back.cpu_period,
            back.pids_limit
        ),
        (
            Some(64 << 20),
            Some(512),
            Some(50_000),
            Some(100_000),
            Some(50)
        )
    );
    assert_eq!(back.cpuset_cpus.as_deref(), Some(cpus.as_str()));

    // Unlimited spellings round-trip through the kernel; update leaves the rest alone.
    any.update(
        &name,
        &ResourceConfig {
            memory_limit: Some(-1),
            cpu_quota: Some(-1),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("update: {e}"));
    assert_eq!(
        read(&path("memory", "memory.limit_in_bytes")),
        "9223372036854771712"
    );
    let back = any
        .resource_config(&name)
        .unwrap_or_else(|e| panic!("resource_config: {e}"));
    assert_eq!(
        (back.memory_limit, back.cpu_quota, back.cpu_shares),
        (Some(-1), Some(-1), Some(512))
    );
    any.update(
        &name,
        &ResourceConfig {
            memory_limit: Some(64 << 20),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("update: {e}"));

    // A process in it.
    let child = Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap_or_else(|e| panic!("spawn sleep: {e}"));
    let pid = child.id() as i32;
    guard.child = Some(child);
    any.add_process(&name, pid)
        .unwrap_or_else(|e| panic!("add_process: {e}"));
    assert_eq!(
        any.pids(&name).unwrap_or_else(|e| panic!("pids: {e}")),
        vec![pid]
    );
    assert!(
        any.pids(&top)
            .unwrap_or_else(|e| panic!("pids: {e}"))
            .contains(&pid),
        "pids() is not recursive"
    );
    assert_eq!(
        any.children(&top)
            .unwrap_or_else(|e| panic!("children: {e}")),
        vec!["child"]
    );
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    assert!(
        own.contains(&format!("{}/child", top.to_cgroupfs())),
        "{own}"
    );

    let u = any.usage(&name).unwrap_or_else(|e| panic!("usage: {e}"));
    assert_eq!((u.pids_current, u.pids_limit), (Some(1), Some(50)));
    assert_eq!(u.memory_limit_bytes, Some(64 << 20));
    assert!(u.memory_working_set_bytes <= u.memory_usage_bytes);
    // The quota was set unlimited above: no CFS quota to report.
    assert_eq!(u.cpu_quota_us, None);
    any.update(
        &name,
        &ResourceConfig {
            cpu_quota: Some(30_000),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("update: {e}"));
    let u = any.usage(&name).unwrap_or_else(|e| panic!("usage: {e}"));
    assert_eq!(u.cpu_quota_us, Some(30_000));
    let made = any
        .created(&name)
        .expect("creation time of an existing cgroup");
    assert!(made <= std::time::SystemTime::now(), "{made:?}");
    assert!(any.created(&top.child("nope")).is_none());
    any.usage(&top)
        .unwrap_or_else(|e| panic!("usage of the parent: {e}"));
    any.usage(&CgroupName::root())
        .unwrap_or_else(|e| panic!("usage of the root: {e}"));

    // A process in it, and a child cgroup under the top: the kernel refuses each rmdir and
    // nothing is removed.
    assert!(!any.remove_if_empty(&name), "removed with a process in it");
    assert!(
        !any.remove_if_empty(&top),
        "removed with a child cgroup in it"
    );
    for dir in guard.dirs.iter() {
        assert!(
            dir.is_dir(),
            "{} went though the kernel refused",
            dir.display()
        );
    }

    let killed = any
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
    assert!(any
        .pids(&top)
        .unwrap_or_else(|e| panic!("pids: {e}"))
        .is_empty());

    // Empty now: one rmdir per hierarchy removes it, and leaves its parent.
    assert!(
        any.remove_if_empty(&name),
        "an empty cgroup was not removed"
    );
    for dir in v1.all_paths(&name) {
        assert!(!dir.exists(), "{} is still there", dir.display());
    }
    assert!(any.exists(&top));
    assert!(any.remove_if_empty(&name), "a gone cgroup is gone");

    any.destroy(&top).unwrap_or_else(|e| panic!("destroy: {e}"));
    for dir in guard.dirs.iter() {
        assert!(
            !dir.exists(),
            "{} is still there after destroy",
            dir.display()
        );
    }
    assert!(!any.exists(&top));
    any.destroy(&top)
        .unwrap_or_else(|e| panic!("destroy of a gone cgroup: {e}"));
}

#[test]
fn systemd_driver_needs_systemd() {
    match detect(Driver::Systemd) {
        Err(Error::SystemdNotRunning) => {
            assert!(!Path::new("/run/systemd/system").exists());
        }
        Ok(m) => {
            assert!(Path::new("/run/systemd/system").is_dir());
            assert_eq!(m.name(&CgroupName::new(["kubepods"])), "/kubepods.slice");
        }
        Err(e) => panic!("detect(systemd): {e}"),
    }
}
