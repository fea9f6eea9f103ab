//! The CSI set up and tear down operations (upstream `csi_attacher.go` `WaitForAttach`,
//! `MountDevice`, `UnmountDevice`; `csi_mounter.go` `SetUpAt`, `TearDownAt`).

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use k8s_openapi::api::core::v1::{CSIVolumeSource, Pod, Secret, Volume};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use kube::Api;

use super::node::{Node, VolumeRequest};
use super::{
    attachment_name, global_dir, inline_volume_handle, pod_info_attrs, pod_volume_dir, CsiError,
    CsiSetUps, CsiVolumes, Published, SetUpFailure, Step, VolData, EPHEMERAL, GLOBAL_MOUNT,
    PERSISTENT, VOL_DATA_FILE,
};
use crate::volumes::claims::{BoundClaim, Claims};
use crate::volumes::persistent::FsGroup;
use crate::volumes::{mounted_fs_type, ownership};

/// How long a set up waits for the CSIDriver lister's first list.
const LISTER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Upstream's plugin name in `storage_operation_duration_seconds` for a CSI driver.
pub(super) fn metric_plugin(driver: &str) -> String {
    format!("kubernetes.io/csi:{driver}")
}

pub(super) fn is_mounted(p: &Path) -> bool {
    matches!(mounted_fs_type(p), Ok(Some(_)))
}

fn mkdir(p: &Path) -> Result<(), CsiError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(p)
        .map_err(|e| CsiError::Other(format!("failed to create dir {}: {e}", p.display())))
}

/// Upstream `removeMountDir`: the target if it is not mounted (and empty), the vol_data.json
/// beside it, and their directory.
pub(super) fn remove_mount_dir(target: &Path) -> Result<(), CsiError> {
    if is_mounted(target) {
        return Err(CsiError::Other(format!(
            "{} is still mounted",
            target.display()
        )));
    }
    let gone = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(CsiError::Other(format!(
            "failed to remove {}: {e}",
            target.display()
        ))),
        _ => Ok(()),
    };
    gone(std::fs::remove_dir(target))?;
    if let Some(dir) = target.parent() {
        gone(std::fs::remove_file(dir.join(VOL_DATA_FILE)))?;
        gone(std::fs::remove_dir(dir))?;
    }
    Ok(())
}

/// What the CSIDriver object says (upstream: a missing object means attach required, pod info
/// not wanted, persistent volumes only, fsGroup by fsType and access mode).
#[derive(Debug, Clone, Default)]
pub struct DriverPolicy {
    pub exists: bool,
    pub attach_required: bool,
    pub pod_info_on_mount: bool,
    pub ephemeral: bool,
    /// `volumeLifecycleModes` as the object lists them (for the refusal's message).
    pub modes: Vec<String>,
    pub fs_group_policy: Option<String>,
}

impl DriverPolicy {
    pub fn of(d: Option<&CSIDriver>) -> Self {
        let Some(d) = d else {
            return DriverPolicy {
                attach_required: true,
                ..Default::default()
            };
        };
        let modes = d.spec.volume_lifecycle_modes.clone().unwrap_or_default();
        DriverPolicy {
            exists: true,
            attach_required: d.spec.attach_required != Some(false),
            pod_info_on_mount: d.spec.pod_info_on_mount == Some(true),
            ephemeral: modes.iter().any(|m| m == EPHEMERAL),
            modes,
            fs_group_policy: d.spec.fs_group_policy.clone(),
        }
    }

    /// Upstream `supportsFSGroup`: whether the kubelet applies the pod's fsGroup after publish.
    pub fn applies_fs_group(&self, fs_type: &str, rwo: bool, read_only: bool) -> bool {
        match self.fs_group_policy.as_deref() {
            _ if read_only => false,
            Some("None") => false,
            Some("File") => true,
            _ => !fs_type.is_empty() && rwo,
        }
    }
}

