//! The runtime's floor (issue 20): N pods started straight on the CRI with no kubelet at all, so
//! `bench/cri-floor.sh` can print how much time rkubelet adds over what containerd + CNI alone take.
//!
//! Each pod gets its own task, all spawned at once, as rkubelet's pod workers run one per pod with no
//! cap; each makes the CRI calls rkubelet makes for a one-container pod with `IfNotPresent`, in the
//! same order: RunPodSandbox (containerd runs CNI inside it), PodSandboxStatus (the IP),
//! ImageStatus (pull only when missing), CreateContainer, StartContainer. A pod counts as running
//! when StartContainer returns. Then every pod is torn down the way rkubelet does it (StopContainer
//! with the grace period, StopPodSandbox, RemovePodSandbox) and that is timed too.
//!
//! With `--pod-cgroups ROOT` the pods get the shape a kubelet gives them (upstream `SyncPod`'s
//! cgroup step): each pod's own cgroup `ROOT/kubepods/besteffort/pod<uid>` (cpu shares 2, as a
//! BestEffort pod's) made before its sandbox and given to the runtime as the sandbox's
//! `cgroup_parent`, and removed once the pod is stopped, before RemovePodSandbox (as a kubelet
//! does). That separates what the pod cgroup costs the runtime and the kernel (runc then nests
//! every container of the pod one level deeper) from what the kubelet itself adds. Without it
//! the runtime puts each sandbox at its own default.
//!
//! With `--api KUBECONFIG` (and the shape) the floor also makes the API requests a kubelet node
//! makes for these pods, as the node whose credentials KUBECONFIG holds (`--node`): see `node_api`.
//! With `--user KUBECONFIG` too the pods are API pods that a user creates and deletes with those
//! credentials, one request after another ("floor+user"): each pod's start waits for its POST,
//! and its teardown for its DELETE; its start is timed from its POST, as the API phase times
//! each pod from its own.
//!
//! ```text
//! cri-floor --endpoint unix:///run/containerd.sock --pods 30 --logs-dir /tmp/x/pod-logs \
//!           [--image rkubelet.local/busybox:1.35] [--grace 5] [--json results.jsonl] [--keep]
//!           [--pod-cgroups /floor-root [--kubelet-shape ROOT_DIR
//!            [--api KUBECONFIG --node NAME [--user KUBECONFIG]]]]
//! ```
//!
//! Prints figures; asserts nothing. Exits non-zero if a pod fails to start (the figures would lie).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use cgroups::{AnyManager, CgroupManager, CgroupName, ResourceConfig};
use rkubelet_cri::{api, CriClient};

mod node_api;
mod shape;
use node_api::{ApiLoad, Write};
use shape::Shape;

/// A BestEffort pod's cpu shares (upstream `MinShares`), for its QoS tier and its pod cgroup.
const MIN_SHARES: u64 = 2;

struct Args {
    endpoint: String,
    pods: usize,
    image: String,
    logs_dir: PathBuf,
    grace: i64,
    json: Option<PathBuf>,
    keep: bool,
    pod_cgroups: Option<String>,
    kubelet_shape: Option<PathBuf>,
    api: Option<PathBuf>,
    node: String,
    user: Option<PathBuf>,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        endpoint: String::new(),
        pods: 10,
        image: "rkubelet.local/busybox:1.35".into(),
        logs_dir: PathBuf::new(),
        grace: 5,
        json: None,
        keep: false,
        pod_cgroups: None,
        kubelet_shape: None,
        api: None,
        node: "floorbench".into(),
        user: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--endpoint" => a.endpoint = value()?,
            "--pods" => a.pods = value()?.parse().context("--pods")?,
            "--image" => a.image = value()?,
            "--logs-dir" => a.logs_dir = value()?.into(),
            "--grace" => a.grace = value()?.parse().context("--grace")?,
            "--json" => a.json = Some(value()?.into()),
            "--keep" => a.keep = true,
            "--pod-cgroups" => a.pod_cgroups = Some(value()?),
            "--kubelet-shape" => a.kubelet_shape = Some(value()?.into()),
            "--api" => a.api = Some(value()?.into()),
            "--node" => a.node = value()?,
            "--user" => a.user = Some(value()?.into()),
            other => bail!("unknown flag {other:?}"),
        }
    }
    if a.endpoint.is_empty() || a.logs_dir.as_os_str().is_empty() || a.pods == 0 {
        bail!("usage: cri-floor --endpoint unix:///path --pods N --logs-dir DIR [--image REF] [--grace S] [--json FILE] [--keep] [--pod-cgroups ROOT [--kubelet-shape ROOT_DIR [--api KUBECONFIG --node NAME [--user KUBECONFIG]]]]");
    }
    if a.kubelet_shape.is_some() && a.pod_cgroups.is_none() {
        bail!("--kubelet-shape needs --pod-cgroups: rkubelet's pods have their pod cgroups");
    }
    if a.api.is_some() && a.kubelet_shape.is_none() {
        bail!("--api needs --kubelet-shape: the node's requests are for rkubelet's pods");
    }
    if a.user.is_some() && a.api.is_none() {
        bail!("--user needs --api: the user's pods are the node's");
    }
    Ok(a)
}

