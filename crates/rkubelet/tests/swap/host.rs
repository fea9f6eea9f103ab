//! The host side of the swap test: the upstream kubelet process and what it leaves on the host
//! (log files, kernel tunables, mounts), pod cgroups.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::common::{mounts_below, repo_root, tail, ControlPlane, Env};

/// The upstream kubelet binary, built (once, cached) by hack/control-plane.sh.
pub fn upstream_kubelet() -> PathBuf {
    let out = Command::new(repo_root().join("hack/control-plane.sh"))
        .arg("kubelet-bin")
        .output()
        .expect("run hack/control-plane.sh kubelet-bin");
    assert!(
        out.status.success(),
        "building the upstream kubelet failed: {}",
        tail(&String::from_utf8_lossy(&out.stderr), 30)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Writes the Env's config file and returns the command line both kubelets run with, as an
/// operator swapping binaries keeps them: only the fields and flags upstream 1.20 knows
/// (podLogsDir and --container-logs-dir are newer, so both use /var/log/pods and
/// /var/log/containers, upstream's defaults), the Env's ports, root dir and cgroup root, and
/// the node credentials of `cp`.
pub fn shared_node_command_line(env: &Env, cp: &ControlPlane) -> Vec<String> {
    let cfg = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         staticPodPath: {}\nreadOnlyPort: {}\nhealthzPort: {}\nport: {}\n\
         fileCheckFrequency: 5s\nsyncFrequency: 10s\ncgroupDriver: cgroupfs\n\
         makeIPTablesUtilChains: false\n\
         authentication: {{x509: {{clientCAFile: {}}}}}\n\
         evictionHard: {{memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}}\n\
         imageGCHighThresholdPercent: 100\n",
        env.manifests.display(),
        env.ro_port,
        env.healthz_port,
        env.port,
        cp.dir.join("pki/ca.crt").display(),
    );
    std::fs::write(env.config_path(), cfg).expect("writing the kubelet config");
    vec![
        format!("--config={}", env.config_path().display()),
        "--container-runtime=remote".into(),
        format!("--container-runtime-endpoint=unix://{}", env.sock.display()),
        format!("--root-dir={}", env.root.display()),
        format!("--hostname-override={}", env.node),
        format!("--cgroup-root={}", env.cgroup_root()),
        format!("--kubeconfig={}", cp.node_kubeconfig(&env.node).display()),
        "--node-ip=127.0.0.1".into(),
        "--v=2".into(),
    ]
}

/// An upstream kubelet process, killed on drop; its log goes to `log`.
pub struct Upstream {
    child: Option<Child>,
    log: PathBuf,
}

impl Upstream {
    pub fn start(bin: &Path, args: &[String], log: PathBuf) -> Upstream {
        let f = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .args(args)
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn upstream kubelet");
        Upstream {
            child: Some(child),
            log,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `systemctl stop`: SIGTERM, wait for the exit.
    pub fn stop(&mut self) {
        let mut c = self.child.take().expect("upstream kubelet running");
        kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while c.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "upstream kubelet ignored SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- upstream kubelet log ---\n{}", tail(&self.log(), 60));
        }
    }
}

pub use crate::common::tunables::{read_tunables, save_tunables};

/// Both kubelets log under /var/log/pods and link from /var/log/containers (the same command
/// line means upstream's defaults); this removes what this test's pods left there, restores the
/// host's kernel tunables, and, dropped after the Env, unmounts whatever is still mounted under
/// the Env's dir (upstream's rshared root-dir bind, tmpfs of secret volumes) and removes the dir.
pub struct HostCleanup {
    pub dir: PathBuf,
    pub tunables: Vec<(String, String)>,
}

impl Drop for HostCleanup {
    fn drop(&mut self) {
        for (k, v) in &self.tunables {
            let _ = std::fs::write(Path::new("/proc/sys").join(k), v);
        }
        let is_ours = |name: &str| name.starts_with("default_swap-");
        if let Ok(rd) = std::fs::read_dir("/var/log/containers") {
            for e in rd.flatten() {
                let target = std::fs::read_link(e.path()).unwrap_or_default();
                let under = target
                    .strip_prefix("/var/log/pods")
                    .ok()
                    .and_then(|p| p.iter().next())
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if is_ours(&under) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        if let Ok(rd) = std::fs::read_dir("/var/log/pods") {
            for e in rd.flatten() {
                if is_ours(&e.file_name().to_string_lossy()) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let mut mounts = mounts_below(&self.dir);
        mounts.reverse();
        for m in mounts {
            let _ = Command::new("umount").arg("-l").arg(&m).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The pod cgroups under the Env's cgroup root (cpu hierarchy), as `pod<uid>` directory names.
pub fn pod_cgroups(env: &Env) -> Vec<String> {
    let top = Path::new("/sys/fs/cgroup/cpu").join(env.cgroup_root().trim_start_matches('/'));
    let mut out = Vec::new();
    let mut stack = vec![top];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !e.path().is_dir() {
                continue;
            }
            if name.starts_with("pod") {
                out.push(name);
            } else {
                stack.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// upstream's container manager refuses a `--cgroup-root` that does not exist yet in every
/// hierarchy (rkubelet creates it); the Env removes the tree on drop.
pub fn make_cgroup_root(root: &str) {
    for m in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let p = m.path();
        if p.join("cgroup.procs").exists() || p.join("tasks").exists() {
            let _ = std::fs::create_dir_all(p.join(root.trim_start_matches('/')));
        }
    }
}
