//! The plugin manager (upstream `pkg/kubelet/pluginmanager`): node plugins announce themselves by
//! putting a registration socket in `<root-dir>/plugins_registry`; the kubelet asks it `GetInfo`,
//! validates the plugin with the handler of its type, registers it, and answers with
//! `NotifyRegistrationStatus`. A socket that goes away (or is re-created) deregisters the plugin.
//!
//! Upstream feeds a desired state from fsnotify and runs a reconciler every second; here the one
//! task rescans the directory each second (the desired state), which also covers sockets present
//! at start (upstream's initial walk) and needs no watch bookkeeping. Failed registrations are
//! retried with upstream's exponential backoff (500 ms doubling, capped at 2 m 2 s).
//!
//! Only the `CSIPlugin` type has a handler (upstream `csi.RegistrationHandler`): it calls the
//! driver's `NodeGetInfo` and keeps the node's annotation and `CSINode` entry up to date
//! (`csi_node`). Registered drivers are published through [`CsiDrivers`], the cheap handle the
//! CSI volume plugin will look endpoints up in.

pub mod csi_node;
pub mod registration;

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use csi_proto::csi::v1::node_client::NodeClient;
use csi_proto::csi::v1::NodeGetInfoRequest;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use registration::{Registrant, CSI_PLUGIN};

