//! `registryPullQPS` / `registryBurst`: upstream's `throttledImageService`
//! (`pkg/kubelet/images/helpers.go`), a token bucket in front of image pulls that refuses a
//! pull when no token is left instead of waiting for one.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::events::TokenBucket;

/// Upstream's error for a throttled pull; the container shows `ErrImagePull` with it.
pub const PULL_QPS_EXCEEDED: &str = "pull QPS exceeded";

/// The pull rate limit, shared by every pod worker.
#[derive(Debug)]
pub enum PullLimiter {
    /// `registryPullQPS` 0: no limit, as upstream returns the image service unwrapped.
    Unlimited,
    /// A token bucket of `registryPullQPS` a second and `registryBurst` at once, full at start.
    Bucket {
        bucket: Mutex<TokenBucket>,
        start: Instant,
    },
    /// `registryBurst` 0 with a QPS: upstream's limiter (`rate.Limiter` with burst 0) never
    /// admits a pull; kept so an operator's setting behaves as it did upstream.
    Closed,
}

impl PullLimiter {
    pub fn new(qps: u32, burst: u32) -> Self {
        match (qps, burst) {
            (0, _) => PullLimiter::Unlimited,
            (_, 0) => PullLimiter::Closed,
            (q, b) => PullLimiter::Bucket {
                bucket: Mutex::new(TokenBucket::new(f64::from(q), b, Duration::ZERO)),
                start: Instant::now(),
            },
        }
    }

    /// Upstream `TryAccept`: takes a token if one is there now.
    pub fn try_accept(&self) -> bool {
        match self {
            PullLimiter::Unlimited => true,
            PullLimiter::Closed => false,
            PullLimiter::Bucket { bucket, start } => {
                let mut b = match bucket.lock() {
                    Ok(b) => b,
                    Err(poisoned) => poisoned.into_inner(),
                };
                b.try_take(start.elapsed())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_reading_of_qps_and_burst() {
        // (qps, burst, pulls admitted at once)
        let cases = [(0, 0, 100), (0, 5, 100), (5, 0, 0), (1, 1, 1), (5, 10, 10)];
        for (qps, burst, admitted) in cases {
            let l = PullLimiter::new(qps, burst);
            let n = (0..100).filter(|_| l.try_accept()).count();
            assert_eq!(n, admitted, "qps {qps} burst {burst}");
        }
    }

    #[test]
    fn refills_at_qps() {
        let mut b = TokenBucket::new(2.0, 1, Duration::ZERO);
        assert!(b.try_take(Duration::ZERO));
        assert!(!b.try_take(Duration::from_millis(100)));
        assert!(b.try_take(Duration::from_millis(500)));
        assert!(!b.try_take(Duration::from_millis(600)));
    }
}
