//! The kubelet's HTTP endpoints (upstream `pkg/kubelet/server`): `/healthz` on the healthz port,
//! the read-only port with `/pods`, `/healthz`, `/metrics`, `/metrics/resource`,
//! `/metrics/cadvisor`, `/metrics/probes` and `/stats/summary`, and the
//! authenticated HTTPS server (10250, [`bind_secure`]) with those plus `/runningpods/`,
//! `/containerLogs` and the streaming endpoints (`/exec`, `/attach`, `/portForward`, `/run`,
//! [`streaming`]). All three stop the same way on shutdown ([`serve`]: stop accepting, let open
//! connections and streams go on for a grace period, then close them).

pub mod auth;
pub mod serve;
pub mod streaming;
pub mod tls;
pub mod wsstream;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio_util::sync::CancellationToken;
use tracing::info;

use rkubelet_cri::CriClient;

use crate::health::Health;
use crate::stats::StatsSource;
use crate::status::StatusHandle;

#[derive(Clone)]
struct AppState {
    health: Arc<Health>,
    status: StatusHandle,
    stats: StatsSource,
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

/// The v1 PodList `/pods` answers, serialized straight from the pods: building a
/// `serde_json::Value` of every pod first cost as much again, on an endpoint that monitoring
/// agents (and `bench/cri-floor.sh`) poll.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct PodList<'a> {
    kind: &'static str,
    api_version: &'static str,
    metadata: std::collections::BTreeMap<(), ()>,
    items: &'a [k8s_openapi::api::core::v1::Pod],
}

impl<'a> PodList<'a> {
    fn of(items: &'a [k8s_openapi::api::core::v1::Pod]) -> Self {
        PodList {
            kind: "PodList",
            api_version: "v1",
            metadata: Default::default(),
            items,
        }
    }
}

async fn pods(State(s): State<AppState>) -> Response {
    let items = s.status.list().await;
    match serde_json::to_vec(&PodList::of(&items)) {
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

/// Upstream's prober metrics, served apart from `/metrics` (`/metrics/probes`) as upstream does.
async fn probe_metrics() -> Response {
    (
        [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
        crate::metrics::get().render_probes(),
    )
        .into_response()
}

/// Node, pod and container CPU and memory (upstream's resource metrics, what metrics-server
/// scrapes).
async fn resource_metrics(State(s): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
        crate::stats::resource_metrics(&s.stats).await,
    )
        .into_response()
}

/// cAdvisor's container series (upstream serves them from its embedded cAdvisor).
async fn cadvisor_metrics(State(s): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
        crate::stats::cadvisor::cadvisor_metrics(&s.stats).await,
    )
        .into_response()
}

/// Upstream's Summary API: node, pod and container usage in the `stats/v1alpha1` shape;
/// `?only_cpu_and_memory=true` (what metrics-server before 0.6 asks) skips the rest.
async fn stats_summary(
    State(s): State<AppState>,
    axum::extract::RawQuery(q): axum::extract::RawQuery,
) -> Response {
    let only = q.as_deref().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "only_cpu_and_memory=true" || kv == "only_cpu_and_memory=1")
    });
    let body = crate::stats::summary_json(&s.stats, only).await;
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Upstream `configz.InstallHandler`: the effective configuration.
async fn configz(State(d): State<SecureDeps>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        d.configz.to_string(),
    )
        .into_response()
}

/// The 10250 handlers reuse the plain ones: their state is a part of the secure server's.
impl axum::extract::FromRef<SecureDeps> for AppState {
    fn from_ref(d: &SecureDeps) -> Self {
        AppState {
            health: d.health.clone(),
            status: d.status.clone(),
            stats: d.stats.clone(),
        }
    }
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
    stats: StatsSource,
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
            .route("/metrics/resource", get(resource_metrics))
            .route("/metrics/cadvisor", get(cadvisor_metrics))
            .route("/metrics/probes", get(probe_metrics))
            .route("/stats/summary", get(stats_summary));
    }
    let app = router.with_state(AppState {
        health,
        status,
        stats,
    });
    info!(%addr, what, "serving");
    let plain = |tcp: tokio::net::TcpStream, _: SocketAddr| async move { Some((tcp, ())) };
    Ok(serve::serve(what, addr, listener, plain, app, cancel))
}

// ---------------------------------------------------------------------------------------------
// The secure server (10250).

