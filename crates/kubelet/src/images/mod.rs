//! Image manager (upstream `pkg/kubelet/images`): pull policy, pull backoff and the reasons
//! (`ErrImagePull`, `ImagePullBackOff`, `ErrImageNeverPull`, `InvalidImageName`) a failed pull shows,
//! and image garbage collection ([`gc`], upstream `image_gc_manager.go`).

pub mod gc;
mod gc_manager;
mod throttle;

pub use gc_manager::{ImageGc, ImageGcHandle};
pub use throttle::{PullLimiter, PULL_QPS_EXCEEDED};

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};
use rkubelet_cri::{api, CriClient};
use tokio::sync::Semaphore;
use tracing::{debug, info};

use crate::backoff::Backoff;
use crate::credentials;
use crate::events::{self, EventType, Recorder};
use crate::podutil;
use crate::runtime::security::ImageUser;
use crate::types::{Reason, StartError};

/// Upstream `applyDefaultImageTag`: no tag and no digest means `:latest`.
pub fn with_default_tag(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || last.contains(':') {
        image.to_string()
    } else {
        format!("{image}:latest")
    }
}

/// Shared by all pod workers: the CRI image service, the pull gate and the pull rate limit.
#[derive(Clone)]
pub struct ImageManager {
    cri: CriClient,
    /// Upstream's image pullers: `serializeImagePulls` lets one pull run at a time (the serial
    /// puller), else `maxParallelImagePulls` bounds them (the parallel puller; None: no bound).
    pull_gate: Option<Arc<Semaphore>>,
    /// `registryPullQPS` / `registryBurst` (upstream `throttledImageService`).
    limiter: Arc<PullLimiter>,
    recorder: Recorder,
    /// Reads the pod's image pull secrets; `None` in standalone mode (no pull secrets).
    client: Option<kube::Client>,
    /// The node's default keyring: its docker config file and the
    /// `--image-credential-provider-config` plugins. Empty until [`Self::with_node_keyring`].
    node_keyring: credentials::node_keyring::NodeKeyring,
    /// The user of each image ID [`Self::ensure`] found present, for [`Self::image_user`]:
    /// an image ID names immutable content, so the container's start need not ask CRI
    /// ImageStatus a second time (upstream does, in `getImageUser`).
    users: Arc<std::sync::Mutex<HashMap<String, ImageUser>>>,
}

/// At most this many image users are remembered; the map starts over beyond it.
const USERS_KEPT: usize = 256;

impl ImageManager {
    pub fn new(
        cri: CriClient,
        pulls: &kubelet_config::config::node_status::ImagePullConfig,
        recorder: Recorder,
        client: Option<kube::Client>,
    ) -> Self {
        ImageManager {
            cri,
            pull_gate: pull_slots(pulls).map(|n| Arc::new(Semaphore::new(n))),
            limiter: Arc::new(PullLimiter::new(pulls.qps, pulls.burst)),
            recorder,
            client,
            node_keyring: Default::default(),
            users: Default::default(),
        }
    }

    /// The node's default keyring, asked after the pod's pull secrets (upstream
    /// `MakeDockerKeyring(pullSecrets, defaultKeyring)`).
    pub fn with_node_keyring(mut self, k: credentials::node_keyring::NodeKeyring) -> Self {
        self.node_keyring = k;
        self
    }

