//! The OOM watcher against this machine's kernel log (upstream `pkg/kubelet/oom` over cadvisor's
//! oomparser): a real OOM kill of a process outside any pod, in a memory cgroup (v1 on the host,
//! v2 in hack/vm.sh's guest) with a tiny limit under the test's cgroup root, is read from
//! /dev/kmsg and parsed (the kernel names its cgroup as `oom_memcg`, so upstream does not call it
//! a system OOM, and neither do we); a system-wide OOM becomes a `SystemOOM` Warning event on the
//! Node with upstream's message.
//!
//! A real system-wide OOM would starve every process on this shared machine, so that one is
//! written into /dev/kmsg as the kernel prints it (6.x: `global_oom` in the summary line, then
//! `Out of memory: Killed process N (name)`); the watcher reads it from the device like any
//! other record. A kubelet of another test reading the kernel log at the same moment sees it
//! too, and records the same event on its own Node.

mod common;

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

#[tokio::test(flavor = "multi_thread")]
async fn oom_kills_outside_pods_are_read_from_the_kernel_log() {
    let cp = ControlPlane::up("oom");
    let mut env = Env::new(234);
    env.join(&cp, &[]);
    wait_until(Duration::from_secs(30), "node registered", || {
        cp.get_json(&["node", &env.node]).map(|_| ())
    });
    wait_until(Duration::from_secs(10), "watcher reading /dev/kmsg", || {
        env.kubelet_log()
            .contains("watching the kernel log for system OOM kills")
            .then_some(())
    });

    // A real OOM kill: `tail /dev/zero` buffers an endless line in an 8 MiB memory cgroup.
    let cg_rel = format!("{}/oom-test", env.cgroup_root());
    let cg = cgroupfs::dir("memory", &cg_rel);
    std::fs::create_dir_all(&cg).unwrap();
    cgroupfs::set_memory_limit(&cg_rel, 8 << 20);
    let procs = cg.join("cgroup.procs");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {} && exec tail /dev/zero",
            procs.display()
        ))
        .status()
        .unwrap();
    assert_eq!(
        status.signal(),
        Some(Signal::SIGKILL as i32),
        "killed by the OOM killer: {status:?}"
    );
    let line = wait_until(Duration::from_secs(20), "the kill read and parsed", || {
        env.kubelet_log()
            .lines()
            .find(|l| {
                l.contains("OOM kill inside a memory cgroup")
                    && l.contains(&format!("oom_memcg=\"{cg_rel}\""))
            })
            .map(str::to_string)
    });
    assert!(line.contains("process=\"tail\""), "{line}");
    let _ = std::fs::remove_dir(&cg);

    // A system-wide OOM, as a 6.x kernel reports it.
    let name = format!("rkt-oom-{}", std::process::id());
    let pid = 4_000_000 + std::process::id() % 100_000;
    let records = [
        format!("<4>{name} invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=1000"),
        format!("<6>oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/,task={name},pid={pid},uid=0"),
        format!("<3>Out of memory: Killed process {pid} ({name}) total-vm:4096kB, anon-rss:2048kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:40kB oom_score_adj:1000"),
    ];
    let mut kmsg = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/kmsg")
        .unwrap();
    for r in &records {
        // One write, one record; the newline finalizes it (a record without one stays open
        // for a continuation, and readers of /dev/kmsg do not see it yet).
        kmsg.write_all(format!("{r}\n").as_bytes()).unwrap();
    }
    let want = format!("System OOM encountered, victim process: {name}, pid: {pid}");
    let ev = wait_until(
        Duration::from_secs(30),
        "SystemOOM event on the Node",
        || {
            cp.node_events(&env.node)
                .into_iter()
                .find(|(r, m)| r == "SystemOOM" && m == &want)
        },
    );
    assert_eq!(ev.1, want);
    let events = cp.node_events(&env.node);
    assert!(
        !events
            .iter()
            .any(|(r, m)| r == "SystemOOM" && m.contains("victim process: tail,")),
        "the memory cgroup's own OOM is not a system OOM: {events:?}"
    );
    env.stop_kubelet(Signal::SIGTERM);
}
