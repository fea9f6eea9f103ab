//! The kubelet's API client from a kubeconfig (upstream: client-go's `clientcmd` +
//! `transport.New`), built here rather than by kube-rs' `Client::try_from` so that the TLS layer
//! accepts what Go accepts:
//! - a version 1 client certificate: kube-rs hands it to rustls' `with_client_auth_cert`, whose key
//!   check parses it with webpki and fails (`UnsupportedCertVersion`); here the key is matched by
//!   [`tls_verify::certified_key`] and presented by a resolver that never reparses it (client-go
//!   presents its one certificate whatever CA the server hints, as `SingleCertAndKey` does);
//! - the API server's certificate goes through [`tls_verify::ServerVerifier`] (webpki, a version 1
//!   CA as the trust anchor, refusals logged in words naming the CA file).
//!
//! The rest of the stack is kube-rs' own pieces (base URI, retry, auth layer for bearer tokens and
//! token files, extra headers), so requests look as before. Kubeconfigs this module adds nothing to
//! keep kube-rs' builder: an HTTP(S)/SOCKS proxy, an exec credential plugin (its client certificate
//! is only reachable inside kube-rs), plain http, and a cluster without a CA (the platform roots).

use std::path::Path;
use std::sync::Arc;

use hyper_util::{client::legacy::connect::HttpConnector, rt::TokioExecutor};
use kube::client::ConfigExt;
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use tokio_rustls::rustls::{
    self,
    client::danger::ServerCertVerifier,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer, ServerName},
    sign::{CertifiedKey, SingleCertAndKey},
    ClientConfig,
};
use tower::{BoxError, ServiceBuilder};
use tracing::warn;

use super::tls_verify::{self, NoVerification, ServerVerifier};
use super::verify::{self, Anchors};
use super::CertError;

fn kc_err(path: &Path) -> impl Fn(String) -> CertError + '_ {
    move |message| CertError::Kubeconfig {
        path: path.to_path_buf(),
        message,
    }
}

/// A client from the kubeconfig file at `path` (its current context), as `--kubeconfig`.
pub async fn from_kubeconfig(path: &Path) -> Result<kube::Client, CertError> {
    let err = kc_err(path);
    let kc = Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
    let ca_source = ca_source(&kc, path);
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    from_config(config, path, ca_source)
}

/// Where the current cluster's CA comes from, for messages: its file, or the kubeconfig's data.
pub(crate) fn ca_source(kc: &Kubeconfig, path: &Path) -> String {
    let cluster = kc
        .current_context
        .as_deref()
        .and_then(|cur| kc.contexts.iter().find(|c| c.name == cur))
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.as_str())
        .and_then(|name| kc.clusters.iter().find(|c| c.name == name))
        .and_then(|c| c.cluster.as_ref());
    match cluster.and_then(|c| c.certificate_authority.as_deref()) {
        Some(file) if cluster.is_some_and(|c| c.certificate_authority_data.is_none()) => {
            file.to_string()
        }
        _ => format!("the certificate-authority-data of {}", path.display()),
    }
}

