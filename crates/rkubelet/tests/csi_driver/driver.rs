//! `rkt-csi-hostpath`: a small host-path CSI node plugin for the tests (issue 18 item 4).
//!
//! It is a plain CSI driver plus its own registrar, as a real node plugin is deployed
//! (the driver and node-driver-registrar): the CSI Identity and Node services on `--endpoint`,
//! and the kubelet's `pluginregistration.Registration` service on `--registration` (a socket in
//! the kubelet's `plugins_registry`). Nothing in it knows about rkubelet, so it behaves the same
//! under the upstream kubelet.
//!
//! Volumes are directories `<--state-dir>/<volume_id>`. With `--stage`, the driver advertises
//! `STAGE_UNSTAGE_VOLUME`: `NodeStageVolume` bind-mounts the volume onto the staging path (which
//! the CO must have created), and `NodePublishVolume` bind-mounts the staging path onto the
//! target (refusing with FailedPrecondition when the volume is not staged there). Without it,
//! publish bind-mounts the volume directly and the stage calls answer `Unimplemented`, as the
//! spec asks. The target is created by the driver, its parent must exist (the CO's part).
//! An ephemeral inline volume (`csi.storage.k8s.io/ephemeral: "true"` in the volume context) is
//! a fresh directory made on publish and deleted on unpublish. `NodeGetVolumeStats` reports the
//! file system of the published path (statvfs).
//!
//! Every call is logged to stderr with its arguments (the volume context as JSON, the secrets'
//! keys only), which the tests read. A file `<--state-dir>/.fail-publish` makes
//! `NodePublishVolume` fail with `Internal` and the file's content as message, until it is
//! removed. On SIGTERM/SIGINT it removes both sockets, which deregisters it from the kubelet.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use csi_proto::csi::v1 as csi;
use csi_proto::pluginregistration as reg;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use tokio::net::UnixListener;
use tonic::{Request, Response, Status};

#[derive(Clone)]
struct Opts {
    name: String,
    endpoint: PathBuf,
    registration: PathBuf,
    node_id: String,
    state_dir: PathBuf,
    max_volumes: i64,
    topology: HashMap<String, String>,
    stage: bool,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        name: "hostpath.csi.rkubelet.test".into(),
        endpoint: PathBuf::new(),
        registration: PathBuf::new(),
        node_id: String::new(),
        state_dir: PathBuf::new(),
        max_volumes: 0,
        topology: HashMap::new(),
        stage: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--stage" {
            o.stage = true;
            continue;
        }
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--driver-name" => o.name = value,
            "--endpoint" => o.endpoint = value.into(),
            "--registration" => o.registration = value.into(),
            "--node-id" => o.node_id = value,
            "--state-dir" => o.state_dir = value.into(),
            "--max-volumes" => o.max_volumes = value.parse().map_err(|e| format!("{flag}: {e}"))?,
            "--topology" => {
                let (k, v) = value
                    .split_once('=')
                    .ok_or(format!("{flag}: want key=value"))?;
                o.topology.insert(k.into(), v.into());
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    for (what, empty) in [
        ("--endpoint", o.endpoint.as_os_str().is_empty()),
        ("--registration", o.registration.as_os_str().is_empty()),
        ("--node-id", o.node_id.is_empty()),
        ("--state-dir", o.state_dir.as_os_str().is_empty()),
    ] {
        if empty {
            return Err(format!("{what} is required"));
        }
    }
    Ok(o)
}

struct Identity(Opts);

#[tonic::async_trait]
impl csi::identity_server::Identity for Identity {
    async fn get_plugin_info(
        &self,
        _: Request<csi::GetPluginInfoRequest>,
    ) -> Result<Response<csi::GetPluginInfoResponse>, Status> {
        Ok(Response::new(csi::GetPluginInfoResponse {
            name: self.0.name.clone(),
            vendor_version: env!("CARGO_PKG_VERSION").into(),
            manifest: HashMap::new(),
        }))
    }
    async fn get_plugin_capabilities(
        &self,
        _: Request<csi::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<csi::GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(csi::GetPluginCapabilitiesResponse::default()))
    }
    async fn probe(
        &self,
        _: Request<csi::ProbeRequest>,
    ) -> Result<Response<csi::ProbeResponse>, Status> {
        Ok(Response::new(csi::ProbeResponse { ready: Some(true) }))
    }
}

