//! Kubelet certificates issued by the cluster (upstream `pkg/kubelet/certificate`): TLS bootstrap
//! of the client cert from a bootstrap token, its rotation, and the serving cert from
//! `kubernetes.io/kubelet-serving` CSRs (`serverTLSBootstrap`).
//!
//! The pure parts live here (validity, the rotation deadline, the on-disk store, kubeconfig text);
//! `csr` talks to the API, `bootstrap` is the startup step, `manager` the rotation tasks.
//! `client` builds the API client from a kubeconfig, `throttle` puts `kubeAPIQPS` in front of it;
//! `verify` and `tls_verify` accept X.509 version 1 certificates where Go's crypto/x509 does.

pub mod bootstrap;
pub mod client;
pub mod csr;
pub mod manager;
pub mod throttle;
pub mod tls_verify;
pub mod verify;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio_rustls::rustls::pki_types::{pem::PemObject, CertificateDer};

/// What went wrong with a certificate, naming the file or object concerned.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {message}")]
    Invalid { what: String, message: String },
    #[error("generating a key or CSR: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("kubeconfig {}: {message}", path.display())]
    Kubeconfig { path: PathBuf, message: String },
    #[error("certificate signing request {name}: {message}")]
    Csr { name: String, message: String },
    #[error("API request for certificate signing request: {0}")]
    Api(#[from] kube::Error),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CertError {
    let path = path.to_path_buf();
    move |source| CertError::Io { path, source }
}

/// A cert chain and its key, both PEM, as one `kubelet-*-current.pem` file holds them.
#[derive(Clone, PartialEq)]
pub struct CertKey {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The key never reaches a log or a panic message through `{:?}`.
impl std::fmt::Debug for CertKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertKey")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// notBefore and notAfter of the first (leaf) certificate in `pem`.
pub fn validity(pem: &[u8], what: &str) -> Result<(SystemTime, SystemTime), CertError> {
    let invalid = |message: String| CertError::Invalid {
        what: what.to_string(),
        message,
    };
    let der = CertificateDer::pem_slice_iter(pem)
        .next()
        .ok_or_else(|| invalid("no certificate in PEM data".into()))?
        .map_err(|e| invalid(e.to_string()))?;
    let (_, cert) =
        x509_parser::parse_x509_certificate(der.as_ref()).map_err(|e| invalid(e.to_string()))?;
    let to_time = |secs: i64| SystemTime::UNIX_EPOCH + Duration::from_secs(secs.max(0) as u64);
    Ok((
        to_time(cert.validity().not_before.timestamp()),
        to_time(cert.validity().not_after.timestamp()),
    ))
}

/// Upstream `isClientConfigStillValid`: every certificate in the data must be unexpired at `now`.
pub fn all_unexpired(pem: &[u8], now: SystemTime) -> bool {
    let mut any = false;
    for der in CertificateDer::pem_slice_iter(pem) {
        let Ok(der) = der else { return false };
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(der.as_ref()) else {
            return false;
        };
        let not_after = SystemTime::UNIX_EPOCH
            + Duration::from_secs(cert.validity().not_after.timestamp().max(0) as u64);
        if now > not_after {
            return false;
        }
        any = true;
    }
    any
}

/// Upstream `nextRotationDeadline`/`jitteryDuration`: a point 70-90% into the cert's lifetime, so
/// that a fleet of kubelets does not renew at the same instant. `jitter` is uniform in [0, 1).
pub fn rotation_deadline(not_before: SystemTime, not_after: SystemTime, jitter: f64) -> SystemTime {
    let total = not_after
        .duration_since(not_before)
        .unwrap_or(Duration::ZERO);
    not_before + total.mul_f64(0.7 + 0.2 * jitter.clamp(0.0, 1.0))
}

/// Upstream `certificate.FileStore`: `<dir>/<pair>-<timestamp>.pem` files (cert and key in one),
/// and `<pair>-current.pem`, a symlink swapped atomically to the newest.
#[derive(Debug, Clone)]
pub struct Store {
    pub dir: PathBuf,
    pub pair: &'static str,
}

impl Store {
    pub fn client(dir: &Path) -> Store {
        Store {
            dir: dir.to_path_buf(),
            pair: "kubelet-client",
        }
    }

