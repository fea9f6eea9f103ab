//! The runtime seam: the CRI calls the kubelet makes, as one object-safe trait (upstream
//! `internalapi.RuntimeService` + `ImageManagerService`). Backends answer with `tonic::Status` so
//! that a fake fails exactly the way a real runtime does (NotFound, Unavailable, ...), and the
//! [`crate::CriClient`] handle adds timeouts, metrics and operation names on top of any of them.

use std::future::Future;
use std::pin::Pin;

use crate::api;
use crate::events::{Envelope, EventStream, SubscribeRequest};

fn unimplemented<T: Send + 'static>(what: &str) -> Reply<T> {
    let status = tonic::Status::unimplemented(format!("{what} is not served by this runtime"));
    Box::pin(async move { Err(status) })
}

/// A backend's answer: owned, `'static`, so the handle can bound it with a timeout.
pub type Reply<T> = Pin<Box<dyn Future<Output = Result<T, tonic::Status>> + Send + 'static>>;

macro_rules! runtime_trait {
    ($($name:ident($req:ident) -> $resp:ident;)*) => {
        /// The CRI v1 calls the kubelet makes. Implemented by [`crate::GrpcRuntime`] and, with the
        /// `fake` feature, by `crate::fake::FakeRuntime`.
        pub trait Runtime: Send + Sync + 'static {
            $(
                #[allow(missing_docs)]
                fn $name(&self, req: api::$req) -> Reply<api::$resp>;
            )*

            /// CRI `GetContainerEvents`; the reply resolves once the runtime answered (for a
            /// gRPC server, with its first event). Unimplemented unless a backend has it.
            fn get_container_events(
                &self,
                _req: api::GetEventsRequest,
            ) -> Reply<EventStream<api::ContainerEventResponse>> {
                unimplemented("GetContainerEvents")
            }

            /// containerd's `Events/Subscribe` on the runtime's socket; like the above.
            fn subscribe_containerd_events(
                &self,
                _req: SubscribeRequest,
            ) -> Reply<EventStream<Envelope>> {
                unimplemented("containerd Events/Subscribe")
            }
        }
    };
}

// The one list of calls: the trait above and the gRPC backend are generated from it.
macro_rules! for_each_call {
    ($m:ident) => {
        $m! {
            version(VersionRequest) -> VersionResponse;
            status(StatusRequest) -> StatusResponse;
            list_container_stats(ListContainerStatsRequest) -> ListContainerStatsResponse;
            list_pod_sandbox_stats(ListPodSandboxStatsRequest) -> ListPodSandboxStatsResponse;
            run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse;
            stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse;
            remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse;
            pod_sandbox_status(PodSandboxStatusRequest) -> PodSandboxStatusResponse;
            list_pod_sandbox(ListPodSandboxRequest) -> ListPodSandboxResponse;
            create_container(CreateContainerRequest) -> CreateContainerResponse;
            start_container(StartContainerRequest) -> StartContainerResponse;
            stop_container(StopContainerRequest) -> StopContainerResponse;
            remove_container(RemoveContainerRequest) -> RemoveContainerResponse;
            list_containers(ListContainersRequest) -> ListContainersResponse;
            container_status(ContainerStatusRequest) -> ContainerStatusResponse;
            update_container_resources(UpdateContainerResourcesRequest) -> UpdateContainerResourcesResponse;
            exec_sync(ExecSyncRequest) -> ExecSyncResponse;
            exec(ExecRequest) -> ExecResponse;
            attach(AttachRequest) -> AttachResponse;
            port_forward(PortForwardRequest) -> PortForwardResponse;
            reopen_container_log(ReopenContainerLogRequest) -> ReopenContainerLogResponse;
            list_images(ListImagesRequest) -> ListImagesResponse;
            image_status(ImageStatusRequest) -> ImageStatusResponse;
            pull_image(PullImageRequest) -> PullImageResponse;
            remove_image(RemoveImageRequest) -> RemoveImageResponse;
            image_fs_info(ImageFsInfoRequest) -> ImageFsInfoResponse;
        }
    };
}
pub(crate) use for_each_call;

for_each_call!(runtime_trait);
