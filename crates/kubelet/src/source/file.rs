//! Static pod directory source (upstream `config/file.go` + `file_linux.go`): inotify on the
//! directory plus a full rescan every `fileCheckFrequency`.
//!
//! Differs from upstream on purpose in one place: a file that stops parsing keeps its last good
//! pods (upstream's watch path does this, its periodic relist drops them). Half-saved edits then
//! never kill a running pod; deleting the file still removes it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use notify::Watcher;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::static_pod::{parse_manifest, Origin};
use super::{SourceSnapshot, FILE_SOURCE};

/// Watches one manifest directory and sends a full snapshot after every change.
pub struct FileSource {
    dir: PathBuf,
    node_name: String,
    period: Duration,
    tx: mpsc::Sender<SourceSnapshot>,
    /// Per file: its content and what it last parsed to successfully.
    files: BTreeMap<PathBuf, FileState>,
}

struct FileState {
    content: Vec<u8>,
    pods: Vec<Arc<Pod>>,
}

impl FileSource {
    pub fn new(
        dir: PathBuf,
        node_name: String,
        period: Duration,
        tx: mpsc::Sender<SourceSnapshot>,
    ) -> Self {
        FileSource {
            dir,
            node_name,
            period,
            tx,
            files: BTreeMap::new(),
        }
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        // Room for a write's closing event behind its first one (see [`change_of`]).
        let (ev_tx, mut ev_rx) = mpsc::channel::<Change>(16);
        let mut watcher: Option<notify::RecommendedWatcher> = None;
        let mut tick = tokio::time::interval(self.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if watcher.is_none() {
                watcher = self.watch(ev_tx.clone());
            }
            self.rescan().await;
            if self
                .tx
                .send(SourceSnapshot {
                    source: FILE_SOURCE,
                    pods: self.files.values().flat_map(|f| f.pods.clone()).collect(),
                })
                .await
                .is_err()
            {
                return;
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
                Some(change) = ev_rx.recv() => {
                    if change == Change::Writing {
                        settle(&mut ev_rx).await;
                    }
                    while ev_rx.try_recv().is_ok() {}
                }
            }
        }
    }

    fn watch(&self, tx: mpsc::Sender<Change>) -> Option<notify::RecommendedWatcher> {
        let handler = move |res: notify::Result<notify::Event>| {
            if let Some(change) = res.ok().and_then(|ev| change_of(&ev.kind)) {
                let _ = tx.try_send(change);
            }
        };
        let mut w = match notify::recommended_watcher(handler) {
            Ok(w) => w,
            Err(e) => {
                warn!(error = %e, "cannot create inotify watcher; relying on periodic rescans");
                return None;
            }
        };
        match w.watch(&self.dir, notify::RecursiveMode::NonRecursive) {
            Ok(()) => Some(w),
            Err(e) => {
                warn!(dir = %self.dir.display(), error = %e, "cannot watch static pod path; will retry");
                None
            }
        }
    }

    /// Re-reads the directory; only changed files are parsed again.
    async fn rescan(&mut self) {
        let entries = match read_dir_sorted(&self.dir).await {
            Ok(e) => e,
            Err(e) => {
                warn!(dir = %self.dir.display(), error = %e, "unable to read static pod path");
                return;
            }
        };
        let mut seen = HashMap::new();
        for path in entries {
            let content = match tokio::fs::read(&path).await {
                Ok(c) => c,
                // Removed since the listing: its pods go as if it had not been listed, and the
                // removal's own event is on its way. Not worth a warning per file when a
                // directory is emptied at once.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    debug!(file = %path.display(), "static pod manifest removed while reading the directory");
                    continue;
                }
                Err(e) => {
                    warn!(file = %path.display(), error = %e, "cannot read static pod manifest");
                    continue;
                }
            };
            seen.insert(path.clone(), ());
            if self.files.get(&path).is_some_and(|f| f.content == content) {
                continue;
            }
            let text = String::from_utf8_lossy(&content);
            let parsed = parse_manifest(
                &text,
                Origin::File(&path.to_string_lossy()),
                &self.node_name,
            );
            match parsed {
                Ok(pods) => {
                    info!(file = %path.display(), pods = pods.len(), "read static pod manifest");
                    let pods = pods.into_iter().map(Arc::new).collect();
                    self.files.insert(path, FileState { content, pods });
                }
                Err(e) => {
                    let kept = self.files.get(&path).map(|f| f.pods.len()).unwrap_or(0);
                    error!(file = %path.display(), error = %e, kept_previous_pods = kept,
                        "invalid static pod manifest; other pods are not affected");
                    let pods = self.files.remove(&path).map(|f| f.pods).unwrap_or_default();
                    // Remember the bad content so the error is logged once, not every rescan.
                    self.files.insert(path, FileState { content, pods });
                }
            }
        }
        self.files.retain(|p, _| {
            let keep = seen.contains_key(p);
            if !keep {
                debug!(file = %p.display(), "static pod manifest removed");
            }
            keep
        });
    }
}

