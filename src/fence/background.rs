//! Whole-table scans that serve bookkeeping (the census, counting and folding tombstones), run
//! on a thread of their own at the lowest CPU priority.
//!
//! A scan reads every row: about a microsecond each, ten seconds of a core for ten million
//! scopes, and two of them start with every fencegate. On the blocking pool at normal priority
//! they took both cores of a 2-core machine from the writes for their whole length (S7 in
//! BENCHMARKS.md: p99 at ten million scopes 2.1x that at ten thousand, and worse when measured
//! right after start-up). At nice 19 a scan still runs whenever a core is idle, and never
//! starves (unlike SCHED_IDLE), but a write that wakes up takes the core back.
//!
//! Priority alone was not enough: run at nice 19 (even at SCHED_IDLE) the two start-up scans
//! still took whatever the writes left idle between their fsyncs, and p99 at ten million
//! scopes stayed 1.3-2.8x that at ten thousand; waiting for them to end before the load made
//! the two equal. So a scan also paces itself ([`scan_paced`]): pages of [`PAGE`] rows, each
//! followed by a pause that holds it to [`DUTY`] of one core.
//!
//! A thread of its own, not a blocking-pool thread: an unprivileged process may raise a
//! thread's nice value but not lower it again, so a pool thread lowered for one scan would
//! stay slow for the writes it serves next.

use super::{FenceRow, FenceStore, StoreError};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The nice value of a scan's thread: the lowest priority.
pub const NICE: i32 = 19;
/// The share of one core a paced scan takes: ten million rows, about five seconds of work,
/// take about a minute, well inside the census's ten-minute period.
pub const DUTY: f64 = 0.1;
/// Rows per page of a paced scan: a fraction of a millisecond of work, so a write never waits
/// long behind one, and few enough that the seek starting each page costs nothing.
pub const PAGE: usize = 1000;

thread_local! {
    /// On a scan's thread: false once its caller stopped waiting (a shutdown drops it), so a
    /// paced scan ends at its next page and lets the table close.
    static WAITED: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// Held by the caller of [`run`] while it waits.
struct Waiting(Arc<AtomicBool>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

fn still_waited() -> bool {
    WAITED.with(|w| {
        w.borrow()
            .as_ref()
            .is_none_or(|a| a.load(Ordering::Relaxed))
    })
}

/// [`FenceStore::scan_prefix`], paced: in pages of [`PAGE`] rows, each resuming after the last
/// key of the one before, with a pause after each that keeps the scan to [`DUTY`] of a core.
/// Each page is a scan of its own, so no iterator holds the table's memtables for the
/// minute(s) a large table takes. Rows written or removed meanwhile may or may not be
/// visited: the census is a gauge, and the fold reads each candidate again under its lock.
/// Blocking: call it from [`run`].
pub fn scan_paced(
    store: &dyn FenceStore,
    prefix: &str,
    visit: &mut dyn FnMut(&str, &FenceRow) -> bool,
) -> Result<(), StoreError> {
    let mut after: Option<String> = None;
    loop {
        let started = Instant::now();
        let (mut seen, mut stopped, mut last) = (0, false, None);
        store.scan_after(prefix, after.as_deref(), &mut |key, row| {
            if !visit(key, row) {
                stopped = true;
                return false;
            }
            seen += 1;
            if seen == PAGE {
                last = Some(key.to_string());
                return false;
            }
            true
        })?;
        match last {
            Some(key) if !stopped && still_waited() => after = Some(key),
            _ => return Ok(()),
        }
        std::thread::sleep(started.elapsed().mul_f64((1.0 - DUTY) / DUTY));
    }
}

/// Runs `scan` on a new thread named `name` at nice [`NICE`] and waits for its answer. The
/// thread enters the caller's runtime, as a shared table's scan blocks on it.
pub async fn run<T, F>(name: &str, scan: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (done, answer) = tokio::sync::oneshot::channel();
    let runtime = tokio::runtime::Handle::current();
    let waiting = Waiting(Arc::new(AtomicBool::new(true)));
    let waited = waiting.0.clone();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _runtime = runtime.enter();
            WAITED.with(|w| *w.borrow_mut() = Some(waited));
            lower_this_thread();
            let _ = done.send(scan());
        })
        .map_err(|e| StoreError::Io(format!("cannot start the {name} thread: {e}")))?;
    let answer = answer.await;
    drop(waiting);
    answer.map_err(|_| StoreError::Io(format!("the {name} thread stopped without an answer")))
}

