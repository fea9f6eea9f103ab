//! Service account tokens for projected volumes (upstream `pkg/kubelet/token`): each token is
//! requested with the TokenRequest API (`POST serviceaccounts/<sa>/token`) bound to the pod, kept
//! in a cache and requested again once it is older than 80% of its lifetime or 24 h, as
//! upstream's token manager does. The Node authorizer and NodeRestriction let a node request
//! tokens only for service accounts of pods bound to it, bound to those pods.
//!
//! The cache is shared by every pod worker (each asks for its own pod's tokens on every sync) and
//! lives behind a mutex that is never held across an await: the requests themselves run
//! unlocked, so a slow API server holds back only the pod that waits for it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};

/// Upstream's `maxTTL`: a token is refreshed after a day whatever its lifetime.
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Upstream's `maxJitter`: spreads the refreshes of many pods.
const MAX_JITTER: Duration = Duration::from_secs(10);

/// Why a token could not be had. Display is what the `FailedMount` event shows.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TokenError {
    /// Standalone mode has no API server to ask.
    #[error("failed to fetch token: no kubeClient defined")]
    NoClient,
    #[error("failed to fetch token: {0}")]
    Api(String),
    #[error("failed to fetch token: the response has no expirationTimestamp")]
    NoExpiration,
    /// A caller asked for a token the sync did not fetch: a bug, reported rather than a panic.
    #[error("service account token {0:?} was not fetched for this pod")]
    NotFetched(TokenSpec),
}

/// What one `serviceAccountToken` projection asks for; the pod and its service account come
/// from the pod.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TokenSpec {
    /// Empty means the API server's own audiences (upstream sends no audience then).
    pub audience: String,
    /// The API server defaults it to 3600 and validates it to at least 600.
    pub expiration_seconds: Option<i64>,
}

/// The tokens one sync fetched for a pod, by what the projections ask for.
#[derive(Debug, Clone, Default)]
pub struct Tokens(pub BTreeMap<TokenSpec, Result<String, TokenError>>);

impl Tokens {
    pub fn get(&self, spec: &TokenSpec) -> Result<&str, TokenError> {
        match self.0.get(spec) {
            Some(Ok(t)) => Ok(t),
            Some(Err(e)) => Err(e.clone()),
            None => Err(TokenError::NotFetched(spec.clone())),
        }
    }
}

/// Every `serviceAccountToken` projection of the pod's projected volumes.
pub fn pod_token_specs(pod: &Pod) -> Vec<TokenSpec> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .filter_map(|s| s.service_account_token.as_ref())
        .map(|t| TokenSpec {
            audience: t.audience.clone().unwrap_or_default(),
            expiration_seconds: t.expiration_seconds,
        })
        .collect()
}

/// Upstream's cache key: service account, namespace, audiences, expiration and the bound pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    service_account: String,
    spec: TokenSpec,
    pod_name: String,
    pod_uid: String,
}

#[derive(Debug, Clone)]
struct Cached {
    token: String,
    expires: Timestamp,
    /// The lifetime the API server granted (its response's `spec.expirationSeconds`).
    expiration_seconds: Option<i64>,
}

/// Upstream `requiresRefresh`: refresh once the token is older than `MAX_TTL` or within 20% of
/// its lifetime of expiring, both brought forward by `jitter` (0 to 10 s in use). Without a
/// lifetime upstream never refreshes (and logs); a token past its expiry always is.
pub fn requires_refresh(
    now: Timestamp,
    expires: Timestamp,
    expiration_seconds: Option<i64>,
    jitter: Duration,
) -> bool {
    let Some(secs) = expiration_seconds else {
        return now >= expires;
    };
    let jitter_s = jitter.as_secs() as i64;
    let exp = expires.as_second();
    let issued = exp - secs;
    let now = now.as_second();
    if now > issued + MAX_TTL.as_secs() as i64 - jitter_s {
        return true;
    }
    now > exp - secs * 20 / 100 - jitter_s
}

/// The kubelet's token manager; cheap to clone.
#[derive(Clone, Default)]
pub struct TokenManager {
    client: Option<Client>,
    cache: Arc<Mutex<HashMap<Key, Cached>>>,
}

impl TokenManager {
    pub fn new(client: Option<Client>) -> Self {
        TokenManager {
            client,
            cache: Arc::default(),
        }
    }

    /// Every token the pod's projected volumes need, from the cache or the API server.
    pub async fn fetch(&self, pod: &Pod) -> Tokens {
        let mut out = Tokens::default();
        for spec in pod_token_specs(pod) {
            if out.0.contains_key(&spec) {
                continue;
            }
            let got = self.get(pod, &spec).await;
            out.0.insert(spec, got);
        }
        out
    }

