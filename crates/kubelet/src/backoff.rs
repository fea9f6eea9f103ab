//! Exponential backoff, the one policy every retry loop in the kubelet uses.
//!
//! - [`Exponential`]: the policy (initial delay, doubling, cap, optional jitter), client-go's
//!   `wait.Backoff` with `Factor: 2` and `Cap`, and `wait.Jitter`.
//! - [`Retry`]: one loop's running state (node registration, the lease heartbeat, certificate
//!   rotation, pod termination, waiting for the runtime); reset on success.
//! - [`Backoff`]: keyed, upstream `util/flowcontrol.Backoff`, used for CrashLoopBackOff and image
//!   pull backoff.
//!
//! The keyed backoff's times are wall-clock (`SystemTime`) because the events it is asked about
//! come from the runtime (a container's `finishedAt`), exactly as upstream. An entry not touched
//! for twice the maximum counts as expired: a container that ran cleanly for 10 minutes starts
//! again from the initial delay. [`Retry`] is driven by the loop's own sleeps (tokio time), so
//! paused-time tests see its delays exactly.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

/// An exponential backoff policy: `initial`, doubling after each failure, never above `max`;
/// `jitter` adds up to that fraction of each delay (client-go `wait.Jitter`; 0 adds none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exponential {
    pub initial: Duration,
    pub max: Duration,
    pub jitter: f64,
}

impl Exponential {
    /// No jitter: what every loop of the kubelet used before this type existed.
    pub const fn new(initial: Duration, max: Duration) -> Self {
        Exponential {
            initial,
            max,
            jitter: 0.0,
        }
    }

    /// The same policy with up to `factor * delay` added to each delay, so many nodes retrying
    /// against one API server do not retry in step.
    pub const fn with_jitter(self, factor: f64) -> Self {
        Exponential {
            jitter: factor,
            ..self
        }
    }

    /// The delay after `prev`: the initial delay when there was none, else twice `prev` capped at
    /// the maximum (client-go `Backoff.Step` with `Factor: 2`).
    pub fn step(&self, prev: Duration) -> Duration {
        if prev.is_zero() {
            self.initial
        } else {
            prev.saturating_mul(2).min(self.max)
        }
    }

    /// A fresh running state for one retry loop.
    pub fn retry(self) -> Retry {
        Retry {
            policy: self,
            next: Duration::ZERO,
        }
    }

    fn jittered(&self, d: Duration) -> Duration {
        if self.jitter <= 0.0 {
            return d;
        }
        d + d.mul_f64(self.jitter * fastrand::f64())
    }
}

/// One retry loop's backoff: each [`Retry::next_delay`] is the policy's next step; a success
/// calls [`Retry::reset`] so the next failure starts from the initial delay again.
#[derive(Debug, Clone)]
pub struct Retry {
    policy: Exponential,
    /// The last delay handed out (zero: none since the last reset).
    next: Duration,
}

impl Retry {
    /// The delay to wait before the next attempt (jittered), advancing the backoff.
    pub fn next_delay(&mut self) -> Duration {
        self.next = self.policy.step(self.next);
        self.policy.jittered(self.next)
    }

    /// After a success: the next failure waits the initial delay.
    pub fn reset(&mut self) {
        self.next = Duration::ZERO;
    }
}

/// Sleeps `d` unless `cancel` fires first; false when cancelled (the loop should return).
pub async fn sleep(d: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

/// Every retry against the API server (watches, status writes, the Lease, node status): 500 ms
/// doubling to 4 s, plus up to half again of jitter. The cap is low because a kubelet that comes
/// back a minute after its API server does looks broken to the scheduler; the jitter keeps many
/// nodes from retrying in step. Upstream's reflector uses 800 ms -> 30 s, which is what made a
/// pod created after a long outage wait out a 30 s delay.
pub const API: Exponential =
    Exponential::new(Duration::from_millis(500), Duration::from_secs(4)).with_jitter(0.5);

/// While a loop cannot reach the API server at all, it checks this often whether it is back
/// (one cheap `GET /version`), so a recovered server is noticed within about a second.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Sleeps `d`, but every [`PROBE_INTERVAL`] asks `probe` whether the API server is back and returns
/// early when it is (client-go's reflector gets the same effect from its backoff manager's short
/// steps). False when cancelled.
pub async fn sleep_or_probe<F, Fut>(d: Duration, mut probe: F, cancel: &CancellationToken) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + d;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return true;
        }
        if !sleep(left.min(PROBE_INTERVAL), cancel).await {
            return false;
        }
        if left > PROBE_INTERVAL && probe().await {
            return true;
        }
    }
}

