//! Certificate chain verification as Go's `crypto/x509` `Certificate.Verify` does it, for the
//! certificates webpki refuses outright: X.509 **version 1** leaves (`openssl x509 -req` without an
//! extension file). The upstream kubelet and kube-apiserver accept those, so rkubelet must too.
//!
//! webpki stays in charge of everything it can parse; [`super::tls_verify`] calls [`verify`] only
//! when the end-entity certificate is version 1. The rules follow Go's `verify.go`:
//! - the leaf, every intermediate and the root must be inside their validity period (`isValid`);
//! - an intermediate must be a CA (`BasicConstraintsValid && IsCA`), so a v1 certificate can be a
//!   root (a trust anchor in `clientCAFile` / `certificate-authority`) but never an intermediate;
//!   roots are trusted as configured, without a basicConstraints check; pathLen is honoured;
//! - a leaf that is itself one of the roots is accepted (Go's `Roots.contains`);
//! - extended key usage is checked along the whole chain (`checkChainForKeyUsage`): a certificate
//!   without the extension, or with anyExtendedKeyUsage, allows every purpose; key usage bits are
//!   ignored, as Go ignores them;
//! - signatures with the algorithms rustls/webpki offer: RSA PKCS#1 v1.5 and PSS with SHA-256/384/
//!   512, ECDSA P-256/P-384, Ed25519. SHA-1 and MD5 are refused, as Go refuses SHA-1 since 1.18.
//!   RSA keys below 2048 bits are refused (webpki's floor; Go's is 1024).
//! - critical extensions this module does not interpret (name constraints among them) refuse the
//!   chain, as Go refuses unhandled critical extensions.

use tokio_rustls::rustls::{
    crypto::WebPkiSupportedAlgorithms,
    pki_types::{CertificateDer, UnixTime},
};
use x509_parser::{
    certificate::X509Certificate, extensions::ParsedExtension, public_key::PublicKey,
    x509::X509Version,
};

/// Longest chain searched, leaf and root included (Go has no fixed bound; 10 is generous).
const MAX_CHAIN: usize = 10;

/// What the certificate is presented for: the extended key usage a chain must allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A server's certificate (the API server's, seen by the kubelet's client).
    ServerAuth,
    /// A client's certificate (the API server's `--kubelet-client-certificate` on 10250).
    ClientAuth,
}

impl std::fmt::Display for Purpose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Purpose::ServerAuth => "server authentication",
            Purpose::ClientAuth => "client authentication",
        })
    }
}

/// Why a certificate was refused, in words an operator can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    #[error("cannot be parsed as an X.509 certificate: {0}")]
    Malformed(String),
    #[error("has expired: not valid after {not_after} (now {now})")]
    Expired { not_after: String, now: String },
    #[error("is not valid yet: not valid before {not_before} (now {now})")]
    NotYetValid { not_before: String, now: String },
    #[error("is not signed by any CA in {anchors} (its issuer is \"{issuer}\")")]
    UnknownIssuer { issuer: String, anchors: String },
    #[error("has a signature that does not verify with the key of its issuer \"{issuer}\" (altered, or signed by another key of the same name)")]
    BadSignature { issuer: String },
    #[error("is signed with {algorithm}, which rkubelet refuses (as Go refuses SHA-1 since 1.18)")]
    UnsupportedSignature { algorithm: String },
    #[error("is issued by \"{issuer}\", whose RSA key has {bits} bits (at least 2048 are needed)")]
    WeakKey { issuer: String, bits: usize },
    #[error("has an extended key usage that does not allow {purpose}")]
    KeyUsage { purpose: Purpose },
    #[error("is used as an intermediate CA but is not a CA (no basicConstraints CA:TRUE; a version 1 certificate can only be a root CA)")]
    NotCa,
    #[error("has more intermediates below it than its pathLen constraint allows")]
    PathLen,
    #[error("has a critical extension ({0}) that rkubelet does not check")]
    UnhandledCritical(String),
    #[error("has no subjectAltName for {name}: a version 1 certificate cannot carry one, and Go since 1.15 (and rkubelet) no longer match the Common Name")]
    NoSubjectAltName { name: String },
}

