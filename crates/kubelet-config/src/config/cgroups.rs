//! The container manager's settings (upstream `cm.NodeConfig` and `NodeAllocatableConfig`, read
//! from `KubeletConfiguration` in `cmd/kubelet/app/server.go`), and upstream's validation of them
//! (`validation.ValidateKubeletConfiguration`, with its wording so operators recognise it).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{format_duration, Reader};

/// `enforceNodeAllocatable` keys (upstream `kubetypes.NodeAllocatableEnforcementKey` & co).
pub const ENFORCE_PODS: &str = "pods";
pub const ENFORCE_SYSTEM_RESERVED: &str = "system-reserved";
pub const ENFORCE_KUBE_RESERVED: &str = "kube-reserved";
pub const ENFORCE_NONE: &str = "none";

/// Upstream's fixed CFS period, the only one without the `CustomCPUCFSQuotaPeriod` gate.
pub const DEFAULT_CFS_PERIOD: Duration = Duration::from_millis(100);

/// What the container manager needs from the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupConfig {
    /// `cgroupsPerQOS`: the `kubepods` hierarchy with QoS and pod cgroups.
    pub cgroups_per_qos: bool,
    /// `cgroupRoot`, cgroupfs-style for both drivers (upstream `ParseCgroupfsToCgroupName`);
    /// empty means `/`, as upstream defaults it when cgroupsPerQOS is on.
    pub cgroup_root: String,
    /// `cgroupDriver`: `cgroupfs` or `systemd`.
    pub cgroup_driver: String,
    /// `kubeReserved` / `systemReserved`: resource name -> quantity text.
    pub kube_reserved: BTreeMap<String, String>,
    pub system_reserved: BTreeMap<String, String>,
    /// `kubeReservedCgroup` / `systemReservedCgroup`, where those reservations are enforced.
    pub kube_reserved_cgroup: String,
    pub system_reserved_cgroup: String,
    /// `enforceNodeAllocatable` (default `["pods"]`).
    pub enforce_node_allocatable: Vec<String>,
    /// `podPidsLimit`; -1 (or 0) leaves pods' pids unlimited.
    pub pod_pids_limit: i64,
    /// `cpuCFSQuota`: CPU limits become CFS quotas.
    pub cpu_cfs_quota: bool,
    /// `cpuCFSQuotaPeriod`.
    pub cpu_cfs_quota_period: Duration,
    /// `featureGates.CustomCPUCFSQuotaPeriod`: without it the period stays 100ms, as upstream.
    pub custom_cfs_quota_period: bool,
    /// `failSwapOn`: refuse to start while swap is on.
    pub fail_swap_on: bool,
    /// `protectKernelDefaults`: refuse to start when a kernel tunable the kubelet relies on
    /// differs from upstream's value, instead of setting it (upstream `setupKernelTunables`).
    pub protect_kernel_defaults: bool,
    /// `evictionHard` after defaulting (the same map as `KubeletConfig::eviction.hard`):
    /// allocatable holds the memory and nodefs thresholds back (upstream
    /// `GetNodeAllocatableReservation`).
    pub eviction_hard: BTreeMap<String, String>,
}

impl Default for CgroupConfig {
    fn default() -> Self {
        CgroupConfig {
            cgroups_per_qos: true,
            cgroup_root: String::new(),
            cgroup_driver: "cgroupfs".into(),
            kube_reserved: BTreeMap::new(),
            system_reserved: BTreeMap::new(),
            kube_reserved_cgroup: String::new(),
            system_reserved_cgroup: String::new(),
            enforce_node_allocatable: vec![ENFORCE_PODS.into()],
            pod_pids_limit: -1,
            cpu_cfs_quota: true,
            cpu_cfs_quota_period: DEFAULT_CFS_PERIOD,
            custom_cfs_quota_period: false,
            fail_swap_on: true,
            protect_kernel_defaults: false,
            eviction_hard: default_eviction_hard(),
        }
    }
}

pub use super::eviction::default_eviction_hard;

impl CgroupConfig {
    /// The CFS period containers and pod cgroups get: the configured one only with the gate.
    pub fn effective_cfs_period(&self) -> Duration {
        if self.custom_cfs_quota_period {
            self.cpu_cfs_quota_period
        } else {
            DEFAULT_CFS_PERIOD
        }
    }

    /// Whether `enforceNodeAllocatable` names `key`.
    pub fn enforces(&self, key: &str) -> bool {
        self.enforce_node_allocatable.iter().any(|k| k == key)
    }
}

