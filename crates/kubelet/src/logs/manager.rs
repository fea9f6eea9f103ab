//! Container log rotation (upstream `pkg/kubelet/logs/container_log_manager.go`
//! `ContainerLogManager`): every `containerLogMonitorInterval` each running container's log that
//! reached `containerLogMaxSize` is renamed to `<log>.<YYYYMMDD-hhmmss>` and the runtime is told
//! to reopen it (CRI `ReopenContainerLog`); at most `containerLogMaxFiles` files are kept,
//! the live one included.
//!
//! One task owns rotation. Removing a container's logs goes through it too (upstream takes the
//! manager's mutex for `Clean`), so a rotation never renames a file that is being deleted and
//! recreates it. Symlink creation touches no rotated file and is done by the handle directly.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use k8s_openapi::jiff::Timestamp;
use rkubelet_cri::{api, CriClient};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::symlink::{self, files_with_prefix, LogsToClean};
use super::{io_err, LogsError};

pub use kubelet_config::defaults::{
    CONTAINER_LOG_MAX_FILES as DEFAULT_MAX_FILES, CONTAINER_LOG_MAX_SIZE as DEFAULT_MAX_SIZE,
    CONTAINER_LOG_MONITOR_INTERVAL as DEFAULT_MONITOR_INTERVAL,
};
/// Upstream `timestampFormat` (Go layout `20060102-150405`).
const TIMESTAMP_FORMAT: &str = "%Y%m%d-%H%M%S";
/// Upstream's suffixes: a `.tmp` file is a compression that did not finish; `.gz` a compressed log.
const TMP_SUFFIX: &str = ".tmp";
const COMPRESS_SUFFIX: &str = ".gz";

/// When and how much to keep (upstream `LogRotatePolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotationPolicy {
    /// Rotate a log once it has this many bytes.
    pub max_size: u64,
    /// Files kept per container, the live one included; at least 2.
    pub max_files: usize,
    /// How often logs are checked.
    pub interval: Duration,
}

impl Default for RotationPolicy {
    fn default() -> Self {
        RotationPolicy {
            max_size: DEFAULT_MAX_SIZE,
            max_files: DEFAULT_MAX_FILES,
            interval: DEFAULT_MONITOR_INTERVAL,
        }
    }
}

enum Command {
    Clean {
        logs: LogsToClean,
        done: oneshot::Sender<Result<(), LogsError>>,
    },
    /// A container the kubelet just started, with the log path it gave the runtime.
    Started { id: String, log: PathBuf },
}

/// The rotation task's state; see the module docs.
pub struct ContainerLogManager {
    cri: CriClient,
    policy: RotationPolicy,
    symlink_dir: PathBuf,
    commands: mpsc::Receiver<Command>,
    /// Each running container's log path, asked of the runtime once: a container's log path
    /// never changes, and upstream's ContainerStatus per running container every round was
    /// 100 CRI calls per 10 s at 100 pods. Kept for the containers of the last listing only.
    log_paths: HashMap<String, Option<PathBuf>>,
}

/// Cheap to clone; how the runtime manager tells the log manager about containers.
#[derive(Clone, Debug)]
pub struct LogHandle {
    cri: CriClient,
    symlink_dir: PathBuf,
    commands: mpsc::Sender<Command>,
}

impl ContainerLogManager {
    pub fn new(
        cri: CriClient,
        policy: RotationPolicy,
        symlink_dir: PathBuf,
    ) -> (ContainerLogManager, LogHandle) {
        let (tx, commands) = mpsc::channel(64);
        let handle = LogHandle {
            cri: cri.clone(),
            symlink_dir: symlink_dir.clone(),
            commands: tx,
        };
        (
            ContainerLogManager {
                cri,
                policy,
                symlink_dir,
                commands,
                log_paths: HashMap::new(),
            },
            handle,
        )
    }

