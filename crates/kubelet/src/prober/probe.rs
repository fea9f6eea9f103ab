//! What the probe handlers share (upstream `pkg/probe`: `probe.Result`, `util.go`, the dialer, and
//! `userAgent`): the outcome of an attempt, its error, port resolution, dialing with Go's error
//! texts, and Go's formatting of addresses and durations.
//!
//! Below `handlers`, `http`, `grpc` and `url`, so that each of them uses these without the
//! dispatcher and the protocol handlers depending on each other in a circle.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::net::TcpStream;

/// Upstream `maxReadLength` / `maxRespBodyLength`: exec output and HTTP bodies are cut at 10 KiB.
pub const MAX_OUTPUT_LENGTH: usize = 10 * 1024;

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

pub(crate) fn valid_port(n: i64) -> Result<u16, ProbeError> {
    match u16::try_from(n) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(ProbeError::InvalidPort(n)),
    }
}

// ---------------------------------------------------------------------------------------------
// Dialing (upstream `pkg/probe/dialer_others.go`).
// ---------------------------------------------------------------------------------------------

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
    let v = crate::types::KUBELET_VERSION.trim_start_matches('v');
    let mut parts = v.split('.');
    let major = parts.next().unwrap_or("0");
    let minor = parts.next().unwrap_or("0");
    format!("kube-probe/{major}.{minor}")
}
