//! The authenticated kubelet API (10250-style port) through a real kube-apiserver 1.20 (Node,RBAC)
//! and a real private containerd: `kubectl logs` in its forms, and authentication/authorization
//! of direct requests (anonymous 401, a token without rights 403, the apiserver's client cert
//! allowed).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// `kubectl` as admin; Ok(stdout) or Err(stderr).
fn kubectl_try(cp: &ControlPlane, args: &[&str]) -> Result<String, String> {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&cp.admin_kubeconfig)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("kubectl");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test]
async fn kubectl_logs_tail_and_follow_through_the_apiserver() {
    let cp = ControlPlane::up("srv-logs");
    let mut env = Env::new(171);
    env.join(&cp, &[]);
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&api_pod(
            "counter",
            &env.node,
            "i=0; while true; do i=$((i+1)); echo line-$i; sleep 0.3; done",
            1,
            "",
        )),
    );
    cp.wait_running("counter");
    let all = wait_until(Duration::from_secs(20), "5 log lines", || {
        let out = kubectl_try(&cp, &["logs", "counter"]).ok()?;
        (out.lines().count() >= 5).then_some(out)
    });
    assert!(all.starts_with("line-1\nline-2\n"), "{all}");

    let tail = cp.kubectl(&["logs", "counter", "--tail=2"]);
    let lines: Vec<&str> = tail.lines().collect();
    assert_eq!(lines.len(), 2, "{tail}");
    let n: Vec<u64> = lines
        .iter()
        .map(|l| l.trim_start_matches("line-").parse().unwrap())
        .collect();
    assert_eq!(n[1], n[0] + 1, "{tail}");
    assert!(n[0] >= 4, "the last lines, not the first: {tail}");

    let ts = cp.kubectl(&["logs", "counter", "--tail=1", "--timestamps"]);
    assert!(
        ts.contains("Z line-") || ts.contains("+00:00 line-"),
        "{ts}"
    );

    // -f: new lines arrive while following; the stream is cut by killing kubectl.
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&cp.admin_kubeconfig)
        .args(["logs", "-f", "counter", "--tail=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let start = Instant::now();
    let mut seen = Vec::new();
    let mut line = String::new();
    while seen.len() < 4 && start.elapsed() < Duration::from_secs(20) {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(n) = line.trim().strip_prefix("line-") {
            seen.push(n.parse::<u64>().unwrap());
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(seen.len(), 4, "followed lines: {seen:?}");
    assert!(
        seen.windows(2).all(|w| w[1] == w[0] + 1),
        "consecutive new lines: {seen:?}"
    );
    // The apiserver drops its request when kubectl goes away, and the kubelet stops following.
    wait_until(Duration::from_secs(20), "follow stopped", || {
        env.kubelet_log()
            .contains("containerLogs client went away")
            .then_some(())
    });

    // Errors come back with upstream's wording.
    let err = kubectl_try(&cp, &["logs", "counter", "--previous"]).unwrap_err();
    assert!(
        err.contains("previous terminated container \"main\" in pod \"counter\" not found"),
        "{err}"
    );
    // An unknown container: kubectl asks the apiserver, which may answer itself from the pod's
    // spec, so ask rkubelet directly (as the apiserver's kubelet client): upstream's 404.
    let cert = cp.dir.join("pki/apiserver-kubelet-client.crt");
    let key = cp.dir.join("pki/apiserver-kubelet-client.key");
    let creds = [
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];
    let (code, body) = curl(&env, "/containerLogs/default/counter/nope", &creds);
    assert_eq!(
        (code, body.as_str()),
        (404, "container \"nope\" not found in pod \"counter\"\n"),
        "rkubelet's own answer on {} for a container the pod does not have",
        env.port
    );
    let (code, body) = curl(&env, "/containerLogs/default/nosuch/main", &creds);
    assert_eq!(
        (code, body.as_str()),
        (404, "pod \"nosuch\" does not exist\n"),
        "rkubelet's own answer on {} for a pod it does not have",
        env.port
    );
}

#[tokio::test]
async fn kubectl_logs_previous_after_a_restart() {
    let cp = ControlPlane::up("srv-prev");
    let mut env = Env::new(172);
    env.join(&cp, &[]);
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&api_pod(
            "crasher",
            &env.node,
            "echo instance-$(cat /proc/sys/kernel/random/uuid); sleep 2; exit 3",
            1,
            "",
        )),
    );
    // The previous instance is the one in lastState, not the current one. Read while the second
    // instance runs (2 s): once it exits, the back-off moves it into lastState, as upstream's.
    let cs = wait_json(
        "crasher restarted and running again",
        Duration::from_secs(90),
        || {
            let p = cp.get_json(&["pod", "crasher"])?;
            let cs = p["status"]["containerStatuses"][0].clone();
            (cs["restartCount"].as_i64()? >= 1 && cs["state"]["running"].is_object()).then_some(cs)
        },
    );
    let prev = wait_until(Duration::from_secs(20), "previous logs", || {
        kubectl_try(&cp, &["logs", "crasher", "--previous"]).ok()
    });
    let lines: Vec<&str> = prev.lines().collect();
    assert_eq!(lines.len(), 1, "{prev}");
    assert!(lines[0].starts_with("instance-"), "{prev}");
    let last_id = cs["lastState"]["terminated"]["containerID"]
        .as_str()
        .unwrap();
    assert_ne!(cs["containerID"].as_str(), Some(last_id));
}

#[tokio::test]
async fn secure_port_authenticates_and_authorizes() {
    let cp = ControlPlane::up("srv-auth");
    let mut env = Env::new(173);
    env.join(&cp, &[]);
    env.wait_secure_port();

    // No credentials: 401, on every path (healthz included), as upstream.
    for path in ["/pods", "/healthz", "/containerLogs/default/x/y"] {
        let (code, body) = curl(&env, path, &[]);
        assert_eq!((code, body.as_str()), (401, "Unauthorized"), "{path}");
    }
    // A garbage token: 401 too.
    let (code, _) = curl(&env, "/pods", &["-H", "Authorization: Bearer not-a-token"]);
    assert_eq!(code, 401);

    // A real service account token (TokenRequest), without any RBAC rights: 403 with upstream's
    // message naming the subresources tried.
    cp.kubectl(&["create", "serviceaccount", "nobody"]);
    let token = cp.kubectl(&["create", "token", "nobody"]);
    let auth = format!("Authorization: Bearer {}", token.trim());
    let (code, body) = curl(&env, "/pods", &["-H", &auth]);
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body,
        "Forbidden (user=system:serviceaccount:default:nobody, verb=get, resource=nodes, subresource(s)=[pods proxy])"
    );
    let (code, body) = curl(&env, "/stats/summary", &["-H", &auth]);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("subresource(s)=[stats]"), "{body}");

    // Granting nodes/proxy through RBAC lets the same token in, once the denial cached for the
    // `get nodes/proxy` review (30 s, upstream's cacheUnauthorizedTTL) has expired.
    cp.kubectl(&[
        "create",
        "clusterrole",
        "node-proxy",
        "--verb=get",
        "--resource=nodes/proxy",
    ]);
    cp.kubectl(&[
        "create",
        "clusterrolebinding",
        "nobody-node-proxy",
        "--clusterrole=node-proxy",
        "--serviceaccount=default:nobody",
    ]);
    let (code, body) = wait_until(Duration::from_secs(45), "token allowed", || {
        let r = curl(&env, "/runningpods/", &["-H", &auth]);
        (r.0 == 200).then_some(r)
    });
    assert_eq!(code, 200);
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "PodList");

    // The apiserver's kubelet-client cert, directly and through nodes/proxy.
    let cert = cp.dir.join("pki/apiserver-kubelet-client.crt");
    let key = cp.dir.join("pki/apiserver-kubelet-client.key");
    let (code, body) = curl(
        &env,
        "/healthz",
        &[
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!((code, body.as_str()), (200, "ok"));
    let raw = cp.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/pods", env.node),
    ]);
    let pods: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(pods["kind"], "PodList", "{raw}");
    // What metrics-server and Prometheus scrape through the same path.
    for (path, want) in [
        ("metrics/resource", "node_cpu_usage_seconds_total"),
        ("metrics", "kubelet_running_pods"),
        ("stats/summary", "\"usageCoreNanoSeconds\""),
        ("configz", "\"kubeletconfig\""),
    ] {
        let raw = cp.kubectl(&[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{}/proxy/{path}", env.node),
        ]);
        assert!(raw.contains(want), "{path}: {raw}");
    }

    // A client cert from another CA is not an identity: the handshake is refused.
    let other = env.dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let o = |f: &str| other.join(f).to_str().unwrap().to_string();
    let st = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/O=system:masters/CN=intruder"])
        .args(["-keyout", &o("k.pem"), "-out", &o("c.pem")])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    // Not a 401 or 403 (the request never gets that far): curl fails in TLS, on the server's
    // alert refusing the certificate, and no HTTP status comes back.
    let out = Command::new("curl")
        .args(["-sSk", "-o", "/dev/null", "-w", "%{http_code}"])
        // TLS 1.2: the refusal is an alert in the handshake. With 1.3 it comes after the client
        // thinks the handshake is done, and curl sometimes sees a reset (exit 55) instead.
        .args(["--tls-max", "1.2"])
        .args(["--cert", &o("c.pem"), "--key", &o("k.pem")])
        .arg(format!("https://127.0.0.1:{}/pods", env.port))
        .output()
        .expect("curl");
    let err = String::from_utf8_lossy(&out.stderr);
    // 35: handshake failed; 56: with TLS 1.3 the alert can arrive on the first read instead.
    assert!(
        matches!(out.status.code(), Some(35 | 56)),
        "a client certificate from another CA should fail the TLS handshake; curl exit {:?}, \
         HTTP status {}: {err}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "000", "{err}");
    assert!(
        ["certificate unknown", "unknown ca", "bad certificate"]
            .iter()
            .any(|a| err.contains(&format!("alert {a}"))),
        "{err}"
    );
}

#[tokio::test]
async fn debugging_handlers_off_answer_405() {
    let cp = ControlPlane::up("srv-nodebug");
    let mut env = Env::new(174);
    env.extra_config = "enableDebuggingHandlers: false\n".into();
    env.join(&cp, &[]);
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&api_pod(
            "quiet",
            &env.node,
            "echo hello; sleep 3600",
            1,
            "",
        )),
    );
    cp.wait_running("quiet");
    let err = kubectl_try(&cp, &["logs", "quiet"]).unwrap_err();
    assert!(
        err.contains("does not allow this method") || err.contains("Debug endpoints are disabled"),
        "{err}"
    );
    let cert = cp.dir.join("pki/apiserver-kubelet-client.crt");
    let key = cp.dir.join("pki/apiserver-kubelet-client.key");
    let creds = [
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];
    let (code, body) = curl(&env, "/containerLogs/default/quiet/main", &creds);
    assert_eq!(
        (code, body.as_str()),
        (405, "Debug endpoints are disabled.")
    );
    let (code, _) = curl(&env, "/runningpods/", &creds);
    assert_eq!(code, 405);
    // Everything else stays on.
    let (code, body) = curl(&env, "/pods", &creds);
    assert_eq!(code, 200, "{body}");
}
