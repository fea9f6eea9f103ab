//! Image garbage collection decisions (upstream `pkg/kubelet/images/image_gc_manager.go`):
//! which images are tracked since when, which are in use, which go first. Pure; the task that
//! lists, measures and removes is [`super::gc_manager`].

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

pub use crate::config::gc::ImageGcPolicy;

/// What the runtime lists for one image (CRI `Image`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedImage {
    pub id: String,
    pub size: u64,
    /// CRI `pinned`: the runtime asks us never to remove it (containerd pins its sandbox image
    /// from 1.7).
    pub pinned: bool,
    /// Its repo tags and digests: a runtime may name a container's image by either.
    pub names: Vec<String>,
}

/// The IDs of the listed images that `refs` (containers' image refs, sandbox image IDs) name,
/// by ID, tag or digest, so an image is never taken for unused because a runtime reported a
/// container's image by a reference other than its ID.
pub fn images_in_use(images: &[ListedImage], refs: &HashSet<String>) -> HashSet<String> {
    images
        .iter()
        .filter(|i| refs.contains(&i.id) || i.names.iter().any(|n| refs.contains(n)))
        .map(|i| i.id.clone())
        .collect()
}

/// Upstream `imageRecord`: what the kubelet remembers of an image. Kept in memory only, as
/// upstream: after a restart every image is first detected again, so `imageMinimumGCAge`
/// protects them all until it has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageRecord {
    pub first_detected: SystemTime,
    /// The last detection that found a container using it; None: never seen used.
    pub last_used: Option<SystemTime>,
    pub size: u64,
    pub pinned: bool,
}

/// Upstream `detectImages`' bookkeeping: new images are first detected at `detect_time`, those
/// in use get `last_used = now`, sizes and pins are refreshed, and images the runtime no longer
/// has are forgotten.
pub fn detect(
    records: &mut HashMap<String, ImageRecord>,
    images: &[ListedImage],
    in_use: &HashSet<String>,
    detect_time: SystemTime,
    now: SystemTime,
) {
    let current: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
    records.retain(|id, _| current.contains(id.as_str()));
    for i in images {
        let r = records.entry(i.id.clone()).or_insert(ImageRecord {
            first_detected: detect_time,
            last_used: None,
            size: i.size,
            pinned: i.pinned,
        });
        if in_use.contains(&i.id) {
            r.last_used = Some(now);
        }
        r.size = i.size;
        r.pinned = i.pinned;
    }
}

/// An image GC may remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: String,
    pub record: ImageRecord,
}

/// Upstream `imagesInEvictionOrder`: unused, unpinned images, least recently used first (never
/// used counts as oldest), ties broken by the earliest first detection.
pub fn eviction_order(
    records: &HashMap<String, ImageRecord>,
    in_use: &HashSet<String>,
) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = records
        .iter()
        .filter(|(id, r)| !in_use.contains(*id) && !r.pinned)
        .map(|(id, r)| Candidate {
            id: id.clone(),
            record: *r,
        })
        .collect();
    out.sort_by(|a, b| {
        (a.record.last_used, a.record.first_detected, &a.id).cmp(&(
            b.record.last_used,
            b.record.first_detected,
            &b.id,
        ))
    });
    out
}

/// Upstream `freeSpace`'s filter: an image used at or after `free_time` is in use right now,
/// and one detected less than `min_age` ago may just have been pulled for a container about to
/// start.
pub fn eligible_for_space(c: &Candidate, free_time: SystemTime, min_age: Duration) -> bool {
    if c.record.last_used.is_some_and(|u| u >= free_time) {
        return false;
    }
    age(free_time, c.record.first_detected) >= min_age
}

/// Upstream `freeOldImages`: with `max_age` set and the kubelet's GC running for longer than
/// it (`began`), an image unused for more than `max_age` goes whatever the disk usage. An image
/// never seen in use counts from its first detection (upstream compares with a zero time, which
/// makes every never-used image old; since detection restarts with the kubelet, the wait for
/// `max_age` after `began` makes the two agree).
pub fn too_old(c: &Candidate, free_time: SystemTime, began: SystemTime, max_age: Duration) -> bool {
    if max_age.is_zero() || age(free_time, began) <= max_age {
        return false;
    }
    let since = c.record.last_used.unwrap_or(c.record.first_detected);
    age(free_time, since) > max_age
}

/// Upstream `GarbageCollect`'s threshold check: the bytes to free to get from at or above the
/// high threshold down to the low one; None below the high threshold. Errors on a zero capacity
/// (upstream's `InvalidDiskCapacity`).
pub fn bytes_to_free(
    capacity: u64,
    available: u64,
    policy: &ImageGcPolicy,
) -> Result<Option<u64>, &'static str> {
    if capacity == 0 {
        return Err("invalid capacity 0 on image filesystem");
    }
    let available = available.min(capacity);
    let usage_percent = 100 - (available as u128 * 100 / capacity as u128) as i64;
    if usage_percent < policy.high_threshold_percent {
        return Ok(None);
    }
    let target_available =
        capacity as u128 * (100 - policy.low_threshold_percent.clamp(0, 100)) as u128 / 100;
    Ok(Some(
        target_available.saturating_sub(available as u128) as u64
    ))
}