/// What an inotify event says about the directory's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// A file was created or written and may still be open for writing.
    Writing,
    /// A change that is whole: a writer closed its file, a file was renamed in or out (how
    /// kubeadm and careful operators replace manifests), removed, or changed mode.
    Complete,
}

/// At most this long between a write's first event and the read, when its writer does not
/// close the file sooner (editors write in several steps).
const SETTLE: Duration = Duration::from_millis(100);

/// The change an event makes, if any. Reads (this source's own included) are none. Upstream's
/// `file_linux.go` reads the file at every event; waiting for a write's close instead keeps a
/// half-written manifest from starting a pod, and a rename or a finished write is read at once
/// rather than after a fixed pause.
fn change_of(kind: &notify::EventKind) -> Option<Change> {
    use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => Some(Change::Complete),
        EventKind::Access(_) => None,
        EventKind::Modify(ModifyKind::Name(_) | ModifyKind::Metadata(_)) | EventKind::Remove(_) => {
            Some(Change::Complete)
        }
        _ => Some(Change::Writing),
    }
}

/// Waits until a write in progress completes or [`SETTLE`] passes, whichever comes first.
async fn settle(rx: &mut mpsc::Receiver<Change>) {
    let _ = tokio::time::timeout(SETTLE, async {
        while let Some(change) = rx.recv().await {
            if change == Change::Complete {
                return;
            }
        }
    })
    .await;
}

/// Regular files of `dir` not starting with a dot, in name order (upstream ignores dot files).
async fn read_dir_sorted(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut rd = tokio::fs::read_dir(dir).await?;
    let mut out = Vec::new();
    while let Some(e) = rd.next_entry().await? {
        let name = e.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = e.path();
        // Follow symlinks (kubeadm-style setups link manifests in).
        if tokio::fs::metadata(&path)
            .await
            .map(|m| m.is_file())
            .unwrap_or(false)
        {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{
        AccessKind, AccessMode, CreateKind, DataChange, EventKind, MetadataKind, ModifyKind,
        RemoveKind, RenameMode,
    };

    #[test]
    fn events_and_the_change_they_make() {
        let cases = [
            (EventKind::Create(CreateKind::File), Some(Change::Writing)),
            (
                EventKind::Modify(ModifyKind::Data(DataChange::Any)),
                Some(Change::Writing),
            ),
            (
                EventKind::Access(AccessKind::Close(AccessMode::Write)),
                Some(Change::Complete),
            ),
            (EventKind::Access(AccessKind::Close(AccessMode::Read)), None),
            (EventKind::Access(AccessKind::Open(AccessMode::Any)), None),
            (
                EventKind::Modify(ModifyKind::Name(RenameMode::To)),
                Some(Change::Complete),
            ),
            (
                EventKind::Modify(ModifyKind::Name(RenameMode::From)),
                Some(Change::Complete),
            ),
            (
                EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
                Some(Change::Complete),
            ),
            (EventKind::Remove(RemoveKind::File), Some(Change::Complete)),
            (EventKind::Any, Some(Change::Writing)),
        ];
        for (kind, want) in cases {
            assert_eq!(change_of(&kind), want, "{kind:?}");
        }
    }

    /// A write's close ends the wait at once; without one the wait ends after SETTLE.
    #[tokio::test(start_paused = true)]
    async fn a_write_is_read_when_its_writer_closes_it() {
        let (tx, mut rx) = mpsc::channel(16);
        let start = tokio::time::Instant::now();
        tx.send(Change::Writing).await.expect("send");
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            let _ = tx.send(Change::Complete).await;
            tokio::time::sleep(Duration::from_secs(3600)).await;
        });
        rx.recv().await.expect("first event");
        settle(&mut rx).await;
        assert_eq!(start.elapsed(), Duration::from_millis(30));

        let (tx, mut rx) = mpsc::channel(16);
        let start = tokio::time::Instant::now();
        tx.send(Change::Writing).await.expect("send");
        rx.recv().await.expect("first event");
        settle(&mut rx).await;
        assert_eq!(start.elapsed(), SETTLE);
        drop(tx);
    }
}
