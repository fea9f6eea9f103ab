//! fsGroup ownership of volumes (issue 5 item 2), seen from inside a container running as a
//! non-root user, on a node of a real control plane with a real containerd.

mod common;

use std::time::{Duration, Instant};

use common::*;

const FS_GROUP: u32 = 2000;

fn manifest(node: &str) -> String {
    // Modes in decimal: 288 = 0440, 256 = 0400.
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: grouped
  namespace: default
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  securityContext: {{runAsUser: 1000, runAsGroup: 3000, fsGroup: {FS_GROUP}}}
  volumes:
  - name: scratch
    emptyDir: {{}}
  - name: cfg
    configMap: {{name: cfg, defaultMode: 288}}
  - name: sec
    secret: {{secretName: sec, defaultMode: 256}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
    volumeMounts:
    - {{name: scratch, mountPath: /scratch}}
    - {{name: cfg, mountPath: /etc/cfg}}
    - {{name: sec, mountPath: /etc/sec}}
"#
    )
}

async fn sh(env: &Env, pod: &k8s_openapi::api::core::v1::Pod, cmd: &str) -> String {
    let (code, out) = exec_in(env, pod, "main", &["sh", "-c", cmd]).await;
    assert_eq!(code, 0, "{cmd}: {out}");
    out.trim_end().to_string()
}

#[tokio::test]
async fn fs_group_owns_volumes_as_seen_by_a_non_root_user() {
    let cp = ControlPlane::up("pull2");
    let mut env = Env::new(212);
    let kc = cp.node_kubeconfig(&env.node);
    let kc = format!("--kubeconfig={}", kc.display());
    env.start_kubelet_with(&[&kc, "--node-ip=127.0.0.1", "--sync-frequency=5s"]);
    cp.kubectl(&["create", "configmap", "cfg", "--from-literal=key=v1"]);
    cp.kubectl(&[
        "create",
        "secret",
        "generic",
        "sec",
        "--from-literal=password=s3cret",
    ]);
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&manifest(&env.node)));
    wait_until(Duration::from_secs(60), "grouped Running", || {
        let p = cp.get_json(&["pod", "grouped"])?;
        (p["status"]["phase"] == "Running").then_some(())
    });
    let pod = wait_until(Duration::from_secs(10), "pod in the node API", || {
        let p = cp.get_json(&["pod", "grouped"])?;
        serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(p).ok()
    });

    // The fsGroup is a supplementary group of the container's processes.
    assert_eq!(
        sh(&env, &pod, "id -u; id -g; id -G").await,
        "1000\n3000\n3000 2000"
    );

    // emptyDir: group fsGroup, setgid, group rw on top of 0777; new files inherit the group.
    assert_eq!(
        sh(&env, &pod, "stat -c '%g %a' /scratch").await,
        "2000 2777"
    );
    sh(&env, &pod, "mkdir /scratch/d && echo x > /scratch/d/f").await;
    assert_eq!(
        sh(&env, &pod, "stat -c '%u %g' /scratch/d /scratch/d/f").await,
        "1000 2000\n1000 2000"
    );

    // configMap and secret: read-only volumes, so group read is added, never write; the secret
    // (0400, owned by root) is readable by the non-root user only through the fsGroup.
    assert_eq!(
        sh(
            &env,
            &pod,
            "stat -L -c '%g %a' /etc/cfg/key /etc/sec/password"
        )
        .await,
        "2000 440\n2000 440"
    );
    assert_eq!(
        sh(
            &env,
            &pod,
            "stat -L -c '%g %a' /etc/cfg/..data /etc/sec/..data"
        )
        .await,
        "2000 2755\n2000 2755"
    );
    assert_eq!(sh(&env, &pod, "cat /etc/sec/password").await, "s3cret");
    assert_eq!(sh(&env, &pod, "cat /etc/cfg/key").await, "v1");

    // A changed configMap is written to a new directory: it gets the group too. (The bound is
    // half the 1 min syncFrequency: the watch delivers the change, not the resync.)
    let t = Instant::now();
    cp.kubectl(&[
        "patch",
        "configmap",
        "cfg",
        "--type=merge",
        "-p",
        r#"{"data":{"key":"v2","new":"n"}}"#,
    ]);
    loop {
        let (_, v) = exec_in(&env, &pod, "main", &["cat", "/etc/cfg/new"]).await;
        if v.trim_end() == "n" {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "update not seen\n{}",
            tail(&env.kubelet_log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        sh(
            &env,
            &pod,
            "stat -L -c '%g %a' /etc/cfg/key /etc/cfg/new /etc/cfg/..data"
        )
        .await,
        "2000 440\n2000 440\n2000 2755"
    );
    // Syncs went by meanwhile (each sets the volumes up again): the emptyDir keeps its setgid.
    assert_eq!(
        sh(&env, &pod, "stat -c '%g %a' /scratch").await,
        "2000 2777"
    );

    cp.kubectl(&["delete", "pod", "grouped", "--wait=false"]);
    let pod_dir = env.root.join("pods").join(uid(&pod));
    wait_until(Duration::from_secs(30), "pod directory removed", || {
        (!pod_dir.exists()).then_some(())
    });
}
