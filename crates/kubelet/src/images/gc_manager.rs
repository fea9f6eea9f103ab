//! The image garbage collector's task (upstream `realImageGCManager` and the image half of
//! `kubelet.StartGarbageCollection`): every [`IMAGE_GC_PERIOD`] it detects the runtime's images,
//! then removes unused ones older than `imageMaximumGCAge`, then, when the image filesystem is
//! at or above `imageGCHighThresholdPercent`, unused ones least recently used first until it is
//! below `imageGCLowThresholdPercent`. It owns the image records; the eviction manager reaches
//! it through [`ImageGcHandle::delete_unused_images`].

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use rkubelet_cri::{api, CriClient};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::gc::{self, ImageGcPolicy, ImageRecord, ListedImage};
use crate::events::{self, EventType, Recorder};

/// Upstream `ImageGCPeriod`.
pub const IMAGE_GC_PERIOD: Duration = Duration::from_secs(5 * 60);

/// Why a collection did not do what it had to.
#[derive(Debug, thiserror::Error)]
pub enum ImageGcError {
    #[error("{op}: {source}")]
    Cri {
        op: &'static str,
        #[source]
        source: rkubelet_cri::CriError,
    },
    #[error("cannot read the image filesystem's capacity (CRI ImageFsInfo + statvfs)")]
    NoImageFs,
    #[error("invalid capacity 0 on image filesystem")]
    InvalidCapacity,
    /// Upstream's message, word for word: the `FreeDiskSpaceFailed` event shows it.
    #[error("Failed to garbage collect required amount of images. Attempted to free {wanted} bytes, but only found {freed} bytes eligible to free.")]
    NotEnough { wanted: u64, freed: u64 },
    #[error("wanted to free images older than {max_age:?}, encountered errors in image deletion: {errors}")]
    OldImages { max_age: Duration, errors: String },
    #[error("wanted to free {wanted} bytes, but freed {freed} bytes space with errors in image deletion: {errors}")]
    Deletion {
        wanted: u64,
        freed: u64,
        errors: String,
    },
    #[error("the image garbage collector has stopped")]
    Stopped,
}

enum Request {
    DeleteUnused(oneshot::Sender<Result<u64, ImageGcError>>),
}

/// A cheap handle on the image garbage collector.
#[derive(Clone)]
pub struct ImageGcHandle {
    tx: mpsc::Sender<Request>,
}

impl ImageGcHandle {
    /// Upstream `DeleteUnusedImages` (what the eviction manager calls under disk pressure):
    /// every unused, unpinned image at least `imageMinimumGCAge` old is removed, least recently
    /// used first, whatever the thresholds. Returns the bytes freed (the removed images' sizes
    /// as the runtime reported them).
    pub async fn delete_unused_images(&self) -> Result<u64, ImageGcError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::DeleteUnused(tx))
            .await
            .map_err(|_| ImageGcError::Stopped)?;
        rx.await.map_err(|_| ImageGcError::Stopped)?
    }
}

/// The collector: policy, records and the runtime.
pub struct ImageGc {
    cri: CriClient,
    policy: ImageGcPolicy,
    /// The pod infra image names (`--pod-infra-container-image` and the runtime's own sandbox
    /// image): always in use, as upstream's `sandboxImage`.
    sandbox_images: Vec<String>,
    recorder: Recorder,
    records: HashMap<String, ImageRecord>,
    /// When the collector started (upstream `beganGC`): `imageMaximumGCAge` only applies once
    /// the kubelet has run that long, as the records start afresh with it.
    began: SystemTime,
    rx: mpsc::Receiver<Request>,
}

