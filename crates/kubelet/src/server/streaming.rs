//! `/exec`, `/attach`, `/portForward` and `/run` on the secure port (upstream `getExec`,
//! `getAttach`, `getPortForward`, `getRun` with a CRI runtime).
//!
//! The runtime serves the streams itself: the kubelet asks it (CRI Exec/Attach/PortForward) for a
//! one-time URL on its streaming server and then proxies the client's upgrade request there,
//! relaying the `101 Switching Protocols` answer and then the raw bytes both ways (upstream's
//! `UpgradeAwareHandler` with `upgradeRequired`). The kubelet never parses SPDY or websocket
//! frames, so every protocol the runtime speaks (SPDY/3.1, `v4.channel.k8s.io` websockets, ...)
//! works unchanged, and an upgrade the runtime refuses comes back to the client as the runtime's
//! own error response, which is what lets clients fall back from websockets to SPDY.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::{debug, info, warn};

use rkubelet_cri::{api, CriClient, CriError};

use super::serve::Streams;
use super::SecureDeps;
use crate::podutil;
use crate::runtime::labels;

/// The query of a streaming request, repeated keys kept in order (`command` repeats).
pub type QueryPairs = Vec<(String, String)>;

/// Upstream `remotecommandserver.Options`: which streams the client wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamOptions {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// Go's `FormValue`: the first value of `key`.
fn first<'a>(q: &'a [(String, String)], key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Upstream `remotecommandserver.NewOptions`: `input`, `output`, `error`, `tty` set when "1"
/// (what the API server sends; "true" is accepted too). A tty has no separate stderr.
pub fn stream_options(q: &[(String, String)]) -> Result<StreamOptions, String> {
    let flag = |k: &str| matches!(first(q, k), Some("1") | Some("true"));
    let tty = flag("tty");
    let o = StreamOptions {
        stdin: flag("input"),
        stdout: flag("output"),
        stderr: flag("error") && !tty,
        tty,
    };
    if !o.stdin && !o.stdout && !o.stderr {
        return Err("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    Ok(o)
}

/// Every `command` value, in order (upstream `getExecRequestParams`).
pub fn command(q: &[(String, String)]) -> Vec<String> {
    q.iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect()
}

/// Upstream `portforward.NewV4Options`: websocket clients name their ports in `port` (repeated or
/// comma separated); SPDY clients name them per stream, so none are needed up front.
pub fn port_forward_ports(q: &[(String, String)], websocket: bool) -> Result<Vec<i32>, String> {
    if !websocket {
        return Ok(Vec::new());
    }
    let values: Vec<&str> = q
        .iter()
        .filter(|(k, _)| k == "port")
        .map(|(_, v)| v.as_str())
        .collect();
    if values.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    let mut ports = Vec::new();
    for v in values {
        if v.is_empty() {
            return Err("query parameter \"port\" cannot be empty".into());
        }
        for p in v.split(',') {
            let port: u16 = p
                .parse()
                .map_err(|e| format!("unable to parse {v:?} as a port: {e}"))?;
            if port < 1 {
                return Err(format!("port {v:?} must be > 0"));
            }
            ports.push(i32::from(port));
        }
    }
    Ok(ports)
}

/// Upstream `httpstream.IsUpgradeRequest`: `Connection` names `upgrade`.
pub fn is_upgrade(h: &HeaderMap) -> bool {
    h.get_all(header::CONNECTION).iter().any(|v| {
        v.to_str()
            .unwrap_or("")
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
    })
}

/// Upstream `wsstream.IsWebSocketRequest`.
pub fn is_websocket(h: &HeaderMap) -> bool {
    is_upgrade(h)
        && h.get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

fn reply(code: StatusCode, msg: impl Into<String>) -> Response {
    (code, msg.into()).into_response()
}

/// Upstream's responder and `http.Error`: 500 with the message.
fn internal(msg: impl std::fmt::Display) -> Response {
    warn!("Error while proxying request: {msg}");
    reply(StatusCode::INTERNAL_SERVER_ERROR, format!("{msg}\n"))
}

/// Upstream `streaming.WriteError`: the gRPC code picks the status, the error is the body.
fn runtime_error(e: &CriError) -> Response {
    let code = match e.code() {
        Some(tonic::Code::NotFound) => StatusCode::NOT_FOUND,
        Some(tonic::Code::ResourceExhausted) => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let msg = match e {
        CriError::Rpc { code, message, .. } => {
            format!("rpc error: code = {code:?} desc = {message}")
        }
        other => other.to_string(),
    };
    debug!(error = %e, "streaming request failed in the runtime");
    reply(code, msg)
}

/// Upstream `GetPodByName`: the pod among those the kubelet manages.
pub(super) async fn pod_by_name(d: &SecureDeps, namespace: &str, name: &str) -> Option<Pod> {
    d.status.list().await.into_iter().find(|p| {
        p.metadata.namespace.as_deref() == Some(namespace)
            && p.metadata.name.as_deref() == Some(name)
    })
}

/// Upstream `findContainer`: the running container `name` of the pod with `uid`, newest first.
async fn find_container(
    cri: &CriClient,
    uid: &str,
    name: &str,
) -> Result<Option<String>, CriError> {
    let resp = cri
        .list_containers(api::ListContainersRequest {
            filter: Some(api::ContainerFilter {
                state: Some(api::ContainerStateValue {
                    state: api::ContainerState::ContainerRunning as i32,
                }),
                label_selector: [
                    (labels::POD_UID.to_string(), uid.to_string()),
                    (labels::CONTAINER_NAME.to_string(), name.to_string()),
                ]
                .into(),
                ..Default::default()
            }),
        })
        .await?;
    Ok(resp
        .containers
        .into_iter()
        .max_by_key(|c| c.created_at)
        .map(|c| c.id))
}

/// The URL's pod and container; `uid` only in the four-segment forms.
struct Target {
    namespace: String,
    pod: String,
    uid: Option<String>,
    container: String,
}

impl Target {
    fn from(p: &HashMap<String, String>) -> Target {
        let get = |k: &str| p.get(k).cloned().unwrap_or_default();
        Target {
            namespace: get("namespace"),
            pod: get("pod"),
            uid: p.get("uid").cloned(),
            container: get("container"),
        }
    }
    /// The runtime's pod UID: the URL's when given (upstream `FindPod` by UID), else the pod's.
    fn uid(&self, pod: &Pod) -> String {
        self.uid
            .clone()
            .unwrap_or_else(|| pod.metadata.uid.clone().unwrap_or_default())
    }
}

/// What a streaming handler resolved: the runtime's URL, or the response to send instead.
type Resolved = Result<String, Response>;

async fn resolve_exec(d: &SecureDeps, t: &Target, q: &[(String, String)]) -> Resolved {
    let o = stream_options(q).map_err(|e| reply(StatusCode::BAD_REQUEST, e))?;
    let pod = pod_by_name(d, &t.namespace, &t.pod)
        .await
        .ok_or_else(|| reply(StatusCode::NOT_FOUND, "pod does not exist"))?;
    let id = find_container(&d.cri, &t.uid(&pod), &t.container)
        .await
        .map_err(|e| runtime_error(&e))?
        .ok_or_else(|| internal(format!("container not found ({:?})", t.container)))?;
    let req = api::ExecRequest {
        container_id: id,
        cmd: command(q),
        tty: o.tty,
        stdin: o.stdin,
        stdout: o.stdout,
        stderr: o.stderr,
    };
    let resp = d.cri.exec(req).await.map_err(|e| runtime_error(&e))?;
    Ok(resp.url)
}

async fn resolve_attach(d: &SecureDeps, t: &Target, q: &[(String, String)]) -> Resolved {
    let o = stream_options(q).map_err(|e| reply(StatusCode::BAD_REQUEST, e))?;
    let pod = pod_by_name(d, &t.namespace, &t.pod)
        .await
        .ok_or_else(|| reply(StatusCode::NOT_FOUND, "pod does not exist"))?;
    let not_found = || {
        internal(format!(
            "container {} not found in pod {}",
            t.container,
            podutil::full_name(&pod)
        ))
    };
    let id = find_container(&d.cri, &t.uid(&pod), &t.container)
        .await
        .map_err(|e| runtime_error(&e))?
        .ok_or_else(not_found)?;
    // The process's tty was fixed when the container started: the spec says whether it has one.
    let spec = pod.spec.clone().unwrap_or_default();
    let tty = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == t.container)
        .map(|c| c.tty.unwrap_or(false))
        .or_else(|| {
            spec.ephemeral_containers
                .iter()
                .flatten()
                .find(|c| c.name == t.container)
                .map(|c| c.tty.unwrap_or(false))
        })
        .ok_or_else(not_found)?;
    let req = api::AttachRequest {
        container_id: id,
        stdin: o.stdin,
        tty,
        stdout: o.stdout,
        stderr: o.stderr,
    };
    let resp = d.cri.attach(req).await.map_err(|e| runtime_error(&e))?;
    Ok(resp.url)
}

async fn resolve_port_forward(
    d: &SecureDeps,
    t: &Target,
    q: &[(String, String)],
    websocket: bool,
) -> Resolved {
    let ports = port_forward_ports(q, websocket).map_err(|e| reply(StatusCode::BAD_REQUEST, e))?;
    let pod = pod_by_name(d, &t.namespace, &t.pod)
        .await
        .ok_or_else(|| reply(StatusCode::NOT_FOUND, "pod does not exist"))?;
    if t.uid.is_some() && t.uid != pod.metadata.uid {
        return Err(reply(StatusCode::NOT_FOUND, "pod not found"));
    }
    let sandboxes = d
        .cri
        .list_pod_sandbox(api::ListPodSandboxRequest {
            filter: Some(api::PodSandboxFilter {
                state: Some(api::PodSandboxStateValue {
                    state: api::PodSandboxState::SandboxReady as i32,
                }),
                label_selector: [(labels::POD_UID.to_string(), t.uid(&pod))].into(),
                ..Default::default()
            }),
        })
        .await
        .map_err(|e| runtime_error(&e))?;
    let sandbox = sandboxes
        .items
        .into_iter()
        .max_by_key(|s| s.created_at)
        .ok_or_else(|| internal(format!("pod not found ({:?})", podutil::full_name(&pod))))?;
    let req = api::PortForwardRequest {
        pod_sandbox_id: sandbox.id,
        port: ports,
    };
    let resp = d
        .cri
        .port_forward(req)
        .await
        .map_err(|e| runtime_error(&e))?;
    Ok(resp.url)
}

/// Logs a request answered before the runtime was asked (which protocol the client tried helps
/// to follow a client's fallback from websockets to SPDY).
fn refused(req: &Request, r: Response) -> Response {
    debug!(
        path = %req.uri().path(),
        status = %r.status(),
        upgrade = header_str(req.headers(), header::UPGRADE),
        "streaming request refused"
    );
    r
}

/// `/exec/{namespace}/{pod}[/{uid}]/{container}?command=...&input=1&output=1&error=1&tty=1`.
pub async fn exec(
    State(d): State<SecureDeps>,
    Extension(streams): Extension<Streams>,
    UrlPath(p): UrlPath<HashMap<String, String>>,
    Query(q): Query<QueryPairs>,
    req: Request,
) -> Response {
    match resolve_exec(&d, &Target::from(&p), &q).await {
        Ok(url) => proxy_stream(req, &url, d.streaming_idle_timeout, &streams).await,
        Err(r) => refused(&req, r),
    }
}

/// `/attach/{namespace}/{pod}[/{uid}]/{container}?input=1&output=1&error=1`.
pub async fn attach(
    State(d): State<SecureDeps>,
    Extension(streams): Extension<Streams>,
    UrlPath(p): UrlPath<HashMap<String, String>>,
    Query(q): Query<QueryPairs>,
    req: Request,
) -> Response {
    match resolve_attach(&d, &Target::from(&p), &q).await {
        Ok(url) => proxy_stream(req, &url, d.streaming_idle_timeout, &streams).await,
        Err(r) => refused(&req, r),
    }
}

/// `/portForward/{namespace}/{pod}[/{uid}]` (websocket clients add `?port=...`).
pub async fn port_forward(
    State(d): State<SecureDeps>,
    Extension(streams): Extension<Streams>,
    UrlPath(p): UrlPath<HashMap<String, String>>,
    Query(q): Query<QueryPairs>,
    req: Request,
) -> Response {
    let websocket = is_websocket(req.headers());
    match resolve_port_forward(&d, &Target::from(&p), &q, websocket).await {
        Ok(url) => proxy_stream(req, &url, d.streaming_idle_timeout, &streams).await,
        Err(r) => refused(&req, r),
    }
}

/// `/run/{namespace}/{pod}[/{uid}]/{container}?cmd=...`: upstream `getRun`, the legacy one-shot
/// exec: `cmd` split on spaces, CRI ExecSync, stdout then stderr as the body; a non-zero exit is
/// a 500 naming the command, its code and its stderr.
pub async fn run(
    State(d): State<SecureDeps>,
    UrlPath(p): UrlPath<HashMap<String, String>>,
    Query(q): Query<QueryPairs>,
) -> Response {
    let t = Target::from(&p);
    let Some(pod) = pod_by_name(&d, &t.namespace, &t.pod).await else {
        return reply(StatusCode::NOT_FOUND, "pod does not exist");
    };
    let cmd: Vec<String> = first(&q, "cmd")
        .unwrap_or("")
        .split(' ')
        .map(str::to_string)
        .collect();
    let id = match find_container(&d.cri, &t.uid(&pod), &t.container).await {
        Ok(Some(id)) => id,
        Ok(None) => {
            return reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("container not found ({:?})", t.container),
            )
        }
        Err(e) => return reply(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let req = api::ExecSyncRequest {
        container_id: id,
        cmd: cmd.clone(),
        timeout: 0,
    };
    match d.cri.exec_sync(req).await {
        Ok(out) if out.exit_code == 0 => {
            let mut body = out.stdout;
            body.extend_from_slice(&out.stderr);
            ([(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        Ok(out) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "command '{}' exited with {}: {}",
                cmd.join(" "),
                out.exit_code,
                String::from_utf8_lossy(&out.stderr)
            ),
        ),
        Err(e) => reply(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// Upstream `proxyStream`: sends the client's upgrade request to the runtime's `location`; a
/// `101` is relayed and the two connections are spliced; an error answer (>= 400) is relayed as
/// is; anything else is a 500. The spliced stream belongs to `streams`: on shutdown it goes on
/// through the server's grace period, then is closed.
pub async fn proxy_stream(
    mut req: Request,
    location: &str,
    idle: Duration,
    streams: &Streams,
) -> Response {
    if !is_upgrade(req.headers()) {
        return internal("Upgrade request required");
    }
    let loc: Uri = match location.parse() {
        Ok(u) => u,
        Err(e) => return internal(format!("invalid streaming URL {location:?}: {e}")),
    };
    // The runtime's streaming server is plain HTTP on loopback (containerd's
    // `enable_tls_streaming = false`); a TLS URL would need the runtime's CA, which the kubelet
    // is never given.
    if loc.scheme_str() != Some("http") {
        return internal(format!(
            "streaming URL {location:?}: only http:// streaming servers are supported"
        ));
    }
    let Some(authority) = loc.authority().cloned() else {
        return internal(format!("streaming URL {location:?} has no host"));
    };
    let tcp = match tokio::net::TcpStream::connect(authority.as_str()).await {
        Ok(s) => s,
        Err(e) => return internal(format!("error dialing backend: {e}")),
    };
    let _ = tcp.set_nodelay(true);
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await {
        Ok(x) => x,
        Err(e) => return internal(format!("error dialing backend: {e}")),
    };
    streams.spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            debug!(error = %e, "streaming backend connection ended");
        }
    });
    let client_upgrade = hyper::upgrade::on(&mut req);
    let mut headers = req.headers().clone();
    // The client's credentials were for the kubelet, not the runtime; the request has no body.
    for h in [
        header::AUTHORIZATION,
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
    ] {
        headers.remove(h);
    }
    if let Ok(v) = HeaderValue::from_str(authority.as_str()) {
        headers.insert(header::HOST, v);
    }
    let path = loc
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .to_string();
    let mut back = hyper::Request::new(http_body_util::Empty::<Bytes>::new());
    *back.method_mut() = req.method().clone();
    *back.headers_mut() = headers;
    *back.uri_mut() = match path.parse() {
        Ok(u) => u,
        Err(e) => return internal(format!("invalid streaming URL {location:?}: {e}")),
    };
    let mut resp = match sender.send_request(back).await {
        Ok(r) => r,
        Err(e) => return internal(format!("error proxying to the runtime: {e}")),
    };
    let status = resp.status();
    let asked = header_str(req.headers(), header::UPGRADE);
    if status == StatusCode::SWITCHING_PROTOCOLS {
        // What the two ends agreed on, for the log: SPDY names it in X-Stream-Protocol-Version,
        // websockets in Sec-WebSocket-Protocol.
        let protocol = format!(
            "{} {}{}",
            header_str(resp.headers(), header::UPGRADE),
            header_str(resp.headers(), "x-stream-protocol-version"),
            header_str(resp.headers(), header::SEC_WEBSOCKET_PROTOCOL),
        );
        let backend_upgrade = hyper::upgrade::on(&mut resp);
        let (parts, _) = resp.into_parts();
        let what = path.split('/').nth(1).unwrap_or("stream").to_string();
        streams.spawn(async move {
            let (client, backend) = match tokio::try_join!(client_upgrade, backend_upgrade) {
                Ok(pair) => pair,
                Err(e) => {
                    debug!(error = %e, "streaming upgrade failed");
                    return;
                }
            };
            debug!(what, protocol, "streaming connection proxied");
            match splice(TokioIo::new(client), TokioIo::new(backend), idle).await {
                Ok(End::Closed) => debug!(what, "streaming connection closed"),
                Ok(End::Idle) => info!(
                    what,
                    timeout = ?idle,
                    "streaming connection idle for streamingConnectionIdleTimeout, closing it"
                ),
                Err(e) => debug!(what, error = %e, "streaming connection ended with an error"),
            }
        });
        return Response::from_parts(parts, Body::empty());
    }
    if status.as_u16() >= 400 {
        debug!(%status, upgrade = asked, "the runtime refused the upgrade");
        return resp.map(Body::new);
    }
    internal(format!(
        "invalid upgrade response: status code {}",
        status.as_u16()
    ))
}

fn header_str(h: &HeaderMap, name: impl header::AsHeaderName) -> String {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// How a spliced stream ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// One side closed; the other was closed with it (upstream ends both on the first EOF).
    Closed,
    /// Nothing moved either way for the idle timeout (`streamingConnectionIdleTimeout`).
    Idle,
}

/// Copies bytes both ways until one side closes or nothing moves for `idle`.
pub async fn splice<A, B>(a: A, b: B, idle: Duration) -> std::io::Result<End>
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    // Zero disables the timeout, as for upstream's streaming server.
    let idle = if idle.is_zero() { Duration::MAX } else { idle };
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    let mut abuf = vec![0u8; 32 * 1024];
    let mut bbuf = vec![0u8; 32 * 1024];
    loop {
        let (n, a_to_b) = tokio::select! {
            r = ar.read(&mut abuf) => (r?, true),
            r = br.read(&mut bbuf) => (r?, false),
            _ = tokio::time::sleep(idle) => {
                let _ = aw.shutdown().await;
                let _ = bw.shutdown().await;
                return Ok(End::Idle);
            }
        };
        if n == 0 {
            let _ = aw.shutdown().await;
            let _ = bw.shutdown().await;
            return Ok(End::Closed);
        }
        let write = async {
            if a_to_b {
                bw.write_all(&abuf[..n]).await?;
                bw.flush().await
            } else {
                aw.write_all(&bbuf[..n]).await?;
                aw.flush().await
            }
        };
        // A peer that stops reading is as idle as one that stops writing.
        match tokio::time::timeout(idle, write).await {
            Ok(r) => r?,
            Err(_) => return Ok(End::Idle),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> QueryPairs {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn stream_options_as_upstream() {
        let o = stream_options(&q(&[("input", "1"), ("output", "1"), ("error", "1")])).unwrap();
        assert_eq!(
            o,
            StreamOptions {
                stdin: true,
                stdout: true,
                stderr: true,
                tty: false
            }
        );
        // A tty has no separate stderr.
        let o = stream_options(&q(&[("output", "1"), ("error", "1"), ("tty", "1")])).unwrap();
        assert!(o.tty && o.stdout && !o.stderr);
        assert_eq!(
            stream_options(&q(&[("tty", "1"), ("error", "1")])).unwrap_err(),
            "you must specify at least 1 of stdin, stdout, stderr"
        );
        assert!(stream_options(&q(&[("output", "0")])).is_err());
    }

    #[test]
    fn command_keeps_every_value_in_order() {
        let c = command(&q(&[
            ("command", "sh"),
            ("output", "1"),
            ("command", "-c"),
            ("command", "echo a b"),
        ]));
        assert_eq!(c, vec!["sh", "-c", "echo a b"]);
    }

    #[test]
    fn port_forward_ports_as_upstream_v4_options() {
        assert_eq!(
            port_forward_ports(&q(&[]), false).unwrap(),
            Vec::<i32>::new()
        );
        assert_eq!(
            port_forward_ports(&q(&[("port", "80,8080"), ("port", "9")]), true).unwrap(),
            vec![80, 8080, 9]
        );
        assert_eq!(
            port_forward_ports(&q(&[]), true).unwrap_err(),
            "query parameter \"port\" is required"
        );
        assert!(port_forward_ports(&q(&[("port", "")]), true).is_err());
        assert!(port_forward_ports(&q(&[("port", "0")]), true).is_err());
        assert!(port_forward_ports(&q(&[("port", "70000")]), true).is_err());
    }

    #[test]
    fn upgrade_detection() {
        let mut h = HeaderMap::new();
        assert!(!is_upgrade(&h));
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        assert!(is_upgrade(&h) && !is_websocket(&h));
        h.insert(header::UPGRADE, HeaderValue::from_static("WebSocket"));
        assert!(is_websocket(&h));
    }

    #[tokio::test]
    async fn splice_copies_both_ways_and_ends_on_close() {
        let (mut client, a) = tokio::io::duplex(64);
        let (b, mut runtime) = tokio::io::duplex(64);
        let task = tokio::spawn(splice(a, b, Duration::from_secs(30)));
        client.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        runtime.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        runtime.write_all(b"pong").await.unwrap();
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"pong");
        drop(runtime);
        assert_eq!(task.await.unwrap().unwrap(), End::Closed);
        // The client sees the close too.
        assert_eq!(client.read(&mut buf).await.unwrap(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn splice_closes_an_idle_stream_and_traffic_keeps_it_open() {
        let (mut client, a) = tokio::io::duplex(64);
        let (b, mut runtime) = tokio::io::duplex(64);
        let task = tokio::spawn(splice(a, b, Duration::from_secs(10)));
        let mut buf = [0u8; 1];
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_secs(6)).await;
            client.write_all(b"x").await.unwrap();
            runtime.read_exact(&mut buf).await.unwrap();
        }
        assert!(
            !task.is_finished(),
            "traffic every 6 s keeps a 10 s timeout away"
        );
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!(task.await.unwrap().unwrap(), End::Idle);
        assert_eq!(runtime.read(&mut buf).await.unwrap(), 0);
        assert_eq!(client.read(&mut buf).await.unwrap(), 0);
    }
}
