//! PersistentVolumeClaims of a pod resolved to their bound PersistentVolumes (upstream
//! `desired_state_of_world_populator.go` `createVolumeSpec`, `getPVCExtractPV`, `getPVSpec`).
//!
//! Resolution reads the API server on every pod sync (upstream reads it each time the populator
//! processes the pod); what it decides is a pure function of the objects read, so the checks and
//! their messages (upstream's, word for word) are table-tested below.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Volume};
use kube::{Api, Client};

/// A claim resolved to the PV bound to it, with the read-only flag the pod's volume asks for
/// (upstream `volume.NewSpecFromPersistentVolume(pv, pvcReadOnly)`).
#[derive(Debug, Clone)]
pub struct BoundClaim {
    pub pv: PersistentVolume,
    pub read_only: bool,
}

impl BoundClaim {
    /// The PV's name: upstream's volume name in the pod's volume directories.
    pub fn pv_name(&self) -> &str {
        self.pv.metadata.name.as_deref().unwrap_or_default()
    }

    /// `spec.volumeMode`, Filesystem when unset as upstream defaults it.
    pub fn is_block(&self) -> bool {
        self.pv.spec.as_ref().and_then(|s| s.volume_mode.as_deref()) == Some("Block")
    }
}

/// What one sync resolved: per pod volume name, the bound claim or upstream's error text
/// (`error processing PVC ns/name: ...`).
#[derive(Debug, Clone, Default)]
pub struct Claims(pub BTreeMap<String, Result<BoundClaim, String>>);

/// The kubelet's access to PVCs and PVs; `None` client in standalone mode. Cheap to clone.
#[derive(Clone, Default)]
pub struct ClaimSource {
    client: Option<Client>,
}

impl ClaimSource {
    pub fn new(client: Option<Client>) -> Self {
        ClaimSource { client }
    }

    /// Resolves every PVC volume the pod's containers use (upstream skips unused volumes).
    pub async fn resolve(&self, pod: &Pod) -> Claims {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let (mounts, devices) = volume_uses(pod);
        let mut out = Claims::default();
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            // A generic ephemeral volume is the claim `<pod>-<volume>` the ephemeral volume
            // controller creates (upstream `ephemeral.VolumeClaimName`), owned by the pod.
            let (claim_name, read_only, ephemeral) =
                match (&v.persistent_volume_claim, &v.ephemeral) {
                    (Some(src), _) => (src.claim_name.clone(), src.read_only == Some(true), false),
                    (None, Some(_)) => (format!("{pod_name}-{}", v.name), false, true),
                    (None, None) => continue,
                };
            if !mounts.contains(&v.name) && !devices.contains(&v.name) {
                continue;
            }
            let res = self
                .resolve_one(ns, &claim_name, read_only)
                .await
                .and_then(|(b, controller)| {
                    check_volume_mode(v, &b, &mounts, &devices)?;
                    Ok((b, controller))
                })
                .map_err(|e| format!("error processing PVC {ns}/{claim_name}: {e}"))
                .and_then(|(b, controller)| {
                    if ephemeral {
                        volume_is_for_pod(pod, ns, &claim_name, controller.as_deref())?;
                    }
                    Ok(b)
                });
            out.0.insert(v.name.clone(), res);
        }
        out
    }

    /// The bound claim and the UID of the claim's controller (its owner with `controller`).
    async fn resolve_one(
        &self,
        ns: &str,
        claim: &str,
        read_only: bool,
    ) -> Result<(BoundClaim, Option<String>), String> {
        let Some(client) = &self.client else {
            return Err(format!(
                "failed to fetch PVC from API server: no API server to read persistentvolumeclaim {claim:?} from"
            ));
        };
        let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
            .get(claim)
            .await
            .map_err(|e| format!("failed to fetch PVC from API server: {}", api_message(e)))?;
        let pv_name = check_claim(&pvc)?;
        let pv = Api::<PersistentVolume>::all(client.clone())
            .get(&pv_name)
            .await
            .map_err(|e| {
                format!(
                    "failed to fetch PV {pv_name} from API server: {}",
                    api_message(e)
                )
            })?;
        check_pv(&pv, pvc.metadata.uid.as_deref().unwrap_or_default())?;
        let controller = pvc
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
            .map(|r| r.uid.clone());
        Ok((BoundClaim { pv, read_only }, controller))
    }
}

/// Upstream `ephemeral.VolumeIsForPod`: a generic ephemeral volume's claim must be controlled by
/// the pod (a same-named claim someone else made is refused).
pub fn volume_is_for_pod(
    pod: &Pod,
    ns: &str,
    claim: &str,
    controller_uid: Option<&str>,
) -> Result<(), String> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    if controller_uid == Some(uid) && !uid.is_empty() {
        return Ok(());
    }
    Err(format!(
        "PVC {ns}/{claim} was not created for pod {ns}/{} (pod is not owner)",
        pod.metadata.name.as_deref().unwrap_or_default()
    ))
}

/// The API server's own message for an API error (`persistentvolumeclaims "x" not found`), as
/// upstream's client-go error prints.
pub(crate) fn api_message(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message,
        e => e.to_string(),
    }
}

/// Upstream `getPVCExtractPV`'s checks; the bound PV's name.
pub fn check_claim(pvc: &PersistentVolumeClaim) -> Result<String, String> {
    if pvc.metadata.deletion_timestamp.is_some() {
        return Err("PVC is being deleted".into());
    }
    let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase != Some("Bound") {
        return Err("PVC is not bound".into());
    }
    match pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()) {
        Some(name) if !name.is_empty() => Ok(name.to_string()),
        _ => Err("PVC has empty pvc.Spec.VolumeName".into()),
    }
}

