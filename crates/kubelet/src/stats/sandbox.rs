//! Pod-level figures the containers' stats lack: the pod's network (its sandbox's network
//! namespace) and its process count. The runtime's `ListPodSandboxStats` is asked first; where it
//! leaves them out, they are read from /proc through the processes of the pod's cgroup or, for a
//! pod without one, the sandbox's pid, which the runtime gives in `PodSandboxStatus`'s verbose
//! info (containerd: `info.pid`).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rkubelet_cri::{api, CriClient};

use super::ephemeral::PodKey;
use super::net::{self, Interface};
use super::StatsError;
use crate::runtime::labels;

/// A pod sandbox's network counters at one time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodNetwork {
    pub timestamp_ns: i64,
    pub interfaces: Vec<Interface>,
    /// The name of the headline interface (eth0 in a pod).
    pub default: Option<String>,
}

/// One ready pod sandbox.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SandboxUsage {
    pub id: String,
    pub pod: PodKey,
    pub created_ns: i64,
    pub network: Option<PodNetwork>,
    pub process_count: Option<u64>,
}

fn cri_err(what: &'static str) -> impl FnOnce(rkubelet_cri::CriError) -> StatsError {
    move |source| StatsError::Cri { what, source }
}

fn from_cri_network(n: &api::NetworkUsage) -> PodNetwork {
    let conv = |i: &api::NetworkInterfaceUsage| Interface {
        name: i.name.clone(),
        rx_bytes: i.rx_bytes.as_ref().map_or(0, |v| v.value),
        rx_errors: i.rx_errors.as_ref().map_or(0, |v| v.value),
        tx_bytes: i.tx_bytes.as_ref().map_or(0, |v| v.value),
        tx_errors: i.tx_errors.as_ref().map_or(0, |v| v.value),
    };
    let mut interfaces: Vec<Interface> = n.interfaces.iter().map(conv).collect();
    let default = n.default_interface.as_ref().map(conv);
    if let Some(d) = &default {
        if !interfaces.iter().any(|i| i.name == d.name) {
            interfaces.insert(0, d.clone());
        }
    }
    PodNetwork {
        timestamp_ns: n.timestamp,
        interfaces,
        default: default.map(|d| d.name),
    }
}

/// The pid containerd reports for a sandbox in `PodSandboxStatus`'s verbose `info`.
pub fn sandbox_pid(info: &HashMap<String, String>) -> Option<u32> {
    let v: serde_json::Value = serde_json::from_str(info.get("info")?).ok()?;
    v.get("pid")?
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .filter(|p| *p > 0)
}

/// The inode of a process's network namespace.
fn netns_inode(proc_dir: &Path) -> Option<u64> {
    std::fs::metadata(proc_dir.join("ns/net"))
        .ok()
        .map(|m| m.ino())
}

/// How many processes each network namespace holds, from one pass over /proc. All containers of
/// a pod share the sandbox's namespace, so this counts the pod's processes (the pause process
/// included, as upstream's pod cgroup count does).
fn processes_by_netns() -> HashMap<u64, u64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        if !e
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        if let Some(ino) = netns_inode(&e.path()) {
            *out.entry(ino).or_default() += 1;
        }
    }
    out
}

/// Whether a sandbox's missing figures are worth a verbose `PodSandboxStatus` and a read of
/// /proc. `answered`: how many sandboxes `ListPodSandboxStats` gave (None: it failed or is not
/// implemented); `listed`: whether this sandbox was among them.
///
/// A sandbox the runtime's stats answer left out while giving others stopped after
/// `ListPodSandbox` listed it ready (the runtime reports stats for every ready sandbox): its
/// process is gone, so /proc has nothing for it and asking the runtime for its pid is a wasted
/// call, one per stopping pod on every stats pass while pods are being deleted. An empty answer
/// is not taken as that: a runtime that implements the call without filling it is read from
/// /proc, as before.
fn needs_proc_fallback(
    answered: Option<usize>,
    listed: bool,
    network: bool,
    processes: bool,
) -> bool {
    if network && processes {
        return false;
    }
    listed || !matches!(answered, Some(n) if n > 0)
}

