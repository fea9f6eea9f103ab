//! Watch-based ConfigMap and Secret manager (upstream `pkg/kubelet/util/manager`
//! `watchBasedManager`, the default `configMapAndSecretChangeDetectionStrategy: Watch`): one
//! watch per referenced object (field selector `metadata.name=<name>` in its namespace, which
//! the Node authorizer allows for an object a pod on this node references), started when the
//! first pod referencing it registers and stopped when the last one goes. Reads are served from
//! what the watch last saw; a change wakes the referencing pods so their volumes and new
//! containers get it without waiting for the periodic resync.
//!
//! The manager owns the references and watches in one task; [`ObjectCache`] is the cheap handle.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::types::objects::{ObjectData, ObjectError, ObjectKind};

pub use kubelet_config::ChangeDetectionStrategy;

/// An object by kind, namespace and name.
pub type Key = (ObjectKind, String, String);

/// What the watch of one object last saw; `None` until its first list completed.
type Slot = Option<Result<ObjectData, ObjectError>>;

/// How long a read waits for a new watch's first list (upstream polls `hasSynced` for 1 s).
const SYNC_WAIT: Duration = Duration::from_secs(1);

/// Upstream's default TTL of the `Cache` strategy (without the node's `ttl` annotation, which the
/// TTL controller sets and this node does not read).
pub const CACHE_TTL: Duration = Duration::from_secs(60);

enum Request {
    /// Cache mode: the stored value of `key` if fetched less than the TTL ago.
    Cached {
        key: Key,
        reply: oneshot::Sender<Option<Result<ObjectData, ObjectError>>>,
    },
    /// Cache mode: a value just fetched.
    Store {
        key: Key,
        value: Result<ObjectData, ObjectError>,
    },
    /// The objects pod `uid` references now (replaces what it referenced before).
    Register {
        uid: String,
        keys: BTreeSet<Key>,
    },
    Unregister {
        uid: String,
    },
    Subscribe {
        key: Key,
        reply: oneshot::Sender<Option<watch::Receiver<Slot>>>,
    },
}

/// Handle to the manager task. Cheap to clone.
#[derive(Clone)]
pub struct ObjectCache {
    tx: mpsc::UnboundedSender<Request>,
    ttl: bool,
}

impl ObjectCache {
    /// Starts the manager; `changed` receives the UID of every pod referencing an object whose
    /// content changed. The manager and its watches stop with `cancel`.
    pub fn start(
        client: Client,
        changed: mpsc::UnboundedSender<String>,
        cancel: CancellationToken,
    ) -> (ObjectCache, impl std::future::Future<Output = ()>) {
        Self::start_mode(Mode::Watch(client), changed, cancel)
    }

    /// The `Cache` strategy's manager: no watches, GET results reused for `ttl`.
    pub fn start_ttl(
        ttl: Duration,
        cancel: CancellationToken,
    ) -> (ObjectCache, impl std::future::Future<Output = ()>) {
        let (changed, _) = mpsc::unbounded_channel();
        Self::start_mode(Mode::Ttl(ttl), changed, cancel)
    }

    fn start_mode(
        mode: Mode,
        changed: mpsc::UnboundedSender<String>,
        cancel: CancellationToken,
    ) -> (ObjectCache, impl std::future::Future<Output = ()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (notify_tx, notify_rx) = mpsc::unbounded_channel();
        let ttl = matches!(mode, Mode::Ttl(_));
        let m = Manager {
            mode,
            entries: BTreeMap::new(),
            cached: BTreeMap::new(),
            pods: BTreeMap::new(),
            changed,
            notify_tx,
        };
        (ObjectCache { tx, ttl }, m.run(rx, notify_rx, cancel))
    }

    /// Cache mode: the value fetched less than the TTL ago, if any.
    pub async fn cached(&self, key: &Key) -> Option<Result<ObjectData, ObjectError>> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Request::Cached {
                key: key.clone(),
                reply,
            })
            .ok()?;
        rx.await.ok()?
    }

    /// Cache mode: remembers a value just fetched. Errors are not kept: the next read retries,
    /// as upstream's store refetches after an error.
    pub fn store(&self, key: &Key, value: Result<ObjectData, ObjectError>) {
        if value.is_err() {
            return;
        }
        let _ = self.tx.send(Request::Store {
            key: key.clone(),
            value,
        });
    }

    /// Whether this is the `Cache` strategy's manager (read through [`ObjectCache::cached`]).
    pub fn is_ttl(&self) -> bool {
        self.ttl
    }

    pub fn register(&self, uid: &str, keys: BTreeSet<Key>) {
        let _ = self.tx.send(Request::Register {
            uid: uid.to_string(),
            keys,
        });
    }

    pub fn unregister(&self, uid: &str) {
        let _ = self.tx.send(Request::Unregister {
            uid: uid.to_string(),
        });
    }

    /// The watched state of `key`: None when no registered pod references it (the caller then
    /// reads it directly). Waits up to a second for a new watch's first list, as upstream does.
    pub async fn get(&self, key: &Key) -> Option<Result<ObjectData, ObjectError>> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Request::Subscribe {
                key: key.clone(),
                reply,
            })
            .ok()?;
        let mut state = rx.await.ok()??;
        let synced = tokio::time::timeout(SYNC_WAIT, state.wait_for(Option::is_some)).await;
        match synced {
            Ok(Ok(slot)) => slot.clone(),
            _ => Some(Err(ObjectError::Api {
                kind: key.0,
                namespace: key.1.clone(),
                name: key.2.clone(),
                message: format!(
                    "failed to sync {} cache: timed out waiting for the condition",
                    resource(key.0)
                ),
            })),
        }
    }
}

