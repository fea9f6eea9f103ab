//! The `/var/log/containers/<pod>_<ns>_<container>-<id>.log` symlinks node log shippers
//! (fluentd, fluent-bit, promtail) read (upstream `kuberuntime_container.go` `legacyLogSymlink`,
//! `removeContainerLog`, and the dangling-symlink part of `kuberuntime_gc.go`).

use std::path::{Path, PathBuf};

use rkubelet_cri::{api, CriClient};
use tracing::{debug, warn};

use super::{io_err, LogsError};
use crate::types::labels;

/// Upstream `legacyLogSuffix`.
const SUFFIX: &str = ".log";
/// A file name may not be longer on ext4; upstream cuts the name to fit.
const EXT4_MAX_FILE_NAME_LEN: usize = 255;

/// Upstream `logSymlink`: `<dir>/<pod>_<ns>_<container>-<id>.log`, cut to 255 bytes.
pub fn symlink_path(dir: &Path, pod: &str, namespace: &str, container: &str, id: &str) -> PathBuf {
    let mut name = format!("{pod}_{namespace}_{container}-{id}");
    let max = EXT4_MAX_FILE_NAME_LEN - SUFFIX.len();
    if name.len() > max {
        let mut cut = max;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
    }
    name.push_str(SUFFIX);
    dir.join(name)
}

/// The container ID a symlink name ends with (upstream `getContainerIDFromLegacyLogSymlink`): the
/// part after the last `-`, at least 6 characters as runtimes accept short IDs.
pub fn container_id_of(symlink: &str) -> Option<&str> {
    let id = symlink.rsplit('-').next()?.strip_suffix(SUFFIX)?;
    (id.len() >= 6).then_some(id)
}

/// Links `log` from `dir` after a container started. As upstream, no link is made to a log that
/// does not exist (it would dangle), and a failure is logged, not fatal.
pub async fn create(dir: &Path, pod: &str, namespace: &str, container: &str, id: &str, log: &Path) {
    let link = symlink_path(dir, pod, namespace, container, id);
    let (target, at) = (log.to_path_buf(), link.clone());
    let made = crate::blocking::io(move || {
        match std::fs::symlink_metadata(&target) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            _ => {}
        }
        std::os::unix::fs::symlink(&target, &at)
    });
    if let Err(e) = made.await {
        warn!(path = %link.display(), container_id = %id, log = %log.display(), error = %e,
            "failed to create container log symlink");
    }
}

async fn remove_if_present(path: &Path, what: &'static str) -> Result<(), LogsError> {
    match tokio::fs::remove_file(path).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(what, path)(e)),
        _ => Ok(()),
    }
}

/// What finds a container's log files and its symlink: its CRI `log_path` and the names its
/// labels carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerLog {
    pub id: String,
    /// The live log (CRI `ContainerStatus.log_path`); empty: no files to remove.
    pub log_path: String,
    pub pod_name: String,
    pub pod_namespace: String,
    pub container_name: String,
}

/// Which container's logs to clean before it is removed, and how its files are found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogsToClean {
    /// Only the id: the runtime is asked for the log path and names, as upstream always does
    /// (container GC, a replaced start: callers with no read of the container in hand).
    Lookup(String),
    /// What the caller's own read of the container showed; no CRI call.
    Known(ContainerLog),
}

impl LogsToClean {
    pub fn id(&self) -> &str {
        match self {
            LogsToClean::Lookup(id) => id,
            LogsToClean::Known(log) => &log.id,
        }
    }

    /// Removes the container's log files and symlink ([`clean`] or [`clean_known`]).
    pub async fn clean(&self, cri: &CriClient, dir: &Path) -> Result<(), LogsError> {
        match self {
            LogsToClean::Lookup(id) => clean(cri, dir, id).await,
            LogsToClean::Known(log) => clean_known(dir, log).await,
        }
    }
}

/// Removes a container's log files (the live one and every rotated one) and its symlink before
/// the container itself is removed (upstream `containerLogManager.Clean` + `removeContainerLog`).
/// A container the runtime no longer knows has nothing left to find its files by.
///
/// Upstream asks the runtime for the container's status twice here (once for the log path,
/// once for the symlink's names); a caller that read the pod already passes what it read to
/// [`clean_known`] and asks nothing.
pub async fn clean(cri: &CriClient, dir: &Path, id: &str) -> Result<(), LogsError> {
    let status = match cri
        .container_status(api::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await
    {
        Ok(r) => r.status,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(source) => {
            return Err(LogsError::Cri {
                what: format!("status of container {id}"),
                source,
            })
        }
    };
    let Some(status) = status else { return Ok(()) };
    let l = &status.labels;
    let get = |k: &str| l.get(k).cloned().unwrap_or_default();
    let log = ContainerLog {
        id: id.to_string(),
        log_path: status.log_path,
        pod_name: get(labels::POD_NAME),
        pod_namespace: get(labels::POD_NAMESPACE),
        container_name: get(labels::CONTAINER_NAME),
    };
    clean_known(dir, &log).await
}

/// [`clean`] with the names and path already known.
pub async fn clean_known(dir: &Path, log: &ContainerLog) -> Result<(), LogsError> {
    if !log.log_path.is_empty() {
        for f in files_with_prefix(Path::new(&log.log_path)).await? {
            remove_if_present(&f, "remove container log").await?;
        }
    }
    let link = symlink_path(
        dir,
        &log.pod_name,
        &log.pod_namespace,
        &log.container_name,
        &log.id,
    );
    remove_if_present(&link, "remove container log symlink").await
}

/// `<log>*`: the live log and its rotated siblings (upstream globs the same pattern).
pub(crate) async fn files_with_prefix(log: &Path) -> Result<Vec<PathBuf>, LogsError> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name().and_then(|n| n.to_str())) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let mut entries = match tokio::fs::read_dir(dir).await {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io_err("list log directory", dir)(e)),
    };
    while let Some(e) = entries
        .next_entry()
        .await
        .map_err(io_err("list log directory", dir))?
    {
        if e.file_name().to_str().is_some_and(|n| n.starts_with(name)) {
            out.push(e.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Removes symlinks whose log is gone, unless their container still runs (its log is missing
/// only for the moment between a rotation's rename and the runtime reopening it). Upstream's
/// container GC does this; we have no container GC yet, so the log manager does it each round.
pub async fn remove_dangling(cri: &CriClient, dir: &Path) {
    let mut entries = match tokio::fs::read_dir(dir).await {
        Ok(e) => e,
        Err(e) => {
            debug!(dir = %dir.display(), error = %e, "cannot list container log symlinks");
            return;
        }
    };
    while let Ok(Some(e)) = entries.next_entry().await {
        let path = e.path();
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if !name.ends_with(SUFFIX) || tokio::fs::metadata(&path).await.is_ok() {
            continue;
        }
        if let Some(id) = container_id_of(&name) {
            let st = cri
                .container_status(api::ContainerStatusRequest {
                    container_id: id.to_string(),
                    verbose: false,
                })
                .await;
            if let Ok(Some(s)) = st.map(|r| r.status) {
                if s.state != api::ContainerState::ContainerExited as i32 {
                    continue;
                }
            }
        }
        match tokio::fs::remove_file(&path).await {
            Ok(()) => debug!(path = %path.display(), "removed dangling container log symlink"),
            Err(e) => {
                warn!(path = %path.display(), error = %e, "failed to remove dangling container log symlink")
            }
        }
    }
}
