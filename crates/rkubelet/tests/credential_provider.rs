//! Image credential provider plugins (issue 15 item 5): `--image-credential-provider-config` and
//! `--image-credential-provider-bin-dir` against a real registry with htpasswd auth (Debian's
//! docker-registry on loopback), a real control plane and containerd, and shell plugins that
//! speak the exec protocol and count their calls in files.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use common::*;
use serde_json::Value;

const USER: &str = "carol";
const PASSWORD: &str = "plugin-s3cret";
const V1: &str = "credentialprovider.kubelet.k8s.io/v1";

/// The plugin: records each request (one JSON line) in `$CALLS_DIR/calls-<name>`, answers with
/// the credentials from its env, `cacheKeyType` and `cacheDuration` from its args.
const PLUGIN: &str = r#"#!/bin/sh
req=$(cat)
printf '%s\n' "$req" >> "$CALLS_DIR/calls-$(basename "$0")"
printf '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"%s","cacheDuration":"%s","auth":{"%s":{"username":"%s","password":"%s"}}}\n' \
  "$1" "$2" "$AUTH_KEY" "$REG_USER" "$REG_PASSWORD"
"#;

/// A plugin that fails: every pull it matches logs its error, and the pull goes on without it.
const BROKEN: &str = "#!/bin/sh\ncat >/dev/null\necho 'token service unreachable' >&2\nexit 1\n";

fn write_exec(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn calls(dir: &Path, plugin: &str) -> Vec<Value> {
    std::fs::read_to_string(dir.join(format!("calls-{plugin}")))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("request {l:?}: {e}")))
        .collect()
}

fn pod(name: &str, node: &str, image: &str, secrets: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  imagePullSecrets: [{secrets}]
  containers:
  - name: main
    image: {image}
    imagePullPolicy: Always
    command: ["sh", "-c", {SLEEPER:?}]
"#
    )
}

fn wait_running(cp: &ControlPlane, env: &Env, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let p = cp.get_json(&["pod", name]);
        if p.as_ref()
            .is_some_and(|p| p["status"]["phase"] == "Running")
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} not Running: {:?}\n{}",
            p.map(|p| p["status"].clone()),
            tail(&env.kubelet_log(), 40)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[tokio::test]
