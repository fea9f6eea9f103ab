//! Bounded shutdown: join a set of tasks until a deadline, then abort what is left and name it.
//!
//! Upstream has no counterpart (the Go kubelet exits with its goroutines running); the shape is
//! linkerd2-proxy's drain (connections finish, the whole shutdown has a timeout). The kubelet's
//! tasks stop on their cancellation token; one that does not (a runtime call stuck past its own
//! timeout, a loop that forgot to select on the token) must not keep the process from exiting,
//! and the log should say which one it was.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio::task::{AbortHandle, Id, JoinError, JoinSet};
use tokio::time::Instant;
use tracing::{info, warn};

/// How long `kubelet::run`'s shutdown waits for its tasks after cancelling them. Longer than the
/// servers' connection grace ([`crate::server::serve::CONNECTION_GRACE`] plus its close wait), so
/// open connections are closed by the servers themselves, not cut by an abort; shorter than the
/// binary's overall bound, so what is aborted is named in the log before the process exits.
pub const TASKS_DEADLINE: Duration = Duration::from_secs(10);

/// After the deadline, how long aborted tasks get to unwind. A task blocked outside an await point
/// cannot be aborted at all; it is named as stuck instead of waited for.
const ABORT_WAIT: Duration = Duration::from_millis(500);

/// What a drain saw.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// Tasks that ended on their own before the deadline.
    pub finished: usize,
    /// Tasks that panicked, by name.
    pub panicked: Vec<String>,
    /// Tasks still running at the deadline and aborted, by name.
    pub aborted: Vec<String>,
    /// Tasks that did not even end when aborted (blocked outside an await point), by name.
    pub stuck: Vec<String>,
}

impl Report {
    /// Every task ended on its own.
    pub fn clean(&self) -> bool {
        self.panicked.is_empty() && self.aborted.is_empty() && self.stuck.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} finished", self.finished)?;
        for (what, names) in [
            ("panicked", &self.panicked),
            ("aborted", &self.aborted),
            ("stuck", &self.stuck),
        ] {
            if !names.is_empty() {
                write!(f, ", {what}: {}", names.join(", "))?;
            }
        }
        Ok(())
    }
}

/// A `JoinSet` whose tasks have names, so a drain can say what it had to abort.
#[derive(Default)]
pub struct Tasks {
    set: JoinSet<()>,
    names: HashMap<Id, String>,
}

impl Tasks {
    pub fn new() -> Self {
        Self::default()
    }

    /// Spawns `fut` as `name` (what the drain reports if it has to abort it).
    pub fn spawn<F>(&mut self, name: impl Into<String>, fut: F) -> AbortHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let h = self.set.spawn(fut);
        self.names.insert(h.id(), name.into());
        h
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// The next task to end: its name and how it ended.
    pub async fn join_next(&mut self) -> Option<(String, Result<(), JoinError>)> {
        let r = self.set.join_next_with_id().await?;
        let id = match &r {
            Ok((id, ())) => *id,
            Err(e) => e.id(),
        };
        Some((name_of(&mut self.names, id), r.map(|_| ())))
    }

    /// Joins every task until `within` has passed, then aborts the rest; logs and returns what
    /// happened.
    pub async fn drain(mut self, within: Duration) -> Report {
        drain_set(&mut self.set, &mut self.names, within).await
    }
}

/// [`Tasks::drain`] for a plain `JoinSet`: tasks are named by their tokio task id.
pub async fn drain<T: 'static>(mut set: JoinSet<T>, within: Duration) -> Report {
    drain_set(&mut set, &mut HashMap::new(), within).await
}

fn name_of(names: &mut HashMap<Id, String>, id: Id) -> String {
    names.remove(&id).unwrap_or_else(|| format!("task {id}"))
}

