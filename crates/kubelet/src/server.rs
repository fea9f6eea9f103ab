//! The kubelet's HTTP endpoints available so far (upstream `pkg/kubelet/server`): `/healthz` on the
//! healthz port, and the read-only port with `/pods` and `/healthz`. The authenticated 10250 server
//! joins with the server work.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use rkubelet_cri::CriClient;

use crate::health::Health;
use crate::status::StatusHandle;

#[derive(Clone)]
struct AppState {
    health: Arc<Health>,
    status: StatusHandle,
    cri: CriClient,
}

async fn healthz(State(s): State<AppState>) -> Response {
    match s.health.check() {
        Ok(()) => (StatusCode::OK, "ok").into_response(),
        Err(errs) => {
            let body = format!("[-]{}\nhealthz check failed\n", errs.join("\n[-]"));
            (StatusCode::INTERNAL_SERVER_ERROR, body).into_response()
        }
    }
}

async fn pods(State(s): State<AppState>) -> Response {
    let items = s.status.list().await;
    let list = serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": items,
    });
    match serde_json::to_vec(&list) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The kubelet's own metrics in the Prometheus text format (upstream serves `/metrics` on the
/// read-only port as well as on 10250).
async fn metrics() -> Response {
    (
        [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
        crate::metrics::get().render(),
    )
        .into_response()
}

/// Node, pod and container CPU and memory (upstream's resource metrics, what metrics-server
/// scrapes).
async fn resource_metrics(State(s): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
        crate::stats::resource_metrics(&s.cri).await,
    )
        .into_response()
}

/// Errors binding a listener, naming the address.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} for the {what} server: {source}")]
pub struct ServeError {
    pub what: &'static str,
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Binds now (so a port conflict is reported at start-up) and returns the serving future.
pub async fn bind(
    what: &'static str,
    addr: SocketAddr,
    read_only: bool,
    health: Arc<Health>,
    status: StatusHandle,
    cri: CriClient,
    cancel: CancellationToken,
) -> Result<impl std::future::Future<Output = ()>, ServeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError { what, addr, source })?;
    let mut router = Router::new().route("/healthz", get(healthz));
    if read_only {
        router = router
            .route("/pods", get(pods))
            .route("/pods/", get(pods))
            .route("/metrics", get(metrics))
            .route("/metrics/resource", get(resource_metrics));
    }
    let app = router.with_state(AppState {
        health,
        status,
        cri,
    });
    info!(%addr, what, "serving");
    Ok(async move {
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(async move { cancel.cancelled().await })
            .await
        {
            error!(%addr, error = %e, "server failed");
        }
    })
}
