//! Tables after upstream's `helpers_linux_test.go` (`TestResourceConfigForPod`,
//! `TestMilliCPUToQuota`) and `policy_test.go` (`TestGetContainerOOMScoreAdjust`).

use super::*;
use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

type Res<'a> = &'a [(&'a str, &'a str)];

fn container(name: &str, req: Res, lim: Res) -> Container {
    let q = |v: Res| {
        (!v.is_empty()).then(|| {
            v.iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect()
        })
    };
    Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            requests: q(req),
            limits: q(lim),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn pod(containers: Vec<Container>) -> Pod {
    Pod {
        spec: Some(PodSpec {
            containers,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn policy() -> PodCgroupPolicy {
    PodCgroupPolicy {
        cfs_quota: true,
        cfs_period_us: 100_000,
        pids_limit: None,
        hugepage_sizes: vec![],
    }
}

#[test]
fn shares_and_quota() {
    for (milli, shares) in [(0, 2), (1, 2), (100, 102), (1000, 1024), (300_000, 262_144)] {
        assert_eq!(milli_cpu_to_shares(milli), shares, "shares of {milli}m");
    }
    for (milli, period, quota) in [
        (0, 100_000, 0),
        (5, 100_000, 1000),
        (9, 100_000, 1000),
        (10, 100_000, 1000),
        (200, 100_000, 20_000),
        (500, 100_000, 50_000),
        (1000, 100_000, 100_000),
        (1500, 100_000, 150_000),
        (1500, 50_000, 75_000),
    ] {
        assert_eq!(
            milli_cpu_to_quota(milli, period),
            quota,
            "{milli}m / {period}"
        );
    }
}

#[test]
fn resource_config_by_qos() {
    let guaranteed = pod(vec![container(
        "c",
        &[],
        &[("cpu", "100m"), ("memory", "100Mi")],
    )]);
    let r = resource_config_for_pod(&guaranteed, &policy());
    assert_eq!(r.cpu_shares, Some(102));
    assert_eq!(r.cpu_quota, Some(10_000));
    assert_eq!(r.cpu_period, Some(100_000));
    assert_eq!(r.memory_limit, Some(100 * 1024 * 1024));

    // Burstable with every limit declared: quota and memory set.
    let burstable_limited = pod(vec![container(
        "c",
        &[("cpu", "100m"), ("memory", "100Mi")],
        &[("cpu", "200m"), ("memory", "200Mi")],
    )]);
    let r = resource_config_for_pod(&burstable_limited, &policy());
    assert_eq!(r.cpu_shares, Some(102));
    assert_eq!(r.cpu_quota, Some(20_000));
    assert_eq!(r.memory_limit, Some(200 * 1024 * 1024));

    // Burstable where one container has no limits: no quota, no memory limit.
    let burstable_partial = pod(vec![
        container(
            "a",
            &[("cpu", "100m")],
            &[("cpu", "200m"), ("memory", "200Mi")],
        ),
        container("b", &[("cpu", "100m"), ("memory", "10Mi")], &[]),
    ]);
    let r = resource_config_for_pod(&burstable_partial, &policy());
    assert_eq!(r.cpu_shares, Some(204));
    assert_eq!(r.cpu_quota, None);
    assert_eq!(r.cpu_period, None);
    assert_eq!(r.memory_limit, None);

    let besteffort = pod(vec![container("c", &[], &[])]);
    let r = resource_config_for_pod(&besteffort, &policy());
    assert_eq!(
        r,
        ResourceConfig {
            cpu_shares: Some(2),
            ..Default::default()
        }
    );
}

#[test]
fn quota_off_and_custom_period_and_pids() {
    let guaranteed = pod(vec![container(
        "c",
        &[],
        &[("cpu", "1500m"), ("memory", "1Gi")],
    )]);
    let mut p = policy();
    p.cfs_quota = false;
    p.pids_limit = Some(100);
    let r = resource_config_for_pod(&guaranteed, &p);
    assert_eq!(
        r.cpu_quota,
        Some(-1),
        "cpuCFSQuota=false leaves the quota at max"
    );
    assert_eq!(r.pids_limit, Some(100));
    let mut p = policy();
    p.cfs_period_us = 50_000;
    let r = resource_config_for_pod(&guaranteed, &p);
    assert_eq!((r.cpu_quota, r.cpu_period), (Some(75_000), Some(50_000)));
}

#[test]
fn init_containers_and_overhead_count() {
    // The larger init container raises requests and limits; overhead is added to both.
    let mut p = pod(vec![container(
        "c",
        &[],
        &[("cpu", "100m"), ("memory", "100Mi")],
    )]);
    let spec = p.spec.as_mut().unwrap();
    spec.init_containers = Some(vec![container(
        "init",
        &[],
        &[("cpu", "500m"), ("memory", "300Mi")],
    )]);
    spec.overhead = Some(
        [
            ("cpu".to_string(), Quantity("50m".into())),
            ("memory".to_string(), Quantity("10Mi".into())),
        ]
        .into(),
    );
    let r = resource_config_for_pod(&p, &policy());
    assert_eq!(r.cpu_shares, Some(milli_cpu_to_shares(550)));
    assert_eq!(r.cpu_quota, Some(55_000));
    assert_eq!(r.memory_limit, Some(310 * 1024 * 1024));
}

#[test]
fn hugepages_requested_and_others_zero() {
    let p = pod(vec![container(
        "c",
        &[],
        &[("cpu", "1"), ("memory", "1Gi"), ("hugepages-2Mi", "4Mi")],
    )]);
    let mut pol = policy();
    pol.hugepage_sizes = vec![2 << 20, 1 << 30];
    let r = resource_config_for_pod(&p, &pol);
    assert_eq!(r.hugetlb_limits.get(&(2 << 20)), Some(&(4 << 20)));
    assert_eq!(r.hugetlb_limits.get(&(1 << 30)), Some(&0));
    assert_eq!(hugepage_size("hugepages-1Gi"), Some(1 << 30));
    assert_eq!(hugepage_size("memory"), None);
}

#[test]
fn oom_score_adjust_table() {
    const CAPACITY: u64 = 4 * 1024 * 1024 * 1024;
    let besteffort = pod(vec![container("c", &[], &[])]);
    let guaranteed = pod(vec![container(
        "c",
        &[],
        &[("cpu", "1"), ("memory", "1Gi")],
    )]);
    let burstable_half = pod(vec![container("c", &[("memory", "2Gi")], &[])]);
    let burstable_all = pod(vec![container("c", &[("memory", "4Gi")], &[])]);
    let burstable_tiny = pod(vec![container("c", &[("cpu", "10m")], &[])]);
    let mut critical = burstable_tiny.clone();
    critical.spec.as_mut().unwrap().priority_class_name = Some("system-node-critical".into());
    critical.metadata.annotations = Some(
        [(
            "kubernetes.io/config.source".to_string(),
            "file".to_string(),
        )]
        .into(),
    );
    for (p, want) in [
        (&besteffort, 1000),
        (&guaranteed, -997),
        (&burstable_half, 500),
        (&burstable_all, 3),
        (&burstable_tiny, 999),
        (&critical, -997),
    ] {
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(oom_score_adj(p, c, CAPACITY), want);
    }
}

#[test]
fn kubepods_from_allocatable() {
    let alloc: BTreeMap<String, i64> = [
        ("cpu".to_string(), 1500),
        ("memory".into(), 1 << 30),
        ("pid".into(), 4000),
    ]
    .into();
    let r = kubepods_config(&alloc, &[2 << 20]);
    assert_eq!(r.cpu_shares, Some(1536));
    assert_eq!(r.memory_limit, Some(1 << 30));
    assert_eq!(r.pids_limit, Some(4000));
    assert_eq!(r.hugetlb_limits.get(&(2 << 20)), Some(&HUGEPAGES_UNBOUNDED));
    assert_eq!(
        burstable_shares([100, 250].iter()),
        milli_cpu_to_shares(350)
    );
    assert_eq!(burstable_shares([].iter()), 2);
}
