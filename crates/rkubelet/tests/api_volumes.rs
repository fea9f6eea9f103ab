//! ConfigMaps and Secrets as volumes and env (issue 5 items 2 and 4) on a node of a real control
//! plane (etcd + kube-apiserver with Node,RBAC and NodeRestriction), read with the node's own
//! credentials, against a real private containerd.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// The resync period these tests run with, so a changed object shows within seconds.
const SYNC: &str = "--sync-frequency=5s";

/// Runs `cmd` in the container with this ID through CRI ExecSync: exit code and stdout.
async fn exec(env: &Env, container_id: &str, cmd: &[&str]) -> (i32, String) {
    let out = exec_sync(env, container_id, cmd).await;
    (
        out.exit_code,
        String::from_utf8_lossy(&out.stdout).trim_end().to_string(),
    )
}

async fn out(env: &Env, id: &str, cmd: &[&str]) -> String {
    let (code, text) = exec(env, id, cmd).await;
    assert_eq!(code, 0, "{cmd:?}: {text}");
    text
}

fn waiting(pod: &Value) -> Option<(String, String)> {
    let w = &pod["status"]["containerStatuses"][0]["state"]["waiting"];
    Some((
        w["reason"].as_str()?.to_string(),
        w["message"].as_str().unwrap_or_default().to_string(),
    ))
}

fn reader_manifest(node: &str) -> String {
    // Modes in decimal: 416 = 0640, 256 = 0400, 288 = 0440.
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: reader
  namespace: default
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  volumes:
  - name: cfg
    configMap: {{name: cfg, defaultMode: 416}}
  - name: items
    configMap:
      name: cfg
      items: [{{key: greeting, path: sub/g.txt, mode: 256}}]
  - name: sec
    secret: {{secretName: sec, defaultMode: 288}}
  - name: opt
    configMap: {{name: absent, optional: true}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
    volumeMounts:
    - {{name: cfg, mountPath: /etc/cfg}}
    - {{name: items, mountPath: /etc/items}}
    - {{name: sec, mountPath: /etc/sec}}
    - {{name: opt, mountPath: /etc/opt}}
    env:
    - name: GREETING
      valueFrom: {{configMapKeyRef: {{name: cfg, key: greeting}}}}
    - name: PASS
      valueFrom: {{secretKeyRef: {{name: sec, key: password}}}}
    - name: OPTKEY
      valueFrom: {{configMapKeyRef: {{name: cfg, key: nope, optional: true}}}}
    - name: OPTOBJ
      valueFrom: {{secretKeyRef: {{name: absent, key: x, optional: true}}}}
    envFrom:
    - prefix: CM_
      configMapRef: {{name: envcm}}
    - secretRef: {{name: absent, optional: true}}
    - configMapRef: {{name: badnames}}
"#
    )
}

