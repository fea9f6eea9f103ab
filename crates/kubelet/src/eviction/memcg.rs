//! The memory fast path with `kernelMemcgNotification` (upstream `memory_threshold_notifier.go`
//! and `threshold_notifier_linux.go`): a cgroup v1 memory threshold on `memory.usage_in_bytes`,
//! registered through `cgroup.event_control` with an eventfd the kernel signals when usage
//! crosses it. The threshold is re-derived every pass from the current figures, as upstream's
//! `UpdateThreshold`: capacity less the eviction threshold, plus the inactive file pages the
//! working set leaves out. cgroup v2 has no such interface; creating one fails there, as
//! upstream's does, and the manager keeps its 1 s poll.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use tokio::io::unix::AsyncFd;

/// Where the cgroup v1 memory hierarchy is mounted.
pub const MEMORY_HIERARCHY: &str = "/sys/fs/cgroup/memory";

/// One registered threshold: the eventfd (the registration goes when it is closed) and the
/// usage file it watches.
pub struct MemcgThreshold {
    efd: AsyncFd<OwnedFd>,
    _usage: File,
    pub cgroup: PathBuf,
    pub threshold: u64,
}

impl MemcgThreshold {
    /// Upstream `NewCgroupNotifier`: eventfd, `memory.usage_in_bytes`, and
    /// `<efd> <usage fd> <threshold>` written to `cgroup.event_control`.
    pub fn new(cgroup: &Path, threshold: u64) -> io::Result<MemcgThreshold> {
        let usage = File::open(cgroup.join("memory.usage_in_bytes"))?;
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor we own.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` was just returned by eventfd and is owned by nothing else.
        let efd = unsafe { OwnedFd::from_raw_fd(raw) };
        std::fs::write(
            cgroup.join("cgroup.event_control"),
            format!("{} {} {threshold}", efd.as_raw_fd(), usage.as_raw_fd()),
        )?;
        // SAFETY: the eventfd is owned by the AsyncFd from here on and closed only with it.
        let efd = unsafe { AsyncFd::register_with_interest(efd, tokio::io::Interest::READABLE) }?;
        Ok(MemcgThreshold {
            efd,
            _usage: usage,
            cgroup: cgroup.to_path_buf(),
            threshold,
        })
    }

    /// Waits until the kernel signals a crossing (either way, as memcg thresholds do).
    pub async fn crossed(&self) -> io::Result<()> {
        loop {
            let mut guard = self.efd.readable().await?;
            let res = guard.try_io(|fd| {
                let mut buf = [0u8; 8];
                // SAFETY: reads at most 8 bytes into a buffer of 8.
                let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            match res {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }
}

/// Upstream `UpdateThreshold`'s figure: the usage at which available memory falls under the
/// eviction threshold, `capacity - threshold + inactive_file`; None when the threshold is larger
/// than the capacity.
pub fn usage_threshold(capacity: u64, eviction_threshold: u64, inactive_file: u64) -> Option<u64> {
    capacity
        .checked_sub(eviction_threshold)
        .map(|t| t.saturating_add(inactive_file))
}

/// `memory.usage_in_bytes` and `total_inactive_file` of a v1 memory cgroup.
pub fn usage_and_inactive(cgroup: &Path) -> io::Result<(u64, u64)> {
    let parse = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    };
    let usage = parse(&std::fs::read_to_string(
        cgroup.join("memory.usage_in_bytes"),
    )?)?;
    let stat = std::fs::read_to_string(cgroup.join("memory.stat"))?;
    let inactive = stat
        .lines()
        .find_map(|l| l.strip_prefix("total_inactive_file "))
        .map(parse)
        .transpose()?
        .unwrap_or(0);
    Ok((usage, inactive))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_threshold_as_upstream() {
        const MI: u64 = 1 << 20;
        assert_eq!(
            usage_threshold(1000 * MI, 100 * MI, 300 * MI),
            Some(1200 * MI)
        );
        assert_eq!(usage_threshold(100 * MI, 200 * MI, 0), None);
    }

    #[tokio::test]
    async fn a_threshold_on_a_real_cgroup_fires_when_crossed() {
        // Needs the v1 memory hierarchy and root; this machine has both (the test fails,
        // rather than skips, elsewhere: say so clearly).
        let root = Path::new(MEMORY_HIERARCHY);
        assert!(
            root.join("cgroup.event_control").exists(),
            "no cgroup v1 memory hierarchy at {MEMORY_HIERARCHY}"
        );
        let dir = root.join(format!("rkt-memcg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create a memory cgroup");
        // A threshold 1 MiB above the (empty) cgroup's usage; a shell that moves itself in and
        // builds a 4 MB string crosses it.
        let (usage, _) = usage_and_inactive(&dir).unwrap();
        let t = MemcgThreshold::new(&dir, usage + (1 << 20)).expect("register a threshold");
        let script = format!(
            "echo $$ > {}/cgroup.procs; x=$(head -c 4000000 /dev/zero | tr '\\0' a); echo ${{#x}}",
            dir.display()
        );
        let filler = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        let fired = tokio::time::timeout(std::time::Duration::from_secs(10), t.crossed()).await;
        drop(t);
        let _ = std::fs::remove_dir(&dir);
        assert!(filler.status.success(), "{filler:?}");
        assert_eq!(String::from_utf8_lossy(&filler.stdout).trim(), "4000000");
        assert!(matches!(fired, Ok(Ok(()))), "no notification: {fired:?}");
    }
}