/// Reads the fields from the top-level reader (each one removed from it).
pub(super) fn read(r: &mut Reader, out: &mut CgroupConfig) {
    if let Some(b) = r.bool("cgroupsPerQOS") {
        out.cgroups_per_qos = b;
    }
    r.string_into("cgroupRoot", &mut out.cgroup_root);
    r.string_into("cgroupDriver", &mut out.cgroup_driver);
    if let Some(m) = r.string_map("kubeReserved") {
        out.kube_reserved = m;
    }
    if let Some(m) = r.string_map("systemReserved") {
        out.system_reserved = m;
    }
    r.string_into("kubeReservedCgroup", &mut out.kube_reserved_cgroup);
    r.string_into("systemReservedCgroup", &mut out.system_reserved_cgroup);
    if let Some(l) = r.string_list("enforceNodeAllocatable") {
        out.enforce_node_allocatable = l;
    }
    if let Some(n) = r.int("podPidsLimit") {
        out.pod_pids_limit = n;
    }
    if let Some(b) = r.bool("cpuCFSQuota") {
        out.cpu_cfs_quota = b;
    }
    r.duration("cpuCFSQuotaPeriod", &mut out.cpu_cfs_quota_period);
    if let Some(b) = r.bool("failSwapOn") {
        out.fail_swap_on = b;
    }
    if let Some(b) = r.bool("protectKernelDefaults") {
        out.protect_kernel_defaults = b;
    }
}

/// Upstream's checks of these fields, every failure listed.
pub(super) fn validate(c: &CgroupConfig, errors: &mut Vec<String>) {
    if c.cgroup_driver != "cgroupfs" && c.cgroup_driver != "systemd" {
        errors.push(format!(
            "cgroupDriver (--cgroup-driver): {:?} is not supported; use \"cgroupfs\" or \"systemd\"",
            c.cgroup_driver
        ));
    }
    if !c.cgroup_root.is_empty() && !c.cgroup_root.starts_with('/') {
        errors.push(format!(
            "cgroupRoot (--cgroup-root): {:?} must be an absolute cgroupfs-style path",
            c.cgroup_root
        ));
    }
    if !c.cgroups_per_qos && !c.enforce_node_allocatable.is_empty() {
        errors.push("invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) is not supported unless cgroupsPerQOS (--cgroups-per-qos) feature is turned on".into());
    }
    for key in &c.enforce_node_allocatable {
        match key.as_str() {
            ENFORCE_PODS => {}
            ENFORCE_SYSTEM_RESERVED if c.system_reserved_cgroup.is_empty() => errors.push(
                "invalid configuration: systemReservedCgroup (--system-reserved-cgroup) must be specified when \"system-reserved\" contained in enforceNodeAllocatable (--enforce-node-allocatable)".into(),
            ),
            ENFORCE_KUBE_RESERVED if c.kube_reserved_cgroup.is_empty() => errors.push(
                "invalid configuration: kubeReservedCgroup (--kube-reserved-cgroup) must be specified when \"kube-reserved\" contained in enforceNodeAllocatable (--enforce-node-allocatable)".into(),
            ),
            ENFORCE_SYSTEM_RESERVED | ENFORCE_KUBE_RESERVED => {}
            ENFORCE_NONE if c.enforce_node_allocatable.len() > 1 => errors.push(
                "invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional enforcements when \"none\" is specified".into(),
            ),
            ENFORCE_NONE => {}
            other => errors.push(format!(
                "invalid configuration: option {other:?} specified for enforceNodeAllocatable (--enforce-node-allocatable). Valid options are \"pods\", \"system-reserved\", \"kube-reserved\", or \"none\""
            )),
        }
    }
    if c.custom_cfs_quota_period {
        let p = c.cpu_cfs_quota_period;
        if p < Duration::from_millis(1) || p > Duration::from_secs(1) {
            errors.push(format!(
                "invalid configuration: cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {{{}}} must be between 1ms and 1sec, inclusive",
                format_duration(p)
            ));
        }
    } else if c.cpu_cfs_quota_period != DEFAULT_CFS_PERIOD {
        errors.push(format!(
            "invalid configuration: cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {} requires feature gate CustomCPUCFSQuotaPeriod",
            format_duration(c.cpu_cfs_quota_period)
        ));
    }
    for (field, map) in [
        ("kubeReserved", &c.kube_reserved),
        ("systemReserved", &c.system_reserved),
    ] {
        for (name, value) in map {
            if let Err(e) = check_reservation(name, value) {
                errors.push(format!("{field}[{name}]: {e}"));
            }
        }
    }
}

