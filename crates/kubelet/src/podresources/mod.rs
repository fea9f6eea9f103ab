//! The pod-resources API (upstream `pkg/kubelet/apis/podresources`, service
//! `podresources/v1.PodResourcesLister`) on `<root-dir>/pod-resources/kubelet.sock`: which
//! devices (and CPUs, memory) each container of the active pods holds, and what the node can
//! hand out. Monitoring agents (GPU exporters) read it. Read-only: it asks the device manager
//! and reads the active pods the SyncLoop publishes.
//!
//! `List` (v1, 1.20), `GetAllocatableResources` (1.21) and `Get` (1.27). `cpu_ids` are a
//! container's exclusive CPUs and the node's allocatable ones with the CPU manager's `static`
//! policy (upstream `GetExclusiveCPUs` / `GetAllocatableCPUs`), empty with `none`; no memory
//! manager, so `memory` stays empty.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tracing::info;

use crate::cm::cpu::{Assignments, CpuHandle};
use crate::cm::devices::{AssignedDevices, DeviceHandle};
use crate::podutil;

/// The generated messages and the `PodResourcesLister` server (build.rs, from
/// proto/podresources/v1/api.proto).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("v1");
}

/// The directory under the root dir (upstream `getPodResourcesDir`) and the socket in it.
pub const DIR_NAME: &str = "pod-resources";
pub const SOCKET: &str = "kubelet.sock";

#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What the API reads.
pub struct Source {
    /// The active pods (upstream `podsProvider`), as the SyncLoop publishes them.
    pub pods: watch::Receiver<Arc<Vec<Arc<Pod>>>>,
    pub devices: Option<DeviceHandle>,
    pub cpu: Option<CpuHandle>,
}

/// Binds the socket (replacing a stale one) and returns the server, which runs until `cancel`.
pub async fn serve(
    root_dir: &Path,
    source: Source,
    cancel: CancellationToken,
) -> Result<impl std::future::Future<Output = ()>, PodResourcesError> {
    let dir = root_dir.join(DIR_NAME);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PodResourcesError::Io { path, source }
    };
    tokio::fs::create_dir_all(&dir).await.map_err(io(&dir))?;
    let sock = dir.join(SOCKET);
    match tokio::fs::remove_file(&sock).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&sock)(e)),
        _ => {}
    }
    let listener = UnixListener::bind(&sock).map_err(io(&sock))?;
    info!(path = %sock.display(), "serving the pod resources API");
    let svc = v1::pod_resources_lister_server::PodResourcesListerServer::new(Lister { source });
    let incoming = crate::grpc_uds::incoming(listener);
    Ok(async move {
        if let Err(e) = tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, cancel.cancelled_owned())
            .await
        {
            tracing::warn!(error = %e, "pod resources server failed");
        }
    })
}

struct Lister {
    source: Source,
}

fn topology(numa: i64) -> Option<v1::TopologyInfo> {
    Some(v1::TopologyInfo {
        nodes: vec![v1::NumaNode { id: numa }],
    })
}

/// One pod's entry (upstream `providers` loop): its regular containers with their devices
/// and exclusive CPUs.
pub fn pod_resources(
    pod: &Pod,
    assigned: &AssignedDevices,
    cpus: &Assignments,
) -> v1::PodResources {
    let devices = assigned.get(podutil::uid(pod));
    let cpus = cpus.get(podutil::uid(pod));
    let containers = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| v1::ContainerResources {
            name: c.name.clone(),
            devices: devices
                .and_then(|d| d.get(&c.name))
                .into_iter()
                .flatten()
                .map(|d| v1::ContainerDevices {
                    resource_name: d.resource.clone(),
                    device_ids: d.ids.clone(),
                    topology: topology(d.numa_node),
                })
                .collect(),
            cpu_ids: cpus
                .and_then(|m| m.get(&c.name))
                .map(|s| s.iter().filter_map(|c| i64::try_from(c).ok()).collect())
                .unwrap_or_default(),
            ..Default::default()
        })
        .collect();
    v1::PodResources {
        name: pod.metadata.name.clone().unwrap_or_default(),
        namespace: podutil::namespace(pod).to_string(),
        containers,
    }
}

impl Lister {
    async fn assigned(&self) -> Result<AssignedDevices, Status> {
        match &self.source.devices {
            None => Ok(AssignedDevices::new()),
            Some(d) => d
                .assigned()
                .await
                .map_err(|e| Status::unavailable(e.to_string())),
        }
    }

    async fn cpus(&self) -> Result<Assignments, Status> {
        match &self.source.cpu {
            None => Ok(Assignments::new()),
            Some(c) => c
                .assigned()
                .await
                .map_err(|e| Status::unavailable(e.to_string())),
        }
    }
}

#[tonic::async_trait]
impl v1::pod_resources_lister_server::PodResourcesLister for Lister {
    async fn list(
        &self,
        _: Request<v1::ListPodResourcesRequest>,
    ) -> Result<Response<v1::ListPodResourcesResponse>, Status> {
        let pods = self.source.pods.borrow().clone();
        let assigned = self.assigned().await?;
        let cpus = self.cpus().await?;
        Ok(Response::new(v1::ListPodResourcesResponse {
            pod_resources: pods
                .iter()
                .map(|p| pod_resources(p, &assigned, &cpus))
                .collect(),
        }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<v1::AllocatableResourcesRequest>,
    ) -> Result<Response<v1::AllocatableResourcesResponse>, Status> {
        let devices = match &self.source.devices {
            None => Vec::new(),
            Some(d) => d
                .allocatable()
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?,
        };
        let cpu_ids = match &self.source.cpu {
            None => Vec::new(),
            Some(c) => c
                .allocatable()
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?
                .iter()
                .filter_map(|c| i64::try_from(c).ok())
                .collect(),
        };
        Ok(Response::new(v1::AllocatableResourcesResponse {
            cpu_ids,
            devices: devices
                .into_iter()
                .map(|(resource, d)| v1::ContainerDevices {
                    resource_name: resource,
                    device_ids: vec![d.id],
                    topology: d.topology.map(|t| v1::TopologyInfo {
                        nodes: t
                            .nodes
                            .into_iter()
                            .map(|n| v1::NumaNode { id: n.id })
                            .collect(),
                    }),
                })
                .collect(),
            ..Default::default()
        }))
    }

    async fn get(
        &self,
        req: Request<v1::GetPodResourcesRequest>,
    ) -> Result<Response<v1::GetPodResourcesResponse>, Status> {
        let r = req.into_inner();
        let pod = self
            .source
            .pods
            .borrow()
            .iter()
            .find(|p| {
                podutil::namespace(p) == r.pod_namespace
                    && p.metadata.name.as_deref() == Some(r.pod_name.as_str())
            })
            .cloned();
        let Some(pod) = pod else {
            return Err(Status::unknown(format!(
                "pod {} in namespace {} not found",
                r.pod_name, r.pod_namespace
            )));
        };
        let assigned = self.assigned().await?;
        let cpus = self.cpus().await?;
        Ok(Response::new(v1::GetPodResourcesResponse {
            pod_resources: Some(pod_resources(&pod, &assigned, &cpus)),
        }))
    }
}
