//! The file operations both managers share, each error naming its path (libcontainer's
//! `cgroups.ReadFile`/`WriteFile`, `RemovePath`, `GetAllPids`, and upstream
//! `pod_container_manager_linux.go` `tryKillingCgroupProcesses`).

use std::collections::BTreeSet;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::Error;

pub(crate) fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The file's contents, or `None` when it is not there (a controller not enabled, an older kernel).
pub(crate) fn read_optional(path: &Path) -> Result<Option<String>, Error> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Reads a file holding one number.
pub(crate) fn read_u64(path: &Path) -> Result<u64, Error> {
    let text = read(path)?;
    text.trim().parse().map_err(|e| Error::Parse {
        path: path.to_path_buf(),
        what: format!("{text:?}: {e}"),
    })
}

/// Like [`read_u64`], `None` when the file is not there.
pub(crate) fn read_u64_optional(path: &Path) -> Result<Option<u64>, Error> {
    match read_optional(path)? {
        None => Ok(None),
        Some(text) => text.trim().parse().map(Some).map_err(|e| Error::Parse {
            path: path.to_path_buf(),
            what: format!("{text:?}: {e}"),
        }),
    }
}

/// Writes `value` to an existing control file (no O_CREAT: on cgroupfs a missing file means a
/// missing controller, and that must fail). In a plain directory tree (the tests' stand-in for the
/// kernel), the missing file is created, as the kernel would have.
pub(crate) fn write(path: &Path, value: &str) -> Result<(), Error> {
    let err = |source| Error::Write {
        path: path.to_path_buf(),
        value: value.to_string(),
        source,
    };
    let file = match std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound && is_plain_dir(path.parent()) => {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(path)
                .map_err(err)?
        }
        Err(e) => return Err(err(e)),
    };
    // One write(2) call: the kernel parses each write on its own.
    (&file).write_all(value.as_bytes()).map_err(err)
}

/// True when `dir` exists and is not on a cgroup filesystem.
fn is_plain_dir(dir: Option<&Path>) -> bool {
    let Some(dir) = dir else { return false };
    match nix::sys::statfs::statfs(dir) {
        Ok(fs) => {
            use nix::sys::statfs::{CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC};
            let magic = fs.filesystem_type();
            magic != CGROUP_SUPER_MAGIC && magic != CGROUP2_SUPER_MAGIC
        }
        Err(_) => false,
    }
}

/// `mkdir -p`: the directories it created, outermost first.
///
/// mkdir first, as std's `create_dir_all`: a pod cgroup's parent tier exists, so the usual
/// case is one mkdir per hierarchy. Stat'ing the directory and its parent first cost two more
/// kernfs path walks per hierarchy per pod (strace: 20 per pod on a v1 node).
pub(crate) fn mkdir_all(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mkdir_err = |d: &Path, source| Error::Mkdir {
        path: d.to_path_buf(),
        source,
    };
    // Deepest first: the directories whose parent was missing.
    let mut pending: Vec<&Path> = Vec::new();
    let mut created = Vec::new();
    let mut cur = dir;
    loop {
        match std::fs::create_dir(cur) {
            Ok(()) => {
                created.push(cur.to_path_buf());
                break;
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => break,
            Err(e) if e.kind() == ErrorKind::NotFound => match cur.parent() {
                Some(p) if !p.as_os_str().is_empty() => {
                    pending.push(cur);
                    cur = p;
                }
                _ => return Err(mkdir_err(cur, e)),
            },
            Err(e) => return Err(mkdir_err(cur, e)),
        }
    }
    for d in pending.into_iter().rev() {
        match std::fs::create_dir(d) {
            Ok(()) => created.push(d.to_path_buf()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(mkdir_err(d, e)),
        }
    }
    Ok(created)
}

/// All directories at and below `dir`, deepest first (a missing `dir` gives none).
fn dirs_deepest_first(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(source) => return Err(Error::Read { path: d, source }),
        };
        for entry in entries.flatten() {
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                stack.push(entry.path());
            }
        }
        out.push(d);
    }
    // A parent is pushed before its children; longer paths first puts every child first.
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    Ok(out)
}