#[tokio::test]
async fn config_maps_and_secrets_as_files_and_env() {
    let cp = ControlPlane::up("cm1");
    let mut env = Env::new(191);
    env.join(&cp, &[SYNC]);
    cp.kubectl(&[
        "create",
        "configmap",
        "cfg",
        "--from-literal=greeting=hello",
        "--from-literal=other=x",
    ]);
    cp.kubectl(&[
        "create",
        "configmap",
        "envcm",
        "--from-literal=A=1",
        "--from-literal=B=two words",
    ]);
    cp.kubectl(&[
        "create",
        "configmap",
        "badnames",
        "--from-literal=1st=no",
        "--from-literal=GOOD=yes",
    ]);
    cp.kubectl(&[
        "create",
        "secret",
        "generic",
        "sec",
        "--from-literal=password=s3cret",
    ]);
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&reader_manifest(&env.node)));
    let pod = wait_until(Duration::from_secs(60), "reader Running", || {
        let p = cp.get_json(&["pod", "reader"])?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    let id = pod["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .unwrap()
        .to_string();

    // configMap volume: every key, defaultMode, user-visible links into ..data.
    assert_eq!(out(&env, &id, &["cat", "/etc/cfg/greeting"]).await, "hello");
    assert_eq!(out(&env, &id, &["cat", "/etc/cfg/other"]).await, "x");
    assert_eq!(
        out(&env, &id, &["stat", "-L", "-c", "%a", "/etc/cfg/greeting"]).await,
        "640"
    );
    assert_eq!(
        out(&env, &id, &["readlink", "/etc/cfg/greeting"]).await,
        "..data/greeting"
    );
    let data = out(&env, &id, &["readlink", "/etc/cfg/..data"]).await;
    assert!(data.starts_with("..20"), "{data}");
    assert_eq!(out(&env, &id, &["ls", "/etc/cfg"]).await, "greeting\nother");
    // Read-only whatever the volumeMount says, as upstream mounts configMaps.
    assert_ne!(exec(&env, &id, &["touch", "/etc/cfg/new"]).await.0, 0);

    // items: only the listed key, at its path, with its mode.
    assert_eq!(out(&env, &id, &["ls", "/etc/items"]).await, "sub");
    assert_eq!(
        out(&env, &id, &["cat", "/etc/items/sub/g.txt"]).await,
        "hello"
    );
    assert_eq!(
        out(
            &env,
            &id,
            &["stat", "-L", "-c", "%a", "/etc/items/sub/g.txt"]
        )
        .await,
        "400"
    );

    // secret volume: decoded, defaultMode, on a tmpfs on the node.
    assert_eq!(
        out(&env, &id, &["cat", "/etc/sec/password"]).await,
        "s3cret"
    );
    assert_eq!(
        out(&env, &id, &["stat", "-L", "-c", "%a", "/etc/sec/password"]).await,
        "440"
    );
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let sec_dir = env
        .root
        .join("pods")
        .join(uid)
        .join("volumes/kubernetes.io~secret/sec");
    let sec_dir = std::fs::canonicalize(&sec_dir).unwrap();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        mountinfo.lines().any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            f.get(4) == Some(&sec_dir.to_str().unwrap()) && l.contains(" - tmpfs ")
        }),
        "no tmpfs at {}",
        sec_dir.display()
    );
    // The optional, missing configMap is an empty volume.
    assert_eq!(out(&env, &id, &["ls", "/etc/opt"]).await, "");

    // Env: key refs, envFrom with prefix; optional misses leave the variable out.
    let vars = out(&env, &id, &["env"]).await;
    for want in [
        "GREETING=hello",
        "PASS=s3cret",
        "CM_A=1",
        "CM_B=two words",
        "GOOD=yes",
    ] {
        assert!(vars.lines().any(|l| l == want), "{want} missing in\n{vars}");
    }
    assert!(
        !vars.contains("OPTKEY") && !vars.contains("OPTOBJ"),
        "{vars}"
    );

    // An update reaches both configMap volumes within a bounded time, via a new ..data. The
    // watch delivers it in a second or two; the bound is half the 1 min syncFrequency, so an
    // update left to the periodic resync fails it and a loaded machine does not.
    let t = Instant::now();
    cp.kubectl(&[
        "patch",
        "configmap",
        "cfg",
        "--type=merge",
        "-p",
        r#"{"data":{"greeting":"updated"}}"#,
    ]);
    let mut took = None;
    while t.elapsed() < Duration::from_secs(30) {
        let a = exec(&env, &id, &["cat", "/etc/cfg/greeting"]).await.1;
        let b = exec(&env, &id, &["cat", "/etc/items/sub/g.txt"]).await.1;
        if a == "updated" && b == "updated" {
            took = Some(t.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let took = took.unwrap_or_else(|| {
        panic!(
            "configMap update did not reach the files in 30 s\n{}",
            tail(&env.kubelet_log(), 40)
        )
    });
    println!("configMap update -> file: {took:?}");
    let new_data = out(&env, &id, &["readlink", "/etc/cfg/..data"]).await;
    assert_ne!(new_data, data);
    assert_eq!(
        out(&env, &id, &["readlink", "/etc/cfg/greeting"]).await,
        "..data/greeting"
    );
    // The old timestamped directory is gone: one ..20* directory and ..data remain.
    let dots = out(&env, &id, &["sh", "-c", "ls -a /etc/cfg | grep '^[.][.].'"]).await;
    assert_eq!(dots, format!("{new_data}\n..data"));

    // Deleting the configMap keeps the last content (upstream keeps a failed remount mounted):
    // FailedMount is recorded and the container keeps running.
    let restarts = |p: &Value| p["status"]["containerStatuses"][0]["restartCount"].clone();
    cp.kubectl(&["delete", "configmap", "cfg"]);
    cp.wait_pod_event("reader", "FailedMount", Duration::from_secs(30), |m| {
        m.contains("configmap \"cfg\" not found")
    });
    assert_eq!(
        out(&env, &id, &["cat", "/etc/cfg/greeting"]).await,
        "updated"
    );
    let now = cp.get_json(&["pod", "reader"]).unwrap();
    assert_eq!(now["status"]["phase"], "Running");
    assert_eq!(restarts(&now), restarts(&pod));

    cp.kubectl(&["delete", "pod", "reader", "--wait=false"]);
    let pod_dir = env.root.join("pods").join(uid);
    wait_until(Duration::from_secs(30), "pod directory removed", || {
        (!pod_dir.exists()).then_some(())
    });
}

fn pod_with(name: &str, node: &str, extra_container: &str, extra_spec: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
{extra_spec}  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
{extra_container}"#
    )
}

#[tokio::test]
async fn missing_required_objects_are_reported() {
    let cp = ControlPlane::up("cm2");
    let mut env = Env::new(192);
    env.join(&cp, &[SYNC]);
    cp.kubectl(&[
        "create",
        "configmap",
        "cfg",
        "--from-literal=greeting=hello",
    ]);
    let node = env.node.clone();
    let pods = [
        pod_with(
            "needs-volume",
            &node,
            "    volumeMounts: [{name: v, mountPath: /v}]\n",
            "  volumes: [{name: v, configMap: {name: absent}}]\n",
        ),
        pod_with(
            "needs-key",
            &node,
            "    env: [{name: FOO, valueFrom: {configMapKeyRef: {name: cfg, key: FOO}}}]\n",
            "",
        ),
        pod_with(
            "needs-object",
            &node,
            "    envFrom: [{secretRef: {name: absent}}]\n",
            "",
        ),
    ];
    for p in &pods {
        cp.kubectl_stdin(&["create", "-f", "-"], Some(p));
    }

    // A missing volume object: FailedMount events, the container waits in ContainerCreating.
    let evs = wait_until(Duration::from_secs(60), "FailedMount event", || {
        let evs = cp.pod_events("needs-volume");
        evs.iter()
            .any(|(r, m)| r == "FailedMount" && m.ends_with("not found"))
            .then_some(evs)
    });
    assert!(
        evs.iter().any(|(_, m)| m
            == "MountVolume.SetUp failed for volume \"v\" : configmap \"absent\" not found"),
        "{evs:?}"
    );
    let p = cp.pod_waiting("needs-volume");
    assert_eq!(p["status"]["phase"], "Pending");
    assert_eq!(waiting(&p).unwrap().0, "ContainerCreating", "{p}");

    // Env refs: CreateContainerConfigError with upstream's message.
    for (name, message) in [
        (
            "needs-key",
            "couldn't find key FOO in ConfigMap default/cfg",
        ),
        ("needs-object", "secret \"absent\" not found"),
    ] {
        let w = wait_until(Duration::from_secs(60), name, || {
            let p = cp.get_json(&["pod", name])?;
            waiting(&p).filter(|(r, _)| r == "CreateContainerConfigError")
        });
        assert_eq!(w.1, message, "{name}");
    }

    // Creating the object lets the pod start on a later sync.
    cp.kubectl(&["create", "configmap", "absent", "--from-literal=k=v"]);
    wait_until(Duration::from_secs(60), "needs-volume Running", || {
        let p = cp.get_json(&["pod", "needs-volume"])?;
        (p["status"]["phase"] == "Running").then_some(())
    });
}
