//! Volume usage from the driver (upstream `csi_metrics.go` `GetMetrics`): `NodeGetVolumeStats`
//! on a published volume, when the driver has `GET_VOLUME_STATS`, for `/stats/summary`.

use std::path::Path;
use std::time::Duration;

use csi_proto::csi::v1::node_service_capability::rpc::Type as Rpc;

use super::node::{Node, VolumeStats};
use super::{global_dir, pod_volume_dir, CsiError, CsiVolumes, VolData, GLOBAL_MOUNT};

/// A summary must not wait on a stuck driver for upstream's two minutes.
const STATS_TIMEOUT: Duration = Duration::from_secs(10);

impl CsiVolumes {
    /// The usage of the pod's CSI volume `name` (its directory under `kubernetes.io~csi`), as
    /// the driver reports it; None when the driver does not report usage.
    pub async fn volume_stats(
        &self,
        pod_dir: &Path,
        name: &str,
    ) -> Result<Option<VolumeStats>, CsiError> {
        let dir = pod_volume_dir(pod_dir, name);
        let data = VolData::read(&dir)?;
        let endpoint = self.endpoint("metricsProvider.GetMetrics", &data.driver_name)?;
        let call = async {
            let mut node = Node::connect(&endpoint)?;
            if !node.capabilities().await?.contains(&Rpc::GetVolumeStats) {
                return Ok(None);
            }
            let staging = global_dir(&self.plugin_dir(), &data.driver_name, &data.volume_handle)
                .join(GLOBAL_MOUNT);
            let staging = (!data.is_ephemeral() && staging.exists()).then_some(staging);
            node.volume_stats(&data.volume_handle, &dir.join("mount"), staging.as_deref())
                .await
                .map(Some)
        };
        tokio::time::timeout(STATS_TIMEOUT, call)
            .await
            .map_err(|_| CsiError::Other("NodeGetVolumeStats timed out".into()))?
    }
}
