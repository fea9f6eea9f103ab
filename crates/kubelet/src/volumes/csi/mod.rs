//! The CSI volume plugin, node side (upstream `pkg/volume/csi`): PVs with a `csi:` source are
//! staged once per node to the global mount path (`csi_attacher.go` `MountDevice` =
//! `NodeStageVolume`, when the driver has `STAGE_UNSTAGE_VOLUME`) and published per pod
//! (`csi_mounter.go` `SetUpAt` = `NodePublishVolume`); inline `volumes[].csi` volumes are published
//! only (ephemeral lifecycle). Tear down runs the same calls backwards: unpublish per pod, unstage
//! once the last pod on the node stopped using the volume.
//!
//! State lives on disk in upstream's layout, so a restarted kubelet (this one or upstream's)
//! finds it: `<root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/{globalmount,
//! vol_data.json}` and `<pod>/volumes/kubernetes.io~csi/<name>/{mount,vol_data.json}`. A target
//! that is a mount point already is adopted without calling the driver (upstream's reconstructed
//! volumes are marked mounted and not set up again). Operations on one volume are serialised by
//! a lock per `driver^handle`, so a pod tearing down never unstages under a pod setting up.
//!
//! The paths, names and attributes are pure functions (table-tested below); the gRPC calls are in
//! [`node`], the operations in [`mount`] and [`teardown`].

pub mod mount;
pub mod node;
pub mod stats;
pub mod teardown;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::CSIDriver;
use kube::runtime::reflector::Store;
use sha2::{Digest, Sha256};

use crate::pluginmanager::CsiDrivers;

/// Upstream's plugin name, and its escaped form as a directory name under `<pod>/volumes`.
pub const CSI_PLUGIN_NAME: &str = "kubernetes.io/csi";
pub const CSI_PLUGIN_DIR: &str = "kubernetes.io~csi";
/// Upstream's `volDataFileName` and `globalMountInGlobalPath`.
pub const VOL_DATA_FILE: &str = "vol_data.json";
pub const GLOBAL_MOUNT: &str = "globalmount";
/// Upstream `storage.VolumeLifecyclePersistent` / `VolumeLifecycleEphemeral`.
pub const PERSISTENT: &str = "Persistent";
pub const EPHEMERAL: &str = "Ephemeral";

/// Why a CSI operation failed; Display is the message after upstream's
/// `MountVolume.<op> failed for volume "x" : ` prefix.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CsiError {
    /// The driver is not (or no longer) registered through the plugin manager.
    #[error("kubernetes.io/csi: {op} failed to get CSI client: driver name {driver} not found in the list of registered CSI drivers")]
    NotRegistered { op: &'static str, driver: String },
    /// The driver's gRPC error, as grpc-go prints it (`rpc error: code = X desc = Y`).
    #[error("rpc error: code = {code} desc = {message}")]
    Rpc { code: String, message: String },
    #[error("{0}")]
    Other(String),
}

impl CsiError {
    pub fn other(e: impl std::fmt::Display) -> Self {
        CsiError::Other(e.to_string())
    }
}

/// The step a set-up error comes from, which names upstream's event message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Waiting for the VolumeAttachment (upstream `WaitForAttach`).
    WaitForAttach,
    /// NodeStageVolume (upstream `MountDevice`).
    MountDevice,
    /// NodePublishVolume (upstream `SetUp`).
    SetUp,
}

/// A failed CSI set up: the step and why.
#[derive(Debug, Clone)]
pub struct SetUpFailure {
    pub step: Step,
    pub error: CsiError,
}

impl SetUpFailure {
    fn at(step: Step) -> impl FnOnce(CsiError) -> SetUpFailure {
        move |error| SetUpFailure { step, error }
    }
}

/// A published CSI volume: where the containers mount it from.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    pub path: PathBuf,
    pub read_only: bool,
}

/// What one sync did for each CSI volume the pod's containers use, by pod volume name.
pub type CsiSetUps = BTreeMap<String, Result<Published, SetUpFailure>>;

