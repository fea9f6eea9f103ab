//! The device manager's state and its decisions, without I/O (upstream `ManagerImpl`'s maps,
//! `genericDeviceUpdateCallback`, `markResourceUnhealthy`, `GetCapacity`,
//! `UpdateAllocatedDevices`, `devicesToAllocate` and `podDevices`). The manager task
//! ([`super::manager`]) owns one [`State`] and does the RPCs around these.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant};

use super::api;
use super::checkpoint::{self, PodDevicesEntry};
use prost::Message as _;

/// Upstream `endpointStopGracePeriod`: a resource whose plugin is gone keeps its capacity (all
/// unhealthy) this long, then leaves the node status.
pub const STOP_GRACE_PERIOD: Duration = Duration::from_secs(5 * 60);

/// Device IDs by resource name.
pub type DeviceSets = BTreeMap<String, BTreeSet<String>>;

/// One container's devices of one resource and what the plugin answered (upstream
/// `deviceAllocateInfo`).
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    /// NUMA node -> device IDs (node 0 when the device reports no topology).
    pub per_numa: BTreeMap<i64, Vec<String>>,
    pub response: api::ContainerAllocateResponse,
}

impl Allocation {
    pub fn ids(&self) -> BTreeSet<String> {
        self.per_numa.values().flatten().cloned().collect()
    }
}

/// pod UID -> container name -> resource -> allocation (upstream `podDevices`).
pub type PodDevices = BTreeMap<String, BTreeMap<String, BTreeMap<String, Allocation>>>;

/// The decision of [`State::devices_to_allocate`].
#[derive(Debug, Clone, PartialEq)]
pub enum Need {
    /// The container already holds its devices of this resource (a restart, a re-sync).
    Satisfied,
    /// `needed` more devices come from `reusable` first (an init container's, upstream
    /// `devicesToReuse`), then from `available`.
    Choose {
        needed: usize,
        reusable: BTreeSet<String>,
        available: BTreeSet<String>,
    },
}

/// Errors of allocation; the message is upstream's, the admission turns it into
/// `UnexpectedAdmissionError`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AllocError {
    #[error("pod {pod:?} container {container:?} changed request for resource {resource:?} from {from} to {to}")]
    Changed {
        pod: String,
        container: String,
        resource: String,
        from: usize,
        to: usize,
    },
    #[error("can't allocate unregistered device {0}")]
    Unregistered(String),
    #[error("requested number of devices unavailable for {resource}. Requested: {requested}, Available: {available}")]
    Unavailable {
        resource: String,
        requested: usize,
        available: usize,
    },
}

/// What the node status shows for device plugin resources.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Capacity {
    pub capacity: BTreeMap<String, i64>,
    pub allocatable: BTreeMap<String, i64>,
    /// Resources whose plugin went away more than [`STOP_GRACE_PERIOD`] ago: capacity 0.
    pub deleted: Vec<String>,
}

/// A resource's plugin as the state sees it: live, or stopped since when.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EndpointState {
    Running,
    Stopped(Instant),
}

#[derive(Debug, Default)]
pub struct State {
    pub all: BTreeMap<String, BTreeMap<String, api::Device>>,
    pub healthy: DeviceSets,
    pub unhealthy: DeviceSets,
    pub allocated: DeviceSets,
    pub pods: PodDevices,
    pub endpoints: BTreeMap<String, EndpointState>,
}

impl State {
    /// Upstream `genericDeviceUpdateCallback`: a plugin's full device list replaces the last one.
    pub fn update_devices(&mut self, resource: &str, devices: &[api::Device]) {
        let (mut healthy, mut unhealthy, mut all) =
            (BTreeSet::new(), BTreeSet::new(), BTreeMap::new());
        for d in devices {
            if d.health == api::HEALTHY {
                healthy.insert(d.id.clone());
            } else {
                unhealthy.insert(d.id.clone());
            }
            all.insert(d.id.clone(), d.clone());
        }
        self.healthy.insert(resource.to_string(), healthy);
        self.unhealthy.insert(resource.to_string(), unhealthy);
        self.all.insert(resource.to_string(), all);
    }