/// What a publish needs of the pod's claim or inline volume.
struct Plan<'a> {
    /// The directory name under `kubernetes.io~csi` (PV name or pod volume name).
    spec_name: String,
    driver: String,
    req: VolumeRequest,
    read_only: bool,
    ephemeral: bool,
    stage_secret: Option<(String, String)>,
    publish_secret: Option<(String, String)>,
    rwo: bool,
    pod: &'a Pod,
}

impl CsiVolumes {
    /// Sets up every CSI volume of `pod` its containers use: PVC volumes whose PV has a `csi:`
    /// source (resolved in `claims`) and inline `csi` volumes. One result per volume.
    pub async fn set_up_pod(
        &self,
        pod: &Pod,
        pod_dir: &Path,
        claims: &Claims,
        fs_group: FsGroup,
    ) -> CsiSetUps {
        let mut out = BTreeMap::new();
        let (mounts, devices) = crate::volumes::claims::volume_uses(pod);
        for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let plan = if let Some(Ok(c)) = claims.0.get(&v.name) {
                match plan_claim(pod, c) {
                    Some(p) => p,
                    None => continue,
                }
            } else if let Some(src) = &v.csi {
                if !mounts.contains(&v.name) && !devices.contains(&v.name) {
                    continue;
                }
                plan_inline(pod, v, src)
            } else {
                continue;
            };
            let res = self.set_up(pod_dir, plan, fs_group).await;
            if let Err(e) = &res {
                tracing::warn!(volume = %v.name, step = ?e.step, error = %e.error, "CSI volume set up failed");
            }
            out.insert(v.name.clone(), res);
        }
        out
    }

    async fn set_up(
        &self,
        pod_dir: &Path,
        mut p: Plan<'_>,
        fs_group: FsGroup,
    ) -> Result<Published, SetUpFailure> {
        let dir = pod_volume_dir(pod_dir, &p.spec_name);
        let target = dir.join("mount");
        let _guard = self.lock(&p.driver, &p.req.handle).await;
        if is_mounted(&target) {
            return Ok(Published {
                path: target,
                read_only: p.read_only,
            });
        }
        let start = Instant::now();
        let policy = DriverPolicy::of(self.csi_driver(&p.driver).await.as_ref());
        if p.ephemeral && !policy.ephemeral {
            let why = if policy.exists {
                let modes: Vec<String> = policy.modes.iter().map(|m| format!("{m:?}")).collect();
                format!(
                    "volume mode \"{EPHEMERAL}\" not supported by driver {} (only supports [{}])",
                    p.driver,
                    modes.join(" ")
                )
            } else {
                format!(
                    "volume mode \"{EPHEMERAL}\" not supported by driver {} (no CSIDriver object)",
                    p.driver
                )
            };
            return Err(SetUpFailure::at(Step::SetUp)(CsiError::Other(format!(
                "kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: {why}"
            ))));
        }
        if !p.ephemeral && policy.attach_required {
            p.req.publish_context = self
                .wait_for_attach(&p.driver, &p.req.handle)
                .await
                .map_err(SetUpFailure::at(Step::WaitForAttach))?;
        }
        if policy.pod_info_on_mount {
            p.req
                .volume_context
                .extend(pod_info_attrs(p.pod, p.ephemeral));
        }
        let endpoint = self
            .endpoint(
                if p.ephemeral {
                    "mounter.SetUpAt"
                } else {
                    "attacher.MountDevice"
                },
                &p.driver,
            )
            .map_err(SetUpFailure::at(if p.ephemeral {
                Step::SetUp
            } else {
                Step::MountDevice
            }))?;
        let mut node = Node::connect(&endpoint).map_err(SetUpFailure::at(Step::SetUp))?;
        let staging = if p.ephemeral {
            None
        } else {
            self.stage(&mut node, &p)
                .await
                .map_err(SetUpFailure::at(Step::MountDevice))?
        };
        let res = self
            .publish(&mut node, &p, &dir, &target, staging.as_deref())
            .await;
        crate::metrics::record_storage_operation(
            &metric_plugin(&p.driver),
            "volume_mount",
            start.elapsed(),
            res.is_ok(),
        );
        res.map_err(SetUpFailure::at(Step::SetUp))?;
        if fs_group.gid.is_some() && policy.applies_fs_group(&p.req.fs_type, p.rwo, p.read_only) {
            let t = target.clone();
            tokio::task::spawn_blocking(move || {
                ownership::set_volume_ownership(&t, fs_group.gid, fs_group.policy, false)
            })
            .await
            .map_err(CsiError::other)
            .and_then(|r| r.map(drop).map_err(CsiError::other))
            .map_err(SetUpFailure::at(Step::SetUp))?;
        }
        tracing::info!(driver = %p.driver, handle = %p.req.handle, target = %target.display(), "CSI volume published");
        Ok(Published {
            path: target,
            read_only: p.read_only,
        })
    }

    /// Upstream `MountDevice`: the global dir and its vol_data.json always (the unstage needs
    /// them), NodeStageVolume when the driver stages and the staging path is not mounted yet.
    /// Returns the staging path when the driver stages.
    async fn stage(&self, node: &mut Node, p: &Plan<'_>) -> Result<Option<PathBuf>, CsiError> {
        let gdir = global_dir(&self.plugin_dir(), &p.driver, &p.req.handle);
        let staging = gdir.join(GLOBAL_MOUNT);
        mkdir(&staging)?;
        VolData {
            volume_handle: p.req.handle.clone(),
            driver_name: p.driver.clone(),
            ..Default::default()
        }
        .write(&gdir)?;
        if !node.supports_stage().await? {
            return Ok(None);
        }
        if is_mounted(&staging) {
            return Ok(Some(staging));
        }
        let mut req = p.req.clone();
        if let Some((ns, name)) = &p.stage_secret {
            req.secrets = self.secret(ns, name).await?;
        }
        if let Err(e) = node.stage(&req, &staging).await {
            // Upstream `MountDevice`'s deferred clean up: nothing staged, nothing left behind.
            if !is_mounted(&staging) {
                let _ = remove_mount_dir(&staging);
                if let Some(d) = gdir.parent() {
                    let _ = std::fs::remove_dir(d);
                }
            }
            return Err(e);
        }
        tracing::info!(driver = %p.driver, handle = %p.req.handle, path = %staging.display(), "CSI volume staged");
        Ok(Some(staging))
    }

    async fn publish(
        &self,
        node: &mut Node,
        p: &Plan<'_>,
        dir: &Path,
        target: &Path,
        staging: Option<&Path>,
    ) -> Result<(), CsiError> {
        mkdir(dir)?;
        VolData {
            spec_vol_id: p.spec_name.clone(),
            volume_handle: p.req.handle.clone(),
            driver_name: p.driver.clone(),
            node_name: self.node_name.clone(),
            attachment_id: attachment_name(&p.req.handle, &p.driver, &self.node_name),
            lifecycle_mode: if p.ephemeral { EPHEMERAL } else { PERSISTENT }.into(),
        }
        .write(dir)?;
        let mut req = p.req.clone();
        if let Some((ns, name)) = &p.publish_secret {
            req.secrets = self.secret(ns, name).await.map_err(|e| {
                CsiError::Other(format!(
                    "fetching NodePublishSecretRef {ns}/{name} failed: {e}"
                ))
            })?;
        }
        let res = node.publish(&req, staging, target, p.read_only).await;
        if res.is_err() && !is_mounted(target) {
            // Nothing was published: the target goes, so there is nothing to unpublish. The
            // vol_data.json stays: it ties the pod to the staged volume, whose unstage the
            // pod's tear down still owes if it never gets published (upstream keeps the device
            // "uncertain" in its actual state for the same reason).
            match std::fs::remove_dir(target) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!(error = %e, "cannot remove a CSI target after a failed publish")
                }
                _ => {}
            }
        }
        res
    }

    /// The CSIDriver object from the lister, None when absent (upstream's defaults apply then).
    /// The first list is waited for (briefly): before it, every driver would look absent.
    async fn csi_driver(&self, name: &str) -> Option<CSIDriver> {
        let store = self.csi_drivers.as_ref()?;
        let ready = tokio::time::timeout(LISTER_WAIT, store.wait_until_ready()).await;
        if !matches!(ready, Ok(Ok(()))) {
            tracing::warn!(
                driver = name,
                "CSIDriver lister not synced; using the defaults"
            );
        }
        store
            .get(&kube::runtime::reflector::ObjectRef::new(name))
            .map(|d| (*d).clone())
    }

    /// Upstream `waitForVolumeAttachment` (one probe per sync; the pod worker retries): the
    /// attachment's `status.attachmentMetadata` (the publish context) once it is attached.
    async fn wait_for_attach(
        &self,
        driver: &str,
        handle: &str,
    ) -> Result<BTreeMap<String, String>, CsiError> {
        let name = attachment_name(handle, driver, &self.node_name);
        let client = self.client.as_ref().ok_or_else(|| {
            CsiError::Other(format!(
                "volume {handle} needs VolumeAttachment {name} but the kubelet has no API server"
            ))
        })?;
        let va = Api::<VolumeAttachment>::all(client.clone())
            .get(&name)
            .await
            .map_err(|e| {
                CsiError::Other(format!(
                    "volume {handle} has GET error for volume attachment {name}: {}",
                    crate::volumes::claims::api_message(e)
                ))
            })?;
        verify_attachment(&va, handle)
    }

    /// Upstream `getCredentialsFromSecret`.
    async fn secret(&self, ns: &str, name: &str) -> Result<BTreeMap<String, String>, CsiError> {
        let client = self
            .client
            .as_ref()
            .ok_or_else(|| CsiError::Other("no API server to read secrets from".into()))?;
        let s = Api::<Secret>::namespaced(client.clone(), ns)
            .get(name)
            .await
            .map_err(|e| CsiError::Other(crate::volumes::claims::api_message(e)))?;
        let mut out = BTreeMap::new();
        for (k, v) in s.data.unwrap_or_default() {
            out.insert(k, String::from_utf8_lossy(&v.0).into_owned());
        }
        Ok(out)
    }
}