/// True when `e` means the API server was not reached at all (connection refused, reset, timed
/// out), as opposed to an answer: only then is probing for its return worth a request.
pub fn unreachable(e: &kube::Error) -> bool {
    !matches!(e, kube::Error::Api(_))
}

/// The cheap probe: `GET /version`, readable by any authenticated client.
pub async fn api_reachable(client: &kube::Client) -> bool {
    client.apiserver_version().await.is_ok()
}

/// After a failed API request: waits the next delay of `retry`, cut short by a probe when the
/// server was unreachable. False when cancelled.
pub async fn api_wait(
    retry: &mut Retry,
    err: &kube::Error,
    client: &kube::Client,
    cancel: &CancellationToken,
) -> bool {
    let d = retry.next_delay();
    if unreachable(err) {
        sleep_or_probe(d, || api_reachable(client), cancel).await
    } else {
        sleep(d, cancel).await
    }
}

/// The same for a watch: a watch that expired (410 Gone, "too old resource version") relists at
/// once, as client-go's reflector does, instead of waiting out a delay grown during an outage;
/// `last_gone` stops a server that keeps answering 410 from being relisted in a tight loop.
/// `probe`: the client to probe with while unreachable; `None` for watches that are many (one per
/// referenced object), so an outage costs one probe per second per kubelet loop, not per object.
pub async fn watch_wait(
    retry: &mut Retry,
    err: &kube::runtime::watcher::Error,
    last_gone: &mut bool,
    probe: Option<&kube::Client>,
    cancel: &CancellationToken,
) -> bool {
    use kube::runtime::watcher::Error as W;
    let gone = matches!(err, W::WatchError(s) if s.code == 410);
    if gone && !*last_gone {
        *last_gone = true;
        retry.reset();
        return !cancel.is_cancelled();
    }
    *last_gone = gone;
    match err {
        W::InitialListFailed(e) | W::WatchStartFailed(e) | W::WatchFailed(e) => match probe {
            Some(client) => api_wait(retry, e, client, cancel).await,
            None => sleep(retry.next_delay(), cancel).await,
        },
        W::WatchError(_) | W::NoResourceVersion => sleep(retry.next_delay(), cancel).await,
    }
}

#[derive(Debug, Clone)]
struct Entry {
    backoff: Duration,
    last_update: SystemTime,
}

/// Per-key backoff; owned by one task (a pod worker), so no locking.
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: Exponential,
    entries: HashMap<String, Entry>,
    /// A failure this long after the last one starts over from the initial delay (upstream
    /// `HasExpiredFunc`; by default twice the maximum).
    expire_after: Duration,
}

/// Upstream `MaxContainerBackOff`: the CrashLoopBackOff cap without `maxContainerRestartPeriod`.
pub const MAX_CONTAINER_BACKOFF: Duration = Duration::from_secs(300);
/// Upstream `containerBackOffPeriod`: the first CrashLoopBackOff delay.
pub const CONTAINER_BACKOFF_PERIOD: Duration = Duration::from_secs(10);
/// Upstream's CrashLoopBackOff `HasExpiredFunc`: a container that ran for 10 minutes starts again
/// from the initial delay, whatever the cap.
pub const CRASH_LOOP_RESET: Duration = Duration::from_secs(600);

