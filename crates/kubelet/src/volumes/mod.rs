//! The volume manager (upstream `pkg/kubelet/volumemanager`, reduced to what a node does: no
//! attach/detach of its own; configMap and secret volumes read their objects through
//! [`crate::objects`], PersistentVolumeClaims resolve to their PVs through [`claims`] and set up
//! `local` and `hostPath` PVs through [`persistent`], CSI PVs and inline CSI volumes through
//! [`csi`], whose async driver calls the sync makes before the blocking set up here).
//!
//! Upstream keeps a desired state of the world (the pods' volumes) and an actual state (what is
//! mounted), reconciled by one loop, and rebuilds the actual state from disk after a restart. Here
//! each pod's directory is touched only by that pod's worker (and, once no worker is left, by
//! housekeeping), so no state needs an owner task: the desired state is the spec the worker
//! syncs, the actual state is read back from the file system and `/proc/self/mountinfo` every
//! time. Set up is idempotent and runs on every sync before containers start; tear down unmounts
//! whatever the mount table shows under the pod directory, which also covers a crash.

pub mod atomic_writer;
pub mod claims;
pub mod config_map;
pub mod csi;
pub mod downward_api;
pub mod empty_dir;
pub mod host_path;
pub mod mounts;
pub mod ownership;
pub mod persistent;
pub mod projected;
pub mod subpath;

#[cfg(test)]
mod config_map_tests;
#[cfg(test)]
mod projected_tests;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, Volume};

use crate::objects::{ObjectError, ObjectKind, Objects};

/// Upstream's directory name of the emptyDir plugin under `<pod>/volumes/`.
pub const EMPTY_DIR_PLUGIN: &str = "kubernetes.io~empty-dir";

/// Why a volume could not be set up or torn down.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Upstream `checkTypeInternal`'s messages, word for word.
    #[error("hostPath type check failed: {path} is not {what}")]
    HostPathType { path: String, what: &'static str },
    #[error("{0} is an invalid volume type")]
    InvalidHostPathType(String),
    #[error("unknown storage medium {0:?}")]
    UnknownMedium(String),
    #[error("storage medium {0:?} is not supported on this node")]
    UnsupportedMedium(String),
    #[error("invalid sizeLimit {0:?}")]
    InvalidSizeLimit(String),
    #[error("volume type {kind} is not supported on this node: {why}")]
    Unsupported {
        kind: &'static str,
        why: &'static str,
    },
    #[error("mount tmpfs on {path}: {source}")]
    Mount {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("unmount {path}: {source}")]
    Unmount {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("{path} is still mounted after unmounting it")]
    StillMounted { path: PathBuf },
    /// The ConfigMap or Secret behind a volume could not be had (upstream passes the manager's
    /// error through: `configmap "x" not found`).
    #[error(transparent)]
    Object(#[from] ObjectError),
    /// Upstream `MakePayload`'s messages.
    #[error("{}", match kind {
        ObjectKind::ConfigMap => format!("configmap references non-existent config key: {key}"),
        ObjectKind::Secret => format!("references non-existent secret key: {key}"),
    })]
    MissingKey { kind: ObjectKind, key: String },
    #[error("{why}: {path:?}")]
    InvalidPayloadPath { path: String, why: String },
    /// downwardAPI items that could not be resolved, joined as upstream's aggregate error.
    #[error("{0}")]
    DownwardApi(String),
    /// projected sources that could not be had, joined as upstream's aggregate error.
    #[error("{0}")]
    Projected(String),
    /// A PVC that does not resolve to a bound PV (upstream's populator error, word for word).
    #[error("{0}")]
    Claim(String),
    /// Upstream `CheckNodeAffinity`'s message.
    #[error("no matching NodeSelectorTerms")]
    NodeAffinity,
    #[error("LocalVolume volume {pv:?}: {why}")]
    LocalPath { pv: String, why: String },
    /// A CSI volume's wait for attachment, stage or publish failed ([`csi`]).
    #[error("{error}")]
    Csi {
        step: csi::Step,
        error: csi::CsiError,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> VolumeError + 'a {
    move |source| VolumeError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// One volume that failed to set up; its Display is upstream's `FailedMount` event message.
#[derive(Debug)]
pub struct SetUpError {
    /// The pod's volume name.
    pub volume: String,
    pub source: VolumeError,
}

impl std::fmt::Display for SetUpError {
    /// Upstream's messages by the step that failed: the populator's error for a PVC that does
    /// not resolve (`WaitForAttachAndMount`'s, as the kubelet's event shows it), the operation
    /// generator's `GenerateError` otherwise (its volume name is the PV's for a claim; here the
    /// pod's volume name throughout).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = &self.volume;
        match &self.source {
            VolumeError::Claim(e) => write!(
                f,
                "Unable to attach or mount volumes: unmounted volumes=[{v}], unattached volumes=[{v}]: {e}"
            ),
            VolumeError::NodeAffinity => write!(
                f,
                "MountVolume.NodeAffinity check failed for volume {v:?} : {}",
                self.source
            ),
            VolumeError::Csi {
                step: csi::Step::WaitForAttach,
                error,
            } => write!(
                f,
                "MountVolume.WaitForAttach failed for volume {v:?} : {error}"
            ),
            VolumeError::Csi {
                step: csi::Step::MountDevice,
                error,
            } => write!(
                f,
                "MountVolume.MountDevice failed for volume {v:?} : {error}"
            ),
            e => write!(f, "MountVolume.SetUp failed for volume {v:?} : {e}"),
        }
    }
}

