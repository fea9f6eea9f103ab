//! The read PLEG makes for one runtime event (upstream's evented PLEG `RequestRelist` of one
//! pod): find the pod the container or sandbox belongs to, read its status, and read again
//! shortly while the runtime's CRI view does not show the event yet (containerd's CRI plugin
//! handles the same task events as we do, so its status can trail the event by milliseconds).
//! The retries stop well within one relist period; the relist stays the safety net.

use std::time::Duration;

use rkubelet_cri::api;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::events::{Expect, Hint};
use crate::runtime::manager::RuntimeSnapshotEntry;
use crate::runtime::{ContainerState, PodRuntimeStatus, RuntimeManager};
use crate::types::labels::POD_UID;

/// Waits between reads whose result does not show the event yet (just under 1 s in all). A
/// newer event for the pod cuts the wait short (`wake`): containerd's CRI plugin marks a
/// container exited only after deleting its task, which `/tasks/delete` announces.
const RETRY_DELAYS_MS: [u64; 9] = [2, 5, 10, 20, 40, 80, 150, 250, 400];

async fn wait(ms: u64, wake: &Notify) {
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
        _ = wake.notified() => {}
    }
}

/// Whether `status` shows what the event about `id` said.
pub fn expectation_met(expect: Expect, id: &str, status: &PodRuntimeStatus) -> bool {
    let container = status.containers.iter().find(|c| c.id == id);
    let sandbox = status.sandboxes.iter().find(|s| s.id == id);
    match expect {
        Expect::Exited => match (container, sandbox) {
            (Some(c), _) => c.state == ContainerState::Exited,
            (None, Some(s)) => !s.ready,
            (None, None) => true,
        },
    }
}

/// Whether `status` already shows `id` exited (a container) or not ready (a sandbox): an exit
/// event about it needs no read. Unlike [`expectation_met`], an ID the status lacks does not
/// count: that read may be older than the container.
pub fn already_shown(expect: Expect, id: &str, status: &PodRuntimeStatus) -> bool {
    match expect {
        Expect::Exited => {
            status
                .containers
                .iter()
                .any(|c| c.id == id && c.state == ContainerState::Exited)
                || status.sandboxes.iter().any(|s| s.id == id && !s.ready)
        }
    }
}

/// What the relist would have listed for this pod (None: the runtime has nothing of it).
pub fn snapshot_of(status: &PodRuntimeStatus) -> Option<RuntimeSnapshotEntry> {
    if status.sandboxes.is_empty() && status.containers.is_empty() {
        return None;
    }
    let mut e = RuntimeSnapshotEntry {
        sandboxes: status
            .sandboxes
            .iter()
            .map(|s| (s.id.clone(), s.ready))
            .collect(),
        containers: status
            .containers
            .iter()
            .map(|c| (c.id.clone(), c.state))
            .collect(),
    };
    // Sorted as `RuntimeManager::list_pods` sorts, so equal pods compare equal.
    e.sandboxes.sort();
    e.containers.sort_by(|a, b| a.0.cmp(&b.0));
    Some(e)
}

/// The pod UID of a container or sandbox the relist has not seen yet, from its CRI labels.
async fn resolve(runtime: &RuntimeManager, id: &str) -> Option<String> {
    if let Ok(r) = runtime
        .cri
        .container_status(api::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await
    {
        if let Some(uid) = r.status.and_then(|s| s.labels.get(POD_UID).cloned()) {
            return Some(uid);
        }
    }
    let r = runtime
        .cri
        .pod_sandbox_status(api::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: false,
        })
        .await
        .ok()?;
    r.status
        .and_then(|s| s.metadata)
        .map(|m| m.uid)
        .filter(|u| !u.is_empty())
}

/// One event's read: the pod (None when the ID belongs to no pod the runtime knows), when the
/// last read started, and what it found.
pub struct HintRead {
    /// The container or sandbox the event was about.
    pub id: String,
    pub uid: Option<String>,
    pub at: Instant,
    pub status: Result<PodRuntimeStatus, String>,
    /// The read showed the event (false: it still did not after every retry).
    pub met: bool,
}