/// The pid of a sandbox from the runtime's verbose `PodSandboxStatus` (one CRI call).
async fn verbose_pid(cri: &CriClient, id: &str) -> Option<u32> {
    let status = cri
        .pod_sandbox_status(api::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: true,
        })
        .await;
    match status {
        Ok(s) => sandbox_pid(&s.info),
        Err(e) => {
            tracing::debug!(error = %e, sandbox = %id, "no sandbox status");
            None
        }
    }
}

/// Which figures a sandbox still lacks after the runtime's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Want {
    network: bool,
    count: bool,
}

/// Reads the processes in a cgroup (a cgroupfs path) and below it. Blocking.
pub type ReadPids = std::sync::Arc<dyn Fn(&str) -> Vec<i32> + Send + Sync>;

/// The pod cgroups the fallback reads processes from.
#[derive(Clone)]
pub struct PodPids {
    /// Pod UID -> its cgroup (the cgroupfs path); pods without one are not here.
    pub paths: HashMap<String, String>,
    pub read: ReadPids,
}

impl PodPids {
    /// No pod cgroups (`cgroupsPerQOS` off).
    pub fn none() -> Self {
        PodPids {
            paths: HashMap::new(),
            read: std::sync::Arc::new(|_| Vec::new()),
        }
    }
}

/// Where a sandbox's processes are to be read: its pod's cgroup (a cgroupfs path), or the pid
/// the runtime gave for a pod without one.
enum Source {
    Cgroup(String),
    Sandbox(Option<u32>),
}

/// Where the fallback finds a pod's processes.
#[derive(Debug, Clone, PartialEq)]
enum PodProcesses {
    /// Every process in the pod's cgroup and below it (the containers' cgroups): the pause
    /// process and the containers', all in the sandbox's network namespace.
    Cgroup(Vec<i32>),
    /// The sandbox's pid from the runtime (no pod cgroups: `cgroupsPerQOS` off).
    Sandbox(Option<u32>),
}

impl PodProcesses {
    /// The pod's network counters and process count from /proc. `by_netns` is the count of
    /// processes per network namespace, made on first need and shared by the pass.
    ///
    /// From the pod cgroup the count is its processes, the pause process included, as
    /// containerd's `ListPodSandboxStats` counts them (the sandbox's task and its running
    /// containers'), so the figure does not jump when that call fails; host-network pods are
    /// counted too. From a bare sandbox pid it is the processes in the sandbox's network
    /// namespace, which a host-network pod shares with the node: no count then. A host-network
    /// pod has no network figures of its own either way (cAdvisor reports none for it). Only
    /// the figures in `want` are read. Blocking.
    fn read(
        &self,
        want: Want,
        host_netns: Option<u64>,
        by_netns: &mut Option<HashMap<u64, u64>>,
    ) -> (Option<PodNetwork>, Option<u64>) {
        let (proc_dir, ns) = match self {
            PodProcesses::Cgroup(pids) => pids
                .iter()
                .map(|p| Path::new("/proc").join(p.to_string()))
                .find_map(|d| netns_inode(&d).map(|ns| (d, Some(ns))))
                .unwrap_or_default(),
            PodProcesses::Sandbox(Some(pid)) => {
                let d = Path::new("/proc").join(pid.to_string());
                let ns = netns_inode(&d);
                (d, ns)
            }
            PodProcesses::Sandbox(None) => return (None, None),
        };
        let own_netns = ns.is_some() && ns != host_netns;
        let network = (want.network && own_netns)
            .then(|| net::read(&proc_dir).ok())
            .flatten()
            .map(|(interfaces, default)| PodNetwork {
                timestamp_ns: super::now_ns(),
                interfaces,
                default,
            });
        let count = match self {
            _ if !want.count => None,
            // A pod cgroup with no process is a sandbox being torn down: no figure.
            PodProcesses::Cgroup(pids) => (!pids.is_empty()).then_some(pids.len() as u64),
            PodProcesses::Sandbox(_) if own_netns => {
                let counts = by_netns.get_or_insert_with(processes_by_netns);
                ns.and_then(|i| counts.get(&i).copied())
            }
            PodProcesses::Sandbox(_) => None,
        };
        (network, count)
    }
}

