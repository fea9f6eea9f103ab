//! Graceful shutdown against a real containerd (Env 112-115; 115 with an API server): on SIGTERM
//! every listener refuses new connections at once, a request in flight gets its answer, a followed
//! log and an exec session keep streaming for the grace period and are then closed, the process
//! exits within its bound, and the pod keeps running. A second signal exits at once with 128 +
//! its number.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;
use rkubelet_cri::api::ContainerState;

/// No API server in these tests: the secure port lets anyone in, so curl needs no credentials.
const OPEN_SECURE_PORT: &str =
    "authentication: {anonymous: {enabled: true}}\nauthorization: {mode: AlwaysAllow}\n";

/// A line a second and a bit, forever.
const TICKER: &str = "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.3; done";

fn start(index: u32) -> (Env, String, String) {
    let mut env = Env::new(index);
    env.extra_config = OPEN_SECURE_PORT.into();
    env.start_kubelet();
    env.write_manifest("ticker.yaml", &simple_pod("ticker", "Always", TICKER));
    let pod = env.wait_running("ticker");
    let name = pod.metadata.name.clone().unwrap();
    (env, name, uid(&pod))
}

/// `curl -k` against the secure port.
fn curl(env: &Env, args: &[&str], path: &str) -> Command {
    let mut c = Command::new("curl");
    c.args(["-sk"])
        .args(args)
        .arg(format!("https://127.0.0.1:{}{path}", env.port))
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// `containerLogs?follow=true` read line by line: each line with when it arrived, the channel
/// closing when the response ends.
struct Follow {
    child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
}

impl Follow {
    fn open(env: &Env, pod: &str) -> Follow {
        let mut child = curl(
            env,
            &["-N"],
            &format!("/containerLogs/default/{pod}/main?follow=true"),
        )
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        let f = Follow { child, lines };
        let (_, first) = f
            .lines
            .recv_timeout(Duration::from_secs(10))
            .expect("the followed log delivers a line");
        assert!(first.starts_with("tick "), "{first}");
        f
    }

    /// Everything until the response ended (or `limit`): arrival times of the lines, and when the
    /// stream ended.
    fn rest(self, limit: Duration) -> (Vec<Instant>, Option<Instant>, Child) {
        let deadline = Instant::now() + limit;
        let mut seen = vec![];
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok((t, _)) => seen.push(t),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return (seen, Some(Instant::now()), self.child)
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return (seen, None, self.child),
            }
        }
    }
}