impl std::error::Error for SetUpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The host path of every volume of a pod that is set up, by volume name (what upstream's
/// `GetMountedVolumesForPod` gives `makeMounts`), and of every block volume (what it gives
/// `makeBlockVolumes`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodVolumes {
    pub paths: BTreeMap<String, PathBuf>,
    /// Block PVs: the link to the device, by volume name.
    pub devices: BTreeMap<String, PathBuf>,
    /// Volumes whose PV claim says `readOnly` (the other read-only plugins show in their path).
    pub read_only: std::collections::BTreeSet<String>,
}

impl PodVolumes {
    pub fn new(paths: BTreeMap<String, PathBuf>) -> Self {
        PodVolumes {
            paths,
            ..Default::default()
        }
    }

    pub fn get(&self, name: &str) -> Option<&Path> {
        self.paths.get(name).map(PathBuf::as_path)
    }

    /// The device link of a block volume.
    pub fn device(&self, name: &str) -> Option<&Path> {
        self.devices.get(name).map(PathBuf::as_path)
    }

    /// Whether the volume was set up at all, as a directory or a device.
    pub fn has(&self, name: &str) -> bool {
        self.paths.contains_key(name) || self.devices.contains_key(name)
    }

    /// Whether containers get the volume read-only whatever their volumeMount says (upstream's
    /// mounter attribute `ReadOnly`, true for configMap, secret, downwardAPI and projected, and
    /// for a PVC with `readOnly`). The plugin directory a volume lives in tells its plugin.
    pub fn is_read_only(&self, name: &str) -> bool {
        if self.read_only.contains(name) {
            return true;
        }
        self.get(name)
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .is_some_and(|p| {
                p == config_map::CONFIG_MAP_PLUGIN
                    || p == config_map::SECRET_PLUGIN
                    || p == downward_api::DOWNWARD_API_PLUGIN
                    || p == projected::PROJECTED_PLUGIN
            })
    }
}

/// Upstream `GetVolumesInUse` for the node status's `volumesInUse`: the unique names of the
/// device-mountable volumes pods on this node have set up, local PVs
/// (`kubernetes.io/local-volume/<pv>`) and persistent CSI volumes
/// (`kubernetes.io/csi/<driver>^<handle>`), sorted as upstream sorts them. The attach/detach
/// controller reads the list before detaching.
pub fn volumes_in_use(pods_root: &Path) -> Vec<String> {
    let mut names: std::collections::BTreeSet<String> = persistent::local_volumes_in_use(pods_root)
        .into_iter()
        .collect();
    names.extend(csi::volumes_in_use(pods_root));
    names.into_iter().collect()
}

