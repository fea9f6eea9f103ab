//! Test harness: a private containerd (hack/containerd.sh) and an rkubelet process per test, both
//! torn down on drop so a failed test leaves nothing behind.
#![allow(dead_code)]

pub mod cgroupfs;
pub mod klog;
pub mod tunables;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::{api, CriClient};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Port `slot` (0..4) of Env `index`: 10000 + 4 * index + slot, below the kernel's ephemeral
/// range (32768..) on purpose. A port the kernel handed out and we released could be taken again
/// by any outgoing connection (kubectl, the apiserver's clients) before rkubelet binds it, which
/// made start-up fail with "Address already in use" now and then; Env indices are unique among
/// concurrently running tests, so these ports are too.
fn env_port(index: u32, slot: u32) -> u16 {
    let port = u16::try_from(10_000 + 4 * index + slot).expect("Env index in 1..=255");
    if let Err(e) = TcpListener::bind(("0.0.0.0", port)) {
        panic!("port {port} of Env {index} is taken ({e}): a leftover rkubelet or another Env {index}?");
    }
    port
}

/// One private containerd + rkubelet.
pub struct Env {
    pub dir: PathBuf,
    pub index: u32,
    pub sock: PathBuf,
    pub manifests: PathBuf,
    pub logs: PathBuf,
    pub root: PathBuf,
    pub ro_port: u16,
    pub healthz_port: u16,
    /// The secure (10250-style) port; each test its own, as tests run in parallel.
    pub port: u16,
    /// Appended to the KubeletConfiguration `start_kubelet*` writes (YAML lines).
    pub extra_config: String,
    pub node: String,
    kubelet: Option<Child>,
    runs: u32,
    runtime_up: bool,
}

impl Env {
    /// Starts a private containerd with bridge index `index` (unique per test).
    pub fn new(index: u32) -> Env {
        let mut env = Env::without_runtime(index);
        env.up_runtime();
        env
    }

    /// Directories only; `up_runtime` starts containerd later.
    pub fn without_runtime(index: u32) -> Env {
        let dir = PathBuf::from(format!("/tmp/rkt-{index}-{}", std::process::id()));
        let _ = Command::new(repo_root().join("hack/containerd.sh"))
            .arg("down")
            .arg(&dir)
            .output();
        let _ = std::fs::remove_dir_all(&dir);
        let manifests = dir.join("manifests");
        std::fs::create_dir_all(&manifests).unwrap();
        Env {
            sock: dir.join("ctd/containerd.sock"),
            logs: dir.join("logs"),
            root: dir.join("kubelet"),
            manifests,
            dir,
            index,
            ro_port: env_port(index, 0),
            healthz_port: env_port(index, 1),
            port: env_port(index, 2),
            extra_config: String::new(),
            node: format!("node-{index}"),
            kubelet: None,
            runs: 0,
            runtime_up: false,
        }
    }

