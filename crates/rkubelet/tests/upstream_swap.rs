//! Issue 15 item 2: an operator swaps the upstream kubelet (v1.20.2, built from the Debian
//! source by hack/control-plane.sh) for rkubelet on a running node, with the same command line,
//! root dir, config file and node credentials, and nothing restarts: every container keeps its ID
//! and restart count, volumes stay mounted, statuses stay correct and the mirror pod is kept.
//! Then a spec change restarts exactly the changed container, and the way back (rkubelet ->
//! upstream) is observed: upstream replaces the containers rkubelet created (their hash is
//! rkubelet's) and keeps the ones it created itself.
//!
//! Real components throughout: kube-apiserver with Node,RBAC and NodeRestriction, a private
//! containerd, the upstream kubelet binary, pod cgroups under the Env's `--cgroup-root`.

mod common;
#[path = "swap/host.rs"]
mod host;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use host::*;
use nix::sys::signal::Signal;
use serde_json::Value;

const INDEX: u32 = 229;
/// The image a spec change moves one container to (another local test image).
const OTHER_IMAGE: &str = "rkubelet.local/busybox-entrypoint:1.35";
/// API pods of this test; the static pod is `swap-static-<node>`.
const API_PODS: [&str; 3] = ["swap-plain", "swap-init", "swap-vols"];
/// Leaves a termination message when stopped.
const BYE: &str =
    "trap 'echo bye > /dev/termination-log; exit 0' TERM; while true; do sleep 1; done";

fn static_manifest() -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: swap-static
  labels: {{app: swap-static}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
"#
    )
}

fn api_manifests(node: &str) -> String {
    // Its termination message, written at SIGTERM, is read through upstream's mount after the
    // image change below.
    let plain = api_pod("swap-plain", node, BYE, 2, "");
    let init = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: swap-init, namespace: default}}
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
  volumes:
  - {{name: work, emptyDir: {{}}}}
  initContainers:
  - name: prepare
    image: {IMAGE}
    command: ["sh", "-c", "echo prepared > /work/state"]
    volumeMounts: [{{name: work, mountPath: /work}}]
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
    volumeMounts: [{{name: work, mountPath: /work}}]
"#
    );
    let vols = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: swap-vols, namespace: default}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 2
  volumes:
  - {{name: cfg, configMap: {{name: swap-cfg}}}}
  - {{name: sec, secret: {{secretName: swap-sec}}}}
  - {{name: scratch, emptyDir: {{}}}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", "echo kept > /scratch/mark; {SLEEPER}"]
    volumeMounts:
    - {{name: cfg, mountPath: /etc/cfg}}
    - {{name: sec, mountPath: /etc/sec}}
    - {{name: scratch, mountPath: /scratch}}
  - name: side
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
"#
    );
    format!("{plain}---\n{init}---\n{vols}")
}

/// The pods of this test as the API has them, by name.
fn api_pods(cp: &ControlPlane) -> BTreeMap<String, Value> {
    let list = cp.get_json(&["pods"]).unwrap_or_default();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("swap-"))
        })
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                p.clone(),
            )
        })
        .collect()
}

/// Every container status of `pod` (init and regular): name -> (containerID, restartCount,
/// running, ready).
fn statuses(pod: &Value) -> BTreeMap<String, (String, i64, bool, bool)> {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|k| pod["status"][k].as_array().cloned().unwrap_or_default())
        .map(|s| {
            (
                s["name"].as_str().unwrap_or_default().to_string(),
                (
                    s["containerID"].as_str().unwrap_or_default().to_string(),
                    s["restartCount"].as_i64().unwrap_or(-1),
                    s["state"]["running"].is_object(),
                    s["ready"].as_bool().unwrap_or(false),
                ),
            )
        })
        .collect()
}

fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// All four pods Running and Ready, every regular container running.
fn all_ready(pods: &BTreeMap<String, Value>, static_name: &str) -> bool {
    let names: Vec<&str> = API_PODS.iter().copied().chain([static_name]).collect();
    names.iter().all(|n| {
        pods.get(*n).is_some_and(|p| {
            p["status"]["phase"] == "Running"
                && pod_ready(p)
                && p["status"]["containerStatuses"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().all(|c| c["state"]["running"].is_object()))
        })
    })
}

/// What the runtime has: container ID -> (pod name, container name, restart count annotation).
async fn runtime_containers(env: &Env) -> BTreeMap<String, (String, String, String)> {
    env.all_containers()
        .await
        .into_iter()
        .map(|c| {
            let l = |k: &str| c.labels.get(k).cloned().unwrap_or_default();
            let restarts = c
                .annotations
                .get("io.kubernetes.container.restartCount")
                .cloned()
                .unwrap_or_default();
            (
                c.id.clone(),
                (
                    l("io.kubernetes.pod.name"),
                    l("io.kubernetes.container.name"),
                    restarts,
                ),
            )
        })
        .collect()
}