    pub fn server(dir: &Path) -> Store {
        Store {
            dir: dir.to_path_buf(),
            pair: "kubelet-server",
        }
    }

    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.pair))
    }

    /// The current cert and key, or None when there is none yet.
    pub fn load(&self) -> Result<Option<CertKey>, CertError> {
        let path = self.current_path();
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path)(e)),
        };
        split_pem(&data, &path.display().to_string()).map(Some)
    }

    /// Writes a new `<pair>-<timestamp>.pem` (0600) and points `<pair>-current.pem` at it.
    pub fn update(&self, ck: &CertKey) -> Result<PathBuf, CertError> {
        std::fs::create_dir_all(&self.dir).map_err(io_err(&self.dir))?;
        let stamp = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%d-%H-%M-%S")
            .to_string();
        let file = self.dir.join(format!("{}-{stamp}.pem", self.pair));
        let mut text = ck.cert_pem.trim_end().to_string();
        text.push('\n');
        text.push_str(ck.key_pem.trim_end());
        text.push('\n');
        // Written aside and renamed in: two pairs stored within one second (a kubeconfig's
        // embedded pair, then the one issued for it) share the name, and the current link may
        // already point at it, so a reader never sees a half-written file.
        let part = self.dir.join(format!("{}-{stamp}.pem.part", self.pair));
        write_private(&part, text.as_bytes()).map_err(io_err(&part))?;
        std::fs::rename(&part, &file).map_err(io_err(&file))?;
        let tmp = self.dir.join(format!("{}-updated.pem", self.pair));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&file, &tmp).map_err(io_err(&tmp))?;
        let current = self.current_path();
        std::fs::rename(&tmp, &current).map_err(io_err(&current))?;
        Ok(current)
    }
}

/// Splits a combined PEM file into its certificates and its private key.
pub fn split_pem(data: &[u8], what: &str) -> Result<CertKey, CertError> {
    let text = std::str::from_utf8(data).map_err(|_| CertError::Invalid {
        what: what.to_string(),
        message: "not UTF-8 PEM".into(),
    })?;
    let (mut cert_pem, mut key_pem) = (String::new(), String::new());
    let mut current: Option<bool> = None;
    for line in text.lines() {
        if line.starts_with("-----BEGIN ") {
            current = Some(line.contains("CERTIFICATE"));
        }
        match current {
            Some(true) => {
                cert_pem.push_str(line);
                cert_pem.push('\n');
            }
            Some(false) => {
                key_pem.push_str(line);
                key_pem.push('\n');
            }
            None => {}
        }
        if line.starts_with("-----END ") {
            current = None;
        }
    }
    if cert_pem.is_empty() || key_pem.is_empty() {
        return Err(CertError::Invalid {
            what: what.to_string(),
            message: "needs a certificate and a private key".into(),
        });
    }
    Ok(CertKey { cert_pem, key_pem })
}

/// Keys are written 0600 from the start, never briefly world-readable.
pub(crate) fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(data)
}