/// Lowers the calling thread (not the process: on Linux the nice value is per thread). A
/// failure only leaves the scan at normal priority, as it was before.
fn lower_this_thread() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on the calling thread's id; no memory is shared.
    unsafe {
        let tid = libc::gettid() as libc::id_t;
        if libc::setpriority(libc::PRIO_PROCESS, tid, NICE) != 0 {
            tracing::debug!("cannot lower a scan thread's priority");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    fn nice_of_this_thread() -> i32 {
        // SAFETY: as in lower_this_thread; errno is cleared first, as -1 is a valid answer.
        unsafe {
            *libc::__errno_location() = 0;
            libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t)
        }
    }

    /// The scan runs at the lowest priority and the caller's thread keeps its own.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_scan_runs_at_nice_19_and_the_caller_is_untouched() {
        let before = nice_of_this_thread();
        let inside = run("test-scan", nice_of_this_thread).await.unwrap();
        assert_eq!(inside, NICE);
        assert_eq!(nice_of_this_thread(), before);
    }

    /// Across page boundaries every row is visited once, in order, and the visitor still
    /// stops the scan.
    #[tokio::test]
    async fn a_paced_scan_visits_every_row_once_across_pages() {
        use crate::fence::{memory::MemoryFenceStore, Durability};
        let store = MemoryFenceStore::default();
        let keys: Vec<String> = (0..2 * PAGE + 7)
            .map(|i| format!("object:b/{i:06}"))
            .collect();
        let rows = keys.iter().map(|k| (k.clone(), FenceRow::default()));
        let mut all: Vec<_> = rows.collect();
        all.push(("object:c/other".into(), FenceRow::default()));
        store.put(all, Durability::Synced).await.unwrap();
        let mut seen = Vec::new();
        scan_paced(&store, "object:b/", &mut |k, _| {
            seen.push(k.to_string());
            true
        })
        .unwrap();
        assert_eq!(seen, keys);
        let mut first = 0;
        scan_paced(&store, "object:b/", &mut |_, _| {
            first += 1;
            first < PAGE + 3
        })
        .unwrap();
        assert_eq!(first, PAGE + 3, "the visitor stops the scan");
    }

    /// A shutdown drops the caller's wait: the scan ends after its page, not the whole table.
    #[tokio::test]
    async fn a_paced_scan_ends_when_its_caller_stops_waiting() {
        use crate::fence::{memory::MemoryFenceStore, Durability};
        let store = Arc::new(MemoryFenceStore::default());
        let rows = (0..3 * PAGE).map(|i| (format!("object:b/{i:06}"), FenceRow::default()));
        store.put(rows.collect(), Durability::Synced).await.unwrap();
        let (go, go_wait) = std::sync::mpsc::channel::<()>();
        let (end, ended) = std::sync::mpsc::channel::<usize>();
        let wait = run("test-scan", move || {
            let mut seen = 0;
            scan_paced(&*store, "object:b/", &mut |_, _| {
                if seen == 0 {
                    go_wait.recv().unwrap();
                }
                seen += 1;
                true
            })
            .unwrap();
            end.send(seen).unwrap();
        });
        let mut wait = Box::pin(wait);
        assert!(
            futures::poll!(&mut wait).is_pending(),
            "the scan has started"
        );
        drop(wait);
        go.send(()).unwrap();
        assert_eq!(ended.recv().unwrap(), PAGE);
    }

    /// A scan that needs the runtime (a shared table's does) finds it.
    #[tokio::test]
    async fn a_scan_sees_the_runtime() {
        let found = run("test-scan", || {
            tokio::runtime::Handle::try_current().is_ok()
        })
        .await
        .unwrap();
        assert!(found);
    }
}
