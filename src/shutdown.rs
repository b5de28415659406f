//! One shutdown for the whole process, handed to every listener and every background loop (as
//! mini-redis hands its `Shutdown` to each task), and the commits in flight it waits for
//! (tokio-util's `TaskTracker`). SIGINT or SIGTERM starts it: the listeners stop accepting,
//! and the process waits for the requests and the commits in flight, up to `[server]
//! shutdown_grace_secs`. The background loops (readiness, lease expiry, the clock watch,
//! SIGHUP reloads) keep running while they drain, since those requests still rely on them,
//! and end when it is finished. A commit whose client has hung up is still waited for: it
//! runs in a task of its own (`gate::run_to_end`), tracked here.

use std::future::Future;
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A handle on the process's shutdown: cheap to clone, one per task that must stop.
#[derive(Clone, Default)]
pub struct Shutdown {
    /// Cancelled when the shutdown starts: stop accepting.
    token: CancellationToken,
    /// Cancelled when the requests and commits in flight are done: stop the background loops.
    finished: CancellationToken,
    started: Arc<OnceLock<Instant>>,
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Starts the shutdown on SIGINT or SIGTERM.
    pub fn on_signals(&self) {
        let shutdown = self.clone();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM can be watched");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {},
                _ = term.recv() => {},
            }
            tracing::info!(target: "fencegate::server", "shutting down: finishing requests in flight");
            shutdown.begin();
        });
    }

    /// Starts the shutdown now.
    pub fn begin(&self) {
        let _ = self.started.set(Instant::now());
        self.token.cancel();
    }

    /// How long ago the shutdown started (zero if it has not).
    pub fn elapsed(&self) -> Duration {
        self.started.get().map_or(Duration::ZERO, Instant::elapsed)
    }

    /// Completes once the shutdown has started.
    pub async fn requested(&self) {
        self.token.cancelled().await
    }

    pub fn is_requested(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The requests and commits in flight are done (or out of time): the background loops end.
    pub fn finish(&self) {
        self.token.cancel();
        self.finished.cancel();
    }

    /// Runs the background loop `work` until it ends or the shutdown has finished.
    pub fn spawn_background(&self, work: impl Future<Output = ()> + Send + 'static) {
        let token = self.finished.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = work => {},
                _ = token.cancelled() => {},
            }
        });
    }
}

/// Every commit in flight in this process: `gate::run_to_end` spawns each one here.
pub fn commits() -> &'static TaskTracker {
    static COMMITS: LazyLock<TaskTracker> = LazyLock::new(TaskTracker::new);
    &COMMITS
}

/// Waits for the commits in flight, up to `grace`. False when some were still running then:
/// they are cut short, which the commit protocol survives as it survives a crash.
pub async fn drain_commits(grace: Duration) -> bool {
    let commits = commits();
    commits.close();
    tokio::time::timeout(grace, commits.wait()).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn background_loops_run_until_the_shutdown_has_finished() {
        let shutdown = Shutdown::new();
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        shutdown.spawn_background(async move {
            let _alive = tx;
            std::future::pending::<()>().await
        });
        assert!(!shutdown.is_requested());
        shutdown.begin();
        shutdown.requested().await;
        // Still running while requests drain.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(rx
            .try_recv()
            .is_err_and(|e| e == tokio::sync::mpsc::error::TryRecvError::Empty));
        shutdown.finish();
        // The loop's future was dropped, and with it the sender.
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_drain_waits_for_a_commit_whose_caller_left() {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = done.clone();
        let caller = commits().spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        // The client hangs up: its wait is dropped, the commit is not.
        drop(caller);
        assert!(drain_commits(Duration::from_secs(10)).await);
        assert!(done.load(std::sync::atomic::Ordering::SeqCst));
    }
}
