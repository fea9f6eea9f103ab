//! Manifest URL source (upstream `config/http.go`): GET `staticPodURL` with the
//! `staticPodURLHeader` headers every `httpCheckFrequency`; the body is a Pod or a PodList (YAML or
//! JSON) decoded and defaulted exactly as a static pod file ([`parse_manifest`] with
//! [`Origin::Url`]: name suffixed `-<node>`, UID from the content and the URL,
//! `kubernetes.io/config.source: http`).
//!
//! As upstream: a request that fails (unreachable, timeout, non-200, body over 10 MiB) or a body
//! that does not decode keeps the pods the URL gave last and is logged with the URL and the
//! reason (the first three failures in a row as warnings, later ones at debug level, a recovery
//! once); an empty 200 body is an empty pod list (the URL's pods are removed) and is logged too.
//! Until the URL has answered once with a list (possibly empty), the source is not "seen", so
//! housekeeping does not remove runtime pods it may still want (upstream `sourcesReady`).
//!
//! One deliberate difference: upstream remembers the last body and skips an identical one even
//! after an empty body removed the pods, so the same manifest coming back does not restore them
//! until it changes; here it does.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio_rustls::rustls;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::static_pod::{parse_manifest, ManifestError, Origin};
use super::{SourceMsg, SourceSnapshot, HTTP_SOURCE};

/// Upstream's `http.Client{Timeout: 10 * time.Second}`: the whole request, body included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Upstream `maxConfigLength` (10 MiB): a longer body is an error.
pub const MAX_BODY: usize = 10 << 20;
/// Failures in a row logged as warnings before the rest go to debug level (upstream's
/// `failureLogs`).
const LOUD_FAILURES: u32 = 3;

/// Why a poll of the URL gave no pods.
#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    #[error("{url}: not a valid URL: {message}")]
    BadUrl { url: String, message: String },
    #[error("GET {url}: {message}")]
    Request { url: String, message: String },
    #[error("GET {url}: no complete answer within {}s", REQUEST_TIMEOUT.as_secs())]
    Timeout { url: String },
    #[error("{url}: {status}")]
    Status { url: String, status: String },
    #[error("{url}: the body is larger than {MAX_BODY} bytes")]
    TooLarge { url: String },
    #[error("zero-length data received from {url}")]
    Empty { url: String },
    #[error("{url}: couldn't parse as a Pod or PodList: {source}")]
    Manifest {
        url: String,
        #[source]
        source: ManifestError,
    },
}

/// What the GET brought back: the status and the body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Vec<u8>,
}

/// What one poll means for the pods: a new list for the mux (if any) and what to log.
#[derive(Debug)]
pub struct Outcome {
    pub send: Option<Vec<Pod>>,
    pub error: Option<UrlError>,
}

/// What the source remembers between polls: the last body that decoded (upstream `s.data`).
#[derive(Debug, Default)]
pub struct UrlState {
    last_good: Option<Vec<u8>>,
}

impl UrlState {
    /// Upstream `extractFromURL` after the GET: non-200 and decoding errors keep the last pods,
    /// an empty body removes them, an unchanged body does nothing.
    pub fn interpret(
        &mut self,
        url: &str,
        node_name: &str,
        answer: Result<Answer, UrlError>,
    ) -> Outcome {
        let fail = |error| Outcome {
            send: None,
            error: Some(error),
        };
        let answer = match answer {
            Ok(a) => a,
            Err(e) => return fail(e),
        };
        if answer.status != StatusCode::OK {
            return fail(UrlError::Status {
                url: url.to_string(),
                status: answer.status.to_string(),
            });
        }
        if answer.body.is_empty() {
            // Upstream sends an empty list so the source counts as seen, and reports the error.
            self.last_good = None;
            return Outcome {
                send: Some(Vec::new()),
                error: Some(UrlError::Empty {
                    url: url.to_string(),
                }),
            };
        }
        if self.last_good.as_deref() == Some(answer.body.as_slice()) {
            return Outcome {
                send: None,
                error: None,
            };
        }
        let text = String::from_utf8_lossy(&answer.body);
        match parse_manifest(&text, Origin::Url(url), node_name) {
            Ok(pods) => {
                self.last_good = Some(answer.body);
                Outcome {
                    send: Some(pods),
                    error: None,
                }
            }
            Err(source) => fail(UrlError::Manifest {
                url: url.to_string(),
                source,
            }),
        }
    }
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// Polls the manifest URL and sends a snapshot whenever its pods change.
pub struct UrlSource {
    url: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    node_name: String,
    period: Duration,
    tx: mpsc::Sender<SourceMsg>,
    /// The error instead when no TLS client configuration could be made.
    client: Result<HttpClient, String>,
    state: UrlState,
    failures: u32,
}

impl UrlSource {
    /// `headers` as upstream's `http.Header` from `staticPodURLHeader`: every value of a name is
    /// sent. Names or values HTTP cannot carry were refused by config validation; any left are
    /// skipped with a warning.
    pub fn new(
        url: String,
        headers: &[(String, String)],
        node_name: String,
        period: Duration,
        tx: mpsc::Sender<SourceMsg>,
    ) -> Self {
        let headers = headers
            .iter()
            .filter_map(|(k, v)| {
                match (
                    HeaderName::from_bytes(k.as_bytes()),
                    HeaderValue::from_str(v),
                ) {
                    (Ok(k), Ok(v)) => Some((k, v)),
                    _ => {
                        warn!(header = %k, "staticPodURLHeader: not a valid HTTP header; not sent");
                        None
                    }
                }
            })
            .collect();
        UrlSource {
            url,
            headers,
            node_name,
            period,
            tx,
            client: connector().map(|c| Client::builder(TokioExecutor::new()).build(c)),
            state: UrlState::default(),
            failures: 0,
        }
    }