fn resource(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::ConfigMap => "configmap",
        ObjectKind::Secret => "secret",
    }
}

struct Entry {
    refs: BTreeSet<String>,
    state: watch::Receiver<Slot>,
    task: JoinHandle<()>,
}

/// Cache mode: a GET result and when it was made.
type Fetched = (tokio::time::Instant, Result<ObjectData, ObjectError>);

enum Mode {
    Watch(Client),
    Ttl(Duration),
}

struct Manager {
    mode: Mode,
    entries: BTreeMap<Key, Entry>,
    /// Cache mode: referenced objects and when they were fetched (None: fetch on next read).
    cached: BTreeMap<Key, Option<Fetched>>,
    pods: BTreeMap<String, BTreeSet<Key>>,
    changed: mpsc::UnboundedSender<String>,
    notify_tx: mpsc::UnboundedSender<Key>,
}

impl Manager {
    async fn run(
        mut self,
        mut requests: mpsc::UnboundedReceiver<Request>,
        mut notify: mpsc::UnboundedReceiver<Key>,
        cancel: CancellationToken,
    ) {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                Some(r) = requests.recv() => self.handle(r),
                Some(key) = notify.recv() => {
                    for uid in self.entries.get(&key).into_iter().flat_map(|e| &e.refs) {
                        let _ = self.changed.send(uid.clone());
                    }
                }
                else => break,
            }
        }
        for (_, e) in std::mem::take(&mut self.entries) {
            e.task.abort();
        }
    }

    fn handle(&mut self, r: Request) {
        match r {
            Request::Register { uid, keys } => {
                let old = self
                    .pods
                    .insert(uid.clone(), keys.clone())
                    .unwrap_or_default();
                for key in old.difference(&keys) {
                    self.drop_ref(key, &uid);
                }
                for key in keys.difference(&old) {
                    self.add_ref(key, &uid);
                }
            }
            Request::Unregister { uid } => {
                for key in self.pods.remove(&uid).unwrap_or_default() {
                    self.drop_ref(&key, &uid);
                }
            }
            Request::Subscribe { key, reply } => {
                let _ = reply.send(self.entries.get(&key).map(|e| e.state.clone()));
            }
            Request::Cached { key, reply } => {
                let fresh = match (&self.mode, self.cached.get(&key)) {
                    (Mode::Ttl(ttl), Some(Some((at, v)))) if at.elapsed() < *ttl => Some(v.clone()),
                    _ => None,
                };
                let _ = reply.send(fresh);
            }
            Request::Store { key, value } => {
                // Only objects some pod still references are kept.
                if let Some(slot) = self.cached.get_mut(&key) {
                    *slot = Some((tokio::time::Instant::now(), value));
                }
            }
        }
    }

    fn add_ref(&mut self, key: &Key, uid: &str) {
        let client = match &self.mode {
            Mode::Watch(c) => c.clone(),
            Mode::Ttl(_) => {
                // Upstream `AddReference`: a new reference makes the next read fetch again.
                self.cached.insert(key.clone(), None);
                return;
            }
        };
        if let Some(e) = self.entries.get_mut(key) {
            e.refs.insert(uid.to_string());
            return;
        }
        debug!(kind = resource(key.0), namespace = %key.1, name = %key.2, "starting watch");
        let (tx, state) = watch::channel(None);
        let task = tokio::spawn(watch_object(
            client,
            key.clone(),
            tx,
            self.notify_tx.clone(),
        ));
        self.entries.insert(
            key.clone(),
            Entry {
                refs: BTreeSet::from([uid.to_string()]),
                state,
                task,
            },
        );
    }

    fn drop_ref(&mut self, key: &Key, uid: &str) {
        if matches!(self.mode, Mode::Ttl(_)) {
            let still = self.pods.values().any(|keys| keys.contains(key));
            if !still {
                self.cached.remove(key);
            }
            return;
        }
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        e.refs.remove(uid);
        if e.refs.is_empty() {
            debug!(kind = resource(key.0), namespace = %key.1, name = %key.2, "stopping watch");
            if let Some(e) = self.entries.remove(key) {
                e.task.abort();
            }
        }
    }
}

