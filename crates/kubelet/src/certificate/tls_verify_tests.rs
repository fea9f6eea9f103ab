//! The rustls verifiers and key loading with X.509 v1 certificates made by `openssl` (helpers
//! from `verify`'s tests).

use tokio_rustls::rustls::{
    self,
    pki_types::{pem::PemObject, PrivateKeyDer, UnixTime},
};

use crate::certificate::tls_verify;
use crate::certificate::verify::tests::{anchors, at, der, provider, sign, v1_root, Key};

#[test]
fn client_verifier_accepts_v1_and_keeps_refusing_what_webpki_refuses() {
    use rustls::server::danger::ClientCertVerifier;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    v1_root(d, "ca", Key::Rsa);
    v1_root(d, "other-ca", Key::Rsa);
    sign(d, "v1", "ca", Key::Rsa, None, false);
    sign(d, "v1-other", "other-ca", Key::Rsa, None, false);
    sign(
        d,
        "v3-server",
        "ca",
        Key::Rsa,
        Some("extendedKeyUsage=serverAuth\n"),
        false,
    );
    sign(
        d,
        "v3-client",
        "ca",
        Key::Rsa,
        Some("extendedKeyUsage=clientAuth\n"),
        false,
    );
    let v = tls_verify::ClientVerifier::new(anchors(d, &["ca"]), provider()).unwrap();
    let now = UnixTime::now();
    assert!(v.verify_client_cert(&der(d, "v1"), &[], now).is_ok());
    assert!(v.verify_client_cert(&der(d, "v3-client"), &[], now).is_ok());
    assert!(v.verify_client_cert(&der(d, "v1-other"), &[], now).is_err());
    assert!(v
        .verify_client_cert(&der(d, "v3-server"), &[], now)
        .is_err());
    assert!(v.verify_client_cert(&der(d, "v1"), &[], at(20)).is_err());
    assert!(
        !v.client_auth_mandatory(),
        "token and anonymous requests still get through"
    );
}

#[test]
fn server_verifier_refuses_a_v1_serving_cert_for_its_missing_subject_alt_name() {
    use rustls::client::danger::ServerCertVerifier;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    v1_root(d, "ca", Key::Rsa);
    sign(d, "kube-apiserver", "ca", Key::Rsa, None, false);
    sign(
        d,
        "v3",
        "ca",
        Key::Rsa,
        Some("subjectAltName=IP:127.0.0.1\n"),
        false,
    );
    let v = tls_verify::ServerVerifier::new(anchors(d, &["ca"]), provider()).unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let now = UnixTime::now();
    // A v1 CA is a fine trust anchor for a v3 serving cert.
    assert!(v
        .verify_server_cert(&der(d, "v3"), &[], &name, &[], now)
        .is_ok());
    let e = v
        .verify_server_cert(&der(d, "kube-apiserver"), &[], &name, &[], now)
        .unwrap_err();
    assert_eq!(
        e,
        rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName)
    );
}

#[test]
fn certified_key_refuses_a_key_of_another_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    v1_root(d, "ca", Key::Rsa);
    sign(d, "a", "ca", Key::Ec, None, false);
    sign(d, "b", "ca", Key::Ec, None, false);
    let key = PrivateKeyDer::from_pem_file(d.join("b.key")).unwrap();
    let e = tls_verify::certified_key(vec![der(d, "a")], key, &provider()).unwrap_err();
    assert!(e.contains("does not belong"), "{e}");
}