/// Upstream `verifyAttachmentStatus`: attached gives the publish context; a deletion or the
/// attacher's error fails; anything else is not attached yet.
pub fn verify_attachment(
    va: &VolumeAttachment,
    handle: &str,
) -> Result<BTreeMap<String, String>, CsiError> {
    if va.metadata.deletion_timestamp.is_some() {
        return Err(CsiError::Other("volume attachment is being deleted".into()));
    }
    let st = va.status.as_ref();
    if st.is_some_and(|s| s.attached) {
        return Ok(st
            .and_then(|s| s.attachment_metadata.clone())
            .unwrap_or_default());
    }
    if let Some(e) = st.and_then(|s| s.attach_error.as_ref()) {
        return Err(CsiError::Other(e.message.clone().unwrap_or_default()));
    }
    Err(CsiError::Other(format!(
        "volume {handle} is not attached yet (VolumeAttachment {} status.attached is false)",
        va.metadata.name.as_deref().unwrap_or_default()
    )))
}

/// A PVC volume whose PV has a `csi:` source; None for other PVs.
fn plan_claim<'a>(pod: &'a Pod, c: &BoundClaim) -> Option<Plan<'a>> {
    let spec = c.pv.spec.as_ref()?;
    let src = spec.csi.as_ref()?;
    let modes = spec.access_modes.clone().unwrap_or_default();
    let secret = |r: &Option<k8s_openapi::api::core::v1::SecretReference>| {
        r.as_ref().map(|r| {
            (
                r.namespace.clone().unwrap_or_else(|| "default".into()),
                r.name.clone().unwrap_or_default(),
            )
        })
    };
    Some(Plan {
        spec_name: c.pv_name().to_string(),
        driver: src.driver.clone(),
        req: VolumeRequest {
            handle: src.volume_handle.clone(),
            fs_type: src.fs_type.clone().unwrap_or_default(),
            mount_flags: spec.mount_options.clone().unwrap_or_default(),
            access_mode: modes.first().cloned(),
            volume_context: src.volume_attributes.clone().unwrap_or_default(),
            ..Default::default()
        },
        read_only: c.read_only || src.read_only == Some(true),
        ephemeral: false,
        stage_secret: secret(&src.node_stage_secret_ref),
        publish_secret: secret(&src.node_publish_secret_ref),
        rwo: modes.iter().any(|m| m == "ReadWriteOnce"),
        pod,
    })
}

