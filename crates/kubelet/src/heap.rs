//! The kubelet's heap under glibc: fewer malloc arenas, and freed heap given back to the system
//! after pods went away (what Go's background scavenger does for the upstream kubelet).
//! glibc's malloc keeps memory freed by one thread's arena for that arena, and trims only the
//! top of each heap: after 100 pods were deleted the kubelet kept about 2.5 MiB of free heap
//! resident (13.9 MiB of heap, 11.5 MiB after `malloc_trim`, bench/api-pods.sh). Other C
//! libraries (musl) return memory on their own; nothing to do there.

/// The malloc arenas glibc may create when `MALLOC_ARENA_MAX` does not say (see [`limit_arenas`]).
pub const ARENAS: i32 = 2;

/// Caps glibc's malloc arenas at [`ARENAS`], unless the operator set `MALLOC_ARENA_MAX` (glibc
/// reads it itself; a later mallopt would override it). Call before any thread starts.
///
/// Why: glibc gives threads up to 8 arenas per CPU, and each keeps the memory its threads freed.
/// The kubelet's allocations come from the tokio workers and a blocking pool of up to ~25
/// threads during a burst of pod deletions, so freed memory sat in many arenas. At 100 pods
/// deleted (bench/api-pods.sh, three pairs of runs, same binary) the peak RSS was 34.7-35.6 MiB
/// with two arenas and 36.3-36.8 MiB without, the anonymous memory after deletion 12.0-13.2
/// against 13.3-14.2 MiB; CPU did not move beyond run-to-run noise (small allocations are served
/// by each thread's tcache, without the arena lock). Go's allocator, which upstream uses, has
/// per-P caches over one heap, which this comes closer to.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt takes plain integers; called before the runtime's threads exist.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, ARENAS) };
    }
}

/// Returns free heap pages to the system, off the async threads (it locks each arena in turn).
pub fn release_free() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    tokio::task::spawn_blocking(|| {
        // SAFETY: malloc_trim takes no pointers and may be called from any thread at any time.
        unsafe { libc::malloc_trim(0) };
    });
}
