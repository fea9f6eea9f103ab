//! The kubelet's wiring, one builder per area: each takes what it needs, spawns its managers'
//! tasks into the kubelet's task set and returns the handles the next area needs. `run_with`
//! only calls them in start-up order (upstream `NewMainKubelet` + `Run`, without the globals).

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use rkubelet_cri::{api, CriClient};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use super::sync_loop::{self, SyncLoop};
use super::{cert_dir, KubeletError};
use crate::admission;
use crate::cm::PodCgroupNames;
use crate::config::KubeletConfig;
use crate::dns::{self, DnsSettings};
use crate::events::{self, EventRecorder, EventType, Recorder};
use crate::health::Health;
use crate::images::ImageManager;
use crate::logs::{ContainerLogManager, RotationPolicy};
use crate::mirror::{MirrorHandle, MirrorManager};
use crate::node::machine::{self, MachineInfo};
use crate::node::status::{self as node_status, NodeSettings};
use crate::node::NodeAgent;
use crate::object_cache::{ChangeDetectionStrategy, ObjectCache};
use crate::pleg::events::EventWatcher;
use crate::pleg::{Pleg, PodLifecycleEvent, RuntimePods};
use crate::pod_workers::PodWorkers;
use crate::prober::{ProbeHandle, ProbeManager, ProbeResults, ResultUpdate};
use crate::runtime::RuntimeManager;
use crate::server;
use crate::source::{self, ConfigEvent};
use crate::stats::{CgroupStats, StatsSource};
use crate::status::{syncer, StatusHandle, StatusManager};
use crate::sync::{SyncContext, Syncer};
use cgroups::CgroupManager;

/// `<root-dir>/pods` and the log directories exist before anything runs.
pub(super) fn ensure_dirs(cfg: &KubeletConfig) -> Result<(), KubeletError> {
    for dir in [
        cfg.root_dir.join("pods"),
        cfg.pod_logs_dir.clone(),
        cfg.container_logs_dir.clone(),
    ] {
        std::fs::create_dir_all(&dir).map_err(|source| KubeletError::Dir {
            path: dir.clone(),
            source,
        })?;
    }
    Ok(())
}

/// What every builder shares: the configuration, the runtime, health, and the task set that
/// owns every spawned manager.
pub(super) struct Wiring<'a> {
    pub cfg: &'a KubeletConfig,
    pub cri: CriClient,
    pub health: Arc<Health>,
    pub tasks: JoinSet<()>,
    pub cancel: &'a CancellationToken,
    /// Image credential provider plugins, loaded and checked before anything starts.
    pub credential_providers: crate::credentials::plugin::Providers,
}

/// Upstream `RegisterCredentialProviderPlugins`, called when either flag is set (an unset one
/// then fails as upstream's empty path does). None set: no plugins.
pub(super) fn credential_providers(
    cfg: &KubeletConfig,
) -> Result<crate::credentials::plugin::Providers, KubeletError> {
    let (config, bin_dir) = (
        &cfg.image_credential_provider_config,
        &cfg.image_credential_provider_bin_dir,
    );
    if config.is_none() && bin_dir.is_none() {
        return Ok(Default::default());
    }
    let empty = std::path::PathBuf::new();
    let p = crate::credentials::plugin::Providers::load(
        config.as_ref().unwrap_or(&empty),
        bin_dir.as_ref().unwrap_or(&empty),
    )?;
    info!(plugins = ?p.names(), "registered image credential provider plugins");
    Ok(p)
}

/// The API side: the client (None standalone), events and the status manager.
pub(super) struct ApiSide {
    /// Behind the `kubeAPIQPS`/`kubeAPIBurst` token bucket (upstream `KubeClient`).
    pub client: Option<kube::Client>,
    /// The same connection without the limit, for node status and the Lease (upstream
    /// `HeartbeatClient`, built with `QPS = -1`).
    pub heartbeat: Option<kube::Client>,
    pub recorder: Recorder,
    pub status: StatusHandle,
}

/// Who this node is.
pub(super) struct NodeIdentity {
    pub ip: Option<std::net::IpAddr>,
    pub settings: NodeSettings,
    pub machine: MachineInfo,
}

/// The pod-running core: the workers' shared context and what the SyncLoop reads.
pub(super) struct PodRuntime {
    pub ctx: Arc<SyncContext>,
    pub pleg: mpsc::Receiver<PodLifecycleEvent>,
    pub runtime_pods: watch::Receiver<Arc<RuntimePods>>,
    pub prober: ProbeHandle,
    pub probe_updates: mpsc::UnboundedReceiver<ResultUpdate>,
    pub probe_results: watch::Sender<Arc<ProbeResults>>,
    pub object_cache: Option<ObjectCache>,
    pub object_changes: mpsc::UnboundedReceiver<String>,
    pub node_view: admission::NodeView,
    /// The container GC's questions to the SyncLoop.
    pub gc_states: mpsc::Receiver<crate::runtime::StatesRequest>,
    /// Image GC, for the eviction manager's disk reclaim (with `ctx.container_gc`).
    pub image_gc: crate::images::ImageGcHandle,
}