/// Removes `dir` and every cgroup below it, deepest first (libcontainer `RemovePath`). A missing
/// directory is fine. EBUSY (tasks still exiting) is retried with short, growing sleeps.
pub(crate) fn remove_tree(dir: &Path) -> Result<(), Error> {
    for d in dirs_deepest_first(dir)? {
        rmdir_retrying(&d)?;
    }
    Ok(())
}

/// One rmdir, no retry and no walk: true when `dir` is gone (removed now or missing). Any
/// refusal (EBUSY: a process or a child cgroup in it; ENOTEMPTY on a plain tree) is false, and
/// the caller takes the slow path.
pub(crate) fn rmdir_once(dir: &Path) -> bool {
    match std::fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == ErrorKind::NotFound,
    }
}

fn rmdir_retrying(dir: &Path) -> Result<(), Error> {
    let mut delay = Duration::from_millis(10);
    let mut attempt = 0;
    loop {
        attempt += 1;
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc_errno::EBUSY) && attempt < 6 => {
                std::thread::sleep(delay);
                delay *= 2;
            }
            // cgroupfs removes its control files with the directory; only a plain tree (tests)
            // has regular files to remove first.
            Err(e)
                if e.raw_os_error() == Some(libc_errno::ENOTEMPTY)
                    && attempt == 1
                    && is_plain_dir(Some(dir)) =>
            {
                if let Ok(entries) = std::fs::read_dir(dir) {
                    for entry in entries.flatten() {
                        if entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
                            let _ = std::fs::remove_file(entry.path());
                        }
                    }
                }
            }
            Err(source) => {
                return Err(Error::Rmdir {
                    path: dir.to_path_buf(),
                    source,
                })
            }
        }
    }
}

/// errno values used above, from nix so as not to add libc.
mod libc_errno {
    use nix::errno::Errno;
    pub const EBUSY: i32 = Errno::EBUSY as i32;
    pub const ENOTEMPTY: i32 = Errno::ENOTEMPTY as i32;
}

/// The pids in `dir/cgroup.procs`.
fn read_procs(dir: &Path) -> Result<Vec<i32>, Error> {
    let path = dir.join("cgroup.procs");
    let Some(text) = read_optional(&path)? else {
        return Ok(Vec::new());
    };
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.parse().map_err(|e| Error::Parse {
                path: path.clone(),
                what: format!("{l:?}: {e}"),
            })
        })
        .collect()
}