/// What one pod's start cost, stage by stage.
#[derive(Default, Clone)]
struct Timing {
    /// Making the pod's cgroup (zero without `--pod-cgroups`).
    cgroup: Duration,
    sandbox: Duration,
    image: Duration,
    create: Duration,
    start: Duration,
    /// From the moment all pods were released to StartContainer's return.
    running: Duration,
    sandbox_id: String,
    container_id: String,
    /// With `--api`: the pod, and its mirror's writes.
    api: Option<(
        Arc<k8s_openapi::api::core::v1::Pod>,
        tokio::sync::mpsc::UnboundedSender<Write>,
    )>,
}

/// Opens when the user's request for one pod is in (`--user`): when it was sent, and the pod's
/// UID. Closed unopened when the request failed.
type Gate = tokio::sync::oneshot::Receiver<(Instant, String)>;

/// The user's requests (`--user`), one after another from one client as `bench/cri-floor.py`'s
/// API phase sends them, in the order of `pods`: POSTs (`create`) or DELETEs. Each pod's gate
/// opens when its request is in.
fn user_requests(api: &ApiLoad, pods: &[usize], image: &str, create: bool) -> Vec<Gate> {
    let (txs, rxs): (Vec<_>, Vec<_>) = pods.iter().map(|_| tokio::sync::oneshot::channel()).unzip();
    let (api, image, pods) = (api.clone(), image.to_string(), pods.to_vec());
    tokio::spawn(async move {
        for (i, tx) in pods.into_iter().zip(txs) {
            let name = format!("floor-{i:03}");
            let sent = Instant::now();
            let r = match create {
                true => api.user_create(&name, &image).await,
                false => api.user_delete(&name).await.map(|()| String::new()),
            };
            match r {
                Ok(uid) => {
                    let _ = tx.send((sent, uid));
                }
                Err(e) => eprintln!("floor+user: {e:#}"),
            }
        }
    });
    rxs
}

/// The cgroups of `--pod-cgroups`: the manager, and the QoS tier pods go under.
#[derive(Clone)]
struct PodCgroups {
    mgr: Arc<AnyManager>,
    tier: CgroupName,
}

impl PodCgroups {
    /// Detects the host's cgroups (cgroupfs driver, as the benchmarks run rkubelet) and makes
    /// `ROOT/kubepods/besteffort`.
    fn new(root: &str) -> Result<PodCgroups> {
        let mgr = cgroups::detect(cgroups::Driver::Cgroupfs).context("detect cgroups")?;
        let mut tier = CgroupName::root();
        for part in root.split('/').filter(|p| !p.is_empty()) {
            tier = tier.child(part);
        }
        let kubepods = tier.child("kubepods");
        mgr.create(&kubepods, &ResourceConfig::default())
            .with_context(|| format!("create {}", kubepods.to_cgroupfs()))?;
        let tier = kubepods.child("besteffort");
        mgr.create(&tier, &shares())
            .with_context(|| format!("create {}", tier.to_cgroupfs()))?;
        Ok(PodCgroups {
            mgr: Arc::new(mgr),
            tier,
        })
    }

