//! Pod-level figures the containers' stats lack: the pod's network (its sandbox's network
//! namespace) and its process count. The runtime's `ListPodSandboxStats` is asked first; where it
//! leaves them out, they are read from /proc through the sandbox's pid, which the runtime gives in
//! `PodSandboxStatus`'s verbose info (containerd: `info.pid`).

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

/// The ready sandboxes with their network and process figures.
pub async fn sandbox_usage(cri: &CriClient) -> Result<Vec<SandboxUsage>, StatsError> {
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
    // The kubelet runs in the node's network namespace (as upstream requires).
    let host_netns = netns_inode(Path::new("/proc/self"));
    let mut by_netns: Option<HashMap<u64, u64>> = None;
    let mut out = Vec::new();
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
        let mut network = linux
            .and_then(|s| s.network.as_ref())
            .filter(|n| n.default_interface.is_some() || !n.interfaces.is_empty())
            .map(from_cri_network);
        let mut process_count = linux
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
            let status = cri
                .pod_sandbox_status(api::PodSandboxStatusRequest {
                    pod_sandbox_id: sb.id.clone(),
                    verbose: true,
                })
                .await;
            let pid = match status {
                Ok(s) => sandbox_pid(&s.info),
                Err(e) => {
                    tracing::debug!(error = %e, sandbox = %sb.id, "no sandbox status");
                    None
                }
            };
            if let Some(pid) = pid {
                let proc_dir = Path::new("/proc").join(pid.to_string());
                let ns = netns_inode(&proc_dir);
                // A host-network pod shares the node's namespace: its traffic and processes
                // cannot be told apart from the node's (cAdvisor reports no network for it).
                let own_netns = ns.is_some() && ns != host_netns;
                if network.is_none() && own_netns {
                    network = net::read(&proc_dir)
                        .ok()
                        .map(|(interfaces, default)| PodNetwork {
                            timestamp_ns: super::now_ns(),
                            interfaces,
                            default,
                        });
                }
                if process_count.is_none() && own_netns {
                    let counts = by_netns.get_or_insert_with(processes_by_netns);
                    process_count = ns.and_then(|i| counts.get(&i).copied());
                }
            }
        }
        out.push(SandboxUsage {
            id: sb.id,
            pod,
            created_ns: sb.created_at,
            network,
            process_count,
        });
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

    #[test]
    fn this_process_is_counted_in_its_netns() {
        let counts = processes_by_netns();
        let mine = netns_inode(Path::new("/proc/self")).unwrap();
        assert!(counts.get(&mine).copied().unwrap_or(0) >= 1);
    }
}
