//! CRI v1 client: RuntimeService and ImageService over a unix socket.
//!
//! Three layers: [`Runtime`] is the seam (the CRI calls the kubelet makes, one method each),
//! [`GrpcRuntime`] implements it over tonic, `fake::FakeRuntime` (feature `fake`) in process for
//! tests, and [`CriClient`] is the cheap handle every manager holds: it bounds each call by its
//! timeout, reports it to the metrics observer and names the operation in errors, whatever the
//! backend. Upstream's equivalent seam is `internalapi.RuntimeService`/`ImageManagerService`.
//!
//! Mirrors upstream `pkg/kubelet/cri/remote`: one gRPC connection per endpoint, every call bounded by
//! `runtimeRequestTimeout` (default 2 m) except those upstream leaves unbounded or extends (image pulls,
//! stop with a grace period). The channel connects lazily, so a missing socket is an error of the call,
//! never of construction: the kubelet keeps running and retries while the runtime is away.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use k8s_cri::v1 as api;

pub mod events;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
mod grpc;
mod service;

pub use grpc::GrpcRuntime;
pub use service::{Reply, Runtime};

/// Default for `runtimeRequestTimeout`, as upstream.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Errors of one CRI call, naming the operation so a log line says what failed.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("invalid CRI endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint { endpoint: String, reason: String },
    #[error("CRI {op} timed out after {timeout:?}")]
    Timeout { op: &'static str, timeout: Duration },
    #[error("CRI {op} failed: {code:?}: {message}")]
    Rpc {
        op: &'static str,
        code: tonic::Code,
        message: String,
    },
}

impl CriError {
    /// The gRPC code, when the runtime answered (or the transport failed).
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            CriError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// True when the runtime says the object does not exist: callers treat removal of a missing object
    /// as done, as upstream does.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(tonic::Code::NotFound)
    }

    /// The runtime's own message, without our prefix: becomes a container status message.
    pub fn message(&self) -> String {
        match self {
            CriError::Rpc { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }
}

/// Parses `unix:///path` or a bare absolute path, as upstream's `--container-runtime-endpoint`.
pub fn parse_endpoint(endpoint: &str) -> Result<PathBuf, CriError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if endpoint.contains("://") && !endpoint.starts_with("unix://") {
        return Err(CriError::InvalidEndpoint {
            endpoint: endpoint.to_string(),
            reason: "only unix:// endpoints are supported on Linux".into(),
        });
    }
    if !path.starts_with('/') {
        return Err(CriError::InvalidEndpoint {
            endpoint: endpoint.to_string(),
            reason: "socket path must be absolute".into(),
        });
    }
    Ok(PathBuf::from(path))
}

/// Told of every call: operation name, how long it took, whether it succeeded. The kubelet
/// records `kubelet_runtime_operations_*` with it; this crate stays free of a metrics library.
pub type CallObserver = std::sync::Arc<dyn Fn(&'static str, Duration, bool) + Send + Sync>;

/// A cheap cloneable CRI handle over any [`Runtime`] backend.
#[derive(Clone)]
pub struct CriClient {
    backend: Arc<dyn Runtime>,
    timeout: Duration,
    socket: PathBuf,
    observer: Option<CallObserver>,
}

impl std::fmt::Debug for CriClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CriClient")
            .field("socket", &self.socket)
            .field("timeout", &self.timeout)
            .finish()
    }
}

