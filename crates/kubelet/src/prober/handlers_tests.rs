use super::*;

use k8s_openapi::api::core::v1::{ContainerPort, ExecAction, GRPCAction, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::net::TcpListener;

use crate::prober::probe::go_io_error;

fn container_with_ports(ports: &[(&str, i32)]) -> Container {
    Container {
        name: "main".into(),
        ports: Some(
            ports
                .iter()
                .map(|(name, port)| ContainerPort {
                    name: (!name.is_empty()).then(|| name.to_string()),
                    container_port: *port,
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    }
}

#[test]
fn ports_by_number_and_by_name() {
    let c = container_with_ports(&[("http", 8080), ("", 9000), ("bad", 0)]);
    let cases: Vec<(IntOrString, Result<u16, ProbeError>)> = vec![
        (IntOrString::Int(80), Ok(80)),
        (IntOrString::Int(65535), Ok(65535)),
        (IntOrString::Int(0), Err(ProbeError::InvalidPort(0))),
        (IntOrString::Int(-1), Err(ProbeError::InvalidPort(-1))),
        (IntOrString::Int(65536), Err(ProbeError::InvalidPort(65536))),
        (IntOrString::String("http".into()), Ok(8080)),
        (
            IntOrString::String("grpc".into()),
            Err(ProbeError::PortNotFound("grpc".into())),
        ),
        // Upstream no longer falls back to parsing the name as a number.
        (
            IntOrString::String("8080".into()),
            Err(ProbeError::PortNotFound("8080".into())),
        ),
        (
            IntOrString::String("bad".into()),
            Err(ProbeError::InvalidPort(0)),
        ),
    ];
    for (port, want) in cases {
        assert_eq!(resolve_container_port(&port, &c), want, "{port:?}");
    }
    assert_eq!(
        ProbeError::PortNotFound("grpc".into()).to_string(),
        "port \"grpc\" not found"
    );
    assert_eq!(
        ProbeError::InvalidPort(0).to_string(),
        "invalid port number: 0"
    );
    let no_ports = Container::default();
    assert_eq!(
        resolve_container_port(&IntOrString::String("http".into()), &no_ports),
        Err(ProbeError::PortNotFound("http".into()))
    );
}

#[test]
fn command_expansion_is_upstreams() {
    let env = vec![
        EnvVar {
            name: "A".into(),
            value: Some("alpha".into()),
            ..Default::default()
        },
        EnvVar {
            name: "FROM".into(),
            value: None, // valueFrom: no static value
            ..Default::default()
        },
        EnvVar {
            name: "A".into(),
            value: Some("again".into()),
            ..Default::default()
        },
    ];
    let cases = [
        ("plain", "plain"),
        ("$(A)", "again"),
        ("x$(A)y", "xagainy"),
        ("$(FROM)", ""),
        ("$(MISSING)", "$(MISSING)"),
        ("$$(A)", "$(A)"),
        ("$$", "$"),
        ("$", "$"),
        ("a$", "a$"),
        ("$x", "$x"),
        ("$(A", "$(A"),
        ("$(unterminated $(A)", "$(unterminated $(A)"),
        ("$(A)$(A)", "againagain"),
        ("é$(A)é", "éagainé"),
        ("$é", "$é"),
    ];
    for (input, want) in cases {
        assert_eq!(
            expand_command(&[input.to_string()], &env),
            vec![want.to_string()],
            "{input}"
        );
    }
}

#[test]
fn exec_results_are_classified_like_upstream() {
    let cmd = vec!["sh".to_string(), "-c".into(), "exit 1".into()];
    let exited = |code, out: &str, err: &str| ExecEnd::Exited {
        exit_code: code,
        stdout: out.as_bytes().to_vec(),
        stderr: err.as_bytes().to_vec(),
    };
    assert_eq!(
        classify_exec(exited(0, "ok\n", ""), &cmd),
        Ok((Outcome::Success, "ok\n".into()))
    );
    assert_eq!(
        classify_exec(exited(1, "out ", "err"), &cmd),
        Ok((Outcome::Failure, "out err".into()))
    );
    assert_eq!(
        classify_exec(ExecEnd::TimedOut, &cmd),
        Ok((
            Outcome::Failure,
            "command \"sh -c exit 1\" timed out".into()
        ))
    );
    let err = classify_exec(
        ExecEnd::Failed("CRI exec_sync failed: NotFound".into()),
        &cmd,
    );
    assert_eq!(
        err,
        Err(ProbeError::Exec("CRI exec_sync failed: NotFound".into()))
    );
    // Output is cut at 10 KiB.
    let big = "x".repeat(MAX_OUTPUT_LENGTH);
    let (_, out) = classify_exec(exited(2, &big, "tail"), &cmd).unwrap();
    assert_eq!(out.len(), MAX_OUTPUT_LENGTH);
    assert!(!out.contains("tail"));
}

#[test]
fn container_ids() {
    assert_eq!(bare_container_id("containerd://abc"), "abc");
    assert_eq!(bare_container_id("abc"), "abc");
}

#[test]
fn go_formatting() {
    assert_eq!(go_duration(Duration::from_secs(1)), "1s");
    assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
    assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
    assert_eq!(go_duration(Duration::from_millis(500)), "500ms");
    assert_eq!(go_duration(Duration::ZERO), "0s");
    assert_eq!(join_host_port("10.0.0.1", 80), "10.0.0.1:80");
    assert_eq!(join_host_port("fd00::1", 80), "[fd00::1]:80");
    let refused = std::io::Error::from_raw_os_error(nix::libc::ECONNREFUSED);
    assert_eq!(go_io_error(&refused), "connection refused");
    let ua = user_agent();
    let v = crate::types::KUBELET_VERSION.trim_start_matches('v');
    let major_minor: Vec<&str> = v.split('.').take(2).collect();
    assert_eq!(ua, format!("kube-probe/{}", major_minor.join(".")));
}

#[test]
fn errors_carry_upstreams_result() {
    assert_eq!(ProbeError::Body("x".into()).outcome(), Outcome::Failure);
    assert_eq!(ProbeError::NoPodIp.outcome(), Outcome::Unknown);
    assert_eq!(Outcome::Unknown.to_string(), "unknown");
}

#[tokio::test]
async fn tcp_open_and_closed_ports() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let open = listener.local_addr().unwrap().port();
    assert_eq!(
        tcp_probe("127.0.0.1", open, Duration::from_secs(1)).await,
        (Outcome::Success, String::new())
    );

    // A port nobody listens on: bind, note the port, close.
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    };
    let (outcome, output) = tcp_probe("127.0.0.1", closed, Duration::from_secs(1)).await;
    assert_eq!(outcome, Outcome::Failure);
    assert_eq!(
        output,
        format!("dial tcp 127.0.0.1:{closed}: connect: connection refused")
    );

    // By name.
    assert_eq!(
        tcp_probe("localhost", open, Duration::from_secs(1)).await.0,
        Outcome::Success
    );
    drop(listener);
}

fn request<'a>(
    probe: &'a Probe,
    pod: &'a Pod,
    c: &'a Container,
    ip: Option<&'a str>,
) -> ProbeRequest<'a> {
    ProbeRequest {
        kind: ProbeKind::Readiness,
        probe,
        pod,
        container: c,
        container_id: "containerd://abc",
        pod_ip: ip,
        timeout: Duration::from_secs(1),
    }
}