use std::collections::HashMap;

use axum::extract::{Path as UrlPath, Query, Request};
use axum::middleware::Next;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::logs::{LogOptions, PodLogOptions};
use crate::pleg::RuntimePods;
use auth::{Authenticator, Authorizer, UserInfo};

/// What the 10250 handlers read; every part is a cheap handle.
#[derive(Clone)]
pub struct SecureDeps {
    pub health: Arc<Health>,
    pub status: StatusHandle,
    pub runtime_pods: watch::Receiver<Arc<RuntimePods>>,
    /// Pods' start-up timelines, for `/pods/<namespace>/<name>/timeline`.
    pub timeline: crate::timeline::TimelineHandle,
    pub cri: CriClient,
    pub stats: StatsSource,
    /// `/configz`'s body, computed once from the effective configuration.
    pub configz: Arc<serde_json::Value>,
    pub authn: Arc<Authenticator>,
    pub authz: Arc<Authorizer>,
    /// `enableDebuggingHandlers`.
    pub debugging_handlers: bool,
    /// Feature gate `KubeletFineGrainedAuthz`.
    pub fine_grained_authz: bool,
    /// `streamingConnectionIdleTimeout`: a proxied exec/attach/port-forward stream with no
    /// traffic either way for this long is closed.
    pub streaming_idle_timeout: std::time::Duration,
}

/// The verified client cert's user, put on each request of the connection by the accept loop.
#[derive(Clone)]
struct PeerUser(Option<UserInfo>);

/// Upstream `InstallAuthFilter`: authenticate (401 `Unauthorized`), then authorize against each
/// candidate subresource in turn (403 with upstream's message, 500 on webhook errors).
async fn auth_filter(State(d): State<SecureDeps>, req: Request, next: Next) -> Response {
    let cert = req.extensions().get::<PeerUser>().and_then(|p| p.0.clone());
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let user = match d.authn.authenticate(cert.as_ref(), token).await {
        Ok(Some(u)) => u,
        Ok(None) => return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response(),
        Err(e) => {
            warn!(error = %e, "unable to authenticate the request");
            return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
        }
    };
    let verb = auth::request_verb(req.method().as_str(), req.uri().path());
    let subs = auth::subresources(req.uri().path(), d.fine_grained_authz);
    for sub in &subs {
        match d.authz.authorize(&user, verb, sub).await {
            Ok(true) => {
                debug!(user = %user.name, verb, subresource = sub, path = %req.uri().path(), "authorized");
                return next.run(req).await;
            }
            Ok(false) => {}
            Err(e) => {
                let msg = format!(
                    "Authorization error (user={}, verb={verb}, resource=nodes, subresource={sub})",
                    user.name
                );
                warn!(error = %e, "{msg}");
                return (StatusCode::INTERNAL_SERVER_ERROR, msg).into_response();
            }
        }
    }
    let msg = auth::forbidden_message(&user.name, verb, &subs);
    debug!(path = %req.uri().path(), "{msg}");
    (StatusCode::FORBIDDEN, msg).into_response()
}

/// Upstream `getRunningPods`: the pods the runtime has, from PLEG's latest listing. Upstream also
/// lists their containers; PLEG's listing only names the pods.
async fn running_pods(State(d): State<SecureDeps>) -> Response {
    let listing = d.runtime_pods.borrow().clone();
    let items: Vec<Pod> = listing
        .pods
        .iter()
        .map(|r| {
            let mut p = Pod::default();
            p.metadata.name = Some(r.name.clone());
            p.metadata.namespace = Some(r.namespace.clone());
            p.metadata.uid = Some(r.uid.clone());
            p
        })
        .collect();
    let list =
        serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items});
    (
        [(header::CONTENT_TYPE, "application/json")],
        list.to_string(),
    )
        .into_response()
}

/// A pod's start-up timeline (issue 20, beyond upstream), under `/pods` so the same
/// authorization applies (`proxy`, or `pods` with fine-grained authz). 404 for a pod this kubelet
/// has no timeline of (never seen, or cleaned up).
async fn pod_timeline(
    State(d): State<SecureDeps>,
    UrlPath((namespace, name)): UrlPath<(String, String)>,
) -> Response {
    match d.timeline.get(&namespace, &name).await {
        Some(t) => (
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_string(&t.to_json()).unwrap_or_default(),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!("no start-up timeline for pod {namespace}/{name}"),
        )
            .into_response(),
    }
}