    fn pod(&self, uid: &str) -> CgroupName {
        self.tier.child(format!("pod{uid}"))
    }

    async fn create(&self, uid: &str) -> Result<String> {
        let (mgr, name) = (self.mgr.clone(), self.pod(uid));
        tokio::task::spawn_blocking(move || {
            mgr.create(&name, &shares())
                .with_context(|| format!("create {}", name.to_cgroupfs()))?;
            Ok(mgr.name(&name))
        })
        .await?
    }

    async fn destroy(&self, uid: &str) -> Result<()> {
        let (mgr, name) = (self.mgr.clone(), self.pod(uid));
        tokio::task::spawn_blocking(move || {
            mgr.destroy(&name)
                .with_context(|| format!("remove {}", name.to_cgroupfs()))
        })
        .await?
    }
}

fn shares() -> ResourceConfig {
    ResourceConfig {
        cpu_shares: Some(MIN_SHARES),
        ..ResourceConfig::default()
    }
}

fn pod_uid(i: usize) -> String {
    format!("00000000-0000-4000-8000-{i:012}")
}

fn sandbox_config(name: &str, uid: &str, logs_dir: &Path) -> api::PodSandboxConfig {
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "floor".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: logs_dir.to_string_lossy().into_owned(),
        labels: HashMap::from([
            ("io.kubernetes.pod.name".into(), name.into()),
            ("io.kubernetes.pod.namespace".into(), "floor".into()),
            ("io.kubernetes.pod.uid".into(), uid.into()),
        ]),
        linux: Some(api::LinuxPodSandboxConfig {
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(api::NamespaceOption::default()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The plain floor's container: the command and the BestEffort resources, nothing more.
fn plain_container(image_ref: String, image: String) -> api::ContainerConfig {
    api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: "sleep".into(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: image_ref,
            user_specified_image: image,
            ..Default::default()
        }),
        command: vec!["sh".into(), "-c".into()],
        args: vec!["trap 'exit 0' TERM; sleep 3600 & wait".into()],
        log_path: "sleep/0.log".into(),
        linux: Some(api::LinuxContainerConfig {
            resources: Some(api::LinuxContainerResources {
                cpu_shares: 2,
                oom_score_adj: 1000,
                ..Default::default()
            }),
            security_context: Some(api::LinuxContainerSecurityContext::default()),
        }),
        ..Default::default()
    }
}

/// What makes the floor's pods more like a kubelet's (each `None` unless its flag is given).
#[derive(Clone)]
struct Kubelike {
    pod_cgroups: Option<PodCgroups>,
    shape: Option<Arc<Shape>>,
    api: Option<ApiLoad>,
}

async fn start_pod(
    cri: CriClient,
    i: usize,
    image: String,
    logs_root: PathBuf,
    like: Kubelike,
    mut t0: Instant,
    posted: Option<Gate>,
) -> Result<Timing> {
    let Kubelike {
        pod_cgroups,
        shape,
        api,
    } = like;
    // A user's pod: nothing before its POST is in; its start is timed from its POST.
    let created = match posted {
        Some(gate) => {
            let (sent, uid) = gate.await.context("the user's POST failed")?;
            t0 = sent;
            Some(uid)
        }
        None => None,
    };
    let name = format!("floor-{i:03}");
    let uid = pod_uid(i);
    // Shaped: the pod and its sandbox config as rkubelet makes them (`shape`).
    let (shaped, mut config) = match shape {
        Some(sh) => {
            let pod = sh.pod(&name, &uid, &image)?;
            let config = sh.sandbox_config(&pod, &logs_root)?;
            (Some((sh, pod)), config)
        }
        None => {
            let dir = logs_root.join(format!("floor_{name}_{uid}"));
            (None, sandbox_config(&name, &uid, &dir))
        }
    };
    let logs_dir = PathBuf::from(&config.log_directory);
    let mut t = Timing::default();
    // The node's requests, each when a kubelet makes it (see `node_api`).
    let node = api.zip(shaped.as_ref()).map(|(api, (_, pod))| {
        let mut object = pod.clone();
        if let Some(uid) = &created {
            // The events are about the user's object, as rkubelet's are about an API pod.
            object.metadata.name = Some(name.clone());
            object.metadata.uid = Some(uid.clone());
        }
        let writes = api.writes(pod, created.map(|uid| (name.clone(), uid)));
        (api, Arc::new(object), writes)
    });

    if let Some(cg) = &pod_cgroups {
        let s = Instant::now();
        let parent = cg.create(&uid).await?;
        if let Some(linux) = config.linux.as_mut() {
            linux.cgroup_parent = parent;
        }
        t.cgroup = s.elapsed();
    }

    let s = Instant::now();
    tokio::fs::create_dir_all(&logs_dir).await?;
    t.sandbox_id = cri
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await?
        .pod_sandbox_id;
    let ip = cri
        .pod_sandbox_status(api::PodSandboxStatusRequest {
            pod_sandbox_id: t.sandbox_id.clone(),
            verbose: false,
        })
        .await?
        .status
        .and_then(|s| s.network)
        .map(|n| n.ip)
        .unwrap_or_default();
    t.sandbox = s.elapsed();
    if let Some((api, _, writes)) = &node {
        let waiting = serde_json::json!({"waiting": {"reason": "ContainerCreating"}});
        let st = node_api::status(
            "Pending",
            &ip,
            node_api::container(waiting, &image, "", false),
            false,
        );
        api.write(writes, Write::Status(Box::new(st)));
    }

    let s = Instant::now();
    let spec = api::ImageSpec {
        image: image.clone(),
        ..Default::default()
    };
    let present = cri
        .image_status(api::ImageStatusRequest {
            image: Some(spec.clone()),
            verbose: false,
        })
        .await?
        .image;
    let image_ref = match present.as_ref().map(|i| i.id.clone()) {
        Some(id) => id,
        None => {
            cri.pull_image(api::PullImageRequest {
                image: Some(spec),
                auth: None,
                sandbox_config: Some(config.clone()),
            })
            .await?
            .image_ref
        }
    };
    t.image = s.elapsed();
    if let Some((api, pod, _)) = &node {
        let msg = format!("Container image \"{image}\" already present on machine");
        api.event(pod, true, "Pulled", msg);
    }

    let s = Instant::now();
    tokio::fs::create_dir_all(logs_dir.join("sleep")).await?;
    let container = match &shaped {
        Some((sh, pod)) => {
            sh.container_config(pod, &image_ref, present.as_ref(), &ip)
                .await?
        }
        None => plain_container(image_ref, image.clone()),
    };
    t.container_id = cri
        .create_container(api::CreateContainerRequest {
            pod_sandbox_id: t.sandbox_id.clone(),
            config: Some(container),
            sandbox_config: Some(config),
        })
        .await?
        .container_id;
    t.create = s.elapsed();
    if let Some((api, pod, _)) = &node {
        api.event(pod, true, "Created", "Created container sleep".into());
    }

    let s = Instant::now();
    cri.start_container(api::StartContainerRequest {
        container_id: t.container_id.clone(),
    })
    .await?;
    t.start = s.elapsed();
    t.running = t0.elapsed();
    if let Some((api, pod, writes)) = node {
        api.event(&pod, true, "Started", "Started container sleep".into());
        let running = serde_json::json!({"running": {"startedAt": k8s_openapi::jiff::Timestamp::now().to_string()}});
        let c = node_api::container(running, &image, &t.container_id, true);
        api.write(
            &writes,
            Write::Status(Box::new(node_api::status("Running", &ip, c, true))),
        );
        t.api = Some((pod, writes));
    }
    Ok(t)
}

async fn stop_pod(
    cri: CriClient,
    i: usize,
    t: Timing,
    grace: i64,
    pod_cgroups: Option<PodCgroups>,
    api: Option<ApiLoad>,
    deleted: Option<Gate>,
) -> Result<()> {
    // A user's pod: nothing before its DELETE is in.
    if let Some(gate) = deleted {
        gate.await.context("the user's DELETE failed")?;
    }
    let node = api.zip(t.api.clone());
    if let Some((api, (pod, _))) = &node {
        api.event(pod, true, "Killing", "Stopping container sleep".into());
    }
    cri.stop_container(api::StopContainerRequest {
        container_id: t.container_id.clone(),
        timeout: grace,
    })
    .await?;
    cri.stop_pod_sandbox(api::StopPodSandboxRequest {
        pod_sandbox_id: t.sandbox_id.clone(),
    })
    .await?;
    if let Some((api, (_, writes))) = &node {
        let exited = serde_json::json!({"terminated": {"exitCode": 0, "reason": "Completed"}});
        let c = node_api::container(exited, "", &t.container_id, false);
        api.write(
            writes,
            Write::Status(Box::new(node_api::status("Succeeded", "", c, false))),
        );
    }
    // A kubelet's order (upstream `SyncTerminatedPod`): the pod cgroup once nothing runs, then
    // the object's DELETE, then the runtime's removal.
    if let Some(cg) = pod_cgroups {
        cg.destroy(&pod_uid(i)).await?;
    }
    if let Some((api, (_, writes))) = &node {
        api.write(writes, Write::Delete);
    }
    cri.remove_pod_sandbox(api::RemovePodSandboxRequest {
        pod_sandbox_id: t.sandbox_id,
    })
    .await?;
    Ok(())
}

/// CPU seconds so far: the machine's busy time (user, nice, system, irq, softirq of /proc/stat)
/// and containerd's with its shims (the processes named so), as `bench/cpu_use.py` reads them
/// for the kubelet's phases, so the floor's line compares with theirs.
#[derive(Clone, Default)]
struct CpuReading {
    busy: f64,
    /// Per pid: a process that exits within the window (another N's containerd still shutting
    /// down, as once made the runtime's share negative) must not count against the others.
    runtime: HashMap<u32, f64>,
    /// The same for kube-apiserver and etcd (a node's requests, `--api`).
    api: HashMap<u32, f64>,
}

impl CpuReading {
    /// The runtime's CPU seconds from `before` to `self`: the processes alive now, each from
    /// its reading then (zero if it started since).
    fn runtime_since(&self, before: &CpuReading) -> f64 {
        since(&self.runtime, &before.runtime)
    }

    /// kube-apiserver's and etcd's CPU seconds from `before` to `self`, as [`Self::runtime_since`].
    fn api_since(&self, before: &CpuReading) -> f64 {
        since(&self.api, &before.api)
    }
}

fn since(now: &HashMap<u32, f64>, before: &HashMap<u32, f64>) -> f64 {
    now.iter()
        .map(|(pid, secs)| secs - before.get(pid).copied().unwrap_or(0.0))
        .sum()
}

fn clock_ticks() -> f64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => t as f64,
        _ => 100.0,
    }
}

