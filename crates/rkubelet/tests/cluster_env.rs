//! What a real cluster's workloads need from their node, against a real kube-apiserver 1.20 and a
//! private containerd (issue 14 item 1): service environment variables, cleared condition text,
//! volumes of finished pods torn down, mirror pods kept while their static pod stops, and
//! websocket log streaming.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use serde_json::Value;

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn wait_json(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<Value>) -> Value {
    wait_until(timeout, what, &mut f)
}

/// `KEY=value` lines of a container's log (what `env` printed) as a map.
fn env_map(log: &str) -> BTreeMap<String, String> {
    log.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn env_pod(name: &str, ns: &str, node: &str, links: bool) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  enableServiceLinks: {links}
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", "env; echo END; {SLEEPER}"]
    env:
    - {{name: OWN_SERVICE_HOST, value: mine}}
    - {{name: API, value: "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"}}
"#
    )
}

const SERVICE: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: my-svc
  namespace: links
spec:
  selector: {app: none}
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: dns, port: 53, protocol: UDP}
"#;

#[tokio::test]
async fn containers_get_service_environment_variables() {
    let cp = ControlPlane::up("svcenv");
    let mut env = Env::new(186);
    env.join(&cp, &[]);
    cp.kubectl(&["create", "namespace", "links"]);
    // No controller-manager here makes it.
    cp.kubectl(&["create", "serviceaccount", "default", "-n", "links"]);
    cp.kubectl_stdin(&["create", "-f", "-"], Some(SERVICE));
    // A service that shadows a variable the container sets itself, and one elsewhere.
    cp.kubectl(&[
        "create",
        "service",
        "clusterip",
        "own",
        "--tcp=81",
        "-n",
        "links",
    ]);
    cp.kubectl(&["create", "service", "clusterip", "elsewhere", "--tcp=82"]);
    let svc = cp.get_json(&["service", "my-svc", "-n", "links"]).unwrap();
    let ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    let master = cp.get_json(&["service", "kubernetes"]).unwrap();
    let master_ip = master["spec"]["clusterIP"].as_str().unwrap().to_string();
    let master_port = master["spec"]["ports"][0]["port"].to_string();

    for (name, links) in [("linked", true), ("unlinked", false)] {
        cp.kubectl_stdin(
            &["create", "-f", "-"],
            Some(&env_pod(name, "links", &env.node, links)),
        );
    }
    let logs = |name: &str| -> BTreeMap<String, String> {
        let log = wait_until(
            Duration::from_secs(60),
            &format!("{name} printed env"),
            || {
                let p = cp.get_json(&["pod", name, "-n", "links"])?;
                p["status"]["containerStatuses"][0]["state"]["running"].as_object()?;
                let out = std::process::Command::new("kubectl")
                    .arg("--kubeconfig")
                    .arg(&cp.admin_kubeconfig)
                    .args(["logs", "-n", "links", name])
                    .output()
                    .ok()?;
                let s = String::from_utf8_lossy(&out.stdout).into_owned();
                s.contains("END").then_some(s)
            },
        );
        env_map(&log)
    };

    let linked = logs("linked");
    let want_master = [
        ("KUBERNETES_SERVICE_HOST", master_ip.clone()),
        ("KUBERNETES_SERVICE_PORT", master_port.clone()),
        ("KUBERNETES_SERVICE_PORT_HTTPS", master_port.clone()),
        (
            "KUBERNETES_PORT",
            format!("tcp://{master_ip}:{master_port}"),
        ),
        ("API", format!("https://{master_ip}:{master_port}")),
    ];
    for (k, v) in &want_master {
        assert_eq!(linked.get(*k), Some(v), "{k} in {linked:?}");
    }
    let want_links = [
        ("MY_SVC_SERVICE_HOST", ip.clone()),
        ("MY_SVC_SERVICE_PORT", "80".to_string()),
        ("MY_SVC_SERVICE_PORT_HTTP", "80".to_string()),
        ("MY_SVC_SERVICE_PORT_DNS", "53".to_string()),
        ("MY_SVC_PORT", format!("tcp://{ip}:80")),
        ("MY_SVC_PORT_80_TCP", format!("tcp://{ip}:80")),
        ("MY_SVC_PORT_80_TCP_PROTO", "tcp".to_string()),
        ("MY_SVC_PORT_80_TCP_PORT", "80".to_string()),
        ("MY_SVC_PORT_80_TCP_ADDR", ip.clone()),
        ("MY_SVC_PORT_53_UDP", format!("udp://{ip}:53")),
        ("MY_SVC_PORT_53_UDP_PROTO", "udp".to_string()),
        ("OWN_SERVICE_HOST", "mine".to_string()),
    ];
    for (k, v) in &want_links {
        assert_eq!(linked.get(*k), Some(v), "{k} in {linked:?}");
    }
    assert!(!linked.contains_key("ELSEWHERE_SERVICE_HOST"), "{linked:?}");

    // enableServiceLinks: false still gets the master service, and nothing of the namespace.
    let unlinked = logs("unlinked");
    for (k, v) in &want_master {
        assert_eq!(unlinked.get(*k), Some(v), "{k} in {unlinked:?}");
    }
    assert!(
        !unlinked.contains_key("MY_SVC_SERVICE_HOST"),
        "{unlinked:?}"
    );
    assert_eq!(
        unlinked.get("OWN_SERVICE_HOST").map(String::as_str),
        Some("mine")
    );
}

