//! PersistentVolume sources a node mounts on its own: `local` (upstream `pkg/volume/local`), as a
//! bind mount in the pod's volume directory or, with `volumeMode: Block`, as a device link in the
//! pod's `volumeDevices` directory; and `hostPath` PVs (upstream `pkg/volume/hostpath`), used in
//! place after the type check, as hostPath volumes are.
//!
//! Like the other plugins here, set up reads its state back from the mount table, so it is
//! idempotent: a restarted kubelet finds the bind mount and does not mount again (upstream's
//! `IsNotMountPoint` check at the top of `SetUpAt`).

use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::PersistentVolume;

use super::claims::BoundClaim;
use super::ownership::{self, ChangePolicy};
use super::{host_path, io, mounted_fs_type, read_mountinfo, VolumeError};
use crate::admission::{term_matches, NodeView};

/// Upstream's escaped plugin name of `kubernetes.io/local-volume`.
pub const LOCAL_PLUGIN: &str = "kubernetes.io~local-volume";
/// The plugin's name in metrics.
pub const LOCAL_PLUGIN_NAME: &str = "kubernetes.io/local-volume";
/// Upstream's directory under the pod directory for block volumes' device links.
pub const VOLUME_DEVICES_DIR: &str = "volumeDevices";

/// Where a set-up PV is for the containers.
#[derive(Debug, Clone, PartialEq)]
pub enum PvSetUp {
    /// A directory for volumeMounts; `read_only` makes every container mount read-only
    /// (upstream's mounter attribute `ReadOnly`).
    Dir { path: PathBuf, read_only: bool },
    /// A link to the block device for volumeDevices (upstream `GetPodDeviceMapPath`).
    Device { path: PathBuf, read_only: bool },
}

/// What the fsGroup part of a set up needs (upstream `MounterArgs`).
#[derive(Debug, Clone, Copy, Default)]
pub struct FsGroup {
    pub gid: Option<u32>,
    pub policy: ChangePolicy,
}

/// Upstream `checkNodeAffinity` (`util.CheckNodeAffinity`): the PV's required node affinity
/// against the node's labels.
pub fn check_node_affinity(
    pv: &PersistentVolume,
    labels: &std::collections::BTreeMap<String, String>,
) -> Result<(), VolumeError> {
    let Some(required) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return Ok(());
    };
    let node = NodeView {
        labels: labels.clone(),
        ..Default::default()
    };
    if required
        .node_selector_terms
        .iter()
        .any(|t| term_matches(t, &node))
    {
        Ok(())
    } else {
        Err(VolumeError::NodeAffinity)
    }
}

/// Sets up the PV bound to a pod's claim (upstream `MountVolume`/`MapVolume` for a PV spec).
pub fn set_up(
    pod_dir: &Path,
    claim: &BoundClaim,
    node_labels: &std::collections::BTreeMap<String, String>,
    fs_group: FsGroup,
) -> Result<PvSetUp, VolumeError> {
    check_node_affinity(&claim.pv, node_labels)?;
    let spec = claim.pv.spec.as_ref();
    let read_only = claim.read_only;
    if let Some(local) = spec.and_then(|s| s.local.as_ref()) {
        let source = Path::new(&local.path);
        if local.path.is_empty() {
            return Err(VolumeError::LocalPath {
                pv: claim.pv_name().to_string(),
                why: "path is empty".into(),
            });
        }
        if source.components().any(|c| c == Component::ParentDir) {
            return Err(VolumeError::LocalPath {
                pv: claim.pv_name().to_string(),
                why: format!("invalid path: {} must not contain '..'", local.path),
            });
        }
        if claim.is_block() {
            let path = map_device(pod_dir, claim.pv_name(), source)?;
            return Ok(PvSetUp::Device { path, read_only });
        }
        let dir = super::volume_dir(pod_dir, LOCAL_PLUGIN, claim.pv_name());
        let pods_root = pod_dir.parent().unwrap_or(pod_dir);
        set_up_local_dir(source, &dir, pods_root, read_only, fs_group)?;
        return Ok(PvSetUp::Dir {
            path: dir,
            read_only,
        });
    }
    if let Some(hp) = spec.and_then(|s| s.host_path.as_ref()) {
        if claim.is_block() {
            return Err(VolumeError::Unsupported {
                kind: "hostPath",
                why:
                    "hostPath PVs have no block volume mapper; use a local PV for volumeMode Block",
            });
        }
        let path = PathBuf::from(&hp.path);
        host_path::check_type(&path, hp.type_.as_deref().unwrap_or(""))?;
        return Ok(PvSetUp::Dir { path, read_only });
    }
    Err(VolumeError::Unsupported {
        kind: "persistentVolumeClaim",
        why: "its PV's source is neither local, hostPath nor csi, the PV sources this node mounts",
    })
}

