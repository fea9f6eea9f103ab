//! The gRPC backend (upstream `pkg/kubelet/cri/remote`): one lazily connected channel over the
//! unix socket, shared by the runtime and image service clients.

use std::path::PathBuf;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::api;
use crate::api::image_service_client::ImageServiceClient;
use crate::api::runtime_service_client::RuntimeServiceClient;
use crate::events::containerd::services::events::v1::events_client::EventsClient;
use crate::events::{Envelope, EventStream, SubscribeRequest};
use crate::service::{for_each_call, Reply, Runtime};

/// A CRI runtime over gRPC. Cheap to clone (tonic clients are handles onto one connection).
#[derive(Clone)]
pub struct GrpcRuntime {
    runtime: RuntimeServiceClient<Channel>,
    image: ImageServiceClient<Channel>,
    /// containerd's events service, on the same connection (a runtime without it answers
    /// Unimplemented).
    events: EventsClient<Channel>,
}

impl GrpcRuntime {
    /// No connection is made until the first call, so a missing socket is an error of the call,
    /// never of construction.
    pub fn connect_lazy(socket: PathBuf) -> Self {
        // The URI is a placeholder: the connector below ignores it and dials the socket.
        let ep = Endpoint::from_static("http://[::1]:50051")
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true);
        let channel = ep.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let path = socket.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }));
        GrpcRuntime {
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(16 * 1024 * 1024),
            image: ImageServiceClient::new(channel.clone())
                .max_decoding_message_size(16 * 1024 * 1024),
            events: EventsClient::new(channel),
        }
    }
}

/// Which tonic client serves a call: the image service's five, the runtime service the rest.
macro_rules! service_of {
    ($s:expr, list_images) => {
        $s.image
    };
    ($s:expr, image_status) => {
        $s.image
    };
    ($s:expr, pull_image) => {
        $s.image
    };
    ($s:expr, remove_image) => {
        $s.image
    };
    ($s:expr, image_fs_info) => {
        $s.image
    };
    ($s:expr, $other:ident) => {
        $s.runtime
    };
}

macro_rules! grpc_impl {
    ($($name:ident($req:ident) -> $resp:ident;)*) => {
        impl Runtime for GrpcRuntime {
            $(
                fn $name(&self, req: api::$req) -> Reply<api::$resp> {
                    let mut client = service_of!(self, $name).clone();
                    Box::pin(async move { client.$name(req).await.map(|r| r.into_inner()) })
                }
            )*

            fn get_container_events(
                &self,
                req: api::GetEventsRequest,
            ) -> Reply<EventStream<api::ContainerEventResponse>> {
                let mut client = self.runtime.clone();
                Box::pin(async move {
                    let s = client.get_container_events(req).await?.into_inner();
                    Ok(Box::pin(s) as EventStream<_>)
                })
            }

            fn subscribe_containerd_events(
                &self,
                req: SubscribeRequest,
            ) -> Reply<EventStream<Envelope>> {
                let mut client = self.events.clone();
                Box::pin(async move {
                    let s = client.subscribe(req).await?.into_inner();
                    Ok(Box::pin(s) as EventStream<_>)
                })
            }
        }
    };
}

for_each_call!(grpc_impl);