    /// Upstream `wait.Until(run, period)`: a poll now, then one every period.
    pub async fn run(mut self, cancel: CancellationToken) {
        info!(url = %self.url, every = ?self.period, "watching the manifest URL");
        let mut tick = tokio::time::interval(self.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let answer = tokio::select! {
                _ = cancel.cancelled() => return,
                a = self.fetch() => a,
            };
            let out = self.state.interpret(&self.url, &self.node_name, answer);
            if let Some(pods) = out.send {
                if !pods.is_empty() {
                    debug!(url = %self.url, pods = pods.len(), "read pods from the manifest URL");
                }
                let snap = SourceSnapshot {
                    source: HTTP_SOURCE,
                    pods: pods.into_iter().map(Arc::new).collect(),
                };
                if self.tx.send(snap.into()).await.is_err() {
                    return;
                }
            }
            self.log(out.error);
        }
    }

    /// Upstream's `run` logging: loud for the first failures, quiet after, one line on recovery.
    fn log(&mut self, error: Option<UrlError>) {
        let Some(e) = error else {
            if self.failures > 0 {
                info!(url = %self.url, "successfully read pods from the manifest URL");
                self.failures = 0;
            }
            return;
        };
        let consequence = match e {
            UrlError::Empty { .. } => "its pods are removed",
            _ => "its pods stay as they were",
        };
        match self.failures {
            n if n < LOUD_FAILURES => {
                warn!(url = %self.url, error = %e, "failed to read pods from the manifest URL; {consequence}")
            }
            LOUD_FAILURES => {
                warn!(url = %self.url, error = %e, "failed to read pods from the manifest URL; {consequence}; further failures are logged at debug level")
            }
            _ => {
                debug!(url = %self.url, error = %e, "failed to read pods from the manifest URL; {consequence}")
            }
        }
        self.failures = self.failures.saturating_add(1);
    }

    async fn fetch(&self) -> Result<Answer, UrlError> {
        let url = &self.url;
        let uri: Uri = url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| UrlError::BadUrl {
                url: url.clone(),
                message: e.to_string(),
            })?;
        let mut req = Request::get(uri);
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        let req = req.body(Empty::new()).map_err(|e| UrlError::BadUrl {
            url: url.clone(),
            message: e.to_string(),
        })?;
        let request_err = |message: String| UrlError::Request {
            url: url.clone(),
            message,
        };
        let client = self.client.as_ref().map_err(|m| request_err(m.clone()))?;
        let exchange = async {
            let resp = client
                .request(req)
                .await
                .map_err(|e| request_err(error_chain(&e)))?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        UrlError::TooLarge { url: url.clone() }
                    } else {
                        request_err(format!("reading the body: {e}"))
                    }
                })?
                .to_bytes()
                .to_vec();
            Ok(Answer { status, body })
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| Err(UrlError::Timeout { url: url.clone() }))
    }
}

/// An error with its causes (hyper's own says only "client error (Connect)").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}

/// http and https; https checked against the system's roots, as Go's default transport does.
/// Without readable system roots an https URL fails (logged at every poll), http still works.
fn connector() -> Result<HttpsConnector<HttpConnector>, String> {
    let provider = rustls::crypto::ring::default_provider();
    let builder = match hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider.clone())
    {
        Ok(b) => b,
        Err(e) => {
            warn!(error = %e, "no system root certificates: an https manifest URL cannot be verified");
            let cfg = rustls::ClientConfig::builder_with_provider(provider.into())
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS client configuration: {e}"))?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(cfg)
        }
    };
    Ok(builder.https_or_http().enable_http1().build())
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