/// `<pod-dir>/volumes/<plugin>/<name>`, where a plugin that needs a directory sets up its volume.
pub fn volume_dir(pod_dir: &Path, plugin: &str, name: &str) -> PathBuf {
    pod_dir.join("volumes").join(plugin).join(name)
}

/// Sets up every volume of `pod` (upstream `WaitForAttachAndMount` with the reconciler's
/// `MountVolume`). Each failing volume is reported on its own, as upstream's events are; the
/// containers must not start until this returns Ok. `node_memory` is node allocatable memory,
/// the cap of a Memory emptyDir in a pod without a memory limit. `objects` holds the ConfigMaps
/// and Secrets the pod's volumes reference ([`crate::objects::volume_refs`]), fetched by the
/// caller. Blocking: call it off the async threads.
pub fn set_up_pod(
    pod_dir: &Path,
    pod: &Pod,
    node_memory: Option<u64>,
    objects: &Objects,
) -> Result<PodVolumes, Vec<SetUpError>> {
    let inputs = projected::Inputs {
        objects,
        tokens: &crate::token::Tokens::default(),
        allocatable: &BTreeMap::new(),
    };
    set_up_pod_with(pod_dir, pod, node_memory, &inputs, &PvInputs::default())
}

/// What PVC volumes need beyond the spec: the claims the sync resolved and the node's labels
/// (PV node affinity).
#[derive(Debug, Clone, Default)]
pub struct PvInputs {
    pub claims: claims::Claims,
    pub node_labels: BTreeMap<String, String>,
    /// The CSI volumes the sync set up first (their driver calls are async), by volume name.
    pub csi: csi::CsiSetUps,
}

/// [`set_up_pod`] with everything downwardAPI and projected volumes read: node allocatable (the
/// limit `resourceFieldRef` reports for a container without one) and the service account
/// tokens the sync fetched ([`crate::token::TokenManager::fetch`]).
pub fn set_up_pod_with(
    pod_dir: &Path,
    pod: &Pod,
    node_memory: Option<u64>,
    inputs: &projected::Inputs<'_>,
    pvs: &PvInputs,
) -> Result<PodVolumes, Vec<SetUpError>> {
    let memory_cap = empty_dir::pod_memory_limit(pod).or(node_memory);
    let fs_group = fs_group(pod);
    let mut out = PodVolumes::default();
    let mut done = BTreeMap::new();
    let mut errors = Vec::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        if let Some(res) = pvs.csi.get(&v.name) {
            match res {
                Ok(p) => {
                    if p.read_only {
                        out.read_only.insert(v.name.clone());
                    }
                    done.insert(v.name.clone(), p.path.clone());
                }
                Err(e) => errors.push(SetUpError {
                    volume: v.name.clone(),
                    source: VolumeError::Csi {
                        step: e.step,
                        error: e.error.clone(),
                    },
                }),
            }
            continue;
        }
        if v.persistent_volume_claim.is_some() || v.ephemeral.is_some() {
            match set_up_claim(pod_dir, pod, v, pvs) {
                Ok(None) => {}
                Ok(Some(persistent::PvSetUp::Dir { path, read_only })) => {
                    if read_only {
                        out.read_only.insert(v.name.clone());
                    }
                    done.insert(v.name.clone(), path);
                }
                Ok(Some(persistent::PvSetUp::Device { path, read_only })) => {
                    if read_only {
                        out.read_only.insert(v.name.clone());
                    }
                    out.devices.insert(v.name.clone(), path);
                }
                Err(source) => errors.push(SetUpError {
                    volume: v.name.clone(),
                    source,
                }),
            }
            continue;
        }
        let fresh =
            v.empty_dir.is_some() && !volume_dir(pod_dir, EMPTY_DIR_PLUGIN, &v.name).exists();
        let res = set_up_volume(pod_dir, pod, v, memory_cap, inputs).and_then(|path| {
            set_up_ownership(v, &path, fs_group, fresh)?;
            Ok(path)
        });
        match res {
            Ok(path) => {
                done.insert(v.name.clone(), path);
            }
            Err(source) => errors.push(SetUpError {
                volume: v.name.clone(),
                source,
            }),
        }
    }
    if errors.is_empty() {
        out.paths = done;
        Ok(out)
    } else {
        Err(errors)
    }
}

