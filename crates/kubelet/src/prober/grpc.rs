//! The grpc probe (upstream `pkg/probe/grpc/grpc.go`): `grpc.health.v1.Health/Check` over
//! plaintext HTTP/2 to the pod IP, optionally naming a service.
//!
//! `tonic-health` is not in the dependency tree, so the two health messages are declared here
//! with `prost` (the wire format of `grpc/health/v1/health.proto` is two fields; tonic and prost
//! are already used by the CRI client). As upstream, every problem is a Failure result, never an
//! error, and the messages are upstream's.

use std::time::Duration;

use tokio::time::Instant;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Endpoint;

use super::probe::{go_duration, join_host_port, user_agent, Outcome};

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    pub service: String,
}

/// `grpc.health.v1.HealthCheckResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckResponse {
    #[prost(enumeration = "ServingStatus", tag = "1")]
    pub status: i32,
}

/// `grpc.health.v1.HealthCheckResponse.ServingStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum ServingStatus {
    Unknown = 0,
    Serving = 1,
    NotServing = 2,
    ServiceUnknown = 3,
}

/// The proto enum name, as Go's generated `String()` prints it (the number when unknown).
pub fn serving_status_name(status: i32) -> String {
    match ServingStatus::try_from(status) {
        Ok(ServingStatus::Unknown) => "UNKNOWN".into(),
        Ok(ServingStatus::Serving) => "SERVING".into(),
        Ok(ServingStatus::NotServing) => "NOT_SERVING".into(),
        Ok(ServingStatus::ServiceUnknown) => "SERVICE_UNKNOWN".into(),
        Err(_) => status.to_string(),
    }
}

pub const HEALTH_CHECK_PATH: &str = "/grpc.health.v1.Health/Check";

/// grpc-go's default reconnect backoff (`BaseDelay` 1 s, `Multiplier` 1.6), used while waiting for
/// the connection: upstream dials with `WithBlock`, which keeps retrying a refused connection
/// until the probe's deadline.
const CONNECT_BACKOFF: Duration = Duration::from_secs(1);
const CONNECT_BACKOFF_MAX: Duration = Duration::from_secs(120);

/// Upstream `grpcProber.Probe`.
pub async fn grpc_probe(
    host: &str,
    port: u16,
    service: &str,
    timeout: Duration,
) -> (Outcome, String) {
    let deadline = Instant::now() + timeout;
    let addr = join_host_port(host, port);
    let endpoint = match Endpoint::from_shared(format!("http://{addr}"))
        .and_then(|e| e.user_agent(user_agent()))
    {
        Ok(e) => e,
        Err(e) => {
            return (
                Outcome::Failure,
                format!("error: failed to connect service at {addr:?}: {e}"),
            )
        }
    };

    let channel = {
        let mut backoff = CONNECT_BACKOFF;
        loop {
            match tokio::time::timeout_at(deadline, endpoint.connect()).await {
                Ok(Ok(c)) => break c,
                Ok(Err(_)) if Instant::now() + backoff < deadline => {
                    tokio::time::sleep(backoff).await;
                    backoff = backoff.mul_f64(1.6).min(CONNECT_BACKOFF_MAX);
                }
                // Refused until the deadline, or the deadline hit while connecting.
                _ => {
                    tokio::time::sleep_until(deadline).await;
                    return (
                        Outcome::Failure,
                        format!(
                            "timeout: failed to connect service {addr:?} within {}: context deadline exceeded",
                            go_duration(timeout)
                        ),
                    );
                }
            }
        }
    };

    let mut client = tonic::client::Grpc::new(channel);
    let call = async {
        client
            .ready()
            .await
            .map_err(|e| tonic::Status::unavailable(format!("connection not ready: {e}")))?;
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: service.to_string(),
        });
        request.set_timeout(deadline.saturating_duration_since(Instant::now()));
        client
            .unary::<_, HealthCheckResponse, _>(
                request,
                PathAndQuery::from_static(HEALTH_CHECK_PATH),
                tonic_prost::ProstCodec::default(),
            )
            .await
    };
    let response = match tokio::time::timeout_at(deadline, call).await {
        Err(_) => return deadline_exceeded(timeout),
        Ok(Err(status)) => return classify_rpc_error(&status, timeout),
        Ok(Ok(r)) => r.into_inner(),
    };
    classify_health(response.status)
}

fn deadline_exceeded(timeout: Duration) -> (Outcome, String) {
    (
        Outcome::Failure,
        format!(
            "timeout: health rpc did not complete within {}",
            go_duration(timeout)
        ),
    )
}

/// Upstream's handling of a failed Check call.
pub fn classify_rpc_error(status: &tonic::Status, timeout: Duration) -> (Outcome, String) {
    match status.code() {
        tonic::Code::Unimplemented => (
            Outcome::Failure,
            format!(
                "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                status.message()
            ),
        ),
        tonic::Code::DeadlineExceeded => deadline_exceeded(timeout),
        code => (
            Outcome::Failure,
            format!(
                "error: health rpc probe failed: rpc error: code = {code:?} desc = {}",
                status.message()
            ),
        ),
    }
}

/// SERVING is Success ("service healthy"); any other status a Failure naming it.
pub fn classify_health(status: i32) -> (Outcome, String) {
    if status == ServingStatus::Serving as i32 {
        (Outcome::Success, "service healthy".into())
    } else {
        (
            Outcome::Failure,
            format!(
                "service unhealthy (responded with {:?})",
                serving_status_name(status)
            ),
        )
    }
}

#[cfg(test)]
#[path = "grpc_tests.rs"]
mod tests;
