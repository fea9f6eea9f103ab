//! One probe attempt: exec, httpGet, tcpSocket and grpc (upstream `prober.go` `runProbe` and
//! `pkg/probe/{exec,tcp,util.go}`; HTTP is in [`super::http`], gRPC in [`super::grpc`]).
//!
//! An attempt yields `Ok((Outcome, output))` or a [`ProbeError`], exactly where upstream returns a
//! `probe.Result`, an output string and an `error`: connection failures, timeouts and bad status
//! codes are *results* (Failure with the error text as output, "to catch timeouts"), while a
//! request that cannot even be built (unknown named port, no pod IP, missing handler) or a runtime
//! error of ExecSync is an *error*, which the worker retries and then throws away.

use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rkubelet_cri::{api, CriClient, CriError};
use tokio::net::TcpStream;

use super::results::ProbeKind;
use crate::podutil;

/// Upstream `maxReadLength` / `maxRespBodyLength`: exec output and HTTP bodies are cut at 10 KiB.
pub const MAX_OUTPUT_LENGTH: usize = 10 * 1024;

/// Extra time the kubelet gives ExecSync beyond the probe's `timeoutSeconds` (which the runtime
/// enforces itself, killing the command). Upstream allows the whole runtime request timeout
/// (2 min) on top; we bound a runtime that does not honour the timeout more tightly so that a
/// hung exec cannot hold a worker far beyond its period.
pub const EXEC_DEADLINE_MARGIN: Duration = Duration::from_secs(5);

/// The outcome of one attempt (upstream `probe.Result`). `Warning` is a success that deserves a
/// `ProbeWarning` event (an HTTP redirect to another host that was not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Warning,
    Failure,
    Unknown,
}

impl Outcome {
    /// Upstream `probe.Result` strings, used in the "errored and resulted in ... state" message.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Warning => "warning",
            Outcome::Failure => "failure",
            Outcome::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A probe attempt that could not produce a result (upstream: `runProbe` returning an `error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// Upstream `findPortByName`.
    #[error("port {0:?} not found")]
    PortNotFound(String),
    /// Upstream `ResolveContainerPort`.
    #[error("invalid port number: {0}")]
    InvalidPort(i64),
    /// The probe targets the pod IP and the SyncLoop has not told us one. (Upstream would dial an
    /// empty host, i.e. the node itself; we refuse instead.)
    #[error("pod has no IP address yet")]
    NoPodIp,
    /// None of exec, httpGet, tcpSocket, grpc is set.
    #[error("missing probe handler for {pod}:{container}")]
    MissingHandler { pod: String, container: String },
    /// ExecSync failed for another reason than the command's exit or its timeout.
    #[error("{0}")]
    Exec(String),
    /// Reading the HTTP response body failed (upstream returns Failure with this error).
    #[error("{0}")]
    Body(String),
}

impl ProbeError {
    /// The `probe.Result` upstream returns alongside this error.
    pub fn outcome(&self) -> Outcome {
        match self {
            ProbeError::Body(_) => Outcome::Failure,
            _ => Outcome::Unknown,
        }
    }
}

/// What one attempt needs to know. Borrowed from the worker; cheap to build per attempt.
#[derive(Debug, Clone, Copy)]
pub struct ProbeRequest<'a> {
    pub kind: ProbeKind,
    pub probe: &'a Probe,
    pub pod: &'a Pod,
    pub container: &'a Container,
    /// The container ID as the SyncLoop gave it (bare or `containerd://<id>`).
    pub container_id: &'a str,
    pub pod_ip: Option<&'a str>,
    /// `timeoutSeconds`, defaulted.
    pub timeout: Duration,
}

/// Runs one probe attempt (upstream `prober.runProbe`). The worker is generic over this seam so
/// that its state machine is tested without a runtime or a network.
pub trait Prober: Clone + Send + Sync + 'static {
    fn probe(
        &self,
        req: &ProbeRequest<'_>,
    ) -> impl Future<Output = Result<(Outcome, String), ProbeError>> + Send;
}

/// The real handlers: exec through CRI, HTTP, TCP and gRPC over the pod network.
#[derive(Debug, Clone)]
pub struct Handlers {
    cri: CriClient,
    http: super::http::HttpProber,
}

impl Handlers {
    pub fn new(cri: CriClient) -> Self {
        Handlers {
            cri,
            http: super::http::HttpProber::new(),
        }
    }
}

