//! The kubelet's [`PodSyncer`]: the pod workers' four operations, carried out by the transaction
//! scripts of this module against the runtime, volumes and status manager.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;

use super::{
    cleanup_pod, remove_from_runtime, remove_pod_cgroup, remove_pod_dir, sync_pod, terminate_pod,
};
use super::{PodState, SyncContext, SyncOutcome};
use crate::pod_workers::PodSyncer;
use crate::podutil;
use crate::runtime::manager::RuntimePodRef;
use crate::runtime::RuntimeError;
use crate::status::compute::PodFailure;

/// Cheap to clone: the shared handles every worker uses.
#[derive(Clone)]
pub struct Syncer {
    pub ctx: Arc<SyncContext>,
}

impl PodSyncer for Syncer {
    type State = PodState;

    fn new_state(&self, _pod: &Pod, after: Option<tokio::time::Instant>) -> PodState {
        let mut state = PodState::with_crash_loop_max(self.ctx.crash_loop_max);
        // The first sync reads the runtime newer than the previous worker's cleanup.
        state.last_sync = after;
        state
    }

    async fn sync_pod(
        &self,
        state: &mut PodState,
        pod: &Arc<Pod>,
        terminating: &CancellationToken,
    ) -> SyncOutcome {
        sync_pod(&self.ctx, state, pod, terminating).await
    }

    async fn sync_terminating_pod(
        &self,
        state: &mut PodState,
        pod: &Arc<Pod>,
        grace: Option<Duration>,
        failure: Option<&PodFailure>,
        shortened: &CancellationToken,
    ) -> Result<(), RuntimeError> {
        terminate_pod(&self.ctx, state, pod, grace, failure, shortened).await
    }

    async fn sync_terminating_runtime_pod(
        &self,
        pod: &RuntimePodRef,
        grace: Duration,
    ) -> Result<(), RuntimeError> {
        // Only the runtime knows this pod: everything it has now.
        remove_from_runtime(&self.ctx, pod, grace, None).await?;
        remove_pod_dir(&self.ctx, pod).await;
        remove_pod_cgroup(&self.ctx, &pod.uid, None).await;
        Ok(())
    }

    async fn sync_terminated_pod(
        &self,
        state: &mut PodState,
        pod: &Arc<Pod>,
    ) -> Result<(), RuntimeError> {
        cleanup_pod(&self.ctx, state, pod).await?;
        self.ctx.status.remove(podutil::uid(pod)).await;
        Ok(())
    }
}