/// A client from a loaded `config`; `path` and `ca_source` only name things in errors.
pub fn from_config(
    config: kube::Config,
    path: &Path,
    ca_source: String,
) -> Result<kube::Client, CertError> {
    let err = kc_err(path);
    let https = config.cluster_url.scheme_str() == Some("https");
    let no_ca = config.root_cert.is_none() && !config.accept_invalid_certs;
    if config.proxy_url.is_some() || config.auth_info.exec.is_some() || !https || no_ca {
        return kube::Client::try_from(config).map_err(|e| err(e.to_string()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = if config.accept_invalid_certs {
        Arc::new(NoVerification(provider.clone()))
    } else {
        let certs = config
            .root_cert
            .iter()
            .flatten()
            .map(|der| CertificateDer::from(der.clone()))
            .collect();
        let anchors = Anchors {
            source: ca_source,
            certs,
        };
        Arc::new(ServerVerifier::new(anchors, provider.clone()).map_err(|e| err(e.to_string()))?)
    };
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| err(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let tls = match identity(&config.auth_info, &provider).map_err(&err)? {
        Some(key) => builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(key))),
        None => builder.with_no_client_auth(),
    };

    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let connector = match &config.tls_server_name {
        Some(name) => {
            let name = ServerName::try_from(name.clone())
                .map_err(|e| err(format!("tls-server-name {name:?}: {e}")))?;
            connector.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => connector,
    };
    let mut connector =
        hyper_timeout::TimeoutConnector::new(connector.enable_http1().wrap_connector(http));
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let http_client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);

    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer().map_err(|e| err(e.to_string()))?)
        .layer(
            config
                .extra_headers_layer()
                .map_err(|e| err(e.to_string()))?,
        )
        .map_err(BoxError::from)
        .service(http_client);
    Ok(kube::Client::new(service, config.default_namespace))
}

/// `client-certificate(-data)` and `client-key(-data)`: base64 data wins over a file, as in
/// client-go. Errors name the file (or the data field) and say what is wrong with it.
fn identity(
    auth: &AuthInfo,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<Option<CertifiedKey>, String> {
    use secrecy::ExposeSecret;
    let cert = load(
        auth.client_certificate_data.as_deref(),
        auth.client_certificate.as_deref(),
        "client-certificate",
    )?;
    let key_data = auth.client_key_data.as_ref().map(|s| s.expose_secret());
    let key = load(key_data, auth.client_key.as_deref(), "client-key")?;
    let ((cert_name, cert), (key_name, key)) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(c), Some(k)) => (c, k),
        (Some((name, _)), None) => return Err(format!("{name} is given without a client-key")),
        (None, Some((name, _))) => {
            return Err(format!("{name} is given without a client-certificate"))
        }
    };
    let chain = CertificateDer::pem_slice_iter(&cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("client certificate {cert_name}: {e}"))?;
    if chain.is_empty() {
        return Err(format!(
            "client certificate {cert_name}: no certificate in it"
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&key)
        .map_err(|e| format!("client key {key_name}: no usable private key: {e}"))?;
    if let Err(refused) = verify::check_leaf(chain[0].as_ref(), rustls::pki_types::UnixTime::now())
    {
        // Not fatal, as upstream: the API server refuses it, and rotation/bootstrap replace it.
        warn!(cert = %cert_name, "client {refused}; the API server will refuse it");
    }
    tls_verify::certified_key(chain, key, provider)
        .map_err(|e| format!("client certificate {cert_name} with key {key_name}: {e}"))
        .map(Some)
}

/// Inline data (base64) or a file; the name says which, for messages.
fn load(
    data: Option<&str>,
    file: Option<&str>,
    field: &str,
) -> Result<Option<(String, Vec<u8>)>, String> {
    use base64::Engine;
    if let Some(data) = data {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| format!("{field}-data is not base64: {e}"))?;
        return Ok(Some((format!("{field}-data"), bytes)));
    }
    match file {
        Some(f) => std::fs::read(f)
            .map(|b| Some((f.to_string(), b)))
            .map_err(|e| format!("{field} {f}: {e}")),
        None => Ok(None),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::certificate::verify::tests::{sign, v1_root, Key};

    pub(crate) fn kubeconfig(
        dir: &Path,
        server: &str,
        ca: &str,
        cert: &str,
        key: &str,
    ) -> std::path::PathBuf {
        let path = dir.join("kubeconfig");
        let p = |n: &str| dir.join(n).display().to_string();
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    \
                 certificate-authority: {}\nusers:\n- name: u\n  user:\n    client-certificate: {}\n    \
                 client-key: {}\ncontexts:\n- name: d\n  context: {{cluster: c, user: u}}\ncurrent-context: d\n",
                p(ca),
                p(cert),
                p(key)
            ),
        )
        .unwrap();
        path
    }

    #[tokio::test]
    async fn a_key_of_another_certificate_is_named_with_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        v1_root(d, "ca", Key::Rsa);
        sign(d, "a", "ca", Key::Ec, None, false);
        sign(d, "b", "ca", Key::Ec, None, false);
        let kc = kubeconfig(d, "https://127.0.0.1:1", "ca.crt", "a.crt", "b.key");
        let Err(e) = from_kubeconfig(&kc).await else {
            panic!("a key of another certificate was accepted");
        };
        let e = e.to_string();
        assert!(e.contains(&kc.display().to_string()), "{e}");
        assert!(e.contains("a.crt") && e.contains("b.key"), "{e}");
        assert!(e.contains("does not belong to the certificate"), "{e}");
    }
}
