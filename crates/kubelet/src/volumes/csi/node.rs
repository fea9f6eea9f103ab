//! The CSI Node service calls the kubelet makes (upstream `csi_client.go`): one lazily connected
//! channel per operation to the driver's registered endpoint, each call bounded by upstream's
//! `csiTimeout` (2 minutes: a stage may format a disk). Errors keep the driver's gRPC code and
//! message, printed as grpc-go prints them, since upstream's events show them that way.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use csi::node_client::NodeClient;
use csi::node_service_capability::rpc::Type as Rpc;
use csi::volume_capability::access_mode::Mode;
use csi_proto::csi::v1 as csi;
use tonic::transport::Channel;

use super::CsiError;
use crate::pluginmanager::registration::unix_channel;

/// Upstream `csiTimeout`.
const CSI_TIMEOUT: Duration = Duration::from_secs(120);

/// grpc-go's names of the status codes (`codes.Code.String()`).
fn code_name(c: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match c {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

impl From<tonic::Status> for CsiError {
    fn from(s: tonic::Status) -> Self {
        CsiError::Rpc {
            code: code_name(s.code()).to_string(),
            message: s.message().to_string(),
        }
    }
}

/// Upstream `asCSIAccessModeV1` for the first of the PV's access modes (ReadWriteOnce when it
/// has none, as for inline volumes).
pub fn access_mode(k8s_mode: Option<&str>) -> Mode {
    match k8s_mode {
        Some("ReadOnlyMany") => Mode::MultiNodeReaderOnly,
        Some("ReadWriteMany") => Mode::MultiNodeMultiWriter,
        _ => Mode::SingleNodeWriter,
    }
}

/// What a stage or publish asks for beyond the paths.
#[derive(Debug, Clone, Default)]
pub struct VolumeRequest {
    pub handle: String,
    pub fs_type: String,
    pub mount_flags: Vec<String>,
    pub access_mode: Option<String>,
    pub publish_context: BTreeMap<String, String>,
    pub volume_context: BTreeMap<String, String>,
    pub secrets: BTreeMap<String, String>,
}

impl VolumeRequest {
    fn capability(&self) -> csi::VolumeCapability {
        csi::VolumeCapability {
            access_type: Some(csi::volume_capability::AccessType::Mount(
                csi::volume_capability::MountVolume {
                    fs_type: self.fs_type.clone(),
                    mount_flags: self.mount_flags.clone(),
                    volume_mount_group: String::new(),
                },
            )),
            access_mode: Some(csi::volume_capability::AccessMode {
                mode: access_mode(self.access_mode.as_deref()) as i32,
            }),
        }
    }
}

fn map(m: &BTreeMap<String, String>) -> HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// A client of one driver's Node service.
pub struct Node {
    client: NodeClient<Channel>,
}

impl Node {
    pub fn connect(endpoint: &Path) -> Result<Node, CsiError> {
        let ch = unix_channel(endpoint).map_err(CsiError::other)?;
        Ok(Node {
            client: NodeClient::new(ch),
        })
    }

    async fn timed<T>(
        fut: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, CsiError> {
        match tokio::time::timeout(CSI_TIMEOUT, fut).await {
            Ok(r) => Ok(r?.into_inner()),
            Err(_) => Err(CsiError::Rpc {
                code: "DeadlineExceeded".into(),
                message: "context deadline exceeded".into(),
            }),
        }
    }

    /// The RPC capabilities the node service advertises.
    pub async fn capabilities(&mut self) -> Result<Vec<Rpc>, CsiError> {
        let resp = Self::timed(
            self.client
                .node_get_capabilities(csi::NodeGetCapabilitiesRequest {}),
        )
        .await?;
        Ok(resp
            .capabilities
            .into_iter()
            .filter_map(|c| match c.r#type {
                Some(csi::node_service_capability::Type::Rpc(r)) => Rpc::try_from(r.r#type).ok(),
                None => None,
            })
            .collect())
    }

    /// Upstream `NodeSupportsStageUnstage`.
    pub async fn supports_stage(&mut self) -> Result<bool, CsiError> {
        Ok(self
            .capabilities()
            .await?
            .contains(&Rpc::StageUnstageVolume))
    }

    pub async fn stage(&mut self, r: &VolumeRequest, staging: &Path) -> Result<(), CsiError> {
        let req = csi::NodeStageVolumeRequest {
            volume_id: r.handle.clone(),
            publish_context: map(&r.publish_context),
            staging_target_path: staging.display().to_string(),
            volume_capability: Some(r.capability()),
            secrets: map(&r.secrets),
            volume_context: map(&r.volume_context),
        };
        Self::timed(self.client.node_stage_volume(req))
            .await
            .map(drop)
    }

    pub async fn unstage(&mut self, handle: &str, staging: &Path) -> Result<(), CsiError> {
        let req = csi::NodeUnstageVolumeRequest {
            volume_id: handle.to_string(),
            staging_target_path: staging.display().to_string(),
        };
        Self::timed(self.client.node_unstage_volume(req))
            .await
            .map(drop)
    }

    pub async fn publish(
        &mut self,
        r: &VolumeRequest,
        staging: Option<&Path>,
        target: &Path,
        read_only: bool,
    ) -> Result<(), CsiError> {
        let req = csi::NodePublishVolumeRequest {
            volume_id: r.handle.clone(),
            publish_context: map(&r.publish_context),
            staging_target_path: staging.map(|p| p.display().to_string()).unwrap_or_default(),
            target_path: target.display().to_string(),
            volume_capability: Some(r.capability()),
            readonly: read_only,
            secrets: map(&r.secrets),
            volume_context: map(&r.volume_context),
        };
        Self::timed(self.client.node_publish_volume(req))
            .await
            .map(drop)
    }

    pub async fn unpublish(&mut self, handle: &str, target: &Path) -> Result<(), CsiError> {
        let req = csi::NodeUnpublishVolumeRequest {
            volume_id: handle.to_string(),
            target_path: target.display().to_string(),
        };
        Self::timed(self.client.node_unpublish_volume(req))
            .await
            .map(drop)
    }

    /// `NodeGetVolumeStats` (upstream `csi_metrics.go`): bytes and inodes of a published volume.
    pub async fn volume_stats(
        &mut self,
        handle: &str,
        path: &Path,
        staging: Option<&Path>,
    ) -> Result<VolumeStats, CsiError> {
        let req = csi::NodeGetVolumeStatsRequest {
            volume_id: handle.to_string(),
            volume_path: path.display().to_string(),
            staging_target_path: staging.map(|p| p.display().to_string()).unwrap_or_default(),
        };
        let resp = Self::timed(self.client.node_get_volume_stats(req)).await?;
        Ok(VolumeStats::from_usage(&resp.usage))
    }
}

/// A volume's usage as the driver reports it (upstream `volume.Metrics`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VolumeStats {
    pub available_bytes: Option<u64>,
    pub capacity_bytes: Option<u64>,
    pub used_bytes: Option<u64>,
    pub inodes_free: Option<u64>,
    pub inodes: Option<u64>,
    pub inodes_used: Option<u64>,
}

impl VolumeStats {
    pub fn from_usage(usage: &[csi::VolumeUsage]) -> Self {
        use csi::volume_usage::Unit;
        let n = |v: i64| u64::try_from(v).ok();
        let mut s = VolumeStats::default();
        for u in usage {
            match Unit::try_from(u.unit) {
                Ok(Unit::Bytes) => {
                    s.available_bytes = n(u.available);
                    s.capacity_bytes = n(u.total);
                    s.used_bytes = n(u.used);
                }
                Ok(Unit::Inodes) => {
                    s.inodes_free = n(u.available);
                    s.inodes = n(u.total);
                    s.inodes_used = n(u.used);
                }
                _ => {}
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_modes_and_codes() {
        assert_eq!(access_mode(None), Mode::SingleNodeWriter);
        assert_eq!(access_mode(Some("ReadWriteOnce")), Mode::SingleNodeWriter);
        assert_eq!(access_mode(Some("ReadOnlyMany")), Mode::MultiNodeReaderOnly);
        assert_eq!(
            access_mode(Some("ReadWriteMany")),
            Mode::MultiNodeMultiWriter
        );
        let e = CsiError::from(tonic::Status::internal("boom"));
        assert_eq!(e.to_string(), "rpc error: code = Internal desc = boom");
        let e = CsiError::from(tonic::Status::cancelled("x"));
        assert_eq!(e.to_string(), "rpc error: code = Canceled desc = x");
    }

    #[test]
    fn usage() {
        use csi::volume_usage::Unit;
        let s = VolumeStats::from_usage(&[
            csi::VolumeUsage {
                available: 10,
                total: 30,
                used: 20,
                unit: Unit::Bytes as i32,
            },
            csi::VolumeUsage {
                available: 1,
                total: 3,
                used: 2,
                unit: Unit::Inodes as i32,
            },
        ]);
        assert_eq!(
            s,
            VolumeStats {
                available_bytes: Some(10),
                capacity_bytes: Some(30),
                used_bytes: Some(20),
                inodes_free: Some(1),
                inodes: Some(3),
                inodes_used: Some(2),
            }
        );
    }
}
