//! X.509 version 1 certificates (`openssl x509 -req` without an extension file), which Go's
//! crypto/x509 and so the upstream kubelet and kube-apiserver accept, against a real
//! kube-apiserver 1.20 and real TLS clients (curl):
//! - a kubeconfig whose client certificate is v1 registers the node, and a v1 `tlsCertFile` on the
//!   secure port serves the apiserver's `nodes/proxy` requests;
//! - a v1 client certificate signed by `clientCAFile` (the apiserver's kubelet-client identity
//!   made the classic way) is authenticated on the secure port; one from another CA is refused at
//!   the handshake, and the log says why and names the CA file.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A self-signed version 1 CA in `dir/<name>.{crt,key}`.
fn v1_ca(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (key, csr, crt) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
    );
    let subj = format!("/CN={name}");
    openssl(
        dir,
        &[
            "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-subj", &subj,
            "-out", &csr,
        ],
    );
    openssl(
        dir,
        &[
            "x509", "-req", "-in", &csr, "-signkey", &key, "-days", "30", "-out", &crt,
        ],
    );
    (dir.join(crt), dir.join(key))
}

/// `dir/<name>.{crt,key}` signed by `ca` the classic way: no `-extfile`, so version 1.
fn v1_cert(dir: &Path, name: &str, subj: &str, ca: &(PathBuf, PathBuf)) -> (PathBuf, PathBuf) {
    let (key, csr, crt) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
    );
    openssl(
        dir,
        &[
            "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-subj", subj, "-out",
            &csr,
        ],
    );
    let (ca_crt, ca_key) = (ca.0.to_str().unwrap(), ca.1.to_str().unwrap());
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            ca_crt,
            "-CAkey",
            ca_key,
            "-set_serial",
            &format!("{}", 1000 + name.len()),
            "-days",
            "30",
            "-out",
            &crt,
        ],
    );
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in", &crt])
        .current_dir(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("Version: 1 (0x0)"),
        "{name} is not v1: {text}"
    );
    (dir.join(crt), dir.join(key))
}

