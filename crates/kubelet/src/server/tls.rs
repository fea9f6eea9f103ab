//! The 10250 server's TLS: the serving cert from `tlsCertFile`/`tlsPrivateKeyFile`, or a
//! self-signed one kept in `<root-dir>/pki` (upstream `InitializeTLS` +
//! `GenerateSelfSignedCertKey`), and client cert verification against `clientCAFile`.
//!
//! X.509 version 1 certificates are accepted as Go's crypto/x509 accepts them: a v1 `tlsCertFile`
//! is served (rustls' `with_single_cert` would parse it with webpki and refuse it), and a v1 client
//! certificate or CA is checked by [`crate::certificate::tls_verify::ClientVerifier`].
//!
//! `tlsMinVersion` and `tlsCipherSuites` (resolved and checked by the config crate, see
//! `kubelet_config::config::tls`) narrow the ring provider's suites and the protocol versions, as
//! upstream's `tls.Config{MinVersion, CipherSuites}`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls::{
    self,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    ServerConfig,
};

use crate::certificate::{tls_verify, verify::Anchors};
use crate::config::tls::{ServingTls, TlsVersion};
use tracing::info;

/// What went wrong setting up TLS, naming the file concerned.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {what} {}: {message}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("writing {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("generating a self-signed serving certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("client CA {}: {message}", path.display())]
    ClientCa { path: PathBuf, message: String },
    #[error("serving certificate {} with key {}: {message}", cert.display(), key.display())]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        message: String,
    },
}

fn read_err(what: &'static str, path: &Path) -> impl FnOnce(String) -> TlsError {
    let path = path.to_path_buf();
    move |message| TlsError::Read {
        what,
        path,
        message,
    }
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| read_err("certificate", path)(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read_err("certificate", path)(e.to_string()))?;
    if certs.is_empty() {
        return Err(read_err("certificate", path)(
            "no certificate in file".into(),
        ));
    }
    Ok(certs)
}

/// Upstream's cert-dir default: `<root-dir>/pki`, with `kubelet.crt` and `kubelet.key`.
pub fn self_signed_paths(root_dir: &Path) -> (PathBuf, PathBuf) {
    let dir = root_dir.join("pki");
    (dir.join("kubelet.crt"), dir.join("kubelet.key"))
}

/// Reuses `<root-dir>/pki/kubelet.{crt,key}` when readable, else writes a new self-signed pair
/// valid for a year: CN `<host>@<unix time>`, SANs the host name and the node IP, as upstream.
pub fn ensure_self_signed(
    root_dir: &Path,
    host: &str,
    ip: Option<IpAddr>,
) -> Result<(PathBuf, PathBuf), TlsError> {
    let (crt, key) = self_signed_paths(root_dir);
    if crt.is_file() && key.is_file() {
        return Ok((crt, key));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut params = rcgen::CertificateParams::new(vec![host.to_string()])?;
    if let Some(ip) = ip {
        params.subject_alt_names.push(rcgen::SanType::IpAddress(ip));
    }
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{host}@{now}"));
    let today = k8s_openapi::jiff::Timestamp::now().to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC);
    params.not_before =
        rcgen::date_time_ymd(today.year().into(), today.month() as u8, today.day() as u8);
    params.not_after = rcgen::date_time_ymd(
        (today.year() + 1).into(),
        today.month() as u8,
        today.day().min(28) as u8,
    );
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let pair = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&pair)?;
    let dir = root_dir.join("pki");
    let werr = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TlsError::Write { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(werr(&dir))?;
    crate::certificate::write_private(&key, pair.serialize_pem().as_bytes()).map_err(werr(&key))?;
    std::fs::write(&crt, cert.pem()).map_err(werr(&crt))?;
    info!(cert = %crt.display(), "generated a self-signed serving certificate");
    Ok((crt, key))
}

