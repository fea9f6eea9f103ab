//! Certificate rotation (upstream `certificate.Manager`): one task per certificate renews it at a
//! jittered 70-90% of its lifetime with a fresh key and a CSR, then swaps it in without a restart.
//!
//! Client cert: every manager holds a `kube::Client`; rather than threading a new one to each, the
//! kubelet's client is a thin `kube::Client` over a [`ClientSlot`] that forwards each request to
//! the current inner client. Rotation builds a new inner client (new connection pool, new cert)
//! and swaps it in: new requests use the new cert at once; requests already in flight (watches)
//! finish on the old connections, which close with the old pool. Upstream instead closes every
//! connection on rotation; here a watch in progress stays on the old cert until the server ends
//! it (the apiserver authenticates a request once, at its start).
//!
//! Serving cert: the 10250 server resolves its certificate per handshake from [`ServingCert`].

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use tokio_rustls::rustls::{
    self,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::csr::{self, Request};
use super::{CertError, CertKey, Store};

/// Upstream retries a failed rotation with backoff: 1 s doubling, capped at a minute between
/// attempts.
const RETRY: crate::backoff::Exponential =
    crate::backoff::Exponential::new(Duration::from_secs(1), Duration::from_secs(60));
/// One CSR's wait for approval and issuance before trying again with a new one.
const CSR_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The swappable inner client behind the kubelet's `kube::Client`.
#[derive(Clone)]
pub struct ClientSlot(Arc<RwLock<kube::Client>>);

impl ClientSlot {
    /// The kubelet's client (hand this to every manager) and the slot that rotation swaps.
    pub fn new(initial: kube::Client) -> (kube::Client, ClientSlot) {
        let ns = initial.default_namespace().to_string();
        let slot = ClientSlot(Arc::new(RwLock::new(initial)));
        let inner = slot.clone();
        let svc = tower::service_fn(move |req: hyper::Request<kube::client::Body>| {
            let client = inner.current();
            async move { client.send(req).await }
        });
        (kube::Client::new(svc, ns), slot)
    }

    fn current(&self) -> kube::Client {
        match self.0.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn swap(&self, client: kube::Client) {
        match self.0.write() {
            Ok(mut c) => *c = client,
            Err(poisoned) => *poisoned.into_inner() = client,
        }
    }
}

/// Parses a cert chain and key into what rustls serves.
fn certified(ck: &CertKey) -> Result<CertifiedKey, CertError> {
    pair(ck, "serving certificate")
}

/// `ck` as a key and the chain it certifies (upstream `tls.X509KeyPair`): the certs parse and the
/// key is the first cert's. `what` names the pair in the error.
pub fn pair(ck: &CertKey, what: &str) -> Result<CertifiedKey, CertError> {
    let invalid = |message: String| CertError::Invalid {
        what: what.into(),
        message,
    };
    let chain = CertificateDer::pem_slice_iter(ck.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(e.to_string()))?;
    if chain.is_empty() {
        return Err(invalid("no certificate".into()));
    }
    let key =
        PrivateKeyDer::from_pem_slice(ck.key_pem.as_bytes()).map_err(|e| invalid(e.to_string()))?;
    // Not rustls' own check: it parses with webpki, which refuses version 1 certs that Go's
    // X509KeyPair (and the kubeconfig client built from the same pair) accept.
    super::tls_verify::certified_key(chain, key, &rustls::crypto::ring::default_provider())
        .map_err(invalid)
}

/// The serving cert of the 10250 server, replaceable while it runs. Until the first cert is issued
/// handshakes fail, as upstream's ("no serving certificate available for the kubelet").
#[derive(Debug, Default)]
pub struct ServingCert(RwLock<Option<Arc<CertifiedKey>>>);

impl ServingCert {
    pub fn set(&self, ck: &CertKey) -> Result<(), CertError> {
        self.install(certified(ck)?);
        Ok(())
    }

    fn install(&self, key: CertifiedKey) {
        let key = Arc::new(key);
        match self.0.write() {
            Ok(mut c) => *c = Some(key),
            Err(poisoned) => *poisoned.into_inner() = Some(key),
        }
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let cert = self.0.read().ok().and_then(|c| c.clone());
        if cert.is_none() {
            warn!("TLS handshake refused: no serving certificate available for the kubelet yet");
        }
        cert
    }
}

/// Which certificate a [`Rotation`] keeps fresh.
pub enum Kind {
    /// The client cert: at rotation a new inner client is built from `kubeconfig` with the
    /// issued cert and key as credentials, before they are stored.
    Client {
        kubeconfig: PathBuf,
        slot: ClientSlot,
        /// Upstream asks with the bootstrap credentials once the current cert has expired (the
        /// node was off or cut off past its renewal window): the node identity no longer works.
        bootstrap_kubeconfig: Option<PathBuf>,
    },
    /// The serving cert: requested at once when the store has none, then renewed.
    Serving {
        cert: Arc<ServingCert>,
        request: Request,
    },
}

/// One certificate's renewal loop; owns its store.
pub struct Rotation {
    pub kind: Kind,
    pub store: Store,
    /// The client that sends the CSRs (the kubelet's own, so the node identity asks).
    pub client: kube::Client,
    pub node_name: String,
    /// Client: the cert the client started with (the cert dir's, or the kubeconfig's), judged
    /// for renewal and expiry until the first rotation replaces it; tracking the cert in use
    /// rather than the store keeps the two in step when start-up fell back to the kubeconfig.
    /// Serving: the cert to rotate when the store has none (None: request one at once).
    pub initial_cert_pem: Option<Vec<u8>>,
    /// Renew at once rather than at 70-90% of the lifetime (upstream `forceRotation`): the client
    /// started from a kubeconfig's embedded pair, which upstream treats as a bootstrap pair.
    /// It retries until a cert is issued, never falling back to the deadline: upstream's forced
    /// rotation runs 5 backoff steps, then polls every 32 s (`wait.PollInfinite`) until it
    /// succeeds. Here [`RETRY`]'s backoff spaces the attempts (1 s doubling to a minute); kubeadm
    /// init starts the kubelet before the API server is up, so the first attempts fail.
    pub rotate_at_once: bool,
}

impl Rotation {
    pub async fn run(self, cancel: CancellationToken) {
        let mut retry = RETRY.retry();
        // The client's cert in use: the one it started with, then each one issued.
        let mut client_cert = self.initial_cert_pem.clone();
        let mut at_once = self.rotate_at_once;
        loop {
            let current = match &self.kind {
                Kind::Client { .. } => client_cert.clone(),
                Kind::Serving { .. } => match self.store.load() {
                    Ok(Some(ck)) => Some(ck.cert_pem.into_bytes()),
                    Ok(None) => self.initial_cert_pem.clone(),
                    Err(e) => {
                        warn!(error = %e, "cannot read the current certificate; requesting a new one");
                        None
                    }
                },
            };
            if let (Some(pem), Kind::Serving { cert, .. }) = (&current, &self.kind) {
                // The store's cert serves until its replacement arrives.
                if let Ok(Some(ck)) = self.store.load() {
                    if super::all_unexpired(pem, SystemTime::now()) {
                        if let Err(e) = cert.set(&ck) {
                            warn!(error = %e, "stored serving certificate is unusable");
                        }
                    }
                }
            }
            let deadline = current
                .as_deref()
                .filter(|_| !at_once)
                .and_then(|pem| super::validity(pem, "current certificate").ok())
                .map(|(nb, na)| super::rotation_deadline(nb, na, fastrand::f64()))
                .unwrap_or_else(SystemTime::now);
            let wait = deadline
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            info!(store = %self.store.current_path().display(), rotate_in = ?wait, "certificate rotation scheduled");
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            match self.rotate(current.as_deref()).await {
                Ok(issued) => {
                    retry.reset();
                    at_once = false;
                    client_cert = Some(issued);
                }
                Err(e) => {
                    let delay = retry.next_delay();
                    warn!(error = %e, retry_in = ?delay, "certificate rotation failed");
                    if !crate::backoff::sleep(delay, &cancel).await {
                        return;
                    }
                }
            }
        }
    }

    /// Requests a new cert for `current` (the cert in use; None: there is none) and puts it in
    /// place; returns the issued cert.
    async fn rotate(&self, current: Option<&[u8]>) -> Result<Vec<u8>, CertError> {
        // No cert at all counts as expired.
        let expired = !current.is_some_and(|p| super::all_unexpired(p, SystemTime::now()));
        let key = rcgen::KeyPair::generate()?;
        let (client, request) = match &self.kind {
            Kind::Client {
                bootstrap_kubeconfig: Some(boot),
                ..
            } if expired => {
                info!(bootstrap_kubeconfig = %boot.display(), "current client certificate has expired; requesting a new one with the bootstrap credentials");
                (
                    super::bootstrap::client_from(boot).await?,
                    Request::client(&self.node_name, "node-csr-"),
                )
            }
            Kind::Client { .. } => (
                self.client.clone(),
                Request::client(&self.node_name, "csr-"),
            ),
            Kind::Serving { request, .. } => (self.client.clone(), request.clone()),
        };
        let cert_pem = csr::request_certificate(&client, &request, &key, CSR_TIMEOUT).await?;
        let ck = CertKey {
            cert_pem,
            key_pem: key.serialize_pem(),
        };
        match &self.kind {
            Kind::Client {
                kubeconfig, slot, ..
            } => {
                // The new client is built before the cert is stored: a pair that makes no
                // client must not reach the store, which a restart reads first. Upstream has
                // no such step: its transport reads the current cert at each handshake.
                let new =
                    client_with_cert(kubeconfig, &ck)
                        .await
                        .map_err(|e| CertError::Invalid {
                            what: "the issued client certificate".into(),
                            message: e.to_string(),
                        })?;
                let pem = self.store.update(&ck)?;
                slot.swap(new);
                info!(cert = %pem.display(), "rotated the client certificate; new requests use it");
            }
            Kind::Serving { cert, .. } => {
                // Parsed before it is stored, as the client's above.
                let key = certified(&ck)?;
                let pem = self.store.update(&ck)?;
                cert.install(key);
                info!(cert = %pem.display(), "serving certificate issued; new connections use it");
            }
        }
        Ok(ck.cert_pem.into_bytes())
    }
}

/// What the cert dir offers a kubelet starting with rotation on.
pub enum StoredPair {
    /// No `kubelet-client-current.pem`.
    Absent,
    /// Its cert has expired: the kubeconfig's credentials are used, as upstream
    /// (`getCurrentCertificateOrBootstrap` skips an expired store pair).
    Expired,
    /// `kubeconfig`'s cluster with the stored pair, and the stored cert.
    Usable(kube::Client, Vec<u8>),
}

/// The client a restarted kubelet starts with when rotation is on (upstream's client cert
/// manager: the file store's unexpired pair first, then the kubeconfig's). After a rotation the
/// store holds the cert in use, while a kubeconfig with embedded data (kubeadm's first
/// kubelet.conf) still holds the first one. A pair that cannot be read or cannot make a client
/// is an error, naming the file; the caller falls back to the kubeconfig (upstream refuses to
/// start), and rotation, judging the cert in use, replaces the pair in time.
pub async fn client_from_store(
    kubeconfig: &std::path::Path,
    store: &Store,
    now: SystemTime,
) -> Result<StoredPair, CertError> {
    let Some(ck) = store.load()? else {
        return Ok(StoredPair::Absent);
    };
    if !super::all_unexpired(ck.cert_pem.as_bytes(), now) {
        return Ok(StoredPair::Expired);
    }
    let client = client_with_cert(kubeconfig, &ck)
        .await
        .map_err(|e| CertError::Invalid {
            what: store.current_path().display().to_string(),
            message: e.to_string(),
        })?;
    Ok(StoredPair::Usable(client, ck.cert_pem.into_bytes()))
}

/// A client from `kubeconfig` whose credentials are `ck`, given as data (the kubeconfig's own
/// client-certificate and client-key, files or data, are replaced).
async fn client_with_cert(
    kubeconfig: &std::path::Path,
    ck: &CertKey,
) -> Result<kube::Client, CertError> {
    use base64::Engine;
    let err = |message: String| CertError::Kubeconfig {
        path: kubeconfig.to_path_buf(),
        message,
    };
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| err(e.to_string()))?;
    let ca_source = super::client::ca_source(&kc, kubeconfig);
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| err(e.to_string()))?;
    let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    config.auth_info.client_certificate = None;
    config.auth_info.client_key = None;
    config.auth_info.client_certificate_data = Some(b64(&ck.cert_pem));
    config.auth_info.client_key_data = Some(b64(&ck.key_pem).into());
    super::client::from_config(config, kubeconfig, ca_source)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client whose every response body is `name`.
    fn fixed(name: &'static str) -> kube::Client {
        let svc = tower::service_fn(move |_req: hyper::Request<kube::client::Body>| async move {
            Ok::<_, std::convert::Infallible>(hyper::Response::new(kube::client::Body::from(
                name.as_bytes().to_vec(),
            )))
        });
        kube::Client::new(svc, "default")
    }

    #[tokio::test]
    async fn handle_clones_follow_the_swapped_client() {
        let (client, slot) = ClientSlot::new(fixed("old"));
        let held = client.clone();
        let get = || hyper::Request::get("/api").body(Vec::new()).unwrap();
        assert_eq!(held.request_text(get()).await.unwrap(), "old");
        slot.swap(fixed("new"));
        // A clone taken before the swap (as every manager holds one) now reaches the new client.
        assert_eq!(held.request_text(get()).await.unwrap(), "new");
        assert_eq!(client.request_text(get()).await.unwrap(), "new");
    }

    /// In `d`: a CA; pairs "old", "new" and "other" it signed for 10 days; a kubeconfig naming
    /// the old pair, returned.
    fn old_new_other(d: &std::path::Path) -> std::path::PathBuf {
        use crate::certificate::client::tests::kubeconfig;
        use crate::certificate::verify::tests::{sign, v1_root, Key};
        v1_root(d, "ca", Key::Rsa);
        for name in ["old", "new", "other"] {
            sign(d, name, "ca", Key::Ec, None, false);
        }
        kubeconfig(d, "https://127.0.0.1:1", "ca.crt", "old.crt", "old.key")
    }

    /// Rotation builds the new client from the issued cert and key before storing them: a pair
    /// that cannot make a client fails there, and the store keeps the cert in use.
    #[tokio::test]
    async fn the_rotated_client_is_built_from_the_issued_pair() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // The kubeconfig names the old pair; the issued one replaces it.
        let kc = old_new_other(d);
        let read = |n: &str| std::fs::read_to_string(d.join(n)).unwrap();
        let issued = CertKey {
            cert_pem: read("new.crt"),
            key_pem: read("new.key"),
        };
        assert!(client_with_cert(&kc, &issued).await.is_ok());
        let mismatched = CertKey {
            cert_pem: read("new.crt"),
            key_pem: read("other.key"),
        };
        let Err(e) = client_with_cert(&kc, &mismatched).await else {
            panic!("a key of another certificate made a client");
        };
        assert!(
            e.to_string().contains("does not belong to the certificate"),
            "{e}"
        );
    }

    /// A restart with rotation on takes the store's unexpired pair; an empty store or an expired
    /// pair leaves the kubeconfig's credentials, and a broken pair is an error naming its file.
    #[tokio::test]
    async fn a_restart_uses_the_stored_pair() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let kc = old_new_other(d);
        let store = Store::client(&d.join("pki"));
        let now = SystemTime::now();
        assert!(matches!(
            client_from_store(&kc, &store, now).await,
            Ok(StoredPair::Absent)
        ));
        let read = |n: &str| std::fs::read_to_string(d.join(n)).unwrap();
        store
            .update(&CertKey {
                cert_pem: read("new.crt"),
                key_pem: read("new.key"),
            })
            .unwrap();
        match client_from_store(&kc, &store, now).await {
            Ok(StoredPair::Usable(_, pem)) => assert_eq!(pem, read("new.crt").into_bytes()),
            _ => panic!("the stored pair was not used"),
        }
        // The same pair 11 days on: "new" was signed for 10.
        let later = now + Duration::from_secs(11 * 24 * 3600);
        assert!(matches!(
            client_from_store(&kc, &store, later).await,
            Ok(StoredPair::Expired)
        ));
        store
            .update(&CertKey {
                cert_pem: read("new.crt"),
                key_pem: read("other.key"),
            })
            .unwrap();
        let Err(e) = client_from_store(&kc, &store, now).await else {
            panic!("a stored key of another certificate made a client");
        };
        assert!(e.to_string().contains("kubelet-client-current.pem"), "{e}");
    }

    #[test]
    fn serving_cert_resolves_after_set() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["n".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let sc = ServingCert::default();
        assert!(sc.0.read().unwrap().is_none());
        sc.set(&CertKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
        .unwrap();
        assert!(sc.0.read().unwrap().is_some());
        let other = rcgen::KeyPair::generate().unwrap();
        let e = sc
            .set(&CertKey {
                cert_pem: cert.pem(),
                key_pem: other.serialize_pem(),
            })
            .unwrap_err();
        assert!(e.to_string().contains("serving certificate"), "{e}");
    }

    /// A kubeconfig's embedded pair is checked as Go's `tls.X509KeyPair` checks it: a version 1
    /// client cert (hand-built clusters sign with plain `openssl x509 -req`) is a pair, a key of
    /// another cert is an error that names the pair.
    #[test]
    fn embedded_pair_check_accepts_v1_and_names_a_mismatch() {
        use crate::certificate::verify::tests::{sign, v1_root, Key};
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        v1_root(d, "ca", Key::Rsa);
        sign(d, "node", "ca", Key::Ec, None, false);
        sign(d, "other", "ca", Key::Ec, None, false);
        let read = |f: &str| std::fs::read_to_string(d.join(f)).unwrap();
        let ok = CertKey {
            cert_pem: read("node.crt"),
            key_pem: read("node.key"),
        };
        assert!(pair(&ok, "the embedded pair").is_ok());
        // The key stays out of `{:?}` (a panic message, a debug log).
        let shown = format!("{ok:?}");
        assert!(
            shown.contains("CERTIFICATE") && !shown.contains("PRIVATE KEY"),
            "{shown}"
        );
        let mismatched = CertKey {
            cert_pem: read("node.crt"),
            key_pem: read("other.key"),
        };
        let e = pair(&mismatched, "the embedded pair").expect_err("a key of another cert");
        let e = e.to_string();
        assert!(
            e.contains("the embedded pair") && e.contains("does not belong"),
            "{e}"
        );
    }
}
