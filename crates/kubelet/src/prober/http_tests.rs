use super::*;

use std::net::SocketAddr;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{ContainerPort, HTTPHeader};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn url(path: &str) -> ProbeUrl {
    ProbeUrl {
        scheme: "http".into(),
        host: "10.0.0.1".into(),
        port: Some(8080),
        path: path.into(),
    }
}

#[test]
fn redirect_locations_resolve_like_go() {
    let base = url("/a/b/c?x=1");
    let cases: &[(&str, &str, bool)] = &[
        ("/ok", "http://10.0.0.1:8080/ok", false),
        ("d", "http://10.0.0.1:8080/a/b/d", false),
        ("../d?y=2", "http://10.0.0.1:8080/a/d?y=2", false),
        ("./", "http://10.0.0.1:8080/a/b/", false),
        ("?y=2", "http://10.0.0.1:8080/a/b/c?y=2", false),
        ("", "http://10.0.0.1:8080/a/b/c?x=1", false),
        ("#frag", "http://10.0.0.1:8080/a/b/c?x=1", false),
        ("/../../x", "http://10.0.0.1:8080/x", false),
        ("/a b", "http://10.0.0.1:8080/a%20b", false),
        ("http://10.0.0.1:9090/z", "http://10.0.0.1:9090/z", true),
        ("HTTPS://10.0.0.1/z", "https://10.0.0.1/z", true),
        ("http://other.example/", "http://other.example/", true),
        ("http://[fd00::1]:81/v6", "http://[fd00::1]:81/v6", true),
        ("//10.0.0.1:7070/n", "http://10.0.0.1:7070/n", false),
    ];
    for (location, want, absolute) in cases {
        let (got, abs) = base.resolve(location).unwrap();
        assert_eq!(got.to_string(), *want, "{location}");
        assert_eq!(abs, *absolute, "{location}");
    }
    assert_eq!(
        base.resolve("http://[fd00::1]:81/v6").unwrap().0.host,
        "fd00::1"
    );
    assert!(base.resolve("http://").is_err());
}

#[test]
fn redirect_policy() {
    let first = url("/start");
    let at = |status, location: Option<&str>, n| {
        redirect_decision(status, location, &first, "10.0.0.1", n)
    };
    for status in [301, 302, 303, 307, 308] {
        assert!(
            matches!(
                at(status, Some("/next"), 1),
                Redirect::Follow { relative: true, .. }
            ),
            "{status}"
        );
    }
    // Not followed: other 3xx, and redirects without a Location.
    for status in [200, 300, 304, 305, 404] {
        assert_eq!(at(status, Some("/next"), 1), Redirect::Done, "{status}");
    }
    assert_eq!(at(302, None, 1), Redirect::Done);
    assert_eq!(at(302, Some(""), 1), Redirect::Done);
    // Same host name, other port or scheme: followed.
    assert!(matches!(
        at(302, Some("https://10.0.0.1:8443/x"), 1),
        Redirect::Follow {
            relative: false,
            ..
        }
    ));
    // Another host name: the 3xx is the answer (a Warning).
    assert_eq!(
        at(302, Some("http://10.0.0.2:8080/x"), 1),
        Redirect::UseLastResponse
    );
    assert_eq!(
        at(302, Some("http://localhost:8080/x"), 1),
        Redirect::UseLastResponse
    );
    // The tenth redirect response stops the chain.
    assert!(matches!(at(302, Some("/x"), 9), Redirect::Follow { .. }));
    assert_eq!(at(302, Some("/x"), 10), Redirect::TooMany("/x".into()));
    assert!(matches!(
        at(302, Some("http://"), 1),
        Redirect::BadLocation { .. }
    ));
}

#[test]
fn status_classification() {
    assert_eq!(classify_status(200, "ok"), (Outcome::Success, "ok".into()));
    assert_eq!(classify_status(204, ""), (Outcome::Success, "".into()));
    assert_eq!(classify_status(399, "b").0, Outcome::Warning);
    assert_eq!(
        classify_status(302, "moved"),
        (
            Outcome::Warning,
            "Probe terminated redirects, Response body: moved".into()
        )
    );
    for code in [100, 199, 400, 404, 500, 503] {
        assert_eq!(
            classify_status(code, "secret body"),
            (
                Outcome::Failure,
                format!("HTTP probe failed with statuscode: {code}")
            )
        );
    }
}

