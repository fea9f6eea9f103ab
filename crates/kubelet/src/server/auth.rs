//! Authentication and authorization of the 10250 server (upstream `pkg/kubelet/server/auth.go`,
//! `k8s.io/apiserver/pkg/authentication` and the delegating webhook authorizer).
//!
//! Who: a verified x509 client cert (CN = user, O = groups), else a bearer token reviewed by the
//! API server (TokenReview), else anonymous when enabled. What: a SubjectAccessReview for
//! `nodes/<subresource>` of this node, with the verb from the HTTP method.
//!
//! Both webhook answers are cached in a small TTL map behind a mutex rather than in a task: a
//! lookup is a hash probe done inline on every request, and a task would add a channel round trip
//! per request for no gain in clarity.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use tracing::debug;

use crate::config::{Authentication, Authorization, AuthorizationMode};

/// Upstream `user.Info`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

pub const ANONYMOUS_USER: &str = "system:anonymous";
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// Errors of the webhooks; the request then fails (401 for authentication, 500 for
/// authorization), as upstream does for webhook errors.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("TokenReview: {0}")]
    TokenReview(#[source] kube::Error),
    #[error("SubjectAccessReview: {0}")]
    SubjectAccessReview(#[source] kube::Error),
    #[error("{0} is configured but the kubelet has no API server client (no --kubeconfig)")]
    NoClient(&'static str),
}

/// Upstream `GetRequestAttributes` verb mapping; other methods map to "" as upstream.
pub fn verb(method: &str) -> &'static str {
    match method {
        "POST" => "create",
        "GET" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
}

/// The verb a request is authorized with: the method's, except that the streaming endpoints are
/// always `create`. A websocket exec is a GET, and mapping it to `get` would let anyone allowed
/// to read `nodes/proxy` (monitoring agents) run commands in every container; the API server
/// closed the same hole for `pods/exec` (KEP-4006) and upstream's kubelet fix does it this way
/// (kubernetes#136550). The API server's own kubelet client has `create` on `nodes/proxy`.
pub fn request_verb(method: &str, path: &str) -> &'static str {
    let streaming = ["/exec", "/attach", "/portForward", "/run"]
        .iter()
        .any(|p| is_subpath(path, p));
    if streaming {
        "create"
    } else {
        verb(method)
    }
}

/// Upstream `isSubpath`: `path` itself or anything below it.
fn is_subpath(sub: &str, path: &str) -> bool {
    let path = path.trim_end_matches('/');
    sub == path || (sub.starts_with(path) && sub.as_bytes().get(path.len()) == Some(&b'/'))
}

/// The `nodes` subresources a request is checked against, in order; the first allowed wins
/// (upstream `GetRequestAttributes`). Everything not named maps to `proxy`; with fine-grained
/// authorization `/pods`, `/healthz` and `/configz` try their own subresource before `proxy`.
pub fn subresources(path: &str, fine_grained: bool) -> Vec<&'static str> {
    let specific = [
        ("/stats/", "stats"),
        ("/metrics", "metrics"),
        ("/logs/", "log"),
        ("/spec/", "spec"),
        ("/checkpoint/", "checkpoint"),
    ];
    if let Some((_, s)) = specific.iter().find(|(p, _)| is_subpath(path, p)) {
        return vec![s];
    }
    if fine_grained {
        for (p, s) in [
            ("/pods", "pods"),
            ("/healthz", "healthz"),
            ("/configz", "configz"),
        ] {
            if is_subpath(path, p) {
                return vec![s, "proxy"];
            }
        }
    }
    vec!["proxy"]
}

/// Upstream's 403 body.
pub fn forbidden_message(user: &str, verb: &str, subresources: &[&str]) -> String {
    format!(
        "Forbidden (user={user}, verb={verb}, resource=nodes, subresource(s)=[{}])",
        subresources.join(" ")
    )
}

