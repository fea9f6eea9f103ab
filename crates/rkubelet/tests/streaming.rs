//! exec, attach, port-forward and run through a real kube-apiserver 1.20 and a real containerd:
//! the kubelet asks the runtime for a streaming URL (CRI Exec/Attach/PortForward) and proxies the
//! client's upgraded connection to it. kubectl 1.32 first tries websockets (v5.channel.k8s.io for
//! exec/attach, websocket-tunnelled SPDY for port-forward); containerd 1.6's streaming server
//! refuses those, the refusal is relayed, and kubectl falls back to SPDY/3.1, which is what
//! carries the streams here (the tests check kubectl's own report of the fallback and the
//! refusal it falls back on).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn kubectl_cmd(cp: &ControlPlane, args: &[&str]) -> Command {
    let mut c = Command::new("kubectl");
    c.arg("--kubeconfig").arg(&cp.admin_kubeconfig).args(args);
    c
}

/// Waits for `child` up to `timeout`; kills it (and panics) if it does not exit.
fn wait_output(mut child: Child, timeout: Duration, what: &str) -> Output {
    let deadline = Instant::now() + timeout;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what}: still running after {timeout:?}; stdout {:?} stderr {:?}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// `kubectl args` fed `stdin` (then closed); (exit code, stdout, stderr).
