use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, PodSpec, ResourceRequirements, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet_config::config::eviction::ThresholdValue;

use super::*;
use crate::eviction::signals::Observation;
use crate::stats::summary::{ContainerStats, MemoryStats, PodReference, ProcessStats, VolumeStats};

const MI: u64 = 1 << 20;

fn pod(name: &str, mem_request: Option<&str>, prio: Option<i32>) -> Arc<Pod> {
    let requests = mem_request.map(|r| [("memory".to_string(), Quantity(r.into()))].into());
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: Some(PodSpec {
            priority: prio,
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests,
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn stats(name: &str, mem: u64, procs: u64) -> PodStats {
    PodStats {
        pod_ref: PodReference {
            name: name.into(),
            namespace: "default".into(),
            uid: format!("uid-{name}"),
        },
        memory: Some(MemoryStats {
            working_set_bytes: Some(mem),
            ..Default::default()
        }),
        containers: vec![ContainerStats {
            name: "c".into(),
            memory: Some(MemoryStats {
                working_set_bytes: Some(mem),
                ..Default::default()
            }),
            rootfs: Some(FsStats {
                used_bytes: Some(mem / 2),
                ..Default::default()
            }),
            logs: Some(FsStats {
                used_bytes: Some(mem / 2),
                ..Default::default()
            }),
            ..Default::default()
        }],
        process_stats: Some(ProcessStats {
            process_count: Some(procs),
        }),
        ..Default::default()
    }
}

fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
    pods.iter().map(|p| podutil::name(p)).collect()
}

/// (what, pods with their stats, the ranking wanted).
type Case = (
    &'static str,
    Vec<(Arc<Pod>, Option<PodStats>)>,
    &'static [&'static str],
);

#[test]
fn memory_ranking_exceeds_requests_then_priority_then_usage_above_requests() {
    let cases: &[Case] = &[
        (
            "over request before under, whatever the usage",
            vec![
                (
                    pod("big-under", Some("1Gi"), None),
                    Some(stats("big-under", 900 * MI, 1)),
                ),
                (
                    pod("small-over", Some("10Mi"), None),
                    Some(stats("small-over", 20 * MI, 1)),
                ),
            ],
            &["small-over", "big-under"],
        ),
        (
            "then lower priority first",
            vec![
                (
                    pod("high", None, Some(1000)),
                    Some(stats("high", 500 * MI, 1)),
                ),
                (pod("low", None, Some(10)), Some(stats("low", 100 * MI, 1))),
            ],
            &["low", "high"],
        ),
        (
            "then most usage above request",
            vec![
                (pod("a", Some("100Mi"), None), Some(stats("a", 150 * MI, 1))),
                (pod("b", None, None), Some(stats("b", 120 * MI, 1))),
                (pod("c", Some("10Mi"), None), Some(stats("c", 200 * MI, 1))),
            ],
            &["c", "b", "a"],
        ),
        (
            "pods without stats first",
            vec![
                (pod("seen", None, None), Some(stats("seen", 500 * MI, 1))),
                (pod("unseen", None, None), None),
            ],
            &["unseen", "seen"],
        ),
    ];
    for (what, input, want) in cases {
        let all: Vec<PodStats> = input.iter().filter_map(|(_, s)| s.clone()).collect();
        let by = by_uid(&all);
        let mut pods: Vec<Arc<Pod>> = input.iter().map(|(p, _)| p.clone()).collect();
        rank(&mut pods, &by, Signal::MemoryAvailable, false);
        assert_eq!(names(&pods), *want, "{what}");
    }
}

#[test]
fn pid_and_disk_ranking() {
    let all = vec![
        stats("few", 100 * MI, 2),
        stats("many", 10 * MI, 200),
        stats("prio", 500 * MI, 500),
    ];
    let by = by_uid(&all);
    let mut pods = vec![
        pod("few", None, None),
        pod("prio", None, Some(100)),
        pod("many", None, None),
    ];
    rank(&mut pods, &by, Signal::PidAvailable, false);
    assert_eq!(names(&pods), ["many", "few", "prio"]);
    // Disk on one filesystem: writable layer + logs; none requests storage, so by usage.
    let mut pods = vec![pod("many", None, None), pod("few", None, None)];
    rank(&mut pods, &by, Signal::NodeFsAvailable, false);
    assert_eq!(names(&pods), ["few", "many"]);
}

#[test]
fn disk_parts_by_filesystem_layout() {
    use FsPart::*;
    assert_eq!(
        disk_parts(Signal::NodeFsAvailable, false),
        &[Root, Logs, LocalVolumes]
    );
    assert_eq!(
        disk_parts(Signal::NodeFsAvailable, true),
        &[Logs, LocalVolumes]
    );
    assert_eq!(disk_parts(Signal::ImageFsInodesFree, true), &[Root]);
}

#[test]
fn eviction_message_as_upstream() {
    let p = pod("hog", None, None);
    let mut s = stats("hog", 20 * MI, 1);
    s.containers[0].name = "x".into();
    let mut p2 = (*p).clone();
    p2.spec.as_mut().unwrap().containers[0].name = "x".into();
    let t = Threshold {
        signal: Signal::MemoryAvailable,
        value: ThresholdValue::Quantity((100 * MI) as i64),
        grace_period: Duration::ZERO,
        min_reclaim: None,
    };
    let obs: Observations = [(
        Signal::MemoryAvailable,
        Observation {
            available: (50 * MI) as i64,
            capacity: (1000 * MI) as i64,
            time: None,
        },
    )]
    .into();
    assert_eq!(
        message("memory", &p2, Some(&s), &[t], &obs),
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
         Container x was using 20Mi, request is 0, has larger consumption of memory. "
    );
    // A container within its request is not named; without stats only the node part.
    let within = pod("ok", Some("64Mi"), None);
    assert_eq!(
        message(
            "memory",
            &within,
            Some(&stats("ok", 20 * MI, 1)),
            &[t],
            &obs
        ),
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
    );
    assert_eq!(
        message("memory", &within, None, &[], &obs),
        "The node was low on resource: memory. "
    );
}

#[test]
fn local_storage_violations() {
    let mut p = (*pod("disk", None, None)).clone();
    let spec = p.spec.as_mut().unwrap();
    spec.volumes = Some(vec![Volume {
        name: "scratch".into(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(Quantity("1Mi".into())),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    let mut s = stats("disk", 0, 1);
    s.volume_stats = vec![VolumeStats {
        name: "scratch".into(),
        fs: FsStats {
            used_bytes: Some(2 * MI),
            ..Default::default()
        },
    }];
    assert_eq!(
        local_storage_violation(&p, &s, false)
            .map(|v| v.1)
            .as_deref(),
        Some("Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". ")
    );
    s.volume_stats[0].fs.used_bytes = Some(MI / 2);
    assert_eq!(local_storage_violation(&p, &s, false), None);
    // A container limit: logs and (on one filesystem) its writable layer count.
    let c = &mut p.spec.as_mut().unwrap().containers[0];
    c.resources = Some(ResourceRequirements {
        limits: Some([("ephemeral-storage".to_string(), Quantity("10Mi".into()))].into()),
        ..Default::default()
    });
    s.containers[0].rootfs = Some(FsStats {
        used_bytes: Some(6 * MI),
        ..Default::default()
    });
    s.containers[0].logs = Some(FsStats {
        used_bytes: Some(6 * MI),
        ..Default::default()
    });
    assert_eq!(
        local_storage_violation(&p, &s, false)
            .map(|v| v.1)
            .as_deref(),
        Some("Container c exceeded its local ephemeral storage limit \"10Mi\". ")
    );
    assert_eq!(local_storage_violation(&p, &s, true), None);
    // The pod total against the sum of the containers' limits comes first.
    s.ephemeral_storage = Some(FsStats {
        used_bytes: Some(11 * MI),
        ..Default::default()
    });
    assert_eq!(
        local_storage_violation(&p, &s, true)
            .map(|v| v.1)
            .as_deref(),
        Some("Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. ")
    );
}

#[test]
fn critical_pods() {
    assert!(!is_critical(&pod("a", None, Some(1_000_000_000))));
    assert!(is_critical(&pod("a", None, Some(SYSTEM_CRITICAL_PRIORITY))));
    let mut s = (*pod("s", None, None)).clone();
    s.metadata.annotations = Some(
        [(
            crate::types::annotations::CONFIG_SOURCE_ANNOTATION.to_string(),
            "file".to_string(),
        )]
        .into(),
    );
    assert!(is_critical(&s));
}