/// A TTL map with a size bound: entries expire on read; when full, expired entries go first,
/// then everything (a burst of distinct keys must not grow memory without bound).
#[derive(Debug)]
pub struct TtlCache<K, V> {
    entries: HashMap<K, (V, Instant)>,
    max: usize,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub fn new(max: usize) -> Self {
        TtlCache {
            entries: HashMap::new(),
            max,
        }
    }
    pub fn get(&mut self, k: &K, now: Instant) -> Option<V> {
        match self.entries.get(k) {
            Some((v, until)) if *until > now => Some(v.clone()),
            Some(_) => {
                self.entries.remove(k);
                None
            }
            None => None,
        }
    }
    pub fn insert(&mut self, k: K, v: V, ttl: Duration, now: Instant) {
        if ttl.is_zero() {
            return;
        }
        if self.entries.len() >= self.max {
            self.entries.retain(|_, (_, until)| *until > now);
            if self.entries.len() >= self.max {
                self.entries.clear();
            }
        }
        self.entries.insert(k, (v, now + ttl));
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

const CACHE_SIZE: usize = 4096;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the guard leaves a cache that is still a valid map.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Upstream's delegating authenticator: x509, then bearer token, then anonymous.
pub struct Authenticator {
    anonymous: bool,
    webhook: bool,
    ttl: Duration,
    client: Option<kube::Client>,
    /// SHA-256 of the token -> the user it reviewed to (None: not authenticated).
    cache: Mutex<TtlCache<[u8; 32], Option<UserInfo>>>,
}

/// The user of a verified client cert: CN, O groups (upstream `x509.CommonNameUserConversion`).
pub fn user_from_cert(der: &[u8]) -> Option<UserInfo> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some(UserInfo {
        name,
        groups,
        ..Default::default()
    })
}

/// Upstream `AuthenticatedGroupAdder`: every authenticated user is in `system:authenticated`.
fn add_authenticated_group(mut u: UserInfo) -> UserInfo {
    if !u.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        u.groups.push(AUTHENTICATED_GROUP.to_string());
    }
    u
}

impl Authenticator {
    pub fn new(cfg: &Authentication, client: Option<kube::Client>) -> Self {
        Authenticator {
            anonymous: cfg.anonymous_enabled,
            webhook: cfg.webhook_enabled,
            ttl: cfg.webhook_cache_ttl,
            client,
            cache: Mutex::new(TtlCache::new(CACHE_SIZE)),
        }
    }

    /// The request's user, or None (401). `cert` is the already verified client cert's user;
    /// `token` the bearer token. A token that does not authenticate is a 401 even with anonymous
    /// access on (upstream `unionauth.NewFailOnError`).
    pub async fn authenticate(
        &self,
        cert: Option<&UserInfo>,
        token: Option<&str>,
    ) -> Result<Option<UserInfo>, AuthError> {
        if let Some(u) = cert {
            return Ok(Some(add_authenticated_group(u.clone())));
        }
        // Without the webhook there is no token authenticator: a token is simply not looked at
        // and the request goes on as anonymous (or 401), as upstream's union does.
        if let Some(token) = token.filter(|t| !t.is_empty() && self.webhook) {
            return Ok(self.review_token(token).await?.map(add_authenticated_group));
        }
        Ok(self.anonymous.then(|| UserInfo {
            name: ANONYMOUS_USER.into(),
            groups: vec![UNAUTHENTICATED_GROUP.into()],
            ..Default::default()
        }))
    }

    async fn review_token(&self, token: &str) -> Result<Option<UserInfo>, AuthError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(hit) = lock(&self.cache).get(&key, Instant::now()) {
            return Ok(hit);
        }
        let client = self
            .client
            .clone()
            .ok_or(AuthError::NoClient("authentication.webhook"))?;
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: None,
            },
            ..Default::default()
        };
        let out = Api::<TokenReview>::all(client)
            .create(&PostParams::default(), &review)
            .await
            .map_err(AuthError::TokenReview)?;
        let status = out.status.unwrap_or_default();
        let user = status
            .authenticated
            .unwrap_or(false)
            .then(|| {
                let u = status.user.unwrap_or_default();
                UserInfo {
                    name: u.username.unwrap_or_default(),
                    uid: u.uid.unwrap_or_default(),
                    groups: u.groups.unwrap_or_default(),
                    extra: u.extra.unwrap_or_default(),
                }
            })
            .filter(|u| !u.name.is_empty());
        debug!(user = ?user.as_ref().map(|u| &u.name), error = ?status.error, "TokenReview");
        lock(&self.cache).insert(key, user.clone(), self.ttl, Instant::now());
        Ok(user)
    }
}