fn kubectl_io(cp: &ControlPlane, args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = kubectl_cmd(cp, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = wait_output(child, Duration::from_secs(60), &format!("kubectl {args:?}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `curl` to the node's secure port as the apiserver's kubelet client: (HTTP code, body).
fn curl(cp: &ControlPlane, env: &Env, path: &str, extra: &[&str]) -> (u16, String) {
    let cert = cp.dir.join("pki/apiserver-kubelet-client.crt");
    let key = cp.dir.join("pki/apiserver-kubelet-client.key");
    let out = Command::new("curl")
        .args(["-sk", "--http1.1", "-m", "20", "-w", "\n%{http_code}"])
        .args([
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ])
        .args(extra)
        .arg(format!("https://127.0.0.1:{}{path}", env.port))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// `curl` to the node's secure port with only a bearer token: (HTTP code, body).
fn curl_token(env: &Env, token: &str, path: &str, extra: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sk", "--http1.1", "-m", "20", "-w", "\n%{http_code}"])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(extra)
        .arg(format!("https://127.0.0.1:{}{path}", env.port))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// SPDY upgrade headers as the API server sends them.
const SPDY: [&str; 6] = [
    "-H",
    "Connection: Upgrade",
    "-H",
    "Upgrade: SPDY/3.1",
    "-H",
    "X-Stream-Protocol-Version: v4.channel.k8s.io",
];

#[tokio::test]
async fn kubectl_exec_commands_exit_codes_and_interactive_sessions() {
    let cp = ControlPlane::up("strm1");
    let mut env = Env::new(221);
    env.join(&cp, &[]);
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&api_pod("shell", &env.node, SLEEPER, 1, "")),
    );
    cp.wait_running("shell");

    // A command's stdout and stderr come back on their own streams.
    let (code, out, err) = kubectl_io(
        &cp,
        &[
            "exec",
            "shell",
            "--",
            "sh",
            "-c",
            "echo out-$((6*7)); echo err-1 >&2",
        ],
        "",
    );
    assert_eq!((code, out.as_str()), (0, "out-42\n"), "stderr: {err}");
    assert!(err.contains("err-1"), "{err}");

    // A non-zero exit code is kubectl's own exit code.
    let (code, _, err) = kubectl_io(&cp, &["exec", "shell", "--", "sh", "-c", "exit 3"], "");
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("command terminated with exit code 3"), "{err}");

    // An interactive shell fed from stdin: the lines run in order in one shell (state carries
    // over), and the session ends when stdin closes.
    let script =
        "x=41\necho hello-$((x+1))\ncd /proc/1\necho in-$(pwd)\ncat cmdline | tr '\\0' ' '; echo\n";
    let (code, out, err) = kubectl_io(&cp, &["exec", "-i", "shell", "--", "sh"], script);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!("hello-42\nin-/proc/1\nsh -c {SLEEPER} \n"),
        "stderr: {err}"
    );

    // A terminal: `kubectl exec -it` under `script`, which gives kubectl a pty.
    let cmd = format!(
        "kubectl --kubeconfig {} exec -it shell -- sh -c 'tty; stty size; echo tty-ok'",
        cp.admin_kubeconfig.display()
    );
    let child = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script");
    let out = wait_output(child, Duration::from_secs(60), "kubectl exec -it");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("/dev/pts/"), "a tty inside: {text}");
    assert!(text.contains("tty-ok"), "{text}");

    // What carried these: kubectl (client-go's fallback executor, which says so at -v=4) tried
    // websockets first, got a refusal back, and fell back to SPDY, which carried the command.
    let (code, out, err) = kubectl_io(
        &cp,
        &["-v=4", "exec", "shell", "--", "echo", "via-fallback"],
        "",
    );
    assert_eq!((code, out.as_str()), (0, "via-fallback\n"), "stderr: {err}");
    assert!(err.contains("RemoteCommand fallback"), "{err}");

    // The refusal kubectl fell back on, directly on 10250: containerd 1.6 speaks up to
    // v4.channel.k8s.io, so a websocket offering only v5 (kubectl 1.32's offer) is refused by
    // the runtime (403), and the kubelet relays that answer instead of upgrading.
    let cert = cp.dir.join("pki/apiserver-kubelet-client.crt");
    let key = cp.dir.join("pki/apiserver-kubelet-client.key");
    let out = Command::new("python3")
        .arg(repo_root().join("crates/rkubelet/tests/streaming/ws_exec.py"))
        .arg(env.port.to_string())
        .arg(&cert)
        .arg(&key)
        .arg("/exec/default/shell/main?command=true&output=1")
        .arg("v5.channel.k8s.io")
        .output()
        .expect("python3");
    let refused = String::from_utf8_lossy(&out.stdout);
    assert!(
        refused.starts_with("HTTP/1.1 403 Forbidden\n") && refused.contains("\nbody="),
        "{refused}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The websocket protocol end to end, directly on 10250: the kubelet relays the runtime's
    // v4.channel.k8s.io handshake and frames untouched.
    let out = Command::new("python3")
        .arg(repo_root().join("crates/rkubelet/tests/streaming/ws_exec.py"))
        .arg(env.port.to_string())
        .arg(&cert)
        .arg(&key)
        .arg(
            "/exec/default/shell/main?command=sh&command=-c\
             &command=echo%20ws-out%3B%20echo%20ws-err%20%3E%262%3B%20exit%207&output=1&error=1",
        )
        .output()
        .expect("python3");
    let ws = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = ws.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "HTTP/1.1 101 Switching Protocols",
            "protocol=v4.channel.k8s.io",
            "ch1='ws-out\\n'",
            "ch2='ws-err\\n'",
        ],
        "{ws}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        lines[4].starts_with("ch3=")
            && ws.contains("NonZeroExitCode")
            && ws.contains("\"message\":\"7\""),
        "exit status on the error channel: {ws}"
    );

    // The kubelet's own answers, directly on 10250, with upstream's codes and messages.
    let (code, body) = curl(
        &cp,
        &env,
        "/exec/default/nosuch/main?command=true&output=1",
        &SPDY,
    );
    assert_eq!((code, body.as_str()), (404, "pod does not exist"));
    let (code, body) = curl(&cp, &env, "/exec/default/shell/main?command=true", &SPDY);
    assert_eq!(
        (code, body.as_str()),
        (400, "you must specify at least 1 of stdin, stdout, stderr")
    );
    let (code, body) = curl(
        &cp,
        &env,
        "/exec/default/shell/nope?command=true&output=1",
        &SPDY,
    );
    assert_eq!(
        (code, body.as_str()),
        (500, "container not found (\"nope\")\n")
    );
    let (code, body) = curl(
        &cp,
        &env,
        "/exec/default/shell/main?command=true&output=1",
        &[],
    );
    assert_eq!((code, body.as_str()), (500, "Upgrade request required\n"));
    let uid = cp.get_json(&["pod", "shell"]).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();

    // /run: the legacy one-shot exec, `cmd` split on spaces, stdout then stderr.
    let (code, body) = curl(
        &cp,
        &env,
        "/run/default/shell/main?cmd=echo%20ran%20ok",
        &["-X", "POST"],
    );
    assert_eq!((code, body.as_str()), (200, "ran ok\n"));
    let (code, body) = curl(
        &cp,
        &env,
        &format!("/run/default/shell/{uid}/main?cmd=ls%20/nonexistent"),
        &["-X", "POST"],
    );
    assert_eq!(code, 500, "{body}");
    assert!(
        body.starts_with("command 'ls /nonexistent' exited with 1: ls: /nonexistent"),
        "{body}"
    );
    let (code, _) = curl(&cp, &env, "/run/default/shell/main?cmd=true", &[]);
    assert_eq!(code, 405, "run is POST only, as upstream");

    // Reading nodes/proxy is not running commands: a websocket exec is a GET, yet it needs
    // `create` (a monitoring agent's token reads /pods but cannot exec).
    cp.kubectl(&["create", "serviceaccount", "reader"]);
    cp.kubectl(&[
        "create",
        "clusterrole",
        "node-proxy-reader",
        "--verb=get",
        "--resource=nodes/proxy",
    ]);
    cp.kubectl(&[
        "create",
        "clusterrolebinding",
        "reader-node-proxy",
        "--clusterrole=node-proxy-reader",
        "--serviceaccount=default:reader",
    ]);
    let token = cp.kubectl(&["create", "token", "reader"]);
    let (code, body) = curl_token(&env, token.trim(), "/pods", &[]);
    assert_eq!(code, 200, "{body}");
    let ws = [
        "-H",
        "Connection: Upgrade",
        "-H",
        "Upgrade: websocket",
        "-H",
        "Sec-WebSocket-Version: 13",
        "-H",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "-H",
        "Sec-WebSocket-Protocol: v4.channel.k8s.io",
    ];
    let (code, body) = curl_token(
        &env,
        token.trim(),
        "/exec/default/shell/main?command=id&output=1",
        &ws,
    );
    assert_eq!(
        (code, body.as_str()),
        (
            403,
            "Forbidden (user=system:serviceaccount:default:reader, verb=create, resource=nodes, subresource(s)=[proxy])"
        )
    );
}

