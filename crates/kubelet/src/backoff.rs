//! Keyed exponential backoff (upstream `util/flowcontrol.Backoff`), used for CrashLoopBackOff and
//! image pull backoff.
//!
//! Times are wall-clock (`SystemTime`) because the events it is asked about come from the runtime
//! (a container's `finishedAt`), exactly as upstream. An entry not touched for twice the maximum
//! counts as expired: a container that ran cleanly for 10 minutes starts again from the initial delay.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

#[derive(Debug, Clone)]
struct Entry {
    backoff: Duration,
    last_update: SystemTime,
}

/// Per-key backoff; owned by one task (a pod worker), so no locking.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            entries: HashMap::new(),
        }
    }

    /// CrashLoopBackOff: 10 s doubling to 5 min.
    pub fn crash_loop() -> Self {
        Self::new(Duration::from_secs(10), Duration::from_secs(300))
    }

    /// Image pulls: 10 s doubling to 5 min (upstream `imageBackOffPeriod`, `MaxContainerBackOff`).
    pub fn image_pull() -> Self {
        Self::new(Duration::from_secs(10), Duration::from_secs(300))
    }

    fn expired(&self, event_time: SystemTime, last_update: SystemTime) -> bool {
        event_time
            .duration_since(last_update)
            .map(|d| d > self.max * 2)
            .unwrap_or(false)
    }

    /// Records another failure of `id` at `event_time`: starts at the initial delay, else doubles.
    pub fn next(&mut self, id: &str, event_time: SystemTime, now: SystemTime) {
        let backoff = match self.entries.get(id) {
            Some(e) if !self.expired(event_time, e.last_update) => (e.backoff * 2).min(self.max),
            _ => self.initial,
        };
        self.entries.insert(
            id.to_string(),
            Entry {
                backoff,
                last_update: now,
            },
        );
    }

    /// The current delay for `id` (zero when none).
    pub fn get(&self, id: &str) -> Duration {
        self.entries.get(id).map(|e| e.backoff).unwrap_or_default()
    }

    /// True when less than the current delay has passed since `event_time`. Returns the time left.
    pub fn in_backoff_since(
        &self,
        id: &str,
        event_time: SystemTime,
        now: SystemTime,
    ) -> Option<Duration> {
        let e = self.entries.get(id)?;
        if self.expired(event_time, e.last_update) {
            return None;
        }
        let since = now.duration_since(event_time).unwrap_or_default();
        (since < e.backoff).then(|| e.backoff - since)
    }

    /// True while less than the current delay has passed since the last failure was recorded
    /// (upstream `IsInBackOffSinceUpdate`, used for image pulls). Returns the time left.
    pub fn in_backoff_since_update(&self, id: &str, now: SystemTime) -> Option<Duration> {
        let e = self.entries.get(id)?;
        let since = now.duration_since(e.last_update).unwrap_or_default();
        (since < e.backoff).then(|| e.backoff - since)
    }

    /// Forgets `id` (e.g. an image pull that succeeded).
    pub fn reset(&mut self, id: &str) {
        self.entries.remove(id);
    }

    /// Drops entries idle for longer than twice the maximum, so the map does not grow without bound.
    pub fn gc(&mut self, now: SystemTime) {
        let max2 = self.max * 2;
        self.entries.retain(|_, e| {
            now.duration_since(e.last_update)
                .map(|d| d <= max2)
                .unwrap_or(true)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
    }

    #[test]
    fn doubles_to_max_and_resets_after_stable_period() {
        let mut b = Backoff::crash_loop();
        assert_eq!(b.in_backoff_since("c", t(0), t(0)), None);
        b.next("c", t(0), t(0));
        assert_eq!(b.get("c"), Duration::from_secs(10));
        assert_eq!(
            b.in_backoff_since("c", t(0), t(4)),
            Some(Duration::from_secs(6))
        );
        assert_eq!(b.in_backoff_since("c", t(0), t(10)), None);
        let mut now = 10;
        let mut seen = vec![];
        for _ in 0..7 {
            b.next("c", t(now), t(now));
            seen.push(b.get("c").as_secs());
            now += b.get("c").as_secs();
        }
        assert_eq!(seen, vec![20, 40, 80, 160, 300, 300, 300]);
        // A failure after more than 2 * max of quiet starts over.
        let quiet = now + 601;
        b.next("c", t(quiet), t(quiet));
        assert_eq!(b.get("c"), Duration::from_secs(10));
    }

    #[test]
    fn keys_are_independent_and_gc_drops_idle() {
        let mut b = Backoff::image_pull();
        b.next("a", t(0), t(0));
        b.next("a", t(1), t(1));
        b.next("b", t(1), t(1));
        assert_eq!(b.get("a"), Duration::from_secs(20));
        assert_eq!(b.get("b"), Duration::from_secs(10));
        assert_eq!(
            b.in_backoff_since_update("a", t(5)),
            Some(Duration::from_secs(16))
        );
        assert_eq!(b.in_backoff_since_update("a", t(21)), None);
        b.reset("a");
        assert_eq!(b.get("a"), Duration::ZERO);
        b.gc(t(1000));
        assert_eq!(b.get("b"), Duration::ZERO);
    }
}