async fn drain_set<T: 'static>(
    set: &mut JoinSet<T>,
    names: &mut HashMap<Id, String>,
    within: Duration,
) -> Report {
    let mut report = Report::default();
    let deadline = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, set.join_next_with_id()).await {
            Ok(None) => break,
            Ok(Some(Ok((id, _)))) => {
                names.remove(&id);
                report.finished += 1;
            }
            Ok(Some(Err(e))) if e.is_panic() => report.panicked.push(name_of(names, e.id())),
            // Aborted by someone else before the deadline: it ended.
            Ok(Some(Err(e))) => {
                names.remove(&e.id());
                report.finished += 1;
            }
            Err(_) => {
                warn!(
                    still_running = set.len(),
                    deadline = ?within,
                    "tasks did not stop in time; aborting them"
                );
                set.abort_all();
                let wait_until = Instant::now() + ABORT_WAIT;
                loop {
                    match tokio::time::timeout_at(wait_until, set.join_next_with_id()).await {
                        Ok(None) => break,
                        Ok(Some(Ok((id, _)))) => {
                            names.remove(&id);
                            report.finished += 1;
                        }
                        Ok(Some(Err(e))) if e.is_panic() => {
                            report.panicked.push(name_of(names, e.id()))
                        }
                        Ok(Some(Err(e))) => report.aborted.push(name_of(names, e.id())),
                        Err(_) => {
                            // Named tasks left in the map are the ones that never ended; a
                            // plain JoinSet only knows how many.
                            report.stuck = names.drain().map(|(_, n)| n).collect();
                            let unnamed = set.len().saturating_sub(report.stuck.len());
                            report
                                .stuck
                                .extend((0..unnamed).map(|_| "unnamed task".to_string()));
                            // Dropping the set detaches them; the process exit ends them.
                            set.detach_all();
                            break;
                        }
                    }
                }
                break;
            }
        }
    }
    report.aborted.sort();
    report.stuck.sort();
    if report.clean() {
        info!(finished = report.finished, "all tasks stopped");
    } else {
        warn!(%report, "tasks stopped with a bound");
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_util::sync::CancellationToken;

    /// Ends when cancelled, after `unwind` more.
    async fn polite(cancel: CancellationToken, unwind: Duration) {
        cancel.cancelled().await;
        tokio::time::sleep(unwind).await;
    }

    /// Never looks at the token.
    async fn deaf() {
        std::future::pending::<()>().await
    }

    #[tokio::test(start_paused = true)]
    async fn drain_table() {
        let s = Duration::from_secs;
        // (case, tasks as (name, unwind or None for a task that ignores cancellation), what is
        // aborted, when the drain returns)
        type Case = (
            &'static str,
            Vec<(&'static str, Option<u64>)>,
            Vec<&'static str>,
            u64,
        );
        let cases: Vec<Case> = vec![
            ("nothing to wait for", vec![], vec![], 0),
            (
                "all stop at once",
                vec![("a", Some(0)), ("b", Some(0))],
                vec![],
                0,
            ),
            (
                "the slowest sets the pace",
                vec![("a", Some(1)), ("b", Some(3))],
                vec![],
                3,
            ),
            (
                "a deaf task is aborted at the deadline and named",
                vec![("lease", Some(1)), ("server", None)],
                vec!["server"],
                5,
            ),
            (
                "too slow counts as still running",
                vec![("a", Some(9)), ("b", None), ("c", Some(2))],
                vec!["a", "b"],
                5,
            ),
        ];
        for (case, tasks, want_aborted, want_secs) in cases {
            let cancel = CancellationToken::new();
            let mut set = Tasks::new();
            for (name, unwind) in &tasks {
                match unwind {
                    Some(u) => set.spawn(*name, polite(cancel.clone(), s(*u))),
                    None => set.spawn(*name, deaf()),
                };
            }
            let start = Instant::now();
            cancel.cancel();
            let report = set.drain(s(5)).await;
            assert_eq!(report.aborted, want_aborted, "{case}: {report}");
            assert_eq!(
                report.finished,
                tasks.len() - want_aborted.len(),
                "{case}: {report}"
            );
            assert!(
                report.stuck.is_empty() && report.panicked.is_empty(),
                "{case}"
            );
            assert_eq!(start.elapsed(), s(want_secs), "{case}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn plain_join_set_and_panics_are_reported() {
        let mut set = JoinSet::new();
        set.spawn(async { panic!("boom") });
        set.spawn(deaf());
        set.spawn(async {});
        let report = drain(set, Duration::from_secs(2)).await;
        assert_eq!(report.finished, 1);
        assert_eq!(report.panicked.len(), 1);
        assert_eq!(report.aborted.len(), 1);
        assert!(report.aborted[0].starts_with("task "), "{report}");
        let mut named = Tasks::new();
        named.spawn("crashy", async { panic!("boom") });
        let (name, r) = named.join_next().await.unwrap();
        assert_eq!(name, "crashy");
        assert!(r.unwrap_err().is_panic());
    }

    /// A task blocked outside an await point cannot be aborted: the drain still returns, naming
    /// it as stuck.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_that_cannot_be_aborted_is_named_and_left() {
        let mut set = Tasks::new();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        set.spawn("blocked", async move {
            let _ = rx.recv_timeout(Duration::from_secs(5));
        });
        let start = std::time::Instant::now();
        let report = set.drain(Duration::from_millis(100)).await;
        assert_eq!(report.stuck, vec!["blocked".to_string()], "{report}");
        assert!(start.elapsed() < Duration::from_secs(2));
        drop(tx);
    }
}