/// The CSI plugin's handle: cheap to clone, shared by every pod worker and housekeeping.
#[derive(Clone)]
pub struct CsiVolumes {
    root_dir: PathBuf,
    node_name: String,
    client: Option<kube::Client>,
    drivers: Option<CsiDrivers>,
    /// The CSIDriver objects (upstream's `csiDriverLister`), from a list+watch.
    csi_drivers: Option<Store<CSIDriver>>,
    locks: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

/// Starts the list+watch of CSIDriver objects (upstream's informer behind `csiDriverLister`), so
/// a set up reads the driver's policy without a request; the returned future runs it until
/// `cancel` (the caller spawns it in its task set).
pub fn csi_driver_lister(
    client: kube::Client,
    cancel: tokio_util::sync::CancellationToken,
) -> (
    Store<CSIDriver>,
    impl std::future::Future<Output = ()> + Send,
) {
    use futures::StreamExt;
    use kube::runtime::{reflector, watcher, WatchStreamExt};
    let (store, writer) = reflector::store();
    let api: kube::Api<CSIDriver> = kube::Api::all(client);
    let stream = reflector::reflector(
        writer,
        watcher::watcher(api, watcher::Config::default()).default_backoff(),
    );
    let run = async move {
        let mut stream = stream.boxed();
        loop {
            let ev = tokio::select! {
                _ = cancel.cancelled() => return,
                ev = stream.next() => ev,
            };
            match ev {
                None => return,
                Some(Err(e)) => tracing::warn!(error = %e, "watching CSIDrivers"),
                Some(Ok(_)) => {}
            }
        }
    };
    (store, run)
}

impl CsiVolumes {
    pub fn new(
        root_dir: PathBuf,
        node_name: String,
        client: Option<kube::Client>,
        drivers: Option<CsiDrivers>,
    ) -> Self {
        CsiVolumes {
            root_dir,
            node_name,
            client,
            drivers,
            csi_drivers: None,
            locks: Arc::default(),
        }
    }

    /// Reads CSIDriver objects from `store` (see [`csi_driver_lister`]).
    pub fn with_csi_drivers(mut self, store: Store<CSIDriver>) -> Self {
        self.csi_drivers = Some(store);
        self
    }

    /// A handle with no drivers and no API (standalone unit tests, nodes without CSI).
    pub fn disabled(root_dir: PathBuf) -> Self {
        Self::new(root_dir, String::new(), None, None)
    }

    /// The lock of one volume (`driver^handle`), taken for a whole set up or tear down.
    async fn lock(&self, driver: &str, handle: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let m = {
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            locks
                .entry(unique_volume_name(driver, handle))
                .or_default()
                .clone()
        };
        m.lock_owned().await
    }

    fn endpoint(&self, op: &'static str, driver: &str) -> Result<PathBuf, CsiError> {
        self.drivers
            .as_ref()
            .and_then(|d| d.get(driver))
            .map(|d| d.endpoint)
            .ok_or_else(|| CsiError::NotRegistered {
                op,
                driver: driver.to_string(),
            })
    }

