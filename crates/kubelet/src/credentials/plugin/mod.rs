//! Image credential provider plugins (upstream `pkg/credentialprovider/plugin`):
//! `--image-credential-provider-config` names the providers, `--image-credential-provider-bin-dir`
//! holds their executables. For an image one of a provider's `matchImages` matches, the kubelet
//! runs `<bin-dir>/<name> args...` with a `CredentialProviderRequest` on stdin and reads a
//! `CredentialProviderResponse` from stdout: registry-glob keyed credentials, cached by image,
//! registry or globally for `cacheDuration` (else the provider's `defaultCacheDuration`).
//!
//! Why no crate: none we could find implements the kubelet side of this protocol (what exists
//! is Go, and plugins, the other side); the protocol is three small JSON types and one exec.
//!
//! A plugin that fails (exit status, timeout after a minute, bad output) yields no credentials for
//! that pull, logged with the plugin and image, as upstream: the pull goes on with the other
//! credentials (pull secrets, other plugins) or anonymously, and other pulls are untouched.

pub mod config;
mod response;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tracing::{debug, error};

pub use config::{ConfigError, EnvVar, ProviderConfig};
pub use response::{parse_response, CacheKeyType, PluginError, Response};

use super::{url_matches, Credential, Keyring};

/// Upstream's `globalCacheKey`.
const GLOBAL_CACHE_KEY: &str = "global";
/// Upstream `cachePurgeInterval`: expired entries nobody asks for again are dropped this often.
const CACHE_PURGE_INTERVAL: Duration = Duration::from_secs(15 * 60);
/// Upstream's catch-all exec timeout for every plugin.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(60);

/// Upstream `parseRegistry`: the image's first path segment (host and port).
pub fn registry_of(image: &str) -> &str {
    image.split('/').next().unwrap_or(image)
}

/// A registry-glob → credential list, as a plugin's `auth` map gives it.
pub type Auth = Vec<(String, Credential)>;

/// Upstream's expiration store: entries keyed by image, registry or [`GLOBAL_CACHE_KEY`].
/// Pure (the caller passes `now`) so expiry and the lookup order are table tested.
#[derive(Debug, Default)]
pub struct Cache {
    entries: HashMap<String, (Auth, Instant)>,
    last_purge: Option<Instant>,
}

impl Cache {
    /// Upstream `getCachedCredentials`: the image's entry, else its registry's, else the global
    /// one; an entry is expired once `now` is after its expiry.
    pub fn get(&mut self, image: &str, now: Instant) -> Option<Auth> {
        match self.last_purge {
            Some(t) if now.saturating_duration_since(t) <= CACHE_PURGE_INTERVAL => {}
            _ => {
                self.entries.retain(|_, (_, exp)| now <= *exp);
                self.last_purge = Some(now);
            }
        }
        for key in [image, registry_of(image), GLOBAL_CACHE_KEY] {
            match self.entries.get(key) {
                Some((auth, exp)) if now <= *exp => return Some(auth.clone()),
                Some(_) => {
                    self.entries.remove(key);
                }
                None => {}
            }
        }
        None
    }

