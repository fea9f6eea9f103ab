//! `tlsMinVersion` / `--tls-min-version` and `tlsCipherSuites` / `--tls-cipher-suites` on the
//! secure port, probed with curl (OpenSSL) offering one version or one suite at a time. The
//! serving certificate is rkubelet's self-signed ECDSA one, so the ECDHE_ECDSA suites apply.

mod common;

use std::process::{Command, Stdio};

use common::*;
use nix::sys::signal::Signal;

/// A TLS handshake and GET /healthz on the secure port with curl's TLS `opts`: the HTTP status
/// (any status means the handshake worked), or curl's exit code and message.
fn handshake(env: &Env, opts: &[&str]) -> Result<u16, String> {
    let out = Command::new("curl")
        .args(["-sS", "-k", "-o", "/dev/null", "-w", "%{http_code}"])
        .args(opts)
        .arg(format!("https://127.0.0.1:{}/healthz", env.port))
        .stdin(Stdio::null())
        .output()
        .expect("run curl");
    if out.status.success() {
        let code = String::from_utf8_lossy(&out.stdout);
        Ok(code.trim().parse().unwrap_or(0))
    } else {
        Err(format!(
            "curl exit {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn refused(r: Result<u16, String>, what: &str) {
    match r {
        // 35: SSL connect error (the server's handshake failure alert).
        Err(e) => assert!(e.contains("exit Some(35)"), "{what}: {e}"),
        Ok(code) => panic!("{what}: the handshake succeeded (HTTP {code})"),
    }
}

fn accepted(r: Result<u16, String>, what: &str) {
    match r {
        Ok(code) => assert!(code > 0, "{what}: HTTP {code}"),
        Err(e) => panic!("{what}: {e}"),
    }
}

#[tokio::test]
async fn min_version_and_cipher_suites_restrict_the_secure_port() {
    let mut env = Env::new(195);

    // Defaults: TLS 1.2 and 1.3, every suite rustls has.
    env.start_kubelet();
    env.wait_secure_port();
    accepted(handshake(&env, &["--tls-max", "1.2"]), "default, TLS 1.2");
    accepted(handshake(&env, &["--tlsv1.3"]), "default, TLS 1.3");
    env.stop_kubelet(Signal::SIGTERM);

    // VersionTLS13 (the flag): a TLS 1.2 client is refused, TLS 1.3 works.
    env.start_kubelet_with(&["--tls-min-version=VersionTLS13"]);
    env.wait_secure_port();
    refused(
        handshake(&env, &["--tls-max", "1.2"]),
        "TLS 1.2 with VersionTLS13",
    );
    accepted(handshake(&env, &["--tlsv1.3"]), "TLS 1.3 with VersionTLS13");
    env.stop_kubelet(Signal::SIGTERM);

    // A restricted TLS 1.2 list (the config field): a client offering only another suite is
    // refused, one offering a listed suite gets through; TLS 1.3 stays as Go leaves it.
    env.extra_config = "tlsCipherSuites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, \
         TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, TLS_RSA_WITH_AES_256_GCM_SHA384]\n"
        .into();
    env.start_kubelet();
    env.wait_secure_port();
    let tls12 = |suite: &'static str| handshake(&env, &["--tls-max", "1.2", "--ciphers", suite]);
    refused(
        tls12("ECDHE-ECDSA-AES128-GCM-SHA256"),
        "TLS 1.2 unlisted suite",
    );
    refused(
        tls12("ECDHE-ECDSA-CHACHA20-POLY1305"),
        "TLS 1.2 unlisted CHACHA20",
    );
    accepted(
        tls12("ECDHE-ECDSA-AES256-GCM-SHA384"),
        "TLS 1.2 listed suite",
    );
    accepted(
        handshake(
            &env,
            &["--tlsv1.3", "--tls13-ciphers", "TLS_AES_128_GCM_SHA256"],
        ),
        "TLS 1.3 is not restricted by TLS 1.2 names",
    );
    // The suite rustls lacks was left out with a warning naming it.
    let log = env.kubelet_log();
    assert!(
        log.contains("TLS_RSA_WITH_AES_256_GCM_SHA384 left out"),
        "{}",
        tail(&log, 30)
    );
    env.stop_kubelet(Signal::SIGTERM);

    // Naming a TLS 1.3 suite restricts TLS 1.3 to it.
    env.extra_config = String::new();
    env.start_kubelet_with(&[
        "--tls-cipher-suites=TLS_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    ]);
    env.wait_secure_port();
    refused(
        handshake(
            &env,
            &["--tlsv1.3", "--tls13-ciphers", "TLS_AES_128_GCM_SHA256"],
        ),
        "TLS 1.3 unlisted suite",
    );
    accepted(
        handshake(
            &env,
            &["--tlsv1.3", "--tls13-ciphers", "TLS_AES_256_GCM_SHA384"],
        ),
        "TLS 1.3 listed suite",
    );
    accepted(
        tls12_with(&env, "ECDHE-ECDSA-AES128-GCM-SHA256"),
        "TLS 1.2 listed suite",
    );
    env.stop_kubelet(Signal::SIGTERM);
}

fn tls12_with(env: &Env, suite: &str) -> Result<u16, String> {
    handshake(env, &["--tls-max", "1.2", "--ciphers", suite])
}

/// Unknown names and lists with nothing rustls can serve stop the kubelet at start, naming the
/// field and the names (upstream's `Cipher suite X not supported or doesn't exist`).
#[test]
fn bad_tls_settings_stop_the_start() {
    let env = Env::without_runtime(197);
    std::fs::write(
        env.config_path(),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_rkubelet"))
            .arg("--config")
            .arg(env.config_path())
            .args(["--root-dir", &env.root.display().to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run rkubelet");
        assert!(!out.status.success(), "{args:?} started");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let e = run(&["--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_MADE_UP"]);
    assert!(
        e.contains("tlsCipherSuites (--tls-cipher-suites): Cipher suite TLS_MADE_UP not supported or doesn't exist"),
        "{e}"
    );
    let e = run(&["--tls-cipher-suites=TLS_RSA_WITH_RC4_128_SHA,TLS_RSA_WITH_AES_128_CBC_SHA"]);
    assert!(
        e.contains("none of TLS_RSA_WITH_RC4_128_SHA, TLS_RSA_WITH_AES_128_CBC_SHA can be served"),
        "{e}"
    );
    let e = run(&["--tls-min-version=VersionTLS9"]);
    assert!(
        e.contains("tlsMinVersion (--tls-min-version): unknown tls version \"VersionTLS9\""),
        "{e}"
    );
}
