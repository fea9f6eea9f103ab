//! The CSI tear down (upstream `csi_mounter.go` `TearDownAt` = `NodeUnpublishVolume`,
//! `csi_attacher.go` `UnmountDevice` = `NodeUnstageVolume`).

use std::path::Path;
use std::time::Instant;

use super::mount::{is_mounted, metric_plugin, remove_mount_dir};
use super::node::Node;
use super::{global_dir, CsiError, CsiVolumes, VolData, GLOBAL_MOUNT};

impl CsiVolumes {
    /// Tears down every CSI volume of the pod directory: NodeUnpublishVolume, then, for a
    /// persistent volume no other pod on the node uses any more, NodeUnstageVolume. Stops at the
    /// first failure (the caller retries; nothing else below the pod directory may be unmounted
    /// behind the driver's back meanwhile).
    pub async fn tear_down_pod(&self, pod_dir: &Path) -> Result<(), CsiError> {
        let base = pod_dir.join("volumes").join(super::CSI_PLUGIN_DIR);
        let Ok(entries) = std::fs::read_dir(&base) else {
            return Ok(());
        };
        for e in entries.flatten() {
            let dir = e.path();
            let target = dir.join("mount");
            let data = match VolData::read(&dir) {
                Ok(d) => d,
                Err(_) if !is_mounted(&target) => {
                    remove_mount_dir(&target)?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let _guard = self.lock(&data.driver_name, &data.volume_handle).await;
            let start = Instant::now();
            let res = self.unpublish(&data, &target).await;
            crate::metrics::record_storage_operation(
                &metric_plugin(&data.driver_name),
                "volume_unmount",
                start.elapsed(),
                res.is_ok(),
            );
            res?;
            tracing::info!(driver = %data.driver_name, handle = %data.volume_handle, target = %target.display(), "CSI volume unpublished");
            if !data.is_ephemeral() {
                self.unstage_if_unused(&data).await?;
            }
        }
        let _ = std::fs::remove_dir(&base);
        Ok(())
    }

    async fn unpublish(&self, data: &VolData, target: &Path) -> Result<(), CsiError> {
        if target.exists() || is_mounted(target) {
            let endpoint = self.endpoint("Unmounter.TearDownAt", &data.driver_name)?;
            let mut node = Node::connect(&endpoint)?;
            node.unpublish(&data.volume_handle, target).await?;
        }
        remove_mount_dir(target)
    }

    /// Upstream `UnmountDevice`, once no pod directory holds the volume. The global dir is
    /// today's upstream path or, for a volume a 1.20 kubelet staged before it was swapped for
    /// this one, its `pv/<pv name>` path (whose vol_data.json names the same volume).
    async fn unstage_if_unused(&self, data: &VolData) -> Result<(), CsiError> {
        let current = global_dir(&self.plugin_dir(), &data.driver_name, &data.volume_handle);
        let legacy = self.plugin_dir().join("pv").join(&data.spec_vol_id);
        let same = |d: &Path| {
            VolData::read(d).is_ok_and(|g| {
                g.driver_name == data.driver_name && g.volume_handle == data.volume_handle
            })
        };
        let gdir = if current.exists() {
            current
        } else if !data.spec_vol_id.is_empty() && legacy.exists() && same(&legacy) {
            legacy
        } else {
            return Ok(());
        };
        let pods_root = self.root_dir.join("pods");
        let in_use = super::published_volumes(&pods_root)
            .into_iter()
            .any(|(_, d)| {
                d.driver_name == data.driver_name && d.volume_handle == data.volume_handle
            });
        if in_use {
            return Ok(());
        }
        let staging = gdir.join(GLOBAL_MOUNT);
        let endpoint = self.endpoint("attacher.UnmountDevice", &data.driver_name)?;
        let mut node = Node::connect(&endpoint)?;
        let start = Instant::now();
        let res = async {
            if node.supports_stage().await? {
                node.unstage(&data.volume_handle, &staging).await?;
            }
            remove_mount_dir(&staging)
        }
        .await;
        crate::metrics::record_storage_operation(
            &metric_plugin(&data.driver_name),
            "unmount_device",
            start.elapsed(),
            res.is_ok(),
        );
        res?;
        tracing::info!(driver = %data.driver_name, handle = %data.volume_handle, "CSI volume unstaged");
        if let Some(driver_dir) = gdir.parent() {
            let _ = std::fs::remove_dir(driver_dir);
        }
        Ok(())
    }
}