/// Upstream's `plugins_registry` directory name under the root dir.
pub const REGISTRY_DIR: &str = "plugins_registry";
/// How long `NodeGetInfo` may take (upstream `csiTimeout` is 2 minutes; a node plugin answering
/// from its own state needs far less, and a stuck one must not hold up the other sockets long).
const NODE_INFO_TIMEOUT: Duration = Duration::from_secs(30);
const RESCAN: Duration = Duration::from_secs(1);
const BACKOFF_INITIAL: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_millis(122_000);

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("failed to get plugin info using RPC GetInfo at socket {}, err: {message}", socket.display())]
    GetInfo { socket: PathBuf, message: String },
    #[error("{0}")]
    Validation(String),
    #[error("error updating CSI node info: {0}")]
    Api(String),
    #[error("error during CSI NodeGetInfo call of driver {driver:?}: {message}")]
    NodeInfo { driver: String, message: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A registered CSI driver (upstream `csiDriversStore` entry).
#[derive(Debug, Clone, PartialEq)]
pub struct CsiDriver {
    /// The driver's CSI endpoint (its `PluginInfo.endpoint`, or the registration socket).
    pub endpoint: PathBuf,
    /// The highest CSI version both speak.
    pub version: (u64, u64, u64),
}

/// Read side of the registered CSI drivers (cheap to clone).
#[derive(Clone)]
pub struct CsiDrivers(watch::Receiver<BTreeMap<String, CsiDriver>>);

impl CsiDrivers {
    pub fn get(&self, name: &str) -> Option<CsiDriver> {
        self.0.borrow().get(name).cloned()
    }
}

/// A socket as found: its identity (device, inode and change time, as upstream compares the
/// socket's timestamp), so that a re-created socket registers anew.
type SocketId = (u64, u64, i64, i64);

struct Registered {
    id: SocketId,
    /// None for a plugin type without a handler (nothing to deregister).
    driver: Option<String>,
}

struct Retry {
    id: SocketId,
    delay: Duration,
    next: Instant,
}

pub struct PluginManager {
    dir: PathBuf,
    node_name: String,
    client: Option<kube::Client>,
    drivers: watch::Sender<BTreeMap<String, CsiDriver>>,
    registered: BTreeMap<PathBuf, Registered>,
    retries: BTreeMap<PathBuf, Retry>,
}

impl PluginManager {
    pub fn new(
        root_dir: &Path,
        node_name: String,
        client: Option<kube::Client>,
    ) -> (PluginManager, CsiDrivers) {
        let (tx, rx) = watch::channel(BTreeMap::new());
        let mgr = PluginManager {
            dir: root_dir.join(REGISTRY_DIR),
            node_name,
            client,
            drivers: tx,
            registered: BTreeMap::new(),
            retries: BTreeMap::new(),
        };
        (mgr, CsiDrivers(rx))
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        if let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(&self.dir)
        {
            tracing::error!(path = %self.dir.display(), err = %e, "Failed to create the plugin registry directory");
        }
        tracing::info!(path = %self.dir.display(), "Starting Kubelet Plugin Manager");
        loop {
            self.reconcile().await;
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(RESCAN) => {}
            }
        }
    }

    /// Upstream `reconciler.reconcile`: deregister what went away, register what is new.
    async fn reconcile(&mut self) {
        let mut found = BTreeMap::new();
        scan(&self.dir, &mut found);
        let gone: Vec<PathBuf> = self
            .registered
            .iter()
            .filter(|(p, r)| found.get(*p) != Some(&r.id))
            .map(|(p, _)| p.clone())
            .collect();
        for socket in gone {
            if let Some(r) = self.registered.remove(&socket) {
                self.deregister(&socket, r).await;
            }
        }
        self.retries.retain(|p, r| found.get(p) == Some(&r.id));
        let now = Instant::now();
        for (socket, id) in found {
            if self.registered.contains_key(&socket) {
                continue;
            }
            if self.retries.get(&socket).is_some_and(|r| r.next > now) {
                continue;
            }
            match self.register(&socket).await {
                Ok(driver) => {
                    self.retries.remove(&socket);
                    self.registered.insert(socket, Registered { id, driver });
                }
                Err(e) => {
                    let delay = self
                        .retries
                        .get(&socket)
                        .map_or(BACKOFF_INITIAL, |r| (r.delay * 2).min(BACKOFF_MAX));
                    tracing::error!(path = %socket.display(), err = %e, "RegisterPlugin error");
                    self.retries.insert(
                        socket,
                        Retry {
                            id,
                            delay,
                            next: Instant::now() + delay,
                        },
                    );
                }
            }
        }
    }

    /// Upstream `GenerateRegisterPluginFunc` with the CSI handler's `ValidatePlugin` and
    /// `RegisterPlugin`. Returns the CSI driver's name (None: a type without a handler).
    async fn register(&mut self, socket: &Path) -> Result<Option<String>, PluginError> {
        let mut reg = Registrant::new(socket)?;
        let info = reg.info().await?;
        if info.r#type != CSI_PLUGIN {
            let msg = format!(
                "no handler registered for plugin type: {} at socket {}",
                info.r#type,
                socket.display()
            );
            reg.notify(false, &msg).await;
            return Err(PluginError::Validation(msg));
        }
        let outcome = self.register_csi(socket, &info).await;
        match &outcome {
            Ok(()) => reg.notify(true, "").await,
            Err(e) => {
                reg.notify(false, &format!("plugin registration failed with err: {e}"))
                    .await
            }
        }
        outcome.map(|()| Some(info.name))
    }

    async fn register_csi(
        &mut self,
        socket: &Path,
        info: &csi_proto::pluginregistration::PluginInfo,
    ) -> Result<(), PluginError> {
        let name = info.name.as_str();
        tracing::info!(name, endpoint = %info.endpoint, versions = ?info.supported_versions, "Trying to validate a new CSI Driver");
        if name.is_empty() {
            return Err(PluginError::Validation(
                "validation failed for CSI Driver: driver name is empty".into(),
            ));
        }
        let version =
            registration::highest_supported_version(&info.supported_versions).map_err(|e| {
                PluginError::Validation(format!(
                    "validation failed for CSI Driver {name} at endpoint {}: {e}",
                    info.endpoint
                ))
            })?;
        let endpoint = if info.endpoint.is_empty() {
            socket.to_path_buf()
        } else {
            PathBuf::from(info.endpoint.trim_start_matches("unix://"))
        };
        tracing::info!(name, endpoint = %endpoint.display(), "Register new plugin");
        let node_info = node_get_info(name, &endpoint).await?;
        if let Some(client) = &self.client {
            csi_node::update(client, &self.node_name, name, Some(&node_info)).await?;
        }
        self.drivers.send_modify(|m| {
            m.insert(name.to_string(), CsiDriver { endpoint, version });
        });
        Ok(())
    }

    /// Upstream `DeRegisterPlugin`: the driver leaves the store, the node and the CSINode.
    async fn deregister(&mut self, socket: &Path, r: Registered) {
        let Some(name) = r.driver else {
            return;
        };
        tracing::info!(name, path = %socket.display(), "DeRegistering plugin");
        self.drivers.send_modify(|m| {
            m.remove(&name);
        });
        if let Some(client) = &self.client {
            if let Err(e) = csi_node::update(client, &self.node_name, &name, None).await {
                tracing::error!(name, err = %e, "Failed to uninstall CSI driver from the node");
            }
        }
    }
}