async fn credential_provider_plugins_against_an_auth_registry() {
    let reg = Registry::up_with_auth("credp", USER, PASSWORD);
    for repo in [
        "priv/busybox:1",
        "short/busybox:1",
        "unmatched/busybox:1",
        "nodecfg/busybox:1",
    ] {
        reg.push(repo);
    }
    let port = reg.addr.rsplit(':').next().unwrap().to_string();
    let cp = ControlPlane::up("credp");
    let mut env = Env::new(247);
    env.trust_registry(&reg);

    let bin = env.dir.join("cred-bin");
    let calls_dir = env.dir.join("cred-calls");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&calls_dir).unwrap();
    write_exec(&bin.join("reg-login"), PLUGIN);
    write_exec(&bin.join("short-login"), PLUGIN);
    write_exec(&bin.join("broken"), BROKEN);
    let plugin_env = format!(
        "[{{name: CALLS_DIR, value: {}}}, {{name: AUTH_KEY, value: '*.0.0.1:{port}'}}, \
         {{name: REG_USER, value: {USER}}}, {{name: REG_PASSWORD, value: {PASSWORD}}}]",
        calls_dir.display()
    );
    // reg-login: a wildcard host label, the port and a path prefix; its answer cached per
    // registry for an hour. short-login: per image for 2s. broken matches what reg-login does.
    let config = format!(
        r#"apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: reg-login
  matchImages: ["*.0.0.1:{port}/priv"]
  defaultCacheDuration: 10m
  apiVersion: {V1}
  args: [Registry, 1h]
  env: {plugin_env}
- name: broken
  matchImages: ["127.0.0.1:{port}/priv"]
  defaultCacheDuration: 10m
  apiVersion: {V1}
- name: short-login
  matchImages: ["127.0.0.1:{port}/short"]
  defaultCacheDuration: 0s
  apiVersion: {V1}
  args: [Image, 2s]
  env: {plugin_env}
"#
    );
    let config_path = env.dir.join("credential-providers.yaml");
    std::fs::write(&config_path, config).unwrap();
    let flags = [
        format!(
            "--image-credential-provider-config={}",
            config_path.display()
        ),
        format!("--image-credential-provider-bin-dir={}", bin.display()),
    ];
    // The node's docker config file (upstream reads `<root-dir>/config.json` first), with a
    // credential for one repository path only.
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    std::fs::create_dir_all(&env.root).unwrap();
    std::fs::write(
        env.root.join("config.json"),
        format!(
            r#"{{"auths": {{"{}/nodecfg": {{"auth": "{auth}"}}}}}}"#,
            reg.addr
        ),
    )
    .unwrap();
    env.join(&cp, &[flags[0].as_str(), flags[1].as_str()]);

    // The registry really wants credentials.
    let (code, _) = http_get("127.0.0.1", port.parse().unwrap(), "/v2/").unwrap();
    assert_eq!(code, 401);

    // 1. A matched image pulls with the plugin's credentials; the request names the image's
    //    repository, as upstream's keyring lookup does.
    let priv_image = reg.image("priv/busybox:1");
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&pod("with-plugin", &env.node, &priv_image, "")),
    );
    wait_running(&cp, &env, "with-plugin");
    let reqs = calls(&calls_dir, "reg-login");
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert_eq!(
        reqs[0],
        serde_json::json!({"apiVersion": V1, "kind": "CredentialProviderRequest",
                           "image": format!("{}/priv/busybox", reg.addr)})
    );
    // The failing plugin was asked too, did not stop the pull, and says who failed on what.
    let log = env.kubelet_log();
    let want = format!(
        "error execing credential provider plugin broken for image {}/priv/busybox: exit status 1: token service unreachable",
        reg.addr
    );
    assert!(log.contains(&want), "no {want:?} in\n{}", tail(&log, 30));
    assert!(
        env.metric(
            "kubelet_credential_provider_plugin_errors",
            Some(("plugin_name", "broken"))
        ) >= Some(1.0)
    );

    // 2. Within the cache duration (1h, per registry) the next pull does not exec the plugin;
    //    a wrong pull secret is tried first and the plugin's credential after it.
    cp.kubectl(&[
        "create",
        "secret",
        "docker-registry",
        "wrong",
        &format!("--docker-server={}", reg.addr),
        &format!("--docker-username={USER}"),
        "--docker-password=not-it",
    ]);
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&pod(
            "secret-then-plugin",
            &env.node,
            &priv_image,
            "{name: wrong}",
        )),
    );
    wait_running(&cp, &env, "secret-then-plugin");
    assert_eq!(
        calls(&calls_dir, "reg-login").len(),
        1,
        "cached: no second exec"
    );

    // 3. Per-image cache for 2s: a pull after that asks the plugin again.
    let short_image = reg.image("short/busybox:1");
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&pod("short-1", &env.node, &short_image, "")),
    );
    wait_running(&cp, &env, "short-1");
    assert_eq!(calls(&calls_dir, "short-login").len(), 1);
    std::thread::sleep(Duration::from_secs(3));
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&pod("short-2", &env.node, &short_image, "")),
    );
    wait_running(&cp, &env, "short-2");
    assert_eq!(
        calls(&calls_dir, "short-login").len(),
        2,
        "expired after 2s: asked again"
    );

    // 4. No matchImages entry matches: no plugin runs, the pull is anonymous and the registry
    //    refuses it (ErrImagePull with containerd's 401, as upstream).
    let unmatched = reg.image("unmatched/busybox:1");
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&pod("no-match", &env.node, &unmatched, "")),
    );
    let msg = wait_until(Duration::from_secs(60), "no-match ErrImagePull", || {
        let p = cp.get_json(&["pod", "no-match"])?;
        let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
        (w["reason"] == "ErrImagePull").then(|| w["message"].as_str().unwrap_or("").to_string())
    });
    println!("no-match: {msg}");
    assert!(
        msg.starts_with(&format!("Failed to pull image \"{unmatched}\""))
            && msg.contains("401 Unauthorized"),
        "{msg}"
    );
    for plugin in ["reg-login", "short-login"] {
        assert!(
            calls(&calls_dir, plugin)
                .iter()
                .all(|r| !r["image"].as_str().unwrap_or("").contains("unmatched")),
            "{plugin} was called for an image it does not match"
        );
    }
    assert_eq!(calls(&calls_dir, "reg-login").len(), 1);
    assert_eq!(calls(&calls_dir, "short-login").len(), 2);

    // 5. The node's keyring also holds the docker config file: a repository it names pulls
    //    with its credential, no plugin involved.
    let nodecfg = reg.image("nodecfg/busybox:1");
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&pod("node-config", &env.node, &nodecfg, "")),
    );
    wait_running(&cp, &env, "node-config");
    assert!(
        reg.log()
            .lines()
            .any(|l| l.contains(&format!("auth.user.name={USER}"))),
        "no request authenticated as {USER} in the registry log"
    );

    cp.kubectl(&["delete", "pods", "--all", "--wait=false"]);
    wait_until(Duration::from_secs(60), "all pods gone", || {
        let l = cp.get_json(&["pods"])?;
        l["items"].as_array()?.is_empty().then_some(())
    });
}

