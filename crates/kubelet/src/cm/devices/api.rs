//! The device plugin API (upstream `k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1`), generated
//! by build.rs from proto/deviceplugin/v1beta1/api.proto, and its constants (`constants.go`).

use std::time::Duration;

/// The generated messages, the `Registration` server and the `DevicePlugin` client.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1beta1 {
    tonic::include_proto!("v1beta1");
}

pub use v1beta1::*;

/// A device's `health` when it can be allocated (upstream `pluginapi.Healthy`).
pub const HEALTHY: &str = "Healthy";
/// The API version the kubelet speaks (upstream `pluginapi.Version`).
pub const VERSION: &str = "v1beta1";
/// Versions a plugin may register with (upstream `pluginapi.SupportedVersions`).
pub const SUPPORTED_VERSIONS: &[&str] = &[VERSION];
/// The registration socket's name in `<root-dir>/device-plugins/` (upstream `KubeletSocket`).
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// Upstream `KubeletPreStartContainerRPCTimeoutInSecs`.
pub const PRE_START_CONTAINER_TIMEOUT: Duration = Duration::from_secs(30);
