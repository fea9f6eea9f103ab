//! The 10250 TLS configuration with X.509 v1 certificates on both ends, and the kubelet's own API
//! client against it: tests that need both `server::tls` and `certificate`, kept on this side
//! so `certificate` never depends on `server`.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls::{
    self,
    pki_types::{pem::PemObject, PrivateKeyDer},
};

use crate::certificate::client::{from_kubeconfig, tests::kubeconfig};
use crate::certificate::tls_verify;
use crate::certificate::verify;
use crate::certificate::verify::tests::{der, provider, sign, v1_root, Key};

/// A real handshake over an in-memory pipe: a v1 tlsCertFile served by the 10250 config, a v1
/// client certificate verified against a v1 clientCAFile, on TLS 1.2 and 1.3 (the handshake
/// signature of a v1 certificate is checked without webpki).
#[tokio::test]
async fn handshake_with_v1_serving_and_client_certificates() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    v1_root(d, "ca", Key::Rsa);
    sign(d, "node", "ca", Key::Ec, None, false);
    sign(d, "apiserver", "ca", Key::Rsa, None, false);
    let server = super::server_config(
        &d.join("node.crt"),
        &d.join("node.key"),
        Some(&d.join("ca.crt")),
        &Default::default(),
    )
    .unwrap();
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let p = provider();
        let key = PrivateKeyDer::from_pem_file(d.join("apiserver.key")).unwrap();
        let ck = tls_verify::certified_key(vec![der(d, "apiserver")], key, &p).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(p.clone())
            .with_protocol_versions(&[version])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(tls_verify::NoVerification(p)))
            .with_client_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(ck)));
        let (a, b) = tokio::io::duplex(64 * 1024);
        let acceptor = tokio_rustls::TlsAcceptor::from(server.clone());
        let srv = tokio::spawn(async move {
            let mut s = acceptor.accept(a).await.unwrap();
            let peer = s.get_ref().1.peer_certificates().map(|c| c.len());
            s.write_all(b"ok").await.unwrap();
            s.shutdown().await.unwrap();
            peer
        });
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let name = rustls::pki_types::ServerName::try_from("node").unwrap();
        let mut c = connector.connect(name, b).await.unwrap();
        let mut buf = Vec::new();
        c.read_to_end(&mut buf).await.unwrap();
        assert_eq!(buf, b"ok");
        assert_eq!(
            srv.await.unwrap(),
            Some(1),
            "{version:?}: client cert verified"
        );
    }
}

/// The whole client stack against an in-process HTTPS server: a v1 CA anchors the server's
/// (v3, subjectAltName 127.0.0.1) certificate, and the v1 client certificate is presented and
/// verified by the 10250 verifier.
#[tokio::test]
async fn v1_client_certificate_and_v1_ca_reach_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    v1_root(d, "ca", Key::Rsa);
    sign(
        d,
        "server",
        "ca",
        Key::Ec,
        Some("subjectAltName=IP:127.0.0.1\n"),
        false,
    );
    sign(d, "node", "ca", Key::Ec, None, false);
    assert!(verify::is_v1(der(d, "node").as_ref()));
    let tls = super::server_config(
        &d.join("server.crt"),
        &d.join("server.key"),
        Some(&d.join("ca.crt")),
        &Default::default(),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut s = tokio_rustls::TlsAcceptor::from(tls)
            .accept(tcp)
            .await
            .unwrap();
        let peer = s
            .get_ref()
            .1
            .peer_certificates()
            .map(|c| verify::subject_of(c[0].as_ref()));
        let mut buf = vec![0u8; 4096];
        let n = s.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("GET /version"));
        let body = r#"{"major":"1","minor":"20","gitVersion":"v1.20.2","gitCommit":"x","gitTreeState":"clean","buildDate":"2021-01-01T00:00:00Z","goVersion":"go1.15","compiler":"gc","platform":"linux/amd64"}"#;
        let resp = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(resp.as_bytes()).await.unwrap();
        s.shutdown().await.unwrap();
        peer
    });
    let url = format!("https://127.0.0.1:{port}");
    let kc = kubeconfig(d, &url, "ca.crt", "node.crt", "node.key");
    let client = from_kubeconfig(&kc).await.unwrap();
    let info = client.apiserver_version().await.unwrap();
    assert_eq!(info.git_version, "v1.20.2");
    let peer = server.await.unwrap();
    assert_eq!(peer.as_deref(), Some("CN=node, O=system:masters"));
}
