//! CRI statuses into the kubelet's runtime pod types (upstream `kuberuntime_sandbox.go`'s
//! `getPodSandboxStatus` use and `toKubeContainerStatus`), shared by the whole-pod read
//! ([`super::RuntimeManager::pod_status`]), the sandbox a worker just ran and the read of the
//! containers it just started ([`super::RuntimeManager::started_pod_status`]).

use rkubelet_cri::api;

use super::{labels, ContainerState, ContainerStatus, SandboxStatus};
use crate::logs::termination;

/// A sandbox as the runtime reports it.
pub fn sandbox(st: api::PodSandboxStatus) -> SandboxStatus {
    let net = st.network.as_ref();
    let host_network = st
        .linux
        .as_ref()
        .and_then(|l| l.namespaces.as_ref())
        .and_then(|n| n.options.as_ref())
        .is_some_and(|o| o.network == api::NamespaceMode::Node as i32);
    SandboxStatus {
        ready: st.state == api::PodSandboxState::SandboxReady as i32,
        ip: net.map(|n| n.ip.clone()).unwrap_or_default(),
        additional_ips: net
            .map(|n| n.additional_ips.iter().map(|i| i.ip.clone()).collect())
            .unwrap_or_default(),
        attempt: st.metadata.map(|m| m.attempt).unwrap_or(0),
        created_at: st.created_at,
        host_network,
        id: st.id,
    }
}

/// A container as the runtime reports it; an exited one's message gets its termination message
/// (the file the container wrote, or its log's tail), as upstream's.
pub async fn container(st: api::ContainerStatus) -> ContainerStatus {
    let ann = &st.annotations;
    let mut message = st.message.clone();
    if st.state == api::ContainerState::ContainerExited as i32 {
        message = termination::append(&message, &termination::message(&st).await);
    }
    ContainerStatus {
        id: st.id.clone(),
        name: st
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default(),
        state: ContainerState::from(st.state),
        created_at: st.created_at,
        started_at: st.started_at,
        finished_at: st.finished_at,
        exit_code: st.exit_code,
        reason: st.reason.clone(),
        message,
        hash: ann.get(labels::CONTAINER_HASH).cloned().unwrap_or_default(),
        restart_count: ann
            .get(labels::CONTAINER_RESTART_COUNT)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        image: st
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default(),
        image_ref: st.image_ref.clone(),
        is_init: ann.get(labels::CONTAINER_TYPE).is_some_and(|t| t == "init"),
        foreign: ann.get(labels::CREATED_BY).map(String::as_str)
            != Some(labels::CREATED_BY_RKUBELET),
        log_path: st.log_path.clone(),
    }
}
