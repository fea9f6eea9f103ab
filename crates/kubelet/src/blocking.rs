//! Blocking file I/O off the async threads (what `tokio::fs` does for one call, here for a
//! group: each `tokio::fs` call is its own hand-off to a pool thread and back, so a few small
//! calls made together go in one task).

use std::io;

/// Runs `f` on the blocking pool; a task that panicked or was cancelled is an `io::Error`, as
/// `tokio::fs` reports it.
pub async fn io<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)))
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn results_and_panics_come_back_as_io_results() {
        assert_eq!(super::io(|| Ok(7)).await.unwrap(), 7);
        let denied = super::io(|| -> std::io::Result<()> {
            Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
        })
        .await;
        assert_eq!(
            denied.unwrap_err().kind(),
            std::io::ErrorKind::PermissionDenied
        );
        let panicked = super::io(|| -> std::io::Result<()> { panic!("boom") }).await;
        assert!(panicked.unwrap_err().to_string().contains("panicked"));
    }
}
