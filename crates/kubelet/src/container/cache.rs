//! The runtime pod cache (upstream `kubecontainer.Cache`, `pkg/kubelet/container/cache.go`): the
//! newest runtime status of every pod, with the time it was read.
//!
//! One writer, many readers (the kube-rs `Writer`/`Store` habit): PLEG owns the only
//! [`CacheWriter`]; pod workers, the server, stats and eviction hold cheap [`RuntimeCache`] clones.
//! A worker never asks the runtime itself: it waits for an entry newer than its last sync
//! ([`RuntimeCache::get_newer_than`], upstream `GetNewerThan`), and when it must see the effect of
//! what it just did, it asks PLEG for a refresh of its pod and waits for that
//! ([`RuntimeCache::fresh`]), so every runtime read still goes through the single writer.
//!
//! Semantics as upstream: an entry is newer than `t` when it was read after `t`, or when a whole
//! relist finished after `t` (the global timestamp: PLEG updates changed pods before it moves the
//! timestamp, so every pod it did not update is unchanged as of then). A pod without an entry has
//! an empty status (the runtime has nothing for it). One exception: a pod the relist saw changed
//! but left for its worker's own read (`runtime::manager::Marks`, `acting`) is not vouched for by
//! that relist's timestamp until a read of it as new is in ([`CacheWriter::skipped`]).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::types::{PodRuntimeStatus, SandboxStatus};

/// What a worker knows of a pod it has just started from nothing (the runtime had no sandbox and
/// no container of it): the sandbox it ran, read when RunPodSandbox returned, and the containers
/// it created. PLEG then reads only those containers instead of the whole pod (see
/// [`RuntimeCache::fresh_after_start`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    pub sandbox: SandboxStatus,
    pub containers: Vec<String>,
}

/// What a worker knows of its pod right after acting on it, so PLEG reads only that instead
/// of the whole pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Known {
    /// Started from nothing ([`RuntimeCache::fresh_after_start`]).
    Started(Started),
    /// Stopped ([`RuntimeCache::fresh_after_stop`]): the IDs of every sandbox and container the
    /// read the stop acted on showed.
    Stopped {
        sandboxes: Vec<String>,
        containers: Vec<String>,
    },
}

/// A worker's request that PLEG read its pod now.
#[derive(Debug, Clone, PartialEq)]
pub struct Refresh {
    pub uid: String,
    pub known: Option<Known>,
}

/// A cached read: the status (or why it could not be read) and when the read started.
#[derive(Debug, Clone)]
pub struct Entry {
    pub status: Arc<PodRuntimeStatus>,
    /// The runtime's error for this pod's last read; the status is then empty.
    pub error: Option<Arc<str>>,
    pub modified: Instant,
}

/// Why a reader got no status.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CacheError {
    #[error("reading the pod's runtime status: {0}")]
    Runtime(Arc<str>),
    #[error("the runtime cache's writer (PLEG) is gone")]
    Closed,
}

#[derive(Default)]
struct Shared {
    pods: HashMap<String, Entry>,
    /// When the last complete relist started (upstream `cache.timestamp`).
    timestamp: Option<Instant>,
    /// Pods a relist that started at the instant given found changed and did not read: the
    /// timestamp does not vouch for them until a read started at or after that instant is in.
    skipped: HashMap<String, Instant>,
}

/// The only writer; PLEG owns it. Not `Clone` on purpose.
pub struct CacheWriter {
    shared: Arc<RwLock<Shared>>,
    version: watch::Sender<u64>,
}

/// What the cache holds now, without waiting: PLEG's relist compares it with its listing.
#[derive(Clone)]
pub struct CacheView {
    shared: Arc<RwLock<Shared>>,
}

impl CacheView {
    /// The status the cache has for `uid` now (None: no entry, or the read failed).
    pub fn status(&self, uid: &str) -> Option<Arc<PodRuntimeStatus>> {
        read(&self.shared)
            .pods
            .get(uid)
            .filter(|e| e.error.is_none())
            .map(|e| e.status.clone())
    }
}

/// A reader handle; cheap to clone.
#[derive(Clone)]
pub struct RuntimeCache {
    shared: Arc<RwLock<Shared>>,
    version: watch::Receiver<u64>,
    refresh: mpsc::UnboundedSender<Refresh>,
}