/// Upstream `parseResourceList`: cpu, memory, ephemeral-storage, pid and hugepages-* only, each a
/// non-negative quantity (pid a whole number).
fn check_reservation(name: &str, value: &str) -> Result<(), String> {
    let known = matches!(name, "cpu" | "memory" | "ephemeral-storage" | "pid")
        || name.starts_with("hugepages-");
    if !known {
        return Err(format!("cannot reserve {name:?} resource"));
    }
    let milli = crate::quantity::parse_milli(value)
        .ok_or_else(|| format!("{value:?} is not a valid quantity"))?;
    if milli < 0 {
        return Err(format!(
            "resource quantity for {name:?} cannot be negative: {value}"
        ));
    }
    if name == "pid" && milli % 1000 != 0 {
        return Err(format!("{value:?} is not a whole number of process IDs"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(c: &CgroupConfig) -> Vec<String> {
        let mut e = Vec::new();
        validate(c, &mut e);
        e
    }

    #[test]
    fn defaults_are_valid_and_upstreams() {
        let c = CgroupConfig::default();
        assert!(errors(&c).is_empty(), "{:?}", errors(&c));
        assert!(c.enforces(ENFORCE_PODS));
        assert_eq!(c.effective_cfs_period(), Duration::from_millis(100));
        assert_eq!(c.eviction_hard["memory.available"], "100Mi");
    }

    #[test]
    fn upstream_validation_messages() {
        type Change = Box<dyn Fn(&mut CgroupConfig)>;
        let cases: Vec<(Change, &str)> = vec![
            (
                Box::new(|c| c.cgroups_per_qos = false),
                "is not supported unless cgroupsPerQOS",
            ),
            (
                Box::new(|c| c.enforce_node_allocatable.push("system-reserved".into())),
                "systemReservedCgroup (--system-reserved-cgroup) must be specified",
            ),
            (
                Box::new(|c| c.enforce_node_allocatable.push("kube-reserved".into())),
                "kubeReservedCgroup (--kube-reserved-cgroup) must be specified",
            ),
            (
                Box::new(|c| c.enforce_node_allocatable.push("none".into())),
                "may not contain additional enforcements",
            ),
            (
                Box::new(|c| c.enforce_node_allocatable = vec!["bogus".into()]),
                "option \"bogus\" specified for enforceNodeAllocatable",
            ),
            (
                Box::new(|c| c.cpu_cfs_quota_period = Duration::from_millis(50)),
                "requires feature gate CustomCPUCFSQuotaPeriod",
            ),
            (
                Box::new(|c| {
                    c.custom_cfs_quota_period = true;
                    c.cpu_cfs_quota_period = Duration::from_secs(2);
                }),
                "must be between 1ms and 1sec",
            ),
            (
                Box::new(|c| c.cgroup_driver = "docker".into()),
                "cgroupDriver (--cgroup-driver)",
            ),
            (
                Box::new(|c| c.cgroup_root = "kubepods".into()),
                "cgroupRoot (--cgroup-root)",
            ),
            (
                Box::new(|c| {
                    c.kube_reserved.insert("nvidia.com/gpu".into(), "1".into());
                }),
                "kubeReserved[nvidia.com/gpu]: cannot reserve",
            ),
            (
                Box::new(|c| {
                    c.system_reserved.insert("memory".into(), "-1Gi".into());
                }),
                "systemReserved[memory]: resource quantity for \"memory\" cannot be negative",
            ),
            (
                Box::new(|c| {
                    c.system_reserved.insert("pid".into(), "1.5".into());
                }),
                "not a whole number",
            ),
        ];
        for (change, want) in cases {
            let mut c = CgroupConfig::default();
            change(&mut c);
            let e = errors(&c);
            assert!(e.iter().any(|m| m.contains(want)), "want {want:?} in {e:?}");
        }
    }

    #[test]
    fn read_from_the_file() {
        let l = crate::config::parse(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             cgroupRoot: /rk\ncgroupDriver: systemd\ncgroupsPerQOS: true\n\
             kubeReserved: {cpu: 100m, memory: 128Mi}\nsystemReserved: {memory: 64Mi, pid: \"100\"}\n\
             podPidsLimit: 42\ncpuCFSQuota: false\nfailSwapOn: false\nprotectKernelDefaults: true\n\
             evictionHard: {memory.available: 5%}\nenforceNodeAllocatable: [pods]\n\
             featureGates: {CustomCPUCFSQuotaPeriod: true}\ncpuCFSQuotaPeriod: 50ms\n",
        )
        .unwrap();
        let c = &l.config.cgroups;
        assert_eq!(c.cgroup_root, "/rk");
        assert_eq!(c.cgroup_driver, "systemd");
        assert_eq!(c.kube_reserved["memory"], "128Mi");
        assert_eq!(c.system_reserved["pid"], "100");
        assert_eq!(c.pod_pids_limit, 42);
        assert!(!c.cpu_cfs_quota && !c.fail_swap_on);
        assert!(c.protect_kernel_defaults);
        assert!(!CgroupConfig::default().protect_kernel_defaults);
        assert_eq!(c.eviction_hard.len(), 1);
        assert_eq!(c.effective_cfs_period(), Duration::from_millis(50));
        assert!(
            l.warnings
                .iter()
                .all(|w| !w.contains("CustomCPUCFSQuotaPeriod")),
            "{:?}",
            l.warnings
        );
        let e = crate::config::parse(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             cgroupsPerQOS: false\nkubeReserved: {gpu: \"1\"}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("is not supported unless cgroupsPerQOS"), "{e}");
        assert!(e.contains("kubeReserved[gpu]: cannot reserve"), "{e}");
    }

    #[test]
    fn reserved_cgroups_satisfy_their_enforcement() {
        let c = CgroupConfig {
            enforce_node_allocatable: vec![
                "pods".into(),
                "system-reserved".into(),
                "kube-reserved".into(),
            ],
            system_reserved_cgroup: "/system".into(),
            kube_reserved_cgroup: "/kube".into(),
            custom_cfs_quota_period: true,
            cpu_cfs_quota_period: Duration::from_millis(50),
            ..CgroupConfig::default()
        };
        assert!(errors(&c).is_empty(), "{:?}", errors(&c));
        assert_eq!(c.effective_cfs_period(), Duration::from_millis(50));
    }
}