async fn sandbox_ids(env: &Env) -> std::collections::BTreeSet<String> {
    env.all_sandboxes()
        .await
        .into_iter()
        .map(|s| s.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn swap_from_upstream_keeps_every_container() {
    let bin = upstream_kubelet();
    let cp = ControlPlane::up("upstream-swap");
    // Declared before the Env, so dropped after it: once containerd is down, what upstream left
    // mounted under the Env's dir (its root dir bind-mounted onto itself, made rshared, and pod
    // volumes) is unmounted and the dir removed; Env's own removal gave up on those mounts.
    let _cleanup = HostCleanup {
        dir: std::path::PathBuf::from(format!("/tmp/rkt-{INDEX}-{}", std::process::id())),
        tunables: read_tunables(),
    };
    let env = Env::new(INDEX);
    assert_eq!(env.dir, _cleanup.dir, "HostCleanup names the Env's dir");
    let node = env.node.clone();
    let static_name = format!("swap-static-{node}");
    make_cgroup_root(&env.cgroup_root());
    // If this process is killed before HostCleanup runs, hack/clean-stale.sh restores the host's
    // tunables from this file.
    save_tunables(&env.dir.join("host-tunables"), &_cleanup.tunables);

    // One config file and one command line for both kubelets.
    let args = shared_node_command_line(&env, &cp);

    cp.kubectl(&[
        "create",
        "configmap",
        "swap-cfg",
        "--from-literal=greeting=hello",
    ]);
    cp.kubectl(&[
        "create",
        "secret",
        "generic",
        "swap-sec",
        "--from-literal=token=s3cret",
    ]);
    env.write_manifest("static.yaml", &static_manifest());
    let mut upstream = Upstream::start(&bin, &args, env.dir.join("upstream-1.log"));
    // The node must exist before API pods bound to it are admitted by it.
    wait_until(
        Duration::from_secs(60),
        "upstream registers the node",
        || cp.get_json(&["node", &node]).map(|_| ()),
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&api_manifests(&node)));
    let before = wait_until(
        Duration::from_secs(120),
        "pods ready under upstream",
        || {
            let pods = api_pods(&cp);
            all_ready(&pods, &static_name).then_some(pods)
        },
    );
    let runtime_before = runtime_containers(&env).await;
    let sandboxes_before = sandbox_ids(&env).await;
    let mounts_before = mounts_below(&env.root);
    let cgroups_before = pod_cgroups(&env);
    assert!(
        mounts_before
            .iter()
            .any(|m| m.ends_with("kubernetes.io~secret/sec")),
        "upstream mounted the secret volume: {mounts_before:?}"
    );
    assert_eq!(
        cgroups_before.len(),
        4,
        "one pod cgroup per pod: {cgroups_before:?}"
    );

    // The swap.
    upstream.stop();
    let mut env = env;
    let started = Instant::now();
    env.start_kubelet_raw(&args);
    let confirmed = wait_until(
        Duration::from_secs(60),
        "rkubelet confirms every pod",
        || {
            let mine = env.pods();
            let theirs = api_pods(&cp);
            let ok = before.iter().all(|(name, old)| {
                let Some(p) = mine
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some(name))
                else {
                    return false;
                };
                let v = serde_json::to_value(p).unwrap();
                v["status"]["phase"] == "Running"
                    && pod_ready(&v)
                    && statuses(&v) == statuses(old)
                    && theirs
                        .get(name)
                        .is_some_and(|t| statuses(t) == statuses(old))
            });
            ok.then(|| started.elapsed())
        },
    );
    // A few sync periods more: nothing restarts later either.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let after = api_pods(&cp);
    let runtime_after = runtime_containers(&env).await;
    let sandboxes_after = sandbox_ids(&env).await;
    let restarted: Vec<&String> = runtime_after
        .keys()
        .filter(|id| !runtime_before.contains_key(*id))
        .collect();
    let containers = runtime_before.len();
    println!(
        "swap: {} pods, {containers} containers ({} sandboxes) swapped, {} restarted; \
         all statuses confirmed {confirmed:?} after rkubelet start",
        before.len(),
        sandboxes_before.len(),
        restarted.len()
    );
    assert_eq!(
        runtime_after, runtime_before,
        "containers, their IDs and restart counts"
    );
    assert_eq!(sandboxes_after, sandboxes_before, "sandboxes kept");
    assert_eq!(mounts_below(&env.root), mounts_before, "volume mounts kept");
    assert_eq!(pod_cgroups(&env), cgroups_before, "pod cgroups adopted");
    for (name, old) in &before {
        let new = &after[name];
        assert_eq!(
            new["metadata"]["uid"], old["metadata"]["uid"],
            "{name}: same pod"
        );
        assert_eq!(statuses(new), statuses(old), "{name}: container statuses");
        assert!(pod_ready(new), "{name}: Ready");
    }
    // The mirror pod of the static pod is the same object.
    assert_eq!(
        after[&static_name]["metadata"]["annotations"]["kubernetes.io/config.mirror"],
        before[&static_name]["metadata"]["annotations"]["kubernetes.io/config.mirror"]
    );
    // Volumes still serve what they did.
    let vols: k8s_openapi::api::core::v1::Pod =
        serde_json::from_value(after["swap-vols"].clone()).unwrap();
    for (path, want) in [
        ("/etc/cfg/greeting", "hello"),
        ("/etc/sec/token", "s3cret"),
        ("/scratch/mark", "kept"),
    ] {
        let (code, out) = exec_in(&env, &vols, "main", &["cat", path]).await;
        assert_eq!((code, out.trim()), (0, want), "{path}");
    }

    // A spec change after the swap restarts exactly that container.
    cp.kubectl(&[
        "patch",
        "pod",
        "swap-plain",
        "--type=json",
        &format!(
            r#"-p=[{{"op":"replace","path":"/spec/containers/0/image","value":"{OTHER_IMAGE}"}}]"#
        ),
    ]);
    let changed = wait_until(
        Duration::from_secs(60),
        "swap-plain restarted on the new image",
        || {
            let p = api_pods(&cp).remove("swap-plain")?;
            let s = &p["status"]["containerStatuses"][0];
            let replaced = s["containerID"]
                != before["swap-plain"]["status"]["containerStatuses"][0]["containerID"];
            (replaced && s["image"] == OTHER_IMAGE && s["state"]["running"].is_object())
                .then_some(p)
        },
    );
    assert_eq!(statuses(&changed)["main"].1, 1, "restart counted");
    let last = &changed["status"]["containerStatuses"][0]["lastState"]["terminated"];
    assert_eq!(
        (
            last["containerID"].clone(),
            last["message"].as_str().map(str::trim)
        ),
        (
            before["swap-plain"]["status"]["containerStatuses"][0]["containerID"].clone(),
            Some("bye")
        ),
        "the termination message of upstream's container, through upstream's mount: {last}"
    );
    let runtime_changed = runtime_containers(&env).await;
    let gone: Vec<_> = runtime_before
        .iter()
        .filter(|(id, _)| !runtime_changed.contains_key(*id))
        .map(|(_, (pod, c, _))| format!("{pod}/{c}"))
        .collect();
    assert!(
        gone.is_empty() || gone == ["swap-plain/main"],
        "only swap-plain/main replaced: {gone:?}"
    );
    let new_ids: Vec<_> = runtime_changed
        .iter()
        .filter(|(id, _)| !runtime_before.contains_key(*id))
        .map(|(_, (pod, c, _))| format!("{pod}/{c}"))
        .collect();
    assert_eq!(new_ids, ["swap-plain/main"], "exactly one new container");

    // The way back: upstream again, same command line. Upstream compares its own hash with the
    // one on each container: the container rkubelet created carries rkubelet's hash, so upstream
    // replaces it; the ones upstream created itself keep theirs.
    env.stop_kubelet(Signal::SIGTERM);
    let before_back = runtime_containers(&env).await;
    let mut upstream = Upstream::start(&bin, &args, env.dir.join("upstream-2.log"));
    let settled = wait_until(
        Duration::from_secs(90),
        "upstream settles after the way back",
        || {
            let pods = api_pods(&cp);
            let plain = pods.get("swap-plain")?;
            (all_ready(&pods, &static_name) && statuses(plain)["main"].1 >= 2).then_some(pods)
        },
    );
    let after_back = runtime_containers(&env).await;
    let replaced: Vec<_> = before_back
        .iter()
        .filter(|(id, _)| !after_back.contains_key(*id))
        .map(|(_, (pod, c, _))| format!("{pod}/{c}"))
        .collect();
    println!("way back: upstream replaced {replaced:?} (the container rkubelet created)");
    assert_eq!(
        replaced,
        ["swap-plain/main"],
        "upstream replaces what rkubelet created, only that"
    );
    assert_eq!(
        settled[&static_name]["metadata"]["uid"], before[&static_name]["metadata"]["uid"],
        "the mirror pod is kept on the way back too"
    );

    // Clean up with upstream still running, so that it unmounts the pods' volumes.
    env.remove_manifest("static.yaml");
    let mut delete = vec!["delete", "pods", "--grace-period=1", "--wait=false"];
    delete.extend(API_PODS);
    cp.kubectl(&delete);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !env.all_sandboxes().await.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    upstream.stop();
}
