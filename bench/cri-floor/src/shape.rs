//! `--kubelet-shape`: the floor's pods sent with the configs rkubelet sends for them, built by
//! rkubelet's own `sandbox_config` and `container_config` from a copy of the manifest
//! `bench/cri-floor.py` writes for its static pods. The container options rkubelet's sync
//! gathers (`run_options::generate`, which needs a whole kubelet) are filled in here with the
//! values it gives these pods: no environment (the standalone phase has no services; a node's
//! seven KUBERNETES_* variables would add nothing the runtime works for), the hosts file once
//! the pod has an IP, the termination-log file, the BestEffort OOM score, CFS quota on. Only the
//! names differ (`floor-NNN-floor` rather than `st-NNN-floorbench`, the floor's own UIDs).
//!
//! The plain floor's sandbox and container are minimal (no DNS config, no seccomp, no mounts).
//! rkubelet's are what upstream's `generatePodSandboxConfig` and `generateContainerConfig` make:
//! the sandbox with the node's DNS and RuntimeDefault seccomp for the pause process, each
//! container with the managed /etc/hosts and its termination-log file bind-mounted, the default
//! masked and read-only /proc paths, the BestEffort OOM score. The runtime works more for those,
//! and that work is the runtime's, not the kubelet's: the shaped floor is what the runtime alone
//! takes for rkubelet's exact pods, so the ratio against it is what rkubelet itself adds.
//!
//! What a kubelet also writes for them is written here too, since the runtime needs it: the log
//! directory, the hosts file and the termination-log file (upstream `ensureHostsFile` and
//! `createPodDirs`' termination part). The environment stays empty: these pods declare none, and
//! the standalone phase has no services to add.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kubelet::dns::{self, DnsSettings};
use kubelet::logs::termination;
use kubelet::podutil::ContainerKind;
use kubelet::runtime::container::{self, RunContainerOptions};
use kubelet::runtime::sandbox;
use kubelet::runtime::security::ImageUser;
use kubelet::source::static_pod::{parse_manifest, Origin};
use rkubelet_cri::api;

/// The container command of `bench/cri-floor.py`'s pods (and of the plain floor's).
const COMMAND: &str = "trap 'exit 0' TERM; sleep 3600 & wait";

/// The bench's one-container pod `name` as `bench/cri-floor.py` writes it: the static pods'
/// manifest, and the API phase's pod before it binds it to the node.
pub(crate) fn manifest(name: &str, image: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 5, "containers": [
            {"name": "sleep", "image": image, "imagePullPolicy": "IfNotPresent",
             "command": ["sh", "-c", COMMAND]}]}
    })
}

/// A BestEffort container's OOM score (upstream `besteffortOOMScoreAdj`).
const BESTEFFORT_OOM_SCORE_ADJ: i64 = 1000;

/// What the shaped pods share: the kubelet-like root directory their files go under, and the
/// node's DNS as rkubelet reads it with its defaults (`resolvConf: /etc/resolv.conf`, no
/// `clusterDNS`: ClusterFirst falls back to the host's, as upstream; no `clusterDomain`).
pub struct Shape {
    root_dir: PathBuf,
    dns: DnsSettings,
}

impl Shape {
    pub fn new(root_dir: &Path) -> Result<Shape> {
        let host =
            dns::load_host(Path::new("/etc/resolv.conf")).context("read /etc/resolv.conf")?;
        Ok(Shape {
            root_dir: root_dir.to_path_buf(),
            dns: DnsSettings {
                host,
                cluster_dns: Vec::new(),
                cluster_domain: String::new(),
                no_resolv_conf: false,
            },
        })
    }

    /// Pod `i` as rkubelet's static source would have it from the bench's manifest (defaults
    /// applied: restartPolicy, dnsPolicy, terminationMessagePath, ...), with the floor's UID.
    pub fn pod(&self, name: &str, uid: &str, image: &str) -> Result<Pod> {
        let mut manifest = manifest(name, image);
        manifest["metadata"]["namespace"] = "default".into();
        manifest["metadata"]["uid"] = uid.into();
        let mut pods = parse_manifest(&manifest.to_string(), Origin::File("floor"), "floor")
            .map_err(|e| anyhow::anyhow!("the floor's own manifest: {e}"))?;
        pods.pop().context("the floor's manifest gave no pod")
    }

    /// rkubelet's sandbox config for `pod` (its cgroup parent is the caller's).
    pub fn sandbox_config(&self, pod: &Pod, logs_root: &Path) -> Result<api::PodSandboxConfig> {
        sandbox::sandbox_config(pod, 0, logs_root, &self.dns).map_err(|e| anyhow::anyhow!(e))
    }

    /// rkubelet's config for the pod's one container, with the files its mounts need written
    /// first (the hosts file for `ip`, a fresh termination-log file).
    pub async fn container_config(
        &self,
        pod: &Pod,
        image_ref: &str,
        image: Option<&api::Image>,
        ip: &str,
    ) -> Result<api::ContainerConfig> {
        let c = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .context("the floor's pod has no container")?;
        let pod_dir = self
            .root_dir
            .join("pods")
            .join(pod.metadata.uid.as_deref().unwrap_or_default());
        tokio::fs::create_dir_all(&pod_dir)
            .await
            .with_context(|| format!("create {}", pod_dir.display()))?;
        // As rkubelet: the managed hosts file once the pod has an IP.
        let mut mounts = Vec::new();
        if !ip.is_empty() {
            let ips = [ip.to_string()];
            mounts.push(
                kubelet::hosts::make_hosts_mount(&pod_dir, pod, &ips, &self.dns.cluster_domain)
                    .await
                    .with_context(|| format!("write the hosts file in {}", pod_dir.display()))?,
            );
        }
        let opts = RunContainerOptions {
            envs: Vec::new(),
            mounts,
            devices: Vec::new(),
            image_user: ImageUser::from_image(image),
            seccomp_root: self.root_dir.join("seccomp"),
            seccomp_default: false,
            target_container_id: None,
            oom_score_adj: BESTEFFORT_OOM_SCORE_ADJ,
            cfs_quota: true,
            cfs_period_us: 100_000,
            annotations: Vec::new(),
            cpuset_cpus: String::new(),
        };
        let mut config =
            container::container_config(pod, c, image_ref, 0, ContainerKind::Regular, &opts)
                .map_err(|e| anyhow::anyhow!("container config: {e}"))?;
        // As rkubelet's runtime manager adds it just before CreateContainer.
        let file = termination::create_file(&self.root_dir, pod, c)
            .await
            .context("create the termination-log file")?;
        config
            .mounts
            .extend(container::termination_message_mount(c, &file));
        Ok(config)
    }
}
