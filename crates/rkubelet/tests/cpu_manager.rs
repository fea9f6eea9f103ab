//! The CPU manager's `static` policy (issue 19) on this machine's real CPUs, cpusets (cgroup v1;
//! v2 in hack/vm.sh's guest) and containerd: with CPU 0 reserved (`reservedSystemCPUs: "0"`), a Guaranteed pod with
//! `cpu: 1` gets CPU 1 alone (its container's `cpuset.cpus` and the `Cpus_allowed_list` its
//! processes see), a BestEffort pod shares CPU 0; the assignment is in `cpu_manager_state`
//! (upstream's format) and the pod-resources API; a restart keeps it and moves nothing; deleting
//! the Guaranteed pod returns CPU 1 to the shared pool, which the BestEffort container gets
//! through `UpdateContainerResources`; a new Guaranteed pod then gets CPU 1 again.
//!
//! Admission in upstream 1.20's order: a second Guaranteed pod while CPU 1 is taken is rejected
//! by the CPU manager (`UnexpectedAdmissionError`, counted in
//! `kubelet_cpu_manager_pinning_errors_total`), and one the predicates reject gives back the
//! CPU it was allocated before them.
//!
//! Needs at least 2 CPUs (CI's machine has exactly 2).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use hyper_util::rt::TokioIo;
use kubelet::podresources::v1 as pr;
use tokio::net::UnixStream;
use tonic::transport::{Endpoint, Uri};

fn guaranteed(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
    resources:
      limits: {{cpu: "1", memory: 64Mi}}
      requests: {{cpu: "1", memory: 64Mi}}
"#
    )
}

fn best_effort(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
"#
    )
}

fn find_dir(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if !p.is_dir() {
            continue;
        }
        if e.file_name() == name {
            return Some(p);
        }
        if let Some(found) = find_dir(&p, name) {
            return Some(found);
        }
    }
    None
}

fn container_id(pod: &k8s_openapi::api::core::v1::Pod) -> String {
    container_status(pod, "c")
        .container_id
        .clone()
        .unwrap_or_default()
        .trim_start_matches("containerd://")
        .to_string()
}

/// The container's `cpuset.cpus` in the kernel's cpuset hierarchy (v1) or tree (v2).
fn cgroup_cpus(env: &Env, pod: &k8s_openapi::api::core::v1::Pod) -> String {
    let root = cgroupfs::dir("cpuset", &env.cgroup_root());
    let id = container_id(pod);
    let dir = find_dir(&root, &id)
        .unwrap_or_else(|| panic!("no cpuset cgroup {id} under {}", root.display()));
    std::fs::read_to_string(dir.join("cpuset.cpus"))
        .unwrap()
        .trim()
        .to_string()
}

/// `Cpus_allowed_list` of the container's main process and of a process exec'd into it.
async fn allowed_cpus(env: &Env, pod: &k8s_openapi::api::core::v1::Pod) -> (String, String) {
    let (code, out) = exec_in(
        env,
        pod,
        "c",
        &[
            "sh",
            "-c",
            "grep Cpus_allowed_list /proc/1/status; grep Cpus_allowed_list /proc/self/status",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    let vals: Vec<String> = out
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|v| v.trim().to_string())
        .collect();
    assert_eq!(vals.len(), 2, "{out}");
    (vals[0].clone(), vals[1].clone())
}

async fn wait_cpus(env: &Env, name: &str, want: &str) {
    let pod = env.wait_running(name);
    let deadline = Instant::now() + patience(Duration::from_secs(30));
    loop {
        let cg = cgroup_cpus(env, &pod);
        let (main, exec) = allowed_cpus(env, &pod).await;
        if cg == want && main == want && exec == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: cpuset.cpus {cg:?}, Cpus_allowed_list {main:?} / {exec:?}, want {want:?}\n{}",
            tail(&env.kubelet_log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Upstream's checkpoint. The kubelet answers healthz before its container manager has started
/// (and written the file), so the first read waits for it.
fn state_file(env: &Env) -> serde_json::Value {
    let path = env.root.join("cpu_manager_state");
    let bytes = wait_until(Duration::from_secs(30), "cpu_manager_state written", || {
        std::fs::read(&path).ok()
    });
    serde_json::from_slice(&bytes).expect("JSON")
}

async fn lister(
    env: &Env,
) -> pr::pod_resources_lister_client::PodResourcesListerClient<tonic::transport::Channel> {
    let sock = env.root.join("pod-resources/kubelet.sock");
    let ch = Endpoint::from_static("http://[::1]:50051")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let sock = sock.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(sock).await?)) }
        }))
        .await
        .expect("connect to the pod-resources socket");
    pr::pod_resources_lister_client::PodResourcesListerClient::new(ch)
}