/// Upstream `getPVSpec`'s checks: the PV must point back at the claim.
pub fn check_pv(pv: &PersistentVolume, claim_uid: &str) -> Result<(), String> {
    let name = pv.metadata.name.as_deref().unwrap_or_default();
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return Err(format!("found PV object {name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"));
    };
    let uid = r.uid.as_deref().unwrap_or_default();
    if uid != claim_uid {
        return Err(format!("found PV object {name} but its pv.Spec.ClaimRef.UID {uid} does not point to claim.UID {claim_uid}"));
    }
    Ok(())
}

/// Upstream `createVolumeSpec`'s mode check: a Block PV only in volumeDevices, a Filesystem one
/// only in volumeMounts.
fn check_volume_mode(
    v: &Volume,
    b: &BoundClaim,
    mounts: &BTreeSet<String>,
    devices: &BTreeSet<String>,
) -> Result<(), String> {
    let mode = if b.is_block() { "Block" } else { "Filesystem" };
    if mounts.contains(&v.name) && b.is_block() {
        return Err(format!(
            "volume {} has volumeMode {mode}, but is specified in volumeMounts",
            v.name
        ));
    }
    if devices.contains(&v.name) && !b.is_block() {
        return Err(format!(
            "volume {} has volumeMode {mode}, but is specified in volumeDevices",
            v.name
        ));
    }
    Ok(())
}

/// Upstream `util.GetPodVolumeNames`: the volumes named in any container's volumeMounts, and in
/// any container's volumeDevices (init, regular and ephemeral containers).
pub fn volume_uses(pod: &Pod) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut mounts, mut devices) = (BTreeSet::new(), BTreeSet::new());
    let (init, regular) = (
        crate::podutil::init_containers(pod),
        crate::podutil::containers(pod),
    );
    for c in init.iter().chain(regular) {
        mounts.extend(c.volume_mounts.iter().flatten().map(|m| m.name.clone()));
        devices.extend(c.volume_devices.iter().flatten().map(|d| d.name.clone()));
    }
    for e in crate::podutil::ephemeral_specs(pod) {
        mounts.extend(e.volume_mounts.iter().flatten().map(|m| m.name.clone()));
        devices.extend(e.volume_devices.iter().flatten().map(|d| d.name.clone()));
    }
    (mounts, devices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ObjectReference, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus,
        PersistentVolumeSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn pvc(phase: Option<&str>, volume: Option<&str>, deleting: bool) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("c".into()),
                uid: Some("u1".into()),
                deletion_timestamp: deleting
                    .then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                volume_name: volume.map(String::from),
                ..Default::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: phase.map(String::from),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn claim_checks() {
        let table: [(PersistentVolumeClaim, Result<&str, &str>); 5] = [
            (pvc(Some("Bound"), Some("pv1"), false), Ok("pv1")),
            (pvc(Some("Pending"), None, false), Err("PVC is not bound")),
            (pvc(None, Some("pv1"), false), Err("PVC is not bound")),
            (
                pvc(Some("Bound"), Some(""), false),
                Err("PVC has empty pvc.Spec.VolumeName"),
            ),
            (
                pvc(Some("Bound"), Some("pv1"), true),
                Err("PVC is being deleted"),
            ),
        ];
        for (claim, want) in table {
            let got = check_claim(&claim);
            assert_eq!(
                got.as_deref().map_err(String::as_str),
                want,
                "{:?}",
                claim.status
            );
        }
    }

    fn pv(claim_uid: Option<&str>) -> PersistentVolume {
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some("pv1".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                claim_ref: claim_uid.map(|u| ObjectReference {
                    uid: Some(u.into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn pv_checks() {
        assert_eq!(check_pv(&pv(Some("u1")), "u1"), Ok(()));
        assert_eq!(
            check_pv(&pv(None), "u1").unwrap_err(),
            "found PV object pv1 but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        );
        assert_eq!(
            check_pv(&pv(Some("u2")), "u1").unwrap_err(),
            "found PV object pv1 but its pv.Spec.ClaimRef.UID u2 does not point to claim.UID u1"
        );
    }

    #[test]
    fn ephemeral_claim_must_be_the_pods() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(volume_is_for_pod(&pod, "ns", "p-v", Some("u1")), Ok(()));
        for other in [None, Some("u2")] {
            assert_eq!(
                volume_is_for_pod(&pod, "ns", "p-v", other).unwrap_err(),
                "PVC ns/p-v was not created for pod ns/p (pod is not owner)"
            );
        }
    }

    #[test]
    fn volume_mode_checks() {
        let v = Volume {
            name: "data".into(),
            ..Default::default()
        };
        let set = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let mut block = BoundClaim {
            pv: pv(Some("u1")),
            read_only: false,
        };
        let fs = block.clone();
        if let Some(s) = block.pv.spec.as_mut() {
            s.volume_mode = Some("Block".into());
        }
        let (in_mounts, in_devices, none) = (set(&["data"]), set(&["data"]), set(&[]));
        assert_eq!(check_volume_mode(&v, &fs, &in_mounts, &none), Ok(()));
        assert_eq!(check_volume_mode(&v, &block, &none, &in_devices), Ok(()));
        assert_eq!(
            check_volume_mode(&v, &block, &in_mounts, &none).unwrap_err(),
            "volume data has volumeMode Block, but is specified in volumeMounts"
        );
        assert_eq!(
            check_volume_mode(&v, &fs, &none, &in_devices).unwrap_err(),
            "volume data has volumeMode Filesystem, but is specified in volumeDevices"
        );
    }
}