impl ImageGc {
    pub fn new(
        cri: CriClient,
        policy: ImageGcPolicy,
        pod_infra_image: String,
        recorder: Recorder,
    ) -> (ImageGc, ImageGcHandle) {
        let (tx, rx) = mpsc::channel(8);
        let gc = ImageGc {
            cri,
            policy,
            sandbox_images: vec![pod_infra_image],
            recorder,
            records: HashMap::new(),
            began: crate::clock::now(),
            rx,
        };
        (gc, ImageGcHandle { tx })
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        if let Some(img) = self.runtime_sandbox_image().await {
            if !self.sandbox_images.contains(&img) {
                self.sandbox_images.push(img);
            }
        }
        // Upstream: a high threshold of 100 turns the periodic collection off; the eviction
        // manager's requests are still answered.
        let periodic = self.policy.high_threshold_percent < 100;
        if !periodic {
            info!("imageGCHighThresholdPercent is 100: periodic image garbage collection is off");
        }
        let mut tick = tokio::time::interval(IMAGE_GC_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failed_before = false;
        loop {
            let req = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick(), if periodic => None,
                Some(req) = self.rx.recv() => Some(req),
            };
            // A CRI call in a collection must not hold the kubelet's shutdown.
            tokio::select! {
                _ = cancel.cancelled() => return,
                () = self.handle(req, &mut failed_before) => {}
            }
        }
    }

    /// A periodic collection (`req` None) or the eviction manager's request.
    async fn handle(&mut self, req: Option<Request>, failed_before: &mut bool) {
        match req {
            None => {
                let started = std::time::Instant::now();
                let result = self.garbage_collect().await;
                debug!(elapsed = ?started.elapsed(), images = self.records.len(), "image garbage collection pass");
                match result {
                    Ok(()) => *failed_before = false,
                    Err(e) => {
                        // Upstream: the first failure may be stats not being ready yet; an
                        // event only for repeated ones.
                        if *failed_before {
                            warn!(error = %e, "image garbage collection failed multiple times in a row");
                            self.recorder.node_event(
                                EventType::Warning,
                                events::IMAGE_GC_FAILED,
                                e.to_string(),
                            );
                        } else {
                            warn!(error = %e, "image garbage collection failed once; stats may not be ready yet");
                        }
                        *failed_before = true;
                    }
                }
            }
            Some(Request::DeleteUnused(reply)) => {
                info!("attempting to delete unused images");
                let _ = reply.send(self.delete_unused().await);
            }
        }
    }

    /// The runtime's sandbox image from CRI `Status` (containerd reports its CRI config,
    /// `sandboxImage` included, in the verbose info).
    async fn runtime_sandbox_image(&self) -> Option<String> {
        let s = self
            .cri
            .status(api::StatusRequest { verbose: true })
            .await
            .ok()?;
        let cfg: serde_json::Value = serde_json::from_str(s.info.get("config")?).ok()?;
        cfg.get("sandboxImage")?.as_str().map(str::to_string)
    }

    /// Upstream `detectImages`: lists images and every container (any state), updates the
    /// records and returns the image IDs in use.
    async fn detect(&mut self, detect_time: SystemTime) -> Result<HashSet<String>, ImageGcError> {
        let images = self
            .cri
            .list_images(api::ListImagesRequest { filter: None })
            .await
            .map_err(|source| ImageGcError::Cri {
                op: "list images",
                source,
            })?
            .images;
        let containers = self
            .cri
            .list_containers(api::ListContainersRequest { filter: None })
            .await
            .map_err(|source| ImageGcError::Cri {
                op: "list containers",
                source,
            })?
            .containers;
        let mut refs: HashSet<String> = HashSet::new();
        for c in &containers {
            refs.insert(c.image_ref.clone());
            if let Some(spec) = &c.image {
                refs.insert(spec.image.clone());
            }
        }
        for name in &self.sandbox_images {
            refs.insert(name.clone());
            if let Some(id) = self.image_id(name).await {
                refs.insert(id);
            }
        }
        let listed: Vec<ListedImage> = images
            .iter()
            .map(|i| ListedImage {
                id: i.id.clone(),
                size: i.size,
                pinned: i.pinned,
                names: i.repo_tags.iter().chain(&i.repo_digests).cloned().collect(),
            })
            .collect();
        let in_use = gc::images_in_use(&listed, &refs);
        gc::detect(
            &mut self.records,
            &listed,
            &in_use,
            detect_time,
            crate::clock::now(),
        );
        Ok(in_use)
    }

