//! One certificate from the cluster: a CertificateSigningRequest (certificates.k8s.io/v1) for a key,
//! then waiting until it is approved and signed (upstream `csr.RequestCertificate` +
//! `WaitForCertificate`).

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::ByteString;
use kube::api::{Api, ObjectMeta, PostParams};
use tracing::info;

use super::CertError;

/// Upstream's signer for kubelet client certs (auto-approved by csrapproving).
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Upstream's signer for kubelet serving certs (approved by an admin or an external approver).
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

const POLL: Duration = Duration::from_secs(1);

/// What to ask for.
#[derive(Debug, Clone)]
pub struct Request {
    /// `node-csr-` for bootstrap, `csr-` for rotation, as upstream names them.
    pub generate_name: &'static str,
    pub signer: &'static str,
    pub node_name: String,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
    pub usages: Vec<&'static str>,
}

impl Request {
    /// Upstream's client CSR: no SANs, usages digital signature, key encipherment, client auth.
    pub fn client(node_name: &str, generate_name: &'static str) -> Request {
        Request {
            generate_name,
            signer: CLIENT_SIGNER,
            node_name: node_name.to_string(),
            dns_names: Vec::new(),
            ips: Vec::new(),
            usages: vec!["digital signature", "key encipherment", "client auth"],
        }
    }

    /// Upstream's serving CSR: the node's host names and addresses as SANs, server auth.
    pub fn serving(node_name: &str, dns_names: Vec<String>, ips: Vec<IpAddr>) -> Request {
        Request {
            generate_name: "csr-",
            signer: SERVING_SIGNER,
            node_name: node_name.to_string(),
            dns_names,
            ips,
            usages: vec!["digital signature", "key encipherment", "server auth"],
        }
    }

    /// The PKCS#10 request in PEM: CN `system:node:<name>`, O `system:nodes`, the SANs.
    pub fn pem(&self, key: &rcgen::KeyPair) -> Result<String, CertError> {
        let mut params = rcgen::CertificateParams::new(self.dns_names.clone())?;
        for ip in &self.ips {
            params
                .subject_alt_names
                .push(rcgen::SanType::IpAddress(*ip));
        }
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("system:node:{}", self.node_name),
        );
        Ok(params.serialize_request(key)?.pem()?)
    }
}

/// Creates the CSR and waits up to `timeout` for the signed certificate (PEM). Denied and Failed
/// CSRs are errors naming the reason, as upstream reports them.
pub async fn request_certificate(
    client: &kube::Client,
    req: &Request,
    key: &rcgen::KeyPair,
    timeout: Duration,
) -> Result<String, CertError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some(req.generate_name.to_string()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(req.pem(key)?.into_bytes()),
            signer_name: req.signer.to_string(),
            usages: Some(req.usages.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        status: None,
    };
    let created = api.create(&PostParams::default(), &csr).await?;
    let name = created.metadata.name.clone().unwrap_or_default();
    info!(csr = %name, signer = req.signer, "certificate signing request created; waiting for approval and issuance");
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let csr = api.get(&name).await?;
        if let Some(pem) = issued(&name, &csr)? {
            info!(csr = %name, "certificate signing request approved and issued");
            return Ok(pem);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CertError::Csr {
                name,
                message: format!("not approved and issued within {timeout:?}"),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Some(cert) once approved and signed, None while pending, Err when denied or failed.
fn issued(name: &str, csr: &CertificateSigningRequest) -> Result<Option<String>, CertError> {
    let Some(status) = &csr.status else {
        return Ok(None);
    };
    let mut approved = false;
    for c in status.conditions.iter().flatten() {
        let reason = c.reason.clone().unwrap_or_default();
        let message = c.message.clone().unwrap_or_default();
        match c.type_.as_str() {
            "Denied" => {
                return Err(CertError::Csr {
                    name: name.to_string(),
                    message: format!("denied, reason: {reason:?}, message: {message:?}"),
                })
            }
            "Failed" => {
                return Err(CertError::Csr {
                    name: name.to_string(),
                    message: format!("failed, reason: {reason:?}, message: {message:?}"),
                })
            }
            "Approved" => approved = true,
            _ => {}
        }
    }
    match &status.certificate {
        Some(c) if approved && !c.0.is_empty() => {
            Ok(Some(String::from_utf8_lossy(&c.0).into_owned()))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestStatus,
    };
    use x509_parser::prelude::FromDer;

    fn with(conds: &[&str], cert: Option<&str>) -> CertificateSigningRequest {
        CertificateSigningRequest {
            status: Some(CertificateSigningRequestStatus {
                conditions: Some(
                    conds
                        .iter()
                        .map(|t| CertificateSigningRequestCondition {
                            type_: t.to_string(),
                            status: "True".into(),
                            reason: Some("R".into()),
                            message: Some("M".into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                certificate: cert.map(|c| ByteString(c.as_bytes().to_vec())),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pending_approved_denied_failed() {
        assert_eq!(
            issued("a", &CertificateSigningRequest::default()).unwrap(),
            None
        );
        assert_eq!(issued("a", &with(&["Approved"], None)).unwrap(), None);
        assert_eq!(issued("a", &with(&[], Some("C"))).unwrap(), None);
        assert_eq!(
            issued("a", &with(&["Approved"], Some("C"))).unwrap(),
            Some("C".into())
        );
        let e = issued("csr-x", &with(&["Denied"], None))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("csr-x") && e.contains("denied") && e.contains("\"R\""),
            "{e}"
        );
        let e = issued("csr-x", &with(&["Failed"], None))
            .unwrap_err()
            .to_string();
        assert!(e.contains("failed"), "{e}");
    }

    #[test]
    fn request_has_node_subject_and_sans() {
        let key = rcgen::KeyPair::generate().unwrap();
        let req = Request::serving(
            "node-a",
            vec!["node-a".into()],
            vec![IpAddr::from([10, 0, 0, 7])],
        );
        let pem = req.pem(&key).unwrap();
        let der = tokio_rustls::rustls::pki_types::CertificateSigningRequestDer::from_pem_slice(
            pem.as_bytes(),
        );
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        let der = der.unwrap();
        let (_, csr) =
            x509_parser::certification_request::X509CertificationRequest::from_der(der.as_ref())
                .unwrap();
        let subject = csr.certification_request_info.subject.to_string();
        assert!(subject.contains("CN=system:node:node-a"), "{subject}");
        assert!(subject.contains("O=system:nodes"), "{subject}");
        assert_eq!(Request::client("n", "node-csr-").usages.len(), 3);
    }
}