    fn plugin_dir(&self) -> PathBuf {
        self.root_dir.join("plugins").join(CSI_PLUGIN_NAME)
    }
}

/// Upstream `GetUniqueVolumeName` for CSI (`kubernetes.io/csi/<driver>^<handle>`), the name the
/// node status's `volumesInUse` lists.
pub fn unique_volume_name(driver: &str, handle: &str) -> String {
    format!("{CSI_PLUGIN_NAME}/{driver}^{handle}")
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// Upstream `getAttachmentName`: the VolumeAttachment the attach/detach controller creates.
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    format!("csi-{}", sha256_hex(&format!("{handle}{driver}{node}")))
}

/// Upstream `makeVolumeHandle` for an inline ephemeral volume.
pub fn inline_volume_handle(pod_uid: &str, volume: &str) -> String {
    format!("csi-{}", sha256_hex(&format!("{pod_uid}{volume}")))
}

/// Upstream `makeDeviceMountPath`'s directory: `<plugin dir>/<driver>/<sha256(handle)>`; the
/// staging target is its `globalmount`, its `vol_data.json` names the volume for the unstage.
pub fn global_dir(plugin_dir: &Path, driver: &str, handle: &str) -> PathBuf {
    plugin_dir.join(driver).join(sha256_hex(handle))
}

/// `<pod>/volumes/kubernetes.io~csi/<name>`: the pod's directory of the volume (its `mount` is
/// the publish target; `name` is the PV's for a claim, the pod volume's for an inline volume).
pub fn pod_volume_dir(pod_dir: &Path, name: &str) -> PathBuf {
    super::volume_dir(pod_dir, CSI_PLUGIN_DIR, name)
}

/// Upstream `getPodInfoAttrs`, added to the volume context when the CSIDriver asks with
/// `podInfoOnMount`.
pub fn pod_info_attrs(pod: &Pod, ephemeral: bool) -> BTreeMap<String, String> {
    let m = &pod.metadata;
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_default();
    [
        ("pod.name", m.name.clone().unwrap_or_default()),
        ("pod.namespace", m.namespace.clone().unwrap_or_default()),
        ("pod.uid", m.uid.clone().unwrap_or_default()),
        ("serviceAccount.name", sa),
        ("ephemeral", ephemeral.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (format!("csi.storage.k8s.io/{k}"), v))
    .collect()
}

/// The keys upstream writes to a pod volume's `vol_data.json` (and, for the global dir,
/// only `driverName` and `volumeHandle`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct VolData {
    #[serde(
        rename = "specVolID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub spec_vol_id: String,
    #[serde(rename = "volumeHandle")]
    pub volume_handle: String,
    #[serde(rename = "driverName")]
    pub driver_name: String,
    #[serde(rename = "nodeName", default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    #[serde(
        rename = "attachmentID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub attachment_id: String,
    #[serde(
        rename = "volumeLifecycleMode",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub lifecycle_mode: String,
}

impl VolData {
    /// Upstream reads a missing mode as Persistent (vol_data.json written before the field).
    pub fn is_ephemeral(&self) -> bool {
        self.lifecycle_mode == EPHEMERAL
    }

    pub fn read(dir: &Path) -> Result<VolData, CsiError> {
        let p = dir.join(VOL_DATA_FILE);
        let text =
            std::fs::read(&p).map_err(|e| CsiError::Other(format!("{}: {e}", p.display())))?;
        serde_json::from_slice(&text)
            .map_err(|e| CsiError::Other(format!("failed to parse {}: {e}", p.display())))
    }

