//! Accept/refuse tables for [`super::verify`] and the rustls verifiers, over certificates made
//! with `openssl` the classic way (`openssl x509 -req` without `-extfile` gives version 1).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::rustls::{
    self,
    pki_types::{pem::PemObject, CertificateDer, UnixTime},
};

use super::*;

pub(crate) fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[derive(Clone, Copy)]
pub(crate) enum Key {
    Rsa,
    Ec,
    Ed25519,
}

pub(crate) fn key(dir: &Path, name: &str, kind: Key) {
    let out = format!("{name}.key");
    let args: &[&str] = match kind {
        Key::Rsa => &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
        Key::Ec => &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
        Key::Ed25519 => &["-algorithm", "ED25519"],
    };
    let mut all = vec!["genpkey"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-out", &out]);
    openssl(dir, &all);
}

pub(crate) fn csr(dir: &Path, name: &str, kind: Key) {
    key(dir, name, kind);
    let subj = format!("/CN={name}/O=system:masters");
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-key",
            &format!("{name}.key"),
            "-subj",
            &subj,
            "-out",
            &format!("{name}.csr"),
        ],
    );
}

/// A self-signed version 1 CA: `openssl x509 -req -signkey` without extensions.
pub(crate) fn v1_root(dir: &Path, name: &str, kind: Key) {
    csr(dir, name, kind);
    let (csr, key, crt) = (
        format!("{name}.csr"),
        format!("{name}.key"),
        format!("{name}.crt"),
    );
    openssl(
        dir,
        &[
            "x509", "-req", "-in", &csr, "-signkey", &key, "-days", "10", "-out", &crt,
        ],
    );
}

/// A version 3 CA (`req -x509` adds basicConstraints CA:TRUE from openssl.cnf's v3_ca).
pub(crate) fn v3_root(dir: &Path, name: &str) {
    key(dir, name, Key::Rsa);
    let (key, crt, subj) = (
        format!("{name}.key"),
        format!("{name}.crt"),
        format!("/CN={name}"),
    );
    openssl(
        dir,
        &[
            "req", "-x509", "-new", "-key", &key, "-subj", &subj, "-days", "10", "-out", &crt,
        ],
    );
}

/// `name` signed by `ca`; without `ext` a version 1 certificate, as hand-built clusters have.
pub(crate) fn sign(dir: &Path, name: &str, ca: &str, kind: Key, ext: Option<&str>, sha1: bool) {
    csr(dir, name, kind);
    let (csr, crt) = (format!("{name}.csr"), format!("{name}.crt"));
    let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
    let ext_file = format!("{name}.ext");
    let mut args = vec![
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca_crt,
        "-CAkey",
        &ca_key,
        "-set_serial",
        "7",
        "-days",
        "10",
        "-out",
        &crt,
    ];
    if let Some(ext) = ext {
        std::fs::write(dir.join(&ext_file), ext).unwrap();
        args.extend_from_slice(&["-extfile", &ext_file]);
    }
    if sha1 {
        args.push("-sha1");
    }
    openssl(dir, &args);
}

pub(crate) fn der(dir: &Path, name: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_file(dir.join(format!("{name}.crt"))).unwrap()
}

pub(crate) fn anchors(dir: &Path, names: &[&str]) -> Anchors {
    Anchors {
        source: "/etc/kubernetes/pki/ca.crt".into(),
        certs: names.iter().map(|n| der(dir, n)).collect(),
    }
}

fn algs() -> WebPkiSupportedAlgorithms {
    rustls::crypto::ring::default_provider().signature_verification_algorithms
}

pub(crate) fn at(offset_days: i64) -> UnixTime {
    let now = UnixTime::now().as_secs() as i64 + offset_days * 86_400;
    UnixTime::since_unix_epoch(Duration::from_secs(now as u64))
}

#[test]
fn openssl_x509_req_without_extfile_makes_version_1() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    v1_root(d, "ca", Key::Rsa);
    sign(d, "leaf", "ca", Key::Rsa, None, false);
    assert!(is_v1(der(d, "ca").as_ref()));
    assert!(is_v1(der(d, "leaf").as_ref()));
    sign(
        d,
        "v3",
        "ca",
        Key::Rsa,
        Some("extendedKeyUsage=clientAuth\n"),
        false,
    );
    assert!(!is_v1(der(d, "v3").as_ref()));
}

