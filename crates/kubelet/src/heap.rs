//! Giving freed heap back to the system after pods went away (what Go's background scavenger
//! does for the upstream kubelet). glibc's malloc keeps memory freed by one thread's arena
//! for that arena, and trims only the top of each heap: after 100 pods were deleted the kubelet
//! kept about 2.5 MiB of free heap resident (13.9 MiB of heap, 11.5 MiB after `malloc_trim`,
//! bench/api-pods.sh). Other C libraries (musl) return memory on their own; nothing to do there.

/// Returns free heap pages to the system, off the async threads (it locks each arena in turn).
pub fn release_free() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    tokio::task::spawn_blocking(|| {
        // SAFETY: malloc_trim takes no pointers and may be called from any thread at any time.
        unsafe { libc::malloc_trim(0) };
    });
}
