//! configMap and secret volumes (upstream `pkg/volume/configmap` and `pkg/volume/secret`): the
//! object's keys as files, written with the [`atomic_writer`](super::atomic_writer) on every sync,
//! so a changed object reaches the files on the next sync (upstream refreshes from its watch
//! cache on the same per-sync remount). Upstream wraps them in an emptyDir: a directory for a
//! configMap, a tmpfs (medium Memory) for a secret, so secrets never touch the node's disk.

use std::path::Path;

use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, KeyToPath};

use super::atomic_writer::{self, FileProjection, Payload};
use super::{empty_dir, VolumeError};
use crate::objects::{ObjectData, ObjectKind, Objects};

/// Upstream's plugin directory names under `<pod>/volumes/`.
pub const CONFIG_MAP_PLUGIN: &str = "kubernetes.io~configmap";
pub const SECRET_PLUGIN: &str = "kubernetes.io~secret";

/// The API server's default for `defaultMode` (0644); used when a spec somehow lacks it.
pub const DEFAULT_MODE: i32 = 0o644;

/// What a configMap or secret volume asks for.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub kind: ObjectKind,
    pub name: &'a str,
    pub items: &'a [KeyToPath],
    pub default_mode: Option<i32>,
    pub optional: bool,
}

/// Upstream `MakePayload` (configmap and secret): every key with `defaultMode`, or only the
/// `items`, each at its path with its own mode. A missing item key fails unless optional.
pub fn make_payload(src: &Source<'_>, obj: &ObjectData) -> Result<Payload, VolumeError> {
    let default_mode = src.default_mode.unwrap_or(DEFAULT_MODE);
    let mode = |m: i32| (m as u32) & 0o7777;
    let mut payload = Payload::new();
    if src.items.is_empty() {
        for (k, v) in obj.data.iter().chain(&obj.binary_data) {
            payload.insert(
                k.clone(),
                FileProjection {
                    data: v.clone(),
                    mode: mode(default_mode),
                },
            );
        }
        return Ok(payload);
    }
    for item in src.items {
        let data = match obj.data.get(&item.key).or(obj.binary_data.get(&item.key)) {
            Some(d) => d.clone(),
            None if src.optional => continue,
            None => {
                return Err(VolumeError::MissingKey {
                    kind: src.kind,
                    key: item.key.clone(),
                })
            }
        };
        payload.insert(
            item.path.clone(),
            FileProjection {
                data,
                mode: mode(item.mode.unwrap_or(default_mode)),
            },
        );
    }
    Ok(payload)
}

/// Upstream `SetUpAt`: the wrapping emptyDir, then the payload. A missing optional object gives
/// an empty volume. `memory_cap` sizes a secret's tmpfs as a Memory emptyDir's. Blocking.
pub fn set_up(
    dir: &Path,
    src: &Source<'_>,
    objects: &Objects,
    memory_cap: Option<u64>,
    group_bits: u32,
) -> Result<(), VolumeError> {
    let empty = ObjectData::default();
    let obj = match objects.get(src.kind, src.name) {
        Ok(o) => o,
        Err(e) if e.is_not_found() && src.optional => &empty,
        Err(e) => return Err(VolumeError::Object(e)),
    };
    let payload = make_payload(src, obj)?;
    let medium = match src.kind {
        ObjectKind::ConfigMap => None,
        ObjectKind::Secret => Some("Memory".to_string()),
    };
    let wrapper = EmptyDirVolumeSource {
        medium,
        ..Default::default()
    };
    empty_dir::set_up(dir, &wrapper, memory_cap)?;
    atomic_writer::write(dir, &payload, group_bits)?;
    Ok(())
}
