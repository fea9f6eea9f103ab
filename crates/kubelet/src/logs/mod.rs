//! Container logs: the CRI log format, reading logs for `kubectl logs` (upstream
//! `kuberuntime/logs/logs.go` `ReadLogs`), rotation (upstream `pkg/kubelet/logs`
//! `ContainerLogManager`), the `/var/log/containers` symlinks log shippers read
//! (`kuberuntime_container.go` `legacyLogSymlink`) and termination messages
//! (`kuberuntime_container.go` `getTerminationMessage`, `readLastStringFromContainerLogs`).
//!
//! The runtime writes the log files (`<podLogsDir>/<ns>_<name>_<uid>/<container>/<n>.log`); the
//! kubelet only reads, renames and deletes them. Rotated files stay uncompressed: upstream
//! gzips all but the newest rotated file, but no gzip implementation is in our dependency tree.

pub mod format;
pub mod manager;
pub mod reader;
pub mod symlink;
pub mod tail;
pub mod termination;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use format::{LogOptions, PodLogOptions};
pub use manager::{ContainerLogManager, LogHandle, RotationPolicy};
pub use reader::{container_logs, read_logs};
pub use symlink::{ContainerLog, LogsToClean};

pub use kubelet_config::defaults::CONTAINER_LOGS_DIR as DEFAULT_CONTAINER_LOGS_DIR;

/// Errors of the log functions; each names the file or container it concerns.
#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Cri {
        what: String,
        #[source]
        source: rkubelet_cri::CriError,
    },
    #[error("writing logs: {0}")]
    Write(#[source] std::io::Error),
    #[error("watching {}: {source}", path.display())]
    Watch {
        path: PathBuf,
        #[source]
        source: notify::Error,
    },
    /// Upstream's `kubectl logs` errors for a container that has no such instance.
    #[error("{0}")]
    NotFound(String),
    /// The runtime reported no status or an empty log path.
    #[error("container {0} has no log path")]
    NoLogPath(String),
}

pub(crate) fn io_err(
    what: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(std::io::Error) -> LogsError {
    let path = path.into();
    move |source| LogsError::Io { what, path, source }
}
