//! A container's volumeMounts as CRI mounts (upstream `kubelet_pods.go` `makeMounts` and
//! `translateMountPropagation`).

use std::path::Path;

use k8s_openapi::api::core::v1::{Container, VolumeMount};
use rkubelet_cri::api;

use super::{subpath, PodVolumes};
use crate::expansion;
use crate::runtime::env::EnvVar;

/// Upstream's directory under the pod directory for subPath bind mounts.
pub const SUBPATHS_DIR: &str = "volume-subpaths";

/// Why a volumeMount cannot be made; surfaces as `CreateContainerConfigError`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MountsError {
    #[error("cannot find volume {volume:?} to mount into container {container:?}")]
    UnknownVolume { volume: String, container: String },
    #[error("missing value for {0}")]
    MissingExpansion(String),
    #[error("invalid MountPropagation mode: {0:?}")]
    Propagation(String),
    #[error(
        "failed to prepare subPath for volumeMount {mount:?} of container {container:?}: {source}"
    )]
    SubPath {
        mount: String,
        container: String,
        #[source]
        source: subpath::SubPathError,
    },
}

/// Upstream `makeMounts` for the volume part: one CRI mount per volumeMount, in order, with the
/// subPath (or `subPathExpr` expanded with the container's env) resolved safely inside its
/// volume and bind-mounted below `pod_dir`. Blocking: a subPath may be created and mounted.
pub fn make_mounts(
    pod_dir: &Path,
    c: &Container,
    volumes: &PodVolumes,
    envs: &[EnvVar],
) -> Result<Vec<api::Mount>, MountsError> {
    let mut out = Vec::new();
    for (index, m) in c.volume_mounts.iter().flatten().enumerate() {
        let Some(volume_path) = volumes.get(&m.name) else {
            return Err(MountsError::UnknownVolume {
                volume: m.name.clone(),
                container: c.name.clone(),
            });
        };
        let sub_path = match m.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
            Some(expr) => expand_sub_path_expr(expr, envs)?,
            None => m.sub_path.clone().unwrap_or_default(),
        };
        let host_path = if sub_path.is_empty() {
            volume_path.to_path_buf()
        } else {
            let target = pod_dir
                .join(SUBPATHS_DIR)
                .join(&m.name)
                .join(&c.name)
                .join(index.to_string());
            subpath::prepare(volume_path, &sub_path, &target).map_err(|source| {
                MountsError::SubPath {
                    mount: m.name.clone(),
                    container: c.name.clone(),
                    source,
                }
            })?
        };
        out.push(api::Mount {
            container_path: m.mount_path.clone(),
            host_path: host_path.to_string_lossy().into_owned(),
            readonly: m.read_only.unwrap_or(false) || volumes.is_read_only(&m.name),
            propagation: propagation(m)? as i32,
            ..Default::default()
        });
    }
    Ok(out)
}

/// Upstream `makeBlockVolumes`: one CRI device per volumeDevice, the host side being the link
/// to the block device in the pod's `volumeDevices` directory (the runtime resolves it);
/// `mrw`, or `r` for a claim with `readOnly`.
pub fn make_devices(c: &Container, volumes: &PodVolumes) -> Result<Vec<api::Device>, MountsError> {
    let mut out = Vec::new();
    for d in c.volume_devices.iter().flatten() {
        let Some(path) = volumes.device(&d.name) else {
            return Err(MountsError::UnknownVolume {
                volume: d.name.clone(),
                container: c.name.clone(),
            });
        };
        out.push(api::Device {
            container_path: d.device_path.clone(),
            host_path: path.to_string_lossy().into_owned(),
            permissions: if volumes.is_read_only(&d.name) {
                "r"
            } else {
                "mrw"
            }
            .to_string(),
        });
    }
    Ok(out)
}

/// Upstream `ExpandContainerVolumeMounts`: unlike env expansion, an unknown or empty variable is
/// an error naming every such variable, since an unexpanded subPath would mount the wrong place.
pub fn expand_sub_path_expr(expr: &str, envs: &[EnvVar]) -> Result<String, MountsError> {
    let missing = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let expanded = expansion::expand(expr, |key| {
        // The last definition of a name wins, as in the container's environment.
        match envs.iter().rev().find(|(k, _)| k == key) {
            Some((_, v)) if !v.is_empty() => v.clone(),
            _ => {
                missing.borrow_mut().insert(key.to_string());
                String::new()
            }
        }
    });
    let missing = missing.into_inner();
    if !missing.is_empty() {
        let names: Vec<String> = missing.into_iter().collect();
        return Err(MountsError::MissingExpansion(names.join(", ")));
    }
    Ok(expanded)
}

/// Upstream `translateMountPropagation`.
pub fn propagation(m: &VolumeMount) -> Result<api::MountPropagation, MountsError> {
    match m.mount_propagation.as_deref() {
        None | Some("None") => Ok(api::MountPropagation::PropagationPrivate),
        Some("HostToContainer") => Ok(api::MountPropagation::PropagationHostToContainer),
        Some("Bidirectional") => Ok(api::MountPropagation::PropagationBidirectional),
        Some(other) => Err(MountsError::Propagation(other.to_string())),
    }
}
