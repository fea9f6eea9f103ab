//! TLS bootstrap and certificate rotation against a real kube-apiserver 1.20 (bootstrap token
//! authentication, Node,RBAC, NodeRestriction) and a real kube-controller-manager running
//! csrapproving and csrsigning with the cluster CA, as `kubeadm join` relies on.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use common::*;
use rkubelet_cri::api;
use serde_json::Value;

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn wait_ready(cp: &ControlPlane, node: &str) -> Value {
    wait_until(Duration::from_secs(60), "node Ready", || {
        let n = cp.get_json(&["node", node])?;
        (condition(&n, "Ready")?["status"] == "True").then_some(n)
    })
}

/// The node's Lease, if it exists yet.
fn lease(cp: &ControlPlane, node: &str) -> Option<Value> {
    cp.get_json(&["lease", "-n", "kube-node-lease", node])
}

/// Waits until the node's Lease was renewed since `before` (the kubelet reaches the API server
/// with whatever client cert the test is about).
fn wait_lease_renewed(cp: &ControlPlane, node: &str, before: &Value, within: Duration, what: &str) {
    wait_until(within, what, || {
        let l = lease(cp, node)?;
        (l["spec"]["renewTime"] != before["spec"]["renewTime"]).then_some(())
    });
}

/// `openssl x509 -noout ARGS` on a PEM file (its first certificate).
fn x509(pem: &Path, args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-in"])
        .arg(pem)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Whether the cert in `pem` chains to the test cluster's CA.
fn signed_by_ca(cp: &ControlPlane, pem: &Path) -> bool {
    let out = Command::new("openssl")
        .arg("verify")
        .arg("-CAfile")
        .arg(cp.dir.join("pki/ca.crt"))
        .arg(pem)
        .output()
        .unwrap();
    out.status.success()
}

/// notAfter of the cert in `pem`, as seconds since the epoch.
fn not_after(pem: &Path) -> u64 {
    let line = x509(pem, &["-enddate", "-dateopt", "iso_8601"]);
    let t = line.trim_start_matches("notAfter=").replace(' ', "T");
    t.parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("{line}: {e}"))
        .as_second() as u64
}

/// The timestamped `<pair>-*.pem` files in `dir`.
fn issued(dir: &Path, pair: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| {
        let n = p.file_name().unwrap().to_string_lossy().to_string();
        n.starts_with(&format!("{pair}-2")) && n.ends_with(".pem")
    });
    v.sort();
    v
}

