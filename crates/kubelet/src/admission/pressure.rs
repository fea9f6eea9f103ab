//! Admission under node pressure (upstream eviction `managerImpl.Admit`, the first admit
//! handler the kubelet registers): while a pressure condition holds, new pods are refused with
//! reason `Evicted`, except critical pods; under memory pressure alone only BestEffort pods
//! are refused, and those that tolerate the `node.kubernetes.io/memory-pressure` taint get in.

use k8s_openapi::api::core::v1::{Pod, Taint};

use super::Rejection;
use crate::resources::{pod_qos, QosClass};

/// Upstream `v1.TaintNodeMemoryPressure`.
pub const TAINT_MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
/// Upstream `eviction.Reason`.
pub const REASON: &str = "Evicted";

/// `conditions` are the pressure conditions that hold now (`MemoryPressure`, `DiskPressure`,
/// `PIDPressure`).
pub fn admit(pod: &Pod, conditions: &[&str]) -> Result<(), Rejection> {
    if conditions.is_empty() || crate::podutil::is_critical(pod) {
        return Ok(());
    }
    if conditions == ["MemoryPressure"] {
        if pod_qos(pod) != QosClass::BestEffort {
            return Ok(());
        }
        let taint = Taint {
            key: TAINT_MEMORY_PRESSURE.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let tolerates = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| super::tolerates(t, &taint)));
        if tolerates {
            return Ok(());
        }
    }
    Err(Rejection {
        reason: REASON.into(),
        // Go's %v of a []NodeConditionType.
        message: format!("The node had condition: [{}]. ", conditions.join(" ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements, Toleration};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pod(guaranteed: bool, toleration: Option<(&str, &str)>, priority: Option<i32>) -> Pod {
        let res = guaranteed.then(|| {
            let l: std::collections::BTreeMap<String, Quantity> = [
                ("cpu".to_string(), Quantity("100m".into())),
                ("memory".to_string(), Quantity("64Mi".into())),
            ]
            .into();
            ResourceRequirements {
                limits: Some(l.clone()),
                requests: Some(l),
                ..Default::default()
            }
        });
        Pod {
            spec: Some(PodSpec {
                priority,
                containers: vec![Container {
                    name: "c".into(),
                    resources: res,
                    ..Default::default()
                }],
                tolerations: toleration.map(|(k, e)| {
                    vec![Toleration {
                        key: Some(k.into()),
                        operator: Some("Exists".into()),
                        effect: (!e.is_empty()).then(|| e.into()),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn admission_under_pressure() {
        let mem = &["MemoryPressure"][..];
        let disk = &["DiskPressure"][..];
        let both = &["MemoryPressure", "DiskPressure"][..];
        let cases: &[(&str, Pod, &[&str], Option<&str>)] = &[
            ("no pressure", pod(false, None, None), &[], None),
            (
                "best effort under memory pressure",
                pod(false, None, None),
                mem,
                Some("The node had condition: [MemoryPressure]. "),
            ),
            (
                "guaranteed under memory pressure",
                pod(true, None, None),
                mem,
                None,
            ),
            (
                "best effort tolerating the memory-pressure taint",
                pod(false, Some((TAINT_MEMORY_PRESSURE, "NoSchedule")), None),
                mem,
                None,
            ),
            (
                "a toleration of another taint does not help",
                pod(false, Some(("node.kubernetes.io/disk-pressure", "")), None),
                mem,
                Some("The node had condition: [MemoryPressure]. "),
            ),
            (
                "everything under disk pressure",
                pod(true, None, None),
                disk,
                Some("The node had condition: [DiskPressure]. "),
            ),
            (
                "guaranteed under memory and disk pressure",
                pod(true, None, None),
                both,
                Some("The node had condition: [MemoryPressure DiskPressure]. "),
            ),
            (
                "critical pods always",
                pod(false, None, Some(2_000_000_000)),
                both,
                None,
            ),
        ];
        for (what, p, conds, want) in cases {
            let got = admit(p, conds);
            match want {
                None => assert!(got.is_ok(), "{what}: {got:?}"),
                Some(m) => {
                    let r = got.expect_err(what);
                    assert_eq!(
                        (r.reason.as_str(), r.message.as_str()),
                        ("Evicted", *m),
                        "{what}"
                    );
                    assert_eq!(
                        r.status(crate::status::compute::now()).message.as_deref(),
                        Some(format!("Pod was rejected: {m}").as_str())
                    );
                }
            }
        }
    }
}