struct Node(Opts);

fn is_mount_point(path: &Path) -> bool {
    let want = path.to_string_lossy();
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| t.lines().any(|l| l.split(' ').nth(4) == Some(&want)))
        .unwrap_or(false)
}

fn internal(what: &str, e: impl std::fmt::Display) -> Status {
    Status::internal(format!("{what}: {e}"))
}

fn valid_id(id: &str) -> Result<(), Status> {
    if id.is_empty() || id.contains('/') || id.starts_with('.') {
        return Err(Status::invalid_argument(format!(
            "invalid volume_id {id:?}"
        )));
    }
    Ok(())
}

fn bind(source: &Path, target: &Path, read_only: bool) -> Result<(), Status> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| internal("bind mount", e))?;
    if read_only {
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
        if let Err(e) = mount(None::<&str>, target, None::<&str>, flags, None::<&str>) {
            let _ = umount2(target, MntFlags::empty());
            return Err(internal("read-only remount", e));
        }
    }
    Ok(())
}

fn sorted<V: std::fmt::Debug>(m: &HashMap<String, V>) -> std::collections::BTreeMap<&str, &V> {
    m.iter().map(|(k, v)| (k.as_str(), v)).collect()
}

fn rpc_cap(t: csi::node_service_capability::rpc::Type) -> csi::NodeServiceCapability {
    csi::NodeServiceCapability {
        r#type: Some(csi::node_service_capability::Type::Rpc(
            csi::node_service_capability::Rpc { r#type: t as i32 },
        )),
    }
}