    /// Upstream `kubeGenericRuntimeManager.PullImage`: anonymous when neither a pull secret nor
    /// the node's keyring (docker config file, credential provider plugins) has credentials for
    /// the image's repository, else each matching credential in turn (the pull secrets' first,
    /// most specific first, then the node's) until one works, with no anonymous attempt after them; the errors of all
    /// attempts are reported together (upstream's aggregate: `[e1, e2]` for several).
    async fn pull(&self, pod: &Pod, image: &str) -> Result<String, String> {
        let secrets = match &self.client {
            Some(c) => credentials::pod_pull_secrets(c, pod).await,
            None => Vec::new(),
        };
        let keyring = credentials::Keyring::from_secrets(&secrets).map_err(|e| e.to_string())?;
        let repo = credentials::repository(image);
        let mut creds = keyring.lookup(&repo);
        creds.extend(self.node_keyring.lookup(&repo).await);
        let request = |auth: Option<api::AuthConfig>| api::PullImageRequest {
            image: Some(api::ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
            auth,
            sandbox_config: None,
        };
        if creds.is_empty() {
            debug!(image, "pulling image without credentials");
            return self
                .cri
                .pull_image(request(None))
                .await
                .map(|r| r.image_ref)
                .map_err(|e| e.message().to_string());
        }
        let mut errs = Vec::new();
        for c in &creds {
            match self.cri.pull_image(request(Some(c.to_cri()))).await {
                Ok(r) => return Ok(r.image_ref),
                Err(e) => errs.push(e.message().to_string()),
            }
        }
        Err(if errs.len() == 1 {
            errs.remove(0)
        } else {
            format!("[{}]", errs.join(", "))
        })
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
        let Some(found) = resp.image else {
            return Ok(None);
        };
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        if users.len() >= USERS_KEPT {
            users.clear();
        }
        users.insert(found.id.clone(), ImageUser::from_image(Some(&found)));
        Ok(Some(found.id))
    }

    /// The user `image` runs as, from CRI ImageStatus (upstream `getImageUser`): runAsNonRoot
    /// checks it and a container without runAsUser runs as it.
    pub async fn image_user(&self, image: &str) -> Result<ImageUser, rkubelet_cri::CriError> {
        let known = self
            .users
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(image)
            .cloned();
        if let Some(user) = known {
            return Ok(user);
        }
        let resp = self
            .cri
            .image_status(api::ImageStatusRequest {
                image: Some(api::ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await?;
        Ok(ImageUser::from_image(resp.image.as_ref()))
    }

    /// Upstream `EnsureImageExists`: returns the image reference to create the container from.
    /// `backoff` is the pod worker's own, keyed by pod UID and image as upstream.
    pub async fn ensure(
        &self,
        pod: &Pod,
        c: &Container,
        field_path: &str,
        backoff: &mut Backoff,
    ) -> Result<String, StartError> {
        let event = |type_: EventType, reason: &str, message: String| {
            self.recorder
                .pod_event(pod, Some(field_path.to_string()), type_, reason, message)
        };
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
                Some(id) => {
                    event(
                        EventType::Normal,
                        events::PULLED_IMAGE,
                        format!("Container image {raw:?} already present on machine"),
                    );
                    Ok(id)
                }
                None => {
                    let msg =
                        format!("Container image {raw:?} is not present with pull policy of Never");
                    event(
                        EventType::Warning,
                        events::ERR_IMAGE_NEVER_PULL_POLICY,
                        msg.clone(),
                    );
                    Err(StartError::new(Reason::ErrImageNeverPull, msg))
                }
            };
        }
        let key = format!("{}_{}", podutil::uid(pod), image);
        let now = crate::clock::now();
        if let Some(left) = backoff.in_backoff_since_update(&key, now) {
            event(
                EventType::Normal,
                events::BACK_OFF_PULL_IMAGE,
                format!("Back-off pulling image {raw:?}"),
            );
            return Err(StartError::new(
                Reason::ImagePullBackOff,
                format!("Back-off pulling image {raw:?}"),
            )
            .retry_after(left));
        }
        let waiting = std::time::Instant::now();
        let _permit = match &self.pull_gate {
            Some(s) => Some(s.acquire().await),
            None => None,
        };
        info!(pod = %podutil::describe(pod), image = %image, "pulling image");
        event(
            EventType::Normal,
            events::PULLING_IMAGE,
            format!("Pulling image {raw:?}"),
        );
        let started = std::time::Instant::now();
        // Upstream takes the token when the puller runs the pull (after the gate) and fails
        // the pull at once without one: ErrImagePull, then the usual back-off.
        let pulled = if self.limiter.try_accept() {
            self.pull(pod, &image).await
        } else {
            Err(PULL_QPS_EXCEEDED.to_string())
        };
        match pulled {
            Ok(image_ref) => {
                backoff.reset(&key);
                info!(image = %image, elapsed = ?started.elapsed(), "pulled image");
                event(
                    EventType::Normal,
                    events::PULLED_IMAGE,
                    format!(
                        "Successfully pulled image {raw:?} in {:?} ({:?} including waiting)",
                        started.elapsed(),
                        waiting.elapsed()
                    ),
                );
                Ok(image_ref)
            }
            Err(e) => {
                let now = crate::clock::now();
                backoff.next(&key, now, now);
                let msg = format!("Failed to pull image {raw:?}: {e}");
                event(
                    EventType::Warning,
                    events::FAILED_TO_PULL_IMAGE,
                    msg.clone(),
                );
                Err(StartError::new(Reason::ErrImagePull, msg))
            }
        }
    }
}

/// How many pulls may run at once: 1 when serialized, else `maxParallelImagePulls` (None: no
/// bound), as upstream's `NewImageManager` picks its puller.
pub fn pull_slots(p: &kubelet_config::config::node_status::ImagePullConfig) -> Option<usize> {
    if p.serialize {
        Some(1)
    } else {
        p.max_parallel.map(|n| n.max(1) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_config::config::node_status::ImagePullConfig;

    #[test]
    fn puller_choice() {
        let cases = [
            (true, None, Some(1)),
            (true, Some(1), Some(1)),
            (false, None, None),
            (false, Some(3), Some(3)),
            (false, Some(1), Some(1)),
        ];
        for (serialize, max_parallel, want) in cases {
            let p = ImagePullConfig {
                serialize,
                max_parallel,
                ..Default::default()
            };
            assert_eq!(pull_slots(&p), want, "{serialize} {max_parallel:?}");
        }
    }

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