macro_rules! rpc {
    ($(#[$m:meta])* $name:ident, $req:ident, $resp:ident) => {
        $(#[$m])*
        pub async fn $name(&self, req: api::$req) -> Result<api::$resp, CriError> {
            self.call(stringify!($name), self.timeout, self.backend.$name(req)).await
        }
    };
}

impl CriClient {
    /// Builds a gRPC client for `endpoint`; no connection is made until the first call.
    pub fn new(endpoint: &str, timeout: Duration) -> Result<Self, CriError> {
        let socket = parse_endpoint(endpoint)?;
        Ok(Self::with_backend(
            Arc::new(GrpcRuntime::connect_lazy(socket.clone())),
            socket,
            timeout,
        ))
    }

    /// A handle over another backend (the in-process fake); `socket` only names it in messages.
    pub fn with_backend(backend: Arc<dyn Runtime>, socket: PathBuf, timeout: Duration) -> Self {
        CriClient {
            backend,
            timeout,
            socket,
            observer: None,
        }
    }

    /// The same client, reporting every call to `observer`.
    pub fn with_observer(mut self, observer: CallObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The socket this client dials, for messages.
    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    async fn call<T, F>(&self, op: &'static str, timeout: Duration, fut: F) -> Result<T, CriError>
    where
        F: Future<Output = Result<T, tonic::Status>>,
    {
        let started = std::time::Instant::now();
        let res = match tokio::time::timeout(timeout, fut).await {
            Err(_) => Err(CriError::Timeout { op, timeout }),
            Ok(Err(status)) => Err(CriError::Rpc {
                op,
                code: status.code(),
                message: status.message().to_string(),
            }),
            Ok(Ok(resp)) => Ok(resp),
        };
        if let Some(observe) = &self.observer {
            observe(op, started.elapsed(), res.is_ok());
        }
        res
    }

    rpc!(version, VersionRequest, VersionResponse);
    rpc!(
        /// CPU, memory and writable-layer usage of containers (the stats endpoints).
        list_container_stats,
        ListContainerStatsRequest,
        ListContainerStatsResponse
    );
    rpc!(
        /// Pod-level usage, of which the stats endpoints use the sandbox's network and processes.
        list_pod_sandbox_stats,
        ListPodSandboxStatsRequest,
        ListPodSandboxStatsResponse
    );
    rpc!(
        /// Runtime conditions (RuntimeReady, NetworkReady).
        status, StatusRequest, StatusResponse
    );
    rpc!(run_pod_sandbox, RunPodSandboxRequest, RunPodSandboxResponse);
    rpc!(
        stop_pod_sandbox,
        StopPodSandboxRequest,
        StopPodSandboxResponse
    );
    rpc!(
        remove_pod_sandbox,
        RemovePodSandboxRequest,
        RemovePodSandboxResponse
    );
    rpc!(
        pod_sandbox_status,
        PodSandboxStatusRequest,
        PodSandboxStatusResponse
    );
    rpc!(
        list_pod_sandbox,
        ListPodSandboxRequest,
        ListPodSandboxResponse
    );
    rpc!(
        create_container,
        CreateContainerRequest,
        CreateContainerResponse
    );
    rpc!(
        start_container,
        StartContainerRequest,
        StartContainerResponse
    );
    rpc!(
        remove_container,
        RemoveContainerRequest,
        RemoveContainerResponse
    );
    rpc!(
        list_containers,
        ListContainersRequest,
        ListContainersResponse
    );
    rpc!(
        container_status,
        ContainerStatusRequest,
        ContainerStatusResponse
    );
    rpc!(
        /// The CPU manager moves containers between the shared pool and their exclusive CPUs.
        update_container_resources,
        UpdateContainerResourcesRequest,
        UpdateContainerResourcesResponse
    );
    rpc!(exec_sync, ExecSyncRequest, ExecSyncResponse);
    rpc!(
        /// A streaming URL on the runtime's streaming server for `kubectl exec`.
        exec, ExecRequest, ExecResponse
    );
    rpc!(
        /// A streaming URL for `kubectl attach`.
        attach, AttachRequest, AttachResponse
    );
    rpc!(
        /// A streaming URL for `kubectl port-forward` into a sandbox's network namespace.
        port_forward,
        PortForwardRequest,
        PortForwardResponse
    );
    rpc!(
        /// Makes the runtime reopen a container's log file after the kubelet renamed it (rotation).
        reopen_container_log,
        ReopenContainerLogRequest,
        ReopenContainerLogResponse
    );
    rpc!(list_images, ListImagesRequest, ListImagesResponse);
    rpc!(image_status, ImageStatusRequest, ImageStatusResponse);
    rpc!(remove_image, RemoveImageRequest, RemoveImageResponse);
    rpc!(image_fs_info, ImageFsInfoRequest, ImageFsInfoResponse);

    /// Opens CRI `GetContainerEvents`. Not bounded by the request timeout: a gRPC runtime
    /// answers with its first event, which may be long in coming; Unimplemented comes at once.
    pub async fn get_container_events(
        &self,
    ) -> Result<events::EventStream<api::ContainerEventResponse>, CriError> {
        self.call(
            "get_container_events",
            Duration::MAX,
            self.backend.get_container_events(api::GetEventsRequest {}),
        )
        .await
    }

    /// Opens containerd's event subscription with `filters` (see [`events::cri_filters`]); not
    /// bounded by the request timeout either.
    pub async fn subscribe_containerd_events(
        &self,
        filters: Vec<String>,
    ) -> Result<events::EventStream<events::Envelope>, CriError> {
        self.call(
            "subscribe_containerd_events",
            Duration::MAX,
            self.backend
                .subscribe_containerd_events(events::SubscribeRequest { filters }),
        )
        .await
    }

    /// StopContainer: the runtime waits up to `timeout` seconds of grace, so the call deadline is the
    /// request timeout plus that grace, as upstream.
    pub async fn stop_container(
        &self,
        req: api::StopContainerRequest,
    ) -> Result<api::StopContainerResponse, CriError> {
        let grace = Duration::from_secs(req.timeout.max(0) as u64);
        self.call(
            "stop_container",
            self.timeout + grace,
            self.backend.stop_container(req),
        )
        .await
    }

    /// PullImage: upstream bounds pulls by progress, not by the request timeout; a large image on a
    /// slow link may take long. We bound it generously so a hung registry cannot pin a worker forever.
    pub async fn pull_image(
        &self,
        req: api::PullImageRequest,
    ) -> Result<api::PullImageResponse, CriError> {
        self.call(
            "pull_image",
            self.timeout.max(Duration::from_secs(30 * 60)),
            self.backend.pull_image(req),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            parse_endpoint("unix:///run/containerd/containerd.sock").unwrap(),
            PathBuf::from("/run/containerd/containerd.sock")
        );
        assert_eq!(parse_endpoint("/x.sock").unwrap(), PathBuf::from("/x.sock"));
        assert!(parse_endpoint("tcp://1.2.3.4:5").is_err());
        assert!(parse_endpoint("relative.sock").is_err());
    }

    #[tokio::test]
    async fn missing_socket_is_a_call_error_not_a_panic() {
        let c = CriClient::new("unix:///nonexistent/cri.sock", Duration::from_secs(2)).unwrap();
        let err = c.version(api::VersionRequest::default()).await.unwrap_err();
        assert_eq!(err.code(), Some(tonic::Code::Unavailable), "{err}");
    }
}
