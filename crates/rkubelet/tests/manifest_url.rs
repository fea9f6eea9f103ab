//! The manifest URL pod source (`staticPodURL`, `--manifest-url-header`, `httpCheckFrequency`)
//! against a real containerd, the manifest served by a small HTTP server in the test that records
//! what it was asked.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;

/// What the server answers and what it was asked.
#[derive(Default)]
struct Served {
    status: u16,
    body: String,
    /// Every request's header lines, lower-cased names.
    requests: Vec<Vec<(String, String)>>,
}

/// A one-thread HTTP/1.1 server on loopback answering every GET with the current body.
struct ManifestServer {
    port: u16,
    state: Arc<Mutex<Served>>,
    stop: Arc<AtomicBool>,
}

impl ManifestServer {
    fn start() -> ManifestServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(Served {
            status: 503,
            ..Served::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if sp.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(conn) = conn {
                    let _ = answer(conn, &st);
                }
            }
        });
        ManifestServer { port, state, stop }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/pods", self.port)
    }

    fn serve(&self, status: u16, body: &str) {
        let mut s = self.state.lock().unwrap();
        s.status = status;
        s.body = body.to_string();
    }

    fn requests(&self) -> usize {
        self.state.lock().unwrap().requests.len()
    }

    /// Waits until `n` more requests than now have been answered (the kubelet read the URL
    /// that many times after a change).
    fn wait_polls(&self, n: usize) {
        let want = self.requests() + n;
        wait_until(Duration::from_secs(20), "manifest URL polled", || {
            (self.requests() >= want).then_some(())
        });
    }

    /// Values of header `name` in the last request.
    fn last_header(&self, name: &str) -> Vec<String> {
        let s = self.state.lock().unwrap();
        s.requests
            .last()
            .map(|h| {
                h.iter()
                    .filter(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for ManifestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn answer(conn: TcpStream, state: &Mutex<Served>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut headers = Vec::new();
    let mut line = String::new();
    reader.read_line(&mut line)?; // request line
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.trim_end().split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let (status, body) = {
        let mut s = state.lock().unwrap();
        s.requests.push(headers);
        (s.status, s.body.clone())
    };
    let reason = match status {
        200 => "OK",
        500 => "Internal Server Error",
        _ => "Service Unavailable",
    };
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    conn.flush()
}

/// A PodList in JSON of sleepers named `names`, `tag` in their command.
fn pod_list(names: &[&str], tag: &str) -> String {
    let items: Vec<_> = names
        .iter()
        .map(|n| {
            serde_json::json!({
                "metadata": {"name": n},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "main",
                        "image": IMAGE,
                        "command": ["sh", "-c", format!("echo {tag}; {SLEEPER}")],
                    }],
                },
            })
        })
        .collect();
    serde_json::json!({"apiVersion": "v1", "kind": "PodList", "items": items}).to_string()
}

/// Waits until the runtime has no running container of pod `uid`. SLEEPER stops on SIGTERM at
/// once; the 60 s bound only catches containers left running, it is not a speed figure.
async fn wait_gone(env: &Env, uid: &str, what: &str) {
    let begin = Instant::now();
    loop {
        let running = env
            .containers_of(uid)
            .await
            .iter()
            .filter(|c| c.state == rkubelet_cri::api::ContainerState::ContainerRunning as i32)
            .count();
        if running == 0 {
            return;
        }
        assert!(
            begin.elapsed() < Duration::from_secs(60),
            "{what}: containers of {uid} still running\n{}",
            tail(&env.kubelet_log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn manifest_url_pods_follow_the_served_body_and_survive_bad_answers() {
    let server = ManifestServer::start();
    let url = server.url();
    server.serve(200, &simple_pod("urlweb", "Always", SLEEPER));
    let mut env = Env::new(193);
    env.extra_config = format!("staticPodURL: {url}\nhttpCheckFrequency: 1s\n");
    env.start_kubelet_with(&["--manifest-url-header=X-Rkt-Token:one,X-Rkt-Token:two,Accept:*/*"]);

    // Upstream's static pod treatment with source http.
    let first = env.wait_running("urlweb");
    assert_eq!(
        first.metadata.name.as_deref(),
        Some(format!("urlweb-{}", env.node).as_str())
    );
    let ann = first.metadata.annotations.clone().unwrap();
    assert_eq!(ann["kubernetes.io/config.source"], "http");
    assert_eq!(ann["kubernetes.io/config.hash"], uid(&first));
    // The headers of --manifest-url-header, every value of a repeated name.
    assert_eq!(server.last_header("x-rkt-token"), vec!["one", "two"]);
    assert_eq!(server.last_header("accept"), vec!["*/*"]);

    // A changed manifest replaces the pod (new UID, the old one's containers stopped).
    server.serve(200, &pod_list(&["urlweb", "urlside"], "v2"));
    let second = env.wait_pod("urlweb", Duration::from_secs(40), "replaced", |p| {
        let st = p.status.as_ref()?;
        (uid(p) != uid(&first) && st.phase.as_deref() == Some("Running")).then(|| p.clone())
    });
    let side = env.wait_running("urlside");
    wait_gone(&env, &uid(&first), "replaced pod").await;

    // 500 and garbage keep the pods; the log names the URL and why.
    let polls_before = server.requests();
    server.serve(500, "boom");
    server.wait_polls(2);
    server.serve(200, "this: [is not a pod");
    server.wait_polls(2);
    assert!(server.requests() >= polls_before + 4);
    let log = env.kubelet_log();
    assert!(
        log.contains(&format!("{url}: 500 Internal Server Error")),
        "{}",
        tail(&log, 20)
    );
    assert!(
        log.contains(&format!("{url}: couldn't parse as a Pod or PodList")),
        "{}",
        tail(&log, 20)
    );
    for (name, want) in [("urlweb", &second), ("urlside", &side)] {
        let p = env.pod(name).expect("pod kept through bad answers");
        assert_eq!(uid(&p), uid(want), "{name}");
        let running = env.containers_of(&uid(&p)).await;
        assert_eq!(running.len(), 1, "{name}: its container was not restarted");
    }

    // Removing a pod from the body removes it; the other stays untouched.
    server.serve(200, &pod_list(&["urlweb"], "v2"));
    wait_until(Duration::from_secs(20), "urlside removed", || {
        env.pod("urlside").is_none().then_some(())
    });
    wait_gone(&env, &uid(&side), "removed pod").await;
    let kept = env.pod("urlweb").unwrap();
    assert_eq!(uid(&kept), uid(&second));
    assert!(
        env.kubelet_log()
            .contains("successfully read pods from the manifest URL"),
        "recovery logged"
    );
}

/// The URL is a source that must have answered before housekeeping removes runtime pods
/// (upstream `sourcesReady`): a restarted kubelet whose URL fails leaves the pod running, and
/// adopts it once the URL answers.
#[tokio::test]
async fn runtime_pods_wait_for_the_manifest_url_to_answer_once() {
    let server = ManifestServer::start();
    server.serve(200, &simple_pod("urlkeep", "Always", SLEEPER));
    let mut env = Env::new(194);
    env.extra_config = format!("staticPodURL: {}\nhttpCheckFrequency: 1s\n", server.url());
    env.start_kubelet();
    let before = env.wait_running("urlkeep");
    let container = container_status(&before, "main").container_id.clone();

    env.stop_kubelet(Signal::SIGTERM);
    server.serve(500, "down");
    env.start_kubelet();
    // Several failed polls, so several housekeeping rounds (every 2 s) have passed.
    server.wait_polls(5);
    let running = env.containers_of(&uid(&before)).await;
    assert_eq!(running.len(), 1, "{}", tail(&env.kubelet_log(), 30));
    assert_eq!(
        running[0].state,
        rkubelet_cri::api::ContainerState::ContainerRunning as i32,
        "the pod was removed before its source answered:\n{}",
        tail(&env.kubelet_log(), 30)
    );
    assert!(!env.kubelet_log().contains("cleaning up runtime pod"));

    // The URL answers: the same pod (same UID) is adopted, its container untouched.
    server.serve(200, &simple_pod("urlkeep", "Always", SLEEPER));
    let after = env.wait_running("urlkeep");
    assert_eq!(uid(&after), uid(&before));
    let cs = container_status(&after, "main");
    assert_eq!(cs.container_id, container);
    assert_eq!(cs.restart_count, 0);

    // An empty 200 body is an empty list, as upstream: the pod goes, and the log says why.
    server.serve(200, "");
    wait_until(Duration::from_secs(20), "urlkeep removed", || {
        env.pod("urlkeep").is_none().then_some(())
    });
    wait_gone(&env, &uid(&before), "emptied pod").await;
    let log = env.kubelet_log();
    assert!(log.contains(&format!("zero-length data received from {}", server.url())));
    assert!(log.contains("its pods are removed"), "{}", tail(&log, 20));
}

/// With an API server, URL pods get mirror pods like file static pods (upstream: every
/// non-api source), marked `config.source: http`, and lose them with the pod.
#[tokio::test]
async fn manifest_url_pods_get_mirror_pods() {
    let cp = ControlPlane::up("urlmirror");
    let server = ManifestServer::start();
    server.serve(200, &simple_pod("urlmirror", "Always", SLEEPER));
    let mut env = Env::new(198);
    env.extra_config = format!("staticPodURL: {}\nhttpCheckFrequency: 1s\n", server.url());
    env.join(&cp, &[]);
    let name = format!("urlmirror-{}", env.node);
    let mirror = wait_until(Duration::from_secs(60), "mirror pod Running", || {
        let p = cp.get_json(&["pod", &name])?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    let ann = &mirror["metadata"]["annotations"];
    let static_pod = env.wait_running("urlmirror");
    assert_eq!(ann["kubernetes.io/config.source"], "http", "{mirror}");
    assert_eq!(ann["kubernetes.io/config.hash"], uid(&static_pod).as_str());
    assert_eq!(
        ann["kubernetes.io/config.mirror"],
        uid(&static_pod).as_str()
    );
    assert_eq!(mirror["metadata"]["ownerReferences"][0]["kind"], "Node");

    // An empty PodList removes the pod and its mirror.
    server.serve(200, &pod_list(&[], "none"));
    wait_until(Duration::from_secs(40), "mirror pod removed", || {
        cp.get_json(&["pod", &name]).is_none().then_some(())
    });
    wait_gone(&env, &uid(&static_pod), "pod of the emptied list").await;
}