/// A PVC volume: the PV the sync resolved, set up by its source's plugin with the pod's fsGroup
/// and `fsGroupChangePolicy` (upstream passes both to persistent volume plugins only). None when
/// no container uses the volume (upstream leaves unused volumes out of the desired state).
fn set_up_claim(
    pod_dir: &Path,
    pod: &Pod,
    v: &Volume,
    pvs: &PvInputs,
) -> Result<Option<persistent::PvSetUp>, VolumeError> {
    let claim = match pvs.claims.0.get(&v.name) {
        None => return Ok(None),
        Some(Err(e)) => return Err(VolumeError::Claim(e.clone())),
        Some(Ok(c)) => c,
    };
    persistent::set_up(pod_dir, claim, &pvs.node_labels, pod_fs_group(pod)).map(Some)
}

/// The pod's fsGroup and `fsGroupChangePolicy` (upstream `MounterArgs`), which persistent
/// volume plugins apply.
pub fn pod_fs_group(pod: &Pod) -> persistent::FsGroup {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group_change_policy.as_deref());
    persistent::FsGroup {
        gid: fs_group(pod),
        policy: ownership::ChangePolicy::from_api(policy),
    }
}

/// `spec.securityContext.fsGroup`, when it is a valid group ID.
fn fs_group(pod: &Pod) -> Option<u32> {
    let g = pod.spec.as_ref()?.security_context.as_ref()?.fs_group?;
    u32::try_from(g).ok()
}

/// Upstream's `SetVolumeOwnership` calls in the plugins' `SetUpAt`: emptyDir once, when it is
/// created (`fresh`; later set ups return early in upstream as the volume is ready); configMap,
/// secret, downwardAPI and projected (read-only) after every write of their files, so new files
/// get the group too. All with no policy: a full walk. hostPath is never changed.
fn set_up_ownership(
    v: &Volume,
    path: &Path,
    fs_group: Option<u32>,
    fresh: bool,
) -> Result<(), VolumeError> {
    let read_only = v.config_map.is_some()
        || v.secret.is_some()
        || v.downward_api.is_some()
        || v.projected.is_some();
    if read_only || (v.empty_dir.is_some() && fresh) {
        ownership::set_volume_ownership(
            path,
            fs_group,
            ownership::ChangePolicy::Always,
            read_only,
        )?;
    }
    Ok(())
}

