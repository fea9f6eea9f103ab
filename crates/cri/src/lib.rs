//! CRI v1 client: RuntimeService and ImageService over a unix socket.
//!
//! Mirrors upstream `pkg/kubelet/cri/remote`: one gRPC connection per endpoint, every call bounded by
//! `runtimeRequestTimeout` (default 2 m) except those upstream leaves unbounded or extends (image pulls,
//! stop with a grace period). The channel connects lazily, so a missing socket is an error of the call,
//! never of construction: the kubelet keeps running and retries while the runtime is away.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use api::image_service_client::ImageServiceClient;
use api::runtime_service_client::RuntimeServiceClient;
pub use k8s_cri::v1 as api;

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

/// A cheap cloneable CRI client (tonic channels are handles onto one connection).
#[derive(Clone)]
pub struct CriClient {
    runtime: RuntimeServiceClient<Channel>,
    image: ImageServiceClient<Channel>,
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
    ($(#[$m:meta])* $name:ident, $svc:ident, $req:ident, $resp:ident) => {
        $(#[$m])*
        pub async fn $name(&self, req: api::$req) -> Result<api::$resp, CriError> {
            let mut client = self.$svc.clone();
            self.call(stringify!($name), self.timeout, async move { client.$name(req).await }).await
        }
    };
}

impl CriClient {
    /// Builds a client for `endpoint`; no connection is made until the first call.
    pub fn new(endpoint: &str, timeout: Duration) -> Result<Self, CriError> {
        let socket = parse_endpoint(endpoint)?;
        // The URI is a placeholder: the connector below ignores it and dials the socket.
        let ep = Endpoint::from_static("http://[::1]:50051")
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true);
        let dial = socket.clone();
        let channel = ep.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let path = dial.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }));
        Ok(CriClient {
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(16 * 1024 * 1024),
            image: ImageServiceClient::new(channel).max_decoding_message_size(16 * 1024 * 1024),
            timeout,
            socket,
            observer: None,
        })
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
        F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let started = std::time::Instant::now();
        let res = self.call_inner(op, timeout, fut).await;
        if let Some(observe) = &self.observer {
            observe(op, started.elapsed(), res.is_ok());
        }
        res
    }

    async fn call_inner<T, F>(
        &self,
        op: &'static str,
        timeout: Duration,
        fut: F,
    ) -> Result<T, CriError>
    where
        F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        match tokio::time::timeout(timeout, fut).await {
            Err(_) => Err(CriError::Timeout { op, timeout }),
            Ok(Err(status)) => Err(CriError::Rpc {
                op,
                code: status.code(),
                message: status.message().to_string(),
            }),
            Ok(Ok(resp)) => Ok(resp.into_inner()),
        }
    }

    rpc!(version, runtime, VersionRequest, VersionResponse);
    rpc!(
        /// CPU, memory and writable-layer usage of containers (the stats endpoints).
        list_container_stats,
        runtime,
        ListContainerStatsRequest,
        ListContainerStatsResponse
    );
    rpc!(
        /// Pod-level usage, of which the stats endpoints use the sandbox's network and processes.
        list_pod_sandbox_stats,
        runtime,
        ListPodSandboxStatsRequest,
        ListPodSandboxStatsResponse
    );
    rpc!(
        /// Runtime conditions (RuntimeReady, NetworkReady).
        status, runtime, StatusRequest, StatusResponse
    );
    rpc!(
        run_pod_sandbox,
        runtime,
        RunPodSandboxRequest,
        RunPodSandboxResponse
    );
    rpc!(
        stop_pod_sandbox,
        runtime,
        StopPodSandboxRequest,
        StopPodSandboxResponse
    );
    rpc!(
        remove_pod_sandbox,
        runtime,
        RemovePodSandboxRequest,
        RemovePodSandboxResponse
    );
    rpc!(
        pod_sandbox_status,
        runtime,
        PodSandboxStatusRequest,
        PodSandboxStatusResponse
    );
    rpc!(
        list_pod_sandbox,
        runtime,
        ListPodSandboxRequest,
        ListPodSandboxResponse
    );
    rpc!(
        create_container,
        runtime,
        CreateContainerRequest,
        CreateContainerResponse
    );
    rpc!(
        start_container,
        runtime,
        StartContainerRequest,
        StartContainerResponse
    );
    rpc!(
        remove_container,
        runtime,
        RemoveContainerRequest,
        RemoveContainerResponse
    );
    rpc!(
        list_containers,
        runtime,
        ListContainersRequest,
        ListContainersResponse
    );
    rpc!(
        container_status,
        runtime,
        ContainerStatusRequest,
        ContainerStatusResponse
    );
    rpc!(exec_sync, runtime, ExecSyncRequest, ExecSyncResponse);
    rpc!(
        /// Makes the runtime reopen a container's log file after the kubelet renamed it (rotation).
        reopen_container_log,
        runtime,
        ReopenContainerLogRequest,
        ReopenContainerLogResponse
    );
    rpc!(list_images, image, ListImagesRequest, ListImagesResponse);
    rpc!(image_status, image, ImageStatusRequest, ImageStatusResponse);
    rpc!(remove_image, image, RemoveImageRequest, RemoveImageResponse);
    rpc!(
        image_fs_info,
        image,
        ImageFsInfoRequest,
        ImageFsInfoResponse
    );

    /// StopContainer: the runtime waits up to `timeout` seconds of grace, so the call deadline is the
    /// request timeout plus that grace, as upstream.
    pub async fn stop_container(
        &self,
        req: api::StopContainerRequest,
    ) -> Result<api::StopContainerResponse, CriError> {
        let grace = Duration::from_secs(req.timeout.max(0) as u64);
        let mut client = self.runtime.clone();
        self.call("stop_container", self.timeout + grace, async move {
            client.stop_container(req).await
        })
        .await
    }

    /// PullImage: upstream bounds pulls by progress, not by the request timeout; a large image on a
    /// slow link may take long. We bound it generously so a hung registry cannot pin a worker forever.
    pub async fn pull_image(
        &self,
        req: api::PullImageRequest,
    ) -> Result<api::PullImageResponse, CriError> {
        let mut client = self.image.clone();
        self.call(
            "pull_image",
            self.timeout.max(Duration::from_secs(30 * 60)),
            async move { client.pull_image(req).await },
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
