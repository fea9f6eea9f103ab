//! Safe subPath handling (upstream `pkg/volume/util/subpath/subpath_linux.go` `SafeMakeDir` and
//! `PrepareSafeSubpath`'s checks): a subPath may use symlinks inside its volume, but whatever it
//! resolves to must stay inside the volume, or a pod could mount any host path through a link
//! it planted in its own emptyDir.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Why a subPath cannot be used; becomes a `CreateContainerConfigError` message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SubPathError {
    #[error("error SubPath `{0}` must not be an absolute path")]
    Absolute(String),
    #[error("unable to provision SubPath `{0}`: must not contain '..'")]
    Backsteps(String),
    #[error("path {path} is outside of allowed base {base}")]
    OutsideBase { path: String, base: String },
    #[error("subpath {path:?} not within volume path {volume:?}")]
    NotWithinVolume { path: String, volume: String },
    #[error("{what} {path}: {message}")]
    Io {
        what: &'static str,
        path: String,
        message: String,
    },
}

fn io_err(what: &'static str, path: &Path, e: std::io::Error) -> SubPathError {
    SubPathError::Io {
        what,
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Upstream `makeMounts`' checks before anything touches the disk: relative, no `..`
/// (`ValidatePathNoBacksteps`).
pub fn validate(sub_path: &str) -> Result<(), SubPathError> {
    let p = Path::new(sub_path);
    if p.is_absolute() {
        return Err(SubPathError::Absolute(sub_path.to_string()));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(SubPathError::Backsteps(sub_path.to_string()));
    }
    Ok(())
}

/// The subPath's host path: created as directories with the volume's mode when missing (upstream
/// `SafeMakeDir`), then resolved through its symlinks and refused unless it is still inside the
/// volume (upstream `doBindSubPath`'s `PathWithinBase` check). Returns the resolved volume root
/// and the resolved subPath.
pub fn resolve(volume_path: &Path, sub_path: &str) -> Result<(PathBuf, PathBuf), SubPathError> {
    validate(sub_path)?;
    let base = std::fs::canonicalize(volume_path)
        .map_err(|e| io_err("resolve volume path", volume_path, e))?;
    let target = volume_path.join(sub_path);
    if std::fs::metadata(&target).is_err() {
        let perm = std::fs::metadata(volume_path)
            .map_err(|e| io_err("stat", volume_path, e))?
            .permissions()
            .mode()
            & 0o7777;
        safe_make_dir(&base, sub_path, perm)?;
    }
    let resolved = std::fs::canonicalize(&target).map_err(|e| io_err("resolve", &target, e))?;
    if !resolved.starts_with(&base) {
        return Err(SubPathError::NotWithinVolume {
            path: resolved.display().to_string(),
            volume: volume_path.display().to_string(),
        });
    }
    Ok((base, resolved))
}

/// Upstream `PrepareSafeSubpath`: [`resolve`], then pin the result by opening it (`O_PATH`,
/// no symlink at the end), check where the open file really is, and bind-mount that open file
/// onto `target` (`<pod>/volume-subpaths/<volume>/<container>/<index>`). The runtime mounts
/// `target`, so swapping a path component for a symlink after the check gains nothing. A
/// `target` already mounted (a restarted container, a restarted kubelet) is reused.
pub fn prepare(volume_path: &Path, sub_path: &str, target: &Path) -> Result<PathBuf, SubPathError> {
    use nix::mount::{mount, MsFlags};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;

    let (base, resolved) = resolve(volume_path, sub_path)?;
    if super::mounted_fs_type(target).ok().flatten().is_some() {
        return Ok(target.to_path_buf());
    }
    let pinned = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_flags::O_PATH | libc_flags::O_NOFOLLOW)
        .open(&resolved)
        .map_err(|e| io_err("open", &resolved, e))?;
    let fd_path = PathBuf::from(format!("/proc/self/fd/{}", pinned.as_raw_fd()));
    let real = std::fs::read_link(&fd_path).map_err(|e| io_err("read", &fd_path, e))?;
    if !real.starts_with(&base) {
        return Err(SubPathError::NotWithinVolume {
            path: real.display().to_string(),
            volume: volume_path.display().to_string(),
        });
    }
    let is_dir = pinned
        .metadata()
        .map_err(|e| io_err("stat", &resolved, e))?
        .is_dir();
    let parent = target.parent().unwrap_or(target);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(parent)
        .map_err(|e| io_err("create directory", parent, e))?;
    let made = if is_dir {
        std::fs::DirBuilder::new().mode(0o750).create(target)
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o640)
            .open(target)
            .map(drop)
    };
    match made {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err("create subPath mount point", target, e)),
    }
    mount(
        Some(&fd_path),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| SubPathError::Io {
        what: "bind-mount subPath onto",
        path: target.display().to_string(),
        message: e.to_string(),
    })?;
    Ok(target.to_path_buf())
}

/// `open(2)` flags std does not name.
mod libc_flags {
    pub const O_PATH: i32 = nix::fcntl::OFlag::O_PATH.bits();
    pub const O_NOFOLLOW: i32 = nix::fcntl::OFlag::O_NOFOLLOW.bits();
}

/// Upstream `doSafeMakeDir`: the longest existing prefix must resolve inside `base`; each missing
/// component is then created below that resolved directory and checked to be a real directory
/// (not a symlink someone swapped in), and given `perm` despite the umask.
fn safe_make_dir(base: &Path, sub_path: &str, perm: u32) -> Result<(), SubPathError> {
    let comps: Vec<&std::ffi::OsStr> = Path::new(sub_path)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s),
            _ => None,
        })
        .collect();
    let mut existing = base.to_path_buf();
    let mut i = 0;
    while i < comps.len() && std::fs::metadata(existing.join(comps[i])).is_ok() {
        existing.push(comps[i]);
        i += 1;
    }
    let mut dir = std::fs::canonicalize(&existing).map_err(|e| io_err("resolve", &existing, e))?;
    if !dir.starts_with(base) {
        return Err(SubPathError::OutsideBase {
            path: dir.display().to_string(),
            base: base.display().to_string(),
        });
    }
    for c in &comps[i..] {
        dir.push(c);
        std::fs::DirBuilder::new()
            .mode(perm)
            .create(&dir)
            .map_err(|e| io_err("create subPath directory", &dir, e))?;
        let meta = std::fs::symlink_metadata(&dir).map_err(|e| io_err("stat", &dir, e))?;
        if !meta.is_dir() {
            return Err(SubPathError::OutsideBase {
                path: dir.display().to_string(),
                base: base.display().to_string(),
            });
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(perm))
            .map_err(|e| io_err("chmod", &dir, e))?;
    }
    Ok(())
}