    /// Upstream `markResourceUnhealthy`: the plugin is gone, none of its devices can be handed out.
    pub fn mark_unhealthy(&mut self, resource: &str, now: Instant) {
        let healthy = std::mem::take(self.healthy.entry(resource.to_string()).or_default());
        self.unhealthy
            .entry(resource.to_string())
            .or_default()
            .extend(healthy);
        self.endpoints
            .insert(resource.to_string(), EndpointState::Stopped(now));
    }

    /// Upstream `GetCapacity`: healthy devices are allocatable, healthy and unhealthy count in
    /// capacity; a resource stopped longer than the grace period is forgotten.
    pub fn capacity(&mut self, now: Instant) -> Capacity {
        let expired: Vec<String> = self
            .healthy
            .keys()
            .chain(self.unhealthy.keys())
            .filter(|r| match self.endpoints.get(*r) {
                Some(EndpointState::Stopped(at)) => now.duration_since(*at) >= STOP_GRACE_PERIOD,
                Some(EndpointState::Running) => false,
                None => true,
            })
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for r in &expired {
            self.healthy.remove(r);
            self.unhealthy.remove(r);
            self.endpoints.remove(r);
        }
        let mut out = Capacity {
            deleted: expired,
            ..Default::default()
        };
        for (r, set) in &self.healthy {
            out.capacity.insert(r.clone(), set.len() as i64);
            out.allocatable.insert(r.clone(), set.len() as i64);
        }
        for (r, set) in &self.unhealthy {
            *out.capacity.entry(r.clone()).or_insert(0) += set.len() as i64;
            out.allocatable.entry(r.clone()).or_insert(0);
        }
        out
    }

    /// Upstream `GetAllocatableDevices`: every healthy device, by resource.
    pub fn allocatable_devices(&self) -> Vec<(String, api::Device)> {
        self.healthy
            .iter()
            .flat_map(|(r, ids)| {
                ids.iter().map(|id| {
                    let dev =
                        self.all
                            .get(r)
                            .and_then(|m| m.get(id))
                            .cloned()
                            .unwrap_or(api::Device {
                                id: id.clone(),
                                health: api::HEALTHY.into(),
                                topology: None,
                            });
                    (r.clone(), dev)
                })
            })
            .collect()
    }

    /// Upstream `isDevicePluginResource`.
    pub fn is_device_resource(&self, resource: &str) -> bool {
        self.healthy.contains_key(resource) || self.allocated.contains_key(resource)
    }

    /// Upstream `UpdateAllocatedDevices`: devices of pods no longer active go back to the pool.
    /// Returns whether anything was freed.
    pub fn remove_inactive(&mut self, active: &HashSet<String>) -> bool {
        let before = self.pods.len();
        self.pods.retain(|uid, _| active.contains(uid));
        let freed = self.pods.len() != before;
        if freed {
            self.allocated = self.pod_allocated();
        }
        freed
    }

    /// Every device some container holds, by resource (upstream `podDevices.devices()`).
    pub fn pod_allocated(&self) -> DeviceSets {
        let mut out = DeviceSets::new();
        for containers in self.pods.values() {
            for resources in containers.values() {
                for (r, a) in resources {
                    out.entry(r.clone()).or_default().extend(a.ids());
                }
            }
        }
        out
    }

    pub fn container_devices(
        &self,
        pod: &str,
        container: &str,
        resource: &str,
    ) -> Option<&Allocation> {
        self.pods.get(pod)?.get(container)?.get(resource)
    }