fn cpu_reading() -> CpuReading {
    let tick = clock_ticks();
    let mut out = CpuReading::default();
    if let Ok(stat) = std::fs::read_to_string("/proc/stat") {
        let f: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        out.busy = [0, 1, 2, 5, 6]
            .iter()
            .filter_map(|&i| f.get(i))
            .sum::<u64>() as f64
            / tick;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(s) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (s.find('('), s.rfind(')')) else {
            continue;
        };
        let comm = &s[open + 1..close];
        let runtime = comm == "containerd" || comm.starts_with("containerd-shim");
        if !runtime && comm != "kube-apiserver" && comm != "etcd" {
            continue;
        }
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let f: Vec<&str> = s[close + 1..].split_whitespace().collect();
        let ticks: u64 = [11, 12]
            .iter()
            .filter_map(|&i| f.get(i).and_then(|x| x.parse::<u64>().ok()))
            .sum();
        let to = if runtime {
            &mut out.runtime
        } else {
            &mut out.api
        };
        to.insert(pid, ticks as f64 / tick);
    }
    out
}

/// Nearest-rank percentile of durations in seconds, as the shell benchmarks compute it.
fn pct(xs: &[f64], q: usize) -> f64 {
    let mut s = xs.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = (s.len() * q).div_ceil(100).max(1);
    s[rank.min(s.len()) - 1]
}

