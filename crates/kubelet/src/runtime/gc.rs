//! Container garbage collection decisions (upstream `pkg/kubelet/kuberuntime/kuberuntime_gc.go`
//! with `kubecontainer.GCPolicy`): which dead containers, which sandboxes and which pod log
//! directories go. Pure; the task that lists and removes is [`super::gc_manager`].
//!
//! Ownership: the pod workers remove everything of a pod they terminate because it was deleted
//! (or because no source wants it: housekeeping hands those runtime pods to them), so this
//! collector acts on the containers and sandboxes of pods the kubelet still knows (dead
//! instances beyond the policy, replaced sandboxes) and on log directories nobody owns.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

pub use crate::config::gc::ContainerGcPolicy;
use crate::container::ContainerState;

/// Where a pod is, as the collector needs to know it (upstream `podStateProvider`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodGcState {
    /// Wanted and not finished: its worker reads its containers.
    Active,
    /// Finished (terminal, or rejected) while its source still lists it: its runtime may be
    /// removed under pressure (upstream `ShouldPodRuntimeBeRemoved`).
    Terminated,
}

/// What the SyncLoop answers when the collector asks (upstream's sources-ready provider and
/// pod workers' state). A UID missing from `pods` is deleted (upstream
/// `ShouldPodContentBeRemoved`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodStates {
    pub sources_ready: bool,
    pub pods: HashMap<String, PodGcState>,
}

/// One container as listed by the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcContainer {
    pub id: String,
    pub pod_uid: String,
    pub name: String,
    pub sandbox_id: String,
    /// Unix nanoseconds.
    pub created_at: i64,
    pub state: ContainerState,
}

/// One sandbox as listed by the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcSandbox {
    pub id: String,
    pub pod_uid: String,
    pub created_at: i64,
    pub ready: bool,
}

/// Upstream `evictContainers`: dead containers (not running, created at least `min_age` ago)
/// grouped per (pod, container name), newest first; all of them for a finished pod when
/// `evict_non_deleted` (the eviction manager's `DeleteAllUnusedContainers`), then at most
/// `max_per_pod_container` per group, then at most `max_containers` in all (an equal share per
/// group, then oldest first).
///
/// One deliberate difference: the newest dead instance of each container of a pod the kubelet
/// still keeps is never removed, whatever the limits (upstream's `maxContainers` may take it),
/// because the pod's status (`lastState`, `restartCount`) and `kubectl logs [--previous]` are
/// read from it.
pub fn containers_to_remove(
    containers: &[GcContainer],
    states: &PodStates,
    policy: &ContainerGcPolicy,
    now_ns: i64,
    evict_non_deleted: bool,
) -> Vec<String> {
    let newest_gc = now_ns.saturating_sub(duration_ns(policy.min_age));
    let mut units: BTreeMap<(&str, &str), Vec<&GcContainer>> = BTreeMap::new();
    for c in containers {
        if c.state == ContainerState::Running || c.created_at > newest_gc {
            continue;
        }
        // Deleted pods are the pod workers' (see the module docs).
        if !states.pods.contains_key(&c.pod_uid) {
            continue;
        }
        units.entry((&c.pod_uid, &c.name)).or_default().push(c);
    }
    for u in units.values_mut() {
        u.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
    }
    let mut remove: Vec<String> = Vec::new();
    if states.sources_ready && evict_non_deleted {
        units.retain(|(uid, _), u| {
            if states.pods.get(*uid) == Some(&PodGcState::Terminated) {
                remove.extend(u.iter().map(|c| c.id.clone()));
                false
            } else {
                true
            }
        });
    }
    let keep_per_unit =
        |units: &mut BTreeMap<_, Vec<&GcContainer>>, keep: usize, remove: &mut Vec<String>| {
            for u in units.values_mut() {
                let keep = keep.max(1);
                if u.len() > keep {
                    remove.extend(u.drain(keep..).map(|c| c.id.clone()));
                }
            }
        };
    if policy.max_per_pod_container >= 0 {
        keep_per_unit(
            &mut units,
            policy.max_per_pod_container as usize,
            &mut remove,
        );
    }
    if policy.max_containers >= 0 {
        let max = policy.max_containers as usize;
        let total = |u: &BTreeMap<_, Vec<&GcContainer>>| u.values().map(Vec::len).sum::<usize>();
        if total(&units) > max {
            let share = (max / units.len().max(1)).max(1);
            keep_per_unit(&mut units, share, &mut remove);
            let mut n = total(&units);
            if n > max {
                // Oldest first, each group's newest excepted.
                let mut rest: Vec<&GcContainer> = units
                    .values()
                    .flat_map(|u| u.iter().skip(1).copied())
                    .collect();
                rest.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
                for c in rest {
                    if n <= max {
                        break;
                    }
                    remove.push(c.id.clone());
                    n -= 1;
                }
            }
        }
    }
    remove
}

/// Upstream `evictSandboxes`: a sandbox is active while ready or holding a container (after the
/// containers above are gone). Of a pod the kubelet keeps, every inactive sandbox but the newest
/// goes; of a finished pod under `evict_non_deleted`, every inactive one.
pub fn sandboxes_to_remove(
    sandboxes: &[GcSandbox],
    remaining_containers: &[GcContainer],
    states: &PodStates,
    evict_non_deleted: bool,
) -> Vec<String> {
    let holding: HashSet<&str> = remaining_containers
        .iter()
        .map(|c| c.sandbox_id.as_str())
        .collect();
    let mut by_pod: BTreeMap<&str, Vec<&GcSandbox>> = BTreeMap::new();
    for s in sandboxes {
        if states.pods.contains_key(&s.pod_uid) {
            by_pod.entry(&s.pod_uid).or_default().push(s);
        }
    }
    let mut remove = Vec::new();
    for (uid, mut list) in by_pod {
        list.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        let all = states.sources_ready
            && evict_non_deleted
            && states.pods.get(uid) == Some(&PodGcState::Terminated);
        let skip = if all { 0 } else { 1 };
        for s in list.into_iter().skip(skip) {
            if !s.ready && !holding.contains(s.id.as_str()) {
                remove.push(s.id.clone());
            }
        }
    }
    remove
}

/// Upstream `evictPodLogsDirectories`: `<podLogsDir>/<ns>_<name>_<uid>` directories of pods that
/// are deleted (unknown to the kubelet, and nothing of them left in the runtime), once every
/// source has been read.
pub fn log_dirs_to_remove(
    dir_names: &[String],
    states: &PodStates,
    runtime_uids: &HashSet<String>,
) -> Vec<String> {
    if !states.sources_ready {
        return Vec::new();
    }
    dir_names
        .iter()
        .filter(|d| {
            let uid = pod_uid_of_logs_dir(d);
            !states.pods.contains_key(uid) && !runtime_uids.contains(uid)
        })
        .cloned()
        .collect()
}

/// Upstream `parsePodUIDFromLogsDirectory`: the part after the last `_`.
pub fn pod_uid_of_logs_dir(name: &str) -> &str {
    name.rsplit('_').next().unwrap_or(name)
}

/// The container ID of a `/var/log/containers/<pod>_<ns>_<container>-<id>.log` symlink
/// (upstream `getContainerIDFromLegacyLogSymlink`: the 64 characters before `.log`).
pub fn container_id_of_symlink(name: &str) -> Option<&str> {
    let stem = name.strip_suffix(".log")?;
    let (_, id) = stem.rsplit_once('-')?;
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
}

fn duration_ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

#[cfg(test)]
#[path = "gc_tests.rs"]
mod tests;