#[tokio::test]
async fn kubectl_port_forward_fetches_a_page() {
    let cp = ControlPlane::up("strm2");
    let mut env = Env::new(222);
    env.join(&cp, &[]);
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&api_pod(
            "web",
            &env.node,
            "mkdir -p /www && echo hello-from-pod > /www/index.html && exec httpd -f -p 8080 -h /www",
            1,
            "",
        )),
    );
    cp.wait_running("web");
    let mut child = kubectl_cmd(&cp, &["port-forward", "pod/web", ":8080"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl port-forward");
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    // "Forwarding from 127.0.0.1:PORT -> 8080"
    let port: u16 = line
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| {
            let _ = child.kill();
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("no forwarding line: {line:?} {err}")
        });
    // Each fetch is a new stream pair on the same upgraded connection.
    for _ in 0..3 {
        let (code, body) = wait_until(Duration::from_secs(20), "page through the forward", || {
            http_get("127.0.0.1", port, "/index.html")
                .ok()
                .filter(|(c, _)| *c == 200)
        });
        assert_eq!((code, body.as_str()), (200, "hello-from-pod\n"));
    }
    let _ = child.kill();
    let _ = child.wait();
    // kubectl tried its websocket tunnel first, without `port` parameters (the tunnel names
    // ports per SPDY stream); the kubelet refused it with 400 as upstream's NewV4Options does
    // (checked directly below), and client-go's fallback dialer, which says so at -v=4, went
    // on with SPDY, which carried the forward above.
    let mut child = kubectl_cmd(&cp, &["-v=4", "port-forward", "pod/web", ":8080"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl port-forward");
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let _ = child.kill();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    let _ = child.wait();
    assert!(
        line.starts_with("Forwarding from 127.0.0.1:"),
        "{line:?} {err}"
    );
    assert!(
        err.contains("fallback to secondary dialer"),
        "no websocket-to-SPDY fallback: {err}"
    );

    // Upstream's checks before the runtime is asked.
    let (code, body) = curl(&cp, &env, "/portForward/default/web/not-its-uid", &SPDY);
    assert_eq!((code, body.as_str()), (404, "pod not found"));
    let ws = [
        "-H",
        "Connection: Upgrade",
        "-H",
        "Upgrade: websocket",
        "-H",
        "Sec-WebSocket-Version: 13",
        "-H",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
    ];
    let (code, body) = curl(&cp, &env, "/portForward/default/web", &ws);
    assert_eq!(
        (code, body.as_str()),
        (400, "query parameter \"port\" is required")
    );
}

#[tokio::test]
async fn kubectl_attach_to_stdin_and_output() {
    let cp = ControlPlane::up("strm3");
    let mut env = Env::new(223);
    env.join(&cp, &[]);
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&api_pod(
            "echoer",
            &env.node,
            "while read l; do echo got:$l; done",
            1,
            "    stdin: true\n",
        )),
    );
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&api_pod(
            "ticker",
            &env.node,
            "i=0; while true; do i=$((i+1)); echo tick-$i; sleep 0.5; done",
            1,
            "",
        )),
    );
    cp.wait_running("echoer");
    cp.wait_running("ticker");

    // Lines typed into `kubectl attach -i` reach the container's stdin; its answers come back.
    let mut child = kubectl_cmd(&cp, &["attach", "-i", "echoer"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl attach");
    let mut stdin = child.stdin.take().unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut seen = Vec::new();
    let start = Instant::now();
    for word in ["alpha", "beta", "gamma"] {
        // The first line may go out before the stream is up; resend until it is echoed.
        let want = format!("got:{word}");
        writeln!(stdin, "{word}").unwrap();
        let mut line = String::new();
        while start.elapsed() < Duration::from_secs(30) {
            line.clear();
            if reader.read_line(&mut line).unwrap() == 0 {
                break;
            }
            if line.trim() == want {
                seen.push(line.trim().to_string());
                break;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(seen, ["got:alpha", "got:beta", "got:gamma"]);

    // Plain `kubectl attach` follows a container's output.
    let mut child = kubectl_cmd(&cp, &["attach", "ticker"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl attach");
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut ticks = Vec::new();
    let start = Instant::now();
    while ticks.len() < 3 && start.elapsed() < Duration::from_secs(30) {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(n) = line.trim().strip_prefix("tick-") {
            ticks.push(n.parse::<u64>().unwrap());
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(ticks.len(), 3, "{ticks:?}");
    assert!(ticks.windows(2).all(|w| w[1] == w[0] + 1), "{ticks:?}");

    // Upstream's message for a container the pod does not have.
    let (code, body) = curl(&cp, &env, "/attach/default/ticker/nope?output=1", &SPDY);
    assert_eq!(
        (code, body.as_str()),
        (500, "container nope not found in pod ticker_default\n")
    );
}

#[tokio::test]
async fn exec_with_debugging_handlers_off_fails_with_upstreams_message() {
    let cp = ControlPlane::up("strm4");
    let mut env = Env::new(224);
    env.extra_config = "enableDebuggingHandlers: false\n".into();
    env.join(&cp, &[]);
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&api_pod("quiet", &env.node, SLEEPER, 1, "")),
    );
    cp.wait_running("quiet");
    let (code, _, err) = kubectl_io(&cp, &["exec", "quiet", "--", "true"], "");
    assert_ne!(code, 0);
    assert!(
        err.contains("error: unable to upgrade connection: Debug endpoints are disabled."),
        "{err}"
    );
    for (path, method) in [
        ("/exec/default/quiet/main?command=true&output=1", "POST"),
        ("/attach/default/quiet/main?output=1", "POST"),
        ("/portForward/default/quiet", "GET"),
        ("/run/default/quiet/main?cmd=true", "POST"),
    ] {
        let (code, body) = curl(&cp, &env, path, &["-X", method]);
        assert_eq!(
            (code, body.as_str()),
            (405, "Debug endpoints are disabled."),
            "{path}"
        );
    }
}

#[tokio::test]
async fn idle_streams_are_closed_after_streaming_connection_idle_timeout() {
    let cp = ControlPlane::up("strm5");
    let mut env = Env::new(225);
    // Shorter than kubectl's 5 s SPDY ping period, so the pings do not count as traffic here.
    env.extra_config = "streamingConnectionIdleTimeout: 2s\n".into();
    env.join(&cp, &[]);
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&api_pod(
            "idle",
            &env.node,
            SLEEPER,
            1,
            "    readinessProbe:\n      exec: {command: [\"true\"]}\n      periodSeconds: 1\n",
        )),
    );
    cp.wait_running("idle");
    // The prober's metrics are on /metrics/probes (through the apiserver's node proxy), not on
    // /metrics, as upstream.
    let probes = wait_until(Duration::from_secs(30), "a probe counted", || {
        let text = cp.kubectl(&[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{}/proxy/metrics/probes", env.node),
        ]);
        text.contains("prober_probe_total{").then_some(text)
    });
    assert!(
        probes.lines().any(|l| l.starts_with("prober_probe_total{")
            && l.contains("pod=\"idle\"")
            && l.contains("probe_type=\"Readiness\"")
            && l.contains("result=\"successful\"")
            && l.contains("namespace=\"default\"")
            && l.contains("pod_uid=\"")),
        "{probes}"
    );
    let metrics = cp.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/metrics", env.node),
    ]);
    assert!(!metrics.contains("prober_probe_total"), "{metrics}");
    let configz = cp.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/configz", env.node),
    ]);
    assert!(
        configz.contains("\"streamingConnectionIdleTimeout\":\"2s\""),
        "{configz}"
    );
    // A busy stream lives longer than the timeout.
    let (code, out, err) = kubectl_io(
        &cp,
        &[
            "exec",
            "idle",
            "--",
            "sh",
            "-c",
            "for i in 1 2 3 4 5 6; do echo busy-$i; sleep 1; done",
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 6, "{out}");
    // An interactive session that nobody types into is cut.
    let child = kubectl_cmd(&cp, &["exec", "-i", "idle", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl exec");
    let start = Instant::now();
    let out = wait_output(child, Duration::from_secs(30), "idle kubectl exec -i");
    assert!(
        start.elapsed() >= Duration::from_secs(2),
        "ended before the timeout: {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        env.kubelet_log()
            .contains("streaming connection idle for streamingConnectionIdleTimeout"),
        "the kubelet closed it"
    );
}
