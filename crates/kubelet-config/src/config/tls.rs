//! `tlsMinVersion` and `tlsCipherSuites` of the 10250 server (upstream `InitializeTLS` with
//! component-base's `cliflag.TLSVersion` / `cliflag.TLSCipherSuites`), checked against Go's
//! names and against what rkubelet's TLS library (rustls, ring provider) can serve.
//!
//! - Every name Go's crypto/tls knows is accepted, as upstream. Those rustls does not implement
//!   (CBC, RC4, 3DES, RSA key exchange: all listed as insecure or legacy by Go) are left out
//!   with a warning; a list left with nothing rustls can serve is an error at start.
//! - An unknown name is an error with upstream's message (`Cipher suite X not supported or
//!   doesn't exist`), every one listed.
//! - `VersionTLS10` / `VersionTLS11` are accepted with a warning and served as `VersionTLS12`:
//!   rustls has no TLS 1.0/1.1. A minimum is a floor, so every client that can speak TLS 1.2
//!   (all Kubernetes components, curl, Prometheus) still connects, and refusing to start would
//!   break a drop-in swap for no security gain.
//! - TLS 1.3 suites: Go ignores them in `CipherSuites` (it always offers all three). rkubelet
//!   does the same when the list names none of them; when it names some, only those are served
//!   (what an operator who lists them means; every TLS 1.3 client must support
//!   TLS_AES_128_GCM_SHA256).

use super::Reader;

/// A TLS protocol version by its Go name (`VersionTLS12`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls10,
    Tls11,
    Tls12,
    Tls13,
}

impl TlsVersion {
    /// Upstream `cliflag.TLSVersion`'s table.
    pub const NAMES: [(&'static str, TlsVersion); 4] = [
        ("VersionTLS10", TlsVersion::Tls10),
        ("VersionTLS11", TlsVersion::Tls11),
        ("VersionTLS12", TlsVersion::Tls12),
        ("VersionTLS13", TlsVersion::Tls13),
    ];

    pub fn parse(s: &str) -> Option<TlsVersion> {
        Self::NAMES.iter().find(|(n, _)| *n == s).map(|(_, v)| *v)
    }
}

/// One cipher suite Go's crypto/tls knows: its Go name, IANA id, and whether rustls (ring)
/// serves it.
#[derive(Debug, Clone, Copy)]
pub struct GoSuite {
    pub name: &'static str,
    pub id: u16,
    pub tls13: bool,
    pub served: bool,
}

const fn s(name: &'static str, id: u16, tls13: bool, served: bool) -> GoSuite {
    GoSuite {
        name,
        id,
        tls13,
        served,
    }
}

/// `tls.CipherSuites()` + `tls.InsecureCipherSuites()` + the two legacy CHACHA20 names
/// component-base keeps.
pub const GO_SUITES: &[GoSuite] = &[
    s("TLS_AES_128_GCM_SHA256", 0x1301, true, true),
    s("TLS_AES_256_GCM_SHA384", 0x1302, true, true),
    s("TLS_CHACHA20_POLY1305_SHA256", 0x1303, true, true),
    s(
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        0xc02b,
        false,
        true,
    ),
    s(
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        0xc02c,
        false,
        true,
    ),
    s("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", 0xc02f, false, true),
    s("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", 0xc030, false, true),
    s(
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        0xcca8,
        false,
        true,
    ),
    s(
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        0xcca9,
        false,
        true,
    ),
    s("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", 0xcca8, false, true),
    s(
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
        0xcca9,
        false,
        true,
    ),
    s("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", 0xc009, false, false),
    s("TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", 0xc00a, false, false),
    s("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", 0xc013, false, false),
    s("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", 0xc014, false, false),
    s("TLS_RSA_WITH_AES_128_GCM_SHA256", 0x009c, false, false),
    s("TLS_RSA_WITH_AES_256_GCM_SHA384", 0x009d, false, false),
    s("TLS_RSA_WITH_AES_128_CBC_SHA", 0x002f, false, false),
    s("TLS_RSA_WITH_AES_256_CBC_SHA", 0x0035, false, false),
    s("TLS_RSA_WITH_AES_128_CBC_SHA256", 0x003c, false, false),
    s("TLS_RSA_WITH_3DES_EDE_CBC_SHA", 0x000a, false, false),
    s("TLS_RSA_WITH_RC4_128_SHA", 0x0005, false, false),
    s("TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", 0xc012, false, false),
    s("TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", 0xc007, false, false),
    s("TLS_ECDHE_RSA_WITH_RC4_128_SHA", 0xc011, false, false),
    s(
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
        0xc023,
        false,
        false,
    ),
    s(
        "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
        0xc027,
        false,
        false,
    ),
];

/// What the 10250 server negotiates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingTls {
    /// The lowest version served: `Tls12` (upstream's default) or `Tls13`.
    pub min_version: TlsVersion,
    /// IANA ids of the TLS 1.2 suites to serve, in the configured order; `None`: rustls'
    /// defaults; empty: TLS 1.2 is not served (a list of TLS 1.3 names only, or VersionTLS13).
    pub tls12_suites: Option<Vec<u16>>,
    /// IANA ids of the TLS 1.3 suites to serve; empty: all of them (Go's behaviour).
    pub tls13_suites: Vec<u16>,
}

