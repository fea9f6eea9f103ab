//! Disk usage of a directory tree (upstream's `fs.DiskUsage`, the `du` behind its volume and log
//! metrics) and the capacity of the filesystem holding a path (`statvfs`).

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What a tree uses on disk: allocated bytes (blocks, as `du` counts, so sparse files count what
/// they occupy) and distinct inodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    pub bytes: u64,
    pub inodes: u64,
}

impl std::ops::Add for DiskUsage {
    type Output = DiskUsage;
    fn add(self, o: DiskUsage) -> DiskUsage {
        DiskUsage {
            bytes: self.bytes + o.bytes,
            inodes: self.inodes + o.inodes,
        }
    }
}

/// Errors measuring a path, naming it.
#[derive(Debug, thiserror::Error)]
#[error("{what} {path}: {source}")]
pub struct FsError {
    pub what: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Walks `root` without following symlinks and without leaving its filesystem (a mount inside a
/// volume is another volume's usage), counting hard-linked inodes once. Entries that vanish or
/// cannot be read during the walk are skipped, as a running pod changes its files under us; only
/// an unreadable `root` is an error. Blocking: run it off the async workers.
pub fn disk_usage(root: &Path) -> Result<DiskUsage, FsError> {
    let meta = std::fs::symlink_metadata(root).map_err(|source| FsError {
        what: "stat",
        path: root.to_path_buf(),
        source,
    })?;
    let dev = meta.dev();
    let mut seen = HashSet::new();
    let mut usage = DiskUsage::default();
    let mut count = |m: &std::fs::Metadata, usage: &mut DiskUsage| {
        if seen.insert(m.ino()) {
            usage.bytes += m.blocks() * 512;
            usage.inodes += 1;
        }
    };
    count(&meta, &mut usage);
    if !meta.is_dir() {
        return Ok(usage);
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.dev() != dev {
                continue;
            }
            count(&m, &mut usage);
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    Ok(usage)
}

/// A filesystem's size and free space.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsInfo {
    pub capacity_bytes: u64,
    pub available_bytes: u64,
    pub free_bytes: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// The filesystem holding `path`.
pub fn fs_info(path: &Path) -> Result<FsInfo, FsError> {
    let v = nix::sys::statvfs::statvfs(path).map_err(|e| FsError {
        what: "statvfs",
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    let frag = v.fragment_size() as u64;
    Ok(FsInfo {
        capacity_bytes: v.blocks() as u64 * frag,
        available_bytes: v.blocks_available() as u64 * frag,
        free_bytes: v.blocks_free() as u64 * frag,
        inodes: v.files() as u64,
        inodes_free: v.files_free() as u64,
    })
}

/// Whether `path` is on a tmpfs: an emptyDir of medium Memory, whose pages are memory, not
/// ephemeral storage (upstream `IsLocalEphemeralVolume` leaves those out).
pub fn is_tmpfs(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn du_counts_blocks_and_inodes_once_per_hard_link_and_skips_symlink_targets() {
        let tmp = tempfile::tempdir().unwrap();
        let empty = disk_usage(tmp.path()).unwrap();
        assert_eq!(empty.inodes, 1);
        std::fs::create_dir(tmp.path().join("sub")).unwrap();
        let mut f = std::fs::File::create(tmp.path().join("sub/data")).unwrap();
        f.write_all(&vec![7u8; 1 << 20]).unwrap();
        f.sync_all().unwrap();
        std::fs::hard_link(tmp.path().join("sub/data"), tmp.path().join("link")).unwrap();
        // A symlink to a big tree outside counts as the link itself only.
        std::os::unix::fs::symlink("/usr", tmp.path().join("usr")).unwrap();
        let u = disk_usage(tmp.path()).unwrap();
        // root, sub, data (twice linked), the symlink.
        assert_eq!(u.inodes, 4, "{u:?}");
        assert!(
            u.bytes >= 1 << 20 && u.bytes < (1 << 20) + (64 << 10),
            "{u:?}"
        );
        // A sparse file counts what it occupies, not its length.
        let sparse = std::fs::File::create(tmp.path().join("sparse")).unwrap();
        sparse.set_len(1 << 30).unwrap();
        let s = disk_usage(tmp.path()).unwrap();
        assert!(s.bytes < u.bytes + (64 << 10), "{u:?} -> {s:?}");
        assert_eq!(s.inodes, 5);
        let file = disk_usage(&tmp.path().join("sub/data")).unwrap();
        assert_eq!(file.inodes, 1);
        assert!(disk_usage(&tmp.path().join("missing")).is_err());
    }

    #[test]
    fn fs_info_of_tmp() {
        let i = fs_info(Path::new("/tmp")).unwrap();
        assert!(
            i.capacity_bytes > 0 && i.capacity_bytes >= i.available_bytes,
            "{i:?}"
        );
        assert!(i.inodes > 0 || i.capacity_bytes > 0);
        assert!(fs_info(Path::new("/nonexistent/x")).is_err());
        assert!(is_tmpfs(Path::new("/dev/shm")));
    }
}
