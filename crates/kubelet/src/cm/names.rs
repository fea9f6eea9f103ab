//! Where a pod's cgroup lives (upstream `pod_container_manager_linux.go` `GetPodContainerName`
//! and `qos_container_manager_linux.go`): `<cgroupRoot>/kubepods` for Guaranteed pods,
//! `kubepods/burstable` and `kubepods/besteffort` for the other QoS classes, `pod<uid>` below.
//! Pure: the sandbox's cgroup parent and the orphan scan both come from here.

use cgroups::{CgroupName, Driver};
use k8s_openapi::api::core::v1::Pod;

use crate::podutil;
use crate::resources::{pod_qos, QosClass};

/// Upstream `defaultNodeAllocatableCgroupName`.
pub const KUBEPODS: &str = "kubepods";
/// Upstream `podCgroupNamePrefix`.
pub const POD_PREFIX: &str = "pod";

/// The cgroup names of this node's pods, by driver.
#[derive(Debug, Clone, PartialEq)]
pub struct PodCgroupNames {
    /// `<cgroupRoot>/kubepods` (upstream `cm.cgroupRoot` after `NewContainerManager`).
    pub kubepods: CgroupName,
    pub driver: Driver,
}

impl PodCgroupNames {
    /// `cgroup_root` is cgroupfs-style for both drivers, as upstream parses `--cgroup-root`;
    /// empty is `/`.
    pub fn new(cgroup_root: &str, driver: Driver) -> Self {
        PodCgroupNames {
            kubepods: CgroupName::from_cgroupfs(cgroup_root).child(KUBEPODS),
            driver,
        }
    }

    /// The QoS tier a class of pods lives under: kubepods itself for Guaranteed.
    pub fn qos(&self, qos: QosClass) -> CgroupName {
        match qos {
            QosClass::Guaranteed => self.kubepods.clone(),
            QosClass::Burstable => self.kubepods.child("burstable"),
            QosClass::BestEffort => self.kubepods.child("besteffort"),
        }
    }

    /// Upstream `GetPodContainerName`: the pod's cgroup from its QoS class and UID.
    pub fn pod(&self, pod: &Pod) -> CgroupName {
        self.for_uid(pod_qos(pod), podutil::uid(pod))
    }

    pub fn for_uid(&self, qos: QosClass, uid: &str) -> CgroupName {
        self.qos(qos).child(format!("{POD_PREFIX}{uid}"))
    }

    /// Every place a pod with this UID could have its cgroup (a runtime-only pod's QoS is not
    /// known any more).
    pub fn candidates(&self, uid: &str) -> [CgroupName; 3] {
        [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ]
        .map(|q| self.for_uid(q, uid))
    }

    /// The literal the runtime gets as cgroup parent: the driver's form of the name (upstream
    /// `cgroupManager.Name`).
    pub fn literal(&self, name: &CgroupName) -> String {
        match self.driver {
            Driver::Cgroupfs => name.to_cgroupfs(),
            Driver::Systemd => name.to_systemd(),
        }
    }
}

/// The pod UID of a child cgroup's directory name under a QoS tier, if it is a pod cgroup:
/// `pod<uid>` (cgroupfs) or `kubepods-burstable-pod<uid with _>.slice` (systemd).
pub fn pod_uid_of(dir_name: &str, driver: Driver) -> Option<String> {
    let last = match driver {
        Driver::Cgroupfs => dir_name.to_string(),
        Driver::Systemd => CgroupName::from_systemd(dir_name).parts().last()?.clone(),
    };
    let uid = last.strip_prefix(POD_PREFIX)?;
    (!uid.is_empty()).then(|| uid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pod(uid: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Pod {
        let q = |v: &[(&str, &str)]| {
            (!v.is_empty()).then(|| {
                v.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        let mut p = Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: q(req),
                        limits: q(lim),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        p.metadata.uid = Some(uid.into());
        p
    }

    #[test]
    fn pod_cgroups_by_qos_and_driver() {
        let guaranteed = pod("g-1", &[], &[("cpu", "1"), ("memory", "64Mi")]);
        let burstable = pod("b-2", &[("cpu", "100m")], &[]);
        let besteffort = pod("e-3", &[], &[]);
        let fs = PodCgroupNames::new("", Driver::Cgroupfs);
        let cases = [
            (&guaranteed, "/kubepods/podg-1"),
            (&burstable, "/kubepods/burstable/podb-2"),
            (&besteffort, "/kubepods/besteffort/pode-3"),
        ];
        for (p, want) in cases {
            assert_eq!(fs.literal(&fs.pod(p)), want);
        }
        let rooted = PodCgroupNames::new("/rkt-7", Driver::Cgroupfs);
        assert_eq!(
            rooted.literal(&rooted.pod(&burstable)),
            "/rkt-7/kubepods/burstable/podb-2"
        );
        let sd = PodCgroupNames::new("/", Driver::Systemd);
        let cases = [
            (&guaranteed, "/kubepods.slice/kubepods-podg_1.slice"),
            (
                &burstable,
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podb_2.slice",
            ),
            (
                &besteffort,
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pode_3.slice",
            ),
        ];
        for (p, want) in cases {
            assert_eq!(sd.literal(&sd.pod(p)), want);
        }
    }

    #[test]
    fn uid_of_child_dirs() {
        let cases = [
            ("pod1234-ab", Driver::Cgroupfs, Some("1234-ab")),
            ("burstable", Driver::Cgroupfs, None),
            ("pod", Driver::Cgroupfs, None),
            (
                "kubepods-burstable-pod1234_ab.slice",
                Driver::Systemd,
                Some("1234-ab"),
            ),
            ("kubepods-burstable.slice", Driver::Systemd, None),
        ];
        for (dir, driver, want) in cases {
            assert_eq!(pod_uid_of(dir, driver).as_deref(), want, "{dir}");
        }
    }
}
