//! The accept loop and connection drain shared by the kubelet's three listeners (healthz,
//! read-only, secure 10250).
//!
//! Upstream serves with Go's `http.Server` and, on SIGTERM, exits with connections open: a
//! `kubectl logs -f` or `kubectl exec` through the node is cut mid-stream. Here (our design, after
//! linkerd2-proxy's `proxy/http/src/server.rs` drain) a cancelled server:
//! 1. closes its listening socket at once, so new connections are refused, not queued;
//! 2. asks every open connection to finish gracefully (hyper's `graceful_shutdown`: idle
//!    keep-alive connections close now, a request in flight gets its answer, HTTP/2 sends GOAWAY);
//! 3. lets in-flight requests and long-lived streams (followed logs, proxied exec/attach/
//!    port-forward, tracked by [`Streams`]) go on for [`CONNECTION_GRACE`];
//! 4. then tells the streams to close (a followed log's body ends cleanly, proxied streams are
//!    shut) and, after [`CLOSE_WAIT`], drops whatever connection is still open.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::Request;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use tracing::{debug, info, warn};

/// How long open connections and streams may go on after the kubelet is told to stop. Long
/// enough for any ordinary request in flight (a stats summary, a `/run`, a log read) to get its
/// answer and for a streaming client to see output up to the end; short because followed logs and
/// exec sessions never end on their own, and an operator restarting the kubelet (a package
/// upgrade, a config change) should get a new one within seconds. It sits well inside the
/// binary's overall shutdown bound, which has to cover the other tasks as well.
pub const CONNECTION_GRACE: Duration = Duration::from_secs(5);

/// After the grace, how long closed streams get to flush their end before their connections are
/// dropped.
pub const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Upstream's `IdleTimeout` of the kubelet server (Go's keep-alive timeout): a client must send
/// its request head in time, so idle or slow connections cannot pile up.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Upstream's `MaxHeaderBytes`.
const MAX_HEADER_BYTES: usize = 1 << 20;

/// The long-lived work a request leaves behind (a followed log's reader, a proxied exec stream):
/// tracked so the drain knows it is there, and closed when the grace period is over. Every
/// request carries one in its extensions.
#[derive(Clone, Default)]
pub struct Streams {
    tracker: TaskTracker,
    closing: CancellationToken,
}

impl Streams {
    /// Runs `fut` until it ends or the server closes its streams (then `fut` is dropped, which
    /// closes the sockets it owns).
    pub fn spawn<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let closing = self.closing.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                _ = fut => {}
                _ = closing.cancelled() => debug!("stream closed: the kubelet is shutting down"),
            }
        });
    }
}

/// Serves `app` on `listener` until `cancel`, then drains (see the module doc). `handshake` turns
/// an accepted TCP connection into the stream to speak HTTP on (TLS for the secure port) and a
/// value put into every request's extensions (the verified client's identity); None drops it.
pub async fn serve<H, F, IO, E>(
    what: &'static str,
    addr: SocketAddr,
    listener: TcpListener,
    handshake: H,
    app: Router,
    cancel: CancellationToken,
) where
    H: Fn(TcpStream, SocketAddr) -> F + Clone + Send + 'static,
    F: Future<Output = Option<(IO, E)>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    E: Clone + Send + Sync + 'static,
{
    let streams = Streams::default();
    let mut conns = JoinSet::new();
    loop {
        let (tcp, peer) = tokio::select! {
            _ = cancel.cancelled() => break,
            // Reap ended connections so the set holds only open ones.
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    warn!(%addr, what, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (handshake, app, cancel, streams) = (
            handshake.clone(),
            app.clone(),
            cancel.clone(),
            streams.clone(),
        );
        conns.spawn(async move {
            let shaken = tokio::select! {
                r = handshake(tcp, peer) => r,
                _ = cancel.cancelled() => None,
            };
            let Some((io, ext)) = shaken else {
                return;
            };
            let svc = hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ext.clone());
                req.extensions_mut().insert(streams.clone());
                app.clone().oneshot(req)
            });
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(IDLE_TIMEOUT)
                .max_buf_size(MAX_HEADER_BYTES);
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
            tokio::pin!(conn);
            let r = tokio::select! {
                r = conn.as_mut() => r,
                _ = cancel.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = r {
                debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    // Closing the socket makes new connections fail at once instead of waiting in the backlog.
    drop(listener);
    drain(what, addr, conns, streams).await;
}

async fn all_ended(conns: &mut JoinSet<()>, streams: &Streams) {
    while conns.join_next().await.is_some() {}
    streams.tracker.wait().await;
}

async fn drain(what: &'static str, addr: SocketAddr, mut conns: JoinSet<()>, streams: Streams) {
    streams.tracker.close();
    if conns.is_empty() && streams.tracker.is_empty() {
        info!(%addr, what, "stopped serving");
        return;
    }
    info!(%addr, what, connections = conns.len(), streams = streams.tracker.len(),
        grace = ?CONNECTION_GRACE, "stopped accepting; open connections may finish");
    if tokio::time::timeout(CONNECTION_GRACE, all_ended(&mut conns, &streams))
        .await
        .is_ok()
    {
        info!(%addr, what, "open connections finished; stopped serving");
        return;
    }
    warn!(%addr, what, connections = conns.len(), streams = streams.tracker.len(),
        "grace period over; closing open connections and streams");
    streams.closing.cancel();
    if tokio::time::timeout(CLOSE_WAIT, all_ended(&mut conns, &streams))
        .await
        .is_err()
    {
        warn!(%addr, what, connections = conns.len(), "dropping connections that did not close");
        conns.shutdown().await;
    }
    info!(%addr, what, "stopped serving");
}