fn csrs(cp: &ControlPlane) -> Vec<Value> {
    cp.get_json(&["csr"]).unwrap()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Starts rkubelet with only a token-bearing bootstrap kubeconfig; --kubeconfig does not exist.
fn start_bootstrapping(cp: &ControlPlane, env: &mut Env, extra: &[&str]) -> (PathBuf, PathBuf) {
    let boot = cp.bootstrap_kubeconfig();
    let kubeconfig = env.dir.join("kubelet.conf");
    let cert_dir = env.dir.join("pki");
    assert!(!kubeconfig.exists());
    let mut args = vec![
        format!("--bootstrap-kubeconfig={}", boot.display()),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--cert-dir={}", cert_dir.display()),
        "--node-ip=127.0.0.1".to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    env.start_kubelet_with(&refs);
    (kubeconfig, cert_dir)
}

fn running_container(cp: &ControlPlane, pod: &str) -> Option<(String, i64)> {
    let p = cp.get_json(&["pod", pod])?;
    let cs = &p["status"]["containerStatuses"][0];
    cs["state"]["running"].is_object().then(|| {
        (
            cs["containerID"].as_str().unwrap_or_default().to_string(),
            cs["restartCount"].as_i64().unwrap_or(-1),
        )
    })
}

#[tokio::test]
async fn bootstrap_join_from_token_alone() {
    let cp = ControlPlane::up("boot1");
    cp.start_controller_manager(&[]);
    let mut env = Env::new(251);
    let (kubeconfig, cert_dir) = start_bootstrapping(&cp, &mut env, &[]);
    wait_ready(&cp, &env.node);

    // The issued client cert: node identity, signed by the cluster CA, through the current link.
    let current = cert_dir.join("kubelet-client-current.pem");
    let target = std::fs::read_link(&current).expect("kubelet-client-current.pem is a symlink");
    assert!(
        target
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("kubelet-client-2"),
        "{target:?}"
    );
    let subject = x509(&current, &["-subject", "-nameopt", "RFC2253"]);
    assert!(
        subject.contains(&format!("CN=system:node:{}", env.node))
            && subject.contains("O=system:nodes"),
        "{subject}"
    );
    assert!(signed_by_ca(&cp, &current));
    assert!(
        !cert_dir.join("kubelet-client.key.tmp").exists(),
        "pending key removed once issued"
    );

    // The kubeconfig it wrote points at the current pem, as upstream's.
    let kc = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(
        kc.contains(&format!("client-certificate: \"{}\"", current.display())),
        "{kc}"
    );
    assert!(kc.contains("certificate-authority-data:"), "{kc}");

    // One CSR, from the bootstrap token's user, auto-approved by csrapproving.
    let list = csrs(&cp);
    assert_eq!(list.len(), 1, "{list:?}");
    let csr = &list[0];
    assert_eq!(
        csr["spec"]["signerName"],
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert!(
        csr["spec"]["username"]
            .as_str()
            .unwrap()
            .starts_with("system:bootstrap:"),
        "{csr}"
    );
    assert_eq!(
        condition(csr, "Approved").unwrap()["reason"],
        "AutoApproved"
    );
    let usages: Vec<&str> = csr["spec"]["usages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        usages,
        ["digital signature", "key encipherment", "client auth"]
    );

    // The node acts as itself: pods bound to it run.
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod("joined", &env.node, SLEEPER, 1, "")),
    );
    wait_until(Duration::from_secs(90), "pod running", || {
        running_container(&cp, "joined")
    });

    // A restart finds a valid cert in --kubeconfig and asks for nothing.
    env.stop_kubelet(nix::sys::signal::Signal::SIGTERM);
    env.start_kubelet_with(&[
        &format!(
            "--bootstrap-kubeconfig={}",
            cp.dir.join("bootstrap-kubelet.kubeconfig").display()
        ),
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--cert-dir={}", cert_dir.display()),
        "--node-ip=127.0.0.1",
    ]);
    let before = lease(&cp, &env.node).unwrap();
    wait_lease_renewed(
        &cp,
        &env.node,
        &before,
        Duration::from_secs(30),
        "lease renewed after restart",
    );
    assert_eq!(csrs(&cp).len(), 1, "no second CSR after restart");
    assert_eq!(issued(&cert_dir, "kubelet-client").len(), 1);
    cp.kubectl(&["delete", "pod", "joined", "--wait=false"]);
    wait_until(Duration::from_secs(60), "pod gone", || {
        cp.get_json(&["pod", "joined"]).is_none().then_some(())
    });
}

/// The controller-manager signs for 450 s (`--cluster-signing-duration`, which 1.20 has). Its
/// signer backdates notBefore by 5 minutes, so the cert lives 150 s from issuance and the kubelet's
/// 70-90% deadline (upstream's jitter, no test-only switch) falls 15-105 s after issuance. The test
/// then waits past the first cert's expiry: the node can only keep renewing its lease if new
/// requests use the new cert. Then it restarts the kubelet on a kubeconfig embedding the expired
/// first pair: only the cert dir's rotated pair lets it renew the lease.
#[tokio::test]
async fn short_lived_client_cert_is_rotated_while_pod_runs() {
    let cp = ControlPlane::up("boot2");
    cp.start_controller_manager(&["--cluster-signing-duration=450s"]);
    let mut env = Env::new(252);
    let (kubeconfig, cert_dir) = start_bootstrapping(&cp, &mut env, &["--rotate-certificates"]);
    wait_ready(&cp, &env.node);
    let first = issued(&cert_dir, "kubelet-client");
    assert_eq!(first.len(), 1, "{first:?}");
    let first_expiry = not_after(&first[0]);
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod("steady", &env.node, SLEEPER, 1, "")),
    );
    let (container, _) = wait_until(Duration::from_secs(90), "pod running", || {
        running_container(&cp, "steady")
    });

    let current = cert_dir.join("kubelet-client-current.pem");
    let rotated_at = wait_until(Duration::from_secs(150), "client cert rotated", || {
        let files = issued(&cert_dir, "kubelet-client");
        (files.len() >= 2 && std::fs::read_link(&current).ok()? != first[0]).then(Instant::now)
    });
    let second = std::fs::read_link(&current).unwrap();
    assert!(signed_by_ca(&cp, &current));
    assert!(not_after(&second) > first_expiry);
    let rotation_csr = csrs(&cp)
        .into_iter()
        .find(|c| c["spec"]["username"] == format!("system:node:{}", env.node))
        .expect("a CSR from the node itself");
    assert_eq!(
        condition(&rotation_csr, "Approved").unwrap()["reason"],
        "AutoApproved"
    );
    assert!(
        env.kubelet_log().contains("rotated the client certificate"),
        "{}",
        tail(&env.kubelet_log(), 30)
    );
    eprintln!("rotated after {:?} of waiting", rotated_at.elapsed());

    // Past the first cert's notAfter: the lease still renews and the pod was never touched.
    let now = || {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    while now() < first_expiry + 5 {
        std::thread::sleep(Duration::from_secs(1));
    }
    let before = lease(&cp, &env.node).unwrap();
    wait_lease_renewed(
        &cp,
        &env.node,
        &before,
        Duration::from_secs(30),
        "lease renewed after old cert expired",
    );
    wait_ready(&cp, &env.node);
    let log = env.kubelet_log();
    assert!(
        !log.contains("certificate has expired"),
        "{}",
        tail(&log, 40)
    );
    assert_eq!(
        running_container(&cp, "steady"),
        Some((container.clone(), 0))
    );

    // A restart whose kubeconfig embeds the first, now expired, pair as data (as kubeadm's first
    // kubelet.conf does) and with no bootstrap kubeconfig: as upstream's, the kubelet starts with
    // the cert dir's rotated pair, so the node keeps renewing its lease and the pod is adopted.
    let uid = cp.get_json(&["pod", "steady"]).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let sandboxes_before = env.sandbox_ids(&uid).await;
    assert_eq!(sandboxes_before.len(), 1, "{sandboxes_before:?}");
    env.stop_kubelet(nix::sys::signal::Signal::SIGTERM);
    let first_pem = std::fs::read_to_string(&first[0]).unwrap();
    let end = "-----END CERTIFICATE-----";
    let split = first_pem
        .rfind(end)
        .expect("a certificate in the first pair")
        + end.len();
    let (cert_pem, key_pem) = first_pem.split_at(split);
    let b64 = |s: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(s.trim())
    };
    let written = std::fs::read_to_string(&kubeconfig).unwrap();
    let mut embedded = String::new();
    for line in written.lines() {
        let indent = &line[..line.len() - line.trim_start().len()];
        if line.trim_start().starts_with("client-certificate:") {
            embedded += &format!("{indent}client-certificate-data: {}\n", b64(cert_pem));
        } else if line.trim_start().starts_with("client-key:") {
            embedded += &format!("{indent}client-key-data: {}\n", b64(key_pem));
        } else {
            embedded += &format!("{line}\n");
        }
    }
    assert!(embedded.contains("client-key-data"), "{written}");
    let embedded_path = env.dir.join("kubelet-embedded.conf");
    std::fs::write(&embedded_path, embedded).unwrap();
    let before = lease(&cp, &env.node).unwrap();
    env.start_kubelet_with(&[
        &format!("--kubeconfig={}", embedded_path.display()),
        &format!("--cert-dir={}", cert_dir.display()),
        "--node-ip=127.0.0.1",
        "--rotate-certificates",
    ]);
    wait_lease_renewed(
        &cp,
        &env.node,
        &before,
        Duration::from_secs(60),
        "lease renewed after a restart with an expired embedded cert",
    );
    let log = env.last_kubelet_log();
    assert!(
        log.contains("using the client certificate in the cert dir"),
        "{}",
        tail(&log, 40)
    );
    // Adopted, not restarted: from the moment the new kubelet has the pod from the API, and
    // through its first syncs (10 s; a sync after the restart that replaced anything would show
    // within the first), the runtime keeps the pod's one sandbox and one container, running.
    wait_until(
        Duration::from_secs(30),
        "the new kubelet has the pod",
        || {
            env.last_kubelet_log()
                .contains(r#""pod added" pod="default/steady""#)
                .then_some(())
        },
    );
    for _ in 0..10 {
        let in_runtime = env.containers_of(&uid).await;
        assert_eq!(in_runtime.len(), 1, "{in_runtime:?}");
        assert_eq!(format!("containerd://{}", in_runtime[0].id), container);
        assert_eq!(
            in_runtime[0].state,
            api::ContainerState::ContainerRunning as i32
        );
        let sandboxes = env.sandbox_ids(&uid).await;
        assert_eq!(sandboxes, sandboxes_before);
        std::thread::sleep(Duration::from_secs(1));
    }
    // The API still reaches the node with the pod's status updates: delete goes through.
    cp.kubectl(&["delete", "pod", "steady", "--wait=false"]);
    wait_until(Duration::from_secs(60), "pod gone", || {
        cp.get_json(&["pod", "steady"]).is_none().then_some(())
    });
}