    pub fn put(&mut self, key: String, auth: Auth, expires_at: Instant) {
        self.entries.insert(key, (auth, expires_at));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Where a response is cached (upstream's switch on `cacheKeyType`).
pub fn cache_key(kind: CacheKeyType, image: &str) -> String {
    match kind {
        CacheKeyType::Image => image.to_string(),
        CacheKeyType::Registry => registry_of(image).to_string(),
        CacheKeyType::Global => GLOBAL_CACHE_KEY.to_string(),
    }
}

/// Until when a response is cached, `None` for not at all: an explicit `cacheDuration` of 0
/// (or less) is never cached, an absent one takes the provider's default (0: not cached).
pub fn expiry(response: Option<Duration>, default: Duration, now: Instant) -> Option<Instant> {
    let d = response.unwrap_or(default);
    if d.is_zero() {
        None
    } else {
        now.checked_add(d)
    }
}

/// One configured provider (upstream `pluginProvider` + `execPlugin`).
pub struct Plugin {
    cfg: ProviderConfig,
    bin: PathBuf,
    timeout: Duration,
    cache: Mutex<Cache>,
    /// One exec at a time per image (upstream's singleflight): concurrent pulls of one image
    /// wait for the first and then find its answer in the cache.
    flights: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Plugin {
    pub fn new(bin_dir: &Path, cfg: ProviderConfig) -> Plugin {
        Plugin {
            bin: bin_dir.join(&cfg.name),
            cfg,
            timeout: EXEC_TIMEOUT,
            cache: Mutex::default(),
            flights: Mutex::default(),
        }
    }

    /// A shorter exec timeout, for tests.
    pub fn with_timeout(mut self, timeout: Duration) -> Plugin {
        self.timeout = timeout;
        self
    }

    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// Upstream `isImageAllowed`: one of `matchImages` matches as a registry key would (globs per
    /// host label, same label count, same port, path prefix).
    pub fn matches(&self, image: &str) -> bool {
        self.cfg.match_images.iter().any(|m| url_matches(m, image))
    }

    fn cached(&self, image: &str) -> Option<Auth> {
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(image, Instant::now())
    }

    /// Upstream `provide`: the cached answer, else one exec; nothing on any failure (logged).
    pub async fn provide(&self, image: &str) -> Auth {
        if !self.matches(image) {
            return Vec::new();
        }
        if let Some(a) = self.cached(image) {
            return a;
        }
        let flight = self
            .flights
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(image.to_string())
            .or_default()
            .clone();
        let one = flight.lock().await;
        let auth = match self.cached(image) {
            Some(a) => a,
            None => self.exec_and_cache(image).await,
        };
        drop(one);
        // The last one out removes the image's entry, so the map holds only pulls in flight.
        let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::strong_count(&flight) <= 2 {
            flights.remove(image);
        }
        auth
    }

    /// One exec and, by the response's cache settings, its answer cached.
    async fn exec_and_cache(&self, image: &str) -> Auth {
        let started = Instant::now();
        let res = self.exec(image).await;
        let m = crate::metrics::get();
        m.credential_provider_plugin_duration
            .with_label_values(&[self.name()])
            .observe(started.elapsed().as_secs_f64());
        let resp = match res {
            Ok(r) => r,
            Err(e) => {
                if matches!(e, PluginError::Exec { .. }) {
                    m.credential_provider_plugin_errors
                        .with_label_values(&[self.name()])
                        .inc();
                }
                error!(plugin = %self.name(), %image,
                    "Failed getting credential from external registry credential provider: {e}");
                return Vec::new();
            }
        };
        let now = Instant::now();
        if let Some(exp) = expiry(resp.cache_duration, self.cfg.default_cache_duration, now) {
            self.cache.lock().unwrap_or_else(|e| e.into_inner()).put(
                cache_key(resp.cache_key_type, image),
                resp.auth.clone(),
                exp,
            );
        }
        resp.auth
    }

    /// Upstream `ExecPlugin`: `<bin> args...` with the kubelet's environment plus the provider's
    /// `env`, the request on stdin, the response from stdout, stderr in the error.
    pub async fn exec(&self, image: &str) -> Result<Response, PluginError> {
        debug!(plugin = %self.name(), %image, "getting image credentials from external exec plugin");
        let request = response::request(&self.cfg.api_version, image);
        let exec_err = |reason: String, stderr: &[u8]| PluginError::Exec {
            plugin: self.cfg.name.clone(),
            image: image.to_string(),
            reason,
            stderr: String::from_utf8_lossy(stderr).trim_end().to_string(),
        };
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.args(&self.cfg.args)
            .envs(self.cfg.env.iter().map(|e| (&e.name, &e.value)))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| exec_err(e.to_string(), b""))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A plugin that exits without reading its stdin is not an error in itself.
            let _ = stdin.write_all(&request).await;
        }
        let out = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Err(_) => {
                return Err(exec_err(
                    format!("context deadline exceeded (after {:?})", self.timeout),
                    b"",
                ))
            }
            Ok(Err(e)) => return Err(exec_err(e.to_string(), b"")),
            Ok(Ok(out)) => out,
        };
        if !out.status.success() {
            use std::os::unix::process::ExitStatusExt;
            let reason = match (out.status.code(), out.status.signal()) {
                (Some(c), _) => format!("exit status {c}"),
                (None, Some(s)) => format!("signal: {s}"),
                _ => out.status.to_string(),
            };
            return Err(exec_err(reason, &out.stderr));
        }
        parse_response(&self.cfg.api_version, &out.stdout)
    }
}

/// The plugins of `--image-credential-provider-config`, in the config's order (upstream: "if
/// providers return overlapping auth keys, the value from the provider earlier in this list is
/// attempted first"): the node's default keyring, which the pod's pull secrets come before
/// (upstream `UnionDockerKeyring{secrets, default}`).
#[derive(Clone, Default)]
pub struct Providers {
    plugins: Vec<Arc<Plugin>>,
}

impl Providers {
    /// Upstream `RegisterCredentialProviderPlugins`: the bin dir, the config (validated) and each
    /// provider's executable are checked now, so a bad setup stops the kubelet at start.
    pub fn load(config: &Path, bin_dir: &Path) -> Result<Providers, ConfigError> {
        config::check_bin_dir(bin_dir)?;
        let cfgs = config::read(config)?;
        config::check_binaries(bin_dir, &cfgs)?;
        Ok(Self::from_plugins(
            cfgs.into_iter().map(|c| Plugin::new(bin_dir, c)).collect(),
        ))
    }

    pub fn from_plugins(plugins: Vec<Plugin>) -> Providers {
        Providers {
            plugins: plugins.into_iter().map(Arc::new).collect(),
        }
    }

    pub fn names(&self) -> Vec<&str> {
        self.plugins.iter().map(|p| p.name()).collect()
    }

    /// Every plugin's entries for `repo` (the image's normalized repository), in config order.
    pub async fn provide(&self, repo: &str) -> Auth {
        let mut out = Vec::new();
        for p in &self.plugins {
            out.extend(p.provide(repo).await);
        }
        out
    }

    /// Upstream `providersDockerKeyring.Lookup` over the plugins alone: their entries in one
    /// keyring, then that keyring's lookup of `repo` ([`super::node_keyring::NodeKeyring`] adds
    /// the node's docker config file).
    pub async fn lookup(&self, repo: &str) -> Vec<Credential> {
        let mut keyring = Keyring::default();
        for (key, cred) in self.provide(repo).await {
            keyring.add(&key, cred);
        }
        keyring.lookup(repo)
    }
}
