//! Directory fsyncs shared between concurrent commits, as the fence table shares WAL syncs.
//!
//! A rename (or unlink) is durable once its directory has been fsynced *after* it. Commits into
//! one directory therefore take a ticket after their rename; one of them (the leader) fsyncs
//! the directory for every ticket taken before its fsync began, and the others wait for that
//! fsync instead of issuing their own. Sixty-four writers into one bucket share a handful of
//! directory fsyncs instead of paying sixty-four.
//!
//! A failed fsync fails the directory for good (until fencegate restarts): every change not yet
//! made durable fails, and so does every later one. Linux reports a writeback error once, so
//! no later fsync, successful or not, can tell which changes it lost: not those the failed one
//! covered, nor those made while it ran.
//! This is what PostgreSQL does after a failed fsync; the operator checks the disk and restarts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

/// The directories being fsynced now, each with its group of waiting commits, and the
/// directories whose fsync has failed.
#[derive(Default)]
pub struct DirSyncs {
    groups: Mutex<Groups>,
}

#[derive(Default)]
struct Groups {
    active: HashMap<PathBuf, Arc<Group>>,
    /// Directories whose fsync failed, with the error: every later change in them fails.
    failed: HashMap<PathBuf, Failure>,
}

type Failure = (std::io::ErrorKind, String);

/// Why a directory was not fsynced: the fsync failed (it may have consumed a writeback error,
/// so the directory fails for good), or the directory could not be opened to fsync it (too
/// many open files, say: no fsync ran, so nothing was lost, and the next one may succeed).
#[derive(Debug)]
pub enum SyncFailure {
    Fsync(std::io::Error),
    NotOpened(std::io::Error),
}

impl From<std::io::Error> for SyncFailure {
    fn from(e: std::io::Error) -> SyncFailure {
        SyncFailure::Fsync(e)
    }
}

#[derive(Default)]
struct Group {
    state: Mutex<State>,
    done: Condvar,
}

#[derive(Default)]
struct State {
    /// Tickets handed out: one per change waiting to be made durable.
    taken: u64,
    /// Every ticket up to this one is durable.
    synced: u64,
    /// A leader is fsyncing now.
    running: bool,
    /// Commits inside [`DirSyncs::sync`] for this directory (the entry goes with the last).
    users: usize,
    /// An fsync of this directory failed: every ticket not synced before it fails.
    failed: Option<Failure>,
}

fn error_of((kind, msg): &Failure) -> std::io::Error {
    std::io::Error::new(
        *kind,
        format!("{msg}; an fsync of this directory failed, so fencegate cannot tell which changes in it are durable: check the disk and restart fencegate"),
    )
}

/// Recovers a poisoned lock: the state holds only counters, each updated in one step.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl DirSyncs {
    /// Fails if an fsync of `dir` has failed: call it before changing `dir`.
    pub fn check(&self, dir: &Path) -> std::io::Result<()> {
        match lock(&self.groups).failed.get(dir) {
            Some(failure) => Err(error_of(failure)),
            None => Ok(()),
        }
    }

    /// A directory whose fsync has failed, if any, with the error (for readiness: every change
    /// in it fails until restart).
    pub fn any_failure(&self) -> Option<(PathBuf, String)> {
        lock(&self.groups)
            .failed
            .iter()
            .next()
            .map(|(dir, (_, msg))| (dir.clone(), msg.clone()))
    }

    /// Returns once `dir` has been fsynced after this call began (blocking; call it from a
    /// blocking thread, after the change it must make durable).
    pub fn sync(
        &self,
        dir: &Path,
        fsync: impl Fn(&Path) -> Result<(), SyncFailure>,
    ) -> std::io::Result<()> {
        let group = {
            let mut groups = lock(&self.groups);
            if let Some(failure) = groups.failed.get(dir) {
                return Err(error_of(failure));
            }
            let group = groups.active.entry(dir.to_path_buf()).or_default().clone();
            lock(&group.state).users += 1;
            group
        };
        let result = group.sync(dir, fsync);
        let mut groups = lock(&self.groups);
        let mut state = lock(&group.state);
        state.users -= 1;
        if state.users == 0 {
            groups.active.remove(dir);
        }
        if let Some(failure) = state.failed.clone() {
            // Recorded before the group can go: a later caller finds it even with no group.
            groups.failed.insert(dir.to_path_buf(), failure);
        }
        result
    }
}

