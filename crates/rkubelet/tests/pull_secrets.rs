//! Image pull secrets (issue 5 item 5): a real registry with htpasswd auth (Debian's
//! docker-registry on loopback), a real control plane (Node,RBAC authorization: the node reads
//! only the secrets its pods name) and a real containerd.

mod common;

use std::process::Command;
use std::time::Duration;

use base64::Engine;
use common::*;
use serde_json::Value;

const USER: &str = "alice";
const PASSWORD: &str = "pull-s3cret";

fn pod(name: &str, node: &str, image: &str, secrets: &[&str]) -> String {
    let pull = if secrets.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = secrets.iter().map(|s| format!("{{name: {s}}}")).collect();
        format!("  imagePullSecrets: [{}]\n", names.join(", "))
    };
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
{pull}  containers:
  - name: main
    image: {image}
    imagePullPolicy: Always
    command: ["sh", "-c", {SLEEPER:?}]
"#
    )
}

fn waiting(p: &Value) -> Option<(String, String)> {
    let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
    Some((
        w["reason"].as_str()?.to_string(),
        w["message"].as_str().unwrap_or_default().to_string(),
    ))
}

/// Waits for the pod's container to wait with `ErrImagePull`, then for its `Failed` event, and
/// returns both messages; the pull was denied by the registry, so both carry its 401.
fn expect_unauthorized(cp: &ControlPlane, env: &Env, name: &str, image: &str) {
    let (_, msg) = wait_until(
        Duration::from_secs(60),
        &format!("{name} waiting with ErrImagePull"),
        || {
            let p = cp.get_json(&["pod", name])?;
            waiting(&p).filter(|(r, _)| r == "ErrImagePull")
        },
    );
    println!("{name}: waiting message: {msg}");
    assert!(msg.contains(image), "{msg}");
    assert!(
        msg.contains("401 Unauthorized"),
        "no registry 401 in {msg:?}\n{}",
        tail(&env.kubelet_log(), 30)
    );
    let ev = cp.wait_pod_event(name, "Failed", Duration::from_secs(30), |m| {
        m.starts_with("Failed to pull image")
    });
    assert!(ev.contains("401 Unauthorized"), "{ev}");
    // Then the pull backs off, as for any failed pull.
    wait_until(
        Duration::from_secs(60),
        &format!("{name} ImagePullBackOff"),
        || {
            let p = cp.get_json(&["pod", name])?;
            waiting(&p).filter(|(r, _)| r == "ImagePullBackOff")
        },
    );
}

#[tokio::test]
async fn pull_secrets_against_an_auth_registry() {
    let reg = Registry::up_with_auth("pull1", USER, PASSWORD);
    reg.push("priv/busybox:1");
    let image = reg.image("priv/busybox:1");
    let cp = ControlPlane::up("pull1");
    let mut env = Env::new(211);
    env.trust_registry(&reg);
    env.join(&cp, &[]);

    // The registry really wants credentials.
    let (code, body) = http_get("127.0.0.1", reg_port(&reg), "/v2/").unwrap();
    assert_eq!(code, 401, "{body}");

    // dockerconfigjson as kubectl writes it (auth field and username/password).
    cp.kubectl(&[
        "create",
        "secret",
        "docker-registry",
        "good",
        &format!("--docker-server={}", reg.addr),
        &format!("--docker-username={USER}"),
        &format!("--docker-password={PASSWORD}"),
    ]);
    cp.kubectl(&[
        "create",
        "secret",
        "docker-registry",
        "bad",
        &format!("--docker-server={}", reg.addr),
        &format!("--docker-username={USER}"),
        "--docker-password=wrong",
    ]);
    // The legacy dockercfg format: a bare map, credentials only in `auth`, keyed by a URL with
    // scheme and a `/v1/` path (both dropped by the keyring).
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    let cfg = format!(r#"{{"http://{}/v1/":{{"auth":"{auth}"}}}}"#, reg.addr);
    let legacy = format!(
        r#"{{"apiVersion":"v1","kind":"Secret","metadata":{{"name":"legacy"}},
            "type":"kubernetes.io/dockercfg","data":{{".dockercfg":"{}"}}}}"#,
        base64::engine::general_purpose::STANDARD.encode(cfg)
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&legacy));

    for (name, secrets) in [
        ("with-secret", &["good"][..]),
        ("legacy-cfg", &["legacy"][..]),
        // The wrong credential first, then the right one: each is tried in turn.
        ("bad-then-good", &["bad", "good"][..]),
        ("no-secret", &[][..]),
        ("wrong-password", &["bad"][..]),
        // A named secret that does not exist is skipped, as upstream, and the pull is anonymous.
        ("missing-secret", &["nonexistent"][..]),
    ] {
        cp.kubectl_stdin(
            &["create", "-f", "-"],
            Some(&pod(name, &env.node, &image, secrets)),
        );
    }

    // A service account's pull secrets reach the pod the upstream way: ServiceAccount admission
    // copies them into a pod that names none; the node never reads the service account.
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: puller, namespace: default}\nimagePullSecrets: [{name: good}]\n"),
    );
    let via_sa = pod("via-sa", &env.node, &image, &[]).replace(
        "  automountServiceAccountToken: false\n",
        "  serviceAccountName: puller\n  automountServiceAccountToken: false\n",
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&via_sa));
    let copied = cp.get_json(&["pod", "via-sa"]).expect("pod via-sa");
    assert_eq!(
        copied["spec"]["imagePullSecrets"][0]["name"], "good",
        "admission did not copy the service account's pull secret: {}",
        copied["spec"]
    );

    for name in ["with-secret", "legacy-cfg", "bad-then-good", "via-sa"] {
        let p = wait_until(Duration::from_secs(90), &format!("{name} Running"), || {
            let p = cp.get_json(&["pod", name])?;
            (p["status"]["phase"] == "Running").then_some(p)
        });
        assert_eq!(p["status"]["containerStatuses"][0]["ready"], true);
        // Events are written by their own queue, independently of the status: wait for it.
        cp.wait_pod_event(name, "Pulled", Duration::from_secs(30), |m| {
            m.starts_with("Successfully pulled image")
        });
    }
    for name in ["no-secret", "wrong-password", "missing-secret"] {
        expect_unauthorized(&cp, &env, name, &image);
    }
    // The registry saw the accepted credentials (it logs the user of authenticated requests).
    let log = reg.log();
    assert!(
        log.lines().any(|l| l.contains("auth.user.name=alice")),
        "no request authenticated as alice in the registry log:\n{}",
        tail(&log, 20)
    );

    // The Node authorizer in 1.20 does not let a node read service accounts, which is why
    // upstream relies on ServiceAccount admission copying their pull secrets into the pod.
    let kc = cp.node_kubeconfig(&env.node);
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["get", "serviceaccount", "default", "-n", "default"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("forbidden"),
        "node could read a service account: {err}"
    );

    cp.kubectl(&["delete", "pods", "--all", "--wait=false"]);
    wait_until(Duration::from_secs(60), "all pods gone", || {
        let l = cp.get_json(&["pods"])?;
        l["items"].as_array()?.is_empty().then_some(())
    });
}

fn reg_port(reg: &Registry) -> u16 {
    reg.addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port in registry address")
}