/// Polls the three listeners; returns when each first refused a connection (None: never, within
/// `limit`).
fn watch_refusals(
    ports: [u16; 3],
    limit: Duration,
) -> std::thread::JoinHandle<[Option<Instant>; 3]> {
    std::thread::spawn(move || {
        let deadline = Instant::now() + limit;
        let mut refused = [None; 3];
        while Instant::now() < deadline && refused.iter().any(Option::is_none) {
            for (i, port) in ports.iter().enumerate() {
                if refused[i].is_some() {
                    continue;
                }
                let addr = format!("127.0.0.1:{port}").parse().unwrap();
                if let Err(e) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                    // A connection whose handshake completed into the accept queue just as the
                    // listener closed is reset by the kernel, not refused: both say the listener
                    // is gone (CI on 68faf26 met the reset once).
                    use std::io::ErrorKind::{ConnectionRefused, ConnectionReset};
                    assert!(
                        matches!(e.kind(), ConnectionRefused | ConnectionReset),
                        "{e}"
                    );
                    refused[i] = Some(Instant::now());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        refused
    })
}

async fn container_running(env: &Env, uid: &str) -> bool {
    env.containers_of(uid)
        .await
        .iter()
        .any(|c| c.state == ContainerState::ContainerRunning as i32)
}

#[tokio::test]
async fn sigterm_drains_connections_within_bounds_and_pods_keep_running() {
    let (mut env, pod, uid) = start(112);
    let follow = Follow::open(&env, &pod);
    // A request in flight when the signal arrives: a one-shot exec that takes 3 s.
    let run = {
        let mut c = curl(
            &env,
            &["-X", "POST", "-o", "/dev/null", "-w", "%{http_code}"],
            &format!("/run/default/{pod}/main?cmd=sleep%203"),
        );
        std::thread::spawn(move || {
            let out = c.output().expect("curl");
            (
                String::from_utf8_lossy(&out.stdout).into_owned(),
                Instant::now(),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let refusals = watch_refusals(
        [env.port, env.ro_port, env.healthz_port],
        Duration::from_secs(5),
    );

    let t0 = Instant::now();
    let status = env.stop_kubelet(Signal::SIGTERM);
    let exited = t0.elapsed();

    let refused = refusals.join().unwrap();
    for (what, at) in ["secure", "read-only", "healthz"].iter().zip(refused) {
        let at = at.unwrap_or_else(|| panic!("the {what} port never refused a connection"));
        // "At once" against the 5 s grace: a listener kept open for the grace would refuse at
        // 5 s. Half of that leaves room for a loaded machine (it takes milliseconds).
        assert!(
            at.saturating_duration_since(t0) < Duration::from_millis(2500),
            "the {what} port refused only after {:?}",
            at - t0
        );
    }
    let (code, done) = run.join().unwrap();
    assert_eq!(code, "200", "the /run in flight was answered");
    // Answered when its exec ended (about 2.5 s after the signal), not held to the end of the
    // 5 s grace: the bound sits at the grace, the only wrong answer it has to tell apart.
    assert!(done.saturating_duration_since(t0) < Duration::from_secs(5));

    let (lines, ended, mut child) = follow.rest(Duration::from_secs(1));
    let ended = ended.expect("the followed log ended by the time rkubelet exited");
    let after = |s: u64| {
        lines
            .iter()
            .filter(|t| t.saturating_duration_since(t0) > Duration::from_secs(s))
            .count()
    };
    assert!(
        after(3) > 0,
        "the followed log kept delivering after the signal ({} lines)",
        lines.len()
    );
    let ended_after = ended.saturating_duration_since(t0);
    assert!(
        ended_after >= Duration::from_secs(4) && ended_after < Duration::from_secs(8),
        "the followed log ended {ended_after:?} after SIGTERM, not at the 5 s grace"
    );
    // Ended as a complete response, not a cut connection (curl: 18 partial, 56 receive error).
    assert_eq!(child.wait().unwrap().code(), Some(0), "curl's exit status");

    assert!(status.success(), "{status}");
    assert!(exited < Duration::from_secs(12), "exited after {exited:?}");
    let log = env.kubelet_log();
    assert!(
        log.contains("grace period over; closing open connections and streams"),
        "{}",
        tail(&log, 30)
    );
    assert!(
        log.contains("rkubelet stopped; pods keep running"),
        "{}",
        tail(&log, 30)
    );
    assert!(
        container_running(&env, &uid).await,
        "the pod's container still runs"
    );
}

/// Either order: the second signal decides the status, 128 + its number.
#[tokio::test]
async fn a_second_signal_exits_at_once() {
    for (index, first, second, code) in [
        (113, Signal::SIGTERM, Signal::SIGINT, 130),
        (114, Signal::SIGINT, Signal::SIGTERM, 143),
    ] {
        let (mut env, pod, uid) = start(index);
        // An open stream, so a graceful shutdown would take the whole grace period.
        let follow = Follow::open(&env, &pod);
        let pid = nix::unistd::Pid::from_raw(env.kubelet_pid().unwrap() as i32);
        nix::sys::signal::kill(pid, first).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        let status = env.stop_kubelet(second);
        // "At once" against the graceful path, which would hold the open stream for the 5 s
        // grace (4.7 s after t0): 3 s leaves room for a loaded machine (it takes milliseconds).
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "{first} then {second}: exited after {:?}",
            t0.elapsed()
        );
        assert_eq!(status.code(), Some(code), "{first} then {second}: {status}");
        let (_, ended, _) = follow.rest(Duration::from_secs(2));
        assert!(ended.is_some(), "the stream ended with the process");
        assert!(env.kubelet_log().contains("second signal; exiting now"));
        assert!(
            container_running(&env, &uid).await,
            "the pod's container still runs"
        );
    }
}

/// A `kubectl exec` session through the API server (the kubelet proxies it to the runtime's
/// streaming server): it keeps flowing through the grace period and is closed at its end.
#[tokio::test]
async fn an_exec_session_goes_on_for_the_grace_then_closes() {
    let cp = ControlPlane::up("shutdown-exec");
    let mut env = Env::new(115);
    env.join(&cp, &[]);
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&api_pod("shell", &env.node, SLEEPER, 1, "")),
    );
    cp.wait_running("shell");
    let uid = cp.get_json(&["pod", "shell"]).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let mut exec = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&cp.admin_kubeconfig)
        .args(["exec", "shell", "--", "sh", "-c"])
        .arg("i=0; while true; do i=$((i+1)); echo x $i; sleep 0.3; done")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl");
    let out = exec.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    let follow = Follow { child: exec, lines };
    let (_, first) = follow
        .lines
        .recv_timeout(Duration::from_secs(30))
        .expect("the exec session prints");
    assert!(first.starts_with("x "), "{first}");

    let t0 = Instant::now();
    let status = env.stop_kubelet(Signal::SIGTERM);
    assert!(status.success(), "{status}");
    let (seen, ended, mut child) = follow.rest(Duration::from_secs(2));
    let ended = ended.expect("the exec session ended by the time rkubelet exited");
    assert!(
        seen.iter()
            .any(|t| t.saturating_duration_since(t0) > Duration::from_secs(3)),
        "the exec session kept flowing after the signal ({} lines)",
        seen.len()
    );
    let ended_after = ended.saturating_duration_since(t0);
    assert!(
        ended_after >= Duration::from_secs(4) && ended_after < Duration::from_secs(8),
        "the exec session ended {ended_after:?} after SIGTERM, not at the 5 s grace"
    );
    let _ = child.wait();
    assert!(
        container_running(&env, &uid).await,
        "the pod's container still runs"
    );
}