    async fn image_id(&self, name: &str) -> Option<String> {
        self.cri
            .image_status(api::ImageStatusRequest {
                image: Some(api::ImageSpec {
                    image: name.to_string(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await
            .ok()?
            .image
            .map(|i| i.id)
    }

    /// Upstream `GarbageCollect`.
    async fn garbage_collect(&mut self) -> Result<(), ImageGcError> {
        let free_time = crate::clock::now();
        let in_use = self.detect(free_time).await?;
        let mut candidates = gc::eviction_order(&self.records, &in_use);
        // Upstream `freeOldImages`.
        let old: Vec<gc::Candidate> = candidates
            .iter()
            .filter(|c| gc::too_old(c, free_time, self.began, self.policy.max_age))
            .cloned()
            .collect();
        let mut errors = Vec::new();
        for c in &old {
            match self
                .remove(&c.id, "unused for longer than imageMaximumGCAge")
                .await
            {
                Ok(()) => candidates.retain(|x| x.id != c.id),
                Err(e) => errors.push(e.to_string()),
            }
        }
        if !errors.is_empty() {
            return Err(ImageGcError::OldImages {
                max_age: self.policy.max_age,
                errors: errors.join(", "),
            });
        }
        let Some((_, Some(fs))) = crate::stats::image_fs(&self.cri).await else {
            return Err(ImageGcError::NoImageFs);
        };
        let wanted = match gc::bytes_to_free(fs.capacity_bytes, fs.available_bytes, &self.policy) {
            Ok(Some(w)) => w,
            Ok(None) => {
                debug!(
                    capacity = fs.capacity_bytes,
                    available = fs.available_bytes,
                    "image filesystem below the high threshold"
                );
                return Ok(());
            }
            Err(_) => {
                let e = ImageGcError::InvalidCapacity;
                self.recorder.node_event(
                    EventType::Warning,
                    events::INVALID_DISK_CAPACITY,
                    e.to_string(),
                );
                return Err(e);
            }
        };
        info!(
            capacity = fs.capacity_bytes,
            available = fs.available_bytes,
            high_threshold = self.policy.high_threshold_percent,
            low_threshold = self.policy.low_threshold_percent,
            amount_to_free = wanted,
            "disk usage on the image filesystem is over the high threshold, trying to free bytes down to the low threshold"
        );
        let freed = self.free_space(wanted, free_time, &candidates).await?;
        if freed < wanted {
            let e = ImageGcError::NotEnough { wanted, freed };
            self.recorder.node_event(
                EventType::Warning,
                events::FREE_DISK_SPACE_FAILED,
                e.to_string(),
            );
            return Err(e);
        }
        Ok(())
    }

    /// Upstream `DeleteUnusedImages`.
    async fn delete_unused(&mut self) -> Result<u64, ImageGcError> {
        let free_time = crate::clock::now();
        let in_use = self.detect(free_time).await?;
        let candidates = gc::eviction_order(&self.records, &in_use);
        self.free_space(u64::MAX, free_time, &candidates).await
    }

    /// Upstream `freeSpace`: removes eligible candidates in order until `wanted` bytes are
    /// freed; deletion errors are collected and returned after trying the rest.
    async fn free_space(
        &mut self,
        wanted: u64,
        free_time: SystemTime,
        candidates: &[gc::Candidate],
    ) -> Result<u64, ImageGcError> {
        let mut freed = 0u64;
        let mut errors = Vec::new();
        for c in candidates {
            if !gc::eligible_for_space(c, free_time, self.policy.min_age) {
                debug!(image = %c.id, "image not eligible for garbage collection yet (in use, or younger than imageMinimumGCAge)");
                continue;
            }
            match self.remove(&c.id, "to free disk space").await {
                Ok(()) => freed = freed.saturating_add(c.record.size),
                Err(e) => {
                    errors.push(e.to_string());
                    continue;
                }
            }
            if freed >= wanted {
                break;
            }
        }
        if !errors.is_empty() {
            return Err(ImageGcError::Deletion {
                wanted,
                freed,
                errors: errors.join(", "),
            });
        }
        Ok(freed)
    }

    async fn remove(&mut self, id: &str, why: &str) -> Result<(), ImageGcError> {
        let size = self.records.get(id).map_or(0, |r| r.size);
        info!(image = %id, size, why, "removing image");
        match self
            .cri
            .remove_image(api::RemoveImageRequest {
                image: Some(api::ImageSpec {
                    image: id.to_string(),
                    ..Default::default()
                }),
            })
            .await
        {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(source) => {
                return Err(ImageGcError::Cri {
                    op: "remove image",
                    source,
                })
            }
        }
        self.records.remove(id);
        Ok(())
    }
}