/// Upstream `localVolumeMounter.SetUpAt`: nothing to do when `dir` is mounted already; else a
/// bind mount (read-only when asked), and the fsGroup walk only when no other pod has the
/// volume mounted (upstream: "Volume owner will be written only once on the first volume mount").
fn set_up_local_dir(
    source: &Path,
    dir: &Path,
    pods_root: &Path,
    read_only: bool,
    fs_group: FsGroup,
) -> Result<(), VolumeError> {
    if mounted_fs_type(dir)?.is_some() {
        return Ok(());
    }
    // Timed from here: an operation only when the volume was not mounted yet, as upstream's
    // reconciler runs MountVolume only for volumes not in the actual state.
    let start = std::time::Instant::now();
    let res = mount_local_dir(source, dir, pods_root, read_only, fs_group);
    crate::metrics::record_storage_operation(
        LOCAL_PLUGIN_NAME,
        "volume_mount",
        start.elapsed(),
        res.is_ok(),
    );
    res
}

fn mount_local_dir(
    source: &Path,
    dir: &Path,
    pods_root: &Path,
    read_only: bool,
    fs_group: FsGroup,
) -> Result<(), VolumeError> {
    use nix::mount::{mount, MsFlags};
    let meta = std::fs::metadata(source).map_err(io("stat local volume path", source))?;
    if !meta.is_dir() {
        return Err(VolumeError::LocalPath {
            pv: dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            why: format!(
                "{} is not a directory (volumeMode Filesystem needs one)",
                source.display()
            ),
        });
    }
    let others = mounts_of(source, pods_root)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)
        .map_err(io("create directory", dir))?;
    let bind = |flags: MsFlags| {
        mount(Some(source), dir, None::<&str>, flags, None::<&str>).map_err(|source| {
            VolumeError::Mount {
                path: dir.to_path_buf(),
                source,
            }
        })
    };
    bind(MsFlags::MS_BIND)?;
    if read_only {
        // A bind mount takes MS_RDONLY only on a remount.
        if let Err(e) = bind(MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY) {
            let _ = nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH);
            return Err(e);
        }
    } else if others == 0 {
        ownership::set_volume_ownership(dir, fs_group.gid, fs_group.policy, false)?;
    }
    Ok(())
}

/// How many mounts below `pods_root` show `source` (same device and inode at their root):
/// other pods' bind mounts of the same local volume (upstream `GetMountRefs` filtered to pod
/// directories).
fn mounts_of(source: &Path, pods_root: &Path) -> Result<usize, VolumeError> {
    let want = std::fs::metadata(source).map_err(io("stat", source))?;
    let root = std::fs::canonicalize(pods_root).unwrap_or_else(|_| pods_root.to_path_buf());
    Ok(read_mountinfo()?
        .into_iter()
        .filter(|m| m.mount_point.starts_with(&root))
        .filter(|m| {
            std::fs::metadata(&m.mount_point)
                .is_ok_and(|s| s.dev() == want.dev() && s.ino() == want.ino())
        })
        .count())
}

/// Upstream `MapBlockVolume`'s pod half: `<pod>/volumeDevices/kubernetes.io~local-volume/<pv>`
/// is a link to the device, which the runtime resolves when it creates the container's device.
/// Upstream also bind-mounts the device under the plugin's global map path and holds a loop
/// "lock" on it; a node-local device needs neither to be exposed.
fn map_device(pod_dir: &Path, pv_name: &str, device: &Path) -> Result<PathBuf, VolumeError> {
    let meta = std::fs::metadata(device).map_err(io("stat local volume path", device))?;
    if !meta.file_type().is_block_device() {
        return Err(VolumeError::LocalPath {
            pv: pv_name.to_string(),
            why: format!(
                "{} is not a block device (volumeMode Block needs one)",
                device.display()
            ),
        });
    }
    let dir = pod_dir.join(VOLUME_DEVICES_DIR).join(LOCAL_PLUGIN);
    std::fs::create_dir_all(&dir).map_err(io("create directory", &dir))?;
    let link = dir.join(pv_name);
    match std::fs::read_link(&link) {
        Ok(t) if t == device => return Ok(link),
        Ok(_) => std::fs::remove_file(&link).map_err(io("remove stale device link", &link))?,
        Err(_) => {}
    }
    let start = std::time::Instant::now();
    let res = std::os::unix::fs::symlink(device, &link).map_err(io("link block device", &link));
    crate::metrics::record_storage_operation(
        LOCAL_PLUGIN_NAME,
        "map_volume",
        start.elapsed(),
        res.is_ok(),
    );
    res.map(|()| link)
}