fn set_up_volume(
    pod_dir: &Path,
    pod: &Pod,
    v: &Volume,
    memory_cap: Option<u64>,
    inputs: &projected::Inputs<'_>,
) -> Result<PathBuf, VolumeError> {
    let objects = inputs.objects;
    let group_bits = ownership::read_only_file_bits(fs_group(pod));
    if let Some(cm) = &v.config_map {
        let dir = volume_dir(pod_dir, config_map::CONFIG_MAP_PLUGIN, &v.name);
        let src = config_map::Source {
            kind: ObjectKind::ConfigMap,
            name: &cm.name,
            items: cm.items.as_deref().unwrap_or_default(),
            default_mode: cm.default_mode,
            optional: cm.optional == Some(true),
        };
        config_map::set_up(&dir, &src, objects, memory_cap, group_bits)?;
        return Ok(dir);
    }
    if let Some(s) = &v.secret {
        let dir = volume_dir(pod_dir, config_map::SECRET_PLUGIN, &v.name);
        let src = config_map::Source {
            kind: ObjectKind::Secret,
            name: s.secret_name.as_deref().unwrap_or_default(),
            items: s.items.as_deref().unwrap_or_default(),
            default_mode: s.default_mode,
            optional: s.optional == Some(true),
        };
        config_map::set_up(&dir, &src, objects, memory_cap, group_bits)?;
        return Ok(dir);
    }
    if let Some(d) = &v.downward_api {
        let dir = volume_dir(pod_dir, downward_api::DOWNWARD_API_PLUGIN, &v.name);
        downward_api::set_up(
            &dir,
            d.items.as_deref().unwrap_or_default(),
            pod,
            inputs.allocatable,
            d.default_mode,
            memory_cap,
            group_bits,
        )?;
        return Ok(dir);
    }
    if let Some(p) = &v.projected {
        let dir = volume_dir(pod_dir, projected::PROJECTED_PLUGIN, &v.name);
        projected::set_up(&dir, p, pod, inputs, memory_cap, group_bits)?;
        return Ok(dir);
    }
    if let Some(ed) = &v.empty_dir {
        let dir = volume_dir(pod_dir, EMPTY_DIR_PLUGIN, &v.name);
        empty_dir::set_up(&dir, ed, memory_cap)?;
        return Ok(dir);
    }
    if let Some(hp) = &v.host_path {
        return host_path::set_up(hp);
    }
    Err(VolumeError::Unsupported {
        kind: volume_kind(v),
        why: "only emptyDir, hostPath, configMap, secret, downwardAPI, projected, csi (with a registered driver) and persistentVolumeClaim (local, hostPath and csi PVs) are",
    })
}

/// The API name of a volume's source, for messages.
fn volume_kind(v: &Volume) -> &'static str {
    let kinds: [(&'static str, bool); 14] = [
        ("configMap", v.config_map.is_some()),
        ("secret", v.secret.is_some()),
        ("downwardAPI", v.downward_api.is_some()),
        ("projected", v.projected.is_some()),
        ("persistentVolumeClaim", v.persistent_volume_claim.is_some()),
        ("csi", v.csi.is_some()),
        ("ephemeral", v.ephemeral.is_some()),
        ("nfs", v.nfs.is_some()),
        ("iscsi", v.iscsi.is_some()),
        ("image", v.image.is_some()),
        ("fc", v.fc.is_some()),
        ("cephfs", v.cephfs.is_some()),
        ("rbd", v.rbd.is_some()),
        ("gitRepo", v.git_repo.is_some()),
    ];
    kinds
        .iter()
        .find(|(_, set)| *set)
        .map(|(k, _)| *k)
        .unwrap_or("unknown")
}

/// One line of `/proc/self/mountinfo`: where something is mounted and its file system type.
#[derive(Debug, Clone, PartialEq)]
pub struct MountEntry {
    pub mount_point: PathBuf,
    pub fs_type: String,
}

/// Parses `/proc/self/mountinfo` (proc(5)): field 5 is the mount point with octal escapes
/// (`\040` for a space), the file system type follows the ` - ` separator.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let mount_point = fields.nth(4)?;
            let mut rest = fields.skip_while(|f| *f != "-");
            rest.next()?;
            let fs_type = rest.next()?;
            Some(MountEntry {
                mount_point: PathBuf::from(unescape_octal(mount_point)),
                fs_type: fs_type.to_string(),
            })
        })
        .collect()
}

fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            if let Some(v) = s
                .get(i + 1..i + 4)
                .and_then(|o| u8::from_str_radix(o, 8).ok())
            {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) fn read_mountinfo() -> Result<Vec<MountEntry>, VolumeError> {
    let path = Path::new("/proc/self/mountinfo");
    let text = std::fs::read_to_string(path).map_err(io("read", path))?;
    Ok(parse_mountinfo(&text))
}