/// serverTLSBootstrap: a kubelet-serving CSR with the node's names, approved by the admin (1.20's
/// csrapproving leaves those alone, as kubeadm documents), then served on the secure port.
#[tokio::test]
async fn server_tls_bootstrap_serves_cluster_signed_cert() {
    let cp = ControlPlane::up("boot3");
    cp.start_controller_manager(&[]);
    let mut env = Env::new(253);
    env.extra_config = "serverTLSBootstrap: true\n".into();
    let ca = format!("--client-ca-file={}", cp.dir.join("pki/ca.crt").display());
    start_bootstrapping(&cp, &mut env, &[&ca]);
    wait_ready(&cp, &env.node);

    let csr = wait_until(Duration::from_secs(30), "kubelet-serving CSR", || {
        csrs(&cp)
            .into_iter()
            .find(|c| c["spec"]["signerName"] == "kubernetes.io/kubelet-serving")
    });
    assert_eq!(csr["spec"]["username"], format!("system:node:{}", env.node));
    assert!(
        condition(&csr, "Approved").is_none(),
        "not auto-approved in 1.20: {csr}"
    );
    let usages: Vec<&str> = csr["spec"]["usages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        usages,
        ["digital signature", "key encipherment", "server auth"]
    );
    let name = csr["metadata"]["name"].as_str().unwrap().to_string();
    cp.kubectl(&["certificate", "approve", &name]);

    let cert_dir = env.dir.join("pki");
    let current = cert_dir.join("kubelet-server-current.pem");
    wait_until(Duration::from_secs(30), "serving cert issued", || {
        current.exists().then_some(())
    });
    assert!(signed_by_ca(&cp, &current));
    let san = x509(&current, &["-ext", "subjectAltName"]);
    assert!(
        san.contains(&format!("DNS:{}", env.node)) && san.contains("IP Address:127.0.0.1"),
        "{san}"
    );

    // The secure port now presents it: verified against the cluster CA, same serial as the file.
    let serial = x509(&current, &["-serial"]);
    let presented = wait_until(Duration::from_secs(10), "served cert verifies", || {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "openssl s_client -connect 127.0.0.1:{} -CAfile {} -verify_return_error </dev/null 2>/dev/null | openssl x509 -noout -serial",
                env.port,
                cp.dir.join("pki/ca.crt").display()
            ))
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && !s.is_empty()).then_some(s)
    });
    assert_eq!(presented, serial);

    // `kubectl logs` through the apiserver still works over the new cert.
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod(
            "talker",
            &env.node,
            "echo hello-from-bootstrap; sleep 3600",
            1,
            "",
        )),
    );
    wait_until(Duration::from_secs(90), "pod running", || {
        running_container(&cp, "talker")
    });
    let logs = wait_until(Duration::from_secs(30), "kubectl logs", || {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&cp.admin_kubeconfig)
            .args(["logs", "talker"])
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout).into_owned();
        s.contains("hello-from-bootstrap").then_some(s)
    });
    assert!(logs.contains("hello-from-bootstrap"));
    cp.kubectl(&["delete", "pod", "talker", "--wait=false"]);
    wait_until(Duration::from_secs(60), "pod gone", || {
        cp.get_json(&["pod", "talker"]).is_none().then_some(())
    });
}