impl Prober for Handlers {
    async fn probe(&self, req: &ProbeRequest<'_>) -> Result<(Outcome, String), ProbeError> {
        let p = req.probe;
        if let Some(exec) = &p.exec {
            let command = expand_command(
                exec.command.as_deref().unwrap_or_default(),
                req.container.env.as_deref().unwrap_or_default(),
            );
            return exec_probe(&self.cri, req.container_id, command, req.timeout).await;
        }
        if let Some(action) = &p.http_get {
            let target = super::http::HttpTarget::from_action(action, req.container, req.pod_ip)?;
            return self.http.probe(&target, req.timeout).await;
        }
        if let Some(action) = &p.tcp_socket {
            let port = resolve_container_port(&action.port, req.container)?;
            let host = match action.host.as_deref().filter(|h| !h.is_empty()) {
                Some(h) => h,
                None => req.pod_ip.ok_or(ProbeError::NoPodIp)?,
            };
            return Ok(tcp_probe(host, port, req.timeout).await);
        }
        if let Some(action) = &p.grpc {
            let port = valid_port(i64::from(action.port))?;
            let host = req.pod_ip.ok_or(ProbeError::NoPodIp)?;
            let service = action.service.as_deref().unwrap_or_default();
            return Ok(super::grpc::grpc_probe(host, port, service, req.timeout).await);
        }
        Err(ProbeError::MissingHandler {
            pod: format!(
                "{}_{}({})",
                podutil::name(req.pod),
                podutil::namespace(req.pod),
                podutil::uid(req.pod)
            ),
            container: req.container.name.clone(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Ports (upstream `pkg/probe/util.go`).
// ---------------------------------------------------------------------------------------------

/// Upstream `ResolveContainerPort`: a number, or the `containerPort` of the container port with
/// that name; either must be in 1..=65535.
pub fn resolve_container_port(
    port: &IntOrString,
    container: &Container,
) -> Result<u16, ProbeError> {
    let number = match port {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(name) => container
            .ports
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| i64::from(p.container_port))
            .ok_or_else(|| ProbeError::PortNotFound(name.clone()))?,
    };
    valid_port(number)
}

fn valid_port(n: i64) -> Result<u16, ProbeError> {
    match u16::try_from(n) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(ProbeError::InvalidPort(n)),
    }
}

// ---------------------------------------------------------------------------------------------
// Exec (upstream `pkg/probe/exec/exec.go` over `RunInContainer` / remote `ExecSync`).
// ---------------------------------------------------------------------------------------------

/// The ways ExecSync can end, before upstream's classification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExecEnd {
    Exited {
        exit_code: i32,
        stdout: Vec<u8>,
        stderr: Vec<u8>,
    },
    /// The runtime reported DeadlineExceeded, or our own deadline passed.
    TimedOut,
    Failed(String),
}

/// Runs `command` in the container through CRI ExecSync with the probe timeout.
pub async fn exec_probe(
    cri: &CriClient,
    container_id: &str,
    command: Vec<String>,
    timeout: Duration,
) -> Result<(Outcome, String), ProbeError> {
    let req = api::ExecSyncRequest {
        container_id: bare_container_id(container_id).to_string(),
        cmd: command.clone(),
        timeout: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
    };
    let end = match tokio::time::timeout(timeout + EXEC_DEADLINE_MARGIN, cri.exec_sync(req)).await {
        Err(_) => ExecEnd::TimedOut,
        Ok(Err(CriError::Timeout { .. })) => ExecEnd::TimedOut,
        Ok(Err(e)) if e.code() == Some(tonic::Code::DeadlineExceeded) => ExecEnd::TimedOut,
        Ok(Err(e)) => ExecEnd::Failed(e.to_string()),
        Ok(Ok(resp)) => ExecEnd::Exited {
            exit_code: resp.exit_code,
            stdout: resp.stdout,
            stderr: resp.stderr,
        },
    };
    classify_exec(end, &command)
}

/// Upstream `execProber.Probe`: exit 0 is Success, any other exit Failure, both with the combined
/// stdout+stderr (cut at 10 KiB) as output; a timeout is a Failure whose output is the remote
/// runtime's `command "..." timed out`; anything else an error.
pub(crate) fn classify_exec(
    end: ExecEnd,
    command: &[String],
) -> Result<(Outcome, String), ProbeError> {
    match end {
        ExecEnd::Exited {
            exit_code,
            mut stdout,
            stderr,
        } => {
            stdout.extend_from_slice(&stderr);
            stdout.truncate(MAX_OUTPUT_LENGTH);
            let output = String::from_utf8_lossy(&stdout).into_owned();
            let outcome = if exit_code == 0 {
                Outcome::Success
            } else {
                Outcome::Failure
            };
            Ok((outcome, output))
        }
        ExecEnd::TimedOut => Ok((
            Outcome::Failure,
            format!("command {:?} timed out", command.join(" ")),
        )),
        ExecEnd::Failed(e) => Err(ProbeError::Exec(e)),
    }
}

/// `containerd://abc` -> `abc` (upstream `ParseContainerID(...).ID`); a bare ID is kept.
pub fn bare_container_id(id: &str) -> &str {
    id.split_once("://").map(|(_, id)| id).unwrap_or(id)
}

/// Upstream `ExpandContainerCommandOnlyStatic`: `$(VAR)` references in the probe command are
/// replaced by the container's `env` values (an env var set through `valueFrom` has no static
/// value and expands to ""); `$$` is a literal `$`; unknown references stay as written.
pub fn expand_command(command: &[String], env: &[EnvVar]) -> Vec<String> {
    let lookup = |name: &str| {
        env.iter()
            .rev() // upstream builds a map: the last definition wins
            .find(|e| e.name == name)
            .map(|e| e.value.clone().unwrap_or_default())
    };
    command.iter().map(|arg| expand(arg, &lookup)).collect()
}

/// Upstream `third_party/forked/golang/expansion.Expand`, shared with container env and args.
fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    crate::expansion::expand(input, |name| {
        lookup(name).unwrap_or_else(|| format!("$({name})"))
    })
}

// ---------------------------------------------------------------------------------------------
// TCP (upstream `pkg/probe/tcp/tcp.go`).
// ---------------------------------------------------------------------------------------------

/// Upstream `DoTCPProbe`: Success when a connection opens within `timeout`, else Failure with
/// Go's dial error text (`dial tcp 10.0.0.1:80: connect: connection refused`).
pub async fn tcp_probe(host: &str, port: u16, timeout: Duration) -> (Outcome, String) {
    match tokio::time::timeout(timeout, dial(host, port)).await {
        Err(_) => (
            Outcome::Failure,
            format!("dial tcp {}: i/o timeout", join_host_port(host, port)),
        ),
        Ok(Err(e)) => (Outcome::Failure, e),
        Ok(Ok(_stream)) => (Outcome::Success, String::new()),
    }
}

/// Opens a TCP connection to `host:port` (an IP or a name, tried address by address), with Go's
/// error texts. No deadline: callers bound it. (Upstream's probe dialer also sets `SO_LINGER`
/// to 1 s; tokio deprecates that because closing would block the runtime thread.)
pub(crate) async fn dial(host: &str, port: u16) -> Result<TcpStream, String> {
    let addrs: Vec<std::net::SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![(ip, port).into()],
        Err(_) => match tokio::net::lookup_host((host, port)).await {
            Ok(a) => a.collect(),
            Err(e) => return Err(format!("dial tcp: lookup {host}: {}", go_io_error(&e))),
        },
    };
    let mut first_err = None;
    for addr in &addrs {
        match TcpStream::connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => {
                first_err.get_or_insert(format!("dial tcp {addr}: connect: {}", go_io_error(&e)));
            }
        }
    }
    Err(first_err.unwrap_or_else(|| format!("dial tcp: lookup {host}: no such host")))
}