/// The pids in `dir` and every cgroup below it, sorted, without duplicates (libcontainer
/// `GetAllPids`). A missing `dir` has none.
pub(crate) fn pids_recursive(dir: &Path) -> Result<Vec<i32>, Error> {
    let mut pids = BTreeSet::new();
    for d in dirs_deepest_first(dir)? {
        match read_procs(&d) {
            Ok(p) => pids.extend(p),
            // The cgroup went away while we walked.
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(pids.into_iter().collect())
}

/// Names of the directories directly in `dir` (the child cgroups), sorted.
pub(crate) fn child_dirs(dir: &Path) -> Result<Vec<String>, Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(Error::NotFound {
                path: dir.to_path_buf(),
            })
        }
        Err(source) => {
            return Err(Error::Read {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

/// SIGKILLs what `list` returns, a few rounds so that processes forked meanwhile are caught too
/// (upstream `tryKillingCgroupProcesses` retries 5 times). Returns how many distinct pids were
/// signalled. Pids <= 0 and our own pid are never signalled (kill(0) would hit our process group).
pub(crate) fn kill_rounds(
    mut list: impl FnMut() -> Result<Vec<i32>, Error>,
) -> Result<usize, Error> {
    let me = std::process::id() as i32;
    let mut signalled = BTreeSet::new();
    for round in 0..5u32 {
        let pids: Vec<i32> = list()?.into_iter().filter(|&p| p > 0 && p != me).collect();
        if pids.is_empty() {
            break;
        }
        let fresh = pids.iter().any(|p| !signalled.contains(p));
        for pid in pids {
            match kill(Pid::from_raw(pid), Signal::SIGKILL) {
                Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
                Err(source) => return Err(Error::Kill { pid, source }),
            }
            signalled.insert(pid);
        }
        if !fresh {
            // Only processes already signalled, still exiting: give them a moment.
            std::thread::sleep(Duration::from_millis(10 * u64::from(round + 1)));
        }
    }
    Ok(signalled.len())
}

/// A `max`-or-number file (`pids.max`, `memory.max`, `cpu.cfs_quota_us`, ...) as -1 for `max`,
/// or None when the file is absent; one reader for both cgroup versions.
pub(crate) fn read_max_optional(dir: &Path, file: &str) -> Result<Option<i64>, Error> {
    let path = dir.join(file);
    match read_optional(&path)? {
        None => Ok(None),
        Some(text) => crate::stat::parse_max(&text)
            .map(Some)
            .map_err(|what| Error::Parse { path, what }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_creates_only_in_plain_trees_and_names_the_file(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let f = dir.path().join("cpu.shares");
        write(&f, "512")?;
        assert_eq!(std::fs::read_to_string(&f)?, "512");
        write(&f, "2")?;
        assert_eq!(std::fs::read_to_string(&f)?, "2");
        let missing = dir.path().join("nodir/cpu.shares");
        let err = write(&missing, "5")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.starts_with(&format!("write {} = 5: ", missing.display())),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn rmdir_once_is_true_only_when_the_dir_is_gone() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let top = dir.path().join("a");
        std::fs::create_dir_all(top.join("b"))?;
        assert!(!rmdir_once(&top), "a dir with a child dir is refused");
        assert!(top.join("b").is_dir());
        assert!(rmdir_once(&top.join("b")));
        assert!(!top.join("b").exists());
        assert!(rmdir_once(&top.join("b")), "a missing dir is gone");
        assert!(rmdir_once(&top));
        assert!(!top.exists());
        Ok(())
    }

    #[test]
    fn remove_tree_deepest_first_and_missing_is_fine() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let top = dir.path().join("a");
        let created = mkdir_all(&top.join("b/c"))?;
        assert_eq!(created, vec![top.clone(), top.join("b"), top.join("b/c")]);
        assert!(mkdir_all(&top.join("b/c"))?.is_empty());
        std::fs::create_dir(top.join("d"))?;
        std::fs::write(top.join("b/cgroup.procs"), "")?;
        let order = dirs_deepest_first(&top)?;
        assert_eq!(order.last(), Some(&top));
        let pos = |p: &Path| order.iter().position(|x| x == p);
        assert!(pos(&top.join("b/c")) < pos(&top.join("b")));
        remove_tree(&top)?;
        assert!(!top.exists());
        remove_tree(&top)?;
        Ok(())
    }

    #[test]
    fn pids_walk_and_children() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let top = dir.path().join("pod");
        mkdir_all(&top.join("c1"))?;
        mkdir_all(&top.join("c2"))?;
        std::fs::write(top.join("cgroup.procs"), "7\n")?;
        std::fs::write(top.join("c1/cgroup.procs"), "12\n11\n")?;
        std::fs::write(top.join("c2/cgroup.procs"), "11\n")?;
        assert_eq!(pids_recursive(&top)?, vec![7, 11, 12]);
        assert!(pids_recursive(&dir.path().join("gone"))?.is_empty());
        assert_eq!(child_dirs(&top)?, vec!["c1", "c2"]);
        assert!(child_dirs(&dir.path().join("gone"))
            .err()
            .is_some_and(|e| e.is_not_found()));
        std::fs::write(top.join("c2/cgroup.procs"), "x\n")?;
        assert!(matches!(pids_recursive(&top), Err(Error::Parse { .. })));
        Ok(())
    }

    #[test]
    fn kill_rounds_never_signals_zero_or_self() -> Result<(), Box<dyn std::error::Error>> {
        let me = std::process::id() as i32;
        let mut calls = 0;
        let n = kill_rounds(|| {
            calls += 1;
            Ok(vec![0, -1, me])
        })?;
        assert_eq!((n, calls), (0, 1));
        Ok(())
    }
}
