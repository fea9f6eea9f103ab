use super::*;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use prost::Message;
use tokio::net::TcpListener;
use tonic::codegen::{http, BoxFuture, Service, StdError};

#[test]
fn wire_format_is_health_proto() {
    let req = HealthCheckRequest {
        service: "x".into(),
    };
    assert_eq!(req.encode_to_vec(), vec![0x0a, 0x01, b'x']);
    let resp = HealthCheckResponse::decode(&[0x08, 0x02][..]).unwrap();
    assert_eq!(resp.status, ServingStatus::NotServing as i32);
}

#[test]
fn classification() {
    assert_eq!(
        classify_health(1),
        (Outcome::Success, "service healthy".into())
    );
    assert_eq!(
        classify_health(2),
        (
            Outcome::Failure,
            "service unhealthy (responded with \"NOT_SERVING\")".into()
        )
    );
    assert_eq!(serving_status_name(0), "UNKNOWN");
    assert_eq!(serving_status_name(3), "SERVICE_UNKNOWN");
    assert_eq!(serving_status_name(7), "7");
    let s = Duration::from_secs(1);
    assert_eq!(
        classify_rpc_error(&tonic::Status::unimplemented("nope"), s),
        (
            Outcome::Failure,
            "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): nope"
                .into()
        )
    );
    assert_eq!(
        classify_rpc_error(&tonic::Status::deadline_exceeded(""), s),
        (
            Outcome::Failure,
            "timeout: health rpc did not complete within 1s".into()
        )
    );
    assert_eq!(
        classify_rpc_error(&tonic::Status::not_found("unknown service"), s),
        (
            Outcome::Failure,
            "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"
                .into()
        )
    );
}

/// A health service answering from a fixed table; unknown services get NotFound, as
/// grpc-go's health server does.
#[derive(Clone)]
struct Health<const NAMED_HEALTH: bool>(Arc<HashMap<String, i32>>);

impl tonic::server::NamedService for Health<true> {
    const NAME: &'static str = "grpc.health.v1.Health";
}

impl tonic::server::NamedService for Health<false> {
    const NAME: &'static str = "test.NotHealth";
}

struct Check(Arc<HashMap<String, i32>>);

impl tonic::server::UnaryService<HealthCheckRequest> for Check {
    type Response = HealthCheckResponse;
    type Future = BoxFuture<tonic::Response<HealthCheckResponse>, tonic::Status>;

    fn call(&mut self, req: tonic::Request<HealthCheckRequest>) -> Self::Future {
        let table = self.0.clone();
        Box::pin(async move {
            match table.get(&req.into_inner().service) {
                Some(status) => Ok(tonic::Response::new(HealthCheckResponse {
                    status: *status,
                })),
                None => Err(tonic::Status::not_found("unknown service")),
            }
        })
    }
}

impl<const N: bool, B> Service<http::Request<B>> for Health<N>
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let table = self.0.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok(grpc.unary(Check(table), req).await)
        })
    }
}

async fn serve<S>(svc: S) -> SocketAddr
where
    S: Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = futures::stream::unfold(listener, |l| async move {
        let conn = l.accept().await.map(|(s, _)| s);
        Some((conn, l))
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(incoming),
    );
    addr
}

fn table() -> Arc<HashMap<String, i32>> {
    Arc::new(HashMap::from([
        (String::new(), ServingStatus::Serving as i32),
        ("db".to_string(), ServingStatus::NotServing as i32),
    ]))
}

#[tokio::test]
async fn health_check_against_a_real_server() {
    let addr = serve(Health::<true>(table())).await;
    let (ip, port) = (addr.ip().to_string(), addr.port());
    let s = Duration::from_secs(2);
    assert_eq!(
        grpc_probe(&ip, port, "", s).await,
        (Outcome::Success, "service healthy".into())
    );
    assert_eq!(
        grpc_probe(&ip, port, "db", s).await,
        (
            Outcome::Failure,
            "service unhealthy (responded with \"NOT_SERVING\")".into()
        )
    );
    assert_eq!(
        grpc_probe(&ip, port, "other", s).await,
        (
            Outcome::Failure,
            "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"
                .into()
        )
    );
}

#[tokio::test]
async fn server_without_health_service_is_unimplemented() {
    let addr = serve(Health::<false>(table())).await;
    let (outcome, msg) = grpc_probe(
        &addr.ip().to_string(),
        addr.port(),
        "",
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(outcome, Outcome::Failure);
    assert!(
        msg.starts_with(
            "error: this server does not implement the grpc health protocol (grpc.health.v1.Health)"
        ),
        "{msg}"
    );
}

#[tokio::test]
async fn refused_connection_waits_for_the_deadline() {
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let started = std::time::Instant::now();
    let got = grpc_probe("127.0.0.1", closed.port(), "", Duration::from_secs(1)).await;
    assert_eq!(
        got,
        (
            Outcome::Failure,
            format!(
                "timeout: failed to connect service \"{closed}\" within 1s: context deadline exceeded"
            )
        )
    );
    assert!(started.elapsed() >= Duration::from_secs(1));
}