/// The local PVs in upstream's `GetVolumesInUse` (`kubernetes.io/local-volume/<pv>`), read from
/// the pods' volume directories (which exist from set up until tear down). hostPath PVs are
/// neither attachable nor device-mountable, so upstream leaves them out too.
/// [`super::volumes_in_use`] adds the CSI ones.
pub fn local_volumes_in_use(pods_root: &Path) -> Vec<String> {
    let mut names = std::collections::BTreeSet::new();
    let Ok(pods) = std::fs::read_dir(pods_root) else {
        return Vec::new();
    };
    for pod in pods.flatten() {
        for sub in [Path::new("volumes"), Path::new(VOLUME_DEVICES_DIR)] {
            let dir = pod.path().join(sub).join(LOCAL_PLUGIN);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                if let Some(n) = e.file_name().to_str() {
                    names.insert(format!("kubernetes.io/local-volume/{n}"));
                }
            }
        }
    }
    names.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeSpec,
        VolumeNodeAffinity,
    };

    fn pv_on(hosts: Option<&[&str]>) -> PersistentVolume {
        PersistentVolume {
            spec: Some(PersistentVolumeSpec {
                node_affinity: hosts.map(|h| VolumeNodeAffinity {
                    required: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: "kubernetes.io/hostname".into(),
                                operator: "In".into(),
                                values: Some(h.iter().map(|s| s.to_string()).collect()),
                            }]),
                            match_fields: None,
                        }],
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn node_affinity() {
        let labels = [("kubernetes.io/hostname".to_string(), "n1".to_string())]
            .into_iter()
            .collect();
        let table: [(Option<&[&str]>, bool); 4] = [
            (None, true),
            (Some(&["n1"]), true),
            (Some(&["n0", "n1"]), true),
            (Some(&["n2"]), false),
        ];
        for (hosts, ok) in table {
            let got = check_node_affinity(&pv_on(hosts), &labels);
            assert_eq!(got.is_ok(), ok, "{hosts:?}");
        }
        assert_eq!(
            check_node_affinity(&pv_on(Some(&["n2"])), &labels)
                .unwrap_err()
                .to_string(),
            "no matching NodeSelectorTerms"
        );
    }

    #[test]
    fn volumes_in_use_lists_local_volumes_of_every_pod() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("p1/volumes/kubernetes.io~local-volume/pv-b")).unwrap();
        std::fs::create_dir_all(r.join("p2/volumes/kubernetes.io~local-volume/pv-b")).unwrap();
        std::fs::create_dir_all(r.join("p2/volumes/kubernetes.io~empty-dir/scratch")).unwrap();
        std::fs::create_dir_all(r.join("p3/volumeDevices/kubernetes.io~local-volume")).unwrap();
        std::os::unix::fs::symlink(
            "/dev/loop0",
            r.join("p3/volumeDevices/kubernetes.io~local-volume/pv-a"),
        )
        .unwrap();
        assert_eq!(
            local_volumes_in_use(r),
            [
                "kubernetes.io/local-volume/pv-a",
                "kubernetes.io/local-volume/pv-b"
            ]
        );
        assert!(local_volumes_in_use(&r.join("absent")).is_empty());
    }

    #[test]
    fn device_link_is_idempotent_and_refuses_non_devices() {
        let t = tempfile::tempdir().unwrap();
        let pod = t.path().join("pod");
        // /dev/null is a character device, not a block device.
        let err = map_device(&pod, "pv1", Path::new("/dev/null")).unwrap_err();
        assert!(err.to_string().contains("is not a block device"), "{err}");
        let Some(dev) = std::fs::read_dir("/dev")
            .unwrap()
            .flatten()
            .find(|e| e.file_type().is_ok_and(|t| t.is_block_device()))
        else {
            panic!("this host has no block device under /dev");
        };
        let link = map_device(&pod, "pv1", &dev.path()).unwrap();
        assert_eq!(
            link,
            pod.join("volumeDevices/kubernetes.io~local-volume/pv1")
        );
        assert_eq!(std::fs::read_link(&link).unwrap(), dev.path());
        assert_eq!(map_device(&pod, "pv1", &dev.path()).unwrap(), link);
    }
}
