//! emptyDir (upstream `pkg/volume/emptydir/empty_dir.go`): a directory in the pod directory, or a
//! tmpfs mounted there for `medium: Memory`. Removed with the pod directory.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, EmptyDirVolumeSource, Pod};

use super::{io, mounted_fs_type, VolumeError};
use crate::resources;

/// Upstream's mode for an emptyDir: every container user may write, whatever its UID.
const PERM: u32 = 0o777;

/// Upstream `emptyDir.SetUpAt`: idempotent, so every sync may call it. `memory_cap` is the most
/// a Memory medium may hold besides its own sizeLimit (see [`memory_size`]).
pub fn set_up(
    dir: &Path,
    spec: &EmptyDirVolumeSource,
    memory_cap: Option<u64>,
) -> Result<(), VolumeError> {
    match spec.medium.as_deref().unwrap_or("") {
        "" => set_up_dir(dir),
        "Memory" => set_up_tmpfs(dir, memory_size(size_limit(spec)?, memory_cap)),
        m if m == "HugePages" || m.starts_with("HugePages-") => {
            Err(VolumeError::UnsupportedMedium(m.to_string()))
        }
        other => Err(VolumeError::UnknownMedium(other.to_string())),
    }
}

/// `sizeLimit` in bytes, rounded up as `Quantity.Value()` does; None when unset or zero.
pub fn size_limit(spec: &EmptyDirVolumeSource) -> Result<Option<u64>, VolumeError> {
    let Some(q) = &spec.size_limit else {
        return Ok(None);
    };
    let milli = resources::parse_milli(&q.0)
        .filter(|m| *m >= 0)
        .ok_or_else(|| VolumeError::InvalidSizeLimit(q.0.clone()))?;
    let bytes = u64::try_from((milli + 999) / 1000)
        .map_err(|_| VolumeError::InvalidSizeLimit(q.0.clone()))?;
    Ok((bytes > 0).then_some(bytes))
}

/// The tmpfs size of a Memory emptyDir (upstream `calculateEmptyDirMemorySize`, on by default
/// since SizeMemoryBackedVolumes): the sizeLimit when it is below `cap`, else `cap` (the pod's
/// memory limit, or node allocatable memory when the pod has none), so a tmpfs never promises
/// more memory than the pod may use.
pub fn memory_size(size_limit: Option<u64>, cap: Option<u64>) -> Option<u64> {
    match (size_limit, cap) {
        (Some(l), Some(c)) => Some(l.min(c)),
        (l, c) => l.or(c),
    }
}

/// The pod's memory limit as its cgroup gets it (upstream `ResourceConfigForPod`): only when every
/// container declares one; the larger of the regular containers' sum and any init container.
pub fn pod_memory_limit(pod: &Pod) -> Option<u64> {
    let limit = |c: &Container| -> Option<u64> {
        let q = c.resources.as_ref()?.limits.as_ref()?.get("memory")?;
        let bytes = (resources::parse_milli(&q.0)? + 999) / 1000;
        u64::try_from(bytes).ok().filter(|b| *b > 0)
    };
    let spec = pod.spec.as_ref()?;
    let inits = spec.init_containers.iter().flatten();
    let mut sum: u64 = 0;
    let mut max_init: u64 = 0;
    for c in inits.clone() {
        let l = limit(c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            sum = sum.saturating_add(l);
        } else {
            max_init = max_init.max(l);
        }
    }
    for c in &spec.containers {
        sum = sum.saturating_add(limit(c)?);
    }
    let overhead = spec
        .overhead
        .as_ref()
        .and_then(|o| o.get("memory"))
        .and_then(|q| resources::parse_milli(&q.0))
        .and_then(|m| u64::try_from((m + 999) / 1000).ok())
        .unwrap_or(0);
    Some(sum.max(max_init).saturating_add(overhead))
}

/// Upstream `setupDir`: create with 0777, and chmod afterwards because the umask trims the mode
/// `mkdir` applies.
fn set_up_dir(dir: &Path) -> Result<(), VolumeError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PERM)
        .create(dir)
        .map_err(io("create directory", dir))?;
    let meta = std::fs::symlink_metadata(dir).map_err(io("stat", dir))?;
    // Permission bits only, as upstream's `Perm()`: the setgid fsGroup ownership added must
    // survive the set up every later sync repeats.
    if meta.permissions().mode() & 0o777 != PERM {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PERM))
            .map_err(io("chmod", dir))?;
    }
    Ok(())
}

/// Upstream `setupTmpfs`: the directory, then a tmpfs on it unless one is already there (a sync
/// after the first, or after a kubelet restart). `size=` caps it at `sizeLimit`.
fn set_up_tmpfs(dir: &Path, size: Option<u64>) -> Result<(), VolumeError> {
    use nix::mount::{mount, MsFlags};
    set_up_dir(dir)?;
    if mounted_fs_type(dir)?.as_deref() == Some("tmpfs") {
        return Ok(());
    }
    let options = size.map(|s| format!("size={s}"));
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::empty(),
        options.as_deref(),
    )
    .map_err(|source| VolumeError::Mount {
        path: dir.to_path_buf(),
        source,
    })
}