/// The driver's `NodeGetInfo` (upstream `nodeGetInfo` in `csi_client.go`).
async fn node_get_info(driver: &str, endpoint: &Path) -> Result<csi_node::NodeInfo, PluginError> {
    let err = |message: String| PluginError::NodeInfo {
        driver: driver.to_string(),
        message,
    };
    let mut client = NodeClient::new(registration::unix_channel(endpoint)?);
    let resp = tokio::time::timeout(
        NODE_INFO_TIMEOUT,
        client.node_get_info(NodeGetInfoRequest {}),
    )
    .await
    .map_err(|_| err("timed out".into()))?
    .map_err(|s| err(s.message().to_string()))?
    .into_inner();
    if resp.node_id.is_empty() {
        return Err(err("node ID is empty".into()));
    }
    Ok(csi_node::NodeInfo {
        node_id: resp.node_id,
        max_volumes: resp.max_volumes_per_node,
        topology: resp
            .accessible_topology
            .map(|t| t.segments.into_iter().collect())
            .unwrap_or_default(),
    })
}

/// The sockets under `dir`, recursively, skipping names starting with `.` (upstream
/// pluginwatcher's `handleCreateEvent`/`traversePluginDir`).
fn scan(dir: &Path, out: &mut BTreeMap<PathBuf, SocketId>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let path = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_dir() {
            scan(&path, out);
        } else if meta.file_type().is_socket() {
            out.insert(
                path,
                (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The desired state: sockets at any depth, not regular files, not names starting with `.`;
    /// a re-created socket has a new identity.
    #[test]
    fn scan_finds_sockets() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::create_dir_all(d.join("sub/deeper")).expect("mkdir");
        std::fs::create_dir_all(d.join(".hidden")).expect("mkdir");
        let bind = |p: &Path| std::os::unix::net::UnixListener::bind(p).expect("bind");
        let _a = bind(&d.join("a-reg.sock"));
        let _b = bind(&d.join("sub/deeper/b.sock"));
        let _h = bind(&d.join(".h.sock"));
        let _hd = bind(&d.join(".hidden/c.sock"));
        std::fs::write(d.join("file.sock"), "").expect("write");

        let mut found = BTreeMap::new();
        scan(d, &mut found);
        let names: Vec<PathBuf> = found.keys().cloned().collect();
        assert_eq!(
            names,
            vec![d.join("a-reg.sock"), d.join("sub/deeper/b.sock")]
        );

        let before = found[&d.join("a-reg.sock")];
        drop(_a);
        std::fs::remove_file(d.join("a-reg.sock")).expect("rm");
        // The inode number may be reused; the change time (coarse: one clock tick) tells apart.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let _a2 = bind(&d.join("a-reg.sock"));
        let mut again = BTreeMap::new();
        scan(d, &mut again);
        assert_ne!(again[&d.join("a-reg.sock")], before);

        let mut none = BTreeMap::new();
        scan(&d.join("missing"), &mut none);
        assert!(none.is_empty());
    }
}
