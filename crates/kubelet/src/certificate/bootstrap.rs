//! TLS bootstrap at startup (upstream `pkg/kubelet/certificate/bootstrap.LoadClientCert`): when
//! `--kubeconfig` has no valid client cert, get one with the `--bootstrap-kubeconfig` credentials
//! and write a kubeconfig that uses it.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use base64::Engine;
use kube::config::{AuthInfo, Kubeconfig, NamedAuthInfo, NamedCluster};
use tracing::info;

use super::csr::{self, Request};
use super::{io_err, CertError, CertKey, Store};

/// Upstream keeps the key of a pending bootstrap here, so that a restart while waiting for
/// approval reuses it instead of orphaning the CSR's key.
pub const TMP_KEY_FILE: &str = "kubelet-client.key.tmp";

/// Upstream waits an hour for the bootstrap CSR before giving up (and restarting).
pub const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(3600);

fn kc_err(path: &Path) -> impl Fn(String) -> CertError {
    let path = path.to_path_buf();
    move |message| CertError::Kubeconfig {
        path: path.clone(),
        message,
    }
}

/// The current context's cluster and user of a kubeconfig.
fn current(
    kc: &Kubeconfig,
    path: &Path,
) -> Result<(NamedCluster, Option<NamedAuthInfo>), CertError> {
    let err = kc_err(path);
    let ctx_name = kc
        .current_context
        .clone()
        .ok_or_else(|| err("no current-context".into()))?;
    let ctx = kc
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.context.clone())
        .ok_or_else(|| err(format!("context {ctx_name:?} not found")))?;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .cloned()
        .ok_or_else(|| err(format!("cluster {:?} not found", ctx.cluster)))?;
    let user = ctx
        .user
        .and_then(|u| kc.auth_infos.iter().find(|a| a.name == u).cloned());
    Ok((cluster, user))
}

/// The credentials of a kubeconfig's current user, if it has any.
fn current_auth(path: &Path) -> Result<Option<AuthInfo>, CertError> {
    let kc = Kubeconfig::read_from(path).map_err(|e| kc_err(path)(e.to_string()))?;
    let (_, user) = current(&kc, path)?;
    Ok(user.and_then(|u| u.auth_info))
}

/// A kubeconfig's base64 `*-data` field, decoded; `what` names the field in the error.
fn decode_data(path: &Path, what: &str, data: &str) -> Result<Vec<u8>, CertError> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| kc_err(path)(format!("{what}: {e}")))
}

/// The client cert (PEM) a kubeconfig's current user presents, if any.
pub fn kubeconfig_client_cert(path: &Path) -> Result<Option<Vec<u8>>, CertError> {
    let err = kc_err(path);
    let Some(auth) = current_auth(path)? else {
        return Ok(None);
    };
    if let Some(data) = &auth.client_certificate_data {
        return decode_data(path, "client-certificate-data", data).map(Some);
    }
    match &auth.client_certificate {
        Some(file) => std::fs::read(file)
            .map(Some)
            .map_err(|e| err(format!("client-certificate {file}: {e}"))),
        None => Ok(None),
    }
}

/// The client cert and key a kubeconfig's current user embeds as data, if it embeds both (kubeadm
/// init's first kubelet.conf). Upstream's client cert manager takes such a pair as its bootstrap
/// pair (`certConfig.CertData`/`KeyData`); a pair given as files is read from them instead.
pub fn kubeconfig_embedded_pair(path: &Path) -> Result<Option<CertKey>, CertError> {
    let Some(auth) = current_auth(path)? else {
        return Ok(None);
    };
    let (Some(cert), Some(key)) = (&auth.client_certificate_data, &auth.client_key_data) else {
        return Ok(None);
    };
    let decode = |what: &str, data: &str| {
        String::from_utf8(decode_data(path, what, data)?)
            .map_err(|_| kc_err(path)(format!("{what}: not UTF-8 PEM")))
    };
    use secrecy::ExposeSecret;
    Ok(Some(CertKey {
        cert_pem: decode("client-certificate-data", cert)?,
        key_pem: decode("client-key-data", key.expose_secret())?,
    }))
}

/// Upstream `isClientConfigStillValid`: the file exists and every cert of its user is unexpired.
/// Any problem reading it means "not valid" (bootstrap then replaces it), as upstream.
pub fn kubeconfig_still_valid(path: &Path) -> bool {
    if !path.exists() {
        return false;
    }
    match kubeconfig_client_cert(path) {
        Ok(Some(pem)) => super::all_unexpired(&pem, SystemTime::now()),
        Ok(None) => false,
        Err(e) => {
            info!(error = %e, "kubeconfig is unusable; bootstrapping a new client certificate");
            false
        }
    }
}