/// pod name -> cpu_ids of its container `c`.
async fn listed_cpus(env: &Env) -> std::collections::BTreeMap<String, Vec<i64>> {
    let list = lister(env)
        .await
        .list(pr::ListPodResourcesRequest {})
        .await
        .expect("List")
        .into_inner();
    list.pod_resources
        .into_iter()
        .map(|p| {
            (
                p.name,
                p.containers
                    .iter()
                    .flat_map(|c| c.cpu_ids.clone())
                    .collect(),
            )
        })
        .collect()
}

/// The admission stage of a pod's start-up timeline line (includes the CPU allocation).
fn admission_stage(log: &str, pod: &str) -> Option<String> {
    let line = log.lines().find(|l| {
        l.contains("\"pod start-up timeline\"") && l.contains(&format!("pod=\"default/{pod}"))
    })?;
    line.split_whitespace()
        .find_map(|w| w.trim_start_matches("stages=\"").strip_prefix("admission="))
        .map(|s| s.trim_end_matches('"').to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_policy_pins_shares_reconciles_and_survives_restarts() {
    let cpus = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    assert_eq!(
        cpus.trim(),
        "0-1",
        "this test is written for a 2-CPU machine"
    );
    let mut env = Env::new(112);
    env.extra_config =
        "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ncpuManagerReconcilePeriod: 1s\n"
            .into();
    env.start_kubelet();

    // Upstream's checkpoint, before any pod: every CPU shared.
    let st = state_file(&env);
    assert_eq!(st["policyName"], "static", "{st}");
    assert_eq!(st["defaultCpuSet"], "0-1", "{st}");
    assert!(st.get("entries").is_none(), "{st}");
    assert!(st["checksum"].as_u64().is_some_and(|c| c > 0), "{st}");

    // A plain pod and a pinned one; the start-up figures are printed for bench/, not asserted.
    let t0 = Instant::now();
    env.write_manifest("shared.yaml", &best_effort("shared"));
    env.wait_running("shared");
    let plain = t0.elapsed();
    wait_cpus(&env, "shared", "0-1").await;
    let t0 = Instant::now();
    env.write_manifest("pinned.yaml", &guaranteed("pinned"));
    env.wait_running("pinned");
    let pinned = t0.elapsed();
    eprintln!("manifest to Running: plain pod {plain:?}, pinned pod {pinned:?}");

    // The pinned container runs on CPU 1 alone; the shared pool shrank to CPU 0 and the
    // BestEffort container followed it (UpdateContainerResources from the reconcile loop).
    wait_cpus(&env, "pinned", "1").await;
    wait_cpus(&env, "shared", "0").await;
    let node = env.node.clone();
    let st = state_file(&env);
    assert_eq!(st["defaultCpuSet"], "0", "{st}");
    let pinned_uid = uid(&env.pod("pinned").unwrap());
    assert_eq!(st["entries"][&pinned_uid]["c"], "1", "{st}");
    assert_eq!(st["entries"].as_object().map(|m| m.len()), Some(1), "{st}");

    // The pod-resources API: the pinned container's CPU, none for the shared one; CPU 1 is
    // all the node can hand out exclusively.
    let listed = listed_cpus(&env).await;
    assert_eq!(
        listed.get(&format!("pinned-{node}")),
        Some(&vec![1]),
        "{listed:?}"
    );
    assert_eq!(
        listed.get(&format!("shared-{node}")),
        Some(&vec![]),
        "{listed:?}"
    );
    let alloc = lister(&env)
        .await
        .get_allocatable_resources(pr::AllocatableResourcesRequest {})
        .await
        .expect("GetAllocatableResources")
        .into_inner();
    assert_eq!(alloc.cpu_ids, vec![1]);

    // Upstream's metrics: one pinning request so far, no error; two pods through the
    // topology manager's admit handler.
    let metric = |n: &str| env.metric(n, None).unwrap_or(-1.0);
    assert_eq!(metric("kubelet_cpu_manager_pinning_requests_total"), 1.0);
    assert_eq!(metric("kubelet_cpu_manager_pinning_errors_total"), 0.0);
    assert_eq!(
        metric("kubelet_topology_manager_admission_requests_total"),
        2.0
    );
    assert_eq!(
        metric("kubelet_topology_manager_admission_errors_total"),
        0.0
    );

    // A second Guaranteed pod: CPU 1 is taken. Upstream's 1.20 order allocates before the
    // predicates, so the CPU manager rejects it (not the predicates' OutOfcpu) and counts a
    // pinning error; nothing of the shared pool is lost.
    env.write_manifest("greedy.yaml", &guaranteed("greedy"));
    let st = env.wait_pod("greedy", Duration::from_secs(20), "rejected", |p| {
        let s = p.status.clone()?;
        (s.phase.as_deref() == Some("Failed")).then_some(s)
    });
    assert_eq!(
        st.reason.as_deref(),
        Some("UnexpectedAdmissionError"),
        "{st:?}"
    );
    assert!(
        st.message.as_deref().is_some_and(|m| m
            .starts_with("Pod was rejected: Allocate failed due to ")
            && m.contains("not enough cpus available to satisfy request")),
        "{st:?}"
    );
    assert_eq!(metric("kubelet_cpu_manager_pinning_requests_total"), 2.0);
    assert_eq!(metric("kubelet_cpu_manager_pinning_errors_total"), 1.0);
    assert_eq!(
        metric("kubelet_topology_manager_admission_errors_total"),
        1.0
    );
    assert_eq!(state_file(&env)["defaultCpuSet"], "0");
    env.remove_manifest("greedy.yaml");

    let log = env.kubelet_log();
    eprintln!(
        "admission stage (incl. CPU allocation): pinned {:?}, plain {:?}",
        admission_stage(&log, &format!("pinned-{node}")),
        admission_stage(&log, &format!("shared-{node}"))
    );

    // A restart keeps the assignment and the checkpoint, and moves no container.
    let before = std::fs::read(env.root.join("cpu_manager_state")).unwrap();
    env.stop_kubelet(nix::sys::signal::Signal::SIGTERM);
    env.start_kubelet();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        std::fs::read(env.root.join("cpu_manager_state")).unwrap(),
        before
    );
    wait_cpus(&env, "pinned", "1").await;
    wait_cpus(&env, "shared", "0").await;
    assert_eq!(
        listed_cpus(&env).await.get(&format!("pinned-{node}")),
        Some(&vec![1])
    );

    // Deleting the pinned pod gives CPU 1 back to the pool; the shared container grows.
    env.remove_manifest("pinned.yaml");
    wait_until(Duration::from_secs(30), "pinned pod gone", || {
        env.pod("pinned").is_none().then_some(())
    });
    wait_cpus(&env, "shared", "0-1").await;
    wait_until(
        Duration::from_secs(10),
        "checkpoint without the pinned pod",
        || {
            let st = state_file(&env);
            (st["defaultCpuSet"] == "0-1" && st.get("entries").is_none()).then_some(())
        },
    );

    // A Guaranteed pod the predicates reject (its nodeSelector matches nothing): allocated
    // CPU 1 first (upstream's order), then gave it back with the rejection.
    let misfit = guaranteed("misfit").replace("spec:\n", "spec:\n  nodeSelector: {nope: nope}\n");
    env.write_manifest("misfit.yaml", &misfit);
    let st = env.wait_pod("misfit", Duration::from_secs(20), "rejected", |p| {
        let s = p.status.clone()?;
        (s.phase.as_deref() == Some("Failed")).then_some(s)
    });
    assert_eq!(st.reason.as_deref(), Some("NodeAffinity"), "{st:?}");
    let misfit_uid = uid(&env.pod("misfit").unwrap());
    wait_until(Duration::from_secs(10), "misfit's CPU released", || {
        let released = env.kubelet_log().lines().any(|l| {
            l.contains("a pod not admitted gave its CPUs back") && l.contains(&misfit_uid)
        });
        let st = state_file(&env);
        (released && st["defaultCpuSet"] == "0-1" && st.get("entries").is_none()).then_some(())
    });
    env.remove_manifest("misfit.yaml");

    // The freed CPU goes to the next Guaranteed pod, exclusively again.
    env.write_manifest("pinned2.yaml", &guaranteed("pinned2"));
    wait_cpus(&env, "pinned2", "1").await;
    wait_cpus(&env, "shared", "0").await;
    let log = env.kubelet_log();
    assert!(
        log.contains("exclusive CPUs allocated"),
        "{}",
        tail(&log, 30)
    );
    // The shared container moved through CRI UpdateContainerResources (the reconcile loop).
    assert!(
        log.lines()
            .any(|l| l.contains("reconcileState: container cpuset updated")
                && l.contains("cpuset=\"0-1\"")),
        "{:?}",
        log.lines()
            .filter(|l| l.contains("cpumanager"))
            .collect::<Vec<_>>()
    );
}