/// The CrashLoopBackOff (initial, max) for `crashLoopBackOff.maxContainerRestartPeriod` (upstream
/// `newCrashLoopBackOff`): the cap replaces 300 s, and a cap below 10 s is the first delay too.
pub fn crash_loop_policy(max_restart_period: Option<Duration>) -> (Duration, Duration) {
    match max_restart_period {
        Some(max) => (CONTAINER_BACKOFF_PERIOD.min(max), max),
        None => (CONTAINER_BACKOFF_PERIOD, MAX_CONTAINER_BACKOFF),
    }
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            policy: Exponential::new(initial, max),
            entries: HashMap::new(),
            expire_after: max * 2,
        }
    }

    /// CrashLoopBackOff: 10 s doubling to 5 min, or to `max_restart_period`
    /// (see [`crash_loop_policy`]); reset after [`CRASH_LOOP_RESET`] without a failure.
    pub fn crash_loop(max_restart_period: Option<Duration>) -> Self {
        let (initial, max) = crash_loop_policy(max_restart_period);
        Backoff {
            expire_after: CRASH_LOOP_RESET,
            ..Self::new(initial, max)
        }
    }

    /// Image pulls: 10 s doubling to 5 min (upstream `imageBackOffPeriod`, `MaxContainerBackOff`).
    pub fn image_pull() -> Self {
        Self::new(Duration::from_secs(10), Duration::from_secs(300))
    }

    fn expired(&self, event_time: SystemTime, last_update: SystemTime) -> bool {
        event_time
            .duration_since(last_update)
            .map(|d| d > self.expire_after)
            .unwrap_or(false)
    }

    /// Records another failure of `id` at `event_time`: starts at the initial delay, else doubles.
    pub fn next(&mut self, id: &str, event_time: SystemTime, now: SystemTime) {
        let prev = match self.entries.get(id) {
            Some(e) if !self.expired(event_time, e.last_update) => e.backoff,
            _ => Duration::ZERO,
        };
        let backoff = self.policy.step(prev);
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

    /// Drops entries idle for longer than their expiry, so the map does not grow without bound.
    pub fn gc(&mut self, now: SystemTime) {
        let max2 = self.expire_after;
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
        let mut b = Backoff::crash_loop(None);
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

    /// Upstream `newCrashLoopBackOff` + `flowcontrol.Backoff`: the delays a container crashing
    /// at once after each start waits, for several `maxContainerRestartPeriod` values.
    #[test]
    fn crash_loop_cap_table() {
        let cases: &[(Option<u64>, &[u64])] = &[
            (None, &[10, 20, 40, 80, 160, 300, 300]),
            (Some(300), &[10, 20, 40, 80, 160, 300, 300]),
            (Some(60), &[10, 20, 40, 60, 60, 60, 60]),
            (Some(10), &[10, 10, 10, 10, 10, 10, 10]),
            (Some(2), &[2, 2, 2, 2, 2, 2, 2]),
            (Some(1), &[1, 1, 1, 1, 1, 1, 1]),
        ];
        for (cap, want) in cases {
            let mut b = Backoff::crash_loop(cap.map(Duration::from_secs));
            let mut now = 0;
            let mut seen = vec![];
            for _ in 0..want.len() {
                b.next("c", t(now), t(now));
                seen.push(b.get("c").as_secs());
                now += b.get("c").as_secs();
            }
            assert_eq!(&seen, want, "cap {cap:?}");
        }
    }

    /// The reset after a quiet period stays upstream's 10 minutes with a small cap (not twice
    /// the cap): a container crashing every 5 s under a 2 s cap stays at the cap.
    #[test]
    fn crash_loop_reset_is_ten_minutes_whatever_the_cap() {
        let mut b = Backoff::crash_loop(Some(Duration::from_secs(2)));
        b.next("c", t(0), t(0));
        b.next("c", t(5), t(5));
        assert_eq!(
            b.in_backoff_since("c", t(5), t(6)),
            Some(Duration::from_secs(1))
        );
        b.gc(t(600));
        assert_eq!(b.get("c"), Duration::from_secs(2), "kept within 600 s");
        b.gc(t(606));
        assert_eq!(b.get("c"), Duration::ZERO, "dropped after 600 s idle");
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

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// Each loop's policy, as its hand-rolled `(delay * 2).min(cap)` computed it before.
    #[test]
    fn retry_doubles_to_the_cap_and_resets() {
        let table: &[(&str, u64, u64, &[u64])] = &[
            (
                "node registration",
                100,
                7_000,
                &[100, 200, 400, 800, 1600, 3200, 6400, 7000, 7000],
            ),
            (
                "lease renewal",
                200,
                7_000,
                &[200, 400, 800, 1600, 3200, 6400, 7000, 7000],
            ),
            (
                "certificate rotation",
                1_000,
                60_000,
                &[1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000],
            ),
            (
                "waiting for the runtime",
                200,
                10_000,
                &[200, 400, 800, 1600, 3200, 6400, 10000, 10000],
            ),
            (
                "pod termination",
                1_000,
                10_000,
                &[1000, 2000, 4000, 8000, 10000, 10000],
            ),
            ("initial above the cap", 500, 300, &[500, 300, 300]),
        ];
        for (what, initial, max, want) in table {
            let mut r = Exponential::new(ms(*initial), ms(*max)).retry();
            let got: Vec<u64> = want
                .iter()
                .map(|_| r.next_delay().as_millis() as u64)
                .collect();
            assert_eq!(&got, want, "{what}");
            r.reset();
            assert_eq!(r.next_delay(), ms(*initial), "{what}: after reset");
        }
    }

    #[test]
    fn jitter_adds_at_most_its_fraction() {
        let policy = Exponential::new(ms(1000), ms(8000)).with_jitter(0.5);
        for _ in 0..50 {
            let mut r = policy.retry();
            for base in [1000, 2000, 4000, 8000, 8000] {
                let d = r.next_delay();
                assert!(
                    d >= ms(base) && d <= ms(base + base / 2),
                    "{d:?} for {base}"
                );
            }
        }
    }

    /// While unreachable, a loop notices the API server's return at the first probe after it,
    /// not at the end of its delay; a probe that never succeeds leaves the delay as it was.
    #[tokio::test(start_paused = true)]
    async fn probe_cuts_the_wait_short_once_the_server_is_back() {
        let cancel = CancellationToken::new();
        let start = tokio::time::Instant::now();
        let back_at = start + ms(2500);
        let probes = std::cell::Cell::new(0);
        let probe = || {
            probes.set(probes.get() + 1);
            async move { tokio::time::Instant::now() >= back_at }
        };
        assert!(sleep_or_probe(Duration::from_secs(4), probe, &cancel).await);
        assert_eq!(
            start.elapsed(),
            ms(3000),
            "noticed at the first probe after 2.5 s"
        );
        assert_eq!(probes.get(), 3);

        let start = tokio::time::Instant::now();
        assert!(sleep_or_probe(ms(3500), || async { false }, &cancel).await);
        assert_eq!(start.elapsed(), ms(3500), "down all along: the whole delay");

        // The API policy: capped at 4 s plus at most half again, from 500 ms after a reset.
        let mut r = API.retry();
        for _ in 0..20 {
            assert!(r.next_delay() <= ms(6000));
        }
        r.reset();
        assert!(r.next_delay() <= ms(750));
    }

    /// A loop driven by `Retry` and `sleep` under paused time: it waits exactly the delays, a
    /// success resets, and cancellation ends the wait at once.
    #[tokio::test(start_paused = true)]
    async fn retry_loop_waits_the_delays_and_stops_on_cancel() {
        let cancel = CancellationToken::new();
        let start = tokio::time::Instant::now();
        let mut r = Exponential::new(ms(100), ms(400)).retry();
        let mut waited = vec![];
        // Four failures, a success, two failures.
        for ok in [false, false, false, false, true, false, false] {
            if ok {
                r.reset();
                continue;
            }
            let before = tokio::time::Instant::now();
            assert!(sleep(r.next_delay(), &cancel).await);
            waited.push((tokio::time::Instant::now() - before).as_millis());
        }
        assert_eq!(waited, vec![100, 200, 400, 400, 100, 200]);
        assert_eq!(start.elapsed(), ms(1400));
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ms(50)).await;
            c.cancel();
        });
        let before = tokio::time::Instant::now();
        assert!(!sleep(Duration::from_secs(3600), &cancel).await);
        assert_eq!(before.elapsed(), ms(50));
    }
}