/// Upstream's kubelet authorizer: AlwaysAllow or the SubjectAccessReview webhook.
pub struct Authorizer {
    mode: AuthorizationMode,
    allowed_ttl: Duration,
    denied_ttl: Duration,
    node_name: String,
    client: Option<kube::Client>,
    /// The review's spec as JSON (what upstream keys on) -> allowed.
    cache: Mutex<TtlCache<String, bool>>,
}

/// What the webhook is asked (upstream `authorizer.AttributesRecord` -> SAR spec).
pub fn review_spec(
    user: &UserInfo,
    verb: &str,
    node_name: &str,
    subresource: &str,
) -> SubjectAccessReviewSpec {
    SubjectAccessReviewSpec {
        user: Some(user.name.clone()),
        uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
        groups: Some(user.groups.clone()),
        extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
        resource_attributes: Some(ResourceAttributes {
            verb: Some(verb.to_string()),
            group: Some(String::new()),
            version: Some("v1".into()),
            resource: Some("nodes".into()),
            subresource: Some(subresource.to_string()),
            name: Some(node_name.to_string()),
            namespace: Some(String::new()),
            ..Default::default()
        }),
        non_resource_attributes: None,
    }
}

impl Authorizer {
    pub fn new(cfg: &Authorization, node_name: String, client: Option<kube::Client>) -> Self {
        Authorizer {
            mode: cfg.mode,
            allowed_ttl: cfg.cache_authorized_ttl,
            denied_ttl: cfg.cache_unauthorized_ttl,
            node_name,
            client,
            cache: Mutex::new(TtlCache::new(CACHE_SIZE)),
        }
    }

