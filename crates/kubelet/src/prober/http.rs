//! The httpGet probe (upstream `pkg/probe/http/{http.go,request.go}` over Go's `net/http` client
//! with the prober's transport: no keep-alives, no proxy, no compression, TLS without
//! certificate verification, redirects followed only to the same host name).
//!
//! One connection per request (hyper's HTTP/1.1 client connection, `Connection: close`), so a
//! redirect to another port or scheme of the same host simply opens a new one. The whole request
//! chain, body included, is bounded by `timeoutSeconds`, as Go's `http.Client.Timeout`.
//! Deliberate difference: HTTPS speaks HTTP/1.1 only (Go would negotiate h2 by ALPN).

use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, Fuse, FutureExt};
use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderName, HeaderValue, CONNECTION, HOST, LOCATION, REFERER};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Container, HTTPGetAction};
use tokio::time::Instant;
use tokio_rustls::rustls;

use super::probe::{
    dial, resolve_container_port, user_agent, Outcome, ProbeError, MAX_OUTPUT_LENGTH,
};
use super::url::origin_path;
pub use super::url::ProbeUrl;

/// Go's `http.Client` default redirect limit, kept by the probe's `RedirectChecker`.
pub const MAX_REDIRECTS: usize = 10;

/// Everything about one httpGet probe that does not change between attempts (upstream
/// `NewRequestForHTTPGetAction`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTarget {
    pub url: ProbeUrl,
    /// A non-empty `Host` among `httpHeaders` (upstream `req.Host`).
    pub host_override: Option<String>,
    /// The headers to send besides Host, Connection and Referer, in order.
    pub headers: Vec<(String, String)>,
}

impl HttpTarget {
    /// Scheme lower-cased (default http), host defaulting to the pod IP, port by number or name.
    pub fn from_action(
        action: &HTTPGetAction,
        container: &Container,
        pod_ip: Option<&str>,
    ) -> Result<HttpTarget, ProbeError> {
        let scheme = action
            .scheme
            .as_deref()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let scheme = if scheme.is_empty() {
            "http".to_string()
        } else {
            scheme
        };
        let host = match action.host.as_deref().filter(|h| !h.is_empty()) {
            Some(h) => h.to_string(),
            None => pod_ip.ok_or(ProbeError::NoPodIp)?.to_string(),
        };
        let port = resolve_container_port(&action.port, container)?;
        let user: Vec<(String, String)> = action
            .http_headers
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        let (host_override, headers) = request_headers(&user, &user_agent());
        Ok(HttpTarget {
            url: ProbeUrl {
                scheme,
                host,
                port: Some(port),
                path: origin_path(action.path.as_deref().unwrap_or_default()),
            },
            host_override,
            headers,
        })
    }
}

/// Upstream `newProbeRequest` plus what Go's request writer does with the header map: a
/// non-empty `Host` becomes the Host header; `User-Agent` defaults to `kube-probe/<ver>` and only
/// its first value is sent (none if empty); `Accept` defaults to `*/*`, an empty `Accept`
/// removes it. Names match case-insensitively, as Go canonicalizes them.
pub(crate) fn request_headers(
    user: &[(String, String)],
    default_user_agent: &str,
) -> (Option<String>, Vec<(String, String)>) {
    let first = |name: &str| {
        user.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let host_override = first("Host").filter(|h| !h.is_empty()).map(str::to_string);
    let user_agent = first("User-Agent")
        .unwrap_or(default_user_agent)
        .to_string();
    let accept = first("Accept");
    let mut headers: Vec<(String, String)> = user
        .iter()
        .filter(|(n, _)| {
            let handled = n.eq_ignore_ascii_case("Host")
                || n.eq_ignore_ascii_case("User-Agent")
                || (accept == Some("") && n.eq_ignore_ascii_case("Accept"));
            !handled
        })
        .cloned()
        .collect();
    if !user_agent.is_empty() {
        headers.insert(0, ("User-Agent".into(), user_agent));
    }
    if accept.is_none() {
        headers.push(("Accept".into(), "*/*".into()));
    }
    (host_override, headers)
}

/// Upstream `DoHTTPProbe`'s classification of the final response: 2xx Success with the body as
/// output; 3xx (a redirect that was not followed) Warning; anything else Failure without the body
/// (issue 99425: the body must not reach user-facing messages).
pub fn classify_status(status: u16, body: &str) -> (Outcome, String) {
    match status {
        200..=299 => (Outcome::Success, body.to_string()),
        300..=399 => (
            Outcome::Warning,
            format!("Probe terminated redirects, Response body: {body}"),
        ),
        _ => (
            Outcome::Failure,
            format!("HTTP probe failed with statuscode: {status}"),
        ),
    }
}

/// What to do with a response (Go's `redirectBehavior` + the prober's `RedirectChecker`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    /// Not a followed redirect status, or no Location: this is the final response.
    Done,
    Follow {
        to: ProbeUrl,
        relative: bool,
    },
    /// Another host name: the 3xx itself is the final response (a Warning).
    UseLastResponse,
    /// `stopped after 10 redirects` (an error naming the Location).
    TooMany(String),
    BadLocation {
        location: String,
        error: String,
    },
}