    /// Upstream `saveVolumeData`: the JSON map in `dir/vol_data.json`.
    pub fn write(&self, dir: &Path) -> Result<(), CsiError> {
        let p = dir.join(VOL_DATA_FILE);
        let body = serde_json::to_vec(self).map_err(CsiError::other)?;
        std::fs::write(&p, body).map_err(|e| {
            CsiError::Other(format!(
                "failed to save volume info data {}: {e}",
                p.display()
            ))
        })
    }
}

/// Upstream `GetVolumesInUse` for CSI: `kubernetes.io/csi/<driver>^<handle>` of every
/// persistent CSI volume a pod directory under `pods_root` has set up (inline ephemeral
/// volumes are neither attachable nor device-mountable, so upstream leaves them out).
pub fn volumes_in_use(pods_root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(pods) = std::fs::read_dir(pods_root) else {
        return out;
    };
    for pod in pods.flatten() {
        let Ok(vols) = std::fs::read_dir(pod.path().join("volumes").join(CSI_PLUGIN_DIR)) else {
            continue;
        };
        for v in vols.flatten() {
            if let Ok(d) = VolData::read(&v.path()) {
                if !d.is_ephemeral() {
                    out.push(unique_volume_name(&d.driver_name, &d.volume_handle));
                }
            }
        }
    }
    out
}

/// The CSI volumes set up in any pod directory under `pods_root`: `(pod dir, volume dir, data)`.
pub(crate) fn published_volumes(pods_root: &Path) -> Vec<(PathBuf, VolData)> {
    let mut out = Vec::new();
    let Ok(pods) = std::fs::read_dir(pods_root) else {
        return out;
    };
    for pod in pods.flatten() {
        let Ok(vols) = std::fs::read_dir(pod.path().join("volumes").join(CSI_PLUGIN_DIR)) else {
            continue;
        };
        for v in vols.flatten() {
            if let Ok(d) = VolData::read(&v.path()) {
                out.push((v.path(), d));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn names_and_paths() {
        assert_eq!(
            unique_volume_name("d.example", "vol-1"),
            "kubernetes.io/csi/d.example^vol-1"
        );
        // sha256("vol-1d.examplenode-1"), as upstream's getAttachmentName hashes.
        let a = attachment_name("vol-1", "d.example", "node-1");
        assert_eq!(a.len(), 68);
        assert_eq!(a, format!("csi-{}", sha256_hex("vol-1d.examplenode-1")));
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            global_dir(Path::new("/k/plugins/kubernetes.io/csi"), "d", "abc"),
            Path::new(
                "/k/plugins/kubernetes.io/csi/d/ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
            )
        );
        assert_eq!(
            pod_volume_dir(Path::new("/k/pods/u1"), "pv1"),
            Path::new("/k/pods/u1/volumes/kubernetes.io~csi/pv1")
        );
        assert_eq!(
            inline_volume_handle("u1", "scratch"),
            format!("csi-{}", sha256_hex("u1scratch"))
        );
    }

    #[test]
    fn pod_info() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                service_account_name: Some("sa".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let attrs = pod_info_attrs(&pod, true);
        let want: BTreeMap<String, String> = [
            ("csi.storage.k8s.io/pod.name", "p"),
            ("csi.storage.k8s.io/pod.namespace", "ns"),
            ("csi.storage.k8s.io/pod.uid", "u1"),
            ("csi.storage.k8s.io/serviceAccount.name", "sa"),
            ("csi.storage.k8s.io/ephemeral", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(attrs, want);
        assert_eq!(
            pod_info_attrs(&pod, false)["csi.storage.k8s.io/ephemeral"],
            "false"
        );
    }

    #[test]
    fn vol_data_round_trip_and_in_use() {
        let t = tempfile::tempdir().unwrap();
        let pods = t.path();
        let d1 = pod_volume_dir(&pods.join("u1"), "pv1");
        let d2 = pod_volume_dir(&pods.join("u2"), "inline");
        std::fs::create_dir_all(&d1).unwrap();
        std::fs::create_dir_all(&d2).unwrap();
        let persistent = VolData {
            spec_vol_id: "pv1".into(),
            volume_handle: "h1".into(),
            driver_name: "d".into(),
            node_name: "n".into(),
            attachment_id: attachment_name("h1", "d", "n"),
            lifecycle_mode: PERSISTENT.into(),
        };
        persistent.write(&d1).unwrap();
        VolData {
            volume_handle: "h2".into(),
            driver_name: "d".into(),
            lifecycle_mode: EPHEMERAL.into(),
            ..Default::default()
        }
        .write(&d2)
        .unwrap();
        assert_eq!(VolData::read(&d1).unwrap(), persistent);
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d1.join(VOL_DATA_FILE)).unwrap()).unwrap();
        assert_eq!(json["specVolID"], "pv1");
        assert_eq!(json["volumeLifecycleMode"], "Persistent");
        // The global dir's file has only two keys, as upstream writes it.
        let global = VolData {
            volume_handle: "h1".into(),
            driver_name: "d".into(),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&global).unwrap(),
            serde_json::json!({"volumeHandle": "h1", "driverName": "d"})
        );
        assert_eq!(volumes_in_use(pods), ["kubernetes.io/csi/d^h1"]);
        assert_eq!(published_volumes(pods).len(), 2);
        assert!(volumes_in_use(&pods.join("absent")).is_empty());
    }
}