impl Group {
    fn sync(
        &self,
        dir: &Path,
        fsync: impl Fn(&Path) -> Result<(), SyncFailure>,
    ) -> std::io::Result<()> {
        let mut state = lock(&self.state);
        state.taken += 1;
        let ticket = state.taken;
        loop {
            // Durable before any failure: an fsync that succeeded covered it.
            if state.synced >= ticket {
                return Ok(());
            }
            if let Some(failure) = &state.failed {
                return Err(error_of(failure));
            }
            if !state.running {
                // Lead: this fsync begins after every ticket taken so far, so it covers them.
                state.running = true;
                let covers = state.taken;
                drop(state);
                let result = fsync(dir);
                state = lock(&self.state);
                state.running = false;
                match result {
                    Ok(()) => state.synced = state.synced.max(covers),
                    // Only this change fails, passing; a waiting one leads the next try.
                    Err(SyncFailure::NotOpened(e)) => {
                        tracing::warn!(dir = %dir.display(), error = %e, "a directory could not be opened to fsync it");
                        self.done.notify_all();
                        return Err(e);
                    }
                    Err(SyncFailure::Fsync(e)) => {
                        tracing::error!(dir = %dir.display(), error = %e, "a directory fsync failed; writes and deletes in this directory fail until fencegate restarts");
                        state.failed = Some((e.kind(), e.to_string()));
                    }
                }
                self.done.notify_all();
                continue;
            }
            state = self.done.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn concurrent_syncs_share_fsyncs_and_each_waits_for_one_that_began_after_it() {
        let syncs = Arc::new(DirSyncs::default());
        let fsyncs = Arc::new(AtomicUsize::new(0));
        // Each fsync records the highest "change" it covers; a caller's change must be covered.
        let made = Arc::new(AtomicUsize::new(0));
        let covered = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..32)
            .map(|_| {
                let (syncs, fsyncs, made, covered) =
                    (syncs.clone(), fsyncs.clone(), made.clone(), covered.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let mine = made.fetch_add(1, Ordering::SeqCst) + 1;
                        syncs
                            .sync(Path::new("/d"), |_| {
                                let upto = made.load(Ordering::SeqCst);
                                std::thread::sleep(std::time::Duration::from_micros(200));
                                fsyncs.fetch_add(1, Ordering::SeqCst);
                                covered.fetch_max(upto, Ordering::SeqCst);
                                Ok(())
                            })
                            .unwrap();
                        assert!(
                            covered.load(Ordering::SeqCst) >= mine,
                            "returned before an fsync covered change {mine}"
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = fsyncs.load(Ordering::SeqCst);
        assert!(n < 32 * 50 / 2, "{n} fsyncs for 1600 changes: not shared");
        assert!(
            lock(&syncs.groups).active.is_empty(),
            "groups outlive their users"
        );
    }

    #[test]
    fn a_failed_fsync_fails_the_directory_until_restart_and_no_other() {
        let syncs = DirSyncs::default();
        let err = syncs.sync(Path::new("/d"), |_| {
            Err(std::io::Error::other("disk on fire").into())
        });
        assert!(err.is_err());
        // No later fsync can tell what the failed one lost: the directory stays failed, without
        // another fsync, even with no group left.
        assert!(lock(&syncs.groups).active.is_empty());
        let calls = AtomicUsize::new(0);
        let again = syncs.sync(Path::new("/d"), |_| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        let message = again.unwrap_err().to_string();
        assert!(
            message.contains("disk on fire") && message.contains("restart"),
            "{message}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        assert!(
            syncs.check(Path::new("/d")).is_err(),
            "checked before a change"
        );
        // Another directory is not affected.
        syncs.check(Path::new("/e")).unwrap();
        syncs.sync(Path::new("/e"), |_| Ok(())).unwrap();
    }

    #[test]
    fn a_directory_that_cannot_be_opened_fails_that_change_only() {
        let syncs = DirSyncs::default();
        let err = syncs.sync(Path::new("/d"), |_| {
            Err(SyncFailure::NotOpened(std::io::Error::from_raw_os_error(
                24,
            )))
        });
        assert!(err.is_err(), "the change is not acknowledged as durable");
        syncs.check(Path::new("/d")).unwrap();
        assert!(syncs.any_failure().is_none(), "readiness is not failed");
        syncs.sync(Path::new("/d"), |_| Ok(())).unwrap();
    }

    #[test]
    fn a_failed_fsync_fails_every_change_it_covered_and_every_later_one() {
        // Otherwise the others would wake, fsync again (Linux has reported the error already,
        // so it succeeds) and acknowledge changes that were never durable.
        let syncs = Arc::new(DirSyncs::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let fsync = {
            let calls = calls.clone();
            move |_: &Path| match calls.fetch_add(1, Ordering::SeqCst) {
                // The first leader's fsync is slow: the others queue up behind it.
                0 => {
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    Ok(())
                }
                // The fsync that covers the queued ones fails.
                1 => Err(std::io::Error::other("EIO on the directory").into()),
                _ => Ok(()),
            }
        };
        let first = {
            let (syncs, fsync) = (syncs.clone(), fsync.clone());
            std::thread::spawn(move || syncs.sync(Path::new("/d"), fsync))
        };
        std::thread::sleep(std::time::Duration::from_millis(30));
        let queued: Vec<_> = (0..6)
            .map(|_| {
                let (syncs, fsync) = (syncs.clone(), fsync.clone());
                std::thread::spawn(move || syncs.sync(Path::new("/d"), fsync))
            })
            .collect();
        assert!(first.join().unwrap().is_ok(), "its fsync succeeded");
        for q in queued {
            let result = q.join().unwrap();
            assert!(
                result.is_err(),
                "a change the failed fsync was to make durable was acknowledged"
            );
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "no fsync after the failure"
        );
        // Nor a change made after it.
        assert!(syncs.sync(Path::new("/d"), fsync).is_err());
        assert!(lock(&syncs.groups).active.is_empty());
    }
}