/// Upstream `writeKubeconfigFromBootstrapping`: the bootstrap kubeconfig's cluster, and a user
/// whose cert and key are both the store's `-current.pem`, so that rotation needs no rewrite.
/// Strings are JSON-quoted, which YAML reads as they are.
pub fn render_kubeconfig(
    server: &str,
    ca_data_b64: Option<&str>,
    insecure: bool,
    pem: &Path,
) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    let mut cluster = format!("    server: {}\n", q(server));
    if let Some(ca) = ca_data_b64 {
        cluster.push_str(&format!("    certificate-authority-data: {}\n", q(ca)));
    }
    if insecure {
        cluster.push_str("    insecure-skip-tls-verify: true\n");
    }
    let pem = q(&pem.display().to_string());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: default-cluster\n  cluster:\n{cluster}\
         users:\n- name: default-auth\n  user:\n    client-certificate: {pem}\n    client-key: {pem}\n\
         contexts:\n- name: default-context\n  context:\n    cluster: default-cluster\n    \
         user: default-auth\n    namespace: default\ncurrent-context: default-context\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(days: i64) -> CertKey {
        let mut params = rcgen::CertificateParams::new(vec!["n".to_string()]).unwrap();
        let now = k8s_openapi::jiff::Timestamp::now();
        let end = now + k8s_openapi::jiff::SignedDuration::from_hours(24 * days);
        let ymd = |t: k8s_openapi::jiff::Timestamp| {
            let z = t.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC);
            rcgen::date_time_ymd(z.year().into(), z.month() as u8, z.day() as u8)
        };
        params.not_before = ymd(now - k8s_openapi::jiff::SignedDuration::from_hours(24 * 400));
        params.not_after = ymd(end);
        let key = rcgen::KeyPair::generate().unwrap();
        CertKey {
            cert_pem: params.self_signed(&key).unwrap().pem(),
            key_pem: key.serialize_pem(),
        }
    }

    #[test]
    fn rotation_deadline_is_between_70_and_90_percent() {
        let nb = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let na = nb + Duration::from_secs(1_000);
        assert_eq!(
            rotation_deadline(nb, na, 0.0),
            nb + Duration::from_secs(700)
        );
        assert_eq!(
            rotation_deadline(nb, na, 1.0),
            nb + Duration::from_secs(900)
        );
        for _ in 0..1000 {
            let d = rotation_deadline(nb, na, fastrand::f64());
            assert!(d >= nb + Duration::from_secs(700) && d <= nb + Duration::from_secs(900));
        }
        // A cert whose notAfter precedes notBefore rotates at once rather than panicking.
        assert_eq!(rotation_deadline(na, nb, 0.5), na);
    }

    #[test]
    fn validity_and_expiry() {
        let live = cert(30);
        let (nb, na) = validity(live.cert_pem.as_bytes(), "live").unwrap();
        assert!(nb < SystemTime::now() && na > SystemTime::now());
        assert!(all_unexpired(live.cert_pem.as_bytes(), SystemTime::now()));
        let dead = cert(-2);
        assert!(!all_unexpired(dead.cert_pem.as_bytes(), SystemTime::now()));
        // A chain is valid only if every cert is.
        let chain = format!("{}{}", live.cert_pem, dead.cert_pem);
        assert!(!all_unexpired(chain.as_bytes(), SystemTime::now()));
        assert!(!all_unexpired(b"", SystemTime::now()));
        let e = validity(b"garbage", "kubelet-client-current.pem").unwrap_err();
        assert!(e.to_string().contains("kubelet-client-current.pem"), "{e}");
    }

    #[test]
    fn store_writes_timestamped_file_and_swaps_current() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::client(dir.path());
        assert_eq!(store.load().unwrap(), None);
        let a = cert(30);
        let cur = store.update(&a).unwrap();
        assert_eq!(cur, dir.path().join("kubelet-client-current.pem"));
        let target = std::fs::read_link(&cur).unwrap();
        let name = target.file_name().unwrap().to_str().unwrap().to_string();
        assert!(
            name.starts_with("kubelet-client-2") && name.ends_with(".pem"),
            "{name}"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&target).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let loaded = store.load().unwrap().unwrap();
        assert_eq!(loaded.cert_pem.trim(), a.cert_pem.trim());
        assert_eq!(loaded.key_pem.trim(), a.key_pem.trim());
        std::thread::sleep(Duration::from_millis(1100));
        let b = cert(30);
        store.update(&b).unwrap();
        assert_eq!(
            store.load().unwrap().unwrap().cert_pem.trim(),
            b.cert_pem.trim()
        );
        assert!(!dir.path().join("kubelet-client-updated.pem").exists());
    }

    #[test]
    fn kubeconfig_points_at_current_pem_and_parses() {
        let text = render_kubeconfig(
            "https://127.0.0.1:6443",
            Some("Q0EK"),
            false,
            Path::new("/var/lib/kubelet/pki/kubelet-client-current.pem"),
        );
        let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("default-context"));
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some("Q0EK"));
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        let pem = "/var/lib/kubelet/pki/kubelet-client-current.pem";
        assert_eq!(user.client_certificate.as_deref(), Some(pem));
        assert_eq!(user.client_key.as_deref(), Some(pem));
    }
}