/// A refused certificate: whose, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("certificate \"{subject}\" {reason}")]
pub struct Refused {
    pub subject: String,
    pub reason: Reason,
}

/// Trust anchors with the name of where they came from (a file path, or "the kubeconfig's
/// certificate-authority-data"), so that refusals name it.
#[derive(Debug, Clone)]
pub struct Anchors {
    pub source: String,
    pub certs: Vec<CertificateDer<'static>>,
}

/// A parsed certificate with its DER.
struct Node<'a> {
    der: &'a [u8],
    cert: X509Certificate<'a>,
}

fn parse(der: &[u8]) -> Result<Node<'_>, Refused> {
    match x509_parser::parse_x509_certificate(der) {
        Ok((_, cert)) => Ok(Node { der, cert }),
        Err(e) => Err(Refused {
            subject: "(unparsable)".into(),
            reason: Reason::Malformed(e.to_string()),
        }),
    }
}

/// Whether `der` is an X.509 version 1 certificate (the case webpki refuses and Go accepts).
pub fn is_v1(der: &[u8]) -> bool {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, c)| c.version() == X509Version::V1)
        .unwrap_or(false)
}

/// The subject of `der` as `CN=…, O=…`, for log lines.
pub fn subject_of(der: &[u8]) -> String {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, c)| c.subject().to_string())
        .unwrap_or_else(|_| "(unparsable)".into())
}

/// Go's leaf-only checks before any chain is built: validity period and critical extensions.
pub fn check_leaf(der: &[u8], now: UnixTime) -> Result<(), Refused> {
    let leaf = parse(der)?;
    check_time(&leaf, now).and_then(|()| check_critical(&leaf))
}

/// Go's `Verify` for `end_entity` against `anchors`, with `intermediates` as the peer sent them.
pub fn verify(
    end_entity: &[u8],
    intermediates: &[CertificateDer<'_>],
    anchors: &Anchors,
    now: UnixTime,
    purpose: Purpose,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<(), Refused> {
    let leaf = parse(end_entity)?;
    check_time(&leaf, now)?;
    check_critical(&leaf)?;
    let roots: Vec<Node<'_>> = anchors
        .certs
        .iter()
        .filter_map(|c| parse(c.as_ref()).ok())
        .collect();
    let inters: Vec<Node<'_>> = intermediates
        .iter()
        .filter_map(|c| parse(c.as_ref()).ok())
        .collect();
    if roots.iter().any(|r| r.der == leaf.der) {
        return check_key_usage(&[&leaf], purpose);
    }
    let search = Search {
        roots: &roots,
        inters: &inters,
        now,
        purpose,
        algs,
    };
    let mut first_error = None;
    if search.extend(&mut vec![&leaf], &mut first_error) {
        return Ok(());
    }
    Err(first_error.unwrap_or_else(|| Refused {
        subject: leaf.cert.subject().to_string(),
        reason: Reason::UnknownIssuer {
            issuer: leaf.cert.issuer().to_string(),
            anchors: anchors.source.clone(),
        },
    }))
}

/// Depth-first chain building (Go's `buildChains`), keeping the first specific refusal.
struct Search<'s, 'a> {
    roots: &'s [Node<'a>],
    inters: &'s [Node<'a>],
    now: UnixTime,
    purpose: Purpose,
    algs: &'s WebPkiSupportedAlgorithms,
}