/// Makes an empty cache: the writer, the refresh requests it must serve, and a reader.
pub fn new() -> (CacheWriter, mpsc::UnboundedReceiver<Refresh>, RuntimeCache) {
    let shared = Arc::new(RwLock::new(Shared::default()));
    let (version, rx) = watch::channel(0);
    let (refresh, requests) = mpsc::unbounded_channel();
    (
        CacheWriter {
            shared: shared.clone(),
            version,
        },
        requests,
        RuntimeCache {
            shared,
            version: rx,
            refresh,
        },
    )
}

fn read(shared: &RwLock<Shared>) -> std::sync::RwLockReadGuard<'_, Shared> {
    // Writers never panic while holding the lock; a poisoned lock still holds consistent data.
    shared.read().unwrap_or_else(|e| e.into_inner())
}

impl CacheWriter {
    fn write(&self, f: impl FnOnce(&mut Shared)) {
        f(&mut self.shared.write().unwrap_or_else(|e| e.into_inner()));
        self.version.send_modify(|v| *v += 1);
    }

    /// Records a read of `uid` that started at `modified`; an older read never replaces a newer one.
    pub fn set(&self, uid: &str, status: Result<PodRuntimeStatus, String>, modified: Instant) {
        self.write(|s| {
            if s.pods.get(uid).is_some_and(|e| e.modified > modified) {
                return;
            }
            if s.skipped.get(uid).is_some_and(|at| modified >= *at) {
                s.skipped.remove(uid);
            }
            let (status, error) = match status {
                Ok(st) => (Arc::new(st), None),
                Err(e) => (Arc::default(), Some(Arc::from(e))),
            };
            s.pods.insert(
                uid.to_string(),
                Entry {
                    status,
                    error,
                    modified,
                },
            );
        });
    }

    /// The status the cache has for `uid` now, if any (what PLEG checks an event against).
    pub fn status(&self, uid: &str) -> Option<Arc<PodRuntimeStatus>> {
        self.view().status(uid)
    }

    /// A read-only view for PLEG's relist, which runs apart from the writer.
    pub fn view(&self) -> CacheView {
        CacheView {
            shared: self.shared.clone(),
        }
    }

    /// The runtime no longer has `uid`.
    pub fn delete(&self, uid: &str) {
        self.write(|s| {
            s.pods.remove(uid);
            s.skipped.remove(uid);
        });
    }

    /// The relist that started at `at` found `uid` changed and left it to its worker's own read:
    /// its timestamp does not say `uid` is unchanged as of `at`. Call before [`Self::update_time`].
    pub fn skipped(&self, uid: &str, at: Instant) {
        self.write(|s| {
            let since = s.skipped.entry(uid.to_string()).or_insert(at);
            *since = (*since).max(at);
        });
    }

    /// Drops the entries read before `before` of pods `listed` says the runtime no longer has:
    /// a pod's last read may have found it gone already (a worker's read after its teardown),
    /// so the relist's own changes do not name it. A newer read stays (the listing predates it).
    pub fn prune(&self, before: Instant, listed: impl Fn(&str) -> bool) {
        self.write(|s| {
            s.pods.retain(|uid, e| e.modified >= before || listed(uid));
            s.skipped
                .retain(|uid, _| s.pods.contains_key(uid) || listed(uid));
        });
    }

    /// A relist that started at `at` finished and every changed pod was set: all entries are
    /// current as of `at` (upstream `UpdateTime`).
    pub fn update_time(&self, at: Instant) {
        self.write(|s| {
            if s.timestamp.is_none_or(|t| t < at) {
                s.timestamp = Some(at);
            }
        });
    }
}

impl RuntimeCache {
    /// What the cache has for `uid` now (an empty status when the runtime had nothing).
    pub fn get(&self, uid: &str) -> Entry {
        let s = read(&self.shared);
        s.pods.get(uid).cloned().unwrap_or_else(|| Entry {
            status: Arc::default(),
            error: None,
            modified: s.timestamp.unwrap_or_else(Instant::now),
        })
    }

    /// The entry when it is newer than `min` (None: any complete read will do).
    fn newer(&self, uid: &str, min: Option<Instant>) -> Option<Entry> {
        let s = read(&self.shared);
        let newer = |t: Instant| min.is_none_or(|m| t > m);
        let vouched = s.timestamp.is_some_and(newer) && !s.skipped.contains_key(uid);
        match s.pods.get(uid) {
            Some(e) if newer(e.modified) || vouched => Some(e.clone()),
            None if vouched => Some(Entry {
                status: Arc::default(),
                error: None,
                modified: s.timestamp.unwrap_or(min.unwrap_or_else(Instant::now)),
            }),
            _ => None,
        }
    }