#[tokio::main]
async fn main() -> Result<()> {
    let a = parse_args()?;
    let cri = CriClient::new(&a.endpoint, rkubelet_cri::DEFAULT_TIMEOUT)?;
    cri.version(api::VersionRequest::default())
        .await
        .context("runtime not answering")?;

    let pod_cgroups = a.pod_cgroups.as_deref().map(PodCgroups::new).transpose()?;
    let shape = a
        .kubelet_shape
        .as_deref()
        .map(Shape::new)
        .transpose()?
        .map(Arc::new);

    let api = match &a.api {
        Some(kc) => Some(ApiLoad::new(kc, &a.node, a.user.as_deref()).await?),
        None => None,
    };
    let user = api.as_ref().filter(|api| api.has_user());

    let cpu0 = cpu_reading();
    let t0 = Instant::now();
    let all_pods: Vec<usize> = (0..a.pods).collect();
    let mut posted = user
        .map(|api| user_requests(api, &all_pods, &a.image, true))
        .unwrap_or_default()
        .into_iter();
    let tasks: Vec<_> = (0..a.pods)
        .map(|i| {
            tokio::spawn(start_pod(
                cri.clone(),
                i,
                a.image.clone(),
                a.logs_dir.clone(),
                Kubelike {
                    pod_cgroups: pod_cgroups.clone(),
                    shape: shape.clone(),
                    api: api.clone(),
                },
                t0,
                posted.next(),
            ))
        })
        .collect();
    let mut timings = Vec::with_capacity(a.pods);
    let mut failed = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await? {
            Ok(t) => timings.push((i, t)),
            Err(e) => {
                failed += 1;
                eprintln!("floor-{i:03}: {e:#}");
            }
        }
    }
    let all = t0.elapsed().as_secs_f64();
    let cpu1 = cpu_reading();
    let (busy, runtime) = (cpu1.busy - cpu0.busy, cpu1.runtime_since(&cpu0));
    let api_cpu = cpu1.api_since(&cpu0);
    let secs = |f: fn(&Timing) -> Duration| -> Vec<f64> {
        timings.iter().map(|(_, t)| f(t).as_secs_f64()).collect()
    };
    let run = secs(|t| t.running);
    // The requests still in flight finish before the teardown, as a node's would have in the
    // seconds the kubelet phases wait between start and delete.
    let start_requests = match &api {
        Some(api) => {
            api.settle().await;
            Some(api.requests.swap(0, std::sync::atomic::Ordering::Relaxed))
        }
        None => None,
    };

    let mut gone = None;
    // The machine's busy CPU and containerd's over the teardown (a shim that exits in it is
    // missed from containerd's share and counts in the rest, as in cri-floor.py's phases).
    let mut teardown_cpu = None;
    if !a.keep {
        let c0 = cpu_reading();
        let t1 = Instant::now();
        let started: Vec<usize> = timings.iter().map(|(i, _)| *i).collect();
        let mut deleted = user
            .map(|api| user_requests(api, &started, &a.image, false))
            .unwrap_or_default()
            .into_iter();
        let stops: Vec<_> = timings
            .iter()
            .map(|(i, t)| {
                tokio::spawn(stop_pod(
                    cri.clone(),
                    *i,
                    t.clone(),
                    a.grace,
                    pod_cgroups.clone(),
                    api.clone(),
                    deleted.next(),
                ))
            })
            .collect();
        for s in stops {
            if let Err(e) = s.await? {
                eprintln!("teardown: {e:#}");
            }
        }
        gone = Some(t1.elapsed().as_secs_f64());
        let c1 = cpu_reading();
        if let Some(api) = &api {
            // Each mirror's task ends with its DELETE.
            api.finish().await;
        }
        teardown_cpu = Some((c1.busy - c0.busy, c1.runtime_since(&c0), c1.api_since(&c0)));
    }

    if run.is_empty() {
        bail!("no pod started");
    }
    let (p50, p99) = (pct(&run, 50), pct(&run, 99));
    // The phase's kind in the JSON (cri-floor.py's summary groups by it) and its title.
    let (kind, how) = match (&pod_cgroups, &shape) {
        (Some(_), Some(_)) if user.is_some() => (
            "floor+user",
            ", each in its pod cgroup, with rkubelet's configs, as API pods a user creates and deletes, with a node's API requests",
        ),
        (Some(_), Some(_)) if api.is_some() => (
            "floor+api",
            ", each in its pod cgroup, with rkubelet's configs and a node's API requests",
        ),
        (Some(_), Some(_)) => (
            "floor+shape",
            ", each in its pod cgroup, with rkubelet's configs",
        ),
        (Some(_), None) => ("floor+cg", ", each in its pod cgroup"),
        _ => ("floor", ""),
    };
    println!(
        "=== floor: N = {} pods straight on the CRI{how} ===",
        a.pods
    );
    println!("  start -> running   p50 {p50:6.2} s   p99 {p99:6.2} s   all {all:6.2} s");
    // A shim that started in the window counts from zero; one that exited in it (none of the
    // floor's do before teardown) is missed.
    println!(
        "  CPU s, start -> all running: machine busy {busy:.2}: containerd+shims {runtime:.2}, apiserver+etcd {api_cpu:.2}, rest (runc, CNI, this floor, ...) {:.2}",
        busy - runtime - api_cpu
    );
    let mut stages = vec![("sandbox+CNI", secs(|t| t.sandbox))];
    if pod_cgroups.is_some() {
        stages.insert(0, ("pod cgroup", secs(|t| t.cgroup)));
    }
    for (stage, xs) in stages.into_iter().chain([
        ("image status", secs(|t| t.image)),
        ("create", secs(|t| t.create)),
        ("start", secs(|t| t.start)),
    ]) {
        // The mean too: rkubelet's timeline line in the same log gives means per stage.
        println!(
            "  {stage:13}      p50 {:6.3} s   p99 {:6.3} s   mean {:6.3} s",
            pct(&xs, 50),
            pct(&xs, 99),
            xs.iter().sum::<f64>() / xs.len().max(1) as f64
        );
    }
    if let Some(g) = gone {
        println!(
            "  teardown (stop with grace {} s, remove) all {g:6.2} s",
            a.grace
        );
    }
    if let Some(api) = &api {
        println!(
            "  API requests: {} to start, {} to tear down, {} failed (rkubelet's default limits: {} QPS, burst {})",
            start_requests.unwrap_or(0),
            api.requests.load(std::sync::atomic::Ordering::Relaxed),
            api.failed.load(std::sync::atomic::Ordering::Relaxed),
            node_api::QPS,
            node_api::BURST
        );
        if api.has_user() {
            println!(
                "  the user's requests: {} (POST and DELETE, one at a time)",
                api.user_requests.load(std::sync::atomic::Ordering::Relaxed)
            );
        }
    }
    if let Some((busy, runtime, api_cpu)) = teardown_cpu {
        println!(
            "  CPU s, teardown: machine busy {busy:.2}: containerd+shims {runtime:.2}, apiserver+etcd {api_cpu:.2}, rest (runc, CNI, exited shims, this floor, ...) {:.2}",
            busy - runtime - api_cpu
        );
    }
    let d_busy = teardown_cpu.map(|c| c.0);
    let d_runtime = teardown_cpu.map(|c| c.1);
    let d_api = teardown_cpu.map(|c| c.2);
    if let Some(path) = &a.json {
        use std::io::Write;
        let line = serde_json::json!({
            "n": a.pods, "p50": p50, "p99": p99, "all": all, "gone": gone, "failed": failed,
            "cgroups": pod_cgroups.is_some(), "kind": kind, "busy": busy, "cpu_runtime": runtime,
            "cpu_api": api_cpu, "cpu_rest": busy - runtime - api_cpu,
            "d_busy": d_busy, "d_cpu_runtime": d_runtime, "d_cpu_api": d_api,
            "d_cpu_rest": teardown_cpu.map(|(b, r, a)| b - r - a),
        });
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("open {}", path.display()))?;
        writeln!(f, "{line}")?;
    }
    if failed > 0 {
        bail!("{failed} of {} pods failed to start", a.pods);
    }
    Ok(())
}