/// The ready sandboxes with their network and process figures. `pod_pids` reads the processes
/// of the pods that have a cgroup.
///
/// Where the runtime's stats leave figures out, they are read from /proc through the pod
/// cgroup's processes, which costs no CRI call; only a pod without a cgroup costs a verbose
/// `PodSandboxStatus`. This matters when containerd fails `ListPodSandboxStats` as a whole, as
/// it does when one sandbox stops between its ready check and its stats (every stats pass
/// while pods are deleted): at 100 pods deleted that was ~95 serial status calls per failed pass
/// (bench/api-pods.sh with the debug log).
pub async fn sandbox_usage(
    cri: &CriClient,
    pod_pids: PodPids,
) -> Result<Vec<SandboxUsage>, StatsError> {
    let sandboxes = cri
        .list_pod_sandbox(api::ListPodSandboxRequest {
            filter: Some(api::PodSandboxFilter {
                state: Some(api::PodSandboxStateValue {
                    state: api::PodSandboxState::SandboxReady as i32,
                }),
                ..Default::default()
            }),
        })
        .await
        .map_err(cri_err("list pod sandboxes"))?
        .items;
    // Older runtimes do not implement it (None); /proc answers for them. The filter is given,
    // empty, as upstream's cri_stats_provider does: containerd (1.6 to 2.x) reads no filter as
    // "every sandbox in its store", fails the whole call on the first one that is not ready
    // (any stopped pod that is not yet removed, every pod being deleted), and with a filter
    // leaves the not-ready ones out.
    let stats: Option<HashMap<String, api::LinuxPodSandboxStats>> = match cri
        .list_pod_sandbox_stats(api::ListPodSandboxStatsRequest {
            filter: Some(api::PodSandboxStatsFilter::default()),
        })
        .await
    {
        Ok(r) => Some(
            r.stats
                .into_iter()
                .filter_map(|s| Some((s.attributes?.id, s.linux?)))
                .collect(),
        ),
        Err(e) => {
            tracing::debug!(error = %e, "no pod sandbox stats from the runtime");
            None
        }
    };
    let mut out = Vec::new();
    // (index in out, what it lacks, where its processes are found).
    let mut fill: Vec<(usize, Want, Source)> = Vec::new();
    for sb in sandboxes {
        let l = &sb.labels;
        let md = sb.metadata.as_ref();
        let pod = PodKey {
            namespace: l
                .get(labels::POD_NAMESPACE)
                .cloned()
                .or_else(|| md.map(|m| m.namespace.clone()))
                .unwrap_or_default(),
            name: l
                .get(labels::POD_NAME)
                .cloned()
                .or_else(|| md.map(|m| m.name.clone()))
                .unwrap_or_default(),
            uid: l
                .get(labels::POD_UID)
                .cloned()
                .or_else(|| md.map(|m| m.uid.clone()))
                .unwrap_or_default(),
        };
        let linux = stats.as_ref().and_then(|m| m.get(&sb.id));
        let network = linux
            .and_then(|s| s.network.as_ref())
            .filter(|n| n.default_interface.is_some() || !n.interfaces.is_empty())
            .map(from_cri_network);
        let process_count = linux
            .and_then(|s| s.process.as_ref())
            .and_then(|p| p.process_count.as_ref())
            .map(|v| v.value);
        let answered = stats.as_ref().map(HashMap::len);
        if needs_proc_fallback(
            answered,
            linux.is_some(),
            network.is_some(),
            process_count.is_some(),
        ) {
            let want = Want {
                network: network.is_none(),
                count: process_count.is_none(),
            };
            let source = match pod_pids.paths.get(&pod.uid) {
                Some(path) => Source::Cgroup(path.clone()),
                None => Source::Sandbox(verbose_pid(cri, &sb.id).await),
            };
            fill.push((out.len(), want, source));
        }
        out.push(SandboxUsage {
            id: sb.id,
            pod,
            created_ns: sb.created_at,
            network,
            process_count,
        });
    }
    if fill.is_empty() {
        return Ok(out);
    }
    // The cgroup walks and /proc reads, off the async threads: at 100 pods on cgroup v1 that
    // is thousands of small reads.
    let read = tokio::task::spawn_blocking(move || {
        // The kubelet runs in the node's network namespace (as upstream requires).
        let host_netns = netns_inode(Path::new("/proc/self"));
        let mut by_netns: Option<HashMap<u64, u64>> = None;
        fill.into_iter()
            .map(|(i, want, source)| {
                let procs = match source {
                    Source::Cgroup(path) => PodProcesses::Cgroup((pod_pids.read)(&path)),
                    Source::Sandbox(pid) => PodProcesses::Sandbox(pid),
                };
                (i, procs.read(want, host_netns, &mut by_netns))
            })
            .collect::<Vec<_>>()
    })
    .await;
    match read {
        Ok(filled) => {
            for (i, (network, count)) in filled {
                let u = &mut out[i];
                u.network = u.network.take().or(network);
                u.process_count = u.process_count.or(count);
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot read pod processes from /proc"),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_fallback_only_where_proc_can_answer() {
        // (answered, listed, network, processes) -> fallback
        let table = [
            // Everything from the runtime: nothing to read.
            ((Some(3), true, true, true), false),
            ((None, false, true, true), false),
            // The runtime gave this sandbox without some figures: /proc fills them.
            ((Some(3), true, false, true), true),
            ((Some(3), true, true, false), true),
            // No stats call (older runtime, or it failed): /proc for everyone.
            ((None, false, false, false), true),
            // An empty answer: a runtime that does not fill it; /proc as before.
            ((Some(0), false, false, false), true),
            // Left out of a non-empty answer: stopped since it was listed; nothing to read.
            ((Some(3), false, false, false), false),
        ];
        for ((answered, listed, network, processes), want) in table {
            assert_eq!(
                needs_proc_fallback(answered, listed, network, processes),
                want,
                "answered {answered:?} listed {listed} network {network} processes {processes}"
            );
        }
    }

    #[test]
    fn pid_from_containerd_verbose_info() {
        let info: HashMap<String, String> = [(
            "info".to_string(),
            r#"{"pid":4242,"processStatus":"running","netNamespaceClosed":false}"#.to_string(),
        )]
        .into();
        assert_eq!(sandbox_pid(&info), Some(4242));
        assert_eq!(sandbox_pid(&HashMap::new()), None);
        let zero = [("info".to_string(), r#"{"pid":0}"#.to_string())].into();
        assert_eq!(sandbox_pid(&zero), None);
        let bad = [("info".to_string(), "not json".to_string())].into();
        assert_eq!(sandbox_pid(&bad), None);
    }

    #[test]
    fn cri_network_keeps_the_default_interface_first() {
        let u = |v| Some(api::UInt64Value { value: v });
        let n = api::NetworkUsage {
            timestamp: 5,
            default_interface: Some(api::NetworkInterfaceUsage {
                name: "eth0".into(),
                rx_bytes: u(10),
                rx_errors: u(0),
                tx_bytes: u(20),
                tx_errors: None,
            }),
            interfaces: vec![],
        };
        let p = from_cri_network(&n);
        assert_eq!(p.default.as_deref(), Some("eth0"));
        assert_eq!(p.interfaces[0].rx_bytes, 10);
        assert_eq!(p.interfaces[0].tx_bytes, 20);
        assert_eq!(p.timestamp_ns, 5);
    }

    const ALL: Want = Want {
        network: true,
        count: true,
    };

    /// A child process that sleeps until dropped.
    struct Child(std::process::Child);
    impl Child {
        fn spawn(cmd: &mut std::process::Command) -> Child {
            Child(cmd.spawn().expect("spawn a child process"))
        }
        fn pid(&self) -> i32 {
            self.0.id() as i32
        }
    }
    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn pod_processes_read_from_proc() {
        let host = netns_inode(Path::new("/proc/self"));
        let mut by_netns = None;
        // Processes in the node's namespace (a host-network pod): counted from the cgroup, no
        // network of their own, and no count from a bare sandbox pid.
        let sleeper = Child::spawn(std::process::Command::new("sleep").arg("60"));
        let host_pod = PodProcesses::Cgroup(vec![sleeper.pid(), std::process::id() as i32]);
        assert_eq!(host_pod.read(ALL, host, &mut by_netns), (None, Some(2)));
        let only_net = Want {
            network: true,
            count: false,
        };
        assert_eq!(host_pod.read(only_net, host, &mut by_netns), (None, None));
        let bare = PodProcesses::Sandbox(Some(sleeper.0.id()));
        assert_eq!(bare.read(ALL, host, &mut by_netns), (None, None));
        // A cgroup emptied, a sandbox without a pid: nothing to read.
        assert_eq!(
            PodProcesses::Cgroup(vec![]).read(ALL, host, &mut by_netns),
            (None, None)
        );
        assert_eq!(
            PodProcesses::Sandbox(None).read(ALL, host, &mut by_netns),
            (None, None)
        );
        assert!(by_netns.is_none(), "no /proc scan for the node's namespace");
    }

    #[test]
    fn a_pod_in_its_own_netns_gets_its_interfaces_and_count() {
        // A real network namespace with a veth pair and the default route through eth0, as a
        // pod sandbox has (root only, as the kubelet).
        let mut cmd = std::process::Command::new("unshare");
        cmd.args([
            "--net",
            "sh",
            "-c",
            "ip link add eth0 type veth peer name p0 && ip link set eth0 up \
             && ip route add default dev eth0 && exec sleep 60",
        ]);
        let pod = Child::spawn(&mut cmd);
        let proc_dir = Path::new("/proc").join(pod.pid().to_string());
        let host = netns_inode(Path::new("/proc/self"));
        // Wait until it is in its namespace with the interface made.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read_to_string(proc_dir.join("comm")).is_ok_and(|c| c.trim() == "sleep") {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never slept"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut by_netns = None;
        let (network, count) = PodProcesses::Cgroup(vec![pod.pid()]).read(ALL, host, &mut by_netns);
        let network = network.expect("the pod's own network");
        assert_eq!(network.default.as_deref(), Some("eth0"));
        // /proc/net/dev's order is the kernel's (by ifindex on new kernels, hashed on older).
        let mut names: Vec<&str> = network.interfaces.iter().map(|i| i.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, vec!["eth0", "p0"]);
        assert_eq!(count, Some(1));
        // The same pod known only by its sandbox pid: counted by its namespace.
        let (network, count) =
            PodProcesses::Sandbox(Some(pod.0.id())).read(ALL, host, &mut by_netns);
        assert_eq!(network.map(|n| n.default), Some(Some("eth0".to_string())));
        assert_eq!(count, Some(1));
    }

    /// containerd fails `ListPodSandboxStats` as a whole when a sandbox stops under it: the
    /// figures then come from the pod cgroups without a `PodSandboxStatus` per sandbox; only a
    /// pod without a cgroup asks for its sandbox's pid.
    #[tokio::test]
    async fn a_failed_stats_call_reads_pod_cgroups_not_the_runtime() {
        use rkubelet_cri::fake::FakeRuntime;
        let fake = FakeRuntime::new(std::sync::Arc::new(crate::clock::now_unix_nanos));
        let cri = CriClient::with_backend(
            std::sync::Arc::new(fake.clone()),
            "fake".into(),
            rkubelet_cri::DEFAULT_TIMEOUT,
        );
        for (name, uid) in [("with-cgroup", "u1"), ("without", "u2")] {
            cri.run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(api::PodSandboxConfig {
                    metadata: Some(api::PodSandboxMetadata {
                        name: name.into(),
                        uid: uid.into(),
                        namespace: "default".into(),
                        attempt: 0,
                    }),
                    ..Default::default()
                }),
                runtime_handler: String::new(),
            })
            .await
            .expect("run sandbox");
        }
        fake.fail_next(
            "list_pod_sandbox_stats",
            "",
            tonic::Status::unknown("sandbox container is not in ready state"),
        );
        let me = std::process::id() as i32;
        let pod_pids = PodPids {
            paths: [("u1".to_string(), "/kubepods/podu1".to_string())].into(),
            read: std::sync::Arc::new(move |path| {
                assert_eq!(path, "/kubepods/podu1");
                vec![me]
            }),
        };
        let usage = sandbox_usage(&cri, pod_pids).await.expect("usage");
        let count = |uid: &str| {
            usage
                .iter()
                .find(|u| u.pod.uid == uid)
                .map(|u| u.process_count)
        };
        assert_eq!(count("u1"), Some(Some(1)), "counted from the pod cgroup");
        assert_eq!(count("u2"), Some(None), "the fake's sandbox has no pid");
        let status_calls: Vec<String> = fake
            .calls()
            .into_iter()
            .filter(|c| c.op == "pod_sandbox_status")
            .map(|c| c.key)
            .collect();
        assert_eq!(status_calls, vec!["without".to_string()]);
    }

    #[test]
    fn this_process_is_counted_in_its_netns() {
        let counts = processes_by_netns();
        let mine = netns_inode(Path::new("/proc/self")).unwrap();
        assert!(counts.get(&mine).copied().unwrap_or(0) >= 1);
    }
}