    pub fn up_runtime(&mut self) {
        let out = Command::new(repo_root().join("hack/containerd.sh"))
            .arg("up")
            .arg(self.dir.join("ctd"))
            .arg(self.index.to_string())
            .output()
            .expect("run hack/containerd.sh");
        assert!(
            out.status.success(),
            "containerd did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.runtime_up = true;
    }

    pub fn cri(&self) -> CriClient {
        CriClient::new(
            &format!("unix://{}", self.sock.display()),
            Duration::from_secs(10),
        )
        .unwrap()
    }

    /// This test's `--cgroup-root`: pod cgroups of parallel tests never share a `kubepods`, and
    /// nothing of the host's is touched. Removed with the Env.
    pub fn cgroup_root(&self) -> String {
        format!("/rkt-{}-{}", self.index, std::process::id())
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("kubelet-config.yaml")
    }

    /// Starts rkubelet with a config file (podLogsDir inside the test dir) plus upstream flags.
    pub fn start_kubelet(&mut self) {
        self.start_kubelet_with(&[]);
    }

    /// Starts rkubelet as a node of `cp`, as kubeadm joins one: node credentials, the cluster CA
    /// as `--client-ca-file` (so the apiserver's kubelet-client cert authenticates on 10250),
    /// InternalIP 127.0.0.1; then `extra` flags.
    pub fn join(&mut self, cp: &ControlPlane, extra: &[&str]) {
        let kc = format!("--kubeconfig={}", cp.node_kubeconfig(&self.node).display());
        let ca = format!("--client-ca-file={}", cp.dir.join("pki/ca.crt").display());
        let mut args = vec![kc.as_str(), ca.as_str(), "--node-ip=127.0.0.1"];
        args.extend_from_slice(extra);
        self.start_kubelet_with(&args);
    }

    pub fn start_kubelet_with(&mut self, extra: &[&str]) {
        let cmd = self.kubelet_command(extra);
        self.spawn_until_healthy(cmd);
    }

    /// Spawns the kubelet and waits for its healthz on `self.healthz_port`.
    fn spawn_until_healthy(&mut self, mut cmd: Command) {
        self.kubelet = Some(cmd.spawn().expect("spawn rkubelet"));
        let port = self.healthz_port;
        wait_until(Duration::from_secs(10), "rkubelet healthz", || {
            http_get("127.0.0.1", port, "/healthz")
                .ok()
                .filter(|(c, _)| *c == 200)
        });
    }

    /// Waits for the secure port. The start waits for healthz only, which rkubelet serves
    /// before the runtime is up; the secure port comes after the container manager (kernel
    /// tunables, cgroups) and the serving certificate, so a first request there can find nothing
    /// listening yet on a loaded machine.
    pub fn wait_secure_port(&self) {
        let port = self.port;
        wait_until(Duration::from_secs(30), "secure port listening", || {
            TcpStream::connect(("127.0.0.1", port)).ok()
        });
    }

    /// Runs rkubelet as [`Env::start_kubelet_with`] would, for one that must stop on its own
    /// (a start refused): its exit status once it exited, or a panic after `within`.
    pub fn run_kubelet_to_exit(
        &mut self,
        extra: &[&str],
        within: Duration,
    ) -> std::process::ExitStatus {
        let mut child = self.kubelet_command(extra).spawn().expect("spawn rkubelet");
        let deadline = Instant::now() + patience(within);
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return st;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "rkubelet {extra:?} still runs after {within:?}:\n{}",
                    tail(&self.kubelet_log(), 30)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The config file written and the command line of a test kubelet, its output to the next
    /// log file.
    fn kubelet_command(&mut self, extra: &[&str]) -> Command {
        let cfg = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             staticPodPath: {}\npodLogsDir: {}\nreadOnlyPort: {}\nhealthzPort: {}\nport: {}\n\
             fileCheckFrequency: 20s\nsyncFrequency: 1m0s\n",
            self.manifests.display(),
            self.logs.display(),
            self.ro_port,
            self.healthz_port,
            self.port
        ) + &self.extra_config;
        // Upstream's default disk thresholds (nodefs 10%, imagefs 15%) would put a CI host
        // whose disk is more than 85% full under DiskPressure, and every API pod would be
        // refused with Evicted: tests get thresholds the shared host meets, unless they set
        // their own.
        let cfg = if self.extra_config.contains("evictionHard") {
            cfg
        } else {
            cfg + "evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}\n"
        };
        // Likewise image GC (high threshold 85% by default) would remove a test's unused images
        // on such a host, and no registry can give them back: off (100) unless a test sets it.
        let cfg = if self.extra_config.contains("imageGCHighThresholdPercent") {
            cfg
        } else {
            cfg + "imageGCHighThresholdPercent: 100\n"
        };
        std::fs::write(self.config_path(), cfg).unwrap();
        self.runs += 1;
        let log = std::fs::File::create(self.kubelet_log_path(self.runs)).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rkubelet"));
        cmd.arg("--config")
            .arg(self.config_path())
            .arg(format!(
                "--container-runtime-endpoint=unix://{}",
                self.sock.display()
            ))
            .arg("--root-dir")
            .arg(&self.root)
            .arg("--hostname-override")
            .arg(&self.node)
            .arg(format!("--cgroup-root={}", self.cgroup_root()))
            .arg("--v=4")
            // Never the host's /var/log/containers.
            .arg(format!(
                "--container-logs-dir={}",
                self.container_logs_dir().display()
            ))
            .args(extra)
            .env_remove("RUST_LOG")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null());
        cmd
    }