    /// Waits until the cache has `uid`'s status read after `min` (upstream `GetNewerThan`).
    pub async fn get_newer_than(
        &self,
        uid: &str,
        min: Option<Instant>,
    ) -> Result<Arc<PodRuntimeStatus>, CacheError> {
        let mut version = self.version.clone();
        loop {
            version.borrow_and_update();
            if let Some(e) = self.newer(uid, min) {
                return match e.error {
                    Some(err) => Err(CacheError::Runtime(err)),
                    None => Ok(e.status),
                };
            }
            if version.changed().await.is_err() {
                return Err(CacheError::Closed);
            }
        }
    }

    /// Like [`Self::get_newer_than`], but asks PLEG to read the pod now when the cache has nothing
    /// new enough, instead of waiting for the next relist: what a worker uses to see the effect of
    /// its own actions without a second path to the runtime.
    pub async fn fresh(
        &self,
        uid: &str,
        min: Option<Instant>,
    ) -> Result<Arc<PodRuntimeStatus>, CacheError> {
        self.refresh_with(uid, min, None).await
    }

    /// [`Self::fresh`] after a worker started a pod from nothing: PLEG reads only the containers
    /// the worker created (one ContainerStatus each) and takes the sandbox as the worker read it,
    /// instead of the whole pod (ListPodSandbox, PodSandboxStatus, ListContainers and every
    /// ContainerStatus). Upstream reads the whole pod at the next relist. What changed since
    /// (the sandbox died meanwhile) differs from the relist's listing, which then reads the pod.
    pub async fn fresh_after_start(
        &self,
        uid: &str,
        min: Option<Instant>,
        started: Started,
    ) -> Result<Arc<PodRuntimeStatus>, CacheError> {
        self.refresh_with(uid, min, Some(Known::Started(started)))
            .await
    }

    /// [`Self::fresh`] after a worker stopped a pod: PLEG reads each sandbox and container of
    /// `before` (the read the stop acted on) again, one PodSandboxStatus or ContainerStatus
    /// each, without listing the pod's sandboxes and containers anew (ListPodSandbox and
    /// ListContainers, each filtered by the runtime over every container it has). Upstream's
    /// `SyncTerminatingPod` reads the whole pod. Nothing can be missing: only the pod's worker
    /// creates its sandboxes and containers, and it is the one stopping them (a worker that
    /// dropped a start it was making, for a termination, reads the whole pod). A sandbox or
    /// container gone meanwhile makes it a whole read; the relist stays the safety net. So
    /// does an empty `before`: the stop acted on nothing, and only listing can show that a
    /// sandbox the kubelet lost track of (a RunPodSandbox that timed out and then completed)
    /// is there.
    pub async fn fresh_after_stop(
        &self,
        uid: &str,
        min: Option<Instant>,
        before: &PodRuntimeStatus,
    ) -> Result<Arc<PodRuntimeStatus>, CacheError> {
        if before.sandboxes.is_empty() && before.containers.is_empty() {
            return self.fresh(uid, min).await;
        }
        let known = Known::Stopped {
            sandboxes: before.sandboxes.iter().map(|s| s.id.clone()).collect(),
            containers: before.containers.iter().map(|c| c.id.clone()).collect(),
        };
        self.refresh_with(uid, min, Some(known)).await
    }

