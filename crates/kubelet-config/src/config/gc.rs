//! Garbage collection settings: the image GC policy from `KubeletConfiguration` (upstream
//! `images.ImageGCPolicy`, built in `cmd/kubelet/app/server.go`) and the container GC policy
//! from the deprecated flags (upstream `kubecontainer.GCPolicy` from `KubeletFlags`), with
//! upstream's validation wording.

use std::time::Duration;

use super::{format_duration, Reader};

/// Upstream `ImageGCPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageGcPolicy {
    /// `imageGCHighThresholdPercent`: at or above this imagefs usage, unused images go. 100
    /// turns image GC off, as upstream.
    pub high_threshold_percent: i64,
    /// `imageGCLowThresholdPercent`: the usage GC frees down to.
    pub low_threshold_percent: i64,
    /// `imageMinimumGCAge`: an image detected more recently than this is never removed.
    pub min_age: Duration,
    /// `imageMaximumGCAge`: an unused image not used for this long is removed whatever the
    /// usage; zero turns it off.
    pub max_age: Duration,
}

impl Default for ImageGcPolicy {
    fn default() -> Self {
        ImageGcPolicy {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(120),
            max_age: Duration::ZERO,
        }
    }
}

/// Upstream `kubecontainer.GCPolicy`, from `--minimum-container-ttl-duration`,
/// `--maximum-dead-containers-per-container` and `--maximum-dead-containers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerGcPolicy {
    /// A dead container younger than this (from its creation) is kept.
    pub min_age: Duration,
    /// Dead instances kept per (pod, container name); negative: no limit.
    pub max_per_pod_container: i64,
    /// Dead containers kept on the node; negative: no limit.
    pub max_containers: i64,
}

impl Default for ContainerGcPolicy {
    fn default() -> Self {
        ContainerGcPolicy {
            min_age: Duration::ZERO,
            max_per_pod_container: 1,
            max_containers: -1,
        }
    }
}

/// Reads the image GC fields (each one removed from the reader). The percentages themselves
/// are checked on the tree by `validate_tree`.
pub(super) fn read(r: &mut Reader, out: &mut ImageGcPolicy) {
    if let Some(n) = r.int("imageGCHighThresholdPercent") {
        out.high_threshold_percent = n;
    }
    if let Some(n) = r.int("imageGCLowThresholdPercent") {
        out.low_threshold_percent = n;
    }
    r.duration("imageMinimumGCAge", &mut out.min_age);
    r.duration("imageMaximumGCAge", &mut out.max_age);
}

/// Upstream's `imageMaximumGCAge` checks (the percentages are checked on the tree).
pub(super) fn validate(p: &ImageGcPolicy, errors: &mut Vec<String>) {
    if !p.max_age.is_zero() && p.max_age <= p.min_age {
        errors.push(format!(
            "imageMaximumGCAge {} must be greater than imageMinimumGCAge {}",
            format_duration(p.max_age),
            format_duration(p.min_age)
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_age_must_exceed_min_age() {
        let cases = [
            (0, 120, true),
            (121, 120, true),
            (120, 120, false),
            (60, 120, false),
            (1, 0, true),
        ];
        for (max, min, ok) in cases {
            let p = ImageGcPolicy {
                max_age: Duration::from_secs(max),
                min_age: Duration::from_secs(min),
                ..Default::default()
            };
            let mut errors = Vec::new();
            validate(&p, &mut errors);
            assert_eq!(errors.is_empty(), ok, "max {max} min {min}: {errors:?}");
        }
    }
}