    /// Upstream `Start`: rotate every interval until cancelled.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.policy.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {
                    self.rotate_logs().await;
                    symlink::remove_dangling(&self.cri, &self.symlink_dir).await;
                }
                Some(cmd) = self.commands.recv() => match cmd {
                    Command::Clean { logs, done } => {
                        let _ = done.send(logs.clean(&self.cri, &self.symlink_dir).await);
                    }
                    Command::Started { id, log } => {
                        self.log_paths.insert(id, Some(log));
                    }
                },
            }
        }
    }

    /// Upstream `rotateLogs`: one container's failure does not stop the others.
    async fn rotate_logs(&mut self) {
        let containers = match self
            .cri
            .list_containers(api::ListContainersRequest { filter: None })
            .await
        {
            Ok(r) => r.containers,
            Err(e) => {
                warn!(error = %e, "failed to list containers for log rotation");
                return;
            }
        };
        let running: Vec<&str> = containers
            .iter()
            .filter(|c| c.state == api::ContainerState::ContainerRunning as i32)
            .map(|c| c.id.as_str())
            .collect();
        self.log_paths
            .retain(|id, _| running.contains(&id.as_str()));
        for id in running {
            if let Err(e) = self.process_container(id).await {
                warn!(container_id = %id, error = %e, "failed to rotate container log");
            }
        }
    }

    /// The container's log path (None: it has none), from the runtime the first time.
    async fn log_path(&mut self, id: &str) -> Result<Option<PathBuf>, LogsError> {
        if let Some(p) = self.log_paths.get(id) {
            return Ok(p.clone());
        }
        let status = self
            .cri
            .container_status(api::ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: false,
            })
            .await
            .map_err(|source| LogsError::Cri {
                what: format!("status of container {id}"),
                source,
            })?
            .status;
        let path = status
            .map(|s| s.log_path)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        self.log_paths.insert(id.to_string(), path.clone());
        Ok(path)
    }

    async fn process_container(&mut self, id: &str) -> Result<(), LogsError> {
        let Some(path) = self.log_path(id).await? else {
            return Ok(());
        };
        let size = match tokio::fs::metadata(&path).await {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A rotation whose reopen failed (or a kubelet killed in between) left no live
                // log: ask the runtime to create it again, as upstream does.
                self.reopen(id).await?;
                tokio::fs::metadata(&path)
                    .await
                    .map_err(io_err("stat container log", &path))?
                    .len()
            }
            Err(e) => return Err(io_err("stat container log", &path)(e)),
        };
        if size < self.policy.max_size {
            return Ok(());
        }
        self.rotate_log(id, &path).await
    }

    async fn reopen(&self, id: &str) -> Result<(), LogsError> {
        self.cri
            .reopen_container_log(api::ReopenContainerLogRequest {
                container_id: id.to_string(),
            })
            .await
            .map(|_| ())
            .map_err(|source| LogsError::Cri {
                what: format!("reopen log of container {id}"),
                source,
            })
    }

    /// Upstream `rotateLog`: clean up leftovers, drop the oldest rotated files, gzip the rotated
    /// ones, rotate the live one.
    async fn rotate_log(&self, id: &str, log: &Path) -> Result<(), LogsError> {
        let rotated: Vec<PathBuf> = files_with_prefix(log)
            .await?
            .into_iter()
            .filter(|p| p.as_path() != log && is_rotated_of(p, log))
            .collect();
        let names: Vec<String> = rotated
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let (in_use, unused) = filter_unused_logs(&names);
        for l in unused {
            remove(&l, "remove unused log").await?;
        }
        let (excess, kept) = excess_logs(in_use, self.policy.max_files);
        for l in excess {
            remove(&l, "remove old log").await?;
        }
        // Upstream compresses every rotated file before rotating again, so only the newest
        // rotated file (which a follower may still be reading) stays plain.
        for l in kept.iter().filter(|l| !l.ends_with(COMPRESS_SUFFIX)) {
            compress_log(PathBuf::from(l)).await?;
        }
        let rotated = rotated_name(log, now());
        tokio::fs::rename(log, &rotated)
            .await
            .map_err(io_err("rotate log", log))?;
        if let Err(e) = self.reopen(id).await {
            // Put it back so the next round tries again (upstream does the same).
            if let Err(re) = tokio::fs::rename(&rotated, log).await {
                warn!(rotated = %rotated.display(), log = %log.display(), error = %re,
                    "failed to rename rotated log back");
            }
            return Err(e);
        }
        info!(container_id = %id, log = %log.display(), rotated = %rotated.display(), "rotated container log");
        Ok(())
    }
}

impl LogHandle {
    /// Links the new container's log from the symlink directory (upstream `startContainer`).
    pub async fn container_started(
        &self,
        pod: &str,
        namespace: &str,
        container: &str,
        id: &str,
        log: &Path,
    ) {
        symlink::create(&self.symlink_dir, pod, namespace, container, id, log).await;
        // The rotation then knows the log's path without a ContainerStatus (one CRI call per
        // container, made in the first round after its start, while pods start in a burst).
        // A full queue drops it: the rotation asks the runtime as for an adopted container.
        let _ = self.commands.try_send(Command::Started {
            id: id.to_string(),
            log: log.to_path_buf(),
        });
    }

    /// Removes a container's logs and symlink before the container is removed; through the
    /// manager's task when it runs, directly once it has stopped (or stopped with the command
    /// still queued, which drops it unrun).
    pub async fn container_removed(&self, logs: &LogsToClean) -> Result<(), LogsError> {
        let (done, rx) = oneshot::channel();
        let cmd = Command::Clean {
            logs: logs.clone(),
            done,
        };
        if self.commands.send(cmd).await.is_ok() {
            if let Ok(r) = rx.await {
                return r;
            }
        }
        debug!(container_id = %logs.id(), "log manager not running; cleaning logs directly");
        logs.clean(&self.cri, &self.symlink_dir).await
    }
}