/// The dispatch of the real handlers, with a CRI client on a socket that does not exist (it
/// connects lazily, so only exec touches it).
#[tokio::test]
async fn real_handlers_dispatch() {
    let handlers = Handlers::new(
        CriClient::new("unix:///nonexistent/cri.sock", Duration::from_secs(2)).unwrap(),
    );
    let mut pod = Pod::default();
    pod.metadata.name = Some("web".into());
    pod.metadata.namespace = Some("ns".into());
    pod.metadata.uid = Some("u1".into());
    let c = container_with_ports(&[("tcp", 1)]);

    let none = Probe::default();
    assert_eq!(
        handlers
            .probe(&request(&none, &pod, &c, Some("127.0.0.1")))
            .await,
        Err(ProbeError::MissingHandler {
            pod: "web_ns(u1)".into(),
            container: "main".into()
        })
    );

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let tcp = Probe {
        tcp_socket: Some(TCPSocketAction {
            host: None,
            port: IntOrString::Int(i32::from(port)),
        }),
        ..Default::default()
    };
    assert_eq!(
        handlers
            .probe(&request(&tcp, &pod, &c, Some("127.0.0.1")))
            .await,
        Ok((Outcome::Success, String::new()))
    );
    assert_eq!(
        handlers.probe(&request(&tcp, &pod, &c, None)).await,
        Err(ProbeError::NoPodIp)
    );
    let named = Probe {
        tcp_socket: Some(TCPSocketAction {
            host: Some("127.0.0.1".into()),
            port: IntOrString::String("nope".into()),
        }),
        ..Default::default()
    };
    assert_eq!(
        handlers.probe(&request(&named, &pod, &c, None)).await,
        Err(ProbeError::PortNotFound("nope".into()))
    );

    let grpc = Probe {
        grpc: Some(GRPCAction {
            port: 0,
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        handlers
            .probe(&request(&grpc, &pod, &c, Some("127.0.0.1")))
            .await,
        Err(ProbeError::InvalidPort(0))
    );

    // Exec goes to CRI, which is not there: an error (retried and thrown away by the worker).
    let exec = Probe {
        exec: Some(ExecAction {
            command: Some(vec!["true".into()]),
        }),
        ..Default::default()
    };
    let got = handlers.probe(&request(&exec, &pod, &c, None)).await;
    assert!(matches!(got, Err(ProbeError::Exec(_))), "{got:?}");
}