fn age(now: SystemTime, since: SystemTime) -> Duration {
    now.duration_since(since).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
    }

    fn img(id: &str, size: u64, pinned: bool) -> ListedImage {
        ListedImage {
            id: id.into(),
            size,
            pinned,
            names: vec![format!("reg/{id}:1"), format!("reg/{id}@sha256:{id}")],
        }
    }

    #[test]
    fn in_use_by_id_tag_or_digest() {
        let images = [img("a", 1, false), img("b", 1, false), img("c", 1, false)];
        let refs = set(&["a", "reg/b:1", "reg/zz:1"]);
        let mut got: Vec<String> = images_in_use(&images, &refs).into_iter().collect();
        got.sort();
        assert_eq!(got, ["a", "b"]);
        let refs = set(&["reg/c@sha256:c"]);
        assert_eq!(images_in_use(&images, &refs), set(&["c"]));
    }

    fn set(ids: &[&str]) -> HashSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn detect_tracks_first_detection_use_and_forgets_removed_images() {
        let mut r = HashMap::new();
        detect(
            &mut r,
            &[img("a", 10, false), img("b", 20, false)],
            &set(&["a"]),
            t(0),
            t(1),
        );
        assert_eq!(r["a"].first_detected, t(0));
        assert_eq!(r["a"].last_used, Some(t(1)));
        assert_eq!(r["b"].last_used, None);
        // Later: b used, a not any more, c new, a's record kept its last use.
        detect(
            &mut r,
            &[img("a", 10, false), img("b", 25, true), img("c", 5, false)],
            &set(&["b"]),
            t(100),
            t(101),
        );
        assert_eq!(r["a"].first_detected, t(0));
        assert_eq!(r["a"].last_used, Some(t(1)));
        assert_eq!(r["b"].last_used, Some(t(101)));
        assert_eq!((r["b"].size, r["b"].pinned), (25, true));
        assert_eq!(r["c"].first_detected, t(100));
        // a removed from the runtime: forgotten.
        detect(&mut r, &[img("b", 25, true)], &set(&[]), t(200), t(200));
        assert_eq!(r.keys().collect::<Vec<_>>(), vec!["b"]);
    }

    #[test]
    fn eviction_order_skips_used_and_pinned_and_puts_least_recently_used_first() {
        let rec = |first: u64, used: Option<u64>, pinned: bool| ImageRecord {
            first_detected: t(first),
            last_used: used.map(t),
            size: 1,
            pinned,
        };
        let records: HashMap<String, ImageRecord> = [
            ("used-now", rec(0, Some(50), false)),
            ("pinned", rec(0, None, true)),
            ("old-use", rec(5, Some(10), false)),
            ("recent-use", rec(0, Some(40), false)),
            ("never-late", rec(30, None, false)),
            ("never-early", rec(1, None, false)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let order: Vec<String> = eviction_order(&records, &set(&["used-now"]))
            .into_iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(
            order,
            ["never-early", "never-late", "old-use", "recent-use"]
        );
    }

    #[test]
    fn space_eligibility_respects_min_age_and_current_use() {
        let c = |first: u64, used: Option<u64>| Candidate {
            id: "x".into(),
            record: ImageRecord {
                first_detected: t(first),
                last_used: used.map(t),
                size: 1,
                pinned: false,
            },
        };
        let min = Duration::from_secs(120);
        // (first detected, last used, free time, eligible)
        let cases = [
            (0, None, 120, true),
            (0, None, 119, false),
            (0, Some(100), 200, true),
            (0, Some(200), 200, false),
            (0, Some(300), 200, false),
            (100, None, 200, false),
        ];
        for (first, used, free, want) in cases {
            assert_eq!(
                eligible_for_space(&c(first, used), t(free), min),
                want,
                "first {first} used {used:?} free {free}"
            );
        }
        assert!(eligible_for_space(&c(5, None), t(5), Duration::ZERO));
    }

    #[test]
    fn max_age_waits_for_the_kubelet_to_have_run_that_long() {
        let c = |first: u64, used: Option<u64>| Candidate {
            id: "x".into(),
            record: ImageRecord {
                first_detected: t(first),
                last_used: used.map(t),
                size: 1,
                pinned: false,
            },
        };
        let max = Duration::from_secs(60);
        // (first, used, began, free time, too old)
        let cases = [
            (0, None, 0, 61, true),
            (0, None, 0, 60, false),
            (0, None, 10, 61, false),
            (0, Some(50), 0, 100, false),
            (0, Some(30), 0, 100, true),
            (90, None, 0, 100, false),
        ];
        for (first, used, began, free, want) in cases {
            assert_eq!(
                too_old(&c(first, used), t(free), t(began), max),
                want,
                "first {first} used {used:?} began {began} free {free}"
            );
        }
        assert!(!too_old(&c(0, None), t(1000), t(0), Duration::ZERO));
    }

    #[test]
    fn threshold_arithmetic_is_upstreams() {
        let p = |high, low| ImageGcPolicy {
            high_threshold_percent: high,
            low_threshold_percent: low,
            ..Default::default()
        };
        // (capacity, available, high, low, bytes to free)
        let cases: [(u64, u64, i64, i64, Option<u64>); 7] = [
            (1000, 200, 85, 80, None),     // 80% used
            (1000, 150, 85, 80, Some(50)), // 85% used: free to 20% available
            (1000, 100, 85, 80, Some(100)),
            (1000, 900, 1, 0, Some(100)), // 10% used, low 0: everything used
            (1000, 2000, 85, 80, None),   // available above capacity is capped
            (1000, 995, 1, 0, Some(5)),   // 0.5% used counts as 1%, as upstream
            (1000, 1000, 1, 0, None),     // nothing used
        ];
        for (cap, avail, high, low, want) in cases {
            assert_eq!(
                bytes_to_free(cap, avail, &p(high, low)).unwrap(),
                want,
                "cap {cap} avail {avail} high {high} low {low}"
            );
        }
        assert!(bytes_to_free(0, 0, &p(85, 80)).is_err());
    }
}