#[test]
#[rustfmt::skip]
fn accept_refuse_table() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    v1_root(d, "ca", Key::Rsa);
    v1_root(d, "other-ca", Key::Rsa);
    v3_root(d, "v3-ca");
    v1_root(d, "ec-ca", Key::Ec);
    v1_root(d, "ed-ca", Key::Ed25519);
    sign(d, "v1-leaf", "ca", Key::Rsa, None, false);
    sign(d, "v1-under-v3-ca", "v3-ca", Key::Ec, None, false);
    sign(d, "v1-ec", "ec-ca", Key::Ec, None, false);
    sign(d, "v1-ed", "ed-ca", Key::Ed25519, None, false);
    sign(d, "v1-other", "other-ca", Key::Rsa, None, false);
    sign(d, "v1-sha1", "ca", Key::Rsa, None, true);
    sign(
        d,
        "eku-client",
        "ca",
        Key::Rsa,
        Some("extendedKeyUsage=clientAuth\n"),
        false,
    );
    sign(
        d,
        "eku-server",
        "ca",
        Key::Rsa,
        Some("extendedKeyUsage=serverAuth\n"),
        false,
    );
    sign(
        d,
        "no-eku",
        "ca",
        Key::Rsa,
        Some("keyUsage=digitalSignature\n"),
        false,
    );
    // A version 1 intermediate (Go: not a CA) and a proper v3 one.
    sign(d, "v1-inter", "ca", Key::Rsa, None, false);
    sign(d, "under-v1-inter", "v1-inter", Key::Rsa, None, false);
    sign(
        d,
        "v3-inter",
        "ca",
        Key::Rsa,
        Some("basicConstraints=critical,CA:TRUE\n"),
        false,
    );
    sign(d, "under-v3-inter", "v3-inter", Key::Rsa, None, false);
    let mut tampered = der(d, "v1-leaf").to_vec();
    let last = tampered.len() - 1;
    tampered[last] ^= 0x01;
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(&tampered);
    let pem = format!("-----BEGIN CERTIFICATE-----\n{b64}\n-----END CERTIFICATE-----\n");
    std::fs::write(d.join("tampered.crt"), pem).unwrap();

    use Purpose::{ClientAuth as C, ServerAuth as S};
    // (case, leaf, intermediates sent, roots, days from now, purpose, expected refusal)
    type Check = fn(&Reason) -> bool;
    type Case = (&'static str, &'static str, &'static [&'static str], &'static [&'static str], i64, Purpose, Option<Check>);
    let cases: &[Case] = &[
        ("v1 leaf, v1 CA", "v1-leaf", &[], &["ca"], 0, C, None),
        ("v1 leaf, v1 CA, server", "v1-leaf", &[], &["ca"], 0, S, None),
        ("among several CAs", "v1-leaf", &[], &["other-ca", "v3-ca", "ca"], 0, C, None),
        ("v1 leaf, v3 CA", "v1-under-v3-ca", &[], &["v3-ca"], 0, C, None),
        ("v1 ECDSA", "v1-ec", &[], &["ec-ca"], 0, C, None),
        ("v1 Ed25519", "v1-ed", &[], &["ed-ca"], 0, C, None),
        ("v1 self-signed leaf in the roots", "ca", &[], &["ca"], 0, C, None),
        ("v3 clientAuth", "eku-client", &[], &["ca"], 0, C, None),
        ("v3 without EKU", "no-eku", &[], &["ca"], 0, C, None),
        ("v3 intermediate", "under-v3-inter", &["v3-inter"], &["ca"], 0, C, None),
        ("expired", "v1-leaf", &[], &["ca"], 20, C, Some(|r| matches!(r, Reason::Expired { .. }))),
        ("not yet valid", "v1-leaf", &[], &["ca"], -2, C, Some(|r| matches!(r, Reason::NotYetValid { .. }))),
        ("wrong CA", "v1-other", &[], &["ca"], 0, C, Some(|r| matches!(r, Reason::UnknownIssuer { .. }))),
        ("tampered", "tampered", &[], &["ca"], 0, C, Some(|r| matches!(r, Reason::BadSignature { .. }))),
        ("SHA-1", "v1-sha1", &[], &["ca"], 0, C, Some(|r| matches!(r, Reason::UnsupportedSignature { .. }))),
        ("serverAuth as client", "eku-server", &[], &["ca"], 0, C, Some(|r| matches!(r, Reason::KeyUsage { purpose: C }))),
        ("clientAuth as server", "eku-client", &[], &["ca"], 0, S, Some(|r| matches!(r, Reason::KeyUsage { purpose: S }))),
        ("v1 intermediate", "under-v1-inter", &["v1-inter"], &["ca"], 0, C, Some(|r| matches!(r, Reason::NotCa))),
    ];
    for (name, leaf, inters, roots, days, purpose, want) in cases {
        let inters: Vec<_> = inters.iter().map(|n| der(d, n)).collect();
        let leaf = der(d, leaf);
        let got = verify(leaf.as_ref(), &inters, &anchors(d, roots), at(*days), *purpose, &algs());
        match (want, got) {
            (None, Ok(())) => {}
            (Some(check), Err(e)) => assert!(check(&e.reason), "{name}: wrong refusal: {e}"),
            (None, Err(e)) => panic!("{name}: refused: {e}"),
            (Some(_), Ok(())) => panic!("{name}: accepted"),
        }
    }
}

#[test]
fn refusals_name_the_certificate_the_ca_file_and_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    v1_root(d, "ca", Key::Ec);
    v1_root(d, "other-ca", Key::Ec);
    sign(
        d,
        "apiserver-kubelet-client",
        "other-ca",
        Key::Ec,
        None,
        false,
    );
    let leaf = der(d, "apiserver-kubelet-client");
    let e = verify(
        leaf.as_ref(),
        &[],
        &anchors(d, &["ca"]),
        at(0),
        Purpose::ClientAuth,
        &algs(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("CN=apiserver-kubelet-client"), "{e}");
    assert!(e.contains("/etc/kubernetes/pki/ca.crt"), "{e}");
    assert!(
        e.contains("is not signed by any CA") && e.contains("CN=other-ca"),
        "{e}"
    );
    let e = verify(
        leaf.as_ref(),
        &[],
        &anchors(d, &["other-ca"]),
        at(30),
        Purpose::ClientAuth,
        &algs(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("has expired: not valid after 20"), "{e}");
}

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
