//! downwardAPI volumes (upstream `pkg/volume/downwardapi`): the pod's own fields as files. The
//! payload is made again on every sync and written with the atomic writer, which writes only when
//! the content differs, so a `kubectl label` reaches the `labels` file on the pod's next sync
//! (upstream remounts on each sync the same way). Upstream wraps the files in a tmpfs.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, EmptyDirVolumeSource, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::atomic_writer::{self, FileProjection, Payload};
use super::config_map::DEFAULT_MODE;
use super::{empty_dir, VolumeError};
use crate::runtime::env;

/// Upstream's plugin directory name under `<pod>/volumes/`.
pub const DOWNWARD_API_PLUGIN: &str = "kubernetes.io~downward-api";

/// Upstream `CollectData`: each item's fieldRef (`fieldpath.ExtractFieldPathAsString`: name,
/// namespace, uid, labels, annotations and their subscripts) or resourceFieldRef (the named
/// container's value, unset limits read as node allocatable), with its mode or `default_mode`.
/// Every failing item is reported, as upstream aggregates them.
pub fn collect_data(
    items: &[DownwardAPIVolumeFile],
    pod: &Pod,
    allocatable: &BTreeMap<String, Quantity>,
    default_mode: Option<i32>,
) -> Result<Payload, VolumeError> {
    let default_mode = default_mode.unwrap_or(DEFAULT_MODE);
    let mut payload = Payload::new();
    let mut errors = Vec::new();
    for item in items {
        let mode = (item.mode.unwrap_or(default_mode) as u32) & 0o7777;
        let data = if let Some(f) = &item.field_ref {
            env::extract_field_path(pod, &f.field_path)
        } else if let Some(r) = &item.resource_field_ref {
            let name = r.container_name.as_deref().unwrap_or_default();
            env::resource_value_by_container_name(r, pod, name, allocatable)
        } else {
            Ok(String::new())
        };
        match data {
            Ok(d) => {
                payload.insert(
                    item.path.clone(),
                    FileProjection {
                        data: d.into_bytes(),
                        mode,
                    },
                );
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(payload)
    } else {
        Err(VolumeError::DownwardApi(errors.join(", ")))
    }
}

/// Upstream `SetUpAt`: the wrapping tmpfs, then the payload. Blocking.
pub fn set_up(
    dir: &Path,
    items: &[DownwardAPIVolumeFile],
    pod: &Pod,
    allocatable: &BTreeMap<String, Quantity>,
    default_mode: Option<i32>,
    memory_cap: Option<u64>,
    group_bits: u32,
) -> Result<(), VolumeError> {
    let payload = collect_data(items, pod, allocatable, default_mode)?;
    set_up_memory_dir(dir, memory_cap)?;
    atomic_writer::write(dir, &payload, group_bits)?;
    Ok(())
}

/// The tmpfs upstream's downwardAPI and projected volumes wrap (an emptyDir, medium Memory).
pub(super) fn set_up_memory_dir(dir: &Path, memory_cap: Option<u64>) -> Result<(), VolumeError> {
    let wrapper = EmptyDirVolumeSource {
        medium: Some("Memory".to_string()),
        ..Default::default()
    };
    empty_dir::set_up(dir, &wrapper, memory_cap)
}
