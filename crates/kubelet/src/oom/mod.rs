//! The OOM watcher (upstream `pkg/kubelet/oom`, over cadvisor's `oomparser`): reads the kernel
//! log from `/dev/kmsg` and records a `SystemOOM` Warning event on the Node for every system-wide
//! OOM kill, with upstream's message. Container OOM kills are not its business: their
//! `OOMKilled` reasons come from the runtime. Reading starts at the end of the log, so kills from
//! before the kubelet started are not reported again (cadvisor replays the whole ring buffer).

pub mod parser;

use std::os::fd::OwnedFd;

use tokio::io::unix::AsyncFd;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::events::{self, EventType, Recorder};
use parser::{kmsg_message, OomParser};

/// The kernel log device.
pub const KMSG: &str = "/dev/kmsg";

/// Runs until cancelled. `/dev/kmsg` not being readable (no CAP_SYSLOG, a container without
/// it) is one warning line; the kubelet goes on without system OOM events.
pub async fn watch(recorder: Recorder, cancel: CancellationToken) {
    watch_device(KMSG, recorder, cancel).await
}

async fn watch_device(device: &str, recorder: Recorder, cancel: CancellationToken) {
    let fd = match open_at_end(device) {
        Ok(fd) => fd,
        Err(e) => {
            warn!(device, error = %e, "cannot read the kernel log; system OOM kills will not be reported as SystemOOM events");
            cancel.cancelled().await;
            return;
        }
    };
    info!(
        device = KMSG,
        "watching the kernel log for system OOM kills"
    );
    tokio::select! {
        _ = cancel.cancelled() => {}
        () = read_loop(fd, recorder) => {}
    }
}

fn open_at_end(path: &str) -> std::io::Result<AsyncFd<OwnedFd>> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::Mode;
    let fd = open(
        path,
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // SEEK_END on /dev/kmsg: the next read returns the next record the kernel writes.
    nix::unistd::lseek(&fd, 0, nix::unistd::Whence::SeekEnd)?;
    // `new` is deprecated because an arbitrary `AsRawFd` may close or swap its descriptor; an
    // `OwnedFd` owned by the AsyncFd cannot, which is what `register`'s safety contract asks.
    #[allow(deprecated)]
    AsyncFd::with_interest(fd, tokio::io::Interest::READABLE)
}

async fn read_loop(fd: AsyncFd<OwnedFd>, recorder: Recorder) {
    let mut parser = OomParser::default();
    // A record is at most about 8 KiB (the kernel's CONSOLE_EXT_LOG_MAX).
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let mut guard = match fd.readable().await {
            Ok(g) => g,
            Err(e) => {
                warn!(device = KMSG, error = %e, "kernel log not pollable; system OOM kills will not be reported");
                return;
            }
        };
        match guard.try_io(|inner| {
            nix::unistd::read(inner.get_ref(), &mut buf).map_err(std::io::Error::from)
        }) {
            Err(_would_block) => continue,
            Ok(Ok(0)) => continue,
            Ok(Ok(n)) => {
                let record = String::from_utf8_lossy(&buf[..n]);
                let Some(message) = kmsg_message(&record) else {
                    continue;
                };
                if let Some(oom) = parser.feed(message) {
                    handle(&oom, &recorder);
                }
            }
            // EPIPE: records were overwritten before we read them; reading goes on.
            Ok(Err(e)) if e.raw_os_error() == Some(nix::libc::EPIPE) => {
                debug!(
                    device = KMSG,
                    "kernel log records were overwritten before being read"
                );
            }
            Ok(Err(e)) if e.raw_os_error() == Some(nix::libc::EINTR) => {}
            Ok(Err(e)) => {
                warn!(device = KMSG, error = %e, "cannot read the kernel log any more; system OOM kills will not be reported");
                return;
            }
        }
    }
}

fn handle(oom: &parser::OomInstance, recorder: &Recorder) {
    if oom.is_system_oom() {
        info!(pid = oom.pid, process = %oom.process_name, task_memcg = %oom.container_name, "system OOM kill");
        recorder.node_event(EventType::Warning, events::SYSTEM_OOM, oom.event_message());
    } else {
        // Upstream reports only system-wide OOMs; a cgroup that hit its own limit is not one.
        info!(pid = oom.pid, process = %oom.process_name, oom_memcg = %oom.victim_container_name,
            task_memcg = %oom.container_name, "OOM kill inside a memory cgroup (not a system OOM)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unreadable_kernel_log_is_not_fatal() {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(watch_device(
            "/nonexistent/kmsg",
            Recorder::disabled(),
            cancel.clone(),
        ));
        tokio::task::yield_now().await;
        assert!(!task.is_finished(), "it waits for the kubelet to stop");
        cancel.cancel();
        task.await.expect("no panic");
    }
}
