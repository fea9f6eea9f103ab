//! The wall clock the kubelet's backoff decisions read (upstream injects `clock.Clock` into its
//! backoffs for the same reason).
//!
//! CrashLoopBackOff and image pull backoff compare the runtime's wall-clock timestamps (a
//! container's `finishedAt`) with now. In the crate's unit tests, which run under tokio's paused
//! clock, "now" follows tokio's virtual time from the moment the process first asked, so an
//! in-process test sees a five-minute backoff pass in virtual time; in the binary it is simply
//! `SystemTime::now()`.

use std::time::SystemTime;

/// Now, on the clock backoff decisions use.
#[cfg(not(test))]
pub fn now() -> SystemTime {
    SystemTime::now()
}

/// Now, on the clock backoff decisions use: tokio's (possibly paused) clock, anchored to the
/// wall clock once per process.
#[cfg(test)]
pub fn now() -> SystemTime {
    use std::sync::OnceLock;
    static ANCHOR: OnceLock<(SystemTime, std::time::Instant)> = OnceLock::new();
    let (wall, mono) = *ANCHOR.get_or_init(|| (SystemTime::now(), std::time::Instant::now()));
    let virt = tokio::time::Instant::now().into_std();
    wall + virt.saturating_duration_since(mono)
}

/// [`now`] as Unix nanoseconds, the CRI's timestamp unit.
pub fn now_unix_nanos() -> i64 {
    now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