/// The mount table compares resolved paths; a root dir given through a symlink must match too.
fn resolved(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The file system type mounted exactly at `path`, if something is (the top-most mount).
pub fn mounted_fs_type(path: &Path) -> Result<Option<String>, VolumeError> {
    let path = resolved(path);
    Ok(read_mountinfo()?
        .into_iter()
        .rev()
        .find(|m| m.mount_point == path)
        .map(|m| m.fs_type))
}

/// Whether `path` is the root of a mount, bind mounts included (statx's `STATX_ATTR_MOUNT_ROOT`,
/// Linux 5.8); None when the kernel does not say or statx fails.
fn is_mount_root(path: &Path) -> Option<bool> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: `c` is a valid C string and `stx` a buffer of the size statx writes.
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW | libc::AT_STATX_DONT_SYNC,
            0,
            stx.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return None;
    }
    // SAFETY: statx succeeded, so it filled the buffer.
    let stx = unsafe { stx.assume_init() };
    let known = stx.stx_attributes_mask & libc::STATX_ATTR_MOUNT_ROOT as u64 != 0;
    known.then_some(stx.stx_attributes & libc::STATX_ATTR_MOUNT_ROOT as u64 != 0)
}

/// At most this many entries are asked before the mount table is read instead.
const WALK_LIMIT: usize = 4096;

/// True when a walk of `dir`'s tree asked every entry and none is a mount root: nothing can be
/// mounted below it. False when in doubt (a mount met, an error, a kernel before 5.8, a tree
/// larger than [`WALK_LIMIT`]): the caller reads the mount table, the exact answer.
///
/// Why: the table lists every mount of the node (each pod's shm, rootfs, netns, token tmpfs),
/// so reading it for each pod torn down cost O(pods) each, O(pods^2) per wave of deletions; a
/// pod directory without mounts is a handful of entries (moby's `mountinfo.MountedFast` asks
/// the kernel per path the same way).
fn nothing_mounted_below(dir: &Path) -> bool {
    let mut stack = vec![dir.to_path_buf()];
    let mut asked = 0;
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return false,
        };
        for entry in entries {
            let Ok(entry) = entry else { return false };
            asked += 1;
            if asked > WALK_LIMIT {
                return false;
            }
            let path = entry.path();
            match is_mount_root(&path) {
                Some(false) => {}
                Some(true) | None => return false,
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    true
}

/// Mount points strictly below `dir`, deepest first so that nested mounts go before their parent.
fn mounts_below(dir: &Path) -> Result<Vec<PathBuf>, VolumeError> {
    if nothing_mounted_below(dir) {
        return Ok(Vec::new());
    }
    let dir = resolved(dir);
    let mut found: Vec<PathBuf> = read_mountinfo()?
        .into_iter()
        .map(|m| m.mount_point)
        .filter(|p| p != &dir && p.starts_with(&dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    Ok(found)
}

/// Unmounts everything mounted below `pod_dir` (upstream `UnmountVolume` for each mounted volume,
/// found the way its reconstruction finds them after a crash). A busy mount is detached lazily:
/// the pod's containers are gone by then, and a pod must never stay Terminating over a mount.
pub fn tear_down_pod(pod_dir: &Path) -> Result<(), VolumeError> {
    use nix::errno::Errno;
    use nix::mount::{umount2, MntFlags};
    // Stacked mounts need one round each; a handful of rounds is plenty.
    for _ in 0..8 {
        let below = mounts_below(pod_dir)?;
        if below.is_empty() {
            return Ok(());
        }
        for p in below {
            let start = std::time::Instant::now();
            let res = match umount2(&p, MntFlags::empty()) {
                Ok(()) | Err(Errno::EINVAL) | Err(Errno::ENOENT) => Ok(()),
                Err(Errno::EBUSY) => umount2(&p, MntFlags::MNT_DETACH),
                Err(source) => Err(source),
            };
            if is_local_pv_mount(&p) {
                crate::metrics::record_storage_operation(
                    persistent::LOCAL_PLUGIN_NAME,
                    "volume_unmount",
                    start.elapsed(),
                    res.is_ok(),
                );
            }
            res.map_err(|source| VolumeError::Unmount { path: p, source })?;
        }
    }
    match mounts_below(pod_dir)?.into_iter().next() {
        Some(path) => Err(VolumeError::StillMounted { path }),
        None => Ok(()),
    }
}

/// `<pod>/volumes/kubernetes.io~local-volume/<pv>`: a local PV's bind mount, whose unmount is
/// a `volume_unmount` operation in the metrics.
fn is_local_pv_mount(p: &Path) -> bool {
    p.parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == persistent::LOCAL_PLUGIN)
}

/// Upstream's volume manager for a terminated pod (the desired state of world drops its volumes,
/// `keepTerminatedPodVolumes` false; `SyncTerminatedPod` waits for the unmount): unmounts
/// everything below `pod_dir`, then removes the volume and subPath directories, once nothing is
/// mounted there. The pod directory itself stays until the pod is deleted (etc-hosts, termination
/// messages), as do the container logs.
pub fn tear_down_volumes(pod_dir: &Path) -> Result<(), VolumeError> {
    tear_down_pod(pod_dir)?;
    for sub in [
        "volumes",
        mounts::SUBPATHS_DIR,
        persistent::VOLUME_DEVICES_DIR,
    ] {
        let dir = pod_dir.join(sub);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("remove volume directory", &dir)(e)),
        }
    }
    Ok(())
}

