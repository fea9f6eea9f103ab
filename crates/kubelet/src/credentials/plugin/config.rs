//! The `CredentialProviderConfig` file `--image-credential-provider-config` names (upstream
//! `pkg/credentialprovider/plugin/config.go`): decoding (strict, YAML or JSON, a file or a
//! directory of `*.json`/`*.yaml`/`*.yml` merged in lexical order) and validation, both before
//! the kubelet starts anything, so a bad file stops it with the file and the field named.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The group the config file's `apiVersion` must be in; upstream accepts every version it
/// serves (v1alpha1 since 1.20, v1beta1 since 1.24, v1 since 1.26).
pub const CONFIG_API_VERSIONS: [&str; 3] = [
    "kubelet.config.k8s.io/v1",
    "kubelet.config.k8s.io/v1beta1",
    "kubelet.config.k8s.io/v1alpha1",
];

/// The `apiVersion`s of the exec protocol (`credentialprovider.kubelet.k8s.io`), sorted as
/// upstream lists them in its "supported values" message.
pub const PLUGIN_API_VERSIONS: [&str; 3] = [
    "credentialprovider.kubelet.k8s.io/v1",
    "credentialprovider.kubelet.k8s.io/v1alpha1",
    "credentialprovider.kubelet.k8s.io/v1beta1",
];

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("credential provider config path is empty")]
    EmptyPath,
    #[error("unable to access path {path:?}: {source}")]
    Access {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no configuration files found in directory {0:?}")]
    EmptyDir(PathBuf),
    #[error("error decoding config {path:?}: {message}")]
    Decode { path: PathBuf, message: String },
    #[error("duplicate provider name {name:?} found in configuration file(s) ({path:?})")]
    Duplicate { name: String, path: PathBuf },
    #[error("failed to validate credential provider config {path:?}: {}", join(.errors))]
    Invalid { path: PathBuf, errors: Vec<String> },
    #[error("plugin binary directory {0} did not exist")]
    NoBinDir(PathBuf),
    #[error("error inspecting binary directory {path}: {source}")]
    BinDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("plugin binary executable {0} did not exist")]
    NoBinary(PathBuf),
}

/// Upstream's `ToAggregate` text: one error bare, several in brackets.
fn join(errors: &[String]) -> String {
    if errors.len() == 1 {
        errors[0].clone()
    } else {
        format!("[{}]", errors.join(", "))
    }
}

/// An `env` entry of a provider (upstream `ExecEnvVar`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

/// One provider as written (upstream `CredentialProvider`); checked by [`validate`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawProvider {
    #[serde(default)]
    name: String,
    #[serde(default)]
    match_images: Vec<String>,
    default_cache_duration: Option<String>,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<EnvVar>,
    /// Service-account-token mode (1.33+): decoded so the error says what is unsupported.
    token_attributes: Option<serde_json::Value>,
}

/// The file (upstream's codecs are strict: an unknown field is an error, as here).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    providers: Vec<RawProvider>,
}

/// A validated provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    pub name: String,
    pub match_images: Vec<String>,
    pub default_cache_duration: Duration,
    pub api_version: String,
    pub args: Vec<String>,
    pub env: Vec<EnvVar>,
}

/// Upstream `decode`: kind `CredentialProviderConfig` in group `kubelet.config.k8s.io`.
fn decode(text: &str) -> Result<RawConfig, String> {
    // JSON is YAML, but serde-saphyr's messages for JSON syntax errors are worse.
    let raw: RawConfig = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| format!("strict decoding error: {e}"))?
    } else {
        serde_saphyr::from_str(text).map_err(|e| format!("strict decoding error: {e}"))?
    };
    if raw.kind.is_empty() || raw.api_version.is_empty() {
        return Err("Object 'Kind' or 'apiVersion' is missing".to_string());
    }
    if raw.kind != "CredentialProviderConfig" {
        return Err(format!("failed to decode {:?} (wrong Kind)", raw.kind));
    }
    if !CONFIG_API_VERSIONS.contains(&raw.api_version.as_str()) {
        return Err(format!(
            "no kind \"CredentialProviderConfig\" is registered for version {:?}; supported: {}",
            raw.api_version,
            CONFIG_API_VERSIONS.join(", ")
        ));
    }
    Ok(raw)
}

