//! Registry credentials from image pull secrets (upstream `pkg/credentialprovider` keyring and
//! `credentialprovider/secrets`): docker config parsing and the lookup of the credentials that
//! apply to an image's repository.
//!
//! Kept pure (no I/O) so the matching rules, which decide which password goes to which registry,
//! are unit tested; [`pod_pull_secrets`] is the one async entry that reads the API server.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::{Api, Client};
use rkubelet_cri::api;
use serde::Deserialize;
use tracing::warn;

pub mod node_keyring;
pub mod plugin;

/// Secret types and keys (upstream `v1.SecretTypeDockerConfigJson` etc.).
pub const TYPE_DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
pub const KEY_DOCKER_CONFIG_JSON: &str = ".dockerconfigjson";
pub const TYPE_DOCKERCFG: &str = "kubernetes.io/dockercfg";
pub const KEY_DOCKERCFG: &str = ".dockercfg";

/// Upstream's key for Docker Hub credentials after `Add` strips scheme and `/v1/`.
const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("secret {secret:?}: {key} is not a valid docker config: {source}")]
    Json {
        secret: String,
        key: &'static str,
        source: serde_json::Error,
    },
    #[error("{path}: not a valid docker config: {source}")]
    File {
        path: String,
        source: serde_json::Error,
    },
    #[error("secret {secret:?}: registry {registry:?}: unable to parse auth field, must be formatted as base64(username:password)")]
    Auth { secret: String, registry: String },
}

/// One credential: what CRI `AuthConfig` carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    pub password: String,
    /// Docker config files carry these for token-based registries. Upstream 1.20's
    /// `DockerConfigEntry` drops them; passing them on lets such registries work.
    pub identity_token: String,
    pub registry_token: String,
}

impl Credential {
    pub fn to_cri(&self) -> api::AuthConfig {
        api::AuthConfig {
            username: self.username.clone(),
            password: self.password.clone(),
            identity_token: self.identity_token.clone(),
            registry_token: self.registry_token.clone(),
            ..Default::default()
        }
    }
}

/// A docker config entry as upstream's `DockerConfigEntry.UnmarshalJSON` reads it: a non-empty
/// `auth` (base64 of `user:password`) wins over `username`/`password`.
#[derive(Deserialize, Default)]
struct RawEntry {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    auth: String,
    #[serde(default)]
    identitytoken: String,
    #[serde(default)]
    registrytoken: String,
}

/// `.dockerconfigjson`: `{"auths": {registry: entry}}`.
#[derive(Deserialize)]
struct ConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, RawEntry>,
}

