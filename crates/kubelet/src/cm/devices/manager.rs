//! The device manager's task (upstream `ManagerImpl`): it alone owns the [`State`] and the
//! plugins' clients; commands arrive from [`super::DeviceHandle`]s and plugin events from
//! [`super::plugins`]. The RPCs a command needs (`GetPreferredAllocation`, `Allocate`,
//! `PreStartContainer`) run inside the command, as upstream holds its state across them, each
//! bounded by a timeout so a stuck plugin cannot stall the node.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::net::UnixListener;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tracing::{debug, info, warn};

use super::api::{self, device_plugin_client::DevicePluginClient};
use super::checkpoint;
use super::hints::{limit, limit_names, Plan};
use super::plugins::{self, Event};
use super::state::{self, Allocation, Need, State};
use super::{AssignedDevices, Command, ContainerDevices, DeviceError};
use crate::cm::topology::{BitMask, ProviderHints};
use crate::podutil;

/// Bound on `Allocate` and `GetPreferredAllocation` (upstream has none; a plugin that never
/// answers would otherwise hold admission forever).
const RPC_TIMEOUT: Duration = Duration::from_secs(30);

struct Plugin {
    generation: u64,
    client: Option<DevicePluginClient<Channel>>,
    options: api::DevicePluginOptions,
    stream: Option<AbortHandle>,
}

pub struct Manager {
    dir: PathBuf,
    state: State,
    tx: mpsc::Sender<Command>,
    plugins: BTreeMap<String, Plugin>,
    /// The generation of the newest registration per resource, dialed or not.
    pending: BTreeMap<String, u64>,
    generation: u64,
    tasks: JoinSet<()>,
    /// The devices the init containers of the pod being admitted left for the containers
    /// after them (upstream `devicesToReuse`, kept for one pod at a time).
    reuse: (String, BTreeMap<String, BTreeSet<String>>),
}

fn rpc_error(
    what: &'static str,
    r: Result<Result<tonic::Response<impl Sized>, tonic::Status>, tokio::time::error::Elapsed>,
) -> Result<(), DeviceError> {
    match r {
        Err(_) => Err(DeviceError::Rpc {
            what,
            message: format!("timed out after {RPC_TIMEOUT:?}"),
        }),
        Ok(Err(s)) if what == "Allocate" => Err(DeviceError::AllocateRpc(format!(
            "rpc error: code = {:?} desc = {}",
            s.code(),
            s.message()
        ))),
        Ok(Err(s)) => Err(DeviceError::Rpc {
            what,
            message: format!("rpc error: code = {:?} desc = {}", s.code(), s.message()),
        }),
        Ok(Ok(_)) => Ok(()),
    }
}

impl Manager {
    /// Reads the checkpoint (upstream `readCheckpoint`); a missing one is a first start, a bad
    /// one is logged and the manager starts empty, as upstream continues.
    pub async fn new(dir: PathBuf, tx: mpsc::Sender<Command>) -> Self {
        let path = dir.join(checkpoint::FILE_NAME);
        let state = match tokio::fs::read(&path).await {
            Ok(bytes) => match checkpoint::decode(&bytes) {
                Ok(data) => {
                    let (st, skipped) = State::from_checkpoint(data, Instant::now());
                    for s in skipped {
                        warn!(entry = %s, "can't unmarshal allocResp of a checkpoint entry");
                    }
                    info!(pods = st.pods.len(), "read the device manager checkpoint");
                    st
                }
                Err(e) => {
                    warn!(path = %path.display(), error = %e, "continue after failing to read checkpoint file. Device allocation info may NOT be up-to-date");
                    State::default()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => {
                warn!(path = %path.display(), error = %e, "continue after failing to read checkpoint file. Device allocation info may NOT be up-to-date");
                State::default()
            }
        };
        Manager {
            dir,
            state,
            tx,
            plugins: BTreeMap::new(),
            pending: BTreeMap::new(),
            generation: 0,
            tasks: JoinSet::new(),
            reuse: Default::default(),
        }
    }

    pub async fn run(
        mut self,
        mut rx: mpsc::Receiver<Command>,
        listener: UnixListener,
        cancel: CancellationToken,
    ) {
        let svc = api::registration_server::RegistrationServer::new(plugins::Registration {
            tx: self.tx.clone(),
        });
        let incoming = crate::grpc_uds::incoming(listener);
        let stop = cancel.clone();
        self.tasks.spawn(async move {
            if let Err(e) = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
                .await
            {
                warn!(error = %e, "device plugin registration server failed");
            }
        });
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                Some(cmd) = rx.recv() => self.handle(cmd).await,
                Some(_) = self.tasks.join_next(), if !self.tasks.is_empty() => {}
            }
        }
        self.tasks.shutdown().await;
    }

