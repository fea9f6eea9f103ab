//! The gRPC edges of the device manager: the registration server on `kubelet.sock` (upstream
//! `ManagerImpl.Register`) and each plugin's connection (upstream `endpointImpl`: dial, then
//! `ListAndWatch` feeding device lists until the stream ends). Both only send [`Event`]s to the
//! manager task, which owns all state.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use super::api::{self, device_plugin_client::DevicePluginClient};
use super::{checkpoint, Command, DeviceError};

/// How long dialing a plugin may take (upstream `dial`'s 10 s).
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// What the gRPC edges tell the manager.
pub enum Event {
    /// A plugin asked to register (validated); the manager dials it.
    Register(api::RegisterRequest),
    /// Dialed: the plugin's client, tagged with a generation so late events of a replaced
    /// connection are told apart.
    Connected {
        resource: String,
        generation: u64,
        client: DevicePluginClient<Channel>,
        options: api::DevicePluginOptions,
    },
    DialFailed {
        resource: String,
        error: String,
    },
    Devices {
        resource: String,
        generation: u64,
        devices: Vec<api::Device>,
    },
    /// `ListAndWatch` ended: the plugin is gone.
    Stopped {
        resource: String,
        generation: u64,
        error: String,
    },
}

/// Makes the socket directory, removes what an earlier kubelet or plugins left in it (not the
/// checkpoint, not directories: upstream `removeContents`) and listens on `kubelet.sock`.
pub async fn listen(dir: &Path) -> Result<UnixListener, DeviceError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DeviceError::Io { path, source }
    };
    tokio::fs::create_dir_all(dir).await.map_err(io(dir))?;
    let mut rd = tokio::fs::read_dir(dir).await.map_err(io(dir))?;
    while let Some(e) = rd.next_entry().await.map_err(io(dir))? {
        let path = e.path();
        if e.file_name() == checkpoint::FILE_NAME {
            continue;
        }
        match e.file_type().await {
            Ok(t) if t.is_dir() => continue,
            Ok(_) => {
                if let Err(err) = tokio::fs::remove_file(&path).await {
                    warn!(path = %path.display(), error = %err, "failed to remove file");
                }
            }
            Err(err) => warn!(path = %path.display(), error = %err, "failed to stat file"),
        }
    }
    let sock = dir.join(api::KUBELET_SOCKET);
    let listener = UnixListener::bind(&sock).map_err(io(&sock))?;
    info!(path = %sock.display(), "serving device plugin registration server");
    Ok(listener)
}

/// The `Registration` service.
pub struct Registration {
    pub tx: mpsc::Sender<Command>,
}

#[tonic::async_trait]
impl api::registration_server::Registration for Registration {
    async fn register(
        &self,
        req: Request<api::RegisterRequest>,
    ) -> Result<Response<api::Empty>, Status> {
        let r = req.into_inner();
        info!(resource = %r.resource_name, "got registration request from device plugin");
        if !api::SUPPORTED_VERSIONS.contains(&r.version.as_str()) {
            let msg = format!(
                "requested API version {:?} is not supported by kubelet. Supported version is {:?}",
                r.version,
                api::SUPPORTED_VERSIONS
            );
            info!(resource = %r.resource_name, error = %msg, "bad registration request from device plugin");
            return Err(Status::unknown(msg));
        }
        if !crate::resources::is_extended_resource(&r.resource_name) {
            let msg = format!("the ResourceName {:?} is invalid", r.resource_name);
            info!(error = %msg, "bad registration request from device plugin");
            return Err(Status::unknown(msg));
        }
        if r.endpoint.is_empty() || r.endpoint.contains('/') {
            // The endpoint is a socket name in the plugin directory (upstream joins it to the
            // directory; a path would escape it).
            return Err(Status::unknown(format!(
                "invalid endpoint {:?}: a socket name in the device plugin directory",
                r.endpoint
            )));
        }
        self.tx
            .send(Command::Plugin(Event::Register(r)))
            .await
            .map_err(|_| Status::unavailable("device manager stopped"))?;
        Ok(Response::new(api::Empty {}))
    }
}

/// Dials a plugin's socket (upstream `newEndpointImpl`).
pub async fn dial(socket: PathBuf) -> Result<DevicePluginClient<Channel>, String> {
    let ep = Endpoint::from_static("http://[::1]:50051").connect_timeout(DIAL_TIMEOUT);
    let path = socket.clone();
    let channel = tokio::time::timeout(
        DIAL_TIMEOUT,
        ep.connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        })),
    )
    .await
    .map_err(|_| {
        format!(
            "failed to dial device plugin: {}: timed out",
            socket.display()
        )
    })?
    .map_err(|e| format!("failed to dial device plugin: {}: {e}", socket.display()))?;
    Ok(DevicePluginClient::new(channel))
}

/// Upstream `endpointImpl.run`: every `ListAndWatch` response is the plugin's full device list.
pub async fn list_and_watch(
    mut client: DevicePluginClient<Channel>,
    resource: String,
    generation: u64,
    tx: mpsc::Sender<Command>,
) {
    let error = match client.list_and_watch(api::Empty {}).await {
        Err(e) => format!("ListAndWatch failed: {}", e.message()),
        Ok(resp) => {
            let mut stream = resp.into_inner();
            loop {
                match stream.message().await {
                    Ok(Some(m)) => {
                        let ev = Event::Devices {
                            resource: resource.clone(),
                            generation,
                            devices: m.devices,
                        };
                        if tx.send(Command::Plugin(ev)).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => break "ListAndWatch stream ended".to_string(),
                    Err(e) => break format!("listAndWatch ended unexpectedly for device plugin {resource} with error {}", e.message()),
                }
            }
        }
    };
    let _ = tx
        .send(Command::Plugin(Event::Stopped {
            resource,
            generation,
            error,
        }))
        .await;
}