/// Where to write the kubeconfig that bootstrapping yields: the bootstrap cluster (server, CA),
/// the store's current pem as credentials.
fn write_kubeconfig(bootstrap: &Path, kubeconfig: &Path, pem: &Path) -> Result<(), CertError> {
    let err = kc_err(bootstrap);
    let kc = Kubeconfig::read_from(bootstrap).map_err(|e| err(e.to_string()))?;
    let (cluster, _) = current(&kc, bootstrap)?;
    let cluster = cluster
        .cluster
        .ok_or_else(|| err("current cluster is empty".into()))?;
    let server = cluster
        .server
        .clone()
        .ok_or_else(|| err("cluster has no server".into()))?;
    let ca =
        match (
            &cluster.certificate_authority_data,
            &cluster.certificate_authority,
        ) {
            (Some(d), _) => Some(d.clone()),
            (None, Some(f)) => Some(base64::engine::general_purpose::STANDARD.encode(
                std::fs::read(f).map_err(|e| err(format!("certificate-authority {f}: {e}")))?,
            )),
            (None, None) => None,
        };
    let text = super::render_kubeconfig(
        &server,
        ca.as_deref(),
        cluster.insecure_skip_tls_verify.unwrap_or(false),
        pem,
    );
    if let Some(dir) = kubeconfig.parent() {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    let tmp = kubeconfig.with_extension("tmp");
    super::write_private(&tmp, text.as_bytes()).map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, kubeconfig).map_err(io_err(kubeconfig))?;
    info!(kubeconfig = %kubeconfig.display(), cert = %pem.display(), "wrote kubeconfig for the bootstrapped client certificate");
    Ok(())
}

/// A client from a kubeconfig file.
pub async fn client_from(path: &Path) -> Result<kube::Client, CertError> {
    super::client::from_kubeconfig(path).await
}

/// The pending key from `cert_dir/kubelet-client.key.tmp`, or a new ECDSA P-256 key written there.
fn pending_key(cert_dir: &Path) -> Result<rcgen::KeyPair, CertError> {
    let path = cert_dir.join(TMP_KEY_FILE);
    if let Ok(text) = std::fs::read_to_string(&path) {
        if let Ok(key) = rcgen::KeyPair::from_pem(&text) {
            return Ok(key);
        }
    }
    std::fs::create_dir_all(cert_dir).map_err(io_err(cert_dir))?;
    let key = rcgen::KeyPair::generate()?;
    super::write_private(&path, key.serialize_pem().as_bytes()).map_err(io_err(&path))?;
    Ok(key)
}

/// Upstream `LoadClientCert`. Returns the kubeconfig path to build the kubelet's client from.
pub async fn load_client_cert(
    kubeconfig: &Path,
    bootstrap: &Path,
    cert_dir: &Path,
    node_name: &str,
) -> Result<PathBuf, CertError> {
    if kubeconfig_still_valid(kubeconfig) {
        info!(kubeconfig = %kubeconfig.display(), "client certificate in kubeconfig is valid; no bootstrap needed");
        return Ok(kubeconfig.to_path_buf());
    }
    let store = Store::client(cert_dir);
    if let Ok(Some(ck)) = store.load() {
        if super::all_unexpired(ck.cert_pem.as_bytes(), SystemTime::now()) {
            info!(cert = %store.current_path().display(), "using the valid client certificate already in the cert dir");
            write_kubeconfig(bootstrap, kubeconfig, &store.current_path())?;
            return Ok(kubeconfig.to_path_buf());
        }
    }
    info!(bootstrap_kubeconfig = %bootstrap.display(), "no valid client certificate; requesting one with the bootstrap credentials");
    let client = client_from(bootstrap).await?;
    let key = pending_key(cert_dir)?;
    let cert_pem = csr::request_certificate(
        &client,
        &Request::client(node_name, "node-csr-"),
        &key,
        BOOTSTRAP_TIMEOUT,
    )
    .await?;
    let pem = store.update(&CertKey {
        cert_pem,
        key_pem: key.serialize_pem(),
    })?;
    let _ = std::fs::remove_file(cert_dir.join(TMP_KEY_FILE));
    write_kubeconfig(bootstrap, kubeconfig, &pem)?;
    Ok(kubeconfig.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_or_certless_kubeconfig_is_not_valid() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!kubeconfig_still_valid(&dir.path().join("none")));
        let token_only = dir.path().join("bootstrap.kubeconfig");
        std::fs::write(
            &token_only,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: https://x}\n\
             users:\n- name: u\n  user: {token: abcdef.0123456789abcdef}\n\
             contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
        )
        .unwrap();
        assert!(!kubeconfig_still_valid(&token_only));
    }

    #[test]
    fn written_kubeconfig_carries_bootstrap_cluster_and_reads_back_the_cert() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, "CA-PEM").unwrap();
        let boot = dir.path().join("bootstrap.kubeconfig");
        std::fs::write(
            &boot,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: https://api:6443, certificate-authority: {}}}\n\
                 users:\n- name: u\n  user: {{token: abcdef.0123456789abcdef}}\n\
                 contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
                ca.display()
            ),
        )
        .unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let store = Store::client(&dir.path().join("pki"));
        let pem = store
            .update(&CertKey {
                cert_pem: cert.pem(),
                key_pem: key.serialize_pem(),
            })
            .unwrap();
        let out = dir.path().join("kubelet.conf");
        write_kubeconfig(&boot, &out, &pem).unwrap();
        let kc = Kubeconfig::read_from(&out).unwrap();
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://api:6443"));
        assert_eq!(
            cluster.certificate_authority_data.as_deref(),
            Some(
                base64::engine::general_purpose::STANDARD
                    .encode("CA-PEM")
                    .as_str()
            )
        );
        let read = kubeconfig_client_cert(&out).unwrap().unwrap();
        assert!(String::from_utf8(read).unwrap().contains(cert.pem().trim()));
        // rcgen's default validity (1975-4096) is unexpired.
        assert!(kubeconfig_still_valid(&out));
    }

    #[test]
    fn pending_key_is_reused() {
        let dir = tempfile::tempdir().unwrap();
        let a = pending_key(dir.path()).unwrap();
        let b = pending_key(dir.path()).unwrap();
        assert_eq!(a.serialize_pem(), b.serialize_pem());
    }
}
