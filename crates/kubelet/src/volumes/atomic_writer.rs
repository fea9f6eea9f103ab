//! Upstream's `AtomicWriter` (`pkg/volume/util/atomic_writer.go`): writes a volume's whole payload
//! so that a reader inside the container sees either the old or the new set of files, never a mix
//! or a half-written file. Applications (and kubelet's own consumers) rely on this layout:
//!
//! ```text
//! <target>/..2024_01_01_00_00_00.123456789/   the payload, written once, never modified
//! <target>/..data -> ..2024_01_01_00_00_00.123456789
//! <target>/<key>  -> ..data/<key>             one per top-level payload entry
//! ```
//!
//! An update writes a new timestamped directory, points a temporary `..data_tmp` symlink at it and
//! renames that over `..data` (rename(2) is atomic), then adds or removes the user-visible
//! symlinks and removes the old directory. An unchanged payload writes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{io, VolumeError};

/// The symlink every user-visible entry goes through.
pub const DATA_DIR: &str = "..data";
/// The temporary symlink renamed over [`DATA_DIR`].
pub const DATA_DIR_TMP: &str = "..data_tmp";
/// Upstream's `maxPathLength`.
const MAX_PATH_LENGTH: usize = 4096;

/// One file of a payload (upstream `FileProjection`; ownership comes with fsGroup support).
#[derive(Debug, Clone, PartialEq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    /// Permission bits; the API validates them to 0..=0777.
    pub mode: u32,
}

/// Relative path -> file.
pub type Payload = BTreeMap<String, FileProjection>;

/// Upstream `validatePath`, with its messages.
pub fn validate_path(p: &str) -> Result<(), String> {
    if p.len() > MAX_PATH_LENGTH {
        return Err(format!(
            "invalid path: must be less than or equal to {MAX_PATH_LENGTH} characters"
        ));
    }
    if p.starts_with('/') {
        return Err("invalid path: must be relative path".into());
    }
    if p.split('/').any(|c| c == "..") {
        return Err("invalid path: must not contain '..'".into());
    }
    if p.starts_with("..") {
        return Err("invalid path: must not start with '..'".into());
    }
    Ok(())
}

/// `path.Clean` for the relative, validated paths of a payload.
fn clean(p: &str) -> String {
    Path::new(p)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn first_component(p: &str) -> &str {
    p.split('/').next().unwrap_or(p)
}

/// Writes `payload` into `target` (which must exist). Returns whether anything was written.
/// `group_bits` are added to every file's mode: the bits the fsGroup ownership walk gives the
/// files afterwards ([`super::ownership::read_only_file_bits`]), so that the files are written
/// with their final mode and an unchanged payload compares equal to what is on disk instead of
/// being rewritten on every sync. Blocking.
pub fn write(target: &Path, payload: &Payload, group_bits: u32) -> Result<bool, VolumeError> {
    let mut clean_payload = Payload::new();
    for (p, f) in payload {
        validate_path(p).map_err(|why| VolumeError::InvalidPayloadPath {
            path: p.clone(),
            why,
        })?;
        let c = clean(p);
        if c.is_empty() {
            return Err(VolumeError::InvalidPayloadPath {
                path: p.clone(),
                why: "invalid path: must not be empty".into(),
            });
        }
        clean_payload.insert(
            c,
            FileProjection {
                data: f.data.clone(),
                mode: f.mode | group_bits,
            },
        );
    }

    let data_link = target.join(DATA_DIR);
    let old_ts = match std::fs::read_link(&data_link) {
        Ok(l) => Some(l),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io("read symlink", &data_link)(e)),
    };
    let old_ts_path = old_ts.as_ref().map(|t| target.join(t));
    let old_files = match &old_ts_path {
        Some(p) => list_files(p)?,
        None => BTreeSet::new(),
    };
    let new_top: BTreeSet<&str> = clean_payload.keys().map(|p| first_component(p)).collect();
    let to_remove: BTreeSet<String> = old_files
        .iter()
        .map(|p| first_component(p).to_string())
        .filter(|p| !new_top.contains(p.as_str()))
        .collect();

    let unchanged = match &old_ts_path {
        Some(dir) => {
            old_files.len() == clean_payload.len() && payload_matches(dir, &clean_payload)?
        }
        None => false,
    };
    if !unchanged {
        let ts_name = new_ts_dir(target)?;
        let ts_dir = target.join(&ts_name);
        write_payload(&ts_dir, &clean_payload)?;
        let tmp = target.join(DATA_DIR_TMP);
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("remove stale symlink", &tmp)(e)),
        }
        std::os::unix::fs::symlink(&ts_name, &tmp).map_err(io("create symlink", &tmp))?;
        std::fs::rename(&tmp, &data_link).map_err(io("rename symlink over", &data_link))?;
    }
    // Even when nothing was written the visible links must exist (upstream issue 121472).
    for top in &new_top {
        let visible = target.join(top);
        if std::fs::symlink_metadata(&visible).is_err() {
            std::os::unix::fs::symlink(Path::new(DATA_DIR).join(top), &visible)
                .map_err(io("create symlink", &visible))?;
        }
    }
    for top in &to_remove {
        let visible = target.join(top);
        match std::fs::remove_file(&visible) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("remove", &visible)(e)),
        }
    }
    remove_stale_ts_dirs(target)?;
    Ok(!unchanged)
}