/// Go's `url.Parse("https://" + s)` failures that matter for a match image: spaces and control
/// characters, a bad `%` escape, a port that is not a number.
fn match_image_error(s: &str) -> Option<String> {
    if let Some(c) = s.chars().find(|c| c.is_control() || *c == ' ') {
        return Some(format!("invalid character {c:?} in host name"));
    }
    let b = s.as_bytes();
    for (i, _) in s.match_indices('%') {
        let hex = |j: usize| b.get(j).is_some_and(|c| c.is_ascii_hexdigit());
        if !(hex(i + 1) && hex(i + 2)) {
            let end = (i + 3).min(s.len());
            return Some(format!("invalid URL escape {:?}", &s[i..end]));
        }
    }
    let host = s.split('/').next().unwrap_or("");
    if !host.starts_with('[') {
        if let Some((_, port)) = host.rsplit_once(':') {
            if !port.bytes().all(|c| c.is_ascii_digit()) {
                return Some(format!("invalid port \":{port}\" after host"));
            }
        }
    }
    None
}

/// A Go duration that may be negative, as `metav1.Duration` decodes one.
fn signed_duration(s: &str) -> Result<(bool, Duration), String> {
    match s.trim().strip_prefix('-') {
        Some(rest) => kubelet_config::config::parse_duration(rest).map(|d| (d > Duration::ZERO, d)),
        None => kubelet_config::config::parse_duration(s).map(|d| (false, d)),
    }
}

/// Upstream `validateCredentialProviderConfig`, with the provider's index in each field path
/// (upstream writes `providers.name`, which does not say which provider).
fn validate(raw: &RawConfig) -> (Vec<ProviderConfig>, Vec<String>) {
    let mut errs = Vec::new();
    let mut out = Vec::new();
    if raw.providers.is_empty() {
        errs.push("providers: Required value: at least 1 item in plugins is required".to_string());
    }
    let mut seen = BTreeSet::new();
    for (i, p) in raw.providers.iter().enumerate() {
        let at = |f: &str| format!("providers[{i}].{f}");
        let n = &p.name;
        let name_err = |why: &str| format!("{}: Invalid value: {n:?}: {why}", at("name"));
        if n.is_empty() {
            errs.push(format!("{}: Required value", at("name")));
        }
        if n.contains('/') {
            errs.push(name_err("provider name cannot contain '/'"));
        }
        if n.contains(' ') {
            errs.push(name_err("provider name cannot contain spaces"));
        }
        if n == "." || n == ".." {
            errs.push(name_err(&format!("provider name cannot be '{n}'")));
        }
        if !seen.insert(n.clone()) {
            errs.push(format!("{}: Duplicate value: {n:?}", at("name")));
        }
        if p.api_version.is_empty() {
            errs.push(format!("{}: Required value", at("apiVersion")));
        } else if !PLUGIN_API_VERSIONS.contains(&p.api_version.as_str()) {
            errs.push(format!(
                "{}: Unsupported value: {:?}: supported values: {}",
                at("apiVersion"),
                p.api_version,
                PLUGIN_API_VERSIONS.map(|v| format!("{v:?}")).join(", ")
            ));
        }
        if p.match_images.is_empty() {
            errs.push(format!(
                "{}: Required value: at least 1 item in matchImages is required",
                at("matchImages")
            ));
        }
        for m in &p.match_images {
            if let Some(why) = match_image_error(m) {
                errs.push(format!(
                    "{}: Invalid value: {m:?}: match image is invalid: {why}",
                    at("matchImages")
                ));
            }
        }
        let cache = match p.default_cache_duration.as_deref() {
            None => {
                errs.push(format!("{}: Required value", at("defaultCacheDuration")));
                Duration::ZERO
            }
            Some(s) => match signed_duration(s) {
                Ok((false, d)) => d,
                Ok((true, _)) => {
                    errs.push(format!(
                        "{}: Invalid value: {s:?}: defaultCacheDuration must be greater than or equal to 0",
                        at("defaultCacheDuration")
                    ));
                    Duration::ZERO
                }
                Err(e) => {
                    errs.push(format!(
                        "{}: Invalid value: {s:?}: {e}",
                        at("defaultCacheDuration")
                    ));
                    Duration::ZERO
                }
            },
        };
        if p.token_attributes.is_some() {
            errs.push(format!(
                "{}: Forbidden: service account token mode (KubeletServiceAccountTokenForCredentialProviders) is not supported by rkubelet",
                at("tokenAttributes")
            ));
        }
        out.push(ProviderConfig {
            name: p.name.clone(),
            match_images: p.match_images.clone(),
            default_cache_duration: cache,
            api_version: p.api_version.clone(),
            args: p.args.clone(),
            env: p.env.clone(),
        });
    }
    (out, errs)
}

