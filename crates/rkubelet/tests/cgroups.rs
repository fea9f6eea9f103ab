//! Pod and QoS cgroups on this machine's real cgroup hierarchy: cgroup v1 on the host, cgroup v2
//! in hack/vm.sh's guest (hack/run-tests.sh runs this binary in both). rkubelet with a private
//! `--cgroup-root` against a real containerd, the values read back from the kernel's files, the
//! container processes found in them, an OOM kill and a fork loop stopped by the pod's limits, a
//! SIGKILL + restart that changes nothing, and no cgroup left after deletion.

mod common;

use std::time::Duration;

use common::cgroupfs::{self as cg, shares_as_seen as seen, unlimited};
use common::*;
use nix::sys::signal::Signal;

fn meminfo_total() -> i64 {
    let t = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: i64 = t
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

fn pod_manifest(name: &str, resources: &str, script: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  restartPolicy: Never
  containers:
  - name: c
    image: {IMAGE}
    command: ["sh", "-c", {script:?}]
{resources}"#
    )
}

const MI: i64 = 1 << 20;

/// Whether cgroup `rel` holds, in every hierarchy, a process running `sleep 3600` (the test
/// pods' command; the sandbox's pause is there too).
fn holds_sleep(rel: &str) -> bool {
    cg::dirs(rel).iter().all(|d| {
        cg::subtree_pids(d).iter().any(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == b"sleep\x003600\x00")
        })
    })
}

#[tokio::test]
async fn qos_and_pod_cgroups_carry_upstreams_values() {
    let cp = ControlPlane::up("cgroups");
    let mut env = Env::new(226);
    env.extra_config = "kubeReserved: {memory: 100Mi, cpu: 100m}\nsystemReserved: {memory: 50Mi}\n\
                        podPidsLimit: 64\n"
        .into();
    let root = env.cgroup_root();
    let kubepods = format!("{root}/kubepods");
    env.write_manifest(
        "g.yaml",
        &pod_manifest(
            "guaranteed",
            "    resources:\n      limits: {cpu: 200m, memory: 64Mi}\n",
            "sleep 3600",
        ),
    );
    env.write_manifest(
        "b.yaml",
        &pod_manifest(
            "burstable",
            "    resources:\n      requests: {cpu: 100m, memory: 32Mi}\n      limits: {cpu: 300m, memory: 96Mi}\n",
            "sleep 3600",
        ),
    );
    env.write_manifest("e.yaml", &pod_manifest("besteffort", "", "sleep 3600"));
    env.join(&cp, &[]);
    let g = env.wait_running("guaranteed");
    let b = env.wait_running("burstable");
    let e = env.wait_running("besteffort");

    // kubepods: node allocatable without the eviction threshold (upstream
    // getNodeAllocatableInternalAbsolute), cpu shares by the node's CPUs, pids by pid_max.
    let page = 4096;
    let want_mem = (meminfo_total() - 150 * MI) / page * page;
    assert_eq!(cg::memory_limit(&kubepods), want_mem);
    let cpus = std::thread::available_parallelism().unwrap().get() as i64;
    assert_eq!(
        cg::cpu_shares(&kubepods),
        seen((cpus * 1000 - 100) * 1024 / 1000)
    );
    let pid_max: i64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(cg::num("pids", &kubepods, "pids.max").min(pid_max), pid_max);
    assert_eq!(cg::cpu_shares(&format!("{kubepods}/besteffort")), seen(2));

    // The pod cgroups, where upstream puts them, with upstream's values.
    let gp = format!("{kubepods}/pod{}", uid(&g));
    assert_eq!(cg::cpu_shares(&gp), seen(204));
    assert_eq!(cg::cpu_quota_period(&gp), (20_000, 100_000));
    assert_eq!(cg::memory_limit(&gp), 64 * MI);
    assert_eq!(cg::num("pids", &gp, "pids.max"), 64);
    let bp = format!("{kubepods}/burstable/pod{}", uid(&b));
    assert_eq!(cg::cpu_shares(&bp), seen(102));
    assert_eq!(cg::cpu_quota_period(&bp).0, 30_000);
    assert_eq!(cg::memory_limit(&bp), 96 * MI);
    let ep = format!("{kubepods}/besteffort/pod{}", uid(&e));
    assert_eq!(cg::cpu_shares(&ep), seen(2));
    assert_eq!(cg::cpu_quota_period(&ep).0, -1);
    assert!(unlimited(cg::memory_limit(&ep)));
    // The burstable tier's shares follow its pods' requests (housekeeping, every 2 s).
    wait_until(Duration::from_secs(10), "burstable tier shares", || {
        (cg::cpu_shares(&format!("{kubepods}/burstable")) == seen(102)).then_some(())
    });

    // The containers' processes are in their pod's cgroup, in every hierarchy (seen from the
    // host: on cgroup v2 a container has its own cgroup namespace and sees its cgroup as "/").
    for dir in [&gp, &bp, &ep] {
        assert!(holds_sleep(dir), "no container process in {dir}");
    }

    // Allocatable in the Node: capacity less both reservations and the 100Mi threshold. The
    // static pods run before the Node is registered, so wait for its first status.
    let node = wait_json("node with allocatable", Duration::from_secs(30), || {
        cp.get_json(&["node", &env.node])
            .filter(|n| n["status"]["allocatable"]["memory"].is_string())
    });
    let alloc = node["status"]["allocatable"]["memory"]
        .as_str()
        .unwrap()
        .to_string();
    let cap = node["status"]["capacity"]["memory"]
        .as_str()
        .unwrap()
        .to_string();
    let ki = |q: &str| q.strip_suffix("Ki").unwrap().parse::<i64>().unwrap() * 1024;
    assert_eq!(ki(&alloc), ki(&cap) - 250 * MI, "{alloc} of {cap}");
    assert_eq!(
        node["status"]["allocatable"]["cpu"],
        format!("{}m", cpus * 1000 - 100)
    );
    for size in ["hugepages-2Mi", "hugepages-1Gi"] {
        if std::path::Path::new("/sys/kernel/mm/hugepages")
            .join(format!(
                "hugepages-{}kB",
                if size == "hugepages-2Mi" {
                    2048
                } else {
                    1048576
                }
            ))
            .exists()
        {
            assert!(
                node["status"]["capacity"][size].is_string(),
                "{size} in {}",
                node["status"]
            );
        }
    }

    // Deleted pods take their cgroups with them.
    for f in ["g.yaml", "b.yaml", "e.yaml"] {
        env.remove_manifest(f);
    }
    wait_until(Duration::from_secs(60), "pods gone", || {
        env.pods().is_empty().then_some(())
    });
    for dir in [&gp, &bp, &ep] {
        wait_until(Duration::from_secs(20), "pod cgroup removed", || {
            cg::dirs(dir).iter().all(|d| !d.exists()).then_some(())
        });
    }
    wait_until(
        Duration::from_secs(10),
        "burstable tier back to the minimum",
        || (cg::cpu_shares(&format!("{kubepods}/burstable")) == seen(2)).then_some(()),
    );
}

