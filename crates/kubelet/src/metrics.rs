//! The kubelet's own Prometheus metrics under upstream's names (`pkg/kubelet/metrics`), so
//! dashboards and alerts written for the upstream kubelet work unchanged.
//!
//! One process-wide registry, as upstream's `legacyregistry`: metrics are recorded where the
//! events happen (PLEG, pod workers, CRI calls, probes) without threading a handle through every
//! manager, and `/metrics` renders the registry.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Upstream's pod start buckets (`PodStartDuration`, `PodStartSLIDuration`), in seconds.
const POD_START_BUCKETS: [f64; 25] = [
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

pub struct Metrics {
    registry: Registry,
    /// `/metrics/probes`: upstream keeps the prober's metrics out of `/metrics`, in a registry
    /// of their own.
    probes_registry: Registry,
    pub node_name: IntGaugeVec,
    pub pod_start_duration: Histogram,
    pub pod_start_sli_duration: Histogram,
    /// Beyond upstream (issue 20): each start-up stage of a pod, from the previous milestone of
    /// its timeline (see `crate::timeline`).
    pub pod_start_stage_duration: HistogramVec,
    pub pod_worker_duration: HistogramVec,
    pub pleg_relist_duration: Histogram,
    pub pleg_relist_interval: Histogram,
    /// Upstream's evented PLEG metrics, for either event stream (CRI or containerd's).
    pub evented_pleg_conn: IntCounter,
    pub evented_pleg_conn_err: IntCounter,
    pub evented_pleg_conn_latency: Histogram,
    /// Beyond upstream: runtime events received, by stream and topic.
    pub pleg_runtime_events: IntCounterVec,
    /// Beyond upstream: PLEG events a relist found that the runtime events had not reported
    /// while a stream was open (~0 when the fast path works).
    pub pleg_relist_missed_events: IntCounterVec,
    pub running_pods: IntGauge,
    pub running_containers: IntGaugeVec,
    pub runtime_operations: IntCounterVec,
    pub runtime_operations_duration: HistogramVec,
    pub runtime_operations_errors: IntCounterVec,
    pub started_pods: IntCounter,
    pub started_containers: IntCounterVec,
    pub started_containers_errors: IntCounterVec,
    pub prober_probe_total: IntCounterVec,
    pub prober_probe_duration: HistogramVec,
    pub evictions: IntCounterVec,
    /// Upstream `pkg/credentialprovider/plugin/metrics.go`.
    pub credential_provider_plugin_errors: IntCounterVec,
    pub credential_provider_plugin_duration: HistogramVec,
    /// Upstream `pkg/volume/util/metrics.go` `storage_operation_duration_seconds`.
    pub storage_operation_duration: HistogramVec,
    /// Upstream `CPUManagerPinningRequestsTotal` / `ErrorsTotal`: per container the static
    /// policy pins (integer CPUs of a Guaranteed pod), and those whose allocation failed.
    pub cpu_manager_pinning_requests: IntCounter,
    pub cpu_manager_pinning_errors: IntCounter,
    /// Upstream `TopologyManagerAdmission*`: every pod through the resource allocation admit
    /// handler, those it rejected, and how long it took (whole milliseconds, as upstream).
    pub topology_manager_admission_requests: IntCounter,
    pub topology_manager_admission_errors: IntCounter,
    pub topology_manager_admission_duration: Histogram,
}

fn histogram(name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    let opts = HistogramOpts::new(name, help).buckets(buckets);
    // Names and buckets are constants: a failure is a programming error caught by the tests.
    Histogram::with_opts(opts).expect("valid histogram")
}

fn histogram_vec(name: &str, help: &str, buckets: Vec<f64>, labels: &[&str]) -> HistogramVec {
    HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
        .expect("valid histogram")
}

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter")
}

fn exponential(start: f64, factor: f64, count: usize) -> Vec<f64> {
    prometheus::exponential_buckets(start, factor, count).expect("valid buckets")
}