#[tonic::async_trait]
impl csi::node_server::Node for Node {
    async fn node_stage_volume(
        &self,
        req: Request<csi::NodeStageVolumeRequest>,
    ) -> Result<Response<csi::NodeStageVolumeResponse>, Status> {
        if !self.0.stage {
            return Err(Status::unimplemented("STAGE_UNSTAGE_VOLUME not supported"));
        }
        let r = req.into_inner();
        valid_id(&r.volume_id)?;
        if r.volume_capability.is_none() {
            return Err(Status::invalid_argument("volume_capability missing"));
        }
        let staging = PathBuf::from(&r.staging_target_path);
        if r.staging_target_path.is_empty() || !staging.is_dir() {
            return Err(Status::invalid_argument(format!(
                "staging_target_path {:?} is not a directory the CO created",
                r.staging_target_path
            )));
        }
        eprintln!(
            "NodeStageVolume volume_id={} staging={} context={} publish_context={} secrets={:?}",
            r.volume_id,
            r.staging_target_path,
            serde_json::to_string(&sorted(&r.volume_context)).unwrap_or_default(),
            serde_json::to_string(&sorted(&r.publish_context)).unwrap_or_default(),
            sorted(&r.secrets).keys().collect::<Vec<_>>(),
        );
        if is_mount_point(&staging) {
            return Ok(Response::new(csi::NodeStageVolumeResponse {}));
        }
        let source = self.0.state_dir.join(&r.volume_id);
        std::fs::create_dir_all(&source).map_err(|e| internal("create volume", e))?;
        bind(&source, &staging, false)?;
        Ok(Response::new(csi::NodeStageVolumeResponse {}))
    }
    async fn node_unstage_volume(
        &self,
        req: Request<csi::NodeUnstageVolumeRequest>,
    ) -> Result<Response<csi::NodeUnstageVolumeResponse>, Status> {
        if !self.0.stage {
            return Err(Status::unimplemented("STAGE_UNSTAGE_VOLUME not supported"));
        }
        let r = req.into_inner();
        valid_id(&r.volume_id)?;
        let staging = PathBuf::from(&r.staging_target_path);
        eprintln!(
            "NodeUnstageVolume volume_id={} staging={}",
            r.volume_id, r.staging_target_path
        );
        if is_mount_point(&staging) {
            umount2(&staging, MntFlags::empty()).map_err(|e| internal("unmount", e))?;
        }
        Ok(Response::new(csi::NodeUnstageVolumeResponse {}))
    }
    async fn node_publish_volume(
        &self,
        req: Request<csi::NodePublishVolumeRequest>,
    ) -> Result<Response<csi::NodePublishVolumeResponse>, Status> {
        let r = req.into_inner();
        valid_id(&r.volume_id)?;
        if r.target_path.is_empty() {
            return Err(Status::invalid_argument("target_path missing"));
        }
        if r.volume_capability.is_none() {
            return Err(Status::invalid_argument("volume_capability missing"));
        }
        eprintln!(
            "NodePublishVolume volume_id={} target={} staging={} readonly={} context={} publish_context={} secrets={:?}",
            r.volume_id,
            r.target_path,
            r.staging_target_path,
            r.readonly,
            serde_json::to_string(&sorted(&r.volume_context)).unwrap_or_default(),
            serde_json::to_string(&sorted(&r.publish_context)).unwrap_or_default(),
            sorted(&r.secrets).keys().collect::<Vec<_>>(),
        );
        if let Ok(msg) = std::fs::read_to_string(self.0.state_dir.join(".fail-publish")) {
            return Err(Status::internal(msg.trim().to_string()));
        }
        let target = PathBuf::from(&r.target_path);
        let ephemeral = r
            .volume_context
            .get("csi.storage.k8s.io/ephemeral")
            .is_some_and(|v| v == "true");
        let source = if self.0.stage && !ephemeral {
            let staging = PathBuf::from(&r.staging_target_path);
            if r.staging_target_path.is_empty() || !is_mount_point(&staging) {
                return Err(Status::failed_precondition(format!(
                    "volume {} is not staged at {:?}",
                    r.volume_id, r.staging_target_path
                )));
            }
            staging
        } else {
            let source = self.0.state_dir.join(&r.volume_id);
            std::fs::create_dir_all(&source).map_err(|e| internal("create volume", e))?;
            if ephemeral {
                let marker = self.0.state_dir.join(format!(".ephemeral-{}", r.volume_id));
                std::fs::write(marker, "").map_err(|e| internal("mark ephemeral volume", e))?;
            }
            source
        };
        // The CO creates the parent; the target is the plugin's to create.
        match std::fs::create_dir(&target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(internal("create target", e)),
        }
        if is_mount_point(&target) {
            return Ok(Response::new(csi::NodePublishVolumeResponse {}));
        }
        bind(&source, &target, r.readonly)?;
        Ok(Response::new(csi::NodePublishVolumeResponse {}))
    }
    async fn node_unpublish_volume(
        &self,
        req: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<csi::NodeUnpublishVolumeResponse>, Status> {
        let r = req.into_inner();
        valid_id(&r.volume_id)?;
        let target = PathBuf::from(&r.target_path);
        eprintln!(
            "NodeUnpublishVolume volume_id={} target={}",
            r.volume_id, r.target_path
        );
        if is_mount_point(&target) {
            umount2(&target, MntFlags::empty()).map_err(|e| internal("unmount", e))?;
        }
        match std::fs::remove_dir(&target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(internal("remove target", e)),
        }
        // An inline ephemeral volume lives as long as its one publish.
        let marker = self.0.state_dir.join(format!(".ephemeral-{}", r.volume_id));
        if marker.exists() {
            let _ = std::fs::remove_dir_all(self.0.state_dir.join(&r.volume_id));
            let _ = std::fs::remove_file(marker);
        }
        Ok(Response::new(csi::NodeUnpublishVolumeResponse {}))
    }
    async fn node_get_volume_stats(
        &self,
        req: Request<csi::NodeGetVolumeStatsRequest>,
    ) -> Result<Response<csi::NodeGetVolumeStatsResponse>, Status> {
        let r = req.into_inner();
        valid_id(&r.volume_id)?;
        let path = PathBuf::from(&r.volume_path);
        if !is_mount_point(&path) {
            return Err(Status::not_found(format!(
                "volume {} is not published at {:?}",
                r.volume_id, r.volume_path
            )));
        }
        let st = nix::sys::statvfs::statvfs(&path).map_err(|e| internal("statvfs", e))?;
        let frag = st.fragment_size() as i64;
        let (total, free) = (
            st.blocks() as i64 * frag,
            st.blocks_available() as i64 * frag,
        );
        let (files, ffree) = (st.files() as i64, st.files_free() as i64);
        use csi::volume_usage::Unit;
        Ok(Response::new(csi::NodeGetVolumeStatsResponse {
            usage: vec![
                csi::VolumeUsage {
                    available: free,
                    total,
                    used: total - st.blocks_free() as i64 * frag,
                    unit: Unit::Bytes as i32,
                },
                csi::VolumeUsage {
                    available: ffree,
                    total: files,
                    used: files - ffree,
                    unit: Unit::Inodes as i32,
                },
            ],
            volume_condition: None,
        }))
    }
    async fn node_expand_volume(
        &self,
        _: Request<csi::NodeExpandVolumeRequest>,
    ) -> Result<Response<csi::NodeExpandVolumeResponse>, Status> {
        Err(Status::unimplemented("EXPAND_VOLUME not supported"))
    }
    async fn node_get_capabilities(
        &self,
        _: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        use csi::node_service_capability::rpc::Type;
        let mut capabilities = vec![rpc_cap(Type::GetVolumeStats)];
        if self.0.stage {
            capabilities.push(rpc_cap(Type::StageUnstageVolume));
        }
        Ok(Response::new(csi::NodeGetCapabilitiesResponse {
            capabilities,
        }))
    }
    async fn node_get_info(
        &self,
        _: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        Ok(Response::new(csi::NodeGetInfoResponse {
            node_id: self.0.node_id.clone(),
            max_volumes_per_node: self.0.max_volumes,
            accessible_topology: (!self.0.topology.is_empty()).then(|| csi::Topology {
                segments: self.0.topology.clone(),
            }),
        }))
    }
}

/// What node-driver-registrar serves on the kubelet's registration socket.
struct Registrar(Opts);

#[tonic::async_trait]
impl reg::registration_server::Registration for Registrar {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        eprintln!("GetInfo");
        Ok(Response::new(reg::PluginInfo {
            r#type: "CSIPlugin".into(),
            name: self.0.name.clone(),
            endpoint: self.0.endpoint.display().to_string(),
            supported_versions: vec!["1.0.0".into()],
        }))
    }
    async fn notify_registration_status(
        &self,
        req: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        let s = req.into_inner();
        eprintln!(
            "registration status: registered={} error={:?}",
            s.plugin_registered, s.error
        );
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

/// The accepted connections of a unix socket. The upstream kubelet 1.20 (grpc-go 1.27) sends the
/// socket path as `:authority`, which the h2 server under tonic refuses (hyperium/h2#487); the
/// kubelet crate's `grpc_uds` rewrites it per connection, as rkubelet's own plugin servers do.
fn listen(
    path: &Path,
) -> Result<impl tokio_stream::Stream<Item = std::io::Result<tokio::io::DuplexStream>>, String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path).map_err(|e| format!("listen on {}: {e}", path.display()))?;
    Ok(kubelet::grpc_uds::incoming(l))
}