    async fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Allocate {
                pod,
                active,
                only,
                affinity,
                reply,
            } => {
                let r = self.allocate_pod(&pod, active, only, &affinity).await;
                let _ = reply.send(r);
            }
            Command::Hints {
                pod,
                container,
                active,
                numa_nodes,
                reply,
            } => {
                let _ = reply.send(self.hints(&pod, container, active, &numa_nodes));
            }
            Command::AllocatedCounts { reply } => {
                let counts = self
                    .state
                    .allocated
                    .iter()
                    .map(|(r, ids)| (r.clone(), ids.len() as i64))
                    .collect();
                let _ = reply.send(counts);
            }
            Command::Release { uid } => {
                let mut active: HashSet<String> = self.state.pods.keys().cloned().collect();
                active.remove(&uid);
                if self.state.remove_inactive(&active) {
                    info!(pod_uid = %uid, "devices of a pod not admitted went back to the pool");
                    self.write_checkpoint().await.ok();
                }
                if self.reuse.0 == uid {
                    self.reuse = Default::default();
                }
            }
            Command::RunOptions {
                pod,
                container,
                reply,
            } => {
                let _ = reply.send(self.run_options(&pod, &container).await);
            }
            Command::Capacity { reply } => {
                let cap = self.state.capacity(Instant::now());
                if !cap.deleted.is_empty() {
                    info!(resources = ?cap.deleted, "device plugin resources removed after their plugin's grace period");
                    self.write_checkpoint().await.ok();
                }
                let _ = reply.send(cap);
            }
            Command::Assigned { reply } => {
                let _ = reply.send(self.assigned());
            }
            Command::Allocatable { reply } => {
                let _ = reply.send(self.state.allocatable_devices());
            }
            Command::Plugin(ev) => self.plugin_event(ev).await,
        }
    }

    async fn plugin_event(&mut self, ev: Event) {
        match ev {
            Event::Register(r) => {
                self.generation += 1;
                let generation = self.generation;
                self.pending.insert(r.resource_name.clone(), generation);
                let socket = self.dir.join(&r.endpoint);
                let tx = self.tx.clone();
                self.tasks.spawn(async move {
                    let resource = r.resource_name.clone();
                    let ev = match plugins::dial(socket).await {
                        Ok(client) => Event::Connected {
                            resource,
                            generation,
                            client,
                            options: r.options.unwrap_or_default(),
                        },
                        Err(error) => Event::DialFailed { resource, error },
                    };
                    let _ = tx.send(Command::Plugin(ev)).await;
                });
            }
            Event::DialFailed { resource, error } => {
                warn!(resource = %resource, error = %error, "failed to dial device plugin");
            }
            Event::Connected {
                resource,
                generation,
                client,
                options,
            } => {
                if self.pending.get(&resource) != Some(&generation) {
                    return; // a newer registration of the same resource won
                }
                if let Some(old) = self.plugins.get(&resource).and_then(|p| p.stream.as_ref()) {
                    old.abort();
                }
                let stream = self.tasks.spawn(plugins::list_and_watch(
                    client.clone(),
                    resource.clone(),
                    generation,
                    self.tx.clone(),
                ));
                info!(resource = %resource, pre_start_required = options.pre_start_required, get_preferred_allocation_available = options.get_preferred_allocation_available, "registered device plugin endpoint");
                self.plugins.insert(
                    resource.clone(),
                    Plugin {
                        generation,
                        client: Some(client),
                        options,
                        stream: Some(stream),
                    },
                );
                self.state
                    .endpoints
                    .insert(resource, state::EndpointState::Running);
            }
            Event::Devices {
                resource,
                generation,
                devices,
            } => {
                if self.plugins.get(&resource).map(|p| p.generation) != Some(generation) {
                    return;
                }
                let healthy = devices.iter().filter(|d| d.health == api::HEALTHY).count();
                info!(resource = %resource, devices = devices.len(), healthy, "device plugin sent its devices");
                self.state.update_devices(&resource, &devices);
                self.write_checkpoint().await.ok();
            }
            Event::Stopped {
                resource,
                generation,
                error,
            } => {
                let Some(p) = self
                    .plugins
                    .get_mut(&resource)
                    .filter(|p| p.generation == generation)
                else {
                    return;
                };
                p.client = None;
                p.stream = None;
                warn!(resource = %resource, error = %error, "device plugin endpoint became unhealthy; marking its devices unhealthy");
                self.state.mark_unhealthy(&resource, Instant::now());
            }
        }
    }

    async fn write_checkpoint(&self) -> Result<(), DeviceError> {
        let path = self.dir.join(checkpoint::FILE_NAME);
        let tmp = self.dir.join(format!(".{}.tmp", checkpoint::FILE_NAME));
        let bytes = checkpoint::encode(&self.state.to_checkpoint());
        let res = async {
            tokio::fs::write(&tmp, bytes).await?;
            tokio::fs::rename(&tmp, &path).await
        }
        .await;
        res.map_err(|source| {
            let e = DeviceError::Checkpoint { path, source };
            warn!(error = %e, "failed to write the device manager checkpoint");
            e
        })
    }

    /// Upstream `GetTopologyHints` (a container) or `GetPodTopologyHints` (None), after
    /// devices of pods no longer active went back to the pool (upstream
    /// `UpdateAllocatedDevices`).
    fn hints(
        &mut self,
        pod: &Pod,
        container: Option<String>,
        mut active: HashSet<String>,
        numa_nodes: &[usize],
    ) -> ProviderHints {
        let uid = podutil::uid(pod).to_string();
        active.insert(uid.clone());
        self.state.remove_inactive(&active);
        let Some(name) = container else {
            return self.state.pod_hints(numa_nodes, pod);
        };
        let Some(c) = podutil::init_containers(pod)
            .iter()
            .chain(podutil::containers(pod))
            .find(|c| c.name == name)
        else {
            return ProviderHints::new();
        };
        let empty = BTreeMap::new();
        let reuse = if self.reuse.0 == uid {
            &self.reuse.1
        } else {
            &empty
        };
        let hints = self.state.container_hints(numa_nodes, &uid, c, reuse);
        for (r, h) in &hints {
            debug!(pod = %podutil::describe(pod), container = %name, resource = %r, hints = ?h, "[devicemanager] topology hints");
        }
        hints
    }

    /// Upstream `resourceAllocator.Admit` / the topology manager's `allocateAlignedResources` →
    /// `Allocate` for each init, then regular container (`only`: just that one, for the
    /// topology manager's container scope), each aligned to its affinity when there is one; an
    /// init container's devices may be reused by the containers after it.
    async fn allocate_pod(
        &mut self,
        pod: &Pod,
        mut active: HashSet<String>,
        only: Option<String>,
        affinity: &BTreeMap<String, BitMask>,
    ) -> Result<(), DeviceError> {
        let uid = podutil::uid(pod).to_string();
        active.insert(uid.clone());
        if self.state.remove_inactive(&active) {
            debug!("devices of pods no longer active went back to the pool");
        }
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(());
        };
        if only.is_none() || self.reuse.0 != uid {
            self.reuse = (uid.clone(), BTreeMap::new());
        }
        let mut reusable = std::mem::take(&mut self.reuse.1);
        let mut changed = false;
        let inits = spec.init_containers.iter().flatten().map(|c| (c, true));
        let all = inits.chain(spec.containers.iter().map(|c| (c, false)));
        let mut result = Ok(());
        for (c, init) in all.filter(|(c, _)| only.as_ref().is_none_or(|o| *o == c.name)) {
            let aff = affinity.get(&c.name).copied();
            match self.allocate_container(&uid, c, &reusable, aff).await {
                Ok(ch) => changed |= ch,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
            let held = self
                .state
                .pods
                .get(&uid)
                .and_then(|p| p.get(&c.name))
                .cloned()
                .unwrap_or_default();
            for (r, a) in held {
                let set = reusable.entry(r).or_default();
                if init {
                    set.extend(a.ids());
                } else {
                    set.retain(|d| !a.ids().contains(d));
                }
            }
        }
        self.reuse.1 = reusable;
        if changed {
            self.write_checkpoint().await?;
        }
        result
    }

    /// Upstream `allocateContainerResources`; true when it allocated anything.
    async fn allocate_container(
        &mut self,
        uid: &str,
        c: &Container,
        reusable: &BTreeMap<String, BTreeSet<String>>,
        affinity: Option<BitMask>,
    ) -> Result<bool, DeviceError> {
        let mut changed = false;
        for resource in limit_names(c) {
            if !self.state.is_device_resource(&resource) {
                continue;
            }
            let required = limit(c, &resource).unwrap_or(0);
            let empty = BTreeSet::new();
            let reuse = reusable.get(&resource).unwrap_or(&empty);
            let (reuse, available) = match self
                .state
                .devices_to_allocate(uid, &c.name, &resource, required, reuse)?
            {
                Need::Satisfied => continue,
                Need::Choose {
                    reusable,
                    available,
                    ..
                } => (reusable, available),
            };
            let plugin = self.plugins.get(&resource);
            let client = plugin
                .and_then(|p| p.client.clone())
                .ok_or_else(|| DeviceError::UnknownPlugin(resource.clone()))?;
            let split = self
                .state
                .filter_by_affinity(&resource, &available, affinity);
            let plan = Plan::new(required, &reuse, split);
            let mut preferred = Vec::new();
            let ask = plan
                .ask()
                .filter(|_| plugin.is_some_and(|p| p.options.get_preferred_allocation_available));
            if let Some((offered, must_include)) = ask {
                let req = api::PreferredAllocationRequest {
                    container_requests: vec![api::ContainerPreferredAllocationRequest {
                        available_device_i_ds: offered.into_iter().collect(),
                        must_include_device_i_ds: must_include.into_iter().collect(),
                        allocation_size: required as i32,
                    }],
                };
                let r =
                    tokio::time::timeout(RPC_TIMEOUT, client.clone().get_preferred_allocation(req))
                        .await;
                if let Ok(Ok(resp)) = &r {
                    preferred = resp
                        .get_ref()
                        .container_responses
                        .first()
                        .map(|c| c.device_i_ds.clone())
                        .unwrap_or_default();
                }
                rpc_error("GetPreferredAllocation", r)?;
            }
            let chosen = plan.finish(&preferred);
            debug!(resource = %resource, devices = ?chosen, "making allocation request for devices");
            let req = api::AllocateRequest {
                container_requests: vec![api::ContainerAllocateRequest {
                    devices_i_ds: chosen.iter().cloned().collect(),
                }],
            };
            let r = tokio::time::timeout(RPC_TIMEOUT, client.clone().allocate(req)).await;
            let response = match &r {
                Ok(Ok(resp)) => resp.get_ref().container_responses.first().cloned(),
                _ => None,
            };
            rpc_error("Allocate", r)?;
            let response = response.ok_or_else(|| DeviceError::EmptyResponse(resource.clone()))?;
            let per_numa = self.state.per_numa(&resource, &chosen);
            info!(pod_uid = %uid, container = %c.name, resource = %resource, devices = ?chosen, "allocated devices");
            self.state
                .insert(uid, &c.name, &resource, Allocation { per_numa, response });
            changed = true;
        }
        Ok(changed)
    }

    /// Upstream `GetDeviceRunContainerOptions`.
    async fn run_options(
        &mut self,
        pod: &Pod,
        container: &str,
    ) -> Result<state::RunOptions, DeviceError> {
        let uid = podutil::uid(pod).to_string();
        let spec = pod.spec.as_ref();
        let all = spec.into_iter().flat_map(|s| {
            s.init_containers
                .iter()
                .flatten()
                .chain(s.containers.iter())
        });
        let Some(c) = all.into_iter().find(|c| c.name == container) else {
            return Ok(state::RunOptions::default());
        };
        let mut realloc = false;
        for resource in limit_names(c) {
            if !self.state.is_device_resource(&resource) {
                continue;
            }
            let held = self
                .state
                .container_devices(&uid, container, &resource)
                .map(Allocation::ids);
            if let Some(p) = self
                .plugins
                .get(&resource)
                .filter(|p| p.options.pre_start_required)
            {
                let Some(ids) = &held else {
                    return Err(DeviceError::NotAllocated {
                        pod: uid,
                        container: container.into(),
                        resource,
                    });
                };
                let client = p
                    .client
                    .clone()
                    .ok_or_else(|| DeviceError::UnknownPlugin(resource.clone()))?;
                let req = api::PreStartContainerRequest {
                    devices_i_ds: ids.iter().cloned().collect(),
                };
                debug!(pod_uid = %uid, container, resource = %resource, "issuing a PreStartContainer call");
                rpc_error(
                    "PreStartContainer",
                    tokio::time::timeout(
                        api::PRE_START_CONTAINER_TIMEOUT,
                        client.clone().pre_start_container(req),
                    )
                    .await,
                )?;
            }
            realloc |= held.is_none();
        }
        if realloc {
            info!(pod = %podutil::describe(pod), container, "needs re-allocate device plugin resources");
            if self
                .allocate_container(&uid, c, &BTreeMap::new(), None)
                .await?
            {
                self.write_checkpoint().await?;
            }
        }
        let (opts, conflicts) = self.state.run_options(&uid, container);
        for m in conflicts {
            warn!(pod = %podutil::describe(pod), container, conflict = %m, "device plugin responses conflict");
        }
        Ok(opts)
    }

    fn assigned(&self) -> AssignedDevices {
        let mut out = AssignedDevices::new();
        for (uid, containers) in &self.state.pods {
            for (name, resources) in containers {
                let list = out
                    .entry(uid.clone())
                    .or_default()
                    .entry(name.clone())
                    .or_default();
                for (r, a) in resources {
                    for (numa, ids) in &a.per_numa {
                        list.push(ContainerDevices {
                            resource: r.clone(),
                            ids: ids.clone(),
                            numa_node: *numa,
                        });
                    }
                }
            }
        }
        out
    }
}
