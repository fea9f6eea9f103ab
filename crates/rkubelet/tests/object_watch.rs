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

#[tokio::test]
async fn watched_config_map_updates_reach_files_promptly_and_atomically() {
    let cp = ControlPlane::up("pull3");
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

    let mut delays = Vec::new();
    for letter in ['B', 'C', 'D'] {
        let t = Instant::now();
        set_value(&cp, letter, false);
        loop {
            if first(read("cat /etc/cfg/big").await) == Some(letter) {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "update to {letter} not seen in 20 s\n{}",
                tail(&env.kubelet_log(), 40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        delays.push(t.elapsed());
        // Let the reader go over the new content a while before the next change.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("configMap update -> mounted file (watch): {delays:?}");
    for d in &delays {
        assert!(*d < Duration::from_secs(10), "{delays:?}");
    }
    let reads: usize = read("wc -l < /tmp/reads").await.parse().unwrap();
    let bad = read("cat /tmp/bad").await;
    println!("reader: {reads} reads during the updates");
    assert!(reads > 10, "the reader hardly ran: {reads}");
    assert_eq!(bad, "", "the reader saw torn content");

    let log = env.kubelet_log();
    assert!(log.contains("starting watch"), "{}", tail(&log, 30));
    cp.kubectl(&["delete", "pod", "watcher", "--wait=false"]);
    wait_until(
        Duration::from_secs(30),
        "watch stopped with the pod",
        || env.kubelet_log().contains("stopping watch").then_some(()),
    );
    let pod_dir = env.root.join("pods").join(uid(&pod));
    wait_until(Duration::from_secs(30), "pod directory removed", || {
        (!pod_dir.exists()).then_some(())
    });
}
