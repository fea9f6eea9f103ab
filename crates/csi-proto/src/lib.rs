//! The two gRPC APIs of a CSI node plugin as the kubelet sees them, generated from the
//! repository's `proto/` (see build.rs): the CSI spec's `csi.v1` services (Identity, Node,
//! Controller) and the kubelet's plugin registration API (`pluginregistration.Registration`,
//! upstream `k8s.io/kubelet/pkg/apis/pluginregistration/v1`). Both client and server code are
//! generated: the kubelet is a client of both, the test driver (crates/rkubelet/tests/csi_driver)
//! a server of both.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

/// `csi.v1` (CSI specification v1.12.0).
pub mod csi {
    pub mod v1 {
        tonic::include_proto!("csi.v1");
    }
}

/// `pluginregistration` (the package of upstream's `pluginregistration/v1/api.proto`).
pub mod pluginregistration {
    tonic::include_proto!("pluginregistration");
}