/// Decodes and validates one file's text (the pure half of [`read`]).
pub fn parse(path: &Path, text: &str) -> Result<Vec<ProviderConfig>, ConfigError> {
    let raw = decode(text).map_err(|message| ConfigError::Decode {
        path: path.to_path_buf(),
        message,
    })?;
    let (providers, errors) = validate(&raw);
    if errors.is_empty() {
        Ok(providers)
    } else {
        Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            errors,
        })
    }
}

/// Upstream `readCredentialProviderConfig` + validation: a file, or a directory whose
/// `*.json`/`*.yaml`/`*.yml` files are merged in lexical order (provider names unique across
/// them).
pub fn read(path: &Path) -> Result<Vec<ProviderConfig>, ConfigError> {
    if path.as_os_str().is_empty() {
        return Err(ConfigError::EmptyPath);
    }
    let access = |source| ConfigError::Access {
        path: path.to_path_buf(),
        source,
    };
    let files = if std::fs::metadata(path).map_err(access)?.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(access)?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
            .map(|e| e.path())
            .filter(|p| {
                p.extension()
                    .and_then(|x| x.to_str())
                    .is_some_and(|x| matches!(x, "json" | "yaml" | "yml"))
            })
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(ConfigError::EmptyDir(path.to_path_buf()));
        }
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut all: Vec<ProviderConfig> = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|source| ConfigError::Access {
            path: f.clone(),
            source,
        })?;
        for p in parse(&f, &text)? {
            if all.iter().any(|q| q.name == p.name) {
                return Err(ConfigError::Duplicate {
                    name: p.name,
                    path: f,
                });
            }
            all.push(p);
        }
    }
    Ok(all)
}

/// Upstream `RegisterCredentialProviderPlugins`' first check: the bin dir exists.
pub fn check_bin_dir(bin_dir: &Path) -> Result<(), ConfigError> {
    if bin_dir.as_os_str().is_empty() {
        return Err(ConfigError::NoBinDir(bin_dir.to_path_buf()));
    }
    match std::fs::metadata(bin_dir) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(ConfigError::NoBinDir(bin_dir.to_path_buf()))
        }
        Err(source) => Err(ConfigError::BinDir {
            path: bin_dir.to_path_buf(),
            source,
        }),
    }
}

/// Upstream's check of each provider's executable, `<bin-dir>/<name>`, made at start.
pub fn check_binaries(bin_dir: &Path, providers: &[ProviderConfig]) -> Result<(), ConfigError> {
    for p in providers {
        let bin = bin_dir.join(&p.name);
        if !bin.is_file() {
            return Err(ConfigError::NoBinary(bin));
        }
    }
    Ok(())
}