    /// Starts rkubelet with exactly `args`, nothing added (an operator's unit-file command line),
    /// and waits for its healthz on `self.healthz_port` (the caller's config must use it).
    pub fn start_kubelet_raw(&mut self, args: &[String]) {
        self.runs += 1;
        let log = std::fs::File::create(self.kubelet_log_path(self.runs)).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rkubelet"));
        cmd.args(args)
            .env_remove("RUST_LOG")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null());
        self.spawn_until_healthy(cmd);
    }

    /// Where this test's rkubelet puts the `<pod>_<ns>_<container>-<id>.log` symlinks.
    pub fn container_logs_dir(&self) -> PathBuf {
        self.dir.join("containers")
    }

    fn kubelet_log_path(&self, run: u32) -> PathBuf {
        self.dir.join(format!("rkubelet-{run}.log"))
    }

    /// What the latest rkubelet run of this test logged.
    pub fn last_kubelet_log(&self) -> String {
        std::fs::read_to_string(self.kubelet_log_path(self.runs)).unwrap_or_default()
    }

    /// Everything every rkubelet run of this test logged.
    pub fn kubelet_log(&self) -> String {
        (1..=self.runs)
            .map(|r| std::fs::read_to_string(self.kubelet_log_path(r)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn kubelet_pid(&self) -> Option<u32> {
        self.kubelet.as_ref().map(|c| c.id())
    }

    /// Sends `sig` and waits for the process to exit; returns its exit status.
    pub fn stop_kubelet(&mut self, sig: nix::sys::signal::Signal) -> std::process::ExitStatus {
        let mut child = self.kubelet.take().expect("kubelet running");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
        let deadline = Instant::now() + patience(Duration::from_secs(15));
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "rkubelet did not exit after {sig}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn kubelet_alive(&mut self) -> bool {
        self.kubelet
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    pub fn write_manifest(&self, file: &str, text: &str) {
        // Write then rename, as a careful operator (or kubeadm) does.
        let tmp = self.dir.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.manifests.join(file)).unwrap();
    }

    pub fn remove_manifest(&self, file: &str) {
        std::fs::remove_file(self.manifests.join(file)).unwrap();
    }

    /// The read-only server's `/pods`.
    pub fn pods(&self) -> Vec<Pod> {
        let (code, body) = http_get("127.0.0.1", self.ro_port, "/pods").expect("GET /pods");
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["kind"], "PodList");
        serde_json::from_value(v["items"].clone()).unwrap()
    }

    pub fn pod(&self, name: &str) -> Option<Pod> {
        let full = format!("{name}-{}", self.node);
        self.pods()
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some(full.as_str()))
    }

    /// Waits until `f` returns Some for the named pod, with the kubelet log in the failure message.
    pub fn wait_pod<T>(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        f: impl Fn(&Pod) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + patience(timeout);
        let mut last = None;
        loop {
            if let Some(p) = self.pod(name) {
                if let Some(t) = f(&p) {
                    return t;
                }
                last = Some(p);
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out after {timeout:?} waiting for pod {name}: {what}\nlast seen: {}\nkubelet log tail:\n{}",
                    serde_json::to_string_pretty(&last.map(|p| p.status)).unwrap(),
                    tail(&self.kubelet_log(), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn wait_running(&self, name: &str) -> Pod {
        self.wait_pod(
            name,
            Duration::from_secs(30),
            "phase Running with all containers ready",
            |p| {
                let st = p.status.as_ref()?;
                let all_ready = st.container_statuses.as_ref()?.iter().all(|c| c.ready);
                (st.phase.as_deref() == Some("Running") && all_ready).then(|| p.clone())
            },
        )
    }

    /// CRI containers carrying the pod UID label (all states).
    pub async fn containers_of(&self, uid: &str) -> Vec<api::Container> {
        self.cri()
            .list_containers(api::ListContainersRequest {
                filter: Some(api::ContainerFilter {
                    label_selector: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .containers
    }

    /// Waits until the runtime has no container and no sandbox of pod `uid`, panicking with
    /// `what` once `within` has passed since `since`.
    pub async fn wait_runtime_empty(
        &self,
        uid: &str,
        since: Instant,
        within: Duration,
        what: &str,
    ) {
        while !(self.containers_of(uid).await.is_empty() && self.sandboxes_of(uid).await.is_empty())
        {
            assert!(
                since.elapsed() < within,
                "{what} after {:?}",
                since.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// IDs of [`Self::containers_of`], in the runtime's order: what a restart must keep.
    pub async fn container_ids(&self, uid: &str) -> Vec<String> {
        self.containers_of(uid)
            .await
            .into_iter()
            .map(|c| c.id)
            .collect()
    }

    /// IDs of [`Self::sandboxes_of`], in the runtime's order.
    pub async fn sandbox_ids(&self, uid: &str) -> Vec<String> {
        self.sandboxes_of(uid)
            .await
            .into_iter()
            .map(|s| s.id)
            .collect()
    }

    pub async fn sandboxes_of(&self, uid: &str) -> Vec<api::PodSandbox> {
        self.cri()
            .list_pod_sandbox(api::ListPodSandboxRequest {
                filter: Some(api::PodSandboxFilter {
                    label_selector: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .items
    }

    pub async fn all_containers(&self) -> Vec<api::Container> {
        self.cri()
            .list_containers(api::ListContainersRequest { filter: None })
            .await
            .unwrap()
            .containers
    }

    pub async fn all_sandboxes(&self) -> Vec<api::PodSandbox> {
        self.cri()
            .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
            .await
            .unwrap()
            .items
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(mut c) = self.kubelet.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            let log = self.kubelet_log();
            // The tail covers the last seconds only; what went wrong minutes earlier (a rotation
            // that failed, a watch that broke) is among the first warnings and errors.
            let problems: Vec<&str> = log
                .lines()
                .filter(|l| l.starts_with('W') || l.starts_with('E'))
                .collect();
            // The whole log outlives the test's directory, for a failure seen only once; kept
            // outside /tmp/rkt-*, which hack/test.sh counts as things a test left behind.
            let kept_dir = Path::new("/tmp/rkubelet-test-failures");
            let kept = kept_dir.join(
                self.dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
                    + ".log",
            );
            let kept = std::fs::create_dir_all(kept_dir)
                .and_then(|()| std::fs::write(&kept, &log))
                .map(|()| kept.display().to_string())
                .unwrap_or_else(|e| format!("not kept: {e}"));
            eprintln!(
                "--- rkubelet log ({}; whole log: {kept}) ---\nfirst {} of {} warning and error lines:\n{}\n--- last 80 lines ---\n{}",
                self.dir.display(),
                problems.len().min(40),
                problems.len(),
                problems[..problems.len().min(40)].join("\n"),
                tail(&log, 80)
            );
        }
        if self.runtime_up {
            let out = Command::new(repo_root().join("hack/containerd.sh"))
                .arg("down")
                .arg(self.dir.join("ctd"))
                .output();
            if let Ok(o) = out {
                if !o.status.success() {
                    eprintln!(
                        "containerd down failed: {}",
                        String::from_utf8_lossy(&o.stderr)
                    );
                }
            }
        }
        cgroupfs::remove_tree(&self.cgroup_root());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<_> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `curl` against the node's secure port: (HTTP code, body).
pub fn curl(env: &Env, path: &str, extra: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sk", "-w", "\n%{http_code}"])
        .args(extra)
        .arg(format!("https://127.0.0.1:{}{path}", env.port))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// Minimal HTTP/1.0 GET: the tests need status and body, nothing more. Its timeouts only end a
/// hung request, so they scale with [`patience`]: a summary computed in the emulated cgroup v2
/// guest on a loaded host took longer than 5 s.
pub fn http_get(host: &str, port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(
        &format!("{host}:{port}").parse().unwrap(),
        patience(Duration::from_secs(3)),
    )?;
    s.set_read_timeout(Some(patience(Duration::from_secs(5))))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)?;
    let (head, body) = buf.split_once("\r\n\r\n").unwrap_or((&buf, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_string()))
}

/// How long a wait may last: `timeout` times RK_TEST_PATIENCE (a whole number, default 1).
/// hack/run-tests.sh sets it for the runs in the emulated cgroup v2 guest, where everything takes
/// several times as long; a test's deadlines are there to end a hung test, not to time it.
pub fn patience(timeout: Duration) -> Duration {
    let factor = std::env::var("RK_TEST_PATIENCE")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|f| *f > 0)
        .unwrap_or(1);
    timeout * factor
}

/// Polls `f` until it returns Some, for at most `timeout` (times RK_TEST_PATIENCE).
///
/// Between polls it sleeps 100 ms, or as long as the poll took if that was longer: a poll that
/// spawns a process (curl, kubectl) then takes at most half a core, and the kubelet and runtime
/// under test keep the rest, which matters most in the emulated guest.
pub fn wait_until<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let timeout = patience(timeout);
    let deadline = Instant::now() + timeout;
    loop {
        let polled = Instant::now();
        if let Some(t) = f() {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(polled.elapsed().max(Duration::from_millis(100)));
    }
}

/// `wait_until` for a JSON object read from the API (`ControlPlane::get_json`), returning it.
pub fn wait_json(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Option<serde_json::Value>,
) -> serde_json::Value {
    wait_until(timeout, what, &mut f)
}

/// `wait_until` for checks that talk to the runtime: async, because a test's runtime has one
/// thread and a blocking wait would starve the CRI client it polls through.
pub async fn wait_async<F, Fut>(timeout: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let timeout = patience(timeout);
    let deadline = Instant::now() + timeout;
    while !f().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn container_status<'a>(
    pod: &'a Pod,
    name: &str,
) -> &'a k8s_openapi::api::core::v1::ContainerStatus {
    find_container_status(pod, name).unwrap_or_else(|| panic!("no status for container {name}"))
}

/// The status of container `name`, if the kubelet published one yet: what wait closures use,
/// since a pod is listed from the moment it is admitted, before its first status.
pub fn find_container_status<'a>(
    pod: &'a Pod,
    name: &str,
) -> Option<&'a k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == name))
}

/// Runs `cmd` in container `container` of `pod` through CRI ExecSync; returns the exit code and
/// stdout followed by stderr.
pub async fn exec_in(env: &Env, pod: &Pod, container: &str, cmd: &[&str]) -> (i32, String) {
    let id = container_status(pod, container)
        .container_id
        .clone()
        .unwrap();
    let out = exec_sync(env, &id, cmd).await;
    (
        out.exit_code,
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// CRI ExecSync of `cmd` (5 s timeout) in the container with this ID, with or without the
/// status's `containerd://` prefix.
pub async fn exec_sync(env: &Env, container_id: &str, cmd: &[&str]) -> api::ExecSyncResponse {
    env.cri()
        .exec_sync(api::ExecSyncRequest {
            container_id: container_id.trim_start_matches("containerd://").to_string(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout: 5,
        })
        .await
        .unwrap()
}

/// `cmd` in the first container of an API pod (`pod` as `kubectl get -o json` gives it): the
/// exit code, and stdout with its trailing whitespace trimmed followed by stderr.
pub async fn exec_first(env: &Env, pod: &serde_json::Value, cmd: &[&str]) -> (i32, String) {
    let id = pod["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .unwrap();
    let out = exec_sync(env, id, cmd).await;
    (
        out.exit_code,
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
            + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Mount points strictly below `dir`, from the host's mount table.
pub fn mounts_below(dir: &Path) -> Vec<String> {
    let prefix = format!("{}/", dir.display());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

/// kube-controller-manager flags for the PV binder alone, resyncing claims every 2 s (upstream
/// default 15 s), so a PV created after its claim binds within seconds.
pub const PV_BINDER: [&str; 3] = [
    "--controllers",
    "persistentvolume-binder",
    "--pvclaimbinder-sync-period=2s",
];

pub fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap()
}

pub const IMAGE: &str = "rkubelet.local/busybox:1.35";

/// A pod for the API (`kubectl create -f -`) bound to `node`, running `script` in busybox;
/// `extra` is appended to the container (YAML at container indentation).
pub fn api_pod(name: &str, node: &str, script: &str, grace: u32, extra: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {grace}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {script:?}]
{extra}"#
    )
}

/// A one-container pod manifest running `script` under sh.
pub fn simple_pod(name: &str, restart_policy: &str, script: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{app: {name}}}
spec:
  restartPolicy: {restart_policy}
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {script:?}]
"#
    )
}

/// Runs forever and exits promptly on SIGTERM.
pub const SLEEPER: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

/// A private etcd + kube-apiserver (hack/control-plane.sh), torn down on drop.
///
/// With `RK_TEST_SHARED_CONTROL_PLANE=DIR` (hack/vm/guest-tests.sh, the cgroup v2 guest) every
/// test of the run uses the one control plane in DIR instead, started by the first that asks and
/// left running for the next; the guest's runner force-deletes the pods and nodes a binary left
/// and stops it at the end. Under emulation an apiserver costs minutes of CPU to start, and each test's
/// nodes and pods are its own (node names carry the Env index), so a shared one changes nothing
/// the tests check.
pub struct ControlPlane {
    pub dir: PathBuf,
    pub admin_kubeconfig: PathBuf,
    /// Started for the whole run (`RK_TEST_SHARED_CONTROL_PLANE`): not torn down on drop.
    shared: bool,
}

impl ControlPlane {
    pub fn up(tag: &str) -> ControlPlane {
        Self::up_with(tag, false)
    }

    /// As [`ControlPlane::up`], with the apiserver's Metadata-level audit log in
    /// [`ControlPlane::audit_events`] (hack/control-plane.sh's `RK_APISERVER_AUDIT=1`).
    pub fn up_audited(tag: &str) -> ControlPlane {
        Self::up_with(tag, true)
    }

    /// The audit log's events, one per request (a watch's ResponseStarted and ResponseComplete
    /// events are one request: the first seen of each `auditID` is kept).
    pub fn audit_events(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(self.dir.join("log/audit.log")).unwrap_or_default();
        let mut seen = std::collections::HashSet::new();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| seen.insert(e["auditID"].as_str().unwrap_or_default().to_string()))
            .collect()
    }

    fn up_with(tag: &str, audit: bool) -> ControlPlane {
        let shared = std::env::var_os("RK_TEST_SHARED_CONTROL_PLANE")
            .filter(|d| !d.is_empty() && !audit)
            .map(PathBuf::from);
        // Two tests of one binary asking at once start it once.
        static SHARED_START: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _starting = shared
            .as_ref()
            .map(|_| SHARED_START.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(dir) = &shared {
            let admin = dir.join("admin.kubeconfig");
            // `ready`: control-plane.sh up finished (a start cut short is started again below;
            // the guest's runner takes down one that stops answering).
            if dir.join("ready").exists() {
                return ControlPlane {
                    dir: dir.clone(),
                    admin_kubeconfig: admin,
                    shared: true,
                };
            }
        }
        let dir = shared
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("/tmp/rkt-cp-{tag}-{}", std::process::id())));
        let script = repo_root().join("hack/control-plane.sh");
        let _ = Command::new(&script).arg("down").arg(&dir).output();
        let mut cmd = Command::new(&script);
        if audit {
            cmd.env("RK_APISERVER_AUDIT", "1");
        }
        let out = cmd
            .arg("up")
            .arg(&dir)
            .output()
            .expect("run hack/control-plane.sh");
        if !out.status.success() {
            // What did start (etcd) must not outlive the test: hack/test.sh fails on it.
            let _ = Command::new(&script).arg("down").arg(&dir).output();
            panic!(
                "control plane did not start: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let admin = stdout
            .lines()
            .find_map(|l| l.strip_prefix("ADMIN_KUBECONFIG="))
            .expect("ADMIN_KUBECONFIG in control-plane.sh output");
        ControlPlane {
            admin_kubeconfig: PathBuf::from(admin),
            dir,
            shared: shared.is_some(),
        }
    }

    /// A kubeconfig with only this node's credentials (system:node:<name>, system:nodes), so the
    /// Node authorizer and NodeRestriction apply to rkubelet as in production.
    pub fn node_kubeconfig(&self, node: &str) -> PathBuf {
        let out = Command::new(repo_root().join("hack/control-plane.sh"))
            .arg("node-cert")
            .arg(&self.dir)
            .arg(node)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .lines()
                .last()
                .unwrap()
                .trim(),
        )
    }

    /// `kubectl` as cluster admin; panics with its stderr on failure.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.kubectl_stdin(args, None)
    }

    pub fn kubectl_stdin(&self, args: &[&str], stdin: Option<&str>) -> String {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .args(args);
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl");
        if let Some(text) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits (90 s) until the first container of API pod `pod` is running.
    pub fn wait_running(&self, pod: &str) {
        wait_until(Duration::from_secs(90), &format!("{pod} running"), || {
            let p = self.get_json(&["pod", pod])?;
            p["status"]["containerStatuses"][0]["state"]["running"]
                .is_object()
                .then_some(())
        });
    }

    /// Pod `name` (default namespace) once its phase is Running, within 90 s.
    pub fn running_pod(&self, name: &str) -> serde_json::Value {
        wait_until(Duration::from_secs(90), &format!("{name} Running"), || {
            let p = self.get_json(&["pod", name])?;
            (p["status"]["phase"] == "Running").then_some(p)
        })
    }

    /// Waits, up to 20 s, until pod `name`'s first container shows a waiting state, and returns
    /// the pod. The status manager writes status on its own task, independently of the event
    /// recorder (as upstream's do), so an event seen in the API says nothing yet about the status.
    pub fn pod_waiting(&self, name: &str) -> serde_json::Value {
        wait_until(
            Duration::from_secs(20),
            &format!("{name}'s container waiting in its status"),
            || {
                let p = self.get_json(&["pod", name])?;
                let reason = &p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"];
                (!reason.is_null()).then_some(p)
            },
        )
    }

    /// Deletes pod `name` (default namespace) with its grace period and waits, up to 60 s, until
    /// the object is gone.
    pub fn delete_pod(&self, name: &str) {
        self.kubectl(&["delete", "pod", name, "--wait=false"]);
        wait_until(Duration::from_secs(60), &format!("{name} gone"), || {
            self.get_json(&["pod", name]).is_none().then_some(())
        });
    }

    /// The events recorded for pod `name` in the default namespace, as `(reason, message)`.
    pub fn pod_events(&self, name: &str) -> Vec<(String, String)> {
        self.events_of("Pod", name)
    }

    /// Waits up to `timeout` for an event on Pod `name` with `reason` and a message that
    /// `matches`, and returns the message.
    pub fn wait_pod_event(
        &self,
        name: &str,
        reason: &str,
        timeout: Duration,
        matches: impl Fn(&str) -> bool,
    ) -> String {
        wait_until(timeout, &format!("{reason} event on pod {name}"), || {
            self.pod_events(name)
                .into_iter()
                .find(|(r, m)| r == reason && matches(m))
                .map(|(_, m)| m)
        })
    }

    /// The events recorded on Node `name`, as `(reason, message)`.
    pub fn node_events(&self, name: &str) -> Vec<(String, String)> {
        self.events_of("Node", name)
    }

    /// The events whose involved object is `kind`/`name`, as `(reason, message)`.
    fn events_of(&self, kind: &str, name: &str) -> Vec<(String, String)> {
        let sel = format!("involvedObject.kind={kind},involvedObject.name={name}");
        let ev = self
            .get_json(&["events", "--field-selector", &sel])
            .unwrap_or_default();
        ev["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                (s("reason"), s("message"))
            })
            .collect()
    }

    /// `kubectl get -o json`, or None when it does not exist (or cannot be read).
    ///
    /// The forms tests poll with (`KIND [NAME]`, `-n NS`, `-A`, `--field-selector S`, for the
    /// kinds in [`rest_path`]) go to the apiserver through curl: a kubectl process costs ~0.2 s
    /// of CPU (~2 s in the emulated cgroup v2 guest) against curl's ~0.03 s, and a wait polls
    /// every 100 ms, so kubectl polling kept a core busy per waiting test and starved the
    /// guest's kubelet and containerd. A list is the API's `<Kind>List` (kubectl's is `List`);
    /// tests read only its `items`. Any other form goes to kubectl as before.
    pub fn get_json(&self, args: &[&str]) -> Option<serde_json::Value> {
        if let Some(path) = rest_path(args) {
            return self.get_rest(&path);
        }
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .arg("get")
            .args(args)
            .args(["-o", "json"])
            .output()
            .unwrap();
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    /// GET `path` from the apiserver as cluster admin (curl, the admin certificate); None on
    /// any failure (404 included), as `kubectl get` fails.
    pub fn get_rest(&self, path: &str) -> Option<serde_json::Value> {
        let env = std::fs::read_to_string(self.dir.join("env")).ok()?;
        let url = env.lines().find_map(|l| l.strip_prefix("APISERVER_URL="))?;
        let pki = self.dir.join("pki");
        let out = Command::new("curl")
            .args(["-sSf", "--max-time", "30", "--cacert"])
            .arg(pki.join("ca.crt"))
            .arg("--cert")
            .arg(pki.join("admin.crt"))
            .arg("--key")
            .arg(pki.join("admin.key"))
            .arg(format!("{url}{path}"))
            .stdin(Stdio::null())
            .output()
            .ok()?;
        if !out.status.success() {
            // A 404 is an answer (polls for deletion expect it); anything else is shown with a
            // failed test's output, so that a poll that failed once says why.
            let err = String::from_utf8_lossy(&out.stderr);
            if !err.contains("error: 404") {
                eprintln!("GET {path}: curl {}: {}", out.status, err.trim());
            }
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    /// Starts kube-controller-manager with only the TLS bootstrap controllers (CSR approving,
    /// signing with the cluster CA, cleaning; bootstrap tokens), plus `extra` flags, and waits
    /// until the CSR controllers have their service account credentials. Opt-in per test: most
    /// tests need no controllers, and it costs a process per control plane on a shared machine.
    pub fn start_controller_manager(&self, extra: &[&str]) {
        let mut args = vec!["controller-manager", self.dir.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = Command::new(repo_root().join("hack/control-plane.sh"))
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "control-plane.sh controller-manager: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let log = self.dir.join("log/kube-controller-manager.log");
        wait_until(
            Duration::from_secs(60),
            "certificate-controller service account token",
            || {
                let sa = self.get_json(&["sa", "-n", "kube-system", "certificate-controller"])?;
                let has_token = sa["secrets"].as_array().is_some_and(|s| !s.is_empty());
                if !has_token {
                    let l = std::fs::read_to_string(&log).unwrap_or_default();
                    eprintln!("waiting for controller-manager: {}", tail(&l, 3));
                }
                has_token.then_some(())
            },
        );
    }

    /// A bootstrap token Secret with kubeadm's RBAC for it; returns a kubeconfig with only the
    /// token (what `kubeadm join` writes as bootstrap-kubelet.conf).
    pub fn bootstrap_kubeconfig(&self) -> PathBuf {
        let out = Command::new(repo_root().join("hack/control-plane.sh"))
            .arg("bootstrap-token")
            .arg(&self.dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "control-plane.sh bootstrap-token: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    }

    /// Stops the apiserver (etcd stays), for outage tests.
    pub fn stop_apiserver(&self) {
        self.script(&["stop-apiserver"]);
    }

    /// Brings the same apiserver back and waits until it is ready.
    pub fn start_apiserver(&self) {
        self.script(&["start-apiserver"]);
    }

    fn script(&self, cmd: &[&str]) {
        let out = Command::new(repo_root().join("hack/control-plane.sh"))
            .args(cmd)
            .arg(&self.dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "control-plane.sh {cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if self.shared {
            return;
        }
        let _ = Command::new(repo_root().join("hack/control-plane.sh"))
            .arg("down")
            .arg(&self.dir)
            .output();
    }
}

/// A private plain-HTTP image registry (hack/registry.sh: Debian's docker-registry on a free
/// loopback port), stopped and removed on drop, even when the test panics.
pub struct Registry {
    pub dir: PathBuf,
    /// `127.0.0.1:PORT`, the registry host of image references pushed here.
    pub addr: String,
    pub log: PathBuf,
}

impl Registry {
    pub fn up(tag: &str) -> Registry {
        Self::start(tag, None)
    }

    /// A registry that answers only requests with basic auth as `user`/`password` (htpasswd);
    /// [`Registry::push`] uses those credentials.
    pub fn up_with_auth(tag: &str, user: &str, password: &str) -> Registry {
        Self::start(tag, Some(format!("{user}:{password}")))
    }

    fn start(tag: &str, creds: Option<String>) -> Registry {
        let dir = PathBuf::from(format!("/tmp/rkt-reg-{tag}-{}", std::process::id()));
        let script = repo_root().join("hack/registry.sh");
        let _ = Command::new(&script).arg("down").arg(&dir).output();
        let out = Command::new(&script)
            .arg("up")
            .arg(&dir)
            .args(creds)
            .output()
            .expect("run hack/registry.sh");
        // Built before the check so a failed start is still cleaned up by Drop.
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let value = |key: &str| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
        };
        let reg = Registry {
            addr: value("REGISTRY").unwrap_or_default(),
            log: PathBuf::from(value("REGISTRY_LOG").unwrap_or_default()),
            dir,
        };
        assert!(
            out.status.success() && !reg.addr.is_empty(),
            "registry did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        reg
    }

    /// Pushes the test busybox image ([`IMAGE`]) as `<addr>/<name_tag>`; returns the manifest digest.
    pub fn push(&self, name_tag: &str) -> String {
        self.push_image(IMAGE, name_tag)
    }

    /// Pushes a locally built image (one of `hack/images.sh list`) as `<addr>/<name_tag>`; returns
    /// the manifest digest (`sha256:...`) the registry serves it under.
    pub fn push_image(&self, image: &str, name_tag: &str) -> String {
        let out = Command::new(repo_root().join("hack/registry.sh"))
            .arg("push")
            .arg(&self.dir)
            .arg(image)
            .arg(name_tag)
            .output()
            .expect("run hack/registry.sh push");
        assert!(
            out.status.success(),
            "push of {image} as {name_tag} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("DIGEST="))
            .expect("DIGEST= in registry.sh push output")
            .to_string()
    }

    /// The full reference of `name_tag` in this registry.
    pub fn image(&self, name_tag: &str) -> String {
        format!("{}/{name_tag}", self.addr)
    }

    /// The registry's log (access log lines included).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Access-log lines of requests made by containerd (its user agent), in order.
    pub fn containerd_requests(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains("\"containerd/") && l.contains(" HTTP/1.1\" "))
            .map(str::to_string)
            .collect()
    }

    /// How many times containerd asked for the manifest of `name:tag` (resolve: HEAD or GET by
    /// tag), under any registry name (`?ns=` when reached through a hosts.toml alias).
    pub fn manifest_requests(&self, name_tag: &str) -> usize {
        let (name, tag) = name_tag.rsplit_once(':').expect("NAME:TAG");
        let path = format!("/v2/{name}/manifests/{tag}");
        self.containerd_requests()
            .iter()
            .filter(|l| {
                ["\"HEAD ", "\"GET "].iter().any(|m| {
                    [" ", "?"]
                        .iter()
                        .any(|end| l.contains(&format!("{m}{path}{end}")))
                })
            })
            .count()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- registry log ({}) ---\n{}",
                self.dir.display(),
                tail(&self.log(), 30)
            );
        }
        let out = Command::new(repo_root().join("hack/registry.sh"))
            .arg("down")
            .arg(&self.dir)
            .output();
        if let Ok(o) = out {
            if !o.status.success() {
                eprintln!(
                    "registry down failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
            }
        }
    }
}

impl Env {
    /// Lets this Env's containerd pull from `reg` over plain HTTP: a hosts.toml in the instance's
    /// registry config_path (read by containerd on every pull, no restart needed).
    pub fn trust_registry(&self, reg: &Registry) {
        self.trust_registry_as(reg, &reg.addr);
    }

    /// Like [`Env::trust_registry`], with `reg` known to containerd as `name` (`host[:port]`):
    /// images referenced as `name/...` are pulled from `reg`, no DNS involved.
    pub fn trust_registry_as(&self, reg: &Registry, name: &str) {
        let out = Command::new(repo_root().join("hack/registry.sh"))
            .arg("hosts")
            .arg(&reg.dir)
            .arg(self.dir.join("ctd/certs.d"))
            .arg(name)
            .output()
            .expect("run hack/registry.sh hosts");
        assert!(
            out.status.success(),
            "registry.sh hosts: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// CRI ImageStatus of `image`: None when the runtime does not have it.
    pub async fn image_status(&self, image: &str) -> Option<api::Image> {
        self.cri()
            .image_status(api::ImageStatusRequest {
                image: Some(api::ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await
            .unwrap()
            .image
    }
}

impl Env {
    /// The value of the first sample of `name` (with label `label`, when given) in the read-only
    /// port's `/metrics`, parsed as Prometheus text; None when there is no such sample.
    pub fn metric(&self, name: &str, label: Option<(&str, &str)>) -> Option<f64> {
        let (code, body) = http_get("127.0.0.1", self.ro_port, "/metrics").expect("GET /metrics");
        assert_eq!(code, 200, "{body}");
        let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
            .expect("Prometheus text format");
        let sample = scrape
            .samples
            .into_iter()
            .find(|m| m.metric == name && label.is_none_or(|(k, v)| m.labels.get(k) == Some(v)))?;
        match sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => Some(v),
            _ => None,
        }
    }
}

impl ControlPlane {
    /// The apiserver's port, from the admin kubeconfig's `server:` line.
    pub fn api_port(&self) -> u16 {
        let kc = std::fs::read_to_string(&self.admin_kubeconfig).unwrap();
        kc.lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .and_then(|url| url.rsplit(':').next())
            .and_then(|p| p.trim_end_matches('/').parse().ok())
            .expect("server port in the admin kubeconfig")
    }
}

/// Counts TCP connection attempts (SYNs) to a loopback port with an iptables rule of its own,
/// removed on drop: while the apiserver is down every request a client makes is one attempt,
/// so this is the request rate the node puts on an absent apiserver.
pub struct SynCounter {
    rule: Vec<String>,
    comment: String,
}

impl SynCounter {
    pub fn new(port: u16) -> SynCounter {
        let comment = format!("rkt-syn-{port}-{}", std::process::id());
        let rule: Vec<String> = [
            "OUTPUT",
            "-o",
            "lo",
            "-p",
            "tcp",
            "--dport",
            &port.to_string(),
            "--syn",
            "-m",
            "comment",
            "--comment",
            &comment,
            "-j",
            "ACCEPT",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let out = Command::new("iptables")
            .arg("-I")
            .args(&rule)
            .output()
            .expect("run iptables");
        assert!(
            out.status.success(),
            "iptables -I: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SynCounter { rule, comment }
    }

    /// Connection attempts counted so far.
    pub fn count(&self) -> u64 {
        let out = Command::new("iptables")
            .args(["-L", "OUTPUT", "-n", "-v", "-x"])
            .output()
            .expect("run iptables");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.contains(&self.comment))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for SynCounter {
    fn drop(&mut self) {
        let _ = Command::new("iptables").arg("-D").args(&self.rule).output();
    }
}

/// The API path `kubectl get ARGS -o json` reads, for the forms tests use: `KIND [NAME]` with
/// `-n NS`, `-A` and `--field-selector SEL` in any order. None for anything else (kubectl then).
pub fn rest_path(args: &[&str]) -> Option<String> {
    let (mut ns, mut all, mut selector) = (None, false, None);
    let mut words = Vec::new();
    let mut it = args.iter();
    while let Some(&a) = it.next() {
        match a {
            "-n" | "--namespace" => ns = Some(*it.next()?),
            "-A" | "--all-namespaces" => all = true,
            "--field-selector" => selector = Some(*it.next()?),
            _ if a.starts_with('-') => return None,
            _ => words.push(a),
        }
    }
    let (kind, name) = match words[..] {
        [k] => (k, None),
        [k, n] => (k, Some(n)),
        _ => return None,
    };
    let (group, resource, namespaced) = match kind {
        "pod" | "pods" | "po" => ("api/v1", "pods", true),
        "node" | "nodes" | "no" => ("api/v1", "nodes", false),
        "service" | "services" | "svc" => ("api/v1", "services", true),
        "pvc" | "persistentvolumeclaim" | "persistentvolumeclaims" => {
            ("api/v1", "persistentvolumeclaims", true)
        }
        "pv" | "persistentvolume" | "persistentvolumes" => ("api/v1", "persistentvolumes", false),
        "sa" | "serviceaccount" | "serviceaccounts" => ("api/v1", "serviceaccounts", true),
        "event" | "events" | "ev" => ("api/v1", "events", true),
        "configmap" | "configmaps" | "cm" => ("api/v1", "configmaps", true),
        "secret" | "secrets" => ("api/v1", "secrets", true),
        "lease" | "leases" => ("apis/coordination.k8s.io/v1", "leases", true),
        "csinode" | "csinodes" => ("apis/storage.k8s.io/v1", "csinodes", false),
        _ => return None,
    };
    if (all && (name.is_some() || ns.is_some())) || (!namespaced && ns.is_some()) {
        return None;
    }
    let mut path = format!("/{group}/");
    if namespaced && !all {
        path += &format!("namespaces/{}/", ns.unwrap_or("default"));
    }
    path += resource;
    if let Some(n) = name {
        if selector.is_some() {
            return None;
        }
        path += &format!("/{n}");
    }
    if let Some(sel) = selector {
        path += &format!("?fieldSelector={}", query_escape(sel));
    }
    Some(path)
}

/// `s` as a URL query value: every byte but the unreserved ones percent-encoded.
pub fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