#[tokio::test]
async fn pod_limits_stop_memory_hogs_and_fork_loops() {
    let mut env = Env::new(227);
    env.extra_config = "podPidsLimit: 20\n".into();
    // `tail` keeps the whole line it reads, and /dev/zero has no newline.
    env.write_manifest(
        "hog.yaml",
        &pod_manifest(
            "hog",
            "    resources:\n      limits: {cpu: 500m, memory: 24Mi}\n",
            "sleep 1; tail /dev/zero",
        ),
    );
    // A failed fork ends busybox sh, so the loop runs in a child shell; the container's own
    // shell then waits without forking again.
    env.write_manifest(
        "forks.yaml",
        &pod_manifest(
            "forks",
            "",
            "sh -c 'i=0; while [ $i -lt 60 ]; do sleep 3600 & i=$((i+1)); done'; echo fork loop stopped; exec sleep 3600",
        ),
    );
    env.write_manifest(
        "bystander.yaml",
        &pod_manifest("bystander", "", "sleep 3600"),
    );
    env.start_kubelet();
    let hog = env.wait_pod(
        "hog",
        Duration::from_secs(60),
        "container OOM-killed",
        |p| {
            let st = find_container_status(p, "c")?;
            st.state
                .as_ref()?
                .terminated
                .as_ref()
                .map(|t| t.reason.clone())
        },
    );
    assert_eq!(hog.as_deref(), Some("OOMKilled"));

    let forks = env.wait_running("forks");
    let dir = format!(
        "{}/kubepods/besteffort/pod{}",
        env.cgroup_root(),
        uid(&forks)
    );
    assert_eq!(cg::num("pids", &dir, "pids.max"), 20);
    // pids.events counts the forks the limit refused, in the cgroup that forked (cgroup v1
    // keeps the count where the fork happened: the container's cgroup below the pod's).
    wait_until(Duration::from_secs(30), "forks refused by pids.max", || {
        let refused = cg::refused_forks(&cg::dir("pids", &dir));
        (refused > 0).then_some(refused)
    });
    let current = cg::num("pids", &dir, "pids.current");
    assert!(
        (2..=20).contains(&current),
        "pids.current {current} within the limit"
    );
    let forks = env.wait_running("forks");
    assert_eq!(container_status(&forks, "c").restart_count, 0);

    // Nobody else was touched.
    let by = env.wait_running("bystander");
    assert_eq!(container_status(&by, "c").restart_count, 0);
    assert!(env.kubelet_alive());
}

