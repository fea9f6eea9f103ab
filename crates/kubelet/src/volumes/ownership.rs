//! fsGroup ownership of volumes (upstream `SetVolumeOwnership`, `pkg/volume/volume_linux.go`):
//! every file and directory gets the pod's fsGroup as its group and group read (and write, unless
//! the volume is read-only) permission; directories also get setgid, so files created later in
//! them inherit the group.
//!
//! Which plugins call it, and with which policy, follows upstream 1.20: emptyDir once when it is
//! created, configMap and secret (read-only) after every payload write, all with no policy, i.e.
//! a full walk; `fsGroupChangePolicy` only reaches plugins for persistent volumes in upstream:
//! here the `local` PV plugin ([`super::persistent`]), as upstream's `skipPermissionChange`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use tracing::{debug, warn};

use super::{io, VolumeError};

const RW_MASK: u32 = 0o660;
const RO_MASK: u32 = 0o440;
const EXEC_MASK: u32 = 0o110;
const SETGID: u32 = 0o2000;

/// `spec.securityContext.fsGroupChangePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChangePolicy {
    /// Walk the whole volume every time (upstream's behaviour without a policy).
    #[default]
    Always,
    /// Walk only when the volume's root does not already have the group, permissions and setgid.
    OnRootMismatch,
}

impl ChangePolicy {
    /// The API value; anything but `OnRootMismatch` means a full walk, as upstream checks.
    pub fn from_api(v: Option<&str>) -> Self {
        match v {
            Some("OnRootMismatch") => ChangePolicy::OnRootMismatch,
            _ => ChangePolicy::Always,
        }
    }
}

/// The permission bits the walk adds to a read-only volume's files for `fs_group`, for the
/// atomic writer to write them from the start.
pub fn read_only_file_bits(fs_group: Option<u32>) -> u32 {
    if fs_group.is_some() {
        RO_MASK
    } else {
        0
    }
}

/// Upstream `requiresPermissionChange`: the root's group differs, it is not a directory, its
/// permissions lack a required bit, or it lacks setgid.
pub fn requires_change(root: &Path, gid: u32, read_only: bool) -> bool {
    let Ok(meta) = std::fs::metadata(root) else {
        return true;
    };
    if meta.gid() != gid || !meta.is_dir() {
        return true;
    }
    let want = if read_only { RO_MASK } else { RW_MASK } | EXEC_MASK;
    let mode = meta.permissions().mode();
    mode & want != want || mode & SETGID == 0
}

/// Upstream `SetVolumeOwnership`. Returns whether the volume was walked. Failures to chown or
/// chmod one file are logged and the walk goes on, as upstream does; failing to read a directory
/// fails the call.
pub fn set_volume_ownership(
    dir: &Path,
    fs_group: Option<u32>,
    policy: ChangePolicy,
    read_only: bool,
) -> Result<bool, VolumeError> {
    let Some(gid) = fs_group else {
        return Ok(false);
    };
    if policy == ChangePolicy::OnRootMismatch && !requires_change(dir, gid, read_only) {
        debug!(path = %dir.display(), "skipping permission and ownership change for volume");
        return Ok(false);
    }
    walk_deep(dir, &mut |p, meta| {
        change_file_permission(p, gid, read_only, meta)
    })?;
    Ok(true)
}

/// Upstream `walkDeep`: symlinks are not followed, and a directory is visited after its
/// children, so an interrupted walk leaves the root unchanged and `OnRootMismatch` walks again.
fn walk_deep(path: &Path, f: &mut dyn FnMut(&Path, &std::fs::Metadata)) -> Result<(), VolumeError> {
    let meta = std::fs::symlink_metadata(path).map_err(io("stat", path))?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).map_err(io("read directory", path))? {
            let entry = entry.map_err(io("read directory", path))?;
            walk_deep(&entry.path(), f)?;
        }
    }
    f(path, &meta);
    Ok(())
}