/// Every regular file below `dir`, as relative paths.
fn list_files(dir: &Path) -> Result<BTreeSet<String>, VolumeError> {
    let mut out = BTreeSet::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let abs = dir.join(&rel);
        let entries = match std::fs::read_dir(&abs) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io("read", &abs)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io("read", &abs))?;
            let r = rel.join(entry.file_name());
            let t = entry.file_type().map_err(io("stat", &entry.path()))?;
            if t.is_dir() {
                stack.push(r);
            } else {
                out.insert(r.to_string_lossy().into_owned());
            }
        }
    }
    Ok(out)
}

/// Whether every payload file already exists in `dir` with the same content and mode.
fn payload_matches(dir: &Path, payload: &Payload) -> Result<bool, VolumeError> {
    for (p, f) in payload {
        let path = dir.join(p);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io("stat", &path)(e)),
        };
        if !meta.is_file() || meta.permissions().mode() & 0o7777 != f.mode & 0o7777 {
            return Ok(false);
        }
        if std::fs::read(&path).map_err(io("read", &path))? != f.data {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Creates `..<UTC time>.<nanoseconds>` (upstream: `os.MkdirTemp` with the time as prefix) with
/// mode 0755 whatever the umask, so every container user can traverse it.
fn new_ts_dir(target: &Path) -> Result<String, VolumeError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let stamp = k8s_openapi::jiff::Timestamp::from_second(now.as_secs() as i64)
        .map(|t| t.strftime("%Y_%m_%d_%H_%M_%S").to_string())
        .unwrap_or_else(|_| "1970_01_01_00_00_00".into());
    let mut nanos = now.subsec_nanos();
    loop {
        let name = format!("..{stamp}.{nanos:09}");
        let dir = target.join(&name);
        match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
            Ok(()) => {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
                    .map_err(io("chmod", &dir))?;
                return Ok(name);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                nanos = (nanos + 1) % 1_000_000_000;
            }
            Err(e) => return Err(io("create directory", &dir)(e)),
        }
    }
}

/// Upstream `writePayloadToDir`: directories 0755, each file with its mode (set again after the
/// write, as the umask trims what open(2) applies).
fn write_payload(dir: &Path, payload: &Payload) -> Result<(), VolumeError> {
    for (p, f) in payload {
        let path = dir.join(p);
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(io("create directory", parent))?;
        }
        let mode = f.mode & 0o7777;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .map_err(io("create", &path))?;
        file.write_all(&f.data).map_err(io("write", &path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(io("chmod", &path))?;
    }
    Ok(())
}

/// Removes every timestamped directory but the one `..data` points to: the one just replaced, and
/// any a crash between writing and swapping left behind.
fn remove_stale_ts_dirs(target: &Path) -> Result<(), VolumeError> {
    let data_link = target.join(DATA_DIR);
    let current = std::fs::read_link(&data_link).map_err(io("read symlink", &data_link))?;
    let entries = std::fs::read_dir(target).map_err(io("read", target))?;
    for entry in entries {
        let entry = entry.map_err(io("read", target))?;
        let name = entry.file_name();
        let Some(n) = name.to_str() else { continue };
        if !n.starts_with("..") || n == DATA_DIR || Path::new(n) == current {
            continue;
        }
        let path = entry.path();
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        let res = if is_dir {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match res {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("remove stale data", &path)(e)),
        }
    }
    Ok(())
}
