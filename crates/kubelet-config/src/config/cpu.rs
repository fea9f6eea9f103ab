//! The CPU and topology managers' settings (upstream `cpuManagerPolicy`,
//! `cpuManagerPolicyOptions`, `cpuManagerReconcilePeriod`, `reservedSystemCPUs`,
//! `topologyManagerPolicy`, `topologyManagerScope`), their validation in upstream's words, and
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
        }
    }
}

impl CpuManagerConfig {
    pub fn is_static(&self) -> bool {
        self.policy == "static"
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
        ] {
            let e = load(extra).unwrap_err().to_string();
            assert!(e.contains(want), "{extra}: want {want:?} in {e}");
        }
    }
}