/// kubeadm init's first kubelet.conf embeds the node's client pair as data. With rotation on,
/// upstream's client cert manager takes that pair as its bootstrap pair: it stores it as
/// `kubelet-client-current.pem` (the file kubeadm's kubelet-finalize phase then points
/// kubelet.conf at) and renews it at once. The node's own renewal CSR is auto-approved (kubeadm's
/// RBAC), the issued cert replaces the embedded one without a restart, and the node goes on
/// renewing its lease with it.
#[tokio::test]
async fn embedded_client_pair_is_stored_and_renewed_at_once() {
    let cp = ControlPlane::up("boot5");
    cp.start_controller_manager(&[]);
    // kubeadm's RBAC (made with the bootstrap token): a node's renewal of its own cert is
    // auto-approved.
    let _ = cp.bootstrap_kubeconfig();
    let mut env = Env::new(249);
    let kubeconfig = cp.node_kubeconfig(&env.node);
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let embedded = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("client-certificate-data:"))
        .map(|b| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .unwrap()
        })
        .expect("the node kubeconfig embeds its client cert");
    let cert_dir = env.dir.join("pki");
    // As in kubeadm init, the kubelet starts before the API server answers: the renewal keeps
    // trying past upstream's 5 backoff steps (its forced rotation then polls every 32 s).
    cp.stop_apiserver();
    env.start_kubelet_with(&[
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--cert-dir={}", cert_dir.display()),
        "--node-ip=127.0.0.1",
        "--rotate-certificates",
    ]);
    let current = cert_dir.join("kubelet-client-current.pem");
    wait_until(
        Duration::from_secs(90),
        "a 6th renewal attempt while the API server is down",
        || {
            let log = env.kubelet_log();
            (log.matches("certificate rotation failed").count() >= 6).then_some(())
        },
    );
    assert!(current.exists(), "the embedded pair is stored at start");
    cp.start_apiserver();
    wait_ready(&cp, &env.node);
    let cert_of = |pem: &[u8]| {
        let text = String::from_utf8_lossy(pem).to_string();
        let end = "-----END CERTIFICATE-----";
        text[..text.find(end).expect("a certificate") + end.len()]
            .trim()
            .to_string()
    };
    let embedded_cert = cert_of(&embedded);
    // The embedded pair was stored first (the log says so; the issued pair's file may have the
    // same second in its name and replace it), then the issued one.
    wait_until(
        Duration::from_secs(120),
        "the embedded pair renewed in the cert dir",
        || {
            let now = std::fs::read(&current).ok()?;
            (cert_of(&now) != embedded_cert).then_some(())
        },
    );
    let log = env.kubelet_log();
    assert!(
        log.contains("stored the kubeconfig's embedded client certificate in the cert dir"),
        "{}",
        tail(&log, 40)
    );
    assert!(
        log.contains("rotated the client certificate"),
        "{}",
        tail(&log, 40)
    );
    assert!(signed_by_ca(&cp, &current));
    let renewal = csrs(&cp)
        .into_iter()
        .find(|c| c["spec"]["username"] == format!("system:node:{}", env.node))
        .expect("a CSR from the node itself");
    assert_eq!(
        condition(&renewal, "Approved").unwrap()["reason"],
        "AutoApproved"
    );
    // The kubeconfig is the operator's (kubeadm's): the kubelet leaves it as it was.
    assert_eq!(std::fs::read_to_string(&kubeconfig).unwrap(), text);
    let before = wait_until(Duration::from_secs(30), "the node's lease readable", || {
        lease(&cp, &env.node)
    });
    wait_lease_renewed(
        &cp,
        &env.node,
        &before,
        Duration::from_secs(30),
        "lease renewed with the issued cert",
    );
}

