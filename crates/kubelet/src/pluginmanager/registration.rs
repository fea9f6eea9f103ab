//! One plugin socket's registration handshake (upstream `pluginmanager/operationexecutor`
//! `GenerateRegisterPluginFunc`): dial the socket, `GetInfo`, hand the info to the handler of its
//! type, and tell the plugin the outcome with `NotifyRegistrationStatus`.
//!
//! Also the CSI handler's version check (upstream `csi_plugin.go` `highestSupportedVersion`), a
//! pure function with a table test.

use std::path::{Path, PathBuf};
use std::time::Duration;

use csi_proto::pluginregistration::registration_client::RegistrationClient;
use csi_proto::pluginregistration::{InfoRequest, PluginInfo, RegistrationStatus};
use tonic::transport::Channel;

use super::PluginError;

/// Upstream's `CSIPlugin` plugin type (`pluginregistration/v1` constants).
pub const CSI_PLUGIN: &str = "CSIPlugin";
/// Upstream's `DevicePlugin` plugin type; no handler here yet (the device manager does not exist).
pub const DEVICE_PLUGIN: &str = "DevicePlugin";

/// Upstream dials with a 10 s timeout and gives each registration call 1 s.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
const CALL_TIMEOUT: Duration = Duration::from_secs(1);

/// A lazily connected gRPC channel to a unix socket (both the registration socket and a CSI
/// driver's endpoint are unix sockets).
pub fn unix_channel(path: &Path) -> Result<Channel, PluginError> {
    let path = path.to_path_buf();
    let ep =
        tonic::transport::Endpoint::from_static("http://[::1]:50051").connect_timeout(DIAL_TIMEOUT);
    Ok(
        ep.connect_with_connector_lazy(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(path).await?,
                ))
            }
        })),
    )
}

/// The registration client of one socket.
pub struct Registrant {
    pub socket: PathBuf,
    client: RegistrationClient<Channel>,
}

impl Registrant {
    pub fn new(socket: &Path) -> Result<Self, PluginError> {
        Ok(Registrant {
            socket: socket.to_path_buf(),
            client: RegistrationClient::new(unix_channel(socket)?),
        })
    }

    /// `GetInfo` (upstream: "failed to get plugin info using RPC GetInfo at socket ...").
    pub async fn info(&mut self) -> Result<PluginInfo, PluginError> {
        let call = self.client.get_info(InfoRequest {});
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(PluginError::GetInfo {
                socket: self.socket.clone(),
                message: s.message().to_string(),
            }),
            Err(_) => Err(PluginError::GetInfo {
                socket: self.socket.clone(),
                message: "timed out".into(),
            }),
        }
    }

    /// `NotifyRegistrationStatus`; a plugin that does not answer is only logged, as upstream.
    pub async fn notify(&mut self, registered: bool, error: &str) {
        let call = self.client.notify_registration_status(RegistrationStatus {
            plugin_registered: registered,
            error: error.to_string(),
        });
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(_)) => {}
            Ok(Err(s)) => tracing::error!(
                socket = %self.socket.display(),
                err = %s.message(),
                "Failed to send registration status"
            ),
            Err(_) => tracing::error!(
                socket = %self.socket.display(),
                "Failed to send registration status: timed out"
            ),
        }
    }
}

/// major, minor, patch.
pub type Version = (u64, u64, u64);

/// Upstream `highestSupportedVersion`: the highest of the plugin's versions whose major is 1
/// (the only CSI major the kubelet speaks), parsed as upstream's `ParseGeneric` (an optional
/// leading `v`, two or three dot-separated numbers).
pub fn highest_supported_version(versions: &[String]) -> Result<Version, String> {
    if versions.is_empty() {
        return Err("CSI driver reporting empty array for supported versions".into());
    }
    let mut best: Option<Version> = None;
    for v in versions {
        let Some(parsed) = parse_generic(v) else {
            continue;
        };
        if parsed.0 == 1 && best.is_none_or(|b| parsed > b) {
            best = Some(parsed);
        }
    }
    best.ok_or_else(|| {
        "all versions reported by this driver are unsupported: none of the CSI versions reported by this driver are supported".into()
    })
}

fn parse_generic(v: &str) -> Option<Version> {
    let v = v.trim().strip_prefix('v').unwrap_or(v.trim());
    let parts: Vec<&str> = v.split('.').collect();
    if !(2..=3).contains(&parts.len()) {
        return None;
    }
    let n = |s: &str| s.parse::<u64>().ok();
    Some((
        n(parts[0])?,
        n(parts[1])?,
        parts.get(2).map_or(Some(0), |p| n(p))?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cases: &[(&[&str], Result<Version, ()>)] = &[
            (&["1.0.0"], Ok((1, 0, 0))),
            (&["v1.2.0", "1.10"], Ok((1, 10, 0))),
            (&["0.3.0", "1.1.0"], Ok((1, 1, 0))),
            (&["0.3.0"], Err(())),
            (&["2.0.0"], Err(())),
            (&["bogus"], Err(())),
            (&[], Err(())),
        ];
        for (input, want) in cases {
            let got = highest_supported_version(&s(input)).map_err(|_| ());
            assert_eq!(&got, want, "{input:?}");
        }
    }
}
