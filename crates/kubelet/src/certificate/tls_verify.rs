//! rustls verifiers that accept what Go's `crypto/x509` accepts: webpki decides everything it can
//! parse, and version 1 certificates, which webpki refuses as `UnsupportedCertVersion`, go through
//! [`super::verify`] (Go's rules). Every refusal is logged in words with the CA file it was checked
//! against, instead of a rustls debug dump.
//!
//! Upstream counterparts: the apiserver's serving cert is checked by client-go's transport
//! (`tls.Config.RootCAs`), a client cert on 10250 by the kubelet's `tls.Config` with
//! `VerifyClientCertIfGiven` and `ClientCAs` (`pkg/kubelet/server`, `dynamiccertificates`).

use std::sync::Arc;

use tokio_rustls::rustls::{
    self,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    client::WebPkiServerVerifier,
    crypto::{verify_tls13_signature_with_raw_key, CryptoProvider, WebPkiSupportedAlgorithms},
    pki_types::{CertificateDer, ServerName, SubjectPublicKeyInfoDer, UnixTime},
    server::danger::{ClientCertVerified, ClientCertVerifier},
    server::WebPkiClientVerifier,
    CertificateError, DigitallySignedStruct, DistinguishedName, Error, RootCertStore,
    SignatureScheme,
};
use tracing::warn;

use super::verify::{self, Anchors, Purpose, Reason, Refused};

/// What went wrong building a verifier, naming the CA source.
#[derive(Debug, thiserror::Error)]
pub enum VerifierError {
    #[error("CA certificates from {source_name}: {message}")]
    Anchors {
        source_name: String,
        message: String,
    },
}

fn root_store(anchors: &Anchors) -> Result<Arc<RootCertStore>, VerifierError> {
    let mut roots = RootCertStore::empty();
    for c in &anchors.certs {
        // webpki takes version 1 CA certificates as trust anchors (its v1 fallback parser).
        roots.add(c.clone()).map_err(|e| VerifierError::Anchors {
            source_name: anchors.source.clone(),
            message: e.to_string(),
        })?;
    }
    if roots.is_empty() {
        return Err(VerifierError::Anchors {
            source_name: anchors.source.clone(),
            message: "no CA certificate".into(),
        });
    }
    Ok(Arc::new(roots))
}

/// webpki's refusal in words, for certificates it could parse.
pub fn describe(err: &Error, anchors: &str, purpose: Purpose) -> String {
    #[allow(deprecated)]
    match err {
        Error::InvalidCertificate(c) => match c {
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                format!("has expired ({c})")
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                format!("is not valid yet ({c})")
            }
            CertificateError::UnknownIssuer => format!("is not signed by any CA in {anchors}"),
            CertificateError::BadSignature => "has a signature that does not verify with the key \
                 of its issuer (altered, or signed by another key of the same name)"
                .into(),
            CertificateError::UnsupportedSignatureAlgorithm
            | CertificateError::UnsupportedSignatureAlgorithmContext { .. }
            | CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
                "is signed with an algorithm rkubelet refuses (SHA-1 and MD5 are refused, as by Go \
                 since 1.18)"
                    .into()
            }
            CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
                format!("has an extended key usage that does not allow {purpose}")
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!("is not valid for the server name ({c})")
            }
            other => format!("is refused: {other}"),
        },
        other => format!("is refused: {other}"),
    }
}

/// The rustls error a [`Refused`] becomes (it picks the TLS alert the peer sees).
fn to_rustls(r: &Refused) -> Error {
    let c = match r.reason {
        Reason::Expired { .. } => CertificateError::Expired,
        Reason::NotYetValid { .. } => CertificateError::NotValidYet,
        Reason::UnknownIssuer { .. } | Reason::NotCa | Reason::PathLen => {
            CertificateError::UnknownIssuer
        }
        Reason::BadSignature { .. } | Reason::WeakKey { .. } => CertificateError::BadSignature,
        Reason::KeyUsage { .. } => CertificateError::InvalidPurpose,
        Reason::NoSubjectAltName { .. } => CertificateError::NotValidForName,
        Reason::Malformed(_)
        | Reason::UnsupportedSignature { .. }
        | Reason::UnhandledCritical(_) => CertificateError::BadEncoding,
    };
    Error::InvalidCertificate(c)
}

/// TLS 1.2 handshake signature with the certificate's public key, parsed with x509-parser so that
/// a version 1 certificate works (rustls' helper parses the certificate with webpki).
fn tls12_signature_raw(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, Error> {
    let spki = spki_of(cert)?;
    let (key_alg, key) = verify::split_spki(&spki)
        .ok_or(Error::InvalidCertificate(CertificateError::BadEncoding))?;
    for (_, candidates) in algs.mapping.iter().filter(|(s, _)| *s == dss.scheme) {
        for alg in candidates.iter() {
            if alg.public_key_alg_id().as_ref() == key_alg
                && alg.verify_signature(key, message, dss.signature()).is_ok()
            {
                return Ok(HandshakeSignatureValid::assertion());
            }
        }
    }
    Err(Error::InvalidCertificate(CertificateError::BadSignature))
}

fn spki_of(cert: &CertificateDer<'_>) -> Result<Vec<u8>, Error> {
    x509_parser::parse_x509_certificate(cert.as_ref())
        .map(|(_, c)| c.public_key().raw.to_vec())
        .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))
}

