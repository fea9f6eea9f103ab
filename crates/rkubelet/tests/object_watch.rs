//! configMapAndSecretChangeDetectionStrategy Watch (the default): a changed configMap reaches
//! the mounted files promptly (well before the periodic resync), atomically, on a node of a real
//! control plane with the node's own credentials (Node authorizer: single-object watches).

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Bytes of each value: large enough that a non-atomic rewrite could be caught half done.
const SIZE: usize = 64 * 1024;

fn manifest(node: &str) -> String {
    // The reader checks every read of the file: full length and one repeated letter only.
    let reader = format!(
        "trap 'exit 0' TERM; : > /tmp/reads; : > /tmp/bad; \
         while true; do v=$(cat /etc/cfg/big); n=${{#v}}; \
         case \"$v\" in *[!A]*) case \"$v\" in *[!B]*) case \"$v\" in *[!C]*) case \"$v\" in *[!D]*) \
         echo mixed >> /tmp/bad;; esac;; esac;; esac;; esac; \
         [ \"$n\" = {SIZE} ] || echo \"len $n\" >> /tmp/bad; echo >> /tmp/reads; done"
    );
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: watcher
  namespace: default
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  volumes:
  - name: cfg
    configMap: {{name: big}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {reader:?}]
    volumeMounts:
    - {{name: cfg, mountPath: /etc/cfg}}
"#
    )
}

fn set_value(cp: &ControlPlane, letter: char, create: bool) {
    let v = letter.to_string().repeat(SIZE);
    let cm = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "big", "namespace": "default"},
        "data": {"big": v},
    });
    let verb = if create { "create" } else { "replace" };
    cp.kubectl_stdin(&[verb, "-f", "-"], Some(&cm.to_string()));
}

/// The node's configMap requests in the apiserver's audit log as (verb, stage, auditID). The
/// apiserver (1.20) logs a watch when it ends, with stage ResponseComplete, not while it is open.
fn configmap_requests(cp: &ControlPlane, node: &str) -> Vec<(String, String, String)> {
    let user = format!("system:node:{node}");
    let text = std::fs::read_to_string(cp.dir.join("log/audit.log")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| {
            e["user"]["username"] == user.as_str() && e["objectRef"]["resource"] == "configmaps"
        })
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (s("verb"), s("stage"), s("auditID"))
        })
        .collect()
}