fn pairs(h: &[(&str, &str)]) -> Vec<(String, String)> {
    h.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

#[test]
fn probe_request_headers() {
    let ua = "kube-probe/1.33";
    assert_eq!(
        request_headers(&[], ua),
        (None, pairs(&[("User-Agent", ua), ("Accept", "*/*")]))
    );
    let (host, headers) = request_headers(
        &pairs(&[
            ("X-Custom", "1"),
            ("host", "example.com"),
            ("user-agent", "mine"),
            ("User-Agent", "ignored"),
            ("ACCEPT", "application/json"),
            ("X-Custom", "2"),
        ]),
        ua,
    );
    assert_eq!(host.as_deref(), Some("example.com"));
    assert_eq!(
        headers,
        pairs(&[
            ("User-Agent", "mine"),
            ("X-Custom", "1"),
            ("ACCEPT", "application/json"),
            ("X-Custom", "2"),
        ])
    );
    // Empty User-Agent: none sent; empty Accept: removed; empty Host: the URL's.
    let (host, headers) = request_headers(
        &pairs(&[("User-Agent", ""), ("Accept", ""), ("Host", "")]),
        ua,
    );
    assert_eq!(host, None);
    assert!(headers.is_empty(), "{headers:?}");
}

#[test]
fn target_from_action() {
    let container = Container {
        name: "c".into(),
        ports: Some(vec![ContainerPort {
            name: Some("web".into()),
            container_port: 8080,
            ..Default::default()
        }]),
        ..Default::default()
    };
    let action = |scheme: Option<&str>, host: Option<&str>, path: Option<&str>| HTTPGetAction {
        scheme: scheme.map(Into::into),
        host: host.map(Into::into),
        path: path.map(Into::into),
        port: IntOrString::String("web".into()),
        http_headers: Some(vec![HTTPHeader {
            name: "X-A".into(),
            value: "b".into(),
        }]),
        ..Default::default()
    };
    let t = HttpTarget::from_action(
        &action(None, None, Some("/healthz")),
        &container,
        Some("10.1.2.3"),
    )
    .unwrap();
    assert_eq!(t.url.to_string(), "http://10.1.2.3:8080/healthz");
    assert!(t.headers.contains(&("X-A".into(), "b".into())));
    let t = HttpTarget::from_action(
        &action(Some("HTTPS"), Some("fd00::5"), Some("ready?full=1#x")),
        &container,
        None,
    )
    .unwrap();
    assert_eq!(t.url.to_string(), "https://[fd00::5]:8080/ready?full=1");
    let t =
        HttpTarget::from_action(&action(None, None, None), &container, Some("10.1.2.3")).unwrap();
    assert_eq!(t.url.path, "/");
    assert_eq!(
        HttpTarget::from_action(&action(None, None, None), &container, None),
        Err(ProbeError::NoPodIp)
    );
    let mut bad = action(None, None, None);
    bad.port = IntOrString::String("nope".into());
    assert_eq!(
        HttpTarget::from_action(&bad, &container, Some("10.1.2.3")),
        Err(ProbeError::PortNotFound("nope".into()))
    );
}

// ---------------------------------------------------------------------------------------------
// Against a real loopback server.
// ---------------------------------------------------------------------------------------------

type Responder = Box<dyn Fn(&str) -> Vec<u8> + Send + Sync>;

/// A minimal HTTP/1.1 responder: reads each request head, records it, answers with whatever
/// `respond(request_line)` returns, and closes the connection.
async fn serve(respond: Responder) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let respond = Arc::new(respond);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let log = log.clone();
            let respond = respond.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).into_owned();
                log.lock().unwrap().push(head.clone());
                let line = head.lines().next().unwrap_or_default().to_string();
                let _ = s.write_all(&respond(&line)).await;
                let _ = s.shutdown().await;
            });
        }
    });
    (addr, seen)
}