impl<'s, 'a> Search<'s, 'a> {
    fn extend(&self, chain: &mut Vec<&'s Node<'a>>, first: &mut Option<Refused>) -> bool {
        let Some(&child) = chain.last() else {
            return false;
        };
        let issuer = child.cert.issuer().as_raw();
        for root in self
            .roots
            .iter()
            .filter(|r| r.cert.subject().as_raw() == issuer)
        {
            let result = check_signature(child, root, self.algs)
                .and_then(|()| check_time(root, self.now))
                .and_then(|()| {
                    let mut full: Vec<&Node<'_>> = chain.clone();
                    full.push(root);
                    check_key_usage(&full, self.purpose)
                });
            match result {
                Ok(()) => return true,
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        if chain.len() + 1 >= MAX_CHAIN {
            return false;
        }
        for inter in self
            .inters
            .iter()
            .filter(|i| i.cert.subject().as_raw() == issuer)
        {
            if chain.iter().any(|c| c.der == inter.der) {
                continue;
            }
            let below = chain.len() - 1;
            let result = check_signature(child, inter, self.algs)
                .and_then(|()| check_time(inter, self.now))
                .and_then(|()| check_critical(inter))
                .and_then(|()| check_ca(inter, below));
            if let Err(e) = result {
                first.get_or_insert(e);
                continue;
            }
            chain.push(inter);
            if self.extend(chain, first) {
                return true;
            }
            chain.pop();
        }
        false
    }
}

fn refused(node: &Node<'_>, reason: Reason) -> Refused {
    Refused {
        subject: node.cert.subject().to_string(),
        reason,
    }
}

fn rfc3339(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| secs.to_string())
}

fn check_time(node: &Node<'_>, now: UnixTime) -> Result<(), Refused> {
    let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let validity = node.cert.validity();
    let (nb, na) = (
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    );
    if now < nb {
        return Err(refused(
            node,
            Reason::NotYetValid {
                not_before: rfc3339(nb),
                now: rfc3339(now),
            },
        ));
    }
    if now > na {
        return Err(refused(
            node,
            Reason::Expired {
                not_after: rfc3339(na),
                now: rfc3339(now),
            },
        ));
    }
    Ok(())
}

/// Go refuses certificates with critical extensions it does not handle; this module handles
/// basicConstraints, key usage (ignored, as Go), extended key usage and subjectAltName.
fn check_critical(node: &Node<'_>) -> Result<(), Refused> {
    for ext in node.cert.extensions().iter().filter(|e| e.critical) {
        let handled = matches!(
            ext.parsed_extension(),
            ParsedExtension::BasicConstraints(_)
                | ParsedExtension::KeyUsage(_)
                | ParsedExtension::ExtendedKeyUsage(_)
                | ParsedExtension::SubjectAlternativeName(_)
                | ParsedExtension::SubjectKeyIdentifier(_)
                | ParsedExtension::AuthorityKeyIdentifier(_)
        );
        if !handled {
            return Err(refused(
                node,
                Reason::UnhandledCritical(ext.oid.to_id_string()),
            ));
        }
    }
    Ok(())
}

/// Go's `isValid(intermediateCertificate)`: a CA by basicConstraints, within its pathLen.
fn check_ca(node: &Node<'_>, intermediates_below: usize) -> Result<(), Refused> {
    let bc = match node.cert.basic_constraints() {
        Ok(Some(bc)) if bc.value.ca => bc.value,
        _ => return Err(refused(node, Reason::NotCa)),
    };
    match bc.path_len_constraint {
        Some(max) if intermediates_below > max as usize => Err(refused(node, Reason::PathLen)),
        _ => Ok(()),
    }
}

/// Go's `checkChainForKeyUsage`: every certificate in the chain must allow `purpose`; a missing
/// extension or anyExtendedKeyUsage allows everything.
fn check_key_usage(chain: &[&Node<'_>], purpose: Purpose) -> Result<(), Refused> {
    for node in chain {
        let eku = match node.cert.extended_key_usage() {
            Ok(Some(eku)) => eku.value,
            Ok(None) => continue,
            Err(e) => return Err(refused(node, Reason::Malformed(e.to_string()))),
        };
        let allowed = eku.any
            || match purpose {
                Purpose::ServerAuth => eku.server_auth,
                Purpose::ClientAuth => eku.client_auth,
            };
        if !allowed {
            return Err(refused(node, Reason::KeyUsage { purpose }));
        }
    }
    Ok(())
}

/// One DER element.
struct Tlv<'a> {
    tag: u8,
    contents: &'a [u8],
    /// Tag, length and contents: what a signature covers.
    whole: &'a [u8],
    rest: &'a [u8],
}

fn tlv(input: &[u8]) -> Option<Tlv<'_>> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return None;
    }
    let header = input.len() - rest.len();
    Some(Tlv {
        tag,
        contents: &rest[..len],
        whole: &input[..header + len],
        rest: &rest[len..],
    })
}

