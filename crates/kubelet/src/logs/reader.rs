//! Reading a container's log for `kubectl logs` (upstream `kuberuntime/logs/logs.go` `ReadLogs`,
//! `kuberuntime_container.go` `GetContainerLogs`, `kubelet_pods.go` `validateContainerLogStatus`),
//! ready for the `/containerLogs` endpoint.
//!
//! Upstream reads the container's current log file only, never the rotated ones, and so do we.
//! When following, upstream reopens the path on any rename event and may lose what the runtime
//! wrote to the old file meanwhile; we notice a rotation by the path's inode changing and switch
//! only after reading the old file to its end.

use std::future::Future;
use std::io::SeekFrom;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::ContainerStatus as ApiContainerStatus;
use notify::Watcher;
use rkubelet_cri::{api, CriClient};
use tokio::fs::File;
use tokio::io::{AsyncBufReadExt, AsyncSeekExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::format::{parse_cri_line, LogOptions, LogWriter, Render};
use super::tail::find_tail_line_start;
use super::{io_err, LogsError};

/// Upstream `logForceCheckPeriod`: look for new data (and whether the container still runs) at
/// least this often, even without a file event.
const FORCE_CHECK_PERIOD: Duration = Duration::from_secs(1);

/// The container ID whose log `kubectl logs [--previous]` shows, from the container's API status
/// (upstream `validateContainerLogStatus`): `previous` is the instance in `lastState`; otherwise
/// the current instance, or the last terminated one while the next has not started.
pub fn log_container_id(
    pod: &str,
    status: &ApiContainerStatus,
    previous: bool,
) -> Result<String, LogsError> {
    let name = &status.name;
    let state = status.state.clone().unwrap_or_default();
    let last = status
        .last_state
        .as_ref()
        .and_then(|l| l.terminated.as_ref())
        .and_then(|t| t.container_id.as_deref())
        .filter(|id| !id.is_empty());
    let terminated =
        || LogsError::NotFound(format!("container {name:?} in pod {pod:?} is terminated"));
    let id = if previous {
        last.ok_or_else(|| {
            LogsError::NotFound(format!(
                "previous terminated container {name:?} in pod {pod:?} not found"
            ))
        })?
    } else if state.running.is_some() {
        status.container_id.as_deref().unwrap_or_default()
    } else if let Some(t) = &state.terminated {
        match t.container_id.as_deref().filter(|id| !id.is_empty()) {
            Some(id) => id,
            None => last.ok_or_else(terminated)?,
        }
    } else if status
        .last_state
        .as_ref()
        .is_some_and(|l| l.terminated.is_some())
    {
        last.ok_or_else(terminated)?
    } else if let Some(w) = &state.waiting {
        let why = match w.reason.as_deref().unwrap_or_default() {
            "ErrImagePull" => "image can't be pulled".to_string(),
            "ImagePullBackOff" => "trying and failing to pull image".to_string(),
            other => other.to_string(),
        };
        return Err(LogsError::NotFound(format!(
            "container {name:?} in pod {pod:?} is waiting to start: {why}"
        )));
    } else {
        return Err(LogsError::NotFound(format!(
            "container {name:?} in pod {pod:?} is waiting to start - no logs yet"
        )));
    };
    // `containerd://<id>` in the API; the runtime wants the bare ID.
    Ok(id.split_once("://").map_or(id, |(_, id)| id).to_string())
}

/// Writes the log of container `id` to `out` (upstream `kubeGenericRuntimeManager.GetContainerLogs`):
/// the log path comes from the runtime's ContainerStatus, so a dead instance is found as long as
/// the runtime keeps it.
pub async fn container_logs<W>(
    cri: &CriClient,
    id: &str,
    opts: &LogOptions,
    out: &mut W,
) -> Result<(), LogsError>
where
    W: AsyncWrite + Unpin,
{
    let status = cri
        .container_status(api::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await
        .map_err(|source| LogsError::Cri {
            what: format!("status of container {id}"),
            source,
        })?
        .status
        .filter(|s| !s.log_path.is_empty())
        .ok_or_else(|| LogsError::NoLogPath(id.to_string()))?;
    read_logs(Path::new(&status.log_path), id, opts, cri, out).await
}

/// Upstream `isContainerRunning`: following stops once the container is no longer running; a
/// container the runtime no longer knows is not running either.
async fn is_running(cri: &CriClient, id: &str) -> Result<bool, LogsError> {
    match cri
        .container_status(api::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await
    {
        Ok(r) => Ok(r
            .status
            .is_some_and(|s| s.state == api::ContainerState::ContainerRunning as i32)),
        Err(e) if e.is_not_found() => Ok(false),
        Err(source) => Err(LogsError::Cri {
            what: format!("status of container {id}"),
            source,
        }),
    }
}

/// Reads the CRI log at `path` into `out` (upstream `ReadLogs`, stdout and stderr to one writer as
/// `kubectl logs` has them). With `follow`, keeps reading until container `id` stops running.
pub async fn read_logs<W>(
    path: &Path,
    id: &str,
    opts: &LogOptions,
    cri: &CriClient,
    out: &mut W,
) -> Result<(), LogsError>
where
    W: AsyncWrite + Unpin,
{
    read_logs_with(path, opts, || is_running(cri, id), out).await
}

/// A directory watch whose events only wake the reader up.
struct DirWatch {
    _watcher: notify::RecommendedWatcher,
    events: mpsc::Receiver<()>,
}

impl DirWatch {
    fn new(dir: &Path) -> Result<DirWatch, LogsError> {
        let (tx, events) = mpsc::channel(1);
        let err = |source| LogsError::Watch {
            path: dir.to_path_buf(),
            source,
        };
        let mut w = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if res.is_ok_and(|ev| !ev.kind.is_access()) {
                // A full channel already holds a wake-up; that is enough.
                let _ = tx.try_send(());
            }
        })
        .map_err(err)?;
        w.watch(dir, notify::RecursiveMode::NonRecursive)
            .map_err(err)?;
        Ok(DirWatch {
            _watcher: w,
            events,
        })
    }
}

/// Whether `path` now names another file than the one open (rotation renamed ours away).
async fn replaced(path: &Path, open: &File) -> bool {
    let (Ok(now), Ok(ours)) = (tokio::fs::metadata(path).await, open.metadata().await) else {
        return true;
    };
    (now.dev(), now.ino()) != (ours.dev(), ours.ino())
}

/// [`read_logs`] with the liveness check as a parameter, so the file handling is testable on its
/// own.
pub async fn read_logs_with<W, F, Fut>(
    path: &Path,
    opts: &LogOptions,
    mut running: F,
    out: &mut W,
) -> Result<(), LogsError>
where
    W: AsyncWrite + Unpin,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, LogsError>>,
{
    // The path may be a symlink (/var/log/containers); follow it once, as upstream.
    let path: PathBuf = tokio::fs::canonicalize(path)
        .await
        .map_err(io_err("resolve log path", path))?;
    let mut file = File::open(&path)
        .await
        .map_err(io_err("open log file", &path))?;
    let start = find_tail_line_start(&mut file, opts.tail)
        .await
        .map_err(io_err("find tail lines in", &path))?;
    file.seek(SeekFrom::Start(start))
        .await
        .map_err(io_err("seek in", &path))?;
    let mut reader = BufReader::new(file);
    let limited = opts.tail.is_some() && !opts.follow;
    let mut lines_left = opts.tail.unwrap_or(0);
    let mut writer = LogWriter::new(opts);
    let mut watch: Option<DirWatch> = None;
    // Whether the container ran at the last check: once it stops, read to the end and return.
    let mut found = true;
    // The path names a new file; switch to it once the old one is read to its end.
    let mut rotated = false;
    let mut stop = false;
    let mut line = Vec::new();
    loop {
        if stop || (limited && lines_left == 0) {
            return out.flush().await.map_err(LogsError::Write);
        }
        reader
            .read_until(b'\n', &mut line)
            .await
            .map_err(io_err("read log file", &path))?;
        if !line.ends_with(b"\n") {
            // End of the file for now. A partial line stays in `line` and is completed by the
            // next read (upstream seeks back instead).
            if opts.follow {
                if rotated {
                    match File::open(&path).await {
                        Ok(f) => {
                            if !line.is_empty() {
                                debug!(path = %path.display(), "dropping unterminated line at log rotation");
                                line.clear();
                            }
                            reader = BufReader::new(f);
                            rotated = false;
                            continue;
                        }
                        // Renamed, not yet reopened by the runtime.
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(io_err("open log file", &path)(e)),
                    }
                }
                if !found {
                    return out.flush().await.map_err(LogsError::Write);
                }
                let Some(w) = watch.as_mut() else {
                    let dir = path.parent().unwrap_or(Path::new("/"));
                    watch = Some(DirWatch::new(dir)?);
                    // Data may have arrived before the watch existed: read again first.
                    continue;
                };
                // Upstream `waitLogs`: no waiting for a container that does not run.
                found = running().await?;
                if found {
                    tokio::select! {
                        _ = w.events.recv() => {}
                        _ = tokio::time::sleep(FORCE_CHECK_PERIOD) => {}
                    }
                }
                if !rotated {
                    rotated = replaced(&path, reader.get_ref()).await;
                }
                continue;
            }
            stop = true;
            if line.is_empty() {
                continue;
            }
            debug!(path = %path.display(), "incomplete line at the end of the log file");
        }
        match parse_cri_line(&line) {
            Ok(msg) => match writer.render(&msg) {
                Render::Skip => {}
                Render::Write { bytes, done } => {
                    out.write_all(&bytes).await.map_err(LogsError::Write)?;
                    if done {
                        out.flush().await.map_err(LogsError::Write)?;
                        return Ok(());
                    }
                }
            },
            Err(e) => {
                // Upstream skips it without counting it as a line.
                warn!(path = %path.display(), error = %e, line = %String::from_utf8_lossy(&line), "failed to parse log line");
                line.clear();
                continue;
            }
        }
        if limited {
            lines_left -= 1;
        }
        line.clear();
        if opts.follow {
            // A follower sees each line as it comes.
            out.flush().await.map_err(LogsError::Write)?;
        }
    }
}
