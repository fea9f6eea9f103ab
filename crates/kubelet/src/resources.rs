//! Resource quantities, QoS class and the Linux resources a container gets.
//!
//! Mirrors upstream `api/v1/resource` quantity rules, `qos.GetPodQOS` and
//! `kuberuntime_container_linux.go` (`milliCPUToShares`, `milliCPUToQuota`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub use kubelet_config::quantity::parse_milli;

fn milli_of(map: Option<&BTreeMap<String, Quantity>>, name: &str) -> Option<i128> {
    map.and_then(|m| m.get(name))
        .and_then(|q| parse_milli(&q.0))
}

/// QoS classes as upstream names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

/// Upstream `GetPodQOS`: BestEffort without any cpu/memory request or limit; Guaranteed when every
/// container has cpu and memory limits equal to its requests; Burstable otherwise.
pub fn pod_qos(pod: &Pod) -> QosClass {
    let Some(spec) = pod.spec.as_ref() else {
        return QosClass::BestEffort;
    };
    let mut any_set = false;
    let mut guaranteed = true;
    let all = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in all {
        let res = c.resources.as_ref();
        let req = res.and_then(|r| r.requests.as_ref());
        let lim = res.and_then(|r| r.limits.as_ref());
        for name in ["cpu", "memory"] {
            let r = milli_of(req, name).filter(|v| *v > 0);
            let l = milli_of(lim, name).filter(|v| *v > 0);
            if r.is_some() || l.is_some() {
                any_set = true;
            }
            match (r, l) {
                (_, None) => guaranteed = false,
                (Some(r), Some(l)) if r != l => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any_set {
        QosClass::BestEffort
    } else if guaranteed {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// The CFS period upstream uses (100 ms).
pub const CPU_PERIOD_US: i64 = 100_000;

/// Linux resources for one container, in CRI units.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LinuxResources {
    pub cpu_shares: i64,
    pub cpu_quota: i64,
    pub cpu_period: i64,
    pub memory_limit_bytes: i64,
}

/// Upstream `milliCPUToShares` / `milliCPUToQuota`: shares from the request (limit when no request),
/// quota from the limit over `period_us` (`cpuCFSQuotaPeriod`); memory limit from the memory
/// limit.
pub fn container_resources(c: &Container, period_us: i64) -> LinuxResources {
    let res = c.resources.as_ref();
    let req = res.and_then(|r| r.requests.as_ref());
    let lim = res.and_then(|r| r.limits.as_ref());
    let cpu_req = milli_of(req, "cpu").or_else(|| milli_of(lim, "cpu"));
    let cpu_lim = milli_of(lim, "cpu");
    let shares = match cpu_req {
        None | Some(0) => 2,
        Some(m) => ((m * 1024) / 1000).max(2) as i64,
    };
    let (quota, period) = match cpu_lim {
        Some(m) if m > 0 => (((m * period_us as i128) / 1000).max(1000) as i64, period_us),
        _ => (0, 0),
    };
    let mem = milli_of(lim, "memory")
        .map(|m| (m / 1000) as i64)
        .unwrap_or(0);
    LinuxResources {
        cpu_shares: shares,
        cpu_quota: quota,
        cpu_period: period,
        memory_limit_bytes: mem,
    }
}

/// Upstream `IsExtendedResourceName`: a domain-prefixed name outside `kubernetes.io/` (the
/// qualified-name syntax check is left to API validation). Device plugins advertise these.
pub fn is_extended_resource(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    type Res<'a> = Vec<(&'a str, &'a str)>;

    fn pod(containers: Vec<(Res, Res)>) -> Pod {
        let q = |v: Vec<(&str, &str)>| {
            (!v.is_empty()).then(|| {
                v.into_iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        Pod {
            spec: Some(PodSpec {
                containers: containers
                    .into_iter()
                    .enumerate()
                    .map(|(i, (req, lim))| Container {
                        name: format!("c{i}"),
                        resources: Some(ResourceRequirements {
                            requests: q(req),
                            limits: q(lim),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn qos_table() {
        let cases = vec![
            (pod(vec![(vec![], vec![])]), QosClass::BestEffort),
            (pod(vec![(vec![("cpu", "1")], vec![])]), QosClass::Burstable),
            (
                pod(vec![(vec![], vec![("cpu", "1"), ("memory", "1Gi")])]),
                QosClass::Guaranteed,
            ),
            (
                pod(vec![(
                    vec![("cpu", "1000m"), ("memory", "1Gi")],
                    vec![("cpu", "1"), ("memory", "1Gi")],
                )]),
                QosClass::Guaranteed,
            ),
            (
                pod(vec![(
                    vec![("cpu", "500m")],
                    vec![("cpu", "1"), ("memory", "1Gi")],
                )]),
                QosClass::Burstable,
            ),
            (
                pod(vec![
                    (vec![], vec![("cpu", "1"), ("memory", "1Gi")]),
                    (vec![], vec![]),
                ]),
                QosClass::Burstable,
            ),
        ];
        for (i, (p, want)) in cases.into_iter().enumerate() {
            assert_eq!(pod_qos(&p), want, "case {i}");
        }
    }

    #[test]
    fn linux_resources() {
        let p = pod(vec![(
            vec![("cpu", "250m")],
            vec![("cpu", "500m"), ("memory", "64Mi")],
        )]);
        let r = container_resources(&p.spec.unwrap().containers[0], CPU_PERIOD_US);
        assert_eq!(r.cpu_shares, 256);
        assert_eq!(r.cpu_quota, 50_000);
        assert_eq!(r.cpu_period, 100_000);
        assert_eq!(r.memory_limit_bytes, 64 * 1024 * 1024);
        let p = pod(vec![(vec![], vec![])]);
        let r = container_resources(&p.spec.unwrap().containers[0], CPU_PERIOD_US);
        assert_eq!(
            r,
            LinuxResources {
                cpu_shares: 2,
                ..Default::default()
            }
        );
    }
}
