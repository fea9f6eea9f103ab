//! The CPU and topology managers' settings (upstream `cpuManagerPolicy`,
//! `cpuManagerPolicyOptions`, `cpuManagerReconcilePeriod`, `reservedSystemCPUs`,
//! `topologyManagerPolicy`, `topologyManagerScope`, `topologyManagerPolicyOptions`), their
//! validation in upstream's words, and
//! `reservedSystemCPUs` overriding the cpu reservations as `cmd/kubelet/app/server.go` does.

use std::collections::BTreeMap;
use std::time::Duration;

use super::cgroups::CgroupConfig;
use super::Reader;
use crate::cpuset::CpuSet;

/// The CPU manager policy options rkubelet implements (upstream `static` policy options).
pub const FULL_PCPUS_ONLY: &str = "full-pcpus-only";

/// Upstream's other options: known names, refused with a clear message rather than ignored.
const UPSTREAM_OPTIONS: &[&str] = &[
    "distribute-cpus-across-numa",
    "align-by-socket",
    "distribute-cpus-across-cores",
    "strict-cpu-reservation",
    "prefer-align-cpus-by-uncorecache",
];

/// Topology manager policy options (upstream `topologymanager/policy_options.go`): the stable
/// one, and the one behind `TopologyManagerPolicyBetaOptions`.
pub const PREFER_CLOSEST_NUMA_NODES: &str = "prefer-closest-numa-nodes";
pub const MAX_ALLOWABLE_NUMA_NODES: &str = "max-allowable-numa-nodes";
/// Upstream `defaultMaxAllowableNUMANodes`.
pub const DEFAULT_MAX_ALLOWABLE_NUMA_NODES: usize = 8;

#[derive(Debug, Clone, PartialEq)]
pub struct CpuManagerConfig {
    /// `cpuManagerPolicy`: `none` (default) or `static`.
    pub policy: String,
    /// `cpuManagerPolicyOptions`.
    pub policy_options: BTreeMap<String, String>,
    /// `cpuManagerReconcilePeriod` (10s).
    pub reconcile_period: Duration,
    /// `reservedSystemCPUs` / `--reserved-cpus`, parsed (empty when unset).
    pub reserved_system_cpus: CpuSet,
    /// `topologyManagerPolicy`: none, best-effort, restricted, single-numa-node.
    pub topology_policy: String,
    /// `topologyManagerScope`: container or pod.
    pub topology_scope: String,
    /// `topologyManagerPolicyOptions`.
    pub topology_policy_options: BTreeMap<String, String>,
    /// `featureGates.TopologyManagerPolicyOptions` (GA, on) and
    /// `TopologyManagerPolicyBetaOptions` (beta, on).
    pub topology_options_gate: bool,
    pub topology_beta_options_gate: bool,
}

impl Default for CpuManagerConfig {
    fn default() -> Self {
        CpuManagerConfig {
            policy: "none".into(),
            policy_options: BTreeMap::new(),
            reconcile_period: Duration::from_secs(10),
            reserved_system_cpus: CpuSet::new(),
            topology_policy: "none".into(),
            topology_scope: "container".into(),
            topology_policy_options: BTreeMap::new(),
            topology_options_gate: true,
            topology_beta_options_gate: true,
        }
    }
}

impl CpuManagerConfig {
    pub fn is_static(&self) -> bool {
        self.policy == "static"
    }

    /// `prefer-closest-numa-nodes` as a bool (validated at load).
    pub fn prefer_closest_numa_nodes(&self) -> bool {
        self.topology_policy_options
            .get(PREFER_CLOSEST_NUMA_NODES)
            .and_then(|v| parse_go_bool(v))
            .unwrap_or(false)
    }

