//! Image manager (upstream `pkg/kubelet/images`): pull policy, pull backoff and the reasons
//! (`ErrImagePull`, `ImagePullBackOff`, `ErrImageNeverPull`, `InvalidImageName`) a failed pull shows.

use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Container, Pod};
use rkubelet_cri::{api, CriClient};
use tokio::sync::Semaphore;
use tracing::info;

use crate::backoff::Backoff;
use crate::podutil;
use crate::sync::{Reason, StartError};

/// Upstream `applyDefaultImageTag`: no tag and no digest means `:latest`.
pub fn with_default_tag(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || last.contains(':') {
        image.to_string()
    } else {
        format!("{image}:latest")
    }
}

/// Shared by all pod workers: the CRI image service and the serial-pull gate.
#[derive(Clone, Debug)]
pub struct ImageManager {
    cri: CriClient,
    /// `serializeImagePulls`: one pull at a time when set.
    pull_gate: Option<Arc<Semaphore>>,
}

impl ImageManager {
    pub fn new(cri: CriClient, serialize: bool) -> Self {
        ImageManager {
            cri,
            pull_gate: serialize.then(|| Arc::new(Semaphore::new(1))),
        }
    }

    async fn present(&self, image: &str) -> Result<Option<String>, StartError> {
        let resp = self
            .cri
            .image_status(api::ImageStatusRequest {
                image: Some(api::ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await
            .map_err(|e| {
                StartError::new(
                    Reason::ImageInspectError,
                    format!("Failed to inspect image {image:?}: {}", e.message()),
                )
            })?;
        Ok(resp.image.map(|i| i.id))
    }

    /// Upstream `EnsureImageExists`: returns the image reference to create the container from.
    /// `backoff` is the pod worker's own, keyed by pod UID and image as upstream.
    pub async fn ensure(
        &self,
        pod: &Pod,
        c: &Container,
        backoff: &mut Backoff,
    ) -> Result<String, StartError> {
        let raw = c.image.as_deref().unwrap_or("").trim();
        if raw.is_empty() || raw.contains(char::is_whitespace) {
            return Err(StartError::new(
                Reason::InvalidImageName,
                format!("Failed to apply default image tag {raw:?}: invalid reference format"),
            ));
        }
        let image = with_default_tag(raw);
        let policy = c.image_pull_policy.as_deref().unwrap_or("IfNotPresent");
        let present = self.present(&image).await?;
        let must_pull = match policy {
            "Never" => false,
            "Always" => true,
            _ => present.is_none(),
        };
        if !must_pull {
            return match present {
                Some(id) => Ok(id),
                None => Err(StartError::new(
                    Reason::ErrImageNeverPull,
                    format!("Container image {raw:?} is not present with pull policy of Never"),
                )),
            };
        }
        let key = format!("{}_{}", podutil::uid(pod), image);
        let now = SystemTime::now();
        if let Some(left) = backoff.in_backoff_since_update(&key, now) {
            return Err(StartError::new(
                Reason::ImagePullBackOff,
                format!("Back-off pulling image {raw:?}"),
            )
            .retry_after(left));
        }
        let _permit = match &self.pull_gate {
            Some(s) => Some(s.acquire().await),
            None => None,
        };
        info!(pod = %podutil::describe(pod), image = %image, "pulling image");
        let started = std::time::Instant::now();
        match self
            .cri
            .pull_image(api::PullImageRequest {
                image: Some(api::ImageSpec {
                    image: image.clone(),
                    ..Default::default()
                }),
                auth: None,
                sandbox_config: None,
            })
            .await
        {
            Ok(r) => {
                backoff.reset(&key);
                info!(image = %image, elapsed = ?started.elapsed(), "pulled image");
                Ok(r.image_ref)
            }
            Err(e) => {
                let now = SystemTime::now();
                backoff.next(&key, now, now);
                Err(StartError::new(
                    Reason::ErrImagePull,
                    format!("Failed to pull image {raw:?}: {}", e.message()),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_tag() {
        assert_eq!(with_default_tag("busybox"), "busybox:latest");
        assert_eq!(
            with_default_tag("localhost:5000/busybox"),
            "localhost:5000/busybox:latest"
        );
        assert_eq!(with_default_tag("busybox:1.35"), "busybox:1.35");
        assert_eq!(with_default_tag("busybox@sha256:ab"), "busybox@sha256:ab");
    }
}