/// `requests_made` counts the requests sent so far, the first one included (Go's `len(via)`).
pub fn redirect_decision(
    status: u16,
    location: Option<&str>,
    current: &ProbeUrl,
    first_host: &str,
    requests_made: usize,
) -> Redirect {
    if !matches!(status, 301 | 302 | 303 | 307 | 308) {
        return Redirect::Done;
    }
    let Some(location) = location.filter(|l| !l.is_empty()) else {
        return Redirect::Done;
    };
    let (to, absolute) = match current.resolve(location) {
        Ok(r) => r,
        Err(error) => {
            return Redirect::BadLocation {
                location: location.to_string(),
                error,
            }
        }
    };
    if to.host != first_host {
        return Redirect::UseLastResponse;
    }
    if requests_made >= MAX_REDIRECTS {
        return Redirect::TooMany(location.to_string());
    }
    Redirect::Follow {
        to,
        relative: !absolute,
    }
}

type ConnDriver = Fuse<BoxFuture<'static, ()>>;

/// Polls `fut` while keeping the connection task going; a finished connection is never polled
/// again (`Fuse`), so `fut` sees its outcome through hyper's channels.
async fn drive<F: std::future::Future>(conn: &mut ConnDriver, fut: F) -> F::Output {
    tokio::pin!(fut);
    loop {
        tokio::select! {
            biased;
            out = &mut fut => return out,
            _ = &mut *conn => {}
        }
    }
}

/// A response head with its connection still open for the body.
struct Head {
    status: u16,
    location: Option<String>,
    body: Incoming,
    conn: ConnDriver,
}

impl Head {
    /// Reads at most `limit` bytes (upstream `ReadAtMost`; a longer body is cut, not an error).
    async fn read_body(mut self, limit: usize) -> Result<Vec<u8>, String> {
        let mut buf = Vec::new();
        while buf.len() < limit {
            let frame = drive(&mut self.conn, self.body.frame()).await;
            match frame {
                None => break,
                Some(Err(e)) => return Err(e.to_string()),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        buf.extend_from_slice(&data);
                    }
                }
            }
        }
        buf.truncate(limit);
        Ok(buf)
    }
}

/// The HTTP prober: a TLS configuration that accepts any certificate (upstream
/// `InsecureSkipVerify: true`), built once.
#[derive(Debug, Clone)]
pub struct HttpProber {
    tls: Result<Arc<rustls::ClientConfig>, rustls::Error>,
}

impl Default for HttpProber {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpProber {
    pub fn new() -> Self {
        HttpProber {
            tls: insecure_tls_config().map(Arc::new),
        }
    }

    /// Upstream `httpProber.Probe` + `DoHTTPProbe`.
    pub async fn probe(
        &self,
        target: &HttpTarget,
        timeout: Duration,
    ) -> Result<(Outcome, String), ProbeError> {
        let deadline = Instant::now() + timeout;
        let first_host = target.url.host.clone();
        let mut url = target.url.clone();
        let mut host_header = target
            .host_override
            .clone()
            .unwrap_or_else(|| url.authority());
        let mut referer: Option<String> = None;
        let mut requests = 0;
        loop {
            requests += 1;
            let sent = self.send(&url, &host_header, &target.headers, referer.as_deref());
            let head = match tokio::time::timeout_at(deadline, sent).await {
                Err(_) => {
                    return Ok((
                        Outcome::Failure,
                        get_error(
                            &url,
                            "context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
                        ),
                    ))
                }
                Ok(Err(e)) => return Ok((Outcome::Failure, get_error(&url, &e))),
                Ok(Ok(head)) => head,
            };
            match redirect_decision(
                head.status,
                head.location.as_deref(),
                &url,
                &first_host,
                requests,
            ) {
                Redirect::Done | Redirect::UseLastResponse => {}
                Redirect::Follow { to, relative } => {
                    // Go keeps a custom Host header only through relative redirects.
                    if !(relative && host_header != url.authority()) {
                        host_header = to.authority();
                    }
                    referer =
                        (!(url.scheme == "https" && to.scheme == "http")).then(|| url.to_string());
                    url = to;
                    continue;
                }
                Redirect::TooMany(location) => {
                    return Ok((
                        Outcome::Failure,
                        format!("Get {location:?}: stopped after {MAX_REDIRECTS} redirects"),
                    ))
                }
                Redirect::BadLocation { location, error } => {
                    return Ok((
                        Outcome::Failure,
                        get_error(
                            &url,
                            &format!("failed to parse Location header {location:?}: {error}"),
                        ),
                    ))
                }
            }
            let status = head.status;
            let body = match tokio::time::timeout_at(deadline, head.read_body(MAX_OUTPUT_LENGTH))
                .await
            {
                Err(_) => {
                    return Err(ProbeError::Body(
                        "context deadline exceeded (Client.Timeout or context cancellation while reading body)"
                            .into(),
                    ))
                }
                Ok(Err(e)) => return Err(ProbeError::Body(e)),
                Ok(Ok(b)) => b,
            };
            return Ok(classify_status(status, &String::from_utf8_lossy(&body)));
        }
    }

