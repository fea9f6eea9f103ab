//! The CPU manager task over a fake two-NUMA-node machine (a `/sys` tree in a temp dir) and the
//! fake runtime: allocation through the handle, the checkpoint on disk, restarts, stale pods and
//! the policy change refusal. The helpers serve the topology admission tests too.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubelet_config::config::cpu::CpuManagerConfig;
use rkubelet_cri::{fake::FakeRuntime, CriClient};
use tokio_util::sync::CancellationToken;

use super::*;

/// 4 CPUs, one per core; CPUs 0-1 on NUMA node (and socket) 0, 2-3 on node 1.
fn fake_sys(dir: &Path) {
    let w = |p: &str, s: &str| {
        let p = dir.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, s).unwrap();
    };
    w("devices/system/cpu/online", "0-3\n");
    for cpu in 0..4 {
        let t = format!("devices/system/cpu/cpu{cpu}/topology");
        w(&format!("{t}/physical_package_id"), &(cpu / 2).to_string());
        w(&format!("{t}/thread_siblings_list"), &cpu.to_string());
    }
    w("devices/system/node/node0/cpulist", "0-1\n");
    w("devices/system/node/node1/cpulist", "2-3\n");
}

pub(crate) fn pod(uid: &str, cpus: &[(&str, &str)]) -> Arc<Pod> {
    let mut p = Pod::default();
    p.metadata.uid = Some(uid.into());
    p.metadata.name = Some(uid.into());
    p.spec = Some(PodSpec {
        containers: cpus
            .iter()
            .map(|(name, cpu)| {
                let q: BTreeMap<String, Quantity> = [
                    ("cpu".to_string(), Quantity(cpu.to_string())),
                    ("memory".to_string(), Quantity("64Mi".into())),
                ]
                .into_iter()
                .collect();
                Container {
                    name: name.to_string(),
                    resources: Some(ResourceRequirements {
                        requests: Some(q.clone()),
                        limits: Some(q),
                        ..Default::default()
                    }),
                    ..Default::default()
                }
            })
            .collect(),
        ..Default::default()
    });
    Arc::new(p)
}

pub(crate) struct Node {
    dir: tempfile::TempDir,
    cancel: CancellationToken,
}

impl Node {
    pub(crate) fn new() -> Node {
        let dir = tempfile::tempdir().unwrap();
        fake_sys(&dir.path().join("sys"));
        Node {
            dir,
            cancel: CancellationToken::new(),
        }
    }

    pub(crate) async fn start(
        &self,
        cfg: &CpuManagerConfig,
    ) -> Result<Option<CpuHandle>, CpuError> {
        let cri = CriClient::with_backend(
            Arc::new(FakeRuntime::new(Arc::new(|| 0))),
            "fake.sock".into(),
            Duration::from_secs(5),
        );
        let started = start(
            Setup {
                cfg,
                root_dir: &self.dir.path().join("root"),
                sys: &self.dir.path().join("sys"),
                reserved_milli: 500,
                cri,
            },
            self.cancel.child_token(),
        )
        .await?;
        Ok(started.map(|(h, run)| {
            tokio::spawn(run);
            h
        }))
    }

    fn state(&self) -> serde_json::Value {
        serde_json::from_slice(
            &std::fs::read(self.dir.path().join("root/cpu_manager_state")).unwrap(),
        )
        .unwrap()
    }
}