    /// Upstream `devicesToAllocate` up to the point where a plugin's preference is asked for.
    pub fn devices_to_allocate(
        &self,
        pod: &str,
        container: &str,
        resource: &str,
        required: usize,
        reusable: &BTreeSet<String>,
    ) -> Result<Need, AllocError> {
        if let Some(a) = self.container_devices(pod, container, resource) {
            let have = a.ids().len();
            if have != required {
                return Err(AllocError::Changed {
                    pod: pod.into(),
                    container: container.into(),
                    resource: resource.into(),
                    from: have,
                    to: required,
                });
            }
            return Ok(Need::Satisfied);
        }
        if required == 0 {
            return Ok(Need::Satisfied);
        }
        let Some(healthy) = self.healthy.get(resource) else {
            return Err(AllocError::Unregistered(resource.into()));
        };
        let in_use = self.allocated.get(resource);
        let reusable: BTreeSet<String> = reusable.iter().take(required).cloned().collect();
        let needed = required - reusable.len();
        let available: BTreeSet<String> = healthy
            .iter()
            .filter(|d| in_use.is_none_or(|u| !u.contains(*d)) && !reusable.contains(*d))
            .cloned()
            .collect();
        if needed > 0 && available.len() < needed {
            return Err(AllocError::Unavailable {
                resource: resource.into(),
                requested: needed,
                available: available.len(),
            });
        }
        Ok(Need::Choose {
            needed,
            reusable,
            available,
        })
    }

    /// Records a container's devices (upstream `podDevices.insert`) and marks them in use.
    pub fn insert(&mut self, pod: &str, container: &str, resource: &str, alloc: Allocation) {
        self.allocated
            .entry(resource.to_string())
            .or_default()
            .extend(alloc.ids());
        self.pods
            .entry(pod.to_string())
            .or_default()
            .entry(container.to_string())
            .or_default()
            .insert(resource.to_string(), alloc);
    }

    /// NUMA placement of chosen devices as upstream records it (node 0 without topology).
    pub fn per_numa(&self, resource: &str, ids: &BTreeSet<String>) -> BTreeMap<i64, Vec<String>> {
        let mut out: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        for id in ids {
            let nodes: Vec<i64> = self
                .all
                .get(resource)
                .and_then(|m| m.get(id))
                .and_then(|d| d.topology.as_ref())
                .map(|t| t.nodes.iter().map(|n| n.id).collect())
                .unwrap_or_default();
            if nodes.is_empty() {
                out.entry(0).or_default().push(id.clone());
            }
            for n in nodes {
                out.entry(n).or_default().push(id.clone());
            }
        }
        out
    }

    /// The checkpoint's data (upstream `writeCheckpoint`: allocations and healthy devices).
    pub fn to_checkpoint(&self) -> checkpoint::Data {
        let mut entries = Vec::new();
        for (uid, containers) in &self.pods {
            for (name, resources) in containers {
                for (r, a) in resources {
                    entries.push(PodDevicesEntry {
                        pod_uid: uid.clone(),
                        container_name: name.clone(),
                        resource_name: r.clone(),
                        device_ids: Some(a.per_numa.clone()),
                        alloc_resp: Some(a.response.encode_to_vec()),
                    });
                }
            }
        }
        checkpoint::Data {
            // Go's nil slice when there is nothing, as upstream's `toCheckpointData`.
            pod_device_entries: (!entries.is_empty()).then_some(entries),
            registered_devices: Some(
                self.healthy
                    .iter()
                    .map(|(r, s)| (r.clone(), s.iter().cloned().collect()))
                    .collect(),
            ),
        }
    }