/// The element of `input` with tag `tag`, or None.
fn expect(input: &[u8], tag: u8) -> Option<Tlv<'_>> {
    tlv(input).filter(|t| t.tag == tag)
}

const SEQUENCE: u8 = 0x30;
const BIT_STRING: u8 = 0x03;

/// The contents of a BIT STRING with no unused bits.
fn bit_string(contents: &[u8]) -> Option<&[u8]> {
    match contents.split_first() {
        Some((0, bits)) => Some(bits),
        _ => None,
    }
}

/// `Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue }`: the signed
/// bytes, the algorithm identifier's contents (as webpki compares them) and the signature.
fn split_certificate(der: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let body = expect(der, SEQUENCE)?.contents;
    let tbs = expect(body, SEQUENCE)?;
    let alg = expect(tbs.rest, SEQUENCE)?;
    let sig = expect(alg.rest, BIT_STRING)?;
    Some((tbs.whole, alg.contents, bit_string(sig.contents)?))
}

/// `SubjectPublicKeyInfo ::= SEQUENCE { algorithm, subjectPublicKey }`: the algorithm
/// identifier's contents and the key bytes.
pub(crate) fn split_spki(der: &[u8]) -> Option<(&[u8], &[u8])> {
    let body = expect(der, SEQUENCE)?.contents;
    let alg = expect(body, SEQUENCE)?;
    let key = expect(alg.rest, BIT_STRING)?;
    Some((alg.contents, bit_string(key.contents)?))
}

/// Names for the signature algorithms people still meet in old certificates.
fn algorithm_name(oid: &str) -> String {
    match oid {
        "1.2.840.113549.1.1.5" => "SHA-1 with RSA (sha1WithRSAEncryption)".into(),
        "1.2.840.113549.1.1.4" => "MD5 with RSA (md5WithRSAEncryption)".into(),
        "1.2.840.10045.4.1" => "ECDSA with SHA-1 (ecdsa-with-SHA1)".into(),
        "1.2.840.10040.4.3" => "DSA with SHA-1".into(),
        other => format!("the signature algorithm {other}"),
    }
}

/// Verifies `child`'s signature with `issuer`'s public key, with rustls' algorithm list.
fn check_signature(
    child: &Node<'_>,
    issuer: &Node<'_>,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<(), Refused> {
    let malformed = |what: &str| refused(child, Reason::Malformed(what.into()));
    let (tbs, sig_alg, sig) =
        split_certificate(child.der).ok_or_else(|| malformed("bad DER structure"))?;
    let (key_alg, key) = split_spki(issuer.cert.public_key().raw)
        .ok_or_else(|| refused(issuer, Reason::Malformed("bad public key".into())))?;
    let issuer_name = issuer.cert.subject().to_string();
    if let Ok(PublicKey::RSA(rsa)) = issuer.cert.public_key().parsed() {
        if rsa.key_size() < 2048 {
            return Err(refused(
                child,
                Reason::WeakKey {
                    issuer: issuer_name,
                    bits: rsa.key_size(),
                },
            ));
        }
    }
    let mut known = false;
    for alg in algs
        .all
        .iter()
        .filter(|a| a.signature_alg_id().as_ref() == sig_alg)
    {
        known = true;
        if alg.public_key_alg_id().as_ref() == key_alg
            && alg.verify_signature(key, tbs, sig).is_ok()
        {
            return Ok(());
        }
    }
    if !known {
        let oid = child.cert.signature_algorithm.algorithm.to_id_string();
        return Err(refused(
            child,
            Reason::UnsupportedSignature {
                algorithm: algorithm_name(&oid),
            },
        ));
    }
    Err(refused(
        child,
        Reason::BadSignature {
            issuer: issuer_name,
        },
    ))
}

#[cfg(test)]
#[path = "verify_tests.rs"]
pub(crate) mod tests;