fn response(status: &str, extra: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn target(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> HttpTarget {
    let (host_override, headers) = request_headers(&pairs(headers), "kube-probe/1.33");
    HttpTarget {
        url: ProbeUrl {
            scheme: "http".into(),
            host: addr.ip().to_string(),
            port: Some(addr.port()),
            path: path.into(),
        },
        host_override,
        headers,
    }
}

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn status_codes_and_request_shape() {
    let (addr, seen) = serve(Box::new(|line| {
        if line.starts_with("GET /ok ") {
            response("200 OK", "", "all good")
        } else {
            response("500 Internal Server Error", "", "boom")
        }
    }))
    .await;
    let prober = HttpProber::new();
    let got = prober
        .probe(&target(addr, "/ok", &[("X-Probe", "yes")]), SECOND)
        .await;
    assert_eq!(got, Ok((Outcome::Success, "all good".into())));
    let head = seen.lock().unwrap()[0].clone();
    assert!(head.starts_with("GET /ok HTTP/1.1\r\n"), "{head}");
    for line in [
        format!("Host: {addr}"),
        "User-Agent: kube-probe/1.33".into(),
        "Accept: */*".into(),
        "X-Probe: yes".into(),
        "Connection: close".into(),
    ] {
        assert!(
            head.contains(&format!("{line}\r\n")),
            "{line} missing in {head}"
        );
    }
    assert!(
        !head.to_ascii_lowercase().contains("accept-encoding"),
        "{head}"
    );

    let got = prober.probe(&target(addr, "/fail", &[]), SECOND).await;
    assert_eq!(
        got,
        Ok((
            Outcome::Failure,
            "HTTP probe failed with statuscode: 500".into()
        ))
    );

    // Host override.
    prober
        .probe(&target(addr, "/ok", &[("Host", "svc.local")]), SECOND)
        .await
        .unwrap();
    let head = seen.lock().unwrap()[2].clone();
    assert!(head.contains("Host: svc.local\r\n"), "{head}");
}

#[tokio::test]
async fn redirects_same_host_followed_other_host_warned() {
    let (addr, seen) = serve(Box::new(|line| {
        let path = line.split(' ').nth(1).unwrap_or_default().to_string();
        match path.as_str() {
            "/start" => response("301 Moved Permanently", "Location: /ok\r\n", ""),
            "/ok" => response("200 OK", "", "landed"),
            "/away" => {
                // "localhost" is another host name than 127.0.0.1, even if it is the same host.
                response("302 Found", "Location: http://localhost:1/x\r\n", "bye")
            }
            _ => response("307 Temporary Redirect", "Location: /loop\r\n", ""),
        }
    }))
    .await;
    let prober = HttpProber::new();

    let got = prober.probe(&target(addr, "/start", &[]), SECOND).await;
    assert_eq!(got, Ok((Outcome::Success, "landed".into())));
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2);
        assert!(seen[1].starts_with("GET /ok "), "{}", seen[1]);
        assert!(
            seen[1].contains(&format!("Referer: http://{addr}/start\r\n")),
            "{}",
            seen[1]
        );
        assert!(seen[1].contains("User-Agent: kube-probe/1.33\r\n"));
    }

    let got = prober.probe(&target(addr, "/away", &[]), SECOND).await;
    assert_eq!(
        got,
        Ok((
            Outcome::Warning,
            "Probe terminated redirects, Response body: bye".into()
        ))
    );

    seen.lock().unwrap().clear();
    let got = prober.probe(&target(addr, "/loop", &[]), SECOND).await;
    assert_eq!(
        got,
        Ok((
            Outcome::Failure,
            "Get \"/loop\": stopped after 10 redirects".into()
        ))
    );
    assert_eq!(seen.lock().unwrap().len(), 10);
}

#[tokio::test]
async fn body_is_cut_at_10_kib_and_broken_bodies_error() {
    let big = "y".repeat(MAX_OUTPUT_LENGTH + 5000);
    let (addr, _) = serve(Box::new(move |line| {
        if line.contains("/big") {
            response("200 OK", "", &big)
        } else {
            // Promises 100 bytes, sends 5, closes.
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort".to_vec()
        }
    }))
    .await;
    let prober = HttpProber::new();
    let (outcome, body) = prober
        .probe(&target(addr, "/big", &[]), SECOND)
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Success);
    assert_eq!(body.len(), MAX_OUTPUT_LENGTH);

    let got = prober.probe(&target(addr, "/truncated", &[]), SECOND).await;
    assert!(matches!(got, Err(ProbeError::Body(_))), "{got:?}");
}

#[tokio::test]
async fn connection_errors_are_failures() {
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let prober = HttpProber::new();
    let got = prober.probe(&target(closed, "/", &[]), SECOND).await;
    assert_eq!(
        got,
        Ok((
            Outcome::Failure,
            format!("Get \"http://{closed}/\": dial tcp {closed}: connect: connection refused")
        ))
    );

    let mut t = target(closed, "/", &[]);
    t.url.scheme = "ftp".into();
    let got = prober.probe(&t, SECOND).await;
    assert_eq!(
        got,
        Ok((
            Outcome::Failure,
            format!("Get \"ftp://{closed}/\": unsupported protocol scheme \"ftp\"")
        ))
    );

    let t = target(closed, "/", &[("Bad Name", "x")]);
    let (outcome, msg) = prober.probe(&t, SECOND).await.unwrap();
    assert_eq!(outcome, Outcome::Failure);
    assert!(
        msg.ends_with("net/http: invalid header field name \"Bad Name\""),
        "{msg}"
    );

    // HTTPS against a plain-text server (it answers before reading): the handshake fails.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let _ = s.write_all(&response("400 Bad Request", "", "plain")).await;
            let _ = s.shutdown().await;
        }
    });
    let mut t = target(addr, "/", &[]);
    t.url.scheme = "https".into();
    let (outcome, msg) = prober.probe(&t, SECOND).await.unwrap();
    assert_eq!(outcome, Outcome::Failure);
    assert!(
        msg.starts_with(&format!("Get \"https://{addr}/\": tls: ")),
        "{msg}"
    );
}

#[tokio::test]
async fn a_silent_server_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s); // accept, never answer
        }
    });
    let started = std::time::Instant::now();
    let got = HttpProber::new()
        .probe(&target(addr, "/", &[]), SECOND)
        .await;
    assert_eq!(
        got,
        Ok((
            Outcome::Failure,
            format!(
                "Get \"http://{addr}/\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            )
        ))
    );
    assert!(started.elapsed() >= SECOND);
    hold.abort();
}