/// A scratch directory removed on drop (also when an assert fails).
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn path(&self) -> &Path {
        std::fs::create_dir_all(&self.0).unwrap();
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A bad config stops rkubelet at start, before it touches anything, naming the file and field.
#[test]
fn a_bad_credential_provider_config_refuses_the_start() {
    let dir = TempDir(std::env::temp_dir().join(format!("rk-credp-{}", std::process::id())));
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    write_exec(&bin.join("p"), BROKEN);
    let cfg = dir.path().join("cp.yaml");
    let root = dir.path().join("root");
    let run = |config: &str, bin_dir: &Path| {
        std::fs::write(&cfg, config).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_rkubelet"))
            .arg(format!(
                "--image-credential-provider-config={}",
                cfg.display()
            ))
            .arg(format!(
                "--image-credential-provider-bin-dir={}",
                bin_dir.display()
            ))
            .arg(format!("--root-dir={}", root.display()))
            .arg("--container-runtime-endpoint=unix:///nonexistent/cri.sock")
            .arg("--fail-swap-on=false")
            .stdin(Stdio::null())
            .output()
            .expect("run rkubelet");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
    };
    let head = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n";
    let out = run(
        &format!("{head}- {{name: p, matchImages: [r.io], apiVersion: {V1}}}\n"),
        &bin,
    );
    assert!(
        out.contains(
            "Failed to register CRI auth plugins: failed to validate credential provider config"
        ) && out.contains(&cfg.display().to_string())
            && out.contains("providers[0].defaultCacheDuration: Required value"),
        "{out}"
    );
    assert_eq!(
        out.matches("defaultCacheDuration: Required value").count(),
        1,
        "the cause is printed once, not again by the error chain: {out}"
    );
    let out = run(
        &format!("{head}- {{name: q, matchImages: [r.io], defaultCacheDuration: 1m, apiVersion: {V1}}}\n"),
        &bin,
    );
    assert!(
        out.contains(&format!(
            "plugin binary executable {}/q did not exist",
            bin.display()
        )),
        "{out}"
    );
    assert!(
        !root.join("pods").exists(),
        "rkubelet made its directories before refusing"
    );
}