    /// Upstream `GetServiceAccountToken`: the cached token unless it needs a refresh; a failed
    /// refresh falls back to the cached token while that is still valid.
    pub async fn get(&self, pod: &Pod, spec: &TokenSpec) -> Result<String, TokenError> {
        let key = Key {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            service_account: pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_default(),
            spec: spec.clone(),
            pod_name: pod.metadata.name.clone().unwrap_or_default(),
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
        };
        let now = Timestamp::now();
        let jitter = Duration::from_secs_f64(fastrand::f64() * MAX_JITTER.as_secs_f64());
        let cached = self.lock().get(&key).cloned();
        if let Some(c) = &cached {
            if !requires_refresh(now, c.expires, c.expiration_seconds, jitter) {
                return Ok(c.token.clone());
            }
        }
        match self.request(&key).await {
            Ok(fresh) => {
                let token = fresh.token.clone();
                self.lock().insert(key, fresh);
                Ok(token)
            }
            Err(e) => match cached {
                Some(c) if now < c.expires => {
                    tracing::warn!(error = %e, pod = %key.pod_name, "token refresh failed, using the cached token");
                    Ok(c.token)
                }
                _ => Err(e),
            },
        }
    }

    async fn request(&self, key: &Key) -> Result<Cached, TokenError> {
        let client = self.client.clone().ok_or(TokenError::NoClient)?;
        let req = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: (!key.spec.audience.is_empty()).then(|| vec![key.spec.audience.clone()]),
                expiration_seconds: key.spec.expiration_seconds,
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(key.pod_name.clone()),
                    uid: Some(key.pod_uid.clone()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let api = Api::<ServiceAccount>::namespaced(client, &key.namespace);
        let resp = api
            .create_token_request(&key.service_account, &PostParams::default(), &req)
            .await
            .map_err(|e| TokenError::Api(e.to_string()))?;
        let status = resp.status.ok_or(TokenError::NoExpiration)?;
        let expires = status
            .expiration_timestamp
            .ok_or(TokenError::NoExpiration)?;
        Ok(Cached {
            token: status.token.unwrap_or_default(),
            expires: expires.0,
            expiration_seconds: resp.spec.and_then(|s| s.expiration_seconds),
        })
    }

    /// Drops the tokens bound to a pod that is gone (upstream `DeleteServiceAccountToken`), and
    /// any that expired meanwhile (upstream's periodic cleanup).
    pub fn forget_pod(&self, uid: &str) {
        let now = Timestamp::now();
        self.lock()
            .retain(|k, c| k.pod_uid != uid && now < c.expires);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Cached>> {
        // The map stays consistent even if a holder panicked: every update is one insert.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn refreshes_at_eighty_percent_of_the_lifetime() {
        // Issued at 1000 for 600 s: expires at 1600, refreshed after 1000 + 480 = 1480.
        let exp = ts(1600);
        let no_jitter = Duration::ZERO;
        assert!(!requires_refresh(ts(1000), exp, Some(600), no_jitter));
        assert!(!requires_refresh(ts(1480), exp, Some(600), no_jitter));
        assert!(requires_refresh(ts(1481), exp, Some(600), no_jitter));
        assert!(requires_refresh(ts(1700), exp, Some(600), no_jitter));
        // Jitter brings the refresh forward.
        assert!(requires_refresh(
            ts(1475),
            exp,
            Some(600),
            Duration::from_secs(10)
        ));
        // The default hour: refreshed after 48 minutes.
        let exp = ts(3600);
        assert!(!requires_refresh(ts(2880), exp, Some(3600), no_jitter));
        assert!(requires_refresh(ts(2881), exp, Some(3600), no_jitter));
    }

    #[test]
    fn long_lived_tokens_refresh_after_a_day() {
        // A year-long token (an extended kube-api-access one) is refreshed after 24 h.
        let year = 365 * 24 * 3600;
        let exp = ts(year);
        assert!(!requires_refresh(
            ts(24 * 3600),
            exp,
            Some(year),
            Duration::ZERO
        ));
        assert!(requires_refresh(
            ts(24 * 3600 + 1),
            exp,
            Some(year),
            Duration::ZERO
        ));
    }

    #[test]
    fn without_a_lifetime_only_expiry_counts() {
        assert!(!requires_refresh(ts(100), ts(200), None, Duration::ZERO));
        assert!(requires_refresh(ts(200), ts(200), None, Duration::ZERO));
    }

    #[test]
    fn specs_come_from_projected_volumes() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "volumes": [
                {"name": "a", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 600}},
                    {"serviceAccountToken": {"path": "vault", "audience": "vault", "expirationSeconds": 3600}}
                ]}},
                {"name": "b", "emptyDir": {}}
            ]}
        }))
        .unwrap();
        assert_eq!(
            pod_token_specs(&pod),
            vec![
                TokenSpec {
                    audience: String::new(),
                    expiration_seconds: Some(600)
                },
                TokenSpec {
                    audience: "vault".into(),
                    expiration_seconds: Some(3600)
                },
            ]
        );
    }

    /// A fake API server answering TokenRequests: token `t<n>` for the n-th request, expiring
    /// `expires_in` seconds from now with the lifetime asked for; 500 while `fail` is set.
    #[derive(Clone, Default)]
    struct FakeApi {
        calls: Arc<std::sync::atomic::AtomicUsize>,
        expires_in: Arc<std::sync::atomic::AtomicI64>,
        fail: Arc<std::sync::atomic::AtomicBool>,
        last: Arc<Mutex<Option<(String, serde_json::Value)>>>,
    }

    impl FakeApi {
        fn client(&self) -> Client {
            use http_body_util::{BodyExt, Full};
            use std::sync::atomic::Ordering;
            let me = self.clone();
            let svc = tower::service_fn(move |req: hyper::Request<kube::client::Body>| {
                let me = me.clone();
                async move {
                    let n = me.calls.fetch_add(1, Ordering::SeqCst) + 1;
                    let path = req.uri().path().to_string();
                    let body = req.into_body().collect().await?.to_bytes();
                    let asked: serde_json::Value = serde_json::from_slice(&body)?;
                    *me.last.lock().unwrap() = Some((path, asked.clone()));
                    let (status, out) = if me.fail.load(Ordering::SeqCst) {
                        (
                            500,
                            serde_json::json!({"kind": "Status", "apiVersion": "v1",
                            "status": "Failure", "message": "etcd is down", "code": 500}),
                        )
                    } else {
                        let exp =
                            Timestamp::now().as_second() + me.expires_in.load(Ordering::SeqCst);
                        let mut resp = asked.clone();
                        resp["status"] = serde_json::json!({
                            "token": format!("t{n}"),
                            "expirationTimestamp": Timestamp::from_second(exp)?.to_string(),
                        });
                        (201, resp)
                    };
                    let resp = hyper::Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(Full::new(hyper::body::Bytes::from(out.to_string())))?;
                    Ok::<_, Box<dyn std::error::Error + Send + Sync>>(resp)
                }
            });
            Client::new(svc, "default")
        }
    }

    fn token_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
            "spec": {"containers": [], "serviceAccountName": "robot"}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn tokens_are_requested_bound_cached_and_refreshed() {
        use std::sync::atomic::Ordering;
        let api = FakeApi::default();
        api.expires_in.store(600, Ordering::SeqCst);
        let tm = TokenManager::new(Some(api.client()));
        let pod = token_pod();
        let spec = TokenSpec {
            audience: "vault".into(),
            expiration_seconds: Some(600),
        };
        assert_eq!(tm.get(&pod, &spec).await.unwrap(), "t1");
        let (path, asked) = api.last.lock().unwrap().clone().unwrap();
        assert_eq!(path, "/api/v1/namespaces/ns/serviceaccounts/robot/token");
        assert_eq!(asked["spec"]["audiences"], serde_json::json!(["vault"]));
        assert_eq!(asked["spec"]["expirationSeconds"], 600);
        assert_eq!(
            asked["spec"]["boundObjectRef"],
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-1"})
        );
        // Fresh: served from the cache.
        assert_eq!(tm.get(&pod, &spec).await.unwrap(), "t1");
        assert_eq!(api.calls.load(Ordering::SeqCst), 1);

        // Another pod (uid) or audience is another token.
        let mut other = pod.clone();
        other.metadata.uid = Some("u-2".into());
        assert_eq!(tm.get(&other, &spec).await.unwrap(), "t2");

        // A token already past 80% of its lifetime is requested again.
        api.expires_in.store(100, Ordering::SeqCst);
        tm.forget_pod("u-1");
        assert_eq!(tm.get(&pod, &spec).await.unwrap(), "t3");
        assert_eq!(tm.get(&pod, &spec).await.unwrap(), "t4");
        // A failed refresh keeps the cached token while it is valid.
        api.fail.store(true, Ordering::SeqCst);
        assert_eq!(tm.get(&pod, &spec).await.unwrap(), "t4");
        assert_eq!(api.calls.load(Ordering::SeqCst), 5);
        // Without a cached token the failure is reported.
        tm.forget_pod("u-1");
        let err = tm.get(&pod, &spec).await.unwrap_err();
        assert!(
            err.to_string().starts_with("failed to fetch token: ")
                && err.to_string().contains("etcd is down"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn standalone_has_no_tokens() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"containers": [], "serviceAccountName": "default", "volumes": [
                {"name": "a", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
            ]}
        }))
        .unwrap();
        let tokens = TokenManager::new(None).fetch(&pod).await;
        let spec = TokenSpec {
            audience: String::new(),
            expiration_seconds: None,
        };
        assert_eq!(tokens.get(&spec), Err(TokenError::NoClient));
    }
}