/// Readiness false -> true: the Ready and ContainersReady conditions lose the reason and message
/// of their False days (upstream's two-way patch nulls them).
#[tokio::test]
async fn conditions_that_turn_true_lose_their_reason_and_message() {
    let cp = ControlPlane::up("condtext");
    let mut env = Env::new(187);
    env.join(&cp, &[]);
    let probe = "    readinessProbe:\n      exec: {command: [cat, /tmp/ready]}\n      periodSeconds: 1\n      failureThreshold: 1\n";
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod(
            "flip",
            &env.node,
            &format!("sleep 6; touch /tmp/ready; {SLEEPER}"),
            1,
            probe,
        )),
    );
    let unready = wait_json("flip running, not ready", Duration::from_secs(60), || {
        let p = cp.get_json(&["pod", "flip"])?;
        p["status"]["containerStatuses"][0]["state"]["running"].as_object()?;
        (condition(&p, "Ready")?["status"] == "False").then_some(p)
    });
    for c in ["Ready", "ContainersReady"] {
        let c = condition(&unready, c).unwrap();
        assert_eq!(c["reason"], "ContainersNotReady", "{c}");
        assert!(c["message"].is_string(), "{c}");
    }
    let ready = wait_json("flip ready", Duration::from_secs(30), || {
        let p = cp.get_json(&["pod", "flip"])?;
        (condition(&p, "Ready")?["status"] == "True").then_some(p)
    });
    for c in ["Ready", "ContainersReady"] {
        let c = condition(&ready, c).unwrap();
        assert!(c["reason"].is_null(), "stale reason: {c}");
        assert!(c["message"].is_null(), "stale message: {c}");
        assert!(c["lastTransitionTime"].is_string(), "{c}");
    }
}

/// A Succeeded `restartPolicy: Never` pod gives its volumes back at once (its memory-backed
/// emptyDir above all) while the object stays, and its log can still be read.
#[tokio::test]
async fn finished_pods_give_back_their_volumes() {
    let cp = ControlPlane::up("finished");
    let mut env = Env::new(188);
    env.join(&cp, &[]);
    let pod = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: job
  namespace: default
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  restartPolicy: Never
  volumes:
  - {{name: cache, emptyDir: {{medium: Memory}}}}
  - {{name: scratch, emptyDir: {{}}}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", "grep /cache /proc/mounts; echo data > /cache/f; echo data > /scratch/f; sleep 2; echo done"]
    volumeMounts:
    - {{name: cache, mountPath: /cache}}
    - {{name: scratch, mountPath: /scratch}}
"#,
        node = env.node
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&pod));
    let p = wait_json("job Succeeded", Duration::from_secs(60), || {
        let p = cp.get_json(&["pod", "job"])?;
        (p["status"]["phase"] == "Succeeded").then_some(p)
    });
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let pod_dir = env.root.join("pods").join(&uid);
    let volumes = pod_dir.join("volumes/kubernetes.io~empty-dir");
    wait_until(
        Duration::from_secs(20),
        "volumes of the finished pod torn down",
        || {
            (mounts_below(&pod_dir).is_empty()
                && !volumes.join("cache").exists()
                && !volumes.join("scratch").exists())
            .then_some(())
        },
    );
    assert!(
        cp.get_json(&["pod", "job"]).is_some(),
        "the pod object stays"
    );
    let log = cp.kubectl(&["logs", "job"]);
    assert!(log.contains("tmpfs"), "the cache was a tmpfs: {log}");
    assert!(log.contains("done"), "{log}");
}