/// `curl` against the node's secure port with a client certificate: Ok((code, body)) or Err(curl's
/// exit code and message) when the connection fails (a refused handshake).
fn curl_cert(
    env: &Env,
    path: &str,
    cert: &(PathBuf, PathBuf),
    extra: &[&str],
) -> Result<(u16, String), String> {
    let out = Command::new("curl")
        .args(extra)
        .args(["-sSk", "-w", "\n%{http_code}", "--cert"])
        .arg(&cert.0)
        .arg("--key")
        .arg(&cert.1)
        .arg(format!("https://127.0.0.1:{}{path}", env.port))
        .output()
        .expect("curl");
    if !out.status.success() {
        return Err(format!(
            "curl exit {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    Ok((code.trim().parse().unwrap_or(0), body.to_string()))
}

#[test]
fn v1_node_credentials_register_the_node_and_serve_the_apiserver() {
    let cp = ControlPlane::up("x509v1");
    let mut env = Env::new(116);
    let certs = env.dir.join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    let cluster_ca = (cp.dir.join("pki/ca.crt"), cp.dir.join("pki/ca.key"));
    // The node's client certificate and its serving certificate, both v1 from the cluster CA.
    let subj = format!("/CN=system:node:{}/O=system:nodes", env.node);
    let client = v1_cert(&certs, "node-client", &subj, &cluster_ca);
    let serving = v1_cert(
        &certs,
        "node-serving",
        &format!("/CN={}", env.node),
        &cluster_ca,
    );
    let env_file = std::fs::read_to_string(cp.dir.join("env")).unwrap();
    let url = env_file
        .lines()
        .find_map(|l| l.strip_prefix("APISERVER_URL="))
        .expect("APISERVER_URL");
    // Files, not data, as hand-built clusters write them.
    let kubeconfig = certs.join("kubelet.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {url}\n    \
             certificate-authority: {}\nusers:\n- name: u\n  user:\n    client-certificate: {}\n    \
             client-key: {}\ncontexts:\n- name: d\n  context: {{cluster: c, user: u}}\ncurrent-context: d\n",
            cluster_ca.0.display(),
            client.0.display(),
            client.1.display()
        ),
    )
    .unwrap();
    let args = [
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--client-ca-file={}", cluster_ca.0.display()),
        format!("--tls-cert-file={}", serving.0.display()),
        format!("--tls-private-key-file={}", serving.1.display()),
        "--node-ip=127.0.0.1".to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    env.start_kubelet_with(&args);

    let node = env.node.clone();
    wait_until(Duration::from_secs(60), "node registered and Ready", || {
        let n = cp.get_json(&["node", &node])?;
        let ready = n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        if !ready {
            eprintln!("node not Ready yet: {}", tail(&env.kubelet_log(), 5));
        }
        ready.then_some(())
    });
    let log = env.kubelet_log();
    assert!(
        !log.contains("UnsupportedCertVersion"),
        "{}",
        tail(&log, 40)
    );

    // The apiserver reaches the v1 serving certificate through nodes/proxy (its own client cert).
    let raw = cp.kubectl(&["get", "--raw", &format!("/api/v1/nodes/{node}/proxy/pods")]);
    let pods: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(pods["kind"], "PodList", "{raw}");

    // The apiserver's kubelet-client identity issued the classic way (v1) is authenticated by
    // x509 against clientCAFile and authorized by the real apiserver (system:kubelet-api-admin).
    let apiserver_v1 = v1_cert(
        &certs,
        "apiserver-kubelet-client-v1",
        "/CN=kube-apiserver-kubelet-client",
        &cluster_ca,
    );
    let (code, body) = curl_cert(&env, "/pods", &apiserver_v1, &[]).unwrap_or_else(|e| {
        panic!("{e}\n{}", tail(&env.kubelet_log(), 30));
    });
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["kind"],
        "PodList"
    );
}

#[test]
fn v1_client_certificates_on_the_secure_port() {
    let mut env = Env::new(117);
    let certs = env.dir.join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    let ca = v1_ca(&certs, "client-ca");
    let other_ca = v1_ca(&certs, "other-ca");
    let good = v1_cert(&certs, "admin", "/CN=admin/O=system:masters", &ca);
    let stranger = v1_cert(&certs, "stranger", "/CN=stranger", &other_ca);
    // x509 authentication only; anything authenticated is allowed (no apiserver to ask).
    env.extra_config = format!(
        "authentication: {{anonymous: {{enabled: false}}, webhook: {{enabled: false}}, \
         x509: {{clientCAFile: {}}}}}\nauthorization: {{mode: AlwaysAllow}}\n",
        ca.0.display()
    );
    env.start_kubelet();
    env.wait_secure_port();

    let (code, body) = curl_cert(&env, "/pods", &good, &[]).unwrap_or_else(|e| {
        panic!("{e}\n{}", tail(&env.kubelet_log(), 30));
    });
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["kind"],
        "PodList"
    );

    // Without a certificate the handshake succeeds and authentication says 401, as upstream.
    let out = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("https://127.0.0.1:{}/pods", env.port))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "401");

    // A v1 certificate of another CA: refused at the handshake, and the log says why. TLS 1.2, so
    // that the server's verdict comes before the client's Finished and curl sees the alert (with
    // 1.3 it may see only a reset connection); then 1.3 fails too, whichever way.
    let err =
        curl_cert(&env, "/pods", &stranger, &["--tls-max", "1.2"]).expect_err("handshake refused");
    assert!(err.contains("alert unknown ca"), "{err}");
    curl_cert(&env, "/pods", &stranger, &[]).expect_err("TLS 1.3 handshake refused");
    let want = format!(
        "certificate \"CN=stranger\" is not signed by any CA in {} (its issuer is \"CN=other-ca\")",
        ca.0.display()
    );
    wait_until(Duration::from_secs(5), "refusal logged", || {
        // Quoted in the log line as klog quotes values.
        env.kubelet_log()
            .contains(&common::klog::escaped(&want))
            .then_some(())
    });
}