impl Metrics {
    fn new() -> Self {
        let m = Metrics {
            registry: Registry::new(),
            probes_registry: Registry::new(),
            node_name: IntGaugeVec::new(
                Opts::new(
                    "kubelet_node_name",
                    "The node's name. The count is always 1.",
                ),
                &["node"],
            )
            .expect("valid gauge"),
            pod_start_duration: histogram(
                "kubelet_pod_start_duration_seconds",
                "Duration in seconds from kubelet seeing a pod for the first time to the pod \
                 starting to run",
                POD_START_BUCKETS.to_vec(),
            ),
            pod_start_sli_duration: histogram(
                "kubelet_pod_start_sli_duration_seconds",
                "Duration in seconds to start a pod, excluding time to pull images, observed \
                 from the kubelet's first sight of the pod to it running",
                POD_START_BUCKETS.to_vec(),
            ),
            pod_start_stage_duration: histogram_vec(
                "kubelet_pod_start_stage_duration_seconds",
                "Duration in seconds of each stage of a pod's start-up (admission, volumes, \
                 sandbox, image_pull, container_create, container_start, readiness), from the \
                 previous milestone of its timeline",
                exponential(0.001, 2.5, 16),
                &["stage"],
            ),
            pod_worker_duration: histogram_vec(
                "kubelet_pod_worker_duration_seconds",
                "Duration in seconds to sync a single pod. Broken down by operation type: \
                 create, update, or sync",
                prometheus::DEFAULT_BUCKETS.to_vec(),
                &["operation_type"],
            ),
            pleg_relist_duration: histogram(
                "kubelet_pleg_relist_duration_seconds",
                "Duration in seconds for relisting pods in PLEG.",
                prometheus::DEFAULT_BUCKETS.to_vec(),
            ),
            pleg_relist_interval: histogram(
                "kubelet_pleg_relist_interval_seconds",
                "Interval in seconds between relisting in PLEG.",
                prometheus::DEFAULT_BUCKETS.to_vec(),
            ),
            evented_pleg_conn: IntCounter::new(
                "kubelet_evented_pleg_connection_success_count",
                "The number of times a streaming client was obtained to receive CRI Events.",
            )
            .expect("valid counter"),
            evented_pleg_conn_err: IntCounter::new(
                "kubelet_evented_pleg_connection_error_count",
                "The number of errors encountered during the establishment of streaming \
                 connection with the CRI runtime.",
            )
            .expect("valid counter"),
            evented_pleg_conn_latency: histogram(
                "kubelet_evented_pleg_connection_latency_seconds",
                "The latency of streaming connection with the CRI runtime, measured in seconds.",
                prometheus::DEFAULT_BUCKETS.to_vec(),
            ),
            pleg_runtime_events: counter_vec(
                "kubelet_pleg_runtime_events_total",
                "Runtime events PLEG received, by stream (cri: GetContainerEvents, containerd: \
                 containerd's events service) and topic (rkubelet-specific).",
                &["source", "topic"],
            ),
            pleg_relist_missed_events: counter_vec(
                "kubelet_pleg_relist_missed_events_total",
                "Pod lifecycle events a PLEG relist found that the runtime events had not \
                 reported although a stream was open, not counting events that came before \
                 the runtime's CRI view showed them (rkubelet-specific; ~0 when they work).",
                &["event"],
            ),
            running_pods: IntGauge::new(
                "kubelet_running_pods",
                "Number of pods that have a running pod sandbox",
            )
            .expect("valid gauge"),
            running_containers: IntGaugeVec::new(
                Opts::new(
                    "kubelet_running_containers",
                    "Number of containers currently running",
                ),
                &["container_state"],
            )
            .expect("valid gauge"),
            runtime_operations: counter_vec(
                "kubelet_runtime_operations_total",
                "Cumulative number of runtime operations by operation type.",
                &["operation_type"],
            ),
            runtime_operations_duration: histogram_vec(
                "kubelet_runtime_operations_duration_seconds",
                "Duration in seconds of runtime operations. Broken down by operation type.",
                exponential(0.005, 2.5, 14),
                &["operation_type"],
            ),
            runtime_operations_errors: counter_vec(
                "kubelet_runtime_operations_errors_total",
                "Cumulative number of runtime operation errors by operation type.",
                &["operation_type"],
            ),
            started_pods: IntCounter::new(
                "kubelet_started_pods_total",
                "Cumulative number of pods started",
            )
            .expect("valid counter"),
            started_containers: counter_vec(
                "kubelet_started_containers_total",
                "Cumulative number of containers started",
                &["container_type"],
            ),
            started_containers_errors: counter_vec(
                "kubelet_started_containers_errors_total",
                "Cumulative number of errors when starting containers",
                &["code", "container_type"],
            ),
            prober_probe_total: counter_vec(
                "prober_probe_total",
                "Cumulative number of a liveness, readiness or startup probe for a container \
                 by result.",
                &[
                    "probe_type",
                    "result",
                    "container",
                    "pod",
                    "namespace",
                    "pod_uid",
                ],
            ),
            evictions: counter_vec(
                "kubelet_evictions",
                "Cumulative number of pod evictions by eviction signal",
                &["eviction_signal"],
            ),
            credential_provider_plugin_errors: counter_vec(
                "kubelet_credential_provider_plugin_errors",
                "Number of errors from credential provider plugin",
                &["plugin_name"],
            ),
            credential_provider_plugin_duration: histogram_vec(
                "kubelet_credential_provider_plugin_duration",
                "Duration of execution in seconds for credential provider plugin",
                prometheus::DEFAULT_BUCKETS.to_vec(),
                &["plugin_name"],
            ),
            storage_operation_duration: histogram_vec(
                "storage_operation_duration_seconds",
                "Storage operation duration",
                vec![
                    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0,
                ],
                &["volume_plugin", "operation_name", "status", "migrated"],
            ),
            prober_probe_duration: histogram_vec(
                "prober_probe_duration_seconds",
                "Duration in seconds for a probe response.",
                prometheus::DEFAULT_BUCKETS.to_vec(),
                &["probe_type", "container", "pod", "namespace"],
            ),
            cpu_manager_pinning_requests: IntCounter::new(
                "kubelet_cpu_manager_pinning_requests_total",
                "The number of cpu core allocations which required pinning.",
            )
            .expect("valid counter"),
            cpu_manager_pinning_errors: IntCounter::new(
                "kubelet_cpu_manager_pinning_errors_total",
                "The number of cpu core allocations which required pinning failed.",
            )
            .expect("valid counter"),
            topology_manager_admission_requests: IntCounter::new(
                "kubelet_topology_manager_admission_requests_total",
                "The number of admission requests where resources have to be aligned.",
            )
            .expect("valid counter"),
            topology_manager_admission_errors: IntCounter::new(
                "kubelet_topology_manager_admission_errors_total",
                "The number of admission request failures where resources could not be aligned.",
            )
            .expect("valid counter"),
            topology_manager_admission_duration: histogram(
                "kubelet_topology_manager_admission_duration_ms",
                "Duration in milliseconds to serve a pod admission request.",
                exponential(0.05, 2.0, 15),
            ),
        };
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(m.node_name.clone()),
            Box::new(m.pod_start_duration.clone()),
            Box::new(m.pod_start_sli_duration.clone()),
            Box::new(m.pod_start_stage_duration.clone()),
            Box::new(m.pod_worker_duration.clone()),
            Box::new(m.pleg_relist_duration.clone()),
            Box::new(m.pleg_relist_interval.clone()),
            Box::new(m.evented_pleg_conn.clone()),
            Box::new(m.evented_pleg_conn_err.clone()),
            Box::new(m.evented_pleg_conn_latency.clone()),
            Box::new(m.pleg_runtime_events.clone()),
            Box::new(m.pleg_relist_missed_events.clone()),
            Box::new(m.running_pods.clone()),
            Box::new(m.running_containers.clone()),
            Box::new(m.runtime_operations.clone()),
            Box::new(m.runtime_operations_duration.clone()),
            Box::new(m.runtime_operations_errors.clone()),
            Box::new(m.started_pods.clone()),
            Box::new(m.started_containers.clone()),
            Box::new(m.started_containers_errors.clone()),
            Box::new(m.evictions.clone()),
            Box::new(m.credential_provider_plugin_errors.clone()),
            Box::new(m.credential_provider_plugin_duration.clone()),
            Box::new(m.storage_operation_duration.clone()),
            Box::new(m.cpu_manager_pinning_requests.clone()),
            Box::new(m.cpu_manager_pinning_errors.clone()),
            Box::new(m.topology_manager_admission_requests.clone()),
            Box::new(m.topology_manager_admission_errors.clone()),
            Box::new(m.topology_manager_admission_duration.clone()),
        ];
        for c in collectors {
            m.registry.register(c).expect("unique metric names");
        }
        let probes: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(m.prober_probe_total.clone()),
            Box::new(m.prober_probe_duration.clone()),
        ];
        for c in probes {
            m.probes_registry.register(c).expect("unique metric names");
        }
        m
    }

    /// The registry in the Prometheus text format (version 0.0.4), for `/metrics`.
    pub fn render(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail on I/O; a collector error leaves what was written.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        buf
    }

    /// The prober's metrics in the Prometheus text format, for `/metrics/probes`.
    pub fn render_probes(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.probes_registry.gather(), &mut buf);
        buf
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn get() -> &'static Metrics {
    &METRICS
}