/// Upstream `decodeDockerConfigFieldAuth`: padded or unpadded standard base64 of `user:password`.
fn decode_auth(field: &str) -> Option<(String, String)> {
    let decoded = if field.trim().ends_with('=') {
        base64::engine::general_purpose::STANDARD.decode(field)
    } else {
        base64::engine::general_purpose::STANDARD_NO_PAD.decode(field)
    }
    .ok()?;
    let s = String::from_utf8(decoded).ok()?;
    let (u, p) = s.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

fn entries(
    secret: &str,
    raw: BTreeMap<String, RawEntry>,
) -> Result<Vec<(String, Credential)>, CredentialError> {
    raw.into_iter()
        .map(|(registry, e)| {
            let (username, password) = if e.auth.is_empty() {
                (e.username, e.password)
            } else {
                decode_auth(&e.auth).ok_or_else(|| CredentialError::Auth {
                    secret: secret.to_string(),
                    registry: registry.clone(),
                })?
            };
            Ok((
                registry,
                Credential {
                    username,
                    password,
                    identity_token: e.identitytoken,
                    registry_token: e.registrytoken,
                },
            ))
        })
        .collect()
}

/// The registry → credential entries of a pull secret (upstream `MakeDockerKeyring`): only a
/// `dockerconfigjson` secret with a non-empty `.dockerconfigjson`, or a `dockercfg` secret with a
/// non-empty `.dockercfg`, contributes; other secrets are ignored.
pub fn secret_entries(s: &Secret) -> Result<Vec<(String, Credential)>, CredentialError> {
    let name = s.metadata.name.clone().unwrap_or_default();
    let data = s.data.as_ref();
    let get = |k: &str| data.and_then(|d| d.get(k)).filter(|b| !b.0.is_empty());
    match s.type_.as_deref() {
        Some(TYPE_DOCKER_CONFIG_JSON) => match get(KEY_DOCKER_CONFIG_JSON) {
            Some(b) => {
                let cfg: ConfigJson =
                    serde_json::from_slice(&b.0).map_err(|source| CredentialError::Json {
                        secret: name.clone(),
                        key: KEY_DOCKER_CONFIG_JSON,
                        source,
                    })?;
                entries(&name, cfg.auths)
            }
            None => Ok(Vec::new()),
        },
        Some(TYPE_DOCKERCFG) => match get(KEY_DOCKERCFG) {
            Some(b) => {
                let cfg: BTreeMap<String, RawEntry> =
                    serde_json::from_slice(&b.0).map_err(|source| CredentialError::Json {
                        secret: name.clone(),
                        key: KEY_DOCKERCFG,
                        source,
                    })?;
                entries(&name, cfg)
            }
            None => Ok(Vec::new()),
        },
        _ => Ok(Vec::new()),
    }
}

/// A docker config file's entries (upstream `readDockerConfigJSONFileFromBytes` for
/// `config.json`, `{"auths": {...}}`, and `readDockerConfigFileFromBytes` for the legacy
/// `.dockercfg`, a bare map); `name` says which file in errors.
pub fn docker_config_entries(
    name: &str,
    bytes: &[u8],
    config_json: bool,
) -> Result<Vec<(String, Credential)>, CredentialError> {
    let json_err = |source| CredentialError::File {
        path: name.to_string(),
        source,
    };
    let raw = if config_json {
        serde_json::from_slice::<ConfigJson>(bytes)
            .map_err(json_err)?
            .auths
    } else {
        serde_json::from_slice::<BTreeMap<String, RawEntry>>(bytes).map_err(json_err)?
    };
    entries(name, raw)
}

/// A host (`host[:port]`) and path, as upstream's `ParseSchemelessURL` splits a key or image.
fn split_url(s: &str) -> (&str, &str) {
    match s.find('/') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    }
}

/// Upstream `SplitURL`: host labels and port.
fn host_parts(host: &str) -> (Vec<&str>, &str) {
    // net.SplitHostPort fails without a port (or on a bare IPv6): the whole host, no port.
    match host.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && !p.is_empty() => (h.split('.').collect(), p),
        _ => (host.split('.').collect(), ""),
    }
}

/// Go's `filepath.Match` for one host label (no `/` in labels): `*`, `?`, and literals.
/// Character classes are not used in registry keys and are matched literally.
fn glob(pattern: &[u8], s: &[u8]) -> bool {
    match pattern.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|i| glob(rest, &s[i..])),
        Some((b'?', rest)) => !s.is_empty() && glob(rest, &s[1..]),
        Some((c, rest)) => s.first() == Some(c) && glob(rest, &s[1..]),
    }
}

/// Upstream `URLsMatch`: same port, same number of host labels each glob-matching, and the key's
/// path a prefix of the image's.
pub fn url_matches(key: &str, image: &str) -> bool {
    let (kh, kp) = split_url(key);
    let (ih, ip) = split_url(image);
    let (kparts, kport) = host_parts(kh);
    let (iparts, iport) = host_parts(ih);
    kport == iport
        && kparts.len() == iparts.len()
        && ip.starts_with(kp)
        && kparts
            .iter()
            .zip(&iparts)
            .all(|(k, i)| glob(k.as_bytes(), i.as_bytes()))
}

/// Upstream `BasicDockerKeyring`: credentials by scheme-less key, looked up most specific first.
#[derive(Debug, Clone, Default)]
pub struct Keyring {
    /// Keys in reverse lexical order (upstream sorts the index so, putting a longer key with the
    /// same prefix before the shorter one).
    index: Vec<String>,
    creds: BTreeMap<String, Vec<Credential>>,
}

