//! projected volumes (upstream `pkg/volume/projected`): configMap, secret, downwardAPI and
//! serviceAccountToken sources merged into one payload, written with one atomic swap so that a
//! reader never sees a token from one write beside a ca.crt from another. Upstream wraps the
//! files in a tmpfs. The `kube-api-access-*` volume the ServiceAccount admission injects is one
//! of these: a token, the `kube-root-ca.crt` ConfigMap's `ca.crt` and the namespace.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{Pod, ProjectedVolumeSource};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::atomic_writer::{self, FileProjection, Payload};
use super::config_map::{self, DEFAULT_MODE};
use super::{downward_api, VolumeError};
use crate::objects::{ObjectData, ObjectKind, Objects};
use crate::token::{TokenSpec, Tokens};

/// Upstream's plugin directory name under `<pod>/volumes/`.
pub const PROJECTED_PLUGIN: &str = "kubernetes.io~projected";

/// What a projected volume's sources read besides the pod itself.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub objects: &'a Objects,
    pub tokens: &'a Tokens,
    pub allocatable: &'a BTreeMap<String, Quantity>,
}

/// Upstream `collectData`: each source's files in source order (a later source's file replaces
/// an earlier one at the same path, as upstream's map does). A missing optional configMap or
/// secret contributes nothing; every failing source is reported.
pub fn collect_data(
    src: &ProjectedVolumeSource,
    pod: &Pod,
    inputs: &Inputs<'_>,
) -> Result<Payload, VolumeError> {
    let default_mode = src.default_mode.unwrap_or(DEFAULT_MODE);
    let empty = ObjectData::default();
    let mut payload = Payload::new();
    let mut errors: Vec<String> = Vec::new();
    for source in src.sources.iter().flatten() {
        let object_source = if let Some(cm) = &source.config_map {
            Some((ObjectKind::ConfigMap, &cm.name, &cm.items, cm.optional))
        } else {
            source
                .secret
                .as_ref()
                .map(|s| (ObjectKind::Secret, &s.name, &s.items, s.optional))
        };
        if let Some((kind, name, items, optional)) = object_source {
            let optional = optional == Some(true);
            let obj = match inputs.objects.get(kind, name) {
                Ok(o) => o,
                Err(e) if e.is_not_found() && optional => &empty,
                Err(e) => {
                    errors.push(e.to_string());
                    continue;
                }
            };
            let s = config_map::Source {
                kind,
                name,
                items: items.as_deref().unwrap_or_default(),
                default_mode: Some(default_mode),
                optional,
            };
            match config_map::make_payload(&s, obj) {
                Ok(p) => payload.extend(p),
                Err(e) => errors.push(e.to_string()),
            }
        } else if let Some(d) = &source.downward_api {
            match downward_api::collect_data(
                d.items.as_deref().unwrap_or_default(),
                pod,
                inputs.allocatable,
                Some(default_mode),
            ) {
                Ok(p) => payload.extend(p),
                Err(e) => errors.push(e.to_string()),
            }
        } else if let Some(t) = &source.service_account_token {
            let spec = TokenSpec {
                audience: t.audience.clone().unwrap_or_default(),
                expiration_seconds: t.expiration_seconds,
            };
            // Upstream: with an fsGroup the token is 0600 and SetVolumeOwnership makes it 0640.
            let mode = if super::fs_group(pod).is_some() {
                0o600
            } else {
                default_mode
            };
            match inputs.tokens.get(&spec) {
                Ok(token) => {
                    payload.insert(
                        t.path.clone(),
                        FileProjection {
                            data: token.as_bytes().to_vec(),
                            mode: (mode as u32) & 0o7777,
                        },
                    );
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
    }
    if errors.is_empty() {
        Ok(payload)
    } else {
        Err(VolumeError::Projected(errors.join(", ")))
    }
}

/// Upstream `SetUpAt`: the wrapping tmpfs, then the payload in one write. Blocking.
pub fn set_up(
    dir: &Path,
    src: &ProjectedVolumeSource,
    pod: &Pod,
    inputs: &Inputs<'_>,
    memory_cap: Option<u64>,
    group_bits: u32,
) -> Result<(), VolumeError> {
    let payload = collect_data(src, pod, inputs)?;
    downward_api::set_up_memory_dir(dir, memory_cap)?;
    atomic_writer::write(dir, &payload, group_bits)?;
    Ok(())
}
