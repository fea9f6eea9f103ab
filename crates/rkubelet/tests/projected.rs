//! downwardAPI and projected volumes and service account tokens (issue 5 items 2 and 3) on a node
//! of a real control plane: kube-apiserver 1.20 with ServiceAccount admission and
//! BoundServiceAccountTokenVolume, so pods get the `kube-api-access-*` volume real clusters
//! inject; tokens come from the TokenRequest API with the node's own credentials.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

/// The resync period these tests run with, so label changes show within seconds.
const SYNC: &str = "--sync-frequency=5s";

/// Unmounts whatever a failed test left mounted below the node's directory, so that a panic
/// leaves no tmpfs behind (a passing test checks that the kubelet removed everything itself).
struct Unmounter(PathBuf);

impl Drop for Unmounter {
    fn drop(&mut self) {
        for m in mounts_below(&self.0) {
            let _ = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut found: Vec<PathBuf> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(PathBuf::from))
        .filter(|p| p.starts_with(&dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found
}

fn fs_type_at(path: &Path) -> Option<String> {
    let path = std::fs::canonicalize(path).ok()?;
    std::fs::read_to_string("/proc/self/mountinfo")
        .ok()?
        .lines()
        .rev()
        .filter(|l| l.split(' ').nth(4) == path.to_str())
        .find_map(|l| l.split(" - ").nth(1)?.split(' ').next().map(String::from))
}

fn running(cp: &ControlPlane, name: &str) -> Pod {
    let v = wait_until(Duration::from_secs(60), &format!("{name} Running"), || {
        let p = cp.get_json(&["pod", name])?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    serde_json::from_value(v).unwrap()
}

async fn out(env: &Env, pod: &Pod, cmd: &[&str]) -> String {
    let (code, text) = exec_in(env, pod, "main", cmd).await;
    assert_eq!(code, 0, "{cmd:?}: {text}");
    text.trim_end().to_string()
}

/// Deletes the pod and waits until its directory is gone; nothing may stay mounted below it.
fn delete_and_check_clean(cp: &ControlPlane, env: &Env, pod: &Pod) {
    let name = pod.metadata.name.clone().unwrap();
    cp.kubectl(&["delete", "pod", &name, "--wait=false"]);
    let pod_dir = env.root.join("pods").join(uid(pod));
    wait_until(Duration::from_secs(30), "pod directory removed", || {
        (!pod_dir.exists()).then_some(())
    });
    let left = mounts_below(&env.root.join("pods"));
    assert!(left.is_empty(), "mounts left behind: {left:?}");
    wait_until(Duration::from_secs(30), "pod object gone", || {
        cp.get_json(&["pod", &name]).is_none().then_some(())
    });
}

/// A quantity such as `8123456Ki` in bytes (what node allocatable memory looks like).
fn bytes(q: &str) -> u128 {
    let units = [
        ("Ki", 1u128 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("k", 1000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ];
    for (suffix, mult) in units {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<u128>().unwrap() * mult;
        }
    }
    q.parse().unwrap()
}

fn dapi_manifest(node: &str) -> String {
    // Modes in decimal: 416 = 0640, 256 = 0400.
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: dapi
  namespace: default
  labels: {{app: dapi, quoted: x}}
  annotations: {{note: "two\nlines \"quoted\""}}
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  volumes:
  - name: info
    downwardAPI:
      defaultMode: 416
      items:
      - {{path: name, fieldRef: {{fieldPath: metadata.name}}}}
      - {{path: namespace, fieldRef: {{fieldPath: metadata.namespace}}}}
      - {{path: uid, fieldRef: {{fieldPath: metadata.uid}}, mode: 256}}
      - {{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}
      - {{path: annotations, fieldRef: {{fieldPath: metadata.annotations}}}}
      - {{path: app/label, fieldRef: {{fieldPath: "metadata.labels['app']"}}}}
      - {{path: cpu_limit_m, resourceFieldRef: {{containerName: main, resource: limits.cpu, divisor: 1m}}}}
      - {{path: mem_limit_mi, resourceFieldRef: {{containerName: main, resource: limits.memory, divisor: 1Mi}}}}
      - {{path: side_mem_limit_mi, resourceFieldRef: {{containerName: side, resource: limits.memory, divisor: 1Mi}}}}
      - {{path: side_cpu_request, resourceFieldRef: {{containerName: side, resource: requests.cpu}}}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
    resources:
      limits: {{cpu: 250m, memory: 64Mi}}
    volumeMounts:
    - {{name: info, mountPath: /etc/info}}
  - name: side
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
"#
    )
}

#[tokio::test]
async fn downward_api_files_modes_and_label_updates() {
    let cp = ControlPlane::up("proj1");
    let mut env = Env::new(201);
    let _unmount = Unmounter(env.root.clone());
    env.join(&cp, &[SYNC]);
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&dapi_manifest(&env.node)));
    let pod = running(&cp, "dapi");

    assert_eq!(out(&env, &pod, &["cat", "/etc/info/name"]).await, "dapi");
    assert_eq!(
        out(&env, &pod, &["cat", "/etc/info/namespace"]).await,
        "default"
    );
    assert_eq!(out(&env, &pod, &["cat", "/etc/info/uid"]).await, uid(&pod));
    // Upstream FormatMap: key="value" lines sorted by key, values quoted as Go's %q.
    assert_eq!(
        out(&env, &pod, &["cat", "/etc/info/labels"]).await,
        "app=\"dapi\"\nquoted=\"x\""
    );
    // The kubelet's own config.source annotation is there too, as upstream's files show it.
    assert_eq!(
        out(&env, &pod, &["cat", "/etc/info/annotations"]).await,
        "kubernetes.io/config.source=\"api\"\nnote=\"two\\nlines \\\"quoted\\\"\""
    );
    assert_eq!(
        out(&env, &pod, &["cat", "/etc/info/app/label"]).await,
        "dapi"
    );
    assert_eq!(
        out(&env, &pod, &["cat", "/etc/info/cpu_limit_m"]).await,
        "250"
    );
    assert_eq!(
        out(&env, &pod, &["cat", "/etc/info/mem_limit_mi"]).await,
        "64"
    );
    // A container without a memory limit reads node allocatable, rounded up to the divisor.
    let node = cp.get_json(&["node", &env.node]).unwrap();
    let alloc = bytes(node["status"]["allocatable"]["memory"].as_str().unwrap());
    let want = alloc.div_ceil(1 << 20).to_string();
    assert_eq!(
        out(&env, &pod, &["cat", "/etc/info/side_mem_limit_mi"]).await,
        want
    );
    // Requests are not defaulted: no request is 0.
    assert_eq!(
        out(&env, &pod, &["cat", "/etc/info/side_cpu_request"]).await,
        "0"
    );
    // Modes: defaultMode for most, the item's own for uid; all behind ..data.
    assert_eq!(
        out(&env, &pod, &["stat", "-L", "-c", "%a", "/etc/info/name"]).await,
        "640"
    );
    assert_eq!(
        out(&env, &pod, &["stat", "-L", "-c", "%a", "/etc/info/uid"]).await,
        "400"
    );
    assert_eq!(
        out(&env, &pod, &["readlink", "/etc/info/labels"]).await,
        "..data/labels"
    );
    // Read-only whatever the volumeMount says, on a tmpfs on the node, as upstream.
    assert_ne!(
        exec_in(&env, &pod, "main", &["touch", "/etc/info/x"])
            .await
            .0,
        0
    );
    let vol = env
        .root
        .join("pods")
        .join(uid(&pod))
        .join("volumes/kubernetes.io~downward-api/info");
    assert_eq!(fs_type_at(&vol).as_deref(), Some("tmpfs"));

    // A label change reaches the file through a new ..data, on the pod update the watch
    // brings. The bound is half the 1 min syncFrequency, so a change left to the periodic
    // resync fails it and a loaded machine does not (it takes a second or two).
    let data = out(&env, &pod, &["readlink", "/etc/info/..data"]).await;
    let t = Instant::now();
    cp.kubectl(&["label", "pod", "dapi", "tier=web", "quoted-"]);
    cp.kubectl(&["annotate", "pod", "dapi", "extra=1"]);
    let want_labels = "app=\"dapi\"\ntier=\"web\"";
    let mut took = None;
    while t.elapsed() < Duration::from_secs(30) {
        let l = exec_in(&env, &pod, "main", &["cat", "/etc/info/labels"])
            .await
            .1;
        let a = exec_in(&env, &pod, "main", &["cat", "/etc/info/annotations"])
            .await
            .1;
        if l.trim_end() == want_labels && a.contains("extra=\"1\"") {
            took = Some(t.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let took = took.unwrap_or_else(|| {
        panic!(
            "label change did not reach the file in 30 s\n{}",
            tail(&env.kubelet_log(), 40)
        )
    });
    println!("label change -> file: {took:?}");
    assert_ne!(
        out(&env, &pod, &["readlink", "/etc/info/..data"]).await,
        data
    );
    // One timestamped directory and ..data: the old one is gone.
    let dots = out(
        &env,
        &pod,
        &["sh", "-c", "ls -a /etc/info | grep -c '^[.][.].'"],
    )
    .await;
    assert_eq!(dots, "2");

    delete_and_check_clean(&cp, &env, &pod);
}

/// A TokenReview as admin: (authenticated, username, extra).
fn review(cp: &ControlPlane, token: &str, audience: Option<&str>) -> (bool, String, Value) {
    let mut spec = serde_json::json!({"token": token});
    if let Some(a) = audience {
        spec["audiences"] = serde_json::json!([a]);
    }
    let tr = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec
    });
    let res: Value = serde_json::from_str(
        &cp.kubectl_stdin(&["create", "-o", "json", "-f", "-"], Some(&tr.to_string())),
    )
    .unwrap();
    let st = &res["status"];
    (
        st["authenticated"] == true,
        st["user"]["username"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        st["user"]["extra"].clone(),
    )
}

fn projected_manifest(node: &str) -> String {
    // Modes in decimal: 288 = 0440, 384 = 0600.
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: proj
  namespace: default
  labels: {{app: proj}}
spec:
  nodeName: {node}
  serviceAccountName: robot
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  volumes:
  - name: all
    projected:
      defaultMode: 288
      sources:
      - configMap:
          name: settings
          items: [{{key: color, path: cfg/color, mode: 384}}]
      - secret: {{name: creds}}
      - configMap: {{name: absent, optional: true}}
      - downwardAPI:
          items: [{{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}]
      - serviceAccountToken: {{path: vault-token, audience: vault, expirationSeconds: 600}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
    volumeMounts:
    - {{name: all, mountPath: /etc/all}}
"#
    )
}

#[tokio::test]
async fn projected_volume_with_every_source() {
    let cp = ControlPlane::up("proj2");
    let mut env = Env::new(202);
    let _unmount = Unmounter(env.root.clone());
    env.join(&cp, &[SYNC]);
    cp.kubectl(&["create", "serviceaccount", "robot"]);
    cp.kubectl(&[
        "create",
        "configmap",
        "settings",
        "--from-literal=color=blue",
    ]);
    cp.kubectl(&[
        "create",
        "secret",
        "generic",
        "creds",
        "--from-literal=user=admin",
        "--from-literal=password=s3cret",
    ]);
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&projected_manifest(&env.node)));
    let pod = running(&cp, "proj");

    // Every source in one directory, one ..data.
    assert_eq!(
        out(&env, &pod, &["ls", "/etc/all"]).await,
        "cfg\nlabels\npassword\nuser\nvault-token"
    );
    assert_eq!(
        out(&env, &pod, &["cat", "/etc/all/cfg/color"]).await,
        "blue"
    );
    assert_eq!(
        out(&env, &pod, &["cat", "/etc/all/password"]).await,
        "s3cret"
    );
    assert_eq!(
        out(&env, &pod, &["cat", "/etc/all/labels"]).await,
        "app=\"proj\""
    );
    let mode = |p: &'static str| ["stat", "-L", "-c", "%a", p];
    assert_eq!(out(&env, &pod, &mode("/etc/all/cfg/color")).await, "600");
    assert_eq!(out(&env, &pod, &mode("/etc/all/user")).await, "440");
    assert_eq!(out(&env, &pod, &mode("/etc/all/labels")).await, "440");
    assert_eq!(out(&env, &pod, &mode("/etc/all/vault-token")).await, "440");
    let dots = out(
        &env,
        &pod,
        &["sh", "-c", "ls -a /etc/all | grep -c '^[.][.].'"],
    )
    .await;
    assert_eq!(dots, "2");
    let vol = env
        .root
        .join("pods")
        .join(uid(&pod))
        .join("volumes/kubernetes.io~projected/all");
    assert_eq!(fs_type_at(&vol).as_deref(), Some("tmpfs"));

    // The token is the service account's, for the audience asked, bound to this pod.
    let token = out(&env, &pod, &["cat", "/etc/all/vault-token"]).await;
    let (ok, user, extra) = review(&cp, &token, Some("vault"));
    assert!(ok, "token not accepted for audience vault");
    assert_eq!(user, "system:serviceaccount:default:robot");
    assert_eq!(
        extra["authentication.kubernetes.io/pod-uid"],
        serde_json::json!([uid(&pod)])
    );
    assert_eq!(
        extra["authentication.kubernetes.io/pod-name"],
        serde_json::json!(["proj"])
    );
    // Not for the API server's own audience.
    assert!(!review(&cp, &token, None).0);

    // Cached: later syncs (every 5 s) rewrite nothing while the token is fresh.
    let data = out(&env, &pod, &["readlink", "/etc/all/..data"]).await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(
        out(&env, &pod, &["cat", "/etc/all/vault-token"]).await,
        token
    );
    assert_eq!(
        out(&env, &pod, &["readlink", "/etc/all/..data"]).await,
        data
    );

    // A secret change reaches its file; the token stays the same.
    cp.kubectl(&[
        "patch",
        "secret",
        "creds",
        "--type=merge",
        "-p",
        r#"{"stringData":{"password":"changed"}}"#,
    ]);
    wait_until(
        Duration::from_secs(20),
        "secret change in projected volume",
        || {
            let p = env
                .root
                .join("pods")
                .join(uid(&pod))
                .join("volumes/kubernetes.io~projected/all/password");
            (std::fs::read_to_string(p).ok()? == "changed").then_some(())
        },
    );
    assert_eq!(
        out(&env, &pod, &["cat", "/etc/all/vault-token"]).await,
        token
    );

    delete_and_check_clean(&cp, &env, &pod);
}

/// The host-network pod the ServiceAccount admission completes with a kube-api-access volume.
fn api_client_manifest(node: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: default
spec:
  nodeName: {node}
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
"#
    )
}

#[tokio::test]
async fn service_account_token_reaches_the_apiserver() {
    let cp = ControlPlane::up("proj3");
    let mut env = Env::new(203);
    let _unmount = Unmounter(env.root.clone());
    env.join(&cp, &[SYNC]);
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_client_manifest(&env.node)),
    );
    let pod = running(&cp, "client");

    // What admission injected, and what the node made of it.
    let vol = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap();
    let name = &vol
        .iter()
        .find(|v| v.name.starts_with("kube-api-access-"))
        .expect("kube-api-access volume injected")
        .name;
    const SA: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
    assert_eq!(
        out(&env, &pod, &["ls", SA]).await,
        "ca.crt\nnamespace\ntoken"
    );
    assert_eq!(
        out(&env, &pod, &["cat", &format!("{SA}/namespace")]).await,
        "default"
    );
    let ca = std::fs::read_to_string(cp.dir.join("pki/ca.crt")).unwrap();
    assert_eq!(
        out(&env, &pod, &["cat", &format!("{SA}/ca.crt")]).await,
        ca.trim_end()
    );
    assert_eq!(
        out(
            &env,
            &pod,
            &["stat", "-L", "-c", "%a", &format!("{SA}/token")]
        )
        .await,
        "644"
    );
    let vol_dir = env
        .root
        .join("pods")
        .join(uid(&pod))
        .join("volumes/kubernetes.io~projected")
        .join(name);
    assert!(vol_dir.join("token").exists());

    // A real request from inside the pod with the token: authenticated as the service account
    // (403 without RBAC, where a bad token gets 401), then 200 once RBAC allows it.
    let env_file = std::fs::read_to_string(cp.dir.join("env")).unwrap();
    let url = env_file
        .lines()
        .find_map(|l| l.strip_prefix("APISERVER_URL="))
        .unwrap()
        .to_string();
    let get = |token_expr: &str| {
        format!(
            "wget -q -O - --no-check-certificate --header \"Authorization: Bearer {token_expr}\" \
             {url}/api/v1/namespaces/default/pods 2>&1"
        )
    };
    let with_token = get(&format!("$(cat {SA}/token)"));
    let (code, text) = exec_in(&env, &pod, "main", &["sh", "-c", &with_token]).await;
    assert_ne!(code, 0);
    assert!(text.contains("403"), "expected 403 Forbidden, got: {text}");
    let (code, text) = exec_in(&env, &pod, "main", &["sh", "-c", &get("not-a-token")]).await;
    assert_ne!(code, 0);
    assert!(
        text.contains("401"),
        "expected 401 for a bad token, got: {text}"
    );
    // (The aggregated `view` role stays empty without the controller-manager: a plain Role.)
    cp.kubectl(&[
        "create",
        "role",
        "pod-reader",
        "--verb=list",
        "--resource=pods",
    ]);
    cp.kubectl(&[
        "create",
        "rolebinding",
        "pod-reader",
        "--role=pod-reader",
        "--serviceaccount=default:default",
    ]);
    // RBAC's authorizer cache picks the binding up within a moment.
    let t = Instant::now();
    let body = loop {
        let (code, text) = exec_in(&env, &pod, "main", &["sh", "-c", &with_token]).await;
        if code == 0 {
            break text;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no 200 with RBAC: {text}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let list: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(list["kind"], "PodList");
    assert!(list["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["metadata"]["name"] == "client"));

    delete_and_check_clean(&cp, &env, &pod);
}

#[tokio::test]
async fn missing_projected_source_waits_then_starts() {
    let cp = ControlPlane::up("proj4");
    let mut env = Env::new(204);
    let _unmount = Unmounter(env.root.clone());
    env.join(&cp, &[SYNC]);
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: waiter
  namespace: default
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  volumes:
  - name: all
    projected:
      sources:
      - configMap: {{name: later}}
      - serviceAccountToken: {{path: token}}
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
    volumeMounts:
    - {{name: all, mountPath: /etc/all}}
"#,
        node = env.node
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&manifest));
    // Upstream's message for the volume; the container waits in ContainerCreating.
    cp.wait_pod_event("waiter", "FailedMount", Duration::from_secs(30), |m| {
        m == "MountVolume.SetUp failed for volume \"all\" : configmap \"later\" not found"
    });
    let p = cp.pod_waiting("waiter");
    assert_eq!(p["status"]["phase"], "Pending");
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
        "ContainerCreating"
    );

    cp.kubectl(&["create", "configmap", "later", "--from-literal=k=v"]);
    let pod = running(&cp, "waiter");
    assert_eq!(out(&env, &pod, &["ls", "/etc/all"]).await, "k\ntoken");
    assert_eq!(out(&env, &pod, &["cat", "/etc/all/k"]).await, "v");
    // The token source was filled in the same write.
    let token = out(&env, &pod, &["cat", "/etc/all/token"]).await;
    assert!(token.split('.').count() == 3, "not a JWT: {token}");

    delete_and_check_clean(&cp, &env, &pod);
}