/// Upstream's `operation_type` for a CRI call: the RPC name in snake case, with `pod_sandbox`
/// spelled `podsandbox` as upstream's instrumented service does.
pub fn operation_type(op: &str) -> String {
    op.replace("pod_sandbox", "podsandbox")
}

/// Records one CRI call (upstream `instrumentedRuntimeService`).
pub fn record_runtime_operation(op: &'static str, elapsed: Duration, ok: bool) {
    let m = get();
    let t = operation_type(op);
    m.runtime_operations.with_label_values(&[&t]).inc();
    m.runtime_operations_duration
        .with_label_values(&[&t])
        .observe(elapsed.as_secs_f64());
    if !ok {
        m.runtime_operations_errors.with_label_values(&[&t]).inc();
    }
}

/// Records one volume operation (upstream `OperationCompleteHook`): `plugin` as
/// `kubernetes.io/local-volume`, `op` as `volume_mount`, `volume_unmount`, `map_volume`;
/// status `success` or `fail-unknown`, never migrated (no in-tree plugin is migrated here).
pub fn record_storage_operation(plugin: &str, op: &str, elapsed: Duration, ok: bool) {
    let status = if ok { "success" } else { "fail-unknown" };
    get()
        .storage_operation_duration
        .with_label_values(&[plugin, op, status, "false"])
        .observe(elapsed.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_upstream_names() {
        get().node_name.with_label_values(&["n1"]).set(1);
        record_runtime_operation("list_pod_sandbox", Duration::from_millis(3), true);
        record_runtime_operation("start_container", Duration::from_millis(30), false);
        get().pod_start_duration.observe(1.5);
        record_storage_operation(
            "kubernetes.io/local-volume",
            "volume_unmount",
            Duration::from_millis(2),
            false,
        );
        let text = String::from_utf8(get().render()).unwrap();
        for want in [
            "kubelet_node_name{node=\"n1\"} 1",
            "kubelet_runtime_operations_total{operation_type=\"list_podsandbox\"}",
            "kubelet_runtime_operations_errors_total{operation_type=\"start_container\"} 1",
            "# TYPE kubelet_runtime_operations_duration_seconds histogram",
            "kubelet_pod_start_duration_seconds_bucket{le=\"2\"}",
            "# TYPE kubelet_running_pods gauge",
            "storage_operation_duration_seconds_count{migrated=\"false\",operation_name=\"volume_unmount\",status=\"fail-unknown\",volume_plugin=\"kubernetes.io/local-volume\"} 1",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }

    #[test]
    fn prober_metrics_are_on_their_own_endpoint() {
        get()
            .prober_probe_total
            .with_label_values(&["Readiness", "successful", "c", "p", "ns", "u1"])
            .inc();
        let probes = String::from_utf8(get().render_probes()).unwrap();
        assert!(
            probes.contains(
                "prober_probe_total{container=\"c\",namespace=\"ns\",pod=\"p\",pod_uid=\"u1\",probe_type=\"Readiness\",result=\"successful\"} 1"
            ),
            "{probes}"
        );
        let main = String::from_utf8(get().render()).unwrap();
        assert!(!main.contains("prober_probe_total"), "{main}");
    }
}