impl Keyring {
    /// Upstream `Add`: the key is the host plus any path, scheme dropped, a leading `/v1/` or
    /// `/v2/` treated as the bare host (as the docker client does).
    pub fn add(&mut self, registry: &str, cred: Credential) {
        let rest = registry
            .strip_prefix("https://")
            .or_else(|| registry.strip_prefix("http://"))
            .unwrap_or(registry);
        let (host, mut path) = split_url(rest);
        if path.starts_with("/v2/") || path.starts_with("/v1/") {
            path = &path[3..];
        }
        // Query and fragment are not part of the path url.Parse keeps.
        if let Some(i) = path.find(['?', '#']) {
            path = &path[..i];
        }
        let key = if path.is_empty() || path == "/" {
            host.to_string()
        } else {
            format!("{host}{path}")
        };
        let list = self.creds.entry(key.clone()).or_default();
        if !list.contains(&cred) {
            list.push(cred);
        }
        if !self.index.contains(&key) {
            self.index.push(key);
            self.index.sort_by(|a, b| b.cmp(a));
        }
    }

    /// Upstream `Lookup`: every credential whose key matches `repo` (a normalized repository name
    /// such as `docker.io/library/busybox`), most specific key first; Docker Hub images fall
    /// back to the `index.docker.io` entry.
    pub fn lookup(&self, repo: &str) -> Vec<Credential> {
        let mut out: Vec<Credential> = self
            .index
            .iter()
            .filter(|k| url_matches(k, repo))
            .flat_map(|k| self.creds[k.as_str()].iter().cloned())
            .collect();
        if out.is_empty() && is_default_registry(repo) {
            if let Some(c) = self.creds.get(DEFAULT_REGISTRY_HOST) {
                out = c.clone();
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Upstream `MakeDockerKeyring` over the pod's pull secrets.
    pub fn from_secrets(secrets: &[Secret]) -> Result<Keyring, CredentialError> {
        let mut k = Keyring::default();
        for s in secrets {
            for (registry, cred) in secret_entries(s)? {
                k.add(&registry, cred);
            }
        }
        Ok(k)
    }
}

/// Upstream `isDefaultRegistryMatch`: a repository that lives on Docker Hub.
fn is_default_registry(repo: &str) -> bool {
    let first = repo.split('/').next().unwrap_or("");
    if first.is_empty() {
        return false;
    }
    if !repo.contains('/') {
        return true;
    }
    first == "docker.io"
        || first == "index.docker.io"
        || !(first.contains('.') || first.contains(':') || first == "localhost")
}

/// The repository an image is pulled from, normalized as upstream's `parsers.ParseImageName`
/// (docker reference `ParseNormalizedNamed`) names it: tag and digest dropped, Docker Hub names
/// completed to `docker.io/library/...`.
pub fn repository(image: &str) -> String {
    let no_digest = image.split('@').next().unwrap_or(image);
    let name = match no_digest.rfind(':') {
        Some(i) if !no_digest[i..].contains('/') => &no_digest[..i],
        _ => no_digest,
    };
    let (domain, rest) = match name.split_once('/') {
        Some((d, r)) if d.contains('.') || d.contains(':') || d == "localhost" => (d, r),
        _ => ("docker.io", name),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    if domain == "docker.io" && !rest.contains('/') {
        format!("{domain}/library/{rest}")
    } else {
        format!("{domain}/{rest}")
    }
}

/// The pod's pull secrets as upstream `getPullSecretsForPod` reads them: each named secret, a
/// missing or unreadable one logged and skipped ("The image pull may not succeed").
///
/// The service account is not read here, as upstream: the ServiceAccount admission plugin copies
/// its `imagePullSecrets` into the pod at creation, and the Node authorizer denies nodes a GET of
/// a serviceaccount (only `create token`), so asking would cost a 403 per pull.
pub async fn pod_pull_secrets(client: &Client, pod: &Pod) -> Vec<Secret> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let names: Vec<String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_ref())
        .into_iter()
        .flatten()
        .map(|r| r.name.clone())
        .filter(|n| !n.is_empty())
        .collect();
    let api = Api::<Secret>::namespaced(client.clone(), ns);
    let mut out = Vec::new();
    for n in names {
        match api.get(&n).await {
            Ok(s) => out.push(s),
            Err(e) => warn!(
                "Unable to retrieve pull secret {ns}/{n} for {ns}/{}: {e}. The image pull may not succeed.",
                pod.metadata.name.as_deref().unwrap_or("")
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests;