/// Upstream `changeFilePermission`: group to fsGroup (lchown, so a symlink itself), then the mode
/// widened by the mask; symlinks keep their mode, as a chmod would pass through to the target
/// and override the mode the plugin gave it.
fn change_file_permission(path: &Path, gid: u32, read_only: bool, meta: &std::fs::Metadata) {
    if let Err(e) = std::os::unix::fs::lchown(path, None, Some(gid)) {
        warn!(path = %path.display(), error = %e, "lchown failed");
    }
    if meta.file_type().is_symlink() {
        return;
    }
    let mut mask = if read_only { RO_MASK } else { RW_MASK };
    if meta.is_dir() {
        mask |= SETGID | EXEC_MASK;
    }
    let mode = meta.permissions().mode() & 0o7777;
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode | mask)) {
        warn!(path = %path.display(), error = %e, "chmod failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn stat(p: &Path) -> (u32, u32) {
        let m = std::fs::symlink_metadata(p).unwrap();
        (m.gid(), m.permissions().mode() & 0o7777)
    }

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A volume: root 0755, a file 0600, a subdirectory 0700 with a file 0644, and a symlink.
    fn volume() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        chmod(r, 0o755);
        std::fs::write(r.join("f"), "x").unwrap();
        chmod(&r.join("f"), 0o600);
        std::fs::create_dir(r.join("d")).unwrap();
        std::fs::write(r.join("d/g"), "y").unwrap();
        chmod(&r.join("d/g"), 0o644);
        chmod(&r.join("d"), 0o700);
        symlink("f", r.join("link")).unwrap();
        t
    }

    // The tests chown to an arbitrary group: they run as root, as the kubelet does.
    const GID: u32 = 4321;

    #[test]
    fn read_write_volume_gets_group_rw_and_setgid_dirs() {
        let t = volume();
        let r = t.path();
        assert!(set_volume_ownership(r, Some(GID), ChangePolicy::Always, false).unwrap());
        assert_eq!(stat(r), (GID, 0o2775));
        assert_eq!(stat(&r.join("f")), (GID, 0o660));
        assert_eq!(stat(&r.join("d")), (GID, 0o2770));
        assert_eq!(stat(&r.join("d/g")), (GID, 0o664));
        // The link itself changes group; its target keeps the mode the walk gave it.
        assert_eq!(stat(&r.join("link")).0, GID);
    }

    #[test]
    fn read_only_volume_gets_group_read_only() {
        let t = volume();
        let r = t.path();
        set_volume_ownership(r, Some(GID), ChangePolicy::Always, true).unwrap();
        assert_eq!(stat(r), (GID, 0o2755));
        assert_eq!(stat(&r.join("f")), (GID, 0o640));
        assert_eq!(stat(&r.join("d")), (GID, 0o2750));
        assert_eq!(stat(&r.join("d/g")), (GID, 0o644));
    }

    #[test]
    fn no_fs_group_changes_nothing() {
        let t = volume();
        let before = stat(&t.path().join("f"));
        assert!(!set_volume_ownership(t.path(), None, ChangePolicy::Always, false).unwrap());
        assert_eq!(stat(&t.path().join("f")), before);
    }

    #[test]
    fn on_root_mismatch_skips_a_matching_root_always_walks() {
        let t = volume();
        let r = t.path();
        set_volume_ownership(r, Some(GID), ChangePolicy::OnRootMismatch, false).unwrap();
        assert_eq!(stat(&r.join("f")), (GID, 0o660));
        // A file changed behind the kubelet's back: the root still matches, so no walk.
        std::os::unix::fs::lchown(r.join("f"), None, Some(0)).unwrap();
        chmod(&r.join("f"), 0o600);
        assert!(!requires_change(r, GID, false));
        assert!(!set_volume_ownership(r, Some(GID), ChangePolicy::OnRootMismatch, false).unwrap());
        assert_eq!(stat(&r.join("f")), (0, 0o600));
        // Always walks whatever the root looks like.
        assert!(set_volume_ownership(r, Some(GID), ChangePolicy::Always, false).unwrap());
        assert_eq!(stat(&r.join("f")), (GID, 0o660));
    }

    #[test]
    fn root_mismatch_conditions() {
        let t = volume();
        let r = t.path();
        set_volume_ownership(r, Some(GID), ChangePolicy::Always, false).unwrap();
        assert!(!requires_change(r, GID, false));
        assert!(requires_change(r, GID + 1, false), "other group");
        // A superset of the needed bits is fine; a missing one or a missing setgid is not.
        chmod(r, 0o2777);
        assert!(!requires_change(r, GID, false));
        chmod(r, 0o2750);
        assert!(requires_change(r, GID, false), "no group write");
        assert!(!requires_change(r, GID, true), "read-only needs no write");
        chmod(r, 0o775);
        assert!(requires_change(r, GID, false), "no setgid");
        assert!(requires_change(&r.join("f"), GID, false), "not a directory");
        assert!(requires_change(&r.join("absent"), GID, false));
    }

    #[test]
    fn empty_dir_set_up_again_keeps_the_setgid_bit() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("v");
        let spec = k8s_openapi::api::core::v1::EmptyDirVolumeSource::default();
        super::super::empty_dir::set_up(&dir, &spec, None).unwrap();
        set_volume_ownership(&dir, Some(GID), ChangePolicy::Always, false).unwrap();
        assert_eq!(stat(&dir), (GID, 0o2777));
        // Every sync sets the volume up again.
        super::super::empty_dir::set_up(&dir, &spec, None).unwrap();
        assert_eq!(stat(&dir), (GID, 0o2777));
    }

    #[test]
    fn policy_from_api() {
        assert_eq!(
            ChangePolicy::from_api(Some("OnRootMismatch")),
            ChangePolicy::OnRootMismatch
        );
        assert_eq!(ChangePolicy::from_api(Some("Always")), ChangePolicy::Always);
        assert_eq!(ChangePolicy::from_api(None), ChangePolicy::Always);
    }
}
