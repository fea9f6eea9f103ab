//! Liveness of the kubelet's own loops for `/healthz` (upstream `pleg.Healthy` and the syncLoop
//! health check). Two timestamps written by their single owners and read by the server: atomics are
//! the whole state, so no task is needed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Upstream's PLEG relist threshold.
pub const PLEG_THRESHOLD: Duration = Duration::from_secs(180);
/// A SyncLoop iteration older than this means the loop is stuck.
pub const SYNC_LOOP_THRESHOLD: Duration = Duration::from_secs(180);

#[derive(Debug)]
pub struct Health {
    pleg_ms: AtomicU64,
    sync_loop_ms: AtomicU64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Default for Health {
    fn default() -> Self {
        // Start healthy: the thresholds run from start-up, as upstream.
        Health {
            pleg_ms: AtomicU64::new(now_ms()),
            sync_loop_ms: AtomicU64::new(now_ms()),
        }
    }
}

impl Health {
    pub fn pleg_relisted(&self) {
        self.pleg_ms.store(now_ms(), Ordering::Relaxed);
    }
    pub fn sync_loop_ran(&self) {
        self.sync_loop_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// Ok, or the failing checks with upstream-like messages.
    pub fn check(&self) -> Result<(), Vec<String>> {
        let now = now_ms();
        let mut errs = Vec::new();
        let age =
            |ms: &AtomicU64| Duration::from_millis(now.saturating_sub(ms.load(Ordering::Relaxed)));
        let pleg = age(&self.pleg_ms);
        if pleg > PLEG_THRESHOLD {
            errs.push(format!(
                "pleg was last seen active {} ago; threshold is {}",
                crate::config::format_duration(pleg),
                crate::config::format_duration(PLEG_THRESHOLD)
            ));
        }
        let sl = age(&self.sync_loop_ms);
        if sl > SYNC_LOOP_THRESHOLD {
            errs.push(format!(
                "syncLoop was last seen active {} ago; threshold is {}",
                crate::config::format_duration(sl),
                crate::config::format_duration(SYNC_LOOP_THRESHOLD)
            ));
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs)
        }
    }
}