#[tokio::test]
async fn watched_config_map_updates_reach_files_promptly_and_atomically() {
    // Audited: the watch is seen from the apiserver's side, opened and ended.
    let cp = ControlPlane::up_audited("pull3");
    let mut env = Env::new(213);
    let kc = cp.node_kubeconfig(&env.node);
    let kc = format!("--kubeconfig={}", kc.display());
    // The default resync period (1 min): a prompt update can only come from the watch.
    env.start_kubelet_with(&[&kc, "--node-ip=127.0.0.1", "--sync-frequency=60s"]);
    set_value(&cp, 'A', true);
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&manifest(&env.node)));
    let pod = wait_until(Duration::from_secs(60), "watcher Running", || {
        let p = cp.get_json(&["pod", "watcher"])?;
        if p["status"]["phase"] != "Running" {
            return None;
        }
        serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(p).ok()
    });
    let read = |cmd: &'static str| {
        let env = &env;
        let pod = &pod;
        async move {
            let (code, out) = exec_in(env, pod, "main", &["sh", "-c", cmd]).await;
            assert_eq!(code, 0, "{cmd}: {out}");
            out.trim_end().to_string()
        }
    };
    let first = |s: String| s.chars().next();
    assert_eq!(first(read("cat /etc/cfg/big").await), Some('A'));

    // Each update reaches the file in about a second, through the watch. Without it, only the
    // next resync (1 min) would bring it: the bound is half that period, so it tells the two
    // apart with room for a loaded machine.
    let mut delays = Vec::new();
    for letter in ['B', 'C', 'D'] {
        let t = Instant::now();
        set_value(&cp, letter, false);
        loop {
            if first(read("cat /etc/cfg/big").await) == Some(letter) {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "update to {letter} not seen in 30 s\n{}",
                tail(&env.kubelet_log(), 40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        delays.push(t.elapsed());
        // Let the reader go over the new content a while before the next change.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A figure, printed, not asserted (it depends on the machine's load).
    println!("configMap update -> mounted file (watch): {delays:?}");
    let reads: usize = read("wc -l < /tmp/reads").await.parse().unwrap();
    let bad = read("cat /tmp/bad").await;
    println!("reader: {reads} reads during the updates");
    assert!(reads > 10, "the reader hardly ran: {reads}");
    assert_eq!(bad, "", "the reader saw torn content");

    // The node read the configMap by list and watch (a single-object watch, as the Node
    // authorizer allows), not by GETs; the apiserver logs the watch once it has ended, which
    // it must not have yet, and does when the pod goes.
    let before = configmap_requests(&cp, &env.node);
    assert!(
        before.iter().any(|(v, _, _)| v == "list")
            && !before.iter().any(|(v, _, _)| v == "get" || v == "watch"),
        "{before:?}"
    );
    cp.kubectl(&["delete", "pod", "watcher", "--wait=false"]);
    wait_until(
        Duration::from_secs(30),
        "the node's configMap watch ended with the pod",
        || {
            configmap_requests(&cp, &env.node)
                .iter()
                .any(|(v, s, _)| v == "watch" && s == "ResponseComplete")
                .then_some(())
        },
    );
    let pod_dir = env.root.join("pods").join(uid(&pod));
    wait_until(Duration::from_secs(30), "pod directory removed", || {
        (!pod_dir.exists()).then_some(())
    });
}

/// A pod on a node with `strategy`, reading configMap `small` as a file; returns the Env and pod.
async fn small_reader(
    cp: &ControlPlane,
    index: u32,
    strategy: &str,
) -> (Env, k8s_openapi::api::core::v1::Pod) {
    let mut env = Env::new(index);
    env.extra_config = format!("configMapAndSecretChangeDetectionStrategy: {strategy}\n");
    let kc = cp.node_kubeconfig(&env.node);
    let kc = format!("--kubeconfig={}", kc.display());
    env.start_kubelet_with(&[&kc, "--node-ip=127.0.0.1", "--sync-frequency=2s"]);
    let name = format!("small-{}", strategy.to_lowercase());
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  volumes:
  - name: cfg
    configMap: {{name: small}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
    volumeMounts:
    - {{name: cfg, mountPath: /etc/cfg}}
"#,
        node = env.node
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&manifest));
    let pod = wait_until(Duration::from_secs(60), "reader Running", || {
        let p = cp.get_json(&["pod", &name])?;
        if p["status"]["phase"] != "Running" {
            return None;
        }
        serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(p).ok()
    });
    (env, pod)
}

async fn value(env: &Env, pod: &k8s_openapi::api::core::v1::Pod) -> String {
    let (code, out) = exec_in(env, pod, "main", &["cat", "/etc/cfg/v"]).await;
    assert_eq!(code, 0, "{out}");
    out
}

#[tokio::test]
async fn get_and_cache_strategies() {
    // Audited: what each node asked the apiserver for is the evidence of its strategy.
    let cp = ControlPlane::up_audited("pull4");
    cp.kubectl(&["create", "configmap", "small", "--from-literal=v=1"]);
    let (get_env, get_pod) = small_reader(&cp, 214, "Get").await;
    let (cache_env, cache_pod) = small_reader(&cp, 215, "Cache").await;
    assert_eq!(value(&get_env, &get_pod).await, "1");
    assert_eq!(value(&cache_env, &cache_pod).await, "1");

    let t = Instant::now();
    cp.kubectl(&[
        "patch",
        "configmap",
        "small",
        "--type=merge",
        "-p",
        r#"{"data":{"v":"2"}}"#,
    ]);
    // Get: the next resync (2 s here) reads the new content. The bound only catches "never":
    // generous for a loaded machine, yet with the 8 s below well inside the Cache strategy's
    // 1 min TTL, which the check after it relies on.
    loop {
        if value(&get_env, &get_pod).await == "2" {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "Get did not update");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Cache: resyncs keep reusing the GET result for its TTL (1 min), so after several resync
    // periods the file still has the old content.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(value(&cache_env, &cache_pod).await, "1");
    // Neither strategy watches: each node GETs the configMap (Get at every resync, so more
    // than once by now) and never lists or watches it.
    for (env, min_gets) in [(&get_env, 2), (&cache_env, 1)] {
        let reqs = configmap_requests(&cp, &env.node);
        assert!(
            !reqs.iter().any(|(v, _, _)| v == "watch" || v == "list"),
            "{} watched the configMap: {reqs:?}",
            env.node
        );
        let gets = reqs.iter().filter(|(v, _, _)| v == "get").count();
        assert!(
            gets >= min_gets,
            "{} should GET the configMap at least {min_gets} times: {reqs:?}",
            env.node
        );
    }

    cp.kubectl(&["delete", "pods", "--all", "--wait=false"]);
    for (env, pod) in [(&get_env, &get_pod), (&cache_env, &cache_pod)] {
        let dir = env.root.join("pods").join(uid(pod));
        wait_until(Duration::from_secs(30), "pod directory removed", || {
            (!dir.exists()).then_some(())
        });
    }
}