/// The eviction manager's handle and the channels it shares with the SyncLoop.
pub(super) struct EvictionSide {
    pub handle: crate::eviction::EvictionHandle,
    pub requests: mpsc::UnboundedReceiver<crate::eviction::EvictionRequest>,
    pub active_pods: watch::Sender<Arc<Vec<Arc<Pod>>>>,
}

/// The pod sources, merged.
pub(super) struct Sources {
    pub config: mpsc::Receiver<ConfigEvent>,
    pub expected: HashSet<&'static str>,
    pub mirrors: Option<MirrorHandle>,
}

impl Wiring<'_> {
    fn spawn(
        &mut self,
        span: tracing::Span,
        fut: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        self.tasks.spawn(fut.instrument(span));
    }

    /// Status syncer, event recorder and status manager.
    /// `base` is the unlimited client: events get it (their own `eventRecordQPS` limit, as
    /// upstream's separate event client), node status and the Lease too (the heartbeat client);
    /// everything else goes through the `kubeAPIQPS` limit.
    pub fn api_side(&mut self, base: Option<kube::Client>) -> ApiSide {
        let cfg = self.cfg;
        let client = base.clone().map(|c| {
            crate::certificate::throttle::throttled(
                c,
                cfg.kube_api_qps as f32,
                i64::from(cfg.kube_api_burst),
            )
        });
        let api_queue = client.clone().map(|c| {
            let (syncer, tx) = syncer::Syncer::new(c);
            self.spawn(
                tracing::info_span!("status_syncer"),
                syncer.run(self.cancel.child_token()),
            );
            tx
        });
        let (event_recorder, recorder) = EventRecorder::new(
            base.clone(),
            cfg.node_name.clone(),
            cfg.event_record_qps as f32,
            cfg.event_burst,
        );
        self.spawn(
            tracing::info_span!("events"),
            event_recorder.run(self.cancel.child_token()),
        );
        recorder.node_event(
            EventType::Normal,
            events::STARTING_KUBELET,
            "Starting kubelet.".into(),
        );
        let (status_mgr, status) = StatusManager::new(api_queue);
        self.spawn(
            tracing::Span::none(),
            status_mgr.run(self.cancel.child_token()),
        );
        ApiSide {
            client,
            heartbeat: base,
            recorder,
            status,
        }
    }

    /// The stats endpoints' sources. The cgroups are read through a cgroupfs-spelled manager:
    /// the pod cgroup manager itself with the cgroupfs driver, else one detected for reading
    /// (also without `cgroupsPerQOS`, for the system containers and the root's series).
    pub fn stats_source(&self, pod_cgroups: Option<&Arc<dyn CgroupManager>>) -> StatsSource {
        let cfg = self.cfg;
        let reader: Option<Arc<dyn CgroupManager>> = match pod_cgroups {
            Some(m) if m.driver() == cgroups::Driver::Cgroupfs => Some(m.clone()),
            _ => match cgroups::detect(cgroups::Driver::Cgroupfs) {
                Ok(m) => Some(Arc::new(m)),
                Err(e) => {
                    warn!(error = %e, "cannot read cgroups: no pod cgroup or system container stats");
                    None
                }
            },
        };
        let pods = pod_cgroups
            .filter(|_| cfg.cgroups.cgroups_per_qos)
            .map(|m| PodCgroupNames::new(&cfg.cgroups.cgroup_root, m.driver()));
        let cgroups = reader.map(|mgr| {
            CgroupStats::new(crate::stats::cgroup::Setup {
                mgr,
                pods,
                runtime_cgroups: cfg.runtime_cgroups.clone(),
                runtime_endpoint: cfg.container_runtime_endpoint.clone(),
            })
        });
        StatsSource::new(
            self.cri.clone(),
            cfg.node_name.clone(),
            cfg.root_dir.clone(),
            cfg.pod_logs_dir.clone(),
            cgroups,
        )
    }

    /// Healthz and the read-only port, up before the runtime answers (upstream does too).
    pub async fn local_servers(
        &mut self,
        api: &ApiSide,
        stats: &StatsSource,
    ) -> Result<(), KubeletError> {
        let cfg = self.cfg;
        let ports = [
            ("healthz", cfg.healthz_bind_address, cfg.healthz_port, false),
            ("read-only", cfg.address, cfg.read_only_port, true),
        ];
        for (name, ip, port, read_only) in ports {
            if port == 0 {
                continue;
            }
            let srv = server::bind(
                name,
                SocketAddr::new(ip, port),
                read_only,
                self.health.clone(),
                api.status.clone(),
                stats.clone(),
                self.cancel.child_token(),
            )
            .await?;
            self.tasks.spawn(srv);
        }
        Ok(())
    }

    /// The node's name, address, machine facts and allocatable (capacity less reservations and
    /// hard eviction thresholds, upstream `GetNodeAllocatableReservation`).
    pub fn node_identity(&self) -> Result<NodeIdentity, KubeletError> {
        let cfg = self.cfg;
        let ip = cfg.node_ip.or_else(machine::detect_node_ip);
        if ip.is_none() {
            warn!("cannot detect the node IP; pass --node-ip");
        }
        let machine = MachineInfo::read(&cfg.root_dir);
        let max_pods = node_status::pods_capacity(cfg.max_pods, cfg.pods_per_core, machine.cpus);
        let capacity = node_status::capacity(max_pods, &machine);
        let allocatable = crate::cm::allocatable::node_allocatable(&cfg.cgroups, &capacity)
            .map_err(crate::cm::CmError::from)?;
        Ok(NodeIdentity {
            ip,
            settings: NodeSettings {
                name: cfg.node_name.clone(),
                ip: ip.unwrap_or(std::net::IpAddr::from([127, 0, 0, 1])),
                hostname: cfg.node_name.clone(),
                extra_labels: cfg.node_labels.clone(),
                taints: cfg.register_with_taints.clone(),
                max_pods,
                provider_id: (!cfg.provider_id.is_empty()).then(|| cfg.provider_id.clone()),
                kubelet_port: cfg.port,
                allocatable,
            },
            machine,
        })
    }

    /// The container manager (upstream `NewContainerManager` + `Start`): the kernel tunables
    /// checked or set first (`setupNode`), then kubepods limited to node allocatable and the
    /// QoS tiers, when `cgroupsPerQOS` is on and a cgroup manager is given; every pod operation
    /// a no-op otherwise.
    /// The device manager starts with it (upstream `containerManagerImpl.Start` starts
    /// `deviceManager`), whatever the cgroup settings.
    pub async fn container_manager(
        &mut self,
        node: &NodeIdentity,
        cgroups: Option<Arc<dyn cgroups::CgroupManager>>,
        proc_sys: std::path::PathBuf,
    ) -> Result<crate::cm::ContainerManager, KubeletError> {
        crate::cm::setup_kernel_tunables(proc_sys, self.cfg.cgroups.protect_kernel_defaults)
            .await?;
        let cm = self.pod_cgroups(node, cgroups).await?;
        let (devices, run) =
            crate::cm::devices::start(&self.cfg.root_dir, self.cancel.child_token()).await?;
        self.spawn(tracing::info_span!("device_manager"), run);
        let cpu = self.cpu_manager().await?;
        let c = &self.cfg.cpu_manager;
        // Both were validated with the configuration.
        let policy = c.topology_policy.parse().unwrap_or_default();
        let scope = c.topology_scope.parse().unwrap_or_default();
        let sys = std::path::Path::new("/sys");
        let numa = crate::cm::cpu::topology::numa_nodes(sys);
        // Upstream `topologymanager.NewManager`: the options, the node limit, the distances.
        let opts = crate::cm::topology::PolicyOptions {
            prefer_closest_numa: c.prefer_closest_numa_nodes(),
            max_allowable_numa_nodes: c.max_allowable_numa_nodes(),
        };
        crate::cm::topology::numa::check_node_count(policy, &numa, &opts)?;
        let closest = match opts.prefer_closest_numa {
            true => Some(crate::cm::topology::NumaInfo::discover(sys, &numa)?),
            false => None,
        };
        if policy != crate::cm::topology::Policy::None {
            info!(policy = %c.topology_policy, scope = %c.topology_scope, numa_nodes = ?numa, options = ?c.topology_policy_options, "topology manager enabled");
        }
        Ok(cm
            .with_devices(devices)
            .with_cpu(cpu, policy, scope, numa, closest))
    }

    /// The CPU manager (upstream `cpumanager.NewManager` + `Start`): with the static policy a
    /// task and its handle; with `none` only its checkpoint is kept.
    async fn cpu_manager(&mut self) -> Result<Option<crate::cm::cpu::CpuHandle>, KubeletError> {
        let setup = crate::cm::cpu::Setup::from_config(self.cfg, self.cri.clone());
        let started = crate::cm::cpu::start(setup, self.cancel.child_token()).await?;
        Ok(started.map(|(handle, run)| {
            self.spawn(tracing::info_span!("cpu_manager"), run);
            handle
        }))
    }

    async fn pod_cgroups(
        &self,
        node: &NodeIdentity,
        cgroups: Option<Arc<dyn cgroups::CgroupManager>>,
    ) -> Result<crate::cm::ContainerManager, KubeletError> {
        let cfg = self.cfg;
        let memory = node.machine.memory_bytes;
        let Some(mgr) = cgroups.filter(|_| cfg.cgroups.cgroups_per_qos) else {
            return Ok(crate::cm::ContainerManager::disabled(&cfg.cgroups, memory));
        };
        let mut internal = node_status::capacity(node.settings.max_pods, &node.machine);
        internal.insert(
            "pid".into(),
            i64::try_from(node.machine.pid_max).unwrap_or(i64::MAX),
        );
        Ok(crate::cm::ContainerManager::start(crate::cm::Setup {
            cfg: &cfg.cgroups,
            cgroups: Some(mgr),
            internal_capacity: &internal,
            memory_capacity: memory,
            root_dir: cfg.root_dir.clone(),
        })
        .await?)
    }

    fn dns(&self) -> DnsSettings {
        let cfg = self.cfg;
        let no_resolv_conf = cfg.resolv_conf.as_os_str().is_empty();
        let host = if no_resolv_conf {
            Default::default()
        } else {
            dns::load_host(&cfg.resolv_conf).unwrap_or_else(|e| {
                warn!(file = %cfg.resolv_conf.display(), error = %e, "cannot read resolvConf; pods get no host DNS");
                Default::default()
            })
        };
        if cfg.cluster_dns.is_empty() {
            warn!("no clusterDNS configured: pods with dnsPolicy ClusterFirst fall back to dnsPolicy Default (upstream MissingClusterDNS)");
        }
        DnsSettings {
            host,
            cluster_dns: cfg.cluster_dns.clone(),
            cluster_domain: cfg.cluster_domain.clone(),
            no_resolv_conf,
        }
    }

    /// Upstream's configMap/secret managers: with Watch, one watch per referenced object, and a
    /// change wakes the pods that reference it (the SyncLoop's object_changes).
    fn object_cache(
        &mut self,
        client: &Option<kube::Client>,
    ) -> (Option<ObjectCache>, mpsc::UnboundedReceiver<String>) {
        let (changes_tx, changes) = mpsc::unbounded_channel();
        let cache = match (
            client,
            self.cfg.config_map_and_secret_change_detection_strategy,
        ) {
            (Some(c), ChangeDetectionStrategy::Watch) => {
                let (cache, run) =
                    ObjectCache::start(c.clone(), changes_tx, self.cancel.child_token());
                self.spawn(tracing::info_span!("object_cache"), run);
                Some(cache)
            }
            (Some(_), ChangeDetectionStrategy::Cache) => {
                let (cache, run) = ObjectCache::start_ttl(
                    crate::object_cache::CACHE_TTL,
                    self.cancel.child_token(),
                );
                self.spawn(tracing::info_span!("object_cache"), run);
                Some(cache)
            }
            _ => None,
        };
        (cache, changes)
    }

    /// Logs, runtime manager, prober, object cache, PLEG (with the runtime cache) and the
    /// workers' shared context.
    pub fn pod_runtime(
        &mut self,
        version: &api::VersionResponse,
        node: &NodeIdentity,
        api: &ApiSide,
        cm: crate::cm::ContainerManager,
    ) -> Result<PodRuntime, KubeletError> {
        let cfg = self.cfg;
        let (log_mgr, logs) = ContainerLogManager::new(
            self.cri.clone(),
            RotationPolicy {
                max_size: cfg.container_log_max_size,
                max_files: cfg.container_log_max_files as usize,
                interval: cfg.container_log_monitor_interval,
            },
            cfg.container_logs_dir.clone(),
        );
        self.spawn(
            tracing::info_span!("container_logs"),
            log_mgr.run(self.cancel.child_token()),
        );
        let runtime = RuntimeManager {
            cri: self.cri.clone(),
            root_dir: cfg.root_dir.clone(),
            logs,
            pod_logs_dir: cfg.pod_logs_dir.clone(),
            dns: self.dns(),
            cgroup_parent: {
                let cm = cm.clone();
                crate::runtime::manager::CgroupParent(Arc::new(move |pod: &Pod| {
                    cm.cgroup_parent(pod)
                }))
            },
            stopping: crate::runtime::manager::Marks::kept_for(
                crate::runtime::manager::STOPPED_KEPT,
            ),
            acting: crate::runtime::manager::Marks::kept_for(std::time::Duration::ZERO),
        };
        // Upstream admits against the Node object; ours is what this kubelet registers (labels
        // and taints set later by an admin through the API are not seen yet).
        let node_view = admission::NodeView {
            name: cfg.node_name.clone(),
            labels: node_status::node_labels(&node.settings, &node.machine),
            taints: cfg.register_with_taints.clone(),
            allocatable: node_status::resources(&node.settings, &node.machine).1,
            sysctls: crate::sysctl::Allowlist::for_node(&cfg.allowed_unsafe_sysctls)?,
        };
        let (probe_mgr, prober, probe_updates) =
            ProbeManager::new(self.cri.clone(), api.recorder.clone());
        self.spawn(
            tracing::info_span!("prober"),
            probe_mgr.run(self.cancel.child_token()),
        );
        let (probe_results, probes) = watch::channel(Arc::new(ProbeResults::new()));
        let (object_cache, object_changes) = self.object_cache(&api.client);
        let objects = match (&api.client, &object_cache) {
            (Some(c), Some(cache)) => {
                crate::objects::ObjectSource::with_cache(c.clone(), cache.clone())
            }
            _ => crate::objects::ObjectSource::new(api.client.clone()),
        };
        // Upstream's service reflector (all namespaces), only with an API client.
        let services = match &api.client {
            Some(c) => {
                let (lister, run) =
                    crate::services::ServiceLister::start(c.clone(), self.cancel.child_token());
                self.spawn(tracing::info_span!("services"), run);
                lister
            }
            None => crate::services::ServiceLister::standalone(),
        };
        let (container_gc, gc_states) = self.garbage_collectors(&runtime, api);
        let (image_gc_task, image_gc) = crate::images::ImageGc::new(
            self.cri.clone(),
            cfg.image_gc,
            cfg.pod_infra_container_image.clone(),
            api.recorder.clone(),
        );
        self.spawn(
            tracing::info_span!("image_gc"),
            image_gc_task.run(self.cancel.child_token()),
        );
        // Upstream's plugin manager: CSI node plugins register through <root-dir>/plugins_registry.
        let (plugin_mgr, csi_drivers) = crate::pluginmanager::PluginManager::new(
            &cfg.root_dir,
            cfg.node_name.clone(),
            api.client.clone(),
        );
        self.spawn(
            tracing::info_span!("plugin_manager"),
            plugin_mgr.run(self.cancel.child_token()),
        );
        let mut csi = crate::volumes::csi::CsiVolumes::new(
            cfg.root_dir.clone(),
            cfg.node_name.clone(),
            api.client.clone(),
            Some(csi_drivers),
        );
        if let Some(c) = &api.client {
            let (store, run) =
                crate::volumes::csi::csi_driver_lister(c.clone(), self.cancel.child_token());
            self.spawn(tracing::info_span!("csi_drivers"), run);
            csi = csi.with_csi_drivers(store);
        }
        let (pleg_tx, pleg) = mpsc::channel(1024);
        let (pleg_task, runtime_pods, cache) =
            Pleg::new(runtime.clone(), pleg_tx, self.health.clone());
        // The runtime's event stream, PLEG's fast path (relist only when it has none).
        let (watcher, hints, live) =
            EventWatcher::new(self.cri.clone(), crate::pleg::events::enabled_by_env());
        self.spawn(
            tracing::info_span!("pleg_events"),
            watcher.run(self.cancel.child_token()),
        );
        let pleg_task = pleg_task.with_events(hints, live);
        self.spawn(
            tracing::info_span!("pleg"),
            pleg_task.run(self.cancel.child_token()),
        );
        let (timeline_task, timeline) = crate::timeline::TimelineHandle::new();
        self.spawn(
            tracing::info_span!("timeline"),
            timeline_task.run(self.cancel.child_token()),
        );
        let ctx = Arc::new(SyncContext {
            timeline,
            cache: cache.clone(),
            prober: prober.clone(),
            probes,
            runtime,
            images: ImageManager::new(
                self.cri.clone(),
                &cfg.image_pulls,
                api.recorder.clone(),
                api.client.clone(),
            )
            .with_node_keyring(crate::credentials::node_keyring::NodeKeyring::new(
                &cfg.root_dir,
                self.credential_providers.clone(),
            )),
            recorder: api.recorder.clone(),
            status: api.status.clone(),
            root_dir: cfg.root_dir.clone(),
            runtime_name: version.runtime_name.clone(),
            node_ip: node.ip.map(|ip| ip.to_string()).unwrap_or_default(),
            allocatable: node_view.allocatable.clone(),
            objects,
            tokens: crate::token::TokenManager::new(api.client.clone()),
            services,
            cm,
            container_gc,
            crash_loop_max: cfg.crash_loop_max_restart_period,
            seccomp_default: cfg.seccomp_default,
            runtime_classes: crate::runtime::runtime_class::RuntimeClasses::new(api.client.clone()),
            claims: crate::volumes::claims::ClaimSource::new(api.client.clone()),
            csi,
            node_labels: node_view.labels.clone(),
        });
        Ok(PodRuntime {
            ctx,
            pleg,
            runtime_pods,
            prober,
            probe_updates,
            probe_results,
            object_cache,
            object_changes,
            node_view,
            gc_states,
            image_gc,
        })
    }

    /// The container garbage collector (its pod states come from the SyncLoop) and the OOM
    /// watcher, which only records events.
    fn garbage_collectors(
        &mut self,
        runtime: &RuntimeManager,
        api: &ApiSide,
    ) -> (
        crate::runtime::ContainerGcHandle,
        mpsc::Receiver<crate::runtime::StatesRequest>,
    ) {
        let (states_tx, gc_states) = mpsc::channel(4);
        let (gc, handle) = crate::runtime::ContainerGc::new(
            runtime.clone(),
            self.cfg.container_gc,
            self.cfg.container_logs_dir.clone(),
            api.recorder.clone(),
            states_tx,
        );
        self.spawn(
            tracing::info_span!("container_gc"),
            gc.run(self.cancel.child_token()),
        );
        self.spawn(
            tracing::info_span!("oom_watcher"),
            crate::oom::watch(api.recorder.clone(), self.cancel.child_token()),
        );
        (handle, gc_states)
    }

    /// The eviction manager (upstream `eviction.NewManager` + `Start`), on the thresholds the
    /// configuration validated, reading the same stats `/stats/summary` serves.
    pub fn eviction(
        &mut self,
        api: &ApiSide,
        stats: &StatsSource,
        pods: &PodRuntime,
    ) -> Result<EvictionSide, KubeletError> {
        let cfg = self.cfg;
        let pods_enforced = cfg.cgroups.enforces(crate::config::cgroups::ENFORCE_PODS);
        let thresholds = cfg
            .eviction
            .thresholds(pods_enforced)
            .map_err(|e| KubeletError::Eviction(e.join("; ")))?;
        let (req_tx, requests) = mpsc::unbounded_channel();
        let (active_pods, active_rx) = watch::channel(Arc::new(Vec::new()));
        let (mgr, handle) = crate::eviction::EvictionManager::new(crate::eviction::Setup {
            thresholds,
            max_pod_grace_period: std::time::Duration::from_secs(
                u64::try_from(cfg.eviction.max_pod_grace_period).unwrap_or(0),
            ),
            pressure_transition_period: cfg.eviction.pressure_transition_period,
            monitoring_interval: crate::eviction::manager::MONITORING_INTERVAL,
            kernel_memcg_notification: cfg.eviction.kernel_memcg_notification,
            local_storage_isolation: true,
            stats: stats.clone(),
            cri: self.cri.clone(),
            root_dir: cfg.root_dir.clone(),
            cm: pods.ctx.cm.clone(),
            reclaim: Arc::new(super::reclaim::GcReclaim {
                images: pods.image_gc.clone(),
                containers: pods.ctx.container_gc.clone(),
            }),
            recorder: api.recorder.clone(),
            active_pods: active_rx,
            runtime_pods: pods.runtime_pods.clone(),
            requests: req_tx,
        });
        self.spawn(
            tracing::info_span!("eviction_manager"),
            mgr.run(self.cancel.child_token()),
        );
        Ok(EvictionSide {
            handle,
            requests,
            active_pods,
        })
    }

    /// The 10250 server, with a serving certificate from the API when `serverTLSBootstrap`.
    pub async fn secure_server(
        &mut self,
        node: &NodeIdentity,
        api: &ApiSide,
        stats: &StatsSource,
        pods: &PodRuntime,
    ) -> Result<(), KubeletError> {
        let cfg = self.cfg;
        let serving = match (&api.client, cfg.server_tls_bootstrap) {
            (Some(c), true) => {
                let cert = Arc::new(crate::certificate::manager::ServingCert::default());
                let ips = node.ip.into_iter().collect();
                let rotation = crate::certificate::manager::Rotation {
                    kind: crate::certificate::manager::Kind::Serving {
                        cert: cert.clone(),
                        request: crate::certificate::csr::Request::serving(
                            &cfg.node_name,
                            vec![cfg.node_name.clone()],
                            ips,
                        ),
                    },
                    store: crate::certificate::Store::server(&cert_dir(cfg)),
                    client: c.clone(),
                    node_name: cfg.node_name.clone(),
                    initial_cert_pem: None,
                    rotate_at_once: false,
                };
                self.spawn(
                    tracing::info_span!("serving_cert_rotation"),
                    rotation.run(self.cancel.child_token()),
                );
                Some(cert)
            }
            (None, true) => {
                warn!("serverTLSBootstrap needs --kubeconfig; serving a self-signed certificate");
                None
            }
            _ => None,
        };
        let deps = server::SecureDeps {
            health: self.health.clone(),
            status: api.status.clone(),
            runtime_pods: pods.runtime_pods.clone(),
            timeline: pods.ctx.timeline.clone(),
            cri: self.cri.clone(),
            stats: stats.clone(),
            configz: Arc::new(crate::configz::configz(cfg)),
            authn: Arc::new(server::auth::Authenticator::new(
                &cfg.authentication,
                api.client.clone(),
            )),
            authz: Arc::new(server::auth::Authorizer::new(
                &cfg.authorization,
                cfg.node_name.clone(),
                api.client.clone(),
            )),
            debugging_handlers: cfg.enable_debugging_handlers,
            fine_grained_authz: cfg.fine_grained_authz,
            streaming_idle_timeout: cfg.streaming_connection_idle_timeout,
        };
        let srv = secure_server(cfg, node.ip, serving, deps, self.cancel.child_token()).await?;
        self.tasks.spawn(srv);
        Ok(())
    }

    /// The pod sources (an injected one, the static pod directory, the manifest URL, the API
    /// watch) behind the mux; with an API client also mirror pods and node registration, status
    /// and Lease.
    pub fn sources(
        &mut self,
        extra: Option<(&'static str, mpsc::Receiver<Vec<Pod>>)>,
        api: &ApiSide,
        node: &NodeIdentity,
        version: &api::VersionResponse,
        eviction: &crate::eviction::EvictionHandle,
        devices: Option<crate::cm::devices::DeviceHandle>,
    ) -> Sources {
        let cfg = self.cfg;
        let (snap_tx, snap_rx) = mpsc::channel(16);
        let (cfg_tx, config) = mpsc::channel(256);
        self.spawn(
            tracing::Span::none(),
            source::mux::run(snap_rx, cfg_tx, self.cancel.child_token()),
        );
        let mut expected = HashSet::new();
        if let Some((name, mut rx)) = extra {
            expected.insert(name);
            let tx = snap_tx.clone();
            let stop = self.cancel.child_token();
            self.spawn(tracing::Span::none(), async move {
                loop {
                    let pods = tokio::select! {
                        _ = stop.cancelled() => return,
                        p = rx.recv() => match p { Some(p) => p, None => return },
                    };
                    let pods = pods.into_iter().map(Arc::new).collect();
                    let snap = source::SourceSnapshot { source: name, pods };
                    if tx.send(snap.into()).await.is_err() {
                        return;
                    }
                }
            });
        }
        if let Some(dir) = cfg.static_pod_path.clone() {
            expected.insert(source::FILE_SOURCE);
            // Through the static UID adoption (source::adopt): static pods another kubelet left
            // running keep their UID after a swap to rkubelet.
            let (file_tx, mut file_rx) = mpsc::channel::<source::SourceSnapshot>(16);
            let fs = source::file::FileSource::new(
                dir,
                cfg.node_name.clone(),
                cfg.file_check_frequency,
                file_tx,
            );
            self.spawn(
                tracing::info_span!("file_source"),
                fs.run(self.cancel.child_token()),
            );
            let (cri, tx, stop) = (self.cri.clone(), snap_tx.clone(), self.cancel.child_token());
            self.spawn(tracing::info_span!("static_uid_adoption"), async move {
                let sandboxes = match cri.list_pod_sandbox(api::ListPodSandboxRequest::default()).await {
                    Ok(r) => r.items,
                    Err(e) => {
                        tracing::warn!(error = %e, "listing sandboxes for static pod adoption failed; static pods get rkubelet's UIDs");
                        Vec::new()
                    }
                };
                let foreign = source::adopt::foreign_static_sandboxes(&sandboxes);
                if !foreign.is_empty() {
                    tracing::info!(pods = ?foreign, "adopting static pods another kubelet runs");
                }
                let mut adoption = source::adopt::StaticUidAdoption::new(foreign);
                loop {
                    let mut snap = tokio::select! {
                        _ = stop.cancelled() => return,
                        s = file_rx.recv() => match s { Some(s) => s, None => return },
                    };
                    adoption.apply(&mut snap.pods);
                    if tx.send(snap.into()).await.is_err() {
                        return;
                    }
                }
            });
        }
        if let Some(url) = cfg.static_pod_url.clone() {
            // Must answer once before housekeeping removes runtime pods (upstream sourcesReady).
            expected.insert(source::HTTP_SOURCE);
            let src = source::http::UrlSource::new(
                url,
                &cfg.static_pod_url_header,
                cfg.node_name.clone(),
                cfg.http_check_frequency,
                snap_tx.clone(),
            );
            self.spawn(
                tracing::info_span!("url_source"),
                src.run(self.cancel.child_token()),
            );
        }
        let mut mirrors = None;
        if let Some(client) = api.client.clone() {
            expected.insert(source::api::API_SOURCE);
            let (mirror_mgr, mirror) =
                MirrorManager::new(client.clone(), cfg.node_name.clone(), api.status.clone());
            self.spawn(
                tracing::info_span!("mirror_pods"),
                mirror_mgr.run(self.cancel.child_token()),
            );
            let src = source::api::run(
                client.clone(),
                cfg.node_name.clone(),
                snap_tx.clone(),
                mirror.clone(),
                self.cancel.child_token(),
            );
            mirrors = Some(mirror);
            self.spawn(tracing::info_span!("api_source"), src);
            if cfg.register_node {
                let agent = NodeAgent {
                    heartbeat: api.heartbeat.clone().unwrap_or_else(|| client.clone()),
                    client,
                    settings: node.settings.clone(),
                    machine: node.machine.clone(),
                    recorder: api.recorder.clone(),
                    runtime_version: format!(
                        "{}://{}",
                        version.runtime_name, version.runtime_version
                    ),
                    cri: self.cri.clone(),
                    health: self.health.clone(),
                    eviction: eviction.clone(),
                    config: cfg.node_status,
                    pods_dir: cfg.root_dir.join("pods"),
                    devices,
                };
                self.spawn(
                    tracing::info_span!("node"),
                    agent.run(self.cancel.child_token()),
                );
            }
        }
        Sources {
            config,
            expected,
            mirrors,
        }
    }

    /// The pod-resources API (upstream `ListenAndServePodResources`) on
    /// `<root-dir>/pod-resources/kubelet.sock`, over the active pods and the device manager.
    pub async fn pod_resources(
        &mut self,
        pods: &PodRuntime,
        eviction: &EvictionSide,
    ) -> Result<(), KubeletError> {
        let source = crate::podresources::Source {
            pods: eviction.active_pods.subscribe(),
            devices: pods.ctx.cm.devices().cloned(),
            cpu: pods.ctx.cm.cpu().cloned(),
        };
        let run = crate::podresources::serve(&self.cfg.root_dir, source, self.cancel.child_token())
            .await?;
        self.spawn(tracing::info_span!("pod_resources"), run);
        Ok(())
    }

    /// The pod workers on the kubelet's syncer, and the SyncLoop over everything above.
    pub fn sync_loop(
        &mut self,
        pods: PodRuntime,
        sources: Sources,
        api: ApiSide,
        eviction: EvictionSide,
    ) -> (SyncLoop<Syncer>, sync_loop::Inputs) {
        let (worker_tx, worker_events) = mpsc::unbounded_channel();
        let cm = pods.ctx.cm.clone();
        let timeline = pods.ctx.timeline.clone();
        let csi = pods.ctx.csi.clone();
        let workers = PodWorkers::new(
            Arc::new(Syncer { ctx: pods.ctx }),
            worker_tx,
            self.cancel.child_token(),
        );
        let sync_loop = SyncLoop {
            sync_frequency: self.cfg.sync_frequency,
            housekeeping_period: self.cfg.pod_housekeeping_period,
            root_dir: self.cfg.root_dir.clone(),
            pods: BTreeMap::new(),
            seen_sources: HashSet::new(),
            expected_sources: sources.expected,
            workers,
            status: api.status,
            health: self.health.clone(),
            runtime_pods: pods.runtime_pods,
            mirrors: sources.mirrors,
            recorder: api.recorder,
            node_view: pods.node_view,
            prober: pods.prober,
            probe_results: pods.probe_results,
            object_cache: pods.object_cache,
            cm,
            eviction: eviction.handle,
            active_pods: eviction.active_pods,
            timeline,
            csi,
            heap_released_at: 0,
            static_published: None,
            static_uids: Default::default(),
        };
        let inputs = sync_loop::Inputs {
            config: sources.config,
            pleg: pods.pleg,
            worker_events,
            probe_updates: pods.probe_updates,
            object_changes: pods.object_changes,
            gc_states: pods.gc_states,
            evictions: eviction.requests,
        };
        (sync_loop, inputs)
    }
}
/// The 10250 server: TLS from the configured files or a self-signed pair in `<root-dir>/pki`.
/// Without an API server client the webhooks cannot work (upstream refuses to start then); we
/// start anyway, say so, and such requests fail closed (401 / 500).
async fn secure_server(
    cfg: &KubeletConfig,
    node_ip: Option<std::net::IpAddr>,
    serving: Option<Arc<crate::certificate::manager::ServingCert>>,
    deps: server::SecureDeps,
    cancel: CancellationToken,
) -> Result<impl std::future::Future<Output = ()>, KubeletError> {
    let client_ca = cfg.authentication.client_ca_file.as_deref();
    let tls = match serving {
        Some(cert) => server::tls::server_config_with_resolver(cert, client_ca, &cfg.serving_tls)?,
        None => {
            let (crt, key) = match (&cfg.tls_cert_file, &cfg.tls_private_key_file) {
                (Some(c), Some(k)) => (c.clone(), k.clone()),
                _ => server::tls::ensure_self_signed(&cfg.root_dir, &cfg.node_name, node_ip)?,
            };
            server::tls::server_config(&crt, &key, client_ca, &cfg.serving_tls)?
        }
    };
    if cfg.kubeconfig.is_none()
        && (cfg.authentication.webhook_enabled
            || cfg.authorization.mode == crate::config::AuthorizationMode::Webhook)
    {
        warn!("webhook authentication/authorization is configured without --kubeconfig: bearer tokens get 401 and Webhook authorization answers 500 on the secure port");
    }
    let addr = SocketAddr::new(cfg.address, cfg.port);
    Ok(server::bind_secure(addr, tls, deps, cancel).await?)
}
