//! A device plugin written in the tests (`deviceplugin/v1beta1`), served on a unix socket and
//! registered with the kubelet, for the failure and topology cases upstream's sample plugin
//! cannot show; and the gRPC channel over a unix socket the tests reach the kubelet's
//! registration and pod-resources servers with. Used by `devices` and `topology`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use hyper_util::rt::TokioIo;
use kubelet::cm::devices::api as dp;
use tokio::net::{UnixListener, UnixStream};
use tonic::transport::{Channel, Endpoint, Uri};

/// A gRPC channel to the server on `sock`.
pub async fn channel(sock: PathBuf) -> Channel {
    Endpoint::from_static("http://[::1]:50051")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let sock = sock.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(sock).await?)) }
        }))
        .await
        .expect("connect")
}

/// A healthy device, on NUMA node `numa` when given.
pub fn device(id: &str, numa: Option<i64>) -> dp::Device {
    dp::Device {
        id: id.into(),
        health: "Healthy".into(),
        topology: numa.map(|id| dp::TopologyInfo {
            nodes: vec![dp::NumaNode { id }],
        }),
    }
}

/// The plugin: `devices` once through ListAndWatch; Allocate answers the chosen IDs as env
/// `TEST_DEVICES` and annotation `test.rkubelet.io/devices`, or fails when `broken`;
/// PreStartContainer, when `pre_start_required`, is recorded in `pre_starts`.
#[derive(Clone, Default)]
pub struct TestPlugin {
    pub devices: Vec<dp::Device>,
    pub broken: bool,
    pub pre_start_required: bool,
    pub pre_starts: Arc<Mutex<Vec<Vec<String>>>>,
}

type DeviceStream =
    Pin<Box<dyn futures::Stream<Item = Result<dp::ListAndWatchResponse, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl dp::device_plugin_server::DevicePlugin for TestPlugin {
    async fn get_device_plugin_options(
        &self,
        _: tonic::Request<dp::Empty>,
    ) -> Result<tonic::Response<dp::DevicePluginOptions>, tonic::Status> {
        Ok(tonic::Response::new(self.options()))
    }

    type ListAndWatchStream = DeviceStream;

    async fn list_and_watch(
        &self,
        _: tonic::Request<dp::Empty>,
    ) -> Result<tonic::Response<DeviceStream>, tonic::Status> {
        let first = dp::ListAndWatchResponse {
            devices: self.devices.clone(),
        };
        let s = futures::stream::once(async move { Ok(first) }).chain(futures::stream::pending());
        Ok(tonic::Response::new(Box::pin(s)))
    }

    async fn get_preferred_allocation(
        &self,
        _: tonic::Request<dp::PreferredAllocationRequest>,
    ) -> Result<tonic::Response<dp::PreferredAllocationResponse>, tonic::Status> {
        Ok(tonic::Response::new(Default::default()))
    }

    async fn allocate(
        &self,
        req: tonic::Request<dp::AllocateRequest>,
    ) -> Result<tonic::Response<dp::AllocateResponse>, tonic::Status> {
        if self.broken {
            return Err(tonic::Status::unknown("the device caught fire"));
        }
        let responses = req
            .into_inner()
            .container_requests
            .into_iter()
            .map(|r| dp::ContainerAllocateResponse {
                envs: [("TEST_DEVICES".to_string(), r.devices_i_ds.join(","))].into(),
                annotations: [(
                    "test.rkubelet.io/devices".to_string(),
                    r.devices_i_ds.join(","),
                )]
                .into(),
                ..Default::default()
            })
            .collect();
        Ok(tonic::Response::new(dp::AllocateResponse {
            container_responses: responses,
        }))
    }

    async fn pre_start_container(
        &self,
        req: tonic::Request<dp::PreStartContainerRequest>,
    ) -> Result<tonic::Response<dp::PreStartContainerResponse>, tonic::Status> {
        self.pre_starts
            .lock()
            .unwrap()
            .push(req.into_inner().devices_i_ds);
        Ok(tonic::Response::new(Default::default()))
    }
}

impl TestPlugin {
    fn options(&self) -> dp::DevicePluginOptions {
        dp::DevicePluginOptions {
            pre_start_required: self.pre_start_required,
            get_preferred_allocation_available: false,
        }
    }

    /// Serves on `<dir>/<name>` and registers `resource` with the kubelet.
    pub async fn run(self, dir: &Path, name: &str, resource: &str) -> tokio::task::JoinHandle<()> {
        let sock = dir.join(name);
        let _ = std::fs::remove_file(&sock);
        let listener = UnixListener::bind(&sock).unwrap();
        let incoming = futures::stream::unfold(listener, |l| async move {
            Some((l.accept().await.map(|(s, _)| s), l))
        });
        let options = self.options();
        let svc = dp::device_plugin_server::DevicePluginServer::new(self);
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(incoming)
                .await;
        });
        let mut reg = dp::registration_client::RegistrationClient::new(
            channel(dir.join("kubelet.sock")).await,
        );
        reg.register(dp::RegisterRequest {
            version: "v1beta1".into(),
            endpoint: name.into(),
            resource_name: resource.into(),
            options: Some(options),
        })
        .await
        .expect("register the test plugin");
        task
    }
}