fn tls13_signature_raw(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, Error> {
    let spki = SubjectPublicKeyInfoDer::from(spki_of(cert)?);
    verify_tls13_signature_with_raw_key(message, &spki, dss, algs)
}

/// The API server's certificate, seen by the kubelet's client: webpki, and for a version 1
/// certificate Go's order (leaf validity, then the host name). A v1 certificate has no
/// subjectAltName, and Go (since 1.15) no longer matches the Common Name, so it is refused with a
/// reason that says so.
#[derive(Debug)]
pub struct ServerVerifier {
    inner: Arc<WebPkiServerVerifier>,
    anchors: Anchors,
    provider: Arc<CryptoProvider>,
}

impl ServerVerifier {
    pub fn new(anchors: Anchors, provider: Arc<CryptoProvider>) -> Result<Self, VerifierError> {
        let inner =
            WebPkiServerVerifier::builder_with_provider(root_store(&anchors)?, provider.clone())
                .build()
                .map_err(|e| VerifierError::Anchors {
                    source_name: anchors.source.clone(),
                    message: e.to_string(),
                })?;
        Ok(ServerVerifier {
            inner,
            anchors,
            provider,
        })
    }
}

impl ServerCertVerifier for ServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let err =
            match self
                .inner
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
            {
                Ok(ok) => return Ok(ok),
                Err(e) => e,
            };
        let subject = verify::subject_of(end_entity.as_ref());
        let (reason, err) = if verify::is_v1(end_entity.as_ref()) {
            // Go's order: the leaf's validity, then the host name (which a v1 cert cannot match).
            let r = verify::check_leaf(end_entity.as_ref(), now)
                .err()
                .unwrap_or_else(|| Refused {
                    subject: subject.clone(),
                    reason: Reason::NoSubjectAltName {
                        name: server_name.to_str().into_owned(),
                    },
                });
            (r.reason.to_string(), to_rustls(&r))
        } else {
            (
                describe(&err, &self.anchors.source, Purpose::ServerAuth),
                err,
            )
        };
        warn!(
            server = %server_name.to_str(),
            ca = %self.anchors.source,
            "the API server's certificate \"{subject}\" {reason}"
        );
        Err(err)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Client certificates on 10250, optional as upstream (`VerifyClientCertIfGiven`): webpki, and
/// for a version 1 certificate Go's chain rules against `clientCAFile` with clientAuth usage.
#[derive(Debug)]
pub struct ClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    anchors: Anchors,
    provider: Arc<CryptoProvider>,
}

impl ClientVerifier {
    pub fn new(anchors: Anchors, provider: Arc<CryptoProvider>) -> Result<Self, VerifierError> {
        let inner =
            WebPkiClientVerifier::builder_with_provider(root_store(&anchors)?, provider.clone())
                .allow_unauthenticated()
                .build()
                .map_err(|e| VerifierError::Anchors {
                    source_name: anchors.source.clone(),
                    message: e.to_string(),
                })?;
        Ok(ClientVerifier {
            inner,
            anchors,
            provider,
        })
    }

    fn algs(&self) -> &WebPkiSupportedAlgorithms {
        &self.provider.signature_verification_algorithms
    }
}

impl ClientCertVerifier for ClientVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let err = match self
            .inner
            .verify_client_cert(end_entity, intermediates, now)
        {
            Ok(ok) => return Ok(ok),
            Err(e) => e,
        };
        let (message, err) = if verify::is_v1(end_entity.as_ref()) {
            match verify::verify(
                end_entity.as_ref(),
                intermediates,
                &self.anchors,
                now,
                Purpose::ClientAuth,
                self.algs(),
            ) {
                Ok(()) => return Ok(ClientCertVerified::assertion()),
                Err(r) => (r.to_string(), to_rustls(&r)),
            }
        } else {
            let subject = verify::subject_of(end_entity.as_ref());
            let reason = describe(&err, &self.anchors.source, Purpose::ClientAuth);
            (format!("certificate \"{subject}\" {reason}"), err)
        };
        warn!(client_ca = %self.anchors.source, "TLS client {message}");
        Err(err)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        if verify::is_v1(cert.as_ref()) {
            return tls12_signature_raw(message, cert, dss, self.algs());
        }
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        if verify::is_v1(cert.as_ref()) {
            return tls13_signature_raw(message, cert, dss, self.algs());
        }
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Allows anything: `insecure-skip-tls-verify: true` in a kubeconfig (as client-go's
/// `InsecureSkipVerify`). Handshake signatures are still checked, as Go does.
#[derive(Debug)]
pub struct NoVerification(pub Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        tls12_signature_raw(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        tls13_signature_raw(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Loads a private key and checks it belongs to the leaf of `chain` by comparing public keys,
/// parsing the certificate with x509-parser: rustls' own check (`keys_match`, run by
/// `with_single_cert` / `with_client_auth_cert`) parses with webpki and refuses version 1.
pub fn certified_key(
    chain: Vec<CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
    provider: &CryptoProvider,
) -> Result<rustls::sign::CertifiedKey, String> {
    let leaf = chain.first().ok_or("no certificate")?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| format!("cannot parse the certificate: {e}"))?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("unusable private key: {e}"))?;
    if let Some(public) = signing.public_key() {
        if public.as_ref() != cert.public_key().raw {
            return Err("the private key does not belong to the certificate".into());
        }
    }
    Ok(rustls::sign::CertifiedKey::new(chain, signing))
}

#[cfg(test)]
#[path = "tls_verify_tests.rs"]
mod tests;
