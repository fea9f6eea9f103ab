//! Pod admission (upstream `lifecycle` admit handlers and `predicates.go`): a pod the node cannot
//! take is rejected once, with upstream's reason and message, and never started. Today the node
//! checks its pod count against `maxPods`; resources, taints and host ports join with the cluster.

use k8s_openapi::api::core::v1::PodStatus;

/// Why a pod was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: &'static str,
    pub message: String,
}

impl Rejection {
    /// The terminal status a rejected pod shows (upstream `rejectPod`).
    pub fn status(&self, start_time: crate::status::compute::Timestamp) -> PodStatus {
        PodStatus {
            phase: Some("Failed".into()),
            reason: Some(self.reason.into()),
            message: Some(format!("Pod was rejected: {}", self.message)),
            start_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                start_time,
            )),
            ..Default::default()
        }
    }
}

/// `active` pods already admitted; one more must fit under `max_pods`.
pub fn admit_pod_count(active: usize, max_pods: u32) -> Result<(), Rejection> {
    if active < max_pods as usize {
        return Ok(());
    }
    Err(Rejection {
        reason: "OutOfpods",
        message: format!(
            "Node didn't have enough resource: pods, requested: 1, used: {active}, capacity: {max_pods}"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_count() {
        assert!(admit_pod_count(0, 1).is_ok());
        assert!(admit_pod_count(109, 110).is_ok());
        let r = admit_pod_count(110, 110).unwrap_err();
        assert_eq!(r.reason, "OutOfpods");
        assert_eq!(
            r.message,
            "Node didn't have enough resource: pods, requested: 1, used: 110, capacity: 110"
        );
    }
}