async fn watch_object(
    client: Client,
    key: Key,
    tx: watch::Sender<Slot>,
    notify: mpsc::UnboundedSender<Key>,
) {
    match key.0 {
        ObjectKind::ConfigMap => {
            let api = Api::<ConfigMap>::namespaced(client, &key.1);
            run_watch(api, key, tx, notify).await
        }
        ObjectKind::Secret => {
            let api = Api::<Secret>::namespaced(client, &key.1);
            run_watch(api, key, tx, notify).await
        }
    }
}

/// Follows one object; a deleted (or never created) object is NotFound, as upstream's store
/// miss is. A failing watch keeps the last state while it retries with [`crate::backoff::API`]
/// (a 410 relists at once; no probe, since these watches are many).
async fn run_watch<K>(
    api: Api<K>,
    key: Key,
    tx: watch::Sender<Slot>,
    notify: mpsc::UnboundedSender<Key>,
) where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    ObjectData: From<K>,
{
    let cfg = watcher::Config::default().fields(&format!("metadata.name={}", key.2));
    let mut stream = watcher::watcher(api, cfg).boxed();
    let mut retry = crate::backoff::API.retry();
    let mut last_gone = false;
    // The task is aborted when the last reference goes; nothing else cancels its sleeps.
    let never = CancellationToken::new();
    let not_found = || ObjectError::NotFound {
        kind: key.0,
        name: key.2.clone(),
    };
    let mut listed: Option<ObjectData> = None;
    while let Some(ev) = stream.next().await {
        if ev.is_ok() {
            retry.reset();
            last_gone = false;
        }
        let new = match ev {
            Ok(Event::Init) => {
                listed = None;
                continue;
            }
            Ok(Event::InitApply(o)) => {
                listed = Some(o.into());
                continue;
            }
            Ok(Event::InitDone) => listed.take().ok_or_else(not_found),
            Ok(Event::Apply(o)) => Ok(o.into()),
            Ok(Event::Delete(_)) => Err(not_found()),
            Err(e) => {
                warn!(kind = resource(key.0), namespace = %key.1, name = %key.2, error = %e, "watch failed; retrying");
                crate::backoff::watch_wait(&mut retry, &e, &mut last_gone, None, &never).await;
                continue;
            }
        };
        let mut was_synced = false;
        let changed = tx.send_if_modified(|cur| {
            was_synced = cur.is_some();
            if cur.as_ref() == Some(&new) {
                false
            } else {
                *cur = Some(new.clone());
                true
            }
        });
        // The first list is what the registering pod's own sync reads; only later changes
        // need to wake anybody.
        if changed && was_synced {
            let _ = notify.send(key.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        (ObjectKind::ConfigMap, "ns".into(), name.into())
    }

    fn data(v: &str) -> Result<ObjectData, ObjectError> {
        Ok(ObjectData {
            data: BTreeMap::from([("k".to_string(), v.as_bytes().to_vec())]),
            binary_data: BTreeMap::new(),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn ttl_cache_reuses_then_expires_and_new_references_refetch() {
        let cancel = CancellationToken::new();
        let (c, run) = ObjectCache::start_ttl(Duration::from_secs(60), cancel.clone());
        let task = tokio::spawn(run);
        assert!(c.is_ttl());
        c.register("p1", BTreeSet::from([key("a")]));
        assert_eq!(c.cached(&key("a")).await, None, "never fetched");
        c.store(&key("a"), data("1"));
        assert_eq!(c.cached(&key("a")).await, Some(data("1")));
        // Objects no pod references are not stored.
        c.store(&key("b"), data("x"));
        assert_eq!(c.cached(&key("b")).await, None);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(c.cached(&key("a")).await, Some(data("1")));
        // A pod that newly references the object makes the next read fetch again.
        c.register("p2", BTreeSet::from([key("a")]));
        assert_eq!(c.cached(&key("a")).await, None);
        c.store(&key("a"), data("2"));
        // Re-registering the same references (every sync does) keeps the value.
        c.register("p2", BTreeSet::from([key("a")]));
        assert_eq!(c.cached(&key("a")).await, Some(data("2")));
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(c.cached(&key("a")).await, None, "expired");
        c.store(&key("a"), data("3"));
        // Dropped with the last reference.
        c.unregister("p1");
        assert_eq!(c.cached(&key("a")).await, Some(data("3")));
        c.unregister("p2");
        assert_eq!(c.cached(&key("a")).await, None);
        cancel.cancel();
        task.await.unwrap();
    }
}