/// The server config: the configured versions and suites, HTTP/2 and 1.1, and client certs
/// verified against `client_ca` when given (optional: token and anonymous requests must still
/// get through the handshake).
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
    tls: &ServingTls,
) -> Result<Arc<ServerConfig>, TlsError> {
    let certs = load_certs(cert)?;
    let key_der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| read_err("private key", key)(e.to_string()))?;
    let provider = rustls::crypto::ring::default_provider();
    let certified =
        tls_verify::certified_key(certs, key_der, &provider).map_err(|message| TlsError::Pair {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            message,
        })?;
    let single = rustls::sign::SingleCertAndKey::from(Arc::new(certified));
    let mut cfg = builder(client_ca, tls)?.with_cert_resolver(Arc::new(single));
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// As [`server_config`], with the certificate chosen per handshake (`serverTLSBootstrap`: the
/// issued cert replaces itself on rotation without a restart).
pub fn server_config_with_resolver(
    resolver: Arc<dyn rustls::server::ResolvesServerCert>,
    client_ca: Option<&Path>,
    tls: &ServingTls,
) -> Result<Arc<ServerConfig>, TlsError> {
    let mut cfg = builder(client_ca, tls)?.with_cert_resolver(resolver);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The ring provider with only the configured suites, and the versions to offer: upstream's
/// `MinVersion` and `CipherSuites` (TLS 1.3 suites all kept unless some are named, as Go).
pub fn negotiation(
    tls: &ServingTls,
) -> (
    rustls::crypto::CryptoProvider,
    Vec<&'static rustls::SupportedProtocolVersion>,
) {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites.retain(|s| {
        let id = u16::from(s.suite());
        match s {
            rustls::SupportedCipherSuite::Tls13(_) => {
                tls.tls13_suites.is_empty() || tls.tls13_suites.contains(&id)
            }
            rustls::SupportedCipherSuite::Tls12(_) => {
                tls.tls12_suites.as_ref().is_none_or(|l| l.contains(&id))
            }
        }
    });
    let tls12 = tls.min_version < TlsVersion::Tls13
        && tls.tls12_suites.as_ref().is_none_or(|l| !l.is_empty());
    let mut versions = vec![&rustls::version::TLS13];
    if tls12 {
        versions.push(&rustls::version::TLS12);
    }
    (provider, versions)
}

fn builder(
    client_ca: Option<&Path>,
    tls: &ServingTls,
) -> Result<rustls::ConfigBuilder<ServerConfig, rustls::server::WantsServerCert>, TlsError> {
    let (provider, versions) = negotiation(tls);
    let provider = Arc::new(provider);
    let builder =
        ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(&versions)?;
    let builder = match client_ca {
        Some(ca) => {
            let anchors = Anchors {
                source: ca.display().to_string(),
                certs: load_certs(ca)?,
            };
            let verifier = tls_verify::ClientVerifier::new(anchors, provider).map_err(|e| {
                TlsError::ClientCa {
                    path: ca.to_path_buf(),
                    message: e.to_string(),
                }
            })?;
            builder.with_client_cert_verifier(Arc::new(verifier))
        }
        None => builder.with_no_client_auth(),
    };
    Ok(builder)
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tls_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_cert_is_generated_once_and_loads() {
        let dir = tempfile::tempdir().unwrap();
        let ip = Some(IpAddr::from([10, 0, 0, 7]));
        let (crt, key) = ensure_self_signed(dir.path(), "node-a", ip).unwrap();
        let first = std::fs::read(&crt).unwrap();
        let (crt2, _) = ensure_self_signed(dir.path(), "node-a", ip).unwrap();
        assert_eq!(
            std::fs::read(crt2).unwrap(),
            first,
            "reused, not regenerated"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        server_config(&crt, &key, None, &ServingTls::default()).unwrap();
        let der = CertificateDer::pem_file_iter(&crt)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let (_, c) = x509_parser::parse_x509_certificate(der.as_ref()).unwrap();
        let cn = c.subject().iter_common_name().next().unwrap();
        assert!(cn.as_str().unwrap().starts_with("node-a@"));
        let san = c.subject_alternative_name().unwrap().unwrap().value;
        let names: Vec<String> = san.general_names.iter().map(|n| n.to_string()).collect();
        assert!(names.iter().any(|n| n.contains("node-a")), "{names:?}");
        assert!(names.iter().any(|n| n.contains("0a:00:00:07")), "{names:?}");
    }

    #[test]
    fn missing_files_are_named() {
        let e = server_config(
            Path::new("/nonexistent/c.crt"),
            Path::new("/x.key"),
            None,
            &ServingTls::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("/nonexistent/c.crt"), "{e}");
    }

    /// Every suite the config crate calls served is one ring has, and every ring suite has its
    /// Go name there: the two tables cannot drift apart.
    #[test]
    fn go_suite_table_matches_ring() {
        use crate::config::tls::GO_SUITES;
        let ring: Vec<u16> = rustls::crypto::ring::default_provider()
            .cipher_suites
            .iter()
            .map(|s| u16::from(s.suite()))
            .collect();
        for s in GO_SUITES {
            assert_eq!(ring.contains(&s.id), s.served, "{}", s.name);
        }
        for id in &ring {
            assert!(
                GO_SUITES.iter().any(|s| s.id == *id),
                "{id:#x} has no Go name"
            );
        }
    }

    #[test]
    fn negotiation_follows_min_version_and_suites() {
        let ids = |t: &ServingTls| {
            let (p, v) = negotiation(t);
            let mut ids: Vec<u16> = p
                .cipher_suites
                .iter()
                .map(|s| u16::from(s.suite()))
                .collect();
            ids.sort();
            (
                ids,
                v.iter().map(|v| u16::from(v.version)).collect::<Vec<_>>(),
            )
        };
        let (all, v) = ids(&ServingTls::default());
        assert_eq!(all.len(), 9);
        assert_eq!(v, vec![0x0304, 0x0303]);
        let t = ServingTls {
            min_version: TlsVersion::Tls13,
            ..ServingTls::default()
        };
        assert_eq!(ids(&t).1, vec![0x0304]);
        let t = ServingTls {
            tls12_suites: Some(vec![0xc030]),
            ..ServingTls::default()
        };
        assert_eq!(
            ids(&t),
            (vec![0x1301, 0x1302, 0x1303, 0xc030], vec![0x0304, 0x0303])
        );
        let t = ServingTls {
            tls12_suites: Some(vec![]),
            tls13_suites: vec![0x1301],
            ..ServingTls::default()
        };
        assert_eq!(ids(&t), (vec![0x1301], vec![0x0304]));
        // The TLS 1.2-only restriction builds a working server config.
        let dir = tempfile::tempdir().unwrap();
        let (crt, key) = ensure_self_signed(dir.path(), "n", None).unwrap();
        let t = ServingTls {
            tls12_suites: Some(vec![0xc02f]),
            ..ServingTls::default()
        };
        server_config(&crt, &key, None, &t).unwrap();
    }
}