/// Tears the pod's volumes down, then removes its directory. The directory is removed only once
/// nothing is mounted below it, so a volume's content (a hostPath's above all) is never deleted
/// through a mount.
///
/// By then the volumes are usually gone (`tear_down_volumes` ran when the pod terminated), so
/// the removal itself asks the kernel about each entry before it goes ([`remove_unmounted`]):
/// one walk instead of a walk to prove nothing is mounted and a second to remove. At the first
/// entry it cannot vouch for, it stops and the teardown below does it the exact way.
pub fn remove_pod_dir(pod_dir: &Path) -> Result<(), VolumeError> {
    if remove_unmounted(pod_dir, 0) {
        return Ok(());
    }
    tear_down_pod(pod_dir)?;
    match std::fs::remove_dir_all(pod_dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("remove pod directory", pod_dir)(e)),
    }
}

/// Deeper trees are left to [`remove_pod_dir`]'s exact way (no unbounded recursion).
const REMOVE_DEPTH_LIMIT: usize = 32;

/// Removes `dir` and everything below it, as `remove_dir_all`, but asks the kernel whether each
/// entry is a mount root ([`is_mount_root`], the same question [`nothing_mounted_below`] asks)
/// before unlinking it or entering it. True when `dir` is gone. False, with part of the tree
/// left, at the first entry that is a mount root or that the kernel does not vouch for, or at
/// any error: nothing inside a mount is ever touched, what was removed before it was the pod's
/// own, and the caller's exact way reports the error, if it is one.
fn remove_unmounted(dir: &Path, depth: usize) -> bool {
    let gone = |r: std::io::Result<()>| match r {
        Ok(()) => true,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    };
    if depth > REMOVE_DEPTH_LIMIT {
        return false;
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => return e.kind() == std::io::ErrorKind::NotFound,
    };
    for entry in entries {
        let Ok(entry) = entry else { return false };
        let path = entry.path();
        if is_mount_root(&path) != Some(false) {
            return false;
        }
        let removed = match entry.file_type() {
            Ok(t) if t.is_dir() => remove_unmounted(&path, depth + 1),
            Ok(_) => gone(std::fs::remove_file(&path)),
            Err(_) => false,
        };
        if !removed {
            return false;
        }
    }
    gone(std::fs::remove_dir(dir))
}

/// The UIDs that have a directory under `<root-dir>/pods`.
pub fn pod_dir_uids(pods_root: &Path) -> Result<Vec<String>, VolumeError> {
    let entries = match std::fs::read_dir(pods_root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("read", pods_root)(e)),
    };
    let mut uids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io("read", pods_root))?;
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            uids.extend(entry.file_name().to_str().map(str::to_string));
        }
    }
    Ok(uids)
}