/// Reads the pod of `hint` (`uid` when PLEG knows it), again while the read trails the event.
pub async fn read(
    runtime: RuntimeManager,
    hint: Hint,
    uid: Option<String>,
    wake: std::sync::Arc<Notify>,
) -> HintRead {
    let mut delays = RETRY_DELAYS_MS.iter();
    let id = hint.id.clone();
    let no_pod = || HintRead {
        id: id.clone(),
        uid: None,
        at: Instant::now(),
        status: Err("no pod".into()),
        met: false,
    };
    let uid = match uid.or(hint.uid.clone()) {
        Some(u) => u,
        // New to PLEG: the runtime's CRI view may not have it yet either.
        None => loop {
            if let Some(u) = resolve(&runtime, &hint.id).await {
                break u;
            }
            match delays.next() {
                Some(ms) => wait(*ms, &wake).await,
                None => return no_pod(),
            }
        },
    };
    loop {
        let at = Instant::now();
        let status = runtime.pod_status(&uid).await.map_err(|e| e.to_string());
        let met = match &status {
            Ok(st) => expectation_met(hint.expect, &hint.id, st),
            Err(_) => true,
        };
        match delays.next() {
            Some(ms) if !met => wait(*ms, &wake).await,
            _ => {
                return HintRead {
                    id: hint.id,
                    uid: Some(uid),
                    at,
                    status,
                    met,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{ContainerStatus, SandboxStatus};

    fn pod(containers: &[(&str, ContainerState)], sandboxes: &[(&str, bool)]) -> PodRuntimeStatus {
        PodRuntimeStatus {
            sandboxes: sandboxes
                .iter()
                .map(|(id, ready)| SandboxStatus {
                    id: id.to_string(),
                    ready: *ready,
                    ..Default::default()
                })
                .collect(),
            containers: containers
                .iter()
                .map(|(id, state)| ContainerStatus {
                    id: id.to_string(),
                    state: *state,
                    ..Default::default()
                })
                .collect(),
        }
    }

    #[test]
    fn expectations() {
        use ContainerState::*;
        let p = pod(
            &[("run", Running), ("done", Exited), ("new", Created)],
            &[("sb", true), ("old", false)],
        );
        // (expect, id, met)
        let rows = [
            (Expect::Exited, "done", true),
            (Expect::Exited, "run", false),
            (Expect::Exited, "old", true),
            (Expect::Exited, "sb", false),
            (Expect::Exited, "missing", true),
            (Expect::Exited, "new", false),
        ];
        for (expect, id, met) in rows {
            assert_eq!(expectation_met(expect, id, &p), met, "{expect:?} {id}");
        }
    }

    #[test]
    fn exits_already_shown() {
        use ContainerState::*;
        let p = pod(
            &[("run", Running), ("done", Exited), ("new", Created)],
            &[("sb", true), ("old", false)],
        );
        // (id, shown): only an exit the status itself shows; an unknown ID is read.
        for (id, shown) in [
            ("done", true),
            ("old", true),
            ("run", false),
            ("new", false),
            ("sb", false),
            ("missing", false),
        ] {
            assert_eq!(already_shown(Expect::Exited, id, &p), shown, "{id}");
        }
    }

    #[test]
    fn snapshot_sorted_like_the_listing() {
        use ContainerState::*;
        let p = pod(
            &[("b", Running), ("a", Exited)],
            &[("s2", true), ("s1", false)],
        );
        let e = snapshot_of(&p).unwrap();
        assert_eq!(
            e.containers,
            vec![("a".into(), Exited), ("b".into(), Running)]
        );
        assert_eq!(e.sandboxes, vec![("s1".into(), false), ("s2".into(), true)]);
        assert!(snapshot_of(&PodRuntimeStatus::default()).is_none());
    }
}