/// Upstream's answer for debugging endpoints when `enableDebuggingHandlers` is false.
async fn debugging_disabled() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        "Debug endpoints are disabled.",
    )
        .into_response()
}

fn bool_param(q: &HashMap<String, String>, key: &str) -> Result<bool, String> {
    match q.get(key).map(String::as_str) {
        None | Some("") | Some("false") | Some("False") | Some("0") => Ok(false),
        Some("true") | Some("True") | Some("1") => Ok(true),
        Some(v) => Err(format!("{key}: invalid boolean {v:?}")),
    }
}

fn int_param(q: &HashMap<String, String>, key: &str) -> Result<Option<i64>, String> {
    q.get(key)
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse()
                .map_err(|_| format!("{key}: invalid integer {v:?}"))
        })
        .transpose()
}

/// The `/containerLogs` query as upstream decodes `v1.PodLogOptions` (with the legacy `tail`
/// parameter, `tail=all` meaning no limit), then `ValidatePodLogOptions`. `Err((status, msg))`.
pub fn parse_log_query(q: &HashMap<String, String>) -> Result<PodLogOptions, (StatusCode, String)> {
    let mut q = q.clone();
    if let Some(tail) = q.remove("tail").filter(|t| !t.is_empty()) {
        q.remove("tailLines");
        if tail != "all" {
            q.insert("tailLines".into(), tail);
        }
    }
    let decode = |e: String| {
        debug!(error = %e, "bad containerLogs query");
        (
            StatusCode::BAD_REQUEST,
            r#"{"message": "Unable to decode query."}"#.to_string(),
        )
    };
    let since_time = q
        .get("sinceTime")
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse::<Timestamp>()
                .map_err(|e| format!("sinceTime: {e}"))
        })
        .transpose()
        .map_err(decode)?;
    let o = PodLogOptions {
        follow: bool_param(&q, "follow").map_err(decode)?,
        previous: bool_param(&q, "previous").map_err(decode)?,
        timestamps: bool_param(&q, "timestamps").map_err(decode)?,
        since_seconds: int_param(&q, "sinceSeconds").map_err(decode)?,
        since_time,
        tail_lines: int_param(&q, "tailLines").map_err(decode)?,
        limit_bytes: int_param(&q, "limitBytes").map_err(decode)?,
    };
    let invalid = o.tail_lines.is_some_and(|n| n < 0)
        || o.limit_bytes.is_some_and(|n| n < 1)
        || o.since_seconds.is_some_and(|n| n < 1)
        || (o.since_seconds.is_some() && o.since_time.is_some());
    if invalid {
        return Err((
            StatusCode::UNPROCESSABLE_ENTITY,
            r#"{"message": "Invalid request."}"#.to_string(),
        ));
    }
    Ok(o)
}

/// Upstream `getContainerLogs` + `GetKubeletContainerLogs`: the pod from what the kubelet runs,
/// the instance from the container's status (so `previous` works), the text from the runtime's
/// log file, streamed (and followed) as it is read.
async fn container_logs(
    State(d): State<SecureDeps>,
    axum::Extension(streams): axum::Extension<serve::Streams>,
    UrlPath((namespace, pod_name, container)): UrlPath<(String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
    mut req: Request,
) -> Response {
    let opts = match parse_log_query(&q) {
        Ok(o) => o,
        Err((code, msg)) => return (code, msg).into_response(),
    };
    let Some(pod) = streaming::pod_by_name(&d, &namespace, &pod_name).await else {
        return (
            StatusCode::NOT_FOUND,
            format!("pod {pod_name:?} does not exist\n"),
        )
            .into_response();
    };
    let spec = pod.spec.clone().unwrap_or_default();
    let in_spec = spec.containers.iter().any(|c| c.name == container)
        || spec
            .init_containers
            .iter()
            .flatten()
            .any(|c| c.name == container)
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| c.name == container);
    if !in_spec {
        return (
            StatusCode::NOT_FOUND,
            format!("container {container:?} not found in pod {pod_name:?}\n"),
        )
            .into_response();
    }
    let status = pod.status.clone().unwrap_or_default();
    let cs = status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .chain(status.ephemeral_container_statuses.iter().flatten())
        .find(|s| s.name == container);
    let id = match cs {
        Some(cs) => crate::logs::reader::log_container_id(&pod_name, cs, opts.previous),
        None => Err(crate::logs::LogsError::NotFound(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start - no logs yet"
        ))),
    };
    let id = match id {
        Ok(id) => id,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let log_opts = LogOptions::from_pod_options(&opts, Timestamp::now());
    // The reader writes into one end of a pipe, the response streams the other. The body holds a
    // drop guard: a client that goes away drops the body and stops the reader at once, even a
    // follow of a quiet container that would otherwise notice only at its next write (upstream
    // stops on the request context the same way). The reader is one of the server's streams: on
    // shutdown it is closed when the grace period is over, which ends the body, so a follower
    // sees a complete response, not a cut connection.
    let (mut w, r) = tokio::io::duplex(64 * 1024);
    let cri = d.cri.clone();
    let gone = CancellationToken::new();
    let guard = gone.clone().drop_guard();
    streams.spawn(async move {
        tokio::select! {
            r = crate::logs::container_logs(&cri, &id, &log_opts, &mut w) => if let Err(e) = r {
                debug!(container = %id, error = %e, "containerLogs ended");
            },
            _ = gone.cancelled() => debug!(container = %id, "containerLogs client went away"),
        }
    });
    if streaming::is_websocket(req.headers()) {
        return websocket_logs(&mut req, &streams, r, guard);
    }
    let stream = tokio_util::io::ReaderStream::new(r).map(move |chunk| {
        let _keep = &guard;
        chunk
    });
    let body = axum::body::Body::from_stream(stream);
    ([(header::CONTENT_TYPE, "text/plain")], body).into_response()
}