    async fn refresh_with(
        &self,
        uid: &str,
        min: Option<Instant>,
        known: Option<Known>,
    ) -> Result<Arc<PodRuntimeStatus>, CacheError> {
        if self.newer(uid, min).is_none() {
            self.refresh
                .send(Refresh {
                    uid: uid.to_string(),
                    known,
                })
                .map_err(|_| CacheError::Closed)?;
        }
        self.get_newer_than(uid, min).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn status(n: usize) -> PodRuntimeStatus {
        PodRuntimeStatus {
            containers: vec![Default::default(); n],
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn newer_than_semantics() {
        let (w, _req, r) = new();
        let t0 = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        let t1 = Instant::now();
        // Nothing read yet: nobody may assume the runtime is empty.
        assert!(r.newer("a", None).is_none());
        w.set("a", Ok(status(1)), t1);
        // (min, expected) rows: an entry read at t1 is newer than t0, not than t1.
        for (min, want) in [(None, true), (Some(t0), true), (Some(t1), false)] {
            assert_eq!(r.newer("a", min).is_some(), want, "min {min:?}");
        }
        // An older read does not replace a newer one.
        w.set("a", Ok(status(3)), t0);
        assert_eq!(r.get("a").status.containers.len(), 1);
        tokio::time::advance(Duration::from_secs(1)).await;
        let t2 = Instant::now();
        // A complete relist makes every entry (and every absent pod) current.
        w.update_time(t2);
        assert!(r.newer("a", Some(t1)).is_some());
        let absent = r
            .newer("b", Some(t1))
            .expect("absent pods are empty as of the relist");
        assert!(absent.status.containers.is_empty());
        // A pod the relist at t2 did not list: its older entry goes, a newer one stays.
        w.set("gone", Ok(status(1)), t1);
        tokio::time::advance(Duration::from_secs(1)).await;
        w.set("new", Ok(status(1)), Instant::now());
        w.prune(t2, |uid| uid == "a");
        let mut kept: Vec<String> = read(&r.shared).pods.keys().cloned().collect();
        kept.sort();
        assert_eq!(kept, ["a", "new"]);
        w.set("c", Err("boom".into()), t2);
        let err = r.get_newer_than("c", Some(t1)).await.unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
    }

    /// A pod a relist skipped (its worker acts on it and reads it itself) is not made current by
    /// that relist's timestamp: its worker, waiting for a read newer than its actions, would get
    /// the status from before them. Only a read started at or after the skipping relist counts.
    #[tokio::test(start_paused = true)]
    async fn a_skipped_pod_waits_for_its_own_read() {
        let (w, _req, r) = new();
        let t0 = Instant::now();
        w.set("a", Ok(status(1)), t0);
        tokio::time::advance(Duration::from_secs(1)).await;
        let acted = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        let relist = Instant::now();
        w.skipped("a", relist);
        w.update_time(relist);
        assert!(
            r.newer("a", Some(acted)).is_none(),
            "skipped: not vouched for"
        );
        assert!(r.newer("absent", Some(acted)).is_some(), "others are");
        // A read that started before the relist does not clear it; one after does.
        w.set("a", Ok(status(2)), acted);
        assert!(r.newer("a", Some(acted)).is_none());
        tokio::time::advance(Duration::from_millis(1)).await;
        w.set("a", Ok(status(3)), Instant::now());
        let got = r.newer("a", Some(acted)).expect("its own read");
        assert_eq!(got.status.containers.len(), 3);
        // Later relists vouch for it again.
        tokio::time::advance(Duration::from_secs(1)).await;
        let later = Instant::now();
        w.update_time(later);
        assert!(r
            .newer("a", Some(later - Duration::from_millis(1)))
            .is_some());
        // A pod gone from the runtime is forgotten, skipped or not.
        w.skipped("b", later);
        w.delete("b");
        assert!(r.newer("b", Some(acted)).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn fresh_asks_the_writer_and_waits_for_it() {
        let (w, mut req, r) = new();
        let min = Instant::now();
        tokio::time::advance(Duration::from_millis(10)).await;
        let reader = tokio::spawn({
            let r = r.clone();
            async move { r.fresh("a", Some(min)).await }
        });
        let asked = req.recv().await.expect("a refresh request");
        assert_eq!(
            asked,
            Refresh {
                uid: "a".into(),
                known: None
            }
        );
        w.set("a", Ok(status(2)), Instant::now());
        let got = reader.await.unwrap().unwrap();
        assert_eq!(got.containers.len(), 2);
        // Fresh enough already: no request.
        r.fresh("a", Some(min)).await.unwrap();
        assert!(req.try_recv().is_err());
        // After a start from nothing the request carries what was started.
        tokio::time::advance(Duration::from_millis(10)).await;
        let started = Started {
            sandbox: SandboxStatus {
                id: "sb".into(),
                ready: true,
                ..Default::default()
            },
            containers: vec!["c1".into()],
        };
        let reader = tokio::spawn({
            let (r, started) = (r.clone(), started.clone());
            let min = Instant::now();
            async move { r.fresh_after_start("a", Some(min), started).await }
        });
        let asked = req.recv().await.expect("a refresh request");
        assert_eq!(asked.known, Some(Known::Started(started)));
        tokio::time::advance(Duration::from_millis(1)).await;
        w.set("a", Ok(status(1)), Instant::now());
        assert_eq!(reader.await.unwrap().unwrap().containers.len(), 1);
        drop(w);
        let closed = r.get_newer_than("z", Some(Instant::now())).await;
        assert!(matches!(closed, Err(CacheError::Closed)));
    }
}
