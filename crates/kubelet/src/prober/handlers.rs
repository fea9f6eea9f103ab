//! One probe attempt: exec, httpGet, tcpSocket and grpc (upstream `prober.go` `runProbe` and
//! `pkg/probe/{exec,tcp,util.go}`; HTTP is in [`super::http`], gRPC in [`super::grpc`]).
//!
//! An attempt yields `Ok((Outcome, output))` or a [`ProbeError`], exactly where upstream returns a
//! `probe.Result`, an output string and an `error`: connection failures, timeouts and bad status
//! codes are *results* (Failure with the error text as output, "to catch timeouts"), while a
//! request that cannot even be built (unknown named port, no pod IP, missing handler) or a runtime
//! error of ExecSync is an *error*, which the worker retries and then throws away.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, Probe};
use rkubelet_cri::{api, CriClient, CriError};

use super::probe::valid_port;
// The shared pieces live in `probe`; the worker, the SyncLoop's hooks and the tests name them here.
pub(crate) use super::probe::dial;
pub use super::probe::{
    go_duration, join_host_port, resolve_container_port, user_agent, Outcome, ProbeError,
    MAX_OUTPUT_LENGTH,
};
use super::results::ProbeKind;
use crate::podutil;

/// Extra time the kubelet gives ExecSync beyond the probe's `timeoutSeconds` (which the runtime
/// enforces itself, killing the command). Upstream allows the whole runtime request timeout
/// (2 min) on top; we bound a runtime that does not honour the timeout more tightly so that a
/// hung exec cannot hold a worker far beyond its period.
pub const EXEC_DEADLINE_MARGIN: Duration = Duration::from_secs(5);

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
            pod: format!("{}({})", podutil::full_name(req.pod), podutil::uid(req.pod)),
            container: req.container.name.clone(),
        })
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

#[cfg(test)]
#[path = "handlers_tests.rs"]
mod tests;