    /// One request on a fresh connection, up to the response head. Errors are Go-like texts.
    async fn send(
        &self,
        url: &ProbeUrl,
        host_header: &str,
        headers: &[(String, String)],
        referer: Option<&str>,
    ) -> Result<Head, String> {
        let mut req = Request::builder()
            .method(Method::GET)
            .uri(url.path.as_str())
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("net/http: invalid request target: {e}"))?;
        let h = req.headers_mut();
        h.insert(
            HOST,
            HeaderValue::from_str(host_header)
                .map_err(|_| format!("http: invalid Host header {host_header:?}"))?,
        );
        for (name, value) in headers {
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("net/http: invalid header field name {name:?}"))?;
            let v = HeaderValue::from_str(value)
                .map_err(|_| format!("net/http: invalid header field value for {name:?}"))?;
            h.append(n, v);
        }
        if let Some(r) = referer.filter(|_| !h.contains_key(REFERER)) {
            if let Ok(v) = HeaderValue::from_str(r) {
                h.insert(REFERER, v);
            }
        }
        h.insert(CONNECTION, HeaderValue::from_static("close"));

        let (mut sender, mut conn) = self.connect(url).await?;
        let resp = drive(&mut conn, sender.send_request(req))
            .await
            .map_err(|e| {
                if e.is_incomplete_message() {
                    "EOF".to_string()
                } else {
                    e.to_string()
                }
            })?;
        let (parts, body) = resp.into_parts();
        Ok(Head {
            status: parts.status.as_u16(),
            location: parts
                .headers
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            body,
            conn,
        })
    }

    async fn connect(
        &self,
        url: &ProbeUrl,
    ) -> Result<
        (
            hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
            ConnDriver,
        ),
        String,
    > {
        if url.scheme != "http" && url.scheme != "https" {
            return Err(format!("unsupported protocol scheme {:?}", url.scheme));
        }
        let tcp = dial(&url.host, url.dial_port()).await?;
        let mut builder = hyper::client::conn::http1::Builder::new();
        builder.title_case_headers(true);
        if url.scheme == "http" {
            let (sender, conn) = builder
                .handshake(TokioIo::new(tcp))
                .await
                .map_err(|e| e.to_string())?;
            return Ok((sender, conn.map(|_| ()).boxed().fuse()));
        }
        let config = self.tls.clone().map_err(|e| format!("tls: {e}"))?;
        let name = rustls::pki_types::ServerName::try_from(url.host.clone())
            .map_err(|e| format!("tls: {e}"))?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        let (sender, conn) = builder
            .handshake(TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
        Ok((sender, conn.map(|_| ()).boxed().fuse()))
    }
}

/// Go's `url.Error` text for a GET: `Get "<url>": <err>`.
fn get_error(url: &ProbeUrl, err: &str) -> String {
    format!("Get {:?}: {err}", url.to_string())
}

/// TLS 1.2/1.3 with ring, any server certificate accepted (signatures on the handshake are still
/// checked, as Go does with `InsecureSkipVerify`, also for a pod serving an X.509 v1 certificate,
/// which rustls' own check would refuse). The verifier is the kubeconfig's
/// `insecure-skip-tls-verify` one.
fn insecure_tls_config() -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(
        rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(
                crate::certificate::tls_verify::NoVerification(provider),
            ))
            .with_no_client_auth(),
    )
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