/// Upstream's fallback: a node cut off from the apiserver past its cert's expiry can no longer
/// ask as itself, so it asks with the bootstrap token again, and rejoins without a restart.
/// Same 150 s certs as above; the apiserver is down from the first issuance until after expiry.
#[tokio::test]
async fn expired_client_cert_is_renewed_with_bootstrap_credentials() {
    let cp = ControlPlane::up("boot4");
    cp.start_controller_manager(&["--cluster-signing-duration=450s"]);
    let mut env = Env::new(254);
    let (_, cert_dir) = start_bootstrapping(&cp, &mut env, &["--rotate-certificates"]);
    wait_ready(&cp, &env.node);
    let first = issued(&cert_dir, "kubelet-client");
    assert_eq!(first.len(), 1, "{first:?}");
    let first_expiry = not_after(&first[0]);

    cp.stop_apiserver();
    let now = || {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    while now() < first_expiry + 2 {
        std::thread::sleep(Duration::from_secs(1));
    }
    cp.start_apiserver();

    let current = cert_dir.join("kubelet-client-current.pem");
    wait_until(
        Duration::from_secs(120),
        "client cert renewed after expiry",
        || (std::fs::read_link(&current).ok()? != first[0]).then_some(()),
    );
    assert!(signed_by_ca(&cp, &current));
    assert!(not_after(&current) > now());
    let from_token: Vec<Value> = csrs(&cp)
        .into_iter()
        .filter(|c| {
            c["spec"]["username"]
                .as_str()
                .unwrap_or("")
                .starts_with("system:bootstrap:")
        })
        .collect();
    assert_eq!(
        from_token.len(),
        2,
        "bootstrap CSR, then the renewal with the token: {from_token:?}"
    );
    assert!(env
        .kubelet_log()
        .contains("current client certificate has expired; requesting a new one with the bootstrap credentials"));
    // The Lease may not exist yet: the node registers as Ready (its first status carries the
    // conditions, as upstream's), so wait_ready can return before the Lease's first create, and
    // the apiserver stopped right after. CI once read None here, just before the kubelet's
    // log showed the Lease written, 0.3 s after the new cert was swapped in. The claim is the
    // renewal below.
    let before = wait_until(Duration::from_secs(30), "the node's lease readable", || {
        lease(&cp, &env.node)
    });
    wait_lease_renewed(
        &cp,
        &env.node,
        &before,
        Duration::from_secs(30),
        "lease renewed with the new cert",
    );
    wait_ready(&cp, &env.node);
}