    /// `max-allowable-numa-nodes`, 8 unless set (validated at load).
    pub fn max_allowable_numa_nodes(&self) -> usize {
        self.topology_policy_options
            .get(MAX_ALLOWABLE_NUMA_NODES)
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_MAX_ALLOWABLE_NUMA_NODES)
    }

    /// `full-pcpus-only` as a bool (validated at load).
    pub fn full_pcpus_only(&self) -> bool {
        self.policy_options
            .get(FULL_PCPUS_ONLY)
            .and_then(|v| parse_go_bool(v))
            .unwrap_or(false)
    }
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Reads the fields; `reservedSystemCPUs` then replaces the cpu reservations (upstream: "it
/// will overwrite the cpu setting in KubeReserved and SystemReserved").
pub(super) fn read(r: &mut Reader, out: &mut CpuManagerConfig, cgroups: &mut CgroupConfig) {
    r.string_into("cpuManagerPolicy", &mut out.policy);
    if let Some(m) = r.string_map("cpuManagerPolicyOptions") {
        out.policy_options = m;
    }
    r.duration("cpuManagerReconcilePeriod", &mut out.reconcile_period);
    r.string_into("topologyManagerPolicy", &mut out.topology_policy);
    r.string_into("topologyManagerScope", &mut out.topology_scope);
    if let Some(m) = r.string_map("topologyManagerPolicyOptions") {
        out.topology_policy_options = m;
    }
    if let Some(s) = r.string("reservedSystemCPUs") {
        match CpuSet::parse(&s) {
            Ok(set) => out.reserved_system_cpus = set,
            Err(e) => r.errors.push(format!(
                "invalid configuration: unable to parse reservedSystemCPUs (--reserved-cpus) {s}, error: {e}"
            )),
        }
    }
    if !out.reserved_system_cpus.is_empty() {
        cgroups.kube_reserved.remove("cpu");
        cgroups
            .system_reserved
            .insert("cpu".into(), out.reserved_system_cpus.len().to_string());
    }
}

/// Upstream's checks (`ValidateKubeletConfiguration`, `NewManager`, `NewStaticPolicy`'s
/// option parsing), every failure listed.
pub(super) fn validate(c: &CpuManagerConfig, cgroups: &CgroupConfig, errors: &mut Vec<String>) {
    if c.policy != "none" && c.policy != "static" {
        errors.push(format!(
            "cpuManagerPolicy (--cpu-manager-policy): unknown policy: \"{}\"",
            c.policy
        ));
    }
    if !c.reserved_system_cpus.is_empty()
        && (!cgroups.system_reserved_cgroup.is_empty() || !cgroups.kube_reserved_cgroup.is_empty())
    {
        errors.push("invalid configuration: can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)".into());
    }
    validate_topology_options(c, errors);
    if c.is_static() {
        for (name, value) in &c.policy_options {
            if name == FULL_PCPUS_ONLY {
                if parse_go_bool(value).is_none() {
                    errors.push(format!(
                        "cpuManagerPolicyOptions: bad value for option \"{name}\": strconv.ParseBool: parsing \"{value}\": invalid syntax"
                    ));
                }
            } else if UPSTREAM_OPTIONS.contains(&name.as_str()) {
                errors.push(format!(
                    "cpuManagerPolicyOptions: option \"{name}\" is not supported by rkubelet yet (only \"{FULL_PCPUS_ONLY}\")"
                ));
            } else {
                errors.push(format!(
                    "cpuManagerPolicyOptions: unsupported CPU Manager policy option: \"{name}\""
                ));
            }
        }
    }
}

/// Upstream `ValidateKubeletConfiguration`'s gate check and `NewPolicyOptions` (with
/// `CheckPolicyOptionAvailable`), each failure in upstream's words.
fn validate_topology_options(c: &CpuManagerConfig, errors: &mut Vec<String>) {
    if c.topology_policy_options.is_empty() {
        return;
    }
    if !c.topology_options_gate {
        errors.push("invalid configuration: topologyManagerPolicyOptions requires feature gate TopologyManagerPolicyOptions enabled".into());
        return;
    }
    let mut err = |m: String| errors.push(format!("topologyManagerPolicyOptions: {m}"));
    for (name, value) in &c.topology_policy_options {
        match name.as_str() {
            PREFER_CLOSEST_NUMA_NODES => {
                if parse_go_bool(value).is_none() {
                    err(format!("bad value for option \"{name}\": strconv.ParseBool: parsing \"{value}\": invalid syntax"));
                }
            }
            MAX_ALLOWABLE_NUMA_NODES if !c.topology_beta_options_gate => err(format!(
                "Topology Manager Policy Beta-level Options not enabled, but option \"{name}\" provided"
            )),
            MAX_ALLOWABLE_NUMA_NODES => match value.parse::<i64>() {
                Err(_) => err(format!("unable to convert policy option to integer \"{name}\": strconv.Atoi: parsing \"{value}\": invalid syntax")),
                Ok(n) if n < DEFAULT_MAX_ALLOWABLE_NUMA_NODES as i64 => err(format!(
                    "the minimum value of \"{name}\" should not be less than {DEFAULT_MAX_ALLOWABLE_NUMA_NODES}"
                )),
                Ok(_) => {}
            },
            _ => err(format!("unknown Topology Manager Policy option: \"{name}\"")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(extra: &str) -> Result<crate::config::Loaded, crate::config::ConfigError> {
        crate::config::parse(&format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{extra}"
        ))
    }

    #[test]
    fn reads_the_fields_and_reserved_cpus_override_cpu_reservations() {
        let l = load(
            "cpuManagerPolicy: static\ncpuManagerReconcilePeriod: 5s\n\
             cpuManagerPolicyOptions: {full-pcpus-only: \"true\"}\nreservedSystemCPUs: \"0,2-3\"\n\
             kubeReserved: {cpu: 500m, memory: 1Gi}\nsystemReserved: {cpu: \"1\"}\n\
             topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n",
        )
        .unwrap();
        let c = &l.config.cpu_manager;
        assert!(c.is_static() && c.full_pcpus_only());
        assert_eq!(c.reconcile_period, Duration::from_secs(5));
        assert_eq!(c.reserved_system_cpus.to_string(), "0,2-3");
        assert_eq!(
            (c.topology_policy.as_str(), c.topology_scope.as_str()),
            ("single-numa-node", "pod")
        );
        let cg = &l.config.cgroups;
        assert_eq!(cg.kube_reserved.get("cpu"), None);
        assert_eq!(cg.kube_reserved["memory"], "1Gi");
        assert_eq!(cg.system_reserved["cpu"], "3");
        assert!(
            !l.warnings.iter().any(|w| w.contains("cpuManager")
                || w.contains("reservedSystemCPUs")
                || w.contains("topologyManager")),
            "{:?}",
            l.warnings
        );
        let d = load("").unwrap().config.cpu_manager;
        assert_eq!(d, CpuManagerConfig::default());
        assert!(!d.prefer_closest_numa_nodes());
        assert_eq!(d.max_allowable_numa_nodes(), 8);
        let t = load(
            "topologyManagerPolicyOptions: {prefer-closest-numa-nodes: \"true\", \
             max-allowable-numa-nodes: \"12\"}\n",
        )
        .unwrap();
        assert!(t.config.cpu_manager.prefer_closest_numa_nodes());
        assert_eq!(t.config.cpu_manager.max_allowable_numa_nodes(), 12);
        assert!(
            !t.warnings.iter().any(|w| w.contains("topologyManager")),
            "{:?}",
            t.warnings
        );
        // A zero period in a file is upstream's default.
        assert_eq!(
            load("cpuManagerReconcilePeriod: 0s\n")
                .unwrap()
                .config
                .cpu_manager
                .reconcile_period,
            Duration::from_secs(10)
        );
    }

    #[test]
    fn upstream_validation_messages() {
        for (extra, want) in [
            ("cpuManagerPolicy: dynamic\n", "unknown policy: \"dynamic\""),
            (
                "reservedSystemCPUs: \"0-a\"\n",
                "unable to parse reservedSystemCPUs (--reserved-cpus) 0-a",
            ),
            (
                "reservedSystemCPUs: \"0\"\nsystemReservedCgroup: /system\n",
                "can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup",
            ),
            (
                "cpuManagerPolicy: static\ncpuManagerPolicyOptions: {full-pcpus-only: maybe}\n",
                "bad value for option \"full-pcpus-only\"",
            ),
            (
                "cpuManagerPolicy: static\ncpuManagerPolicyOptions: {bogus: \"true\"}\n",
                "unsupported CPU Manager policy option: \"bogus\"",
            ),
            (
                "cpuManagerPolicy: static\ncpuManagerPolicyOptions: {align-by-socket: \"true\"}\n",
                "not supported by rkubelet yet",
            ),
            (
                "topologyManagerPolicy: strict\n",
                "topologyManagerPolicy (--topology-manager-policy)",
            ),
            (
                "topologyManagerPolicyOptions: {bogus: \"true\"}\n",
                "topologyManagerPolicyOptions: unknown Topology Manager Policy option: \"bogus\"",
            ),
            (
                "topologyManagerPolicyOptions: {prefer-closest-numa-nodes: maybe}\n",
                "bad value for option \"prefer-closest-numa-nodes\": strconv.ParseBool: parsing \"maybe\": invalid syntax",
            ),
            (
                "topologyManagerPolicyOptions: {max-allowable-numa-nodes: many}\n",
                "unable to convert policy option to integer \"max-allowable-numa-nodes\": strconv.Atoi: parsing \"many\": invalid syntax",
            ),
            (
                "topologyManagerPolicyOptions: {max-allowable-numa-nodes: \"4\"}\n",
                "the minimum value of \"max-allowable-numa-nodes\" should not be less than 8",
            ),
            (
                "featureGates: {TopologyManagerPolicyBetaOptions: false}\n\
                 topologyManagerPolicyOptions: {max-allowable-numa-nodes: \"16\"}\n",
                "Topology Manager Policy Beta-level Options not enabled, but option \"max-allowable-numa-nodes\" provided",
            ),
            (
                "featureGates: {TopologyManagerPolicyOptions: false}\n\
                 topologyManagerPolicyOptions: {prefer-closest-numa-nodes: \"true\"}\n",
                "invalid configuration: topologyManagerPolicyOptions requires feature gate TopologyManagerPolicyOptions enabled",
            ),
        ] {
            let e = load(extra).unwrap_err().to_string();
            assert!(e.contains(want), "{extra}: want {want:?} in {e}");
        }
    }
}