/// Removing a static pod's manifest keeps its mirror pod (Running) while the pod stops within its
/// grace period (here a 6 s preStop hook); the mirror goes once the pod has terminated.
#[tokio::test]
async fn mirror_pods_stay_while_their_static_pod_stops() {
    let cp = ControlPlane::up("mirrorstay");
    let mut env = Env::new(189);
    env.write_manifest(
        "slow.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: slow
  namespace: default
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
    lifecycle:
      preStop:
        exec: {{command: ["sleep", "6"]}}
"#
        ),
    );
    env.join(&cp, &[]);
    let name = format!("slow-{}", env.node);
    wait_json("mirror pod Running", Duration::from_secs(60), || {
        let p = cp.get_json(&["pod", &name])?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    let static_uid = env.wait_running("slow").metadata.uid.unwrap();

    let removed = std::time::Instant::now();
    env.remove_manifest("slow.yaml");
    // The kubelet sees the removal within a second or two (inotify, else its rescan); the
    // preStop hook holds the pod for 6 s after that.
    wait_until(Duration::from_secs(25), "static pod stopping", || {
        env.kubelet_log().contains("terminating pod").then_some(())
    });
    let during = removed.elapsed();
    std::thread::sleep(Duration::from_secs(3));
    let mirror = cp
        .get_json(&["pod", &name])
        .unwrap_or_else(|| panic!("mirror pod gone {:?} after removal", removed.elapsed()));
    assert_eq!(mirror["status"]["phase"], "Running", "{mirror}");
    assert!(
        mirror["metadata"]["deletionTimestamp"].is_null(),
        "{mirror}"
    );
    assert!(
        !env.containers_of(&static_uid).await.is_empty(),
        "the static pod is still stopping"
    );

    wait_until(Duration::from_secs(40), "mirror pod removed", || {
        cp.get_json(&["pod", &name]).is_none().then_some(())
    });
    let gone = removed.elapsed();
    assert!(
        gone >= during + Duration::from_secs(5),
        "mirror removed {gone:?} after the manifest, the pod began stopping at {during:?}"
    );
}

/// One websocket request for `path` on the kubelet's secure port, as the apiserver's kubelet
/// client (TLS through `openssl s_client`); returns the response head and the frames received
/// until the server closed the connection, as (opcode, payload).
fn websocket_get(
    cp: &ControlPlane,
    env: &Env,
    path: &str,
    protocol: &str,
) -> (String, Vec<(u8, Vec<u8>)>) {
    use std::io::{Read, Write};
    let pki = cp.dir.join("pki");
    let mut child = std::process::Command::new("timeout")
        .args(["30", "openssl", "s_client", "-quiet", "-connect"])
        .arg(format!("127.0.0.1:{}", env.port))
        .arg("-cert")
        .arg(pki.join("apiserver-kubelet-client.crt"))
        .arg("-key")
        .arg(pki.join("apiserver-kubelet-client.key"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("openssl s_client");
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Protocol: {protocol}\r\n\r\n"
    );
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    drop(stdin);
    let _ = child.wait();
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP response");
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let mut rest = &out[split + 4..];
    let mut frames = Vec::new();
    while rest.len() >= 2 {
        let op = rest[0] & 0x0f;
        let (len, at) = match rest[1] & 0x7f {
            126 => (u16::from_be_bytes([rest[2], rest[3]]) as usize, 4),
            127 => (
                u64::from_be_bytes(rest[2..10].try_into().unwrap()) as usize,
                10,
            ),
            n => (n as usize, 2),
        };
        frames.push((op, rest[at..at + len].to_vec()));
        rest = &rest[at + len..];
    }
    (head, frames)
}

/// `containerLogs` upgraded to a websocket answers with the log, as base64 text messages
/// (`base64.binary.k8s.io`) or binary ones (`binary.k8s.io`), then a normal close.
#[tokio::test]
async fn container_logs_stream_over_websockets() {
    use base64::Engine;
    let cp = ControlPlane::up("wslogs");
    let mut env = Env::new(190);
    env.join(&cp, &[]);
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod(
            "talker",
            &env.node,
            &format!("echo hello; echo world; {SLEEPER}"),
            1,
            "",
        )),
    );
    cp.wait_running("talker");
    wait_until(Duration::from_secs(20), "talker logged", || {
        cp.kubectl(&["logs", "talker"])
            .contains("world")
            .then_some(())
    });
    let path = "/containerLogs/default/talker/main";
    for (protocol, base64) in [("base64.binary.k8s.io", true), ("binary.k8s.io", false)] {
        let (head, frames) = websocket_get(&cp, &env, path, protocol);
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        assert!(
            head.to_lowercase()
                .contains(&format!("sec-websocket-protocol: {protocol}")),
            "{head}"
        );
        assert!(head.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "{head}");
        let (last, data) = frames.split_last().expect("frames");
        assert_eq!(last.0, 0x8, "ends with a close frame: {frames:?}");
        let mut log = Vec::new();
        for (op, payload) in data {
            if base64 {
                assert_eq!(*op, 0x1, "text messages");
                log.extend(
                    base64::engine::general_purpose::STANDARD
                        .decode(payload)
                        .unwrap(),
                );
            } else {
                assert_eq!(*op, 0x2, "binary messages");
                log.extend_from_slice(payload);
            }
        }
        assert_eq!(
            String::from_utf8_lossy(&log),
            "hello\nworld\n",
            "{protocol}"
        );
    }
}