#[tokio::test]
async fn restart_adopts_pod_cgroups_and_changes_nothing() {
    let mut env = Env::new(228);
    env.write_manifest(
        "p.yaml",
        &pod_manifest(
            "steady",
            "    resources:\n      requests: {cpu: 150m}\n      limits: {memory: 48Mi}\n",
            "sleep 3600",
        ),
    );
    env.start_kubelet();
    let name = "steady";
    let before = env.wait_running(name);
    let dir = format!(
        "{}/kubepods/burstable/pod{}",
        env.cgroup_root(),
        uid(&before)
    );
    let shares = cg::cpu_shares(&dir);
    let procs_of = |d: &str| {
        let mut p = cg::subtree_pids(&cg::dir("memory", d));
        p.sort_unstable();
        p
    };
    let procs = procs_of(&dir);
    assert!(!procs.is_empty(), "no process in {dir}");
    assert_eq!(shares, seen(153));
    // Burstable with a memory limit on every container, but no cpu limit: no quota.
    assert_eq!(cg::cpu_quota_period(&dir).0, -1);
    assert_eq!(cg::memory_limit(&dir), 48 * MI);

    env.stop_kubelet(Signal::SIGKILL);
    env.start_kubelet();
    // Several housekeeping passes (2 s) and syncs.
    std::thread::sleep(Duration::from_secs(6));
    let after = env.wait_running(name);
    let id = |p: &k8s_openapi::api::core::v1::Pod| container_status(p, "c").container_id.clone();
    assert_eq!(id(&after), id(&before), "the container was not restarted");
    assert_eq!(container_status(&after, "c").restart_count, 0);
    assert_eq!(cg::cpu_shares(&dir), shares);
    assert_eq!(procs_of(&dir), procs, "same processes in the pod cgroup");
    assert!(
        env.kubelet_log().contains("pod cgroups ready"),
        "{}",
        tail(&env.kubelet_log(), 30)
    );

    // A pod cgroup nobody owns (a crash between kill and removal) is killed and removed by
    // housekeeping.
    let orphan = format!(
        "{}/kubepods/besteffort/pod00000000-0000-0000-0000-0000000000aa",
        env.cgroup_root()
    );
    cg::create(&orphan);
    let mut child = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    std::fs::write(
        cg::dir("memory", &orphan).join("cgroup.procs"),
        child.id().to_string(),
    )
    .unwrap();
    // Reaped at once when killed, as a shim reaps a container's processes (a zombie would keep
    // the v1 memory cgroup busy); killed when the test fails, so its cgroup can go with the Env.
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let reaper = std::thread::spawn(move || child.wait().unwrap());
    struct KillOnPanic(nix::unistd::Pid);
    impl Drop for KillOnPanic {
        fn drop(&mut self) {
            if std::thread::panicking() {
                let _ = nix::sys::signal::kill(self.0, Signal::SIGKILL);
            }
        }
    }
    let _guard = KillOnPanic(pid);
    wait_until(
        Duration::from_secs(15),
        "orphaned pod cgroup removed",
        || (!cg::dir("memory", &orphan).exists()).then_some(()),
    );
    let status = reaper.join().unwrap();
    assert!(
        !status.success(),
        "the orphan's process was killed: {status:?}"
    );
    // The directory goes before the log line that reports it: wait for the line too (in the
    // emulated guest it came 17 ms after the test saw the directory gone).
    wait_until(
        Duration::from_secs(15),
        "the orphan's removal logged",
        || {
            env.kubelet_log()
                .contains("removed orphaned pod cgroup")
                .then_some(())
        },
    );
}
