//! `containerRuntimeEndpoint` validation: a `unix://` URL or an absolute socket path, as the CRI
//! client (`rkubelet_cri::parse_endpoint`, upstream `util.GetAddressAndDialer`) will accept it.
//!
//! The CRI client needs tokio and this crate must not, so the rule lives here as well; the
//! kubelet's `tests/endpoint_rules.rs` keeps the two in step on a table of endpoints.

use std::path::PathBuf;

/// The same text as `rkubelet_cri::CriError::InvalidEndpoint`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CRI endpoint {endpoint:?}: {reason}")]
pub struct EndpointError {
    pub endpoint: String,
    pub reason: &'static str,
}

/// The socket path of a CRI endpoint.
pub fn parse_endpoint(endpoint: &str) -> Result<PathBuf, EndpointError> {
    let err = |reason| EndpointError {
        endpoint: endpoint.to_string(),
        reason,
    };
    if endpoint.contains("://") && !endpoint.starts_with("unix://") {
        return Err(err("only unix:// endpoints are supported on Linux"));
    }
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if !path.starts_with('/') {
        return Err(err("socket path must be absolute"));
    }
    Ok(PathBuf::from(path))
}
