//! Nodes of the kubeadm test: hack/kubeadm.sh's netns + mount namespace + containerd per node,
//! kubeadm run inside them, everything taken down on drop (even on panic), last node first.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::common::{repo_root, tail, wait_until};

/// hack/control-plane.sh kubeadm-bins: (kubeadm, kube-proxy, kube-scheduler), built from the
/// Debian source of the cached kube-apiserver.
pub fn kubeadm_bin() -> PathBuf {
    let out = Command::new(repo_root().join("hack/control-plane.sh"))
        .arg("kubeadm-bins")
        .output()
        .expect("hack/control-plane.sh");
    assert!(
        out.status.success(),
        "kubeadm-bins: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(text.lines().next().expect("kubeadm path"))
}

fn hack(args: &[&str]) -> Output {
    Command::new(repo_root().join("hack/kubeadm.sh"))
        .args(args)
        .env("RKUBELET_BIN", env!("CARGO_BIN_EXE_rkubelet"))
        .stdin(Stdio::null())
        .output()
        .expect("hack/kubeadm.sh")
}

fn ok(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub struct Node {
    pub dir: PathBuf,
    pub index: u32,
    pub name: String,
}

impl Node {
    pub fn ip(&self) -> String {
        format!("10.99.{}.2", self.index)
    }
    pub fn sock(&self) -> PathBuf {
        self.dir.join("ctd/containerd.sock")
    }
    /// The node's private `/etc/kubernetes`, as seen from the host.
    pub fn etc_kubernetes(&self) -> PathBuf {
        self.dir.join("root/etc/kubernetes")
    }
    pub fn cgroup_root(&self) -> String {
        format!("/rkt-{}-{}", self.index, std::process::id())
    }
    pub fn kubelet_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log/kubelet.log")).unwrap_or_default()
    }
    /// `args` inside the node's namespaces, with its stand-ins first in PATH.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(repo_root().join("hack/kubeadm.sh"));
        cmd.arg("run").arg(&self.dir).args(args);
        cmd.stdin(Stdio::null());
        cmd
    }
    pub fn run(&self, args: &[&str]) -> String {
        ok(
            &format!("{args:?} on {}", self.name),
            self.command(args).output().unwrap(),
        )
    }
    /// Starts `args` in the node with output to `log`, for commands the test watches while they
    /// run (kubeadm init, join).
    pub fn spawn(&self, args: &[&str], log: &Path) -> Child {
        let f = std::fs::File::create(log).unwrap();
        self.command(args)
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap()
    }
    /// The kubelet's pid as the systemctl stand-in recorded it, if it runs.
    pub fn kubelet_pid(&self) -> Option<i32> {
        let pid: i32 = std::fs::read_to_string(self.dir.join("kubelet.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
    }
}

/// The nodes, taken down in reverse order on drop (the first node made the host's mount points).
pub struct Cluster {
    pub root: PathBuf,
    pub nodes: Vec<Node>,
}

impl Cluster {
    pub fn new() -> Cluster {
        let root = PathBuf::from(format!("/tmp/rkt-kadm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        Cluster {
            root,
            nodes: Vec::new(),
        }
    }

    /// A node with bridge index `index`, with the kubeadm images `images` imported.
    pub fn add_node(&mut self, name: &str, index: u32, images: &[&str]) -> usize {
        let dir = self.root.join(format!("n{}", self.nodes.len() + 1));
        // Pushed before node-up so that a half-made node is taken down too.
        self.nodes.push(Node {
            dir: dir.clone(),
            index,
            name: name.to_string(),
        });
        let d = dir.to_str().unwrap();
        ok("node-up", hack(&["node-up", d, &index.to_string(), name]));
        let sock = dir.join("ctd/containerd.sock");
        let mut args = vec!["import", sock.to_str().unwrap()];
        args.extend_from_slice(images);
        ok("import", hack(&args));
        self.nodes.len() - 1
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        ok(&format!("kubectl {args:?}"), self.kubectl_output(args))
    }

    pub fn kubectl_output(&self, args: &[&str]) -> Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.nodes[0].etc_kubernetes().join("admin.conf"))
            .arg("--request-timeout=10s")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> String {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.nodes[0].etc_kubernetes().join("admin.conf"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        ok(
            &format!("kubectl {args:?}"),
            child.wait_with_output().unwrap(),
        )
    }

    /// `kubectl get -o json`, None while it fails (the apiserver may be restarting).
    pub fn get_json(&self, args: &[&str]) -> Option<serde_json::Value> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        let out = self.kubectl_output(&a);
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    pub fn wait_json(
        &self,
        what: &str,
        timeout: Duration,
        mut f: impl FnMut(&serde_json::Value) -> bool,
        args: &[&str],
    ) -> serde_json::Value {
        wait_until(timeout, what, || self.get_json(args).filter(|v| f(v)))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // For debugging a failure by hand: RKT_KADM_HOLD_SECS=N keeps the cluster N seconds.
        if let Some(secs) = std::env::var("RKT_KADM_HOLD_SECS")
            .ok()
            .filter(|_| std::thread::panicking())
            .and_then(|s| s.parse().ok())
        {
            eprintln!(
                "holding the cluster at {} for {secs} s",
                self.root.display()
            );
            std::thread::sleep(Duration::from_secs(secs));
        }
        while let Some(node) = self.nodes.pop() {
            if std::thread::panicking() {
                eprintln!(
                    "--- {} kubelet log ({}) ---\n{}",
                    node.name,
                    node.dir.display(),
                    tail(&node.kubelet_log(), 60)
                );
            }
            let out = hack(&["node-down", node.dir.to_str().unwrap()]);
            if !out.status.success() {
                eprintln!(
                    "node-down {}: {}",
                    node.name,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A condition of a Node or Pod object is "True".
pub fn condition_true(obj: &serde_json::Value, kind: &str) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}