/// An inline ephemeral volume: its handle from the pod UID and volume name, ReadWriteOnce, the
/// publish secret from the pod's namespace.
fn plan_inline<'a>(pod: &'a Pod, v: &Volume, src: &CSIVolumeSource) -> Plan<'a> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    Plan {
        spec_name: v.name.clone(),
        driver: src.driver.clone(),
        req: VolumeRequest {
            handle: inline_volume_handle(uid, &v.name),
            fs_type: src.fs_type.clone().unwrap_or_default(),
            volume_context: src.volume_attributes.clone().unwrap_or_default(),
            ..Default::default()
        },
        read_only: src.read_only == Some(true),
        ephemeral: true,
        stage_secret: None,
        publish_secret: src
            .node_publish_secret_ref
            .as_ref()
            .map(|r| (ns, r.name.clone())),
        rwo: true,
        pod,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::storage::v1::{
        CSIDriverSpec, VolumeAttachmentSpec, VolumeAttachmentStatus, VolumeError,
    };

    #[test]
    fn driver_policy() {
        let none = DriverPolicy::of(None);
        assert!(none.attach_required && !none.exists && !none.ephemeral);
        let d = CSIDriver {
            spec: CSIDriverSpec {
                attach_required: Some(false),
                pod_info_on_mount: Some(true),
                volume_lifecycle_modes: Some(vec!["Persistent".into(), "Ephemeral".into()]),
                ..Default::default()
            },
            ..Default::default()
        };
        let p = DriverPolicy::of(Some(&d));
        assert!(p.exists && !p.attach_required && p.pod_info_on_mount && p.ephemeral);
        // fsGroup: (policy, fsType, rwo, readOnly) -> applied.
        let table = [
            (None, "ext4", true, false, true),
            (None, "", true, false, false),
            (None, "ext4", false, false, false),
            (Some("File"), "", false, false, true),
            (Some("None"), "ext4", true, false, false),
            (Some("File"), "ext4", true, true, false),
            (Some("ReadWriteOnceWithFSType"), "xfs", true, false, true),
        ];
        for (policy, fs, rwo, ro, want) in table {
            let p = DriverPolicy {
                fs_group_policy: policy.map(String::from),
                ..Default::default()
            };
            assert_eq!(
                p.applies_fs_group(fs, rwo, ro),
                want,
                "{policy:?} {fs} {rwo} {ro}"
            );
        }
    }

    #[test]
    fn attachment_status() {
        let va = |attached: bool, err: Option<&str>| VolumeAttachment {
            metadata: kube::api::ObjectMeta {
                name: Some("csi-x".into()),
                ..Default::default()
            },
            spec: VolumeAttachmentSpec::default(),
            status: Some(VolumeAttachmentStatus {
                attached,
                attachment_metadata: attached
                    .then(|| BTreeMap::from([("dev".to_string(), "/dev/x".to_string())])),
                attach_error: err.map(|m| VolumeError {
                    message: Some(m.into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        };
        assert_eq!(
            verify_attachment(&va(true, None), "h").unwrap()["dev"],
            "/dev/x"
        );
        assert_eq!(
            verify_attachment(&va(false, Some("no such disk")), "h")
                .unwrap_err()
                .to_string(),
            "no such disk"
        );
        assert!(verify_attachment(&va(false, None), "h")
            .unwrap_err()
            .to_string()
            .contains("not attached yet"));
    }
}