pub(crate) fn static_cfg() -> CpuManagerConfig {
    CpuManagerConfig {
        policy: "static".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn allocates_checkpoints_restores_and_releases() {
    let node = Node::new();
    let cpu = node.start(&static_cfg()).await.unwrap().unwrap();
    // 500m reserved rounds up to one CPU, taken by topology: CPU 0.
    assert_eq!(cpu.allocatable().await.unwrap().to_string(), "1-3");
    let a = pod("a", &[("c", "2")]);
    let t0 = std::time::Instant::now();
    cpu.allocate(a.clone(), BTreeMap::new(), None)
        .await
        .unwrap()
        .unwrap();
    // A figure for bench/ (printed, not asserted): allocation with the synced checkpoint write.
    eprintln!(
        "allocate through the handle, checkpoint included: {:?}",
        t0.elapsed()
    );
    let got = cpu.affinity("a", "c").await.unwrap();
    assert_eq!(
        got.to_string(),
        "2-3",
        "a whole socket's worth from one socket"
    );
    assert_eq!(cpu.affinity("other", "c").await.unwrap().to_string(), "0-1");
    let st = node.state();
    assert_eq!(st["defaultCpuSet"], "0-1");
    assert_eq!(st["entries"]["a"]["c"], "2-3");
    // Allocating again (a re-admitted pod) changes nothing.
    cpu.allocate(a.clone(), BTreeMap::new(), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cpu.affinity("a", "c").await.unwrap().to_string(), "2-3");
    // Not enough left: all or nothing, upstream's admission error.
    let b = pod("b", &[("x", "1"), ("y", "1")]);
    let e = cpu
        .allocate(b, BTreeMap::new(), None)
        .await
        .unwrap()
        .unwrap_err();
    let rejected = crate::cm::AdmitError::from(e);
    assert_eq!(rejected.reason, "UnexpectedAdmissionError");
    assert_eq!(
        rejected.message,
        "Allocate failed due to not enough cpus available to satisfy request: requested=1, available=0, which is unexpected"
    );
    assert!(!cpu.assigned().await.unwrap().contains_key("b"));

    // A restart reads the assignment back.
    node.cancel.cancel();
    let node2 = Node {
        dir: node.dir,
        cancel: CancellationToken::new(),
    };
    let cpu = node2.start(&static_cfg()).await.unwrap().unwrap();
    assert_eq!(cpu.affinity("a", "c").await.unwrap().to_string(), "2-3");
    // Housekeeping no longer lists pod a: its CPUs return to the pool.
    cpu.retain(HashSet::new()).await;
    assert_eq!(cpu.affinity("x", "c").await.unwrap().to_string(), "0-3");
    assert!(cpu.assigned().await.unwrap().is_empty());
    assert_eq!(node2.state()["defaultCpuSet"], "0-3");

    // Another policy over this checkpoint is refused, as upstream.
    let e = node2
        .start(&CpuManagerConfig::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("configured policy \"none\" differs from state checkpoint policy \"static\"")
            && e.contains("please drain this node and delete the CPU manager checkpoint file"),
        "{e}"
    );
}

#[tokio::test]
async fn none_policy_keeps_only_its_checkpoint() {
    let node = Node::new();
    assert!(node
        .start(&CpuManagerConfig::default())
        .await
        .unwrap()
        .is_none());
    let text = std::fs::read_to_string(node.dir.path().join("root/cpu_manager_state")).unwrap();
    assert_eq!(
        text,
        r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#
    );
    let e = node.start(&static_cfg()).await.unwrap_err().to_string();
    assert!(
        e.contains("configured policy \"static\" differs from state checkpoint policy \"none\""),
        "{e}"
    );
}

#[tokio::test]
async fn start_refusals() {
    let node = Node::new();
    let mut cfg = static_cfg();
    cfg.reserved_system_cpus = CpuSet::parse("4").unwrap();
    let e = node.start(&cfg).await.unwrap_err().to_string();
    assert_eq!(e, "Invalid cpuset \"4\" specified by --reserved-cpus");
    let cri = CriClient::with_backend(
        Arc::new(FakeRuntime::new(Arc::new(|| 0))),
        "fake.sock".into(),
        Duration::from_secs(5),
    );
    let e = start(
        Setup {
            cfg: &static_cfg(),
            root_dir: &node.dir.path().join("root"),
            sys: &node.dir.path().join("sys"),
            reserved_milli: 0,
            cri,
        },
        CancellationToken::new(),
    )
    .await
    .err()
    .map(|e| e.to_string());
    assert_eq!(
        e.as_deref(),
        Some("[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero")
    );
}
