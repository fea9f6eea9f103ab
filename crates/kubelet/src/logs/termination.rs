//! Termination messages (upstream `kuberuntime_container.go`: the termination-log part of
//! `makeMounts`, `getTerminationMessage`, `readLastStringFromContainerLogs`; limits from
//! `kubecontainer`).
//!
//! Each container instance gets an empty file of its own under the pod directory, bind-mounted at
//! `terminationMessagePath`. When the container has exited, what it wrote there becomes the
//! message of its terminated state; with `FallbackToLogsOnError`, a failed container that wrote
//! nothing gets the tail of its log instead.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};
use rkubelet_cri::api;
use tracing::warn;

use super::format::LogOptions;
use super::reader::read_logs_with;
use super::tail::read_at_most;
use crate::podutil;
use crate::types::labels;

/// Upstream `MaxContainerTerminationMessageLength`: what is read from the file (its end).
pub const MAX_MESSAGE_LENGTH: u64 = 4 * 1024;
/// Upstream `MaxContainerTerminationMessageLogLength`: what is kept of the log tail (its end).
pub const MAX_MESSAGE_LOG_LENGTH: usize = 2 * 1024;
/// Upstream `MaxContainerTerminationMessageLogLines`.
pub const MAX_MESSAGE_LOG_LINES: u64 = 80;
/// Upstream `MaxPodTerminationMessageLogLength`: shared by all containers of a pod in its status.
pub const MAX_POD_MESSAGE_LENGTH: usize = 12 * 1024;
/// Upstream `TerminationMessageFallbackToLogsOnError`.
pub const FALLBACK_TO_LOGS_ON_ERROR: &str = "FallbackToLogsOnError";

/// Upstream `getPodContainerDir`: `<root-dir>/pods/<uid>/containers/<name>`.
pub fn pod_container_dir(root_dir: &Path, pod: &Pod, container: &str) -> PathBuf {
    root_dir
        .join("pods")
        .join(podutil::uid(pod))
        .join("containers")
        .join(container)
}

/// Creates this instance's empty termination-log file, mode 0666 so any container user can write
/// it, and returns its path; None when the container has no `terminationMessagePath`. A failure
/// is logged and the container runs without the mount, as upstream.
pub async fn create_file(root_dir: &Path, pod: &Pod, c: &Container) -> Option<PathBuf> {
    c.termination_message_path
        .as_ref()
        .filter(|p| !p.is_empty())?;
    let dir = pod_container_dir(root_dir, pod, &c.name);
    // The pod and container name make the directory unique; a random ID tells instances apart.
    let path = dir.join(format!("{:08x}", fastrand::u32(..)));
    let file = path.clone();
    let made = crate::blocking::io(move || {
        std::fs::create_dir_all(&dir)?;
        std::fs::File::create(&file)?;
        // Set after creation: the umask applies to the mode given to open(2).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666))
    });
    match made.await {
        Ok(()) => Some(path),
        Err(e) => {
            warn!(path = %path.display(), error = %e, "error on creating termination-log file");
            None
        }
    }
}

/// The message for an exited container from its CRI status (upstream: the termination part of
/// `toKubeContainerStatus`); empty when there is none.
pub async fn message(status: &api::ContainerStatus) -> String {
    let ann = &status.annotations;
    let path = ann
        .get(labels::TERMINATION_MESSAGE_PATH)
        .map(String::as_str)
        .unwrap_or_default();
    let policy = ann
        .get(labels::TERMINATION_MESSAGE_POLICY)
        .map(String::as_str)
        .unwrap_or_default();
    // A container that could not even start has no logs to fall back to.
    let fallback = policy == FALLBACK_TO_LOGS_ON_ERROR
        && status.exit_code != 0
        && status.reason != "ContainerCannotRun";
    let (msg, check_logs) = from_file(status, path, fallback).await;
    if check_logs {
        last_log_string(Path::new(&status.log_path)).await
    } else {
        msg
    }
}

/// Upstream `getTerminationMessage`: the file is found through the mount at `path`.
async fn from_file(status: &api::ContainerStatus, path: &str, fallback: bool) -> (String, bool) {
    if path.is_empty() {
        return (String::new(), fallback);
    }
    let Some(m) = status.mounts.iter().find(|m| m.container_path == path) else {
        return (String::new(), fallback);
    };
    match read_at_most(Path::new(&m.host_path), MAX_MESSAGE_LENGTH).await {
        Ok((data, _)) => {
            let empty = data.is_empty();
            (
                String::from_utf8_lossy(&data).into_owned(),
                fallback && empty,
            )
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), fallback),
        Err(e) => (
            format!("Error on reading termination log {}: {e}", m.host_path),
            false,
        ),
    }
}

/// Upstream `readLastStringFromContainerLogs`: the last 80 lines, of which the last 2 KiB.
pub async fn last_log_string(log: &Path) -> String {
    let opts = LogOptions {
        tail: Some(MAX_MESSAGE_LOG_LINES),
        ..Default::default()
    };
    let mut buf = Vec::new();
    if let Err(e) = read_logs_with(log, &opts, || async { Ok(false) }, &mut buf).await {
        return format!("Error on reading termination message from logs: {e}");
    }
    let start = buf.len().saturating_sub(MAX_MESSAGE_LOG_LENGTH);
    String::from_utf8_lossy(&buf[start..]).into_owned()
}

/// Upstream appends the message to the runtime's own, separated by `": "`.
pub fn append(runtime_message: &str, termination: &str) -> String {
    match (runtime_message.is_empty(), termination.is_empty()) {
        (_, true) => runtime_message.to_string(),
        (true, false) => termination.to_string(),
        (false, false) => format!("{runtime_message}: {termination}"),
    }
}

/// Cuts `s` to at most `max` bytes at a character boundary (upstream cuts bytes; invalid UTF-8
/// would be replaced in the API anyway).
pub fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
}
