//! hostPath (upstream `pkg/volume/hostpath/host_path.go`): the host's path is used in place, after
//! the check its `type` asks for.

use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::HostPathVolumeSource;

use super::{io, VolumeError};

/// Upstream `hostPathMounter.SetUp`: no set up beyond the type check.
pub fn set_up(src: &HostPathVolumeSource) -> Result<PathBuf, VolumeError> {
    let path = PathBuf::from(&src.path);
    check_type(&path, src.type_.as_deref().unwrap_or(""))?;
    Ok(path)
}

/// Upstream `checkTypeInternal`. Existence and type follow symlinks (`os.Stat`), as upstream's
/// `GetFileType` does; the `...OrCreate` types create only the last component for a file
/// (`os.OpenFile` with `O_CREATE`, 0644) but every missing one for a directory (`MkdirAll`, 0755).
pub fn check_type(path: &Path, ty: &str) -> Result<(), VolumeError> {
    let meta = std::fs::metadata(path).ok();
    let fail = |what| {
        Err(VolumeError::HostPathType {
            path: path.display().to_string(),
            what,
        })
    };
    let ft = meta.as_ref().map(|m| m.file_type());
    match ty {
        "" => Ok(()),
        "DirectoryOrCreate" if meta.is_none() => make_dir(path),
        "DirectoryOrCreate" | "Directory" if !ft.is_some_and(|t| t.is_dir()) => fail("a directory"),
        "DirectoryOrCreate" | "Directory" => Ok(()),
        "FileOrCreate" if meta.is_none() => make_file(path),
        "FileOrCreate" | "File" if !ft.is_some_and(|t| t.is_file()) => fail("a file"),
        "FileOrCreate" | "File" => Ok(()),
        "Socket" if !ft.is_some_and(|t| t.is_socket()) => fail("a socket file"),
        "CharDevice" if !ft.is_some_and(|t| t.is_char_device()) => fail("a character device"),
        "BlockDevice" if !ft.is_some_and(|t| t.is_block_device()) => fail("a block device"),
        "Socket" | "CharDevice" | "BlockDevice" => Ok(()),
        other => Err(VolumeError::InvalidHostPathType(other.to_string())),
    }
}

/// Upstream `makeDir`: `MkdirAll` with 0755; an existing directory is fine.
fn make_dir(path: &Path) -> Result<(), VolumeError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
        .map_err(io("create directory", path))
}

/// Upstream `makeFile`: an empty file with 0644; its parent must exist, and a path that exists
/// by now (a racing creator) is fine.
fn make_file(path: &Path) -> Result<(), VolumeError> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io("create file", path)(e)),
    }
}
