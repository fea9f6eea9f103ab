//! The exec protocol's messages (upstream `k8s.io/kubelet/pkg/apis/credentialprovider`):
//! `CredentialProviderRequest` written to the plugin, `CredentialProviderResponse` read back,
//! decoded strictly as upstream's codecs do.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::Auth;
use crate::credentials::Credential;

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The exec failed: not started, non-zero exit, killed at the timeout. Upstream's wording,
    /// with the plugin's stderr after the colon.
    #[error(
        "error execing credential provider plugin {plugin} for image {image}: {reason}: {stderr}"
    )]
    Exec {
        plugin: String,
        image: String,
        reason: String,
        stderr: String,
    },
    #[error("error reading GVK from response: {0}")]
    Gvk(String),
    #[error("apiVersion from credential plugin response did not match expected apiVersion:{expected}, actual apiVersion:{actual}")]
    ApiVersion { expected: String, actual: String },
    #[error("failed to decode CredentialProviderResponse, unexpected Kind: {0:?}")]
    Kind(String),
    /// Not the decoder's own message: it may quote the response, which holds credentials.
    #[error("error decoding credential provider plugin response from stdout")]
    Decode,
    #[error("credential provider plugin did not return a valid cacheKeyType: {0:?}")]
    CacheKeyType(String),
}

/// Upstream `PluginCacheKeyType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheKeyType {
    Image,
    Registry,
    Global,
}

/// A decoded, checked response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub cache_key_type: CacheKeyType,
    /// `None`: absent (the provider's default applies). Negative durations read as zero.
    pub cache_duration: Option<Duration>,
    /// Keys in the map's (sorted) order; the keyring orders them again by specificity.
    pub auth: Auth,
}

/// The request, as upstream's JSON encoder writes it (TypeMeta first, a trailing newline).
pub fn request(api_version: &str, image: &str) -> Vec<u8> {
    let mut v = serde_json::to_vec(&serde_json::json!({
        "kind": "CredentialProviderRequest",
        "apiVersion": api_version,
        "image": image,
    }))
    .unwrap_or_default();
    v.push(b'\n');
    v
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawResponse {
    #[allow(dead_code)]
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    #[serde(default)]
    cache_key_type: String,
    cache_duration: Option<String>,
    auth: Option<BTreeMap<String, RawAuth>>,
}

/// A `metav1.Duration` (`time.ParseDuration`), negative allowed.
fn go_duration(s: &str) -> Option<Duration> {
    match s.trim().strip_prefix('-') {
        Some(rest) => kubelet_config::config::parse_duration(rest)
            .ok()
            .map(|_| Duration::ZERO),
        None => kubelet_config::config::parse_duration(s).ok(),
    }
}

/// Upstream `ExecPlugin`'s checks of stdout: the apiVersion first (it must be the provider's
/// configured one), then a strict decode, then `cacheKeyType` (upstream `provide`).
pub fn parse_response(expected_api: &str, stdout: &[u8]) -> Result<Response, PluginError> {
    let tm: TypeMeta =
        serde_json::from_slice(stdout).map_err(|e| PluginError::Gvk(e.to_string()))?;
    if tm.api_version != expected_api {
        return Err(PluginError::ApiVersion {
            expected: expected_api.to_string(),
            actual: tm.api_version,
        });
    }
    if tm.kind != "CredentialProviderResponse" {
        return Err(PluginError::Kind(tm.kind));
    }
    let raw: RawResponse = serde_json::from_slice(stdout).map_err(|_| PluginError::Decode)?;
    let cache_key_type = match raw.cache_key_type.as_str() {
        "Image" => CacheKeyType::Image,
        "Registry" => CacheKeyType::Registry,
        "Global" => CacheKeyType::Global,
        other => return Err(PluginError::CacheKeyType(other.to_string())),
    };
    let cache_duration = match raw.cache_duration.as_deref() {
        None => None,
        Some(s) => Some(go_duration(s).ok_or(PluginError::Decode)?),
    };
    let auth = raw
        .auth
        .unwrap_or_default()
        .into_iter()
        .map(|(k, a)| {
            (
                k,
                Credential {
                    username: a.username,
                    password: a.password,
                    ..Default::default()
                },
            )
        })
        .collect();
    Ok(Response {
        cache_key_type,
        cache_duration,
        auth,
    })
}
