//! The node's default keyring (upstream `credentialprovider.NewDockerKeyring` and its
//! registered providers): the docker config file on the node (upstream
//! `defaultDockerConfigProvider` behind a 5-minute `CachingDockerConfigProvider`) and the image
//! credential provider plugins. The pod's pull secrets come before it (upstream
//! `MakeDockerKeyring(pullSecrets, defaultKeyring)`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::debug;

use super::plugin::{Auth, Providers};
use super::{docker_config_entries, Credential, Keyring};

/// Upstream `CachingDockerConfigProvider.Lifetime` for the docker config file.
const FILE_CACHE: Duration = Duration::from_secs(5 * 60);

/// Where upstream looks for docker config files, first found wins: `config.json` in the root
/// dir (`SetPreferredDockercfgPath(rootDirectory)`), the working directory, `$HOME/.docker`,
/// `/.docker`; else the legacy `.dockercfg` in the root dir, the working directory, `$HOME`, `/`.
pub fn search_paths(root_dir: &Path, cwd: &Path, home: &Path) -> Vec<(PathBuf, bool)> {
    let json = [root_dir, cwd, &home.join(".docker"), Path::new("/.docker")]
        .map(|d| (d.join("config.json"), true));
    let cfg = [root_dir, cwd, home, Path::new("/")].map(|d| (d.join(".dockercfg"), false));
    json.into_iter().chain(cfg).collect()
}

/// Upstream `ReadDockerConfigFile`: the entries of the first file in `paths` that exists and
/// parses (an unreadable or broken one is logged and skipped, as upstream); empty if none.
pub fn read_first(paths: &[(PathBuf, bool)]) -> Auth {
    for (path, config_json) in paths {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                debug!(path = %path.display(), error = %e, "cannot read docker config file");
                continue;
            }
        };
        match docker_config_entries(&path.display().to_string(), &bytes, *config_json) {
            Ok(entries) => return entries,
            Err(e) => debug!(error = %e, "skipping docker config file"),
        }
    }
    Vec::new()
}

/// The node's docker config file, re-read at most every five minutes.
struct DockerConfigFile {
    paths: Vec<(PathBuf, bool)>,
    cached: Mutex<Option<(Auth, Instant)>>,
}

impl DockerConfigFile {
    fn provide(&self) -> Auth {
        let mut c = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match &*c {
            Some((auth, expires)) if now < *expires => auth.clone(),
            _ => {
                let auth = read_first(&self.paths);
                *c = Some((auth.clone(), now + FILE_CACHE));
                auth
            }
        }
    }
}

/// The default keyring: cheap to clone, shared by every pull.
#[derive(Clone, Default)]
pub struct NodeKeyring {
    file: Option<Arc<DockerConfigFile>>,
    plugins: Providers,
}

impl NodeKeyring {
    /// The docker config file searched as upstream does for a kubelet with `root_dir`, and the
    /// plugins of `--image-credential-provider-config`.
    pub fn new(root_dir: &Path, plugins: Providers) -> NodeKeyring {
        let cwd = std::env::current_dir().unwrap_or_default();
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        NodeKeyring::with_paths(search_paths(root_dir, &cwd, &home), plugins)
    }

    pub fn with_paths(paths: Vec<(PathBuf, bool)>, plugins: Providers) -> NodeKeyring {
        NodeKeyring {
            file: Some(Arc::new(DockerConfigFile {
                paths,
                cached: Mutex::default(),
            })),
            plugins,
        }
    }

    /// Upstream `providersDockerKeyring.Lookup`: every provider's entries for `repo` in one
    /// keyring (the file's first, then the plugins' in config order), then its lookup.
    pub async fn lookup(&self, repo: &str) -> Vec<Credential> {
        let mut keyring = Keyring::default();
        if let Some(f) = &self.file {
            for (key, cred) in f.provide() {
                keyring.add(&key, cred);
            }
        }
        for (key, cred) in self.plugins.provide(repo).await {
            keyring.add(&key, cred);
        }
        keyring.lookup(repo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_order_is_upstreams() {
        let got = search_paths(
            Path::new("/var/lib/kubelet"),
            Path::new("/srv"),
            Path::new("/root"),
        );
        let got: Vec<String> = got.iter().map(|(p, _)| p.display().to_string()).collect();
        assert_eq!(
            got,
            [
                "/var/lib/kubelet/config.json",
                "/srv/config.json",
                "/root/.docker/config.json",
                "/.docker/config.json",
                "/var/lib/kubelet/.dockercfg",
                "/srv/.dockercfg",
                "/root/.dockercfg",
                "/.dockercfg",
            ]
        );
    }

    #[tokio::test]
    async fn first_valid_file_wins_and_feeds_the_keyring() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let broken = d.join("root/config.json");
        let json = d.join("home/.docker/config.json");
        let legacy = d.join("root/.dockercfg");
        std::fs::create_dir_all(broken.parent().unwrap()).unwrap();
        std::fs::create_dir_all(json.parent().unwrap()).unwrap();
        std::fs::write(&broken, "{not json").unwrap();
        std::fs::write(
            &legacy,
            r#"{"legacy.io": {"username": "old", "password": "o"}}"#,
        )
        .unwrap();
        let paths = vec![
            (broken.clone(), true),
            (d.join("missing/config.json"), true),
            (json.clone(), true),
            (legacy.clone(), false),
        ];
        // No config.json parses: the legacy file is used.
        assert_eq!(read_first(&paths)[0].0, "legacy.io");
        std::fs::write(
            &json,
            r#"{"auths": {"https://reg.io/v1/": {"auth": "dTpw"}}, "credsStore": "x"}"#,
        )
        .unwrap();
        let k = NodeKeyring::with_paths(paths, Providers::default());
        assert_eq!(
            k.lookup("reg.io/app").await,
            vec![Credential {
                username: "u".into(),
                password: "p".into(),
                ..Default::default()
            }]
        );
        assert_eq!(
            k.lookup("legacy.io/app").await,
            vec![],
            "only the first file counts"
        );
        // Read once per five minutes, as upstream's caching provider.
        std::fs::remove_file(&json).unwrap();
        assert_eq!(k.lookup("reg.io/app").await.len(), 1);
    }
}