/// Upstream `compressLog`: gzip into `<log>.gz.tmp`, rename to `<log>.gz`, remove `<log>`. An
/// interrupted compression leaves a `.tmp` (or both files), which `filter_unused_logs` cleans up
/// on the next rotation.
async fn compress_log(log: PathBuf) -> Result<(), LogsError> {
    let gz = PathBuf::from(format!("{}{COMPRESS_SUFFIX}", log.display()));
    let tmp = PathBuf::from(format!("{}{TMP_SUFFIX}", gz.display()));
    let (src, t) = (log.clone(), tmp.clone());
    let written = crate::blocking::io(move || {
        let mut input = std::fs::File::open(&src)?;
        let out = std::fs::File::create(&t)?;
        let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        std::io::copy(&mut input, &mut enc)?;
        enc.finish()?.sync_all()
    })
    .await;
    if let Err(e) = written {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(io_err("compress log", &log)(e));
    }
    tokio::fs::rename(&tmp, &gz)
        .await
        .map_err(io_err("rename compressed log", &tmp))?;
    tokio::fs::remove_file(&log)
        .await
        .map_err(io_err("remove compressed log's original", &log))
}

async fn remove(path: &str, what: &'static str) -> Result<(), LogsError> {
    match tokio::fs::remove_file(path).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(what, path)(e)),
        _ => Ok(()),
    }
}

fn now() -> Timestamp {
    let d = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp::new(d.as_secs() as i64, 0).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// `<log>.<YYYYMMDD-hhmmss>`. Upstream formats the node's local time; jiff here has no time zone
/// database, so the stamp is UTC.
pub fn rotated_name(log: &Path, at: Timestamp) -> PathBuf {
    let mut s = log.as_os_str().to_owned();
    s.push(format!(".{}", at.strftime(TIMESTAMP_FORMAT)));
    PathBuf::from(s)
}

/// Whether `p` is `<log>.<something>` (upstream's glob `<log>.*`).
fn is_rotated_of(p: &Path, log: &Path) -> bool {
    let (p, log) = (
        p.as_os_str().as_encoded_bytes(),
        log.as_os_str().as_encoded_bytes(),
    );
    p.len() > log.len() + 1 && p.starts_with(log) && p[log.len()] == b'.'
}

/// Upstream `filterUnusedLogs`: temporary files and logs that also exist compressed are
/// leftovers of an interrupted rotation; the rest is in use.
pub fn filter_unused_logs(logs: &[String]) -> (Vec<String>, Vec<String>) {
    logs.iter().cloned().partition(|l| {
        if l.ends_with(TMP_SUFFIX) {
            return false;
        }
        if l.ends_with(COMPRESS_SUFFIX) {
            return true;
        }
        !logs
            .iter()
            .any(|other| *other == format!("{l}{COMPRESS_SUFFIX}"))
    })
}

/// Upstream `removeExcessLogs`: with the live log and the one about to be rotated, at most
/// `max_files - 2` older rotated files may stay; the oldest go first (sorted by name, which is by
/// time). Returns (to remove, to keep).
pub fn excess_logs(mut logs: Vec<String>, max_files: usize) -> (Vec<String>, Vec<String>) {
    logs.sort();
    let keep = max_files.saturating_sub(2);
    let cut = logs.len().saturating_sub(keep);
    let kept = logs.split_off(cut);
    (logs, kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn unused_logs() {
        let logs = s(&[
            "0.log.20240101-000000.gz",
            "0.log.20240101-000010",
            "0.log.20240101-000010.gz",
            "0.log.20240101-000020.tmp",
            "0.log.20240101-000030",
        ]);
        let (in_use, unused) = filter_unused_logs(&logs);
        assert_eq!(
            in_use,
            s(&[
                "0.log.20240101-000000.gz",
                "0.log.20240101-000010.gz",
                "0.log.20240101-000030"
            ])
        );
        assert_eq!(
            unused,
            s(&["0.log.20240101-000010", "0.log.20240101-000020.tmp"])
        );
    }

    #[test]
    fn excess() {
        let logs = s(&["a.3", "a.1", "a.4", "a.2"]);
        assert_eq!(
            excess_logs(logs.clone(), 5),
            (s(&["a.1"]), s(&["a.2", "a.3", "a.4"]))
        );
        assert_eq!(
            excess_logs(logs.clone(), 2),
            (s(&["a.1", "a.2", "a.3", "a.4"]), s(&[]))
        );
        assert_eq!(
            excess_logs(logs.clone(), 10),
            (s(&[]), s(&["a.1", "a.2", "a.3", "a.4"]))
        );
        assert_eq!(excess_logs(vec![], 5), (s(&[]), s(&[])));
    }

    #[test]
    fn names() {
        let at: Timestamp = "2024-03-05T07:08:09.5Z".parse().unwrap();
        assert_eq!(
            rotated_name(Path::new("/l/c/0.log"), at),
            PathBuf::from("/l/c/0.log.20240305-070809")
        );
        let log = Path::new("/l/c/0.log");
        assert!(is_rotated_of(Path::new("/l/c/0.log.20240305-070809"), log));
        assert!(!is_rotated_of(Path::new("/l/c/0.log"), log));
        assert!(!is_rotated_of(Path::new("/l/c/0.logx"), log));
        assert!(!is_rotated_of(Path::new("/l/c/0.log."), log));
    }
}