    /// Upstream `readCheckpoint`: allocations come back; registered resources exist with no
    /// devices and a stopped endpoint until their plugin registers again. Entries whose response
    /// does not decode are skipped, as upstream does. Returns the skipped entries' descriptions.
    pub fn from_checkpoint(data: checkpoint::Data, now: Instant) -> (State, Vec<String>) {
        let mut st = State::default();
        let mut skipped = Vec::new();
        for e in data.pod_device_entries.unwrap_or_default() {
            let resp =
                api::ContainerAllocateResponse::decode(e.alloc_resp.as_deref().unwrap_or_default());
            match resp {
                Ok(response) => st.insert(
                    &e.pod_uid,
                    &e.container_name,
                    &e.resource_name,
                    Allocation {
                        per_numa: e.device_ids.unwrap_or_default(),
                        response,
                    },
                ),
                Err(err) => skipped.push(format!(
                    "{} {} {}: {err}",
                    e.pod_uid, e.container_name, e.resource_name
                )),
            }
        }
        for r in data.registered_devices.unwrap_or_default().into_keys() {
            st.healthy.insert(r.clone(), BTreeSet::new());
            st.unhealthy.insert(r.clone(), BTreeSet::new());
            st.endpoints.insert(r, EndpointState::Stopped(now));
        }
        (st, skipped)
    }
}

/// What a container gets from its devices (upstream `DeviceRunContainerOptions`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunOptions {
    pub envs: Vec<(String, String)>,
    pub mounts: Vec<api::Mount>,
    pub devices: Vec<api::DeviceSpec>,
    pub annotations: Vec<(String, String)>,
}

impl State {
    /// Upstream `podDevices.deviceRunContainerOptions`: the plugins' responses merged over the
    /// container's resources; the first setting of an env, mount or device path, or annotation
    /// wins. Conflicts are returned as messages to log, as upstream logs them.
    pub fn run_options(&self, pod: &str, container: &str) -> (RunOptions, Vec<String>) {
        let mut out = RunOptions::default();
        let mut conflicts = Vec::new();
        let Some(resources) = self.pods.get(pod).and_then(|c| c.get(container)) else {
            return (out, conflicts);
        };
        let (mut envs, mut mounts, mut devs, mut notes) = (
            BTreeMap::new(),
            BTreeMap::new(),
            BTreeMap::new(),
            BTreeMap::new(),
        );
        for a in resources.values() {
            let r = &a.response;
            let mut kv: Vec<_> = r.envs.iter().collect();
            kv.sort();
            for (k, v) in kv {
                match envs.get(k) {
                    Some(e) if e != v => conflicts.push(format!(
                        "environment variable {k} has conflicting setting: {e} and {v}"
                    )),
                    Some(_) => {}
                    None => {
                        envs.insert(k.clone(), v.clone());
                        out.envs.push((k.clone(), v.clone()));
                    }
                }
            }
            for d in &r.devices {
                match devs.get(&d.container_path) {
                    Some(h) if h != &d.host_path => conflicts.push(format!(
                        "container device {} has conflicting mapping host devices: {h} and {}",
                        d.container_path, d.host_path
                    )),
                    Some(_) => {}
                    None => {
                        devs.insert(d.container_path.clone(), d.host_path.clone());
                        out.devices.push(d.clone());
                    }
                }
            }
            for m in &r.mounts {
                match mounts.get(&m.container_path) {
                    Some(h) if h != &m.host_path => conflicts.push(format!(
                        "container mount {} has conflicting mapping host mounts: {h} and {}",
                        m.container_path, m.host_path
                    )),
                    Some(_) => {}
                    None => {
                        mounts.insert(m.container_path.clone(), m.host_path.clone());
                        out.mounts.push(m.clone());
                    }
                }
            }
            let mut kv: Vec<_> = r.annotations.iter().collect();
            kv.sort();
            for (k, v) in kv {
                match notes.get(k) {
                    Some(e) if e != v => conflicts.push(format!(
                        "annotation {k} has conflicting setting: {e} and {v}"
                    )),
                    Some(_) => {}
                    None => {
                        notes.insert(k.clone(), v.clone());
                        out.annotations.push((k.clone(), v.clone()));
                    }
                }
            }
        }
        (out, conflicts)
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