    /// Whether `user` may `verb` `nodes/<subresource>` of this node.
    pub async fn authorize(
        &self,
        user: &UserInfo,
        verb: &str,
        subresource: &str,
    ) -> Result<bool, AuthError> {
        if self.mode == AuthorizationMode::AlwaysAllow {
            return Ok(true);
        }
        let spec = review_spec(user, verb, &self.node_name, subresource);
        let key = serde_json::to_string(&spec).unwrap_or_default();
        if let Some(hit) = lock(&self.cache).get(&key, Instant::now()) {
            return Ok(hit);
        }
        let client = self
            .client
            .clone()
            .ok_or(AuthError::NoClient("authorization mode Webhook"))?;
        let review = SubjectAccessReview {
            spec,
            ..Default::default()
        };
        let out = Api::<SubjectAccessReview>::all(client)
            .create(&PostParams::default(), &review)
            .await
            .map_err(AuthError::SubjectAccessReview)?;
        let allowed = out.status.is_some_and(|s| s.allowed);
        let ttl = if allowed {
            self.allowed_ttl
        } else {
            self.denied_ttl
        };
        lock(&self.cache).insert(key, allowed, ttl, Instant::now());
        Ok(allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_follow_the_http_method() {
        for (m, v) in [
            ("GET", "get"),
            ("POST", "create"),
            ("PUT", "update"),
            ("PATCH", "patch"),
            ("DELETE", "delete"),
            ("HEAD", ""),
        ] {
            assert_eq!(verb(m), v, "{m}");
        }
    }

    #[test]
    fn streaming_endpoints_always_need_create() {
        for path in [
            "/exec/ns/p/c",
            "/attach/ns/p/uid/c",
            "/portForward/ns/p",
            "/run/ns/p/c",
        ] {
            assert_eq!(request_verb("GET", path), "create", "{path}");
            assert_eq!(request_verb("POST", path), "create", "{path}");
        }
        assert_eq!(request_verb("GET", "/pods"), "get");
        assert_eq!(request_verb("GET", "/executor"), "get");
        assert_eq!(request_verb("POST", "/pods"), "create");
    }

    #[test]
    fn subresources_by_path_as_upstream() {
        for (path, fine, want) in [
            ("/stats/summary", false, vec!["stats"]),
            ("/stats", false, vec!["stats"]),
            ("/statsx", false, vec!["proxy"]),
            ("/metrics", false, vec!["metrics"]),
            ("/metrics/cadvisor", false, vec!["metrics"]),
            ("/logs/syslog", false, vec!["log"]),
            ("/spec/", false, vec!["spec"]),
            ("/containerLogs/ns/p/c", false, vec!["proxy"]),
            ("/exec/ns/p/c", true, vec!["proxy"]),
            ("/pods", false, vec!["proxy"]),
            ("/pods", true, vec!["pods", "proxy"]),
            ("/pods/", true, vec!["pods", "proxy"]),
            ("/runningpods/", true, vec!["proxy"]),
            ("/healthz", false, vec!["proxy"]),
            ("/healthz", true, vec!["healthz", "proxy"]),
            ("/healthz/ping", true, vec!["healthz", "proxy"]),
            ("/configz", true, vec!["configz", "proxy"]),
        ] {
            assert_eq!(subresources(path, fine), want, "{path} fine={fine}");
        }
    }

    #[test]
    fn forbidden_message_is_upstreams() {
        assert_eq!(
            forbidden_message("bob", "get", &["pods", "proxy"]),
            "Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[pods proxy])"
        );
    }

    #[test]
    fn review_spec_names_this_node() {
        let u = UserInfo {
            name: "alice".into(),
            groups: vec!["g".into()],
            ..Default::default()
        };
        let s = review_spec(&u, "get", "n1", "log");
        assert_eq!(s.user.as_deref(), Some("alice"));
        assert_eq!(s.uid, None);
        let r = s.resource_attributes.unwrap();
        assert_eq!(
            (
                r.verb.as_deref(),
                r.resource.as_deref(),
                r.subresource.as_deref(),
                r.name.as_deref(),
                r.version.as_deref()
            ),
            (
                Some("get"),
                Some("nodes"),
                Some("log"),
                Some("n1"),
                Some("v1")
            )
        );
    }

    #[test]
    fn cache_entries_expire_and_size_is_bounded() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(2);
        c.insert("a", true, Duration::from_secs(300), t0);
        c.insert("b", false, Duration::from_secs(30), t0);
        assert_eq!(c.get(&"a", t0 + Duration::from_secs(29)), Some(true));
        assert_eq!(c.get(&"b", t0 + Duration::from_secs(29)), Some(false));
        assert_eq!(c.get(&"b", t0 + Duration::from_secs(31)), None);
        assert_eq!(c.len(), 1, "the expired entry is dropped on read");
        assert_eq!(c.get(&"a", t0 + Duration::from_secs(301)), None);
        // Full: expired entries make room first.
        let mut c = TtlCache::new(2);
        c.insert("a", 1, Duration::from_secs(1), t0);
        c.insert("b", 2, Duration::from_secs(100), t0);
        c.insert(
            "c",
            3,
            Duration::from_secs(100),
            t0 + Duration::from_secs(2),
        );
        assert_eq!(c.get(&"b", t0 + Duration::from_secs(2)), Some(2));
        assert_eq!(c.get(&"c", t0 + Duration::from_secs(2)), Some(3));
        // A zero TTL caches nothing.
        let mut c = TtlCache::new(2);
        c.insert("a", 1, Duration::ZERO, t0);
        assert!(c.is_empty());
    }

    #[tokio::test]
    async fn x509_first_then_token_then_anonymous() {
        let mut cfg = Authentication {
            anonymous_enabled: true,
            webhook_enabled: false,
            ..Default::default()
        };
        let a = Authenticator::new(&cfg, None);
        let cert = UserInfo {
            name: "kube-apiserver-kubelet-client".into(),
            groups: vec!["org".into()],
            ..Default::default()
        };
        let u = a
            .authenticate(Some(&cert), Some("t"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(u.groups, vec!["org", AUTHENTICATED_GROUP]);
        // Without the token webhook a token is ignored: anonymous.
        let anon = a.authenticate(None, Some("t")).await.unwrap().unwrap();
        assert_eq!(anon.name, ANONYMOUS_USER);
        let anon = a.authenticate(None, None).await.unwrap().unwrap();
        assert_eq!(anon.name, ANONYMOUS_USER);
        assert_eq!(anon.groups, vec![UNAUTHENTICATED_GROUP]);
        cfg.anonymous_enabled = false;
        let a = Authenticator::new(&cfg, None);
        assert_eq!(a.authenticate(None, None).await.unwrap(), None);
        // Webhook on without a client: an error (401), never anonymous.
        cfg.webhook_enabled = true;
        let a = Authenticator::new(&cfg, None);
        assert!(a.authenticate(None, Some("t")).await.is_err());
    }
}