/// The log as a websocket stream ([`wsstream`]), for clients that upgrade `containerLogs`.
fn websocket_logs(
    req: &mut Request,
    streams: &serve::Streams,
    log: tokio::io::DuplexStream,
    guard: tokio_util::sync::DropGuard,
) -> Response {
    let h = req.headers();
    let Some(key) = h
        .get(header::SEC_WEBSOCKET_KEY)
        .and_then(|v| v.to_str().ok())
    else {
        return (
            StatusCode::BAD_REQUEST,
            wsstream::HandshakeError::MissingKey.to_string(),
        )
            .into_response();
    };
    let accept = wsstream::accept_key(key);
    let offered = h
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok());
    let (protocol, base64) = match wsstream::negotiate(offered) {
        Ok(p) => p,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let upgrade = hyper::upgrade::on(req);
    streams.spawn(async move {
        let _keep = guard;
        match upgrade.await {
            Ok(conn) => {
                let conn = hyper_util::rt::TokioIo::new(conn);
                if let Err(e) = wsstream::copy(log, conn, base64).await {
                    debug!(error = %e, "websocket log stream ended");
                }
            }
            Err(e) => debug!(error = %e, "websocket upgrade failed"),
        }
    });
    let mut resp = Response::new(axum::body::Body::empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let hs = resp.headers_mut();
    hs.insert(
        header::UPGRADE,
        header::HeaderValue::from_static("websocket"),
    );
    hs.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("Upgrade"),
    );
    if let Ok(v) = header::HeaderValue::from_str(&accept) {
        hs.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    if !protocol.is_empty() {
        hs.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            header::HeaderValue::from_static(protocol),
        );
    }
    resp
}