// ---------------------------------------------------------------------------------------------
// Formatting helpers shared by the handlers.
// ---------------------------------------------------------------------------------------------

/// Go's `net.JoinHostPort`: IPv6 literals in brackets.
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// An OS error as Go's `syscall.Errno` prints it ("connection refused"), other errors as is.
pub(crate) fn go_io_error(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => {
            let desc = nix::errno::Errno::from_raw(code).desc();
            let mut chars = desc.chars();
            match chars.next() {
                Some(c) => c.to_lowercase().chain(chars).collect(),
                None => e.to_string(),
            }
        }
        None => e.to_string(),
    }
}

/// Go's `time.Duration.String()` for the durations probes use ("1s", "1m30s", "1h0m0s", "500ms").
pub fn go_duration(d: Duration) -> String {
    if d.subsec_nanos() != 0 || d.is_zero() {
        if d < Duration::from_secs(1) {
            return if d.is_zero() {
                "0s".into()
            } else {
                format!("{}ms", d.as_millis())
            };
        }
        return format!("{}s", d.as_secs_f64());
    }
    let s = d.as_secs();
    let (h, m, s) = (s / 3600, (s % 3600) / 60, s % 60);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// `kube-probe/<major>.<minor>` (upstream `userAgent("probe")`), from the version this kubelet
/// reports.
pub fn user_agent() -> String {
    let v = crate::node::status::KUBELET_VERSION.trim_start_matches('v');
    let mut parts = v.split('.');
    let major = parts.next().unwrap_or("0");
    let minor = parts.next().unwrap_or("0");
    format!("kube-probe/{major}.{minor}")
}

#[cfg(test)]
#[path = "handlers_tests.rs"]
mod tests;