#[tokio::main]
async fn main() {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rkt-csi-hostpath: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(opts).await {
        eprintln!("rkt-csi-hostpath: {e}");
        std::process::exit(1);
    }
}

async fn run(o: Opts) -> Result<(), String> {
    std::fs::create_dir_all(&o.state_dir).map_err(|e| format!("{}: {e}", o.state_dir.display()))?;
    // The CSI endpoint first, so it answers by the time the kubelet reads the registration.
    let csi_incoming = listen(&o.endpoint)?;
    let reg_incoming = listen(&o.registration)?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    let stop = async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    let (tx, rx) = tokio::sync::watch::channel(false);
    let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let csi_server = tonic::transport::Server::builder()
        .add_service(csi::identity_server::IdentityServer::new(Identity(
            o.clone(),
        )))
        .add_service(csi::node_server::NodeServer::new(Node(o.clone())))
        .serve_with_incoming_shutdown(csi_incoming, wait(rx.clone()));
    let reg_server = tonic::transport::Server::builder()
        .add_service(reg::registration_server::RegistrationServer::new(
            Registrar(o.clone()),
        ))
        .serve_with_incoming_shutdown(reg_incoming, wait(rx));
    eprintln!("serving {} at {}", o.name, o.endpoint.display());
    let servers = async { tokio::try_join!(csi_server, reg_server) };
    tokio::pin!(servers);
    tokio::select! {
        r = &mut servers => { r.map_err(|e| e.to_string())?; }
        _ = stop => {
            let _ = tx.send(true);
            let _ = std::fs::remove_file(&o.registration);
            servers.await.map_err(|e| e.to_string())?;
        }
    }
    let _ = std::fs::remove_file(&o.registration);
    let _ = std::fs::remove_file(&o.endpoint);
    Ok(())
}