impl Default for ServingTls {
    fn default() -> Self {
        ServingTls {
            min_version: TlsVersion::Tls12,
            tls12_suites: None,
            tls13_suites: Vec::new(),
        }
    }
}

/// The names rkubelet can serve, for error messages.
fn served_names() -> String {
    GO_SUITES
        .iter()
        .filter(|s| s.served)
        .map(|s| s.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Pure: the serving settings from the configured names, with errors and warnings.
pub fn resolve(
    min_version: Option<&str>,
    suites: &[String],
    errors: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> ServingTls {
    let mut out = ServingTls::default();
    match min_version.filter(|v| !v.is_empty()) {
        None => {}
        Some(v) => match TlsVersion::parse(v) {
            Some(TlsVersion::Tls13) => out.min_version = TlsVersion::Tls13,
            Some(TlsVersion::Tls12) => {}
            Some(_) => warnings.push(format!(
                "tlsMinVersion (--tls-min-version): {v} is served as VersionTLS12: rkubelet's TLS library has no TLS 1.0 or 1.1"
            )),
            None => errors.push(format!(
                "tlsMinVersion (--tls-min-version): unknown tls version {v:?}: must be one of {}",
                TlsVersion::NAMES.map(|(n, _)| n).join(", ")
            )),
        },
    }
    if suites.is_empty() {
        return out;
    }
    let mut unserved = Vec::new();
    let mut unknown = false;
    let mut tls12 = Vec::new();
    for name in suites {
        match GO_SUITES.iter().find(|s| s.name == name) {
            None => {
                unknown = true;
                errors.push(format!(
                    "tlsCipherSuites (--tls-cipher-suites): Cipher suite {name} not supported or doesn't exist"
                ));
            }
            Some(s) if !s.served => unserved.push(s.name),
            Some(s) => {
                let list = if s.tls13 {
                    &mut out.tls13_suites
                } else {
                    &mut tls12
                };
                if !list.contains(&s.id) {
                    list.push(s.id);
                }
            }
        }
    }
    if unknown {
        errors.push(format!(
            "tlsCipherSuites (--tls-cipher-suites): rkubelet serves {}",
            served_names()
        ));
        return out;
    }
    if tls12.is_empty() && out.tls13_suites.is_empty() {
        errors.push(format!(
            "tlsCipherSuites (--tls-cipher-suites): none of {} can be served: rkubelet's TLS library (rustls) has no CBC, RC4, 3DES or RSA key exchange suites; it serves {}",
            unserved.join(", "),
            served_names()
        ));
        return out;
    }
    if !unserved.is_empty() {
        warnings.push(format!(
            "tlsCipherSuites (--tls-cipher-suites): {} left out: rkubelet's TLS library (rustls) has no CBC, RC4, 3DES or RSA key exchange suites",
            unserved.join(", ")
        ));
    }
    if out.min_version == TlsVersion::Tls13 && out.tls13_suites.is_empty() {
        warnings.push(
            "tlsCipherSuites (--tls-cipher-suites): TLS 1.3 cipher suites are not configurable by TLS 1.2 names; with tlsMinVersion VersionTLS13 the list is ignored (as upstream)".into(),
        );
    }
    if out.min_version == TlsVersion::Tls13 {
        tls12.clear();
    } else if tls12.is_empty() {
        warnings.push(
            "tlsCipherSuites (--tls-cipher-suites): no TLS 1.2 suite listed: only TLS 1.3 clients can connect (as upstream)".into(),
        );
    }
    out.tls12_suites = Some(tls12);
    out
}

/// Reads both fields from the merged tree.
pub(super) fn read(r: &mut Reader, out: &mut ServingTls, warnings: &mut Vec<String>) {
    let min = r.string("tlsMinVersion");
    let suites = r.string_list("tlsCipherSuites").unwrap_or_default();
    let mut errors = Vec::new();
    *out = resolve(min.as_deref(), &suites, &mut errors, warnings);
    r.errors.extend(errors);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(min: Option<&str>, suites: &[&str]) -> (ServingTls, Vec<String>, Vec<String>) {
        let suites: Vec<String> = suites.iter().map(|s| s.to_string()).collect();
        let (mut e, mut w) = (Vec::new(), Vec::new());
        let t = resolve(min, &suites, &mut e, &mut w);
        (t, e, w)
    }

    #[test]
    fn versions_as_upstream_names() {
        let (t, e, w) = run(None, &[]);
        assert_eq!((t, e.len(), w.len()), (ServingTls::default(), 0, 0));
        assert_eq!(run(Some(""), &[]).0.min_version, TlsVersion::Tls12);
        assert_eq!(
            run(Some("VersionTLS13"), &[]).0.min_version,
            TlsVersion::Tls13
        );
        assert_eq!(
            run(Some("VersionTLS12"), &[]).0.min_version,
            TlsVersion::Tls12
        );
        for old in ["VersionTLS10", "VersionTLS11"] {
            let (t, e, w) = run(Some(old), &[]);
            assert_eq!(t.min_version, TlsVersion::Tls12);
            assert!(e.is_empty());
            assert!(
                w[0].contains(old) && w[0].contains("tlsMinVersion"),
                "{w:?}"
            );
        }
        let (_, e, _) = run(Some("TLS1.3"), &[]);
        assert!(
            e[0].contains("tlsMinVersion (--tls-min-version): unknown tls version \"TLS1.3\""),
            "{e:?}"
        );
    }

    #[test]
    fn cipher_suites_table() {
        // (min, names, tls12 ids, tls13 ids, error contains, warning contains)
        type Case<'a> = (
            Option<&'a str>,
            &'a [&'a str],
            &'a [u16],
            &'a [u16],
            &'a str,
            &'a str,
        );
        let cases: &[Case] = &[
            (
                None,
                &[
                    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
                    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
                ],
                &[0xc030, 0xc02b],
                &[],
                "",
                "",
            ),
            // The legacy CHACHA20 name is the same suite.
            (
                None,
                &[
                    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
                    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
                ],
                &[0xcca8],
                &[],
                "",
                "",
            ),
            // TLS 1.3 names restrict TLS 1.3.
            (
                None,
                &["TLS_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"],
                &[0xc02f],
                &[0x1301],
                "",
                "",
            ),
            // A CIS-style list: the RSA key exchange suites are left out with a warning.
            (
                None,
                &[
                    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                    "TLS_RSA_WITH_AES_256_GCM_SHA384",
                ],
                &[0xc02f],
                &[],
                "",
                "TLS_RSA_WITH_AES_256_GCM_SHA384 left out",
            ),
            // Only suites rustls lacks: refused.
            (
                None,
                &["TLS_RSA_WITH_RC4_128_SHA", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"],
                &[],
                &[],
                "none of TLS_RSA_WITH_RC4_128_SHA, TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA can be served",
                "",
            ),
            // Unknown names: upstream's message, each of them.
            (
                None,
                &["TLS_FOO", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "bar"],
                &[0xc02f],
                &[],
                "Cipher suite bar not supported or doesn't exist",
                "",
            ),
            // TLS 1.3 only with TLS 1.2 names: ignored, as upstream says.
            (
                Some("VersionTLS13"),
                &["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"],
                &[],
                &[],
                "",
                "list is ignored",
            ),
            // TLS 1.3 names only: TLS 1.2 has nothing to offer.
            (
                None,
                &["TLS_AES_256_GCM_SHA384"],
                &[],
                &[0x1302],
                "",
                "only TLS 1.3 clients",
            ),
        ];
        for (i, (min, names, t12, t13, err, warn)) in cases.iter().enumerate() {
            let (t, e, w) = run(*min, names);
            let (e, w) = (e.join("\n"), w.join("\n"));
            if err.is_empty() {
                assert!(e.is_empty(), "case {i}: {e}");
                assert_eq!(t.tls12_suites.as_deref(), Some(*t12), "case {i}");
                assert_eq!(t.tls13_suites, *t13, "case {i}");
            } else {
                assert!(e.contains(err), "case {i}: {e:?} lacks {err:?}");
                assert!(
                    e.contains("rkubelet serves") || e.contains("it serves"),
                    "{e}"
                );
            }
            if warn.is_empty() {
                assert!(w.is_empty(), "case {i}: {w}");
            } else {
                assert!(w.contains(warn), "case {i}: {w:?} lacks {warn:?}");
            }
        }
        let (_, e, _) = run(None, &["TLS_FOO", "bar"]);
        assert!(e[0].contains("Cipher suite TLS_FOO not supported"), "{e:?}");
        assert!(e[1].contains("Cipher suite bar not supported"), "{e:?}");
    }
}