fn secure_router(d: SecureDeps) -> Router {
    let mut r = Router::new()
        .route("/healthz", get(healthz))
        .route("/pods", get(pods))
        .route("/pods/", get(pods))
        .route("/pods/{namespace}/{name}/timeline", get(pod_timeline))
        .route("/metrics", get(metrics))
        .route("/metrics/resource", get(resource_metrics))
        .route("/metrics/cadvisor", get(cadvisor_metrics))
        .route("/metrics/probes", get(probe_metrics))
        .route("/stats/summary", get(stats_summary))
        .route("/configz", get(configz));
    if d.debugging_handlers {
        use axum::routing::post;
        use streaming::{attach, exec, port_forward, run};
        r = r
            .route("/runningpods/", get(running_pods))
            .route(
                "/containerLogs/{namespace}/{pod}/{container}",
                get(container_logs),
            )
            .route("/exec/{namespace}/{pod}/{container}", get(exec).post(exec))
            .route(
                "/exec/{namespace}/{pod}/{uid}/{container}",
                get(exec).post(exec),
            )
            .route(
                "/attach/{namespace}/{pod}/{container}",
                get(attach).post(attach),
            )
            .route(
                "/attach/{namespace}/{pod}/{uid}/{container}",
                get(attach).post(attach),
            )
            .route(
                "/portForward/{namespace}/{pod}",
                get(port_forward).post(port_forward),
            )
            .route(
                "/portForward/{namespace}/{pod}/{uid}",
                get(port_forward).post(port_forward),
            )
            .route("/run/{namespace}/{pod}/{container}", post(run))
            .route("/run/{namespace}/{pod}/{uid}/{container}", post(run));
    } else {
        for p in [
            "/runningpods/",
            "/containerLogs/{*rest}",
            "/exec/{*rest}",
            "/attach/{*rest}",
            "/portForward/{*rest}",
            "/run/{*rest}",
            "/debug/pprof/{*rest}",
            "/logs/{*rest}",
        ] {
            r = r.route(p, axum::routing::any(debugging_disabled));
        }
    }
    r.layer(axum::middleware::from_fn_with_state(d.clone(), auth_filter))
        .with_state(d)
}

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Binds the HTTPS server now (a port conflict fails start-up) and returns its accept loop.
/// Each connection completes TLS, then its verified client cert (if any) rides along every
/// request to the auth filter.
pub async fn bind_secure(
    addr: SocketAddr,
    tls: Arc<tokio_rustls::rustls::ServerConfig>,
    deps: SecureDeps,
    cancel: CancellationToken,
) -> Result<impl std::future::Future<Output = ()>, ServeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError {
            what: "secure",
            addr,
            source,
        })?;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let app = secure_router(deps);
    info!(%addr, what = "secure", "serving");
    let handshake = move |tcp: tokio::net::TcpStream, peer: SocketAddr| {
        let acceptor = acceptor.clone();
        async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    debug!(%peer, error = %e, "TLS handshake failed");
                    return None;
                }
                Err(_) => {
                    debug!(%peer, "TLS handshake timed out");
                    return None;
                }
            };
            let user = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| auth::user_from_cert(c.as_ref()));
            Some((stream, PeerUser(user)))
        }
    };
    Ok(serve::serve(
        "secure", addr, listener, handshake, app, cancel,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn pod_list_is_a_v1_pod_list() {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"},
        }))
        .unwrap();
        let items = vec![pod.clone()];
        let got = serde_json::to_value(PodList::of(&items)).unwrap();
        let want = serde_json::json!({
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {},
            "items": [pod],
        });
        assert_eq!(got, want);
        assert_eq!(
            serde_json::to_string(&PodList::of(&[])).unwrap(),
            r#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}"#
        );
    }

    #[test]
    fn log_query_decodes_like_upstream() {
        let o = parse_log_query(&q(&[
            ("follow", "true"),
            ("tailLines", "5"),
            ("timestamps", "1"),
            ("limitBytes", "100"),
            ("sinceTime", "2024-01-02T03:04:05Z"),
        ]))
        .unwrap();
        assert!(o.follow && o.timestamps && !o.previous);
        assert_eq!((o.tail_lines, o.limit_bytes), (Some(5), Some(100)));
        assert_eq!(o.since_time.unwrap().to_string(), "2024-01-02T03:04:05Z");
        // The legacy `tail` parameter wins over tailLines; `all` means everything.
        let o = parse_log_query(&q(&[("tail", "3"), ("tailLines", "9")])).unwrap();
        assert_eq!(o.tail_lines, Some(3));
        let o = parse_log_query(&q(&[("tail", "all"), ("tailLines", "9")])).unwrap();
        assert_eq!(o.tail_lines, None);
    }

    #[test]
    fn log_query_errors_use_upstream_codes() {
        for bad in [
            &[("follow", "yes")][..],
            &[("tailLines", "x")],
            &[("sinceTime", "x")],
        ] {
            assert_eq!(
                parse_log_query(&q(bad)).unwrap_err().0,
                StatusCode::BAD_REQUEST,
                "{bad:?}"
            );
        }
        for bad in [
            &[("tailLines", "-1")][..],
            &[("limitBytes", "0")],
            &[("sinceSeconds", "0")],
            &[("sinceSeconds", "5"), ("sinceTime", "2024-01-02T03:04:05Z")],
        ] {
            assert_eq!(
                parse_log_query(&q(bad)).unwrap_err().0,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{bad:?}"
            );
        }
    }
}
