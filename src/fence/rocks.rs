//! The fence table on RocksDB. Synced puts go through one committer thread that merges every
//! put waiting in its queue into a single WriteBatch and a single WAL fsync (group commit), so
//! 64 concurrent writers share fsyncs instead of paying one each. A synced put that finds no
//! other synced put queued or being written makes its own fsync where it is: with no one to
//! share it with, the two thread hand-offs to the committer and back would be pure waiting.

use super::{Durability, FenceRow, FenceStore, StoreError};
use async_trait::async_trait;
use rocksdb::{BlockBasedOptions, Cache, Options, WriteBatch, WriteOptions, DB};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use tokio::sync::oneshot;

/// The most puts one group commit takes; bounds the latency of the first in the group.
const MAX_GROUP: usize = 4096;

struct Job {
    rows: Vec<(String, FenceRow)>,
    done: oneshot::Sender<Result<(), StoreError>>,
}

pub struct RocksFenceStore {
    db: Arc<DB>,
    /// `None` only while dropping.
    queue: Option<mpsc::Sender<Job>>,
    committer: Option<std::thread::JoinHandle<()>>,
    lane: Arc<Lane>,
    stats: Arc<GroupStats>,
}

/// Who is writing synced puts now. The committer takes `writing` for each group; a put takes
/// it on its own thread only when `busy` shows nothing queued or in a group, so a put made
/// alone never waits behind a group, and a group waits for at most one such put.
#[derive(Default)]
struct Lane {
    writing: Mutex<()>,
    /// Synced puts queued for the committer or in its group, not yet answered.
    busy: AtomicUsize,
}

/// Counters for the group committer: how many fsyncs served how many puts, and how many of
/// those puts were made alone on their caller's thread.
#[derive(Default, Debug)]
pub struct GroupStats {
    pub syncs: AtomicU64,
    pub puts: AtomicU64,
    pub alone: AtomicU64,
}

impl RocksFenceStore {
    /// Opens (or creates) the table at `path`.
    pub fn open(path: &Path) -> Result<RocksFenceStore, StoreError> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_max_open_files(256);
        // Every write reads its scope's row, and most scopes of a large table are cold: a bloom
        // filter answers "absent" without touching the disk, and a block cache keeps hot rows.
        // Index and filter blocks stay out of the cache, held by each table reader (about
        // 1.5 bytes per scope): a large table's full filter block does not fit a cache shard,
        // and re-reading it on every lookup made 10 million scopes 4x slower than 10 thousand.
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        table.set_block_cache(&Cache::new_lru_cache(64 * 1024 * 1024));
        opts.set_block_based_table_factory(&table);
        let db = DB::open(&opts, path).map_err(|e| {
            let hint = if e.to_string().contains("lock") {
                " (is another fencegate running on this data directory?)"
            } else {
                ""
            };
            StoreError::Io(format!(
                "cannot open the fence table at {}: {e}{hint}",
                path.display()
            ))
        })?;
        let db = Arc::new(db);
        let (tx, rx) = mpsc::channel::<Job>();
        let stats = Arc::new(GroupStats::default());
        let lane = Arc::new(Lane::default());
        let (thread_db, thread_lane, thread_stats) = (db.clone(), lane.clone(), stats.clone());
        let handle = std::thread::Builder::new()
            .name("fence-commit".into())
            .spawn(move || committer(thread_db, rx, thread_lane, thread_stats))
            .map_err(|e| StoreError::Io(format!("cannot start the committer thread: {e}")))?;
        Ok(RocksFenceStore {
            db,
            queue: Some(tx),
            committer: Some(handle),
            lane,
            stats,
        })
    }

    pub fn stats(&self) -> &GroupStats {
        &self.stats
    }

    /// Flushes and compacts the whole table (for benchmarks and maintenance).
    pub fn compact(&self) {
        let _ = self.db.flush();
        self.db.compact_range::<&[u8], &[u8]>(None, None);
    }

    /// Number of keys in the table (an estimate from RocksDB's properties).
    pub fn estimated_rows(&self) -> u64 {
        self.property("rocksdb.estimate-num-keys")
    }

    fn property(&self, name: &str) -> u64 {
        self.db.property_int_value(name).ok().flatten().unwrap_or(0)
    }
}

fn committer(db: Arc<DB>, rx: mpsc::Receiver<Job>, lane: Arc<Lane>, stats: Arc<GroupStats>) {
    // Ends when every sender (the store) is dropped.
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        // Everything that queued up during the previous fsync rides on this one.
        while jobs.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let result = {
            // A put made alone may be writing: this group follows it.
            let _writing = lane.writing.lock().unwrap_or_else(|e| e.into_inner());
            write_synced(
                &db,
                jobs.iter().flat_map(|job| &job.rows),
                jobs.len(),
                &stats,
            )
        };
        lane.busy.fetch_sub(jobs.len(), Ordering::AcqRel);
        for job in jobs {
            let _ = job.done.send(result.clone());
        }
    }
}

/// One WriteBatch of `rows`, written and fsynced in the WAL before it returns: the durability
/// point of every synced put, whether a group's or one made alone.
fn write_synced<'a>(
    db: &DB,
    rows: impl Iterator<Item = &'a (String, FenceRow)>,
    puts: usize,
    stats: &GroupStats,
) -> Result<(), StoreError> {
    let mut sync = WriteOptions::default();
    sync.set_sync(true);
    let mut batch = WriteBatch::default();
    for (key, row) in rows {
        batch.put(key.as_bytes(), row.encode());
    }
    let started = std::time::Instant::now();
    let result = db
        .write_opt(batch, &sync)
        .map_err(|e| StoreError::Io(e.to_string()));
    stats.syncs.fetch_add(1, Ordering::Relaxed);
    stats.puts.fetch_add(puts as u64, Ordering::Relaxed);
    crate::metrics::fence_sync(puts, started.elapsed(), crate::metrics::FENCE_GROUP_SIZE);
    if let Err(e) = &result {
        tracing::error!(error = %e, "fence table sync failed; the writes waiting on it are refused");
    }
    result
}

impl RocksFenceStore {
    /// A synced put made on the caller's thread, when no other synced put is queued or being
    /// written and the runtime has another worker to go on with while this one waits for the
    /// disk. `None`: the put goes to the committer.
    fn put_alone(&self, rows: &[(String, FenceRow)]) -> Option<Result<(), StoreError>> {
        // A multi-thread runtime may still have one worker (one CPU, TOKIO_WORKER_THREADS=1):
        // its fsync would stop every request, health checks too, until the disk answers.
        let another_worker = tokio::runtime::Handle::try_current().is_ok_and(|h| {
            h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
                && h.metrics().num_workers() > 1
        });
        if !another_worker || self.lane.busy.load(Ordering::Acquire) != 0 {
            return None;
        }
        let _writing = self.lane.writing.try_lock().ok()?;
        self.stats.alone.fetch_add(1, Ordering::Relaxed);
        // The worker's other tasks move to another thread while this one waits for the disk:
        // a RocksDB write made on a worker meanwhile (a lazy outcome row, a fold) queues
        // behind this fsync, and with this worker kept here a two-worker runtime was left with
        // none: no request, health checks too, was served until the disk answered.
        Some(tokio::task::block_in_place(|| {
            write_synced(&self.db, rows.iter(), 1, &self.stats)
        }))
    }
}

#[async_trait]
impl FenceStore for RocksFenceStore {
    async fn get(&self, key: &str) -> Result<Option<FenceRow>, StoreError> {
        match self.db.get_pinned(key.as_bytes()) {
            Ok(Some(bytes)) => FenceRow::decode(&bytes).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(StoreError::Io(e.to_string())),
        }
    }

    fn scan_after(
        &self,
        prefix: &str,
        after: Option<&str>,
        visit: &mut dyn FnMut(&str, &FenceRow) -> bool,
    ) -> Result<(), StoreError> {
        let start = match after {
            Some(a) if a > prefix => a,
            _ => prefix,
        };
        let mode = rocksdb::IteratorMode::From(start.as_bytes(), rocksdb::Direction::Forward);
        // A scan reads each block once, in key order (a whole-table census, a bucket's
        // tombstones, a listing page): keeping its blocks would evict the hot scopes' blocks
        // that point reads need.
        let mut read = rocksdb::ReadOptions::default();
        read.fill_cache(false);
        for item in self.db.iterator_opt(mode, read) {
            let (key, value) = item.map_err(|e| StoreError::Io(e.to_string()))?;
            if !key.starts_with(prefix.as_bytes()) {
                break;
            }
            if after.is_some_and(|a| key.as_ref() <= a.as_bytes()) {
                continue;
            }
            let key = String::from_utf8_lossy(&key);
            if !visit(&key, &FenceRow::decode(&value)?) {
                break;
            }
        }
        Ok(())
    }

    async fn put(
        &self,
        rows: Vec<(String, FenceRow)>,
        durability: Durability,
    ) -> Result<i64, StoreError> {
        match durability {
            Durability::Lazy => {
                let mut batch = WriteBatch::default();
                for (key, row) in &rows {
                    batch.put(key.as_bytes(), row.encode());
                }
                // Not synced: the next synced write (or a clean shutdown) makes it durable.
                self.db
                    .write(batch)
                    .map_err(|e| StoreError::Io(e.to_string()))?;
                Ok(0)
            }
            Durability::Synced => {
                if let Some(result) = self.put_alone(&rows) {
                    return result.map(|()| 0);
                }
                let (done, wait) = oneshot::channel();
                let queue = self
                    .queue
                    .as_ref()
                    .ok_or_else(|| StoreError::Io("the fence table is closing".into()))?;
                self.lane.busy.fetch_add(1, Ordering::AcqRel);
                if queue.send(Job { rows, done }).is_err() {
                    self.lane.busy.fetch_sub(1, Ordering::AcqRel);
                    return Err(StoreError::Io("the committer thread has stopped".into()));
                }
                wait.await
                    .map_err(|_| StoreError::Io("the committer thread has stopped".into()))??;
                Ok(0)
            }
        }
    }

    async fn fold(
        &self,
        floor: Option<(String, FenceRow)>,
        gone: Vec<(String, i64)>,
    ) -> Result<i64, StoreError> {
        // One batch, so the floor is never lost while the rows it stands for are gone; not
        // synced, as a crash that loses it leaves the tombstones where they were.
        let mut batch = WriteBatch::default();
        if let Some((key, row)) = &floor {
            batch.put(key.as_bytes(), row.encode());
        }
        for (key, _) in &gone {
            batch.delete(key.as_bytes());
        }
        self.db
            .write(batch)
            .map_err(|e| StoreError::Io(e.to_string()))?;
        Ok(0)
    }

    fn shared(&self) -> bool {
        false
    }

    fn records(&self) -> Option<&dyn super::Records> {
        None
    }

    fn usage(&self) -> Option<super::Usage> {
        // The directory holds only the table's own files: their sizes are what it takes.
        let bytes_on_disk = std::fs::read_dir(self.db.path())
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok()?.metadata().ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        Some(super::Usage {
            bytes_on_disk,
            pending_compaction_bytes: self.property("rocksdb.estimate-pending-compaction-bytes"),
        })
    }
}

impl Drop for RocksFenceStore {
    fn drop(&mut self) {
        // Stop the committer and wait for it, so the database is closed (and its lock file
        // released) when the store is gone; then make lazy rows durable.
        self.queue.take();
        if let Some(handle) = self.committer.take() {
            let _ = handle.join();
        }
        let _ = self.db.flush_wal(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(h: u64) -> FenceRow {
        FenceRow {
            highest: Some(h),
            ..FenceRow::default()
        }
    }

    /// A bucket's rows and nothing else: `object:b/` is not `object:bb/` nor `object:a/`.
    #[tokio::test]
    async fn a_prefix_scan_visits_only_its_rows_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let s = RocksFenceStore::open(dir.path()).unwrap();
        let rows = [
            "object:a/x",
            "object:b/k2",
            "object:b/k1",
            "object:bb/k",
            "policy:b",
        ];
        let put: Vec<_> = rows.iter().map(|k| (k.to_string(), row(1))).collect();
        s.put(put, Durability::Synced).await.unwrap();
        let mut seen = Vec::new();
        s.scan_prefix("object:b/", &mut |k, _| {
            seen.push(k.to_string());
            true
        })
        .unwrap();
        assert_eq!(seen, ["object:b/k1", "object:b/k2"]);
        let mut first = Vec::new();
        s.scan_prefix("object:", &mut |k, _| {
            first.push(k.to_string());
            false
        })
        .unwrap();
        assert_eq!(first, ["object:a/x"], "the visitor stops the scan");
    }

    /// A page resumes after the key it names, inside the prefix only, whatever `after` is.
    #[tokio::test]
    async fn a_scan_resumes_after_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let s = RocksFenceStore::open(dir.path()).unwrap();
        let rows = [
            "object:a/x",
            "object:b/1",
            "object:b/2",
            "object:b/3",
            "object:c/y",
        ];
        let put: Vec<_> = rows.iter().map(|k| (k.to_string(), row(1))).collect();
        s.put(put, Durability::Synced).await.unwrap();
        let scan = |after: Option<&str>| {
            let mut seen = Vec::new();
            s.scan_after("object:b/", after, &mut |k, _| {
                seen.push(k.to_string());
                true
            })
            .unwrap();
            seen
        };
        assert_eq!(scan(Some("object:b/1")), ["object:b/2", "object:b/3"]);
        assert_eq!(scan(Some("object:b/15")), ["object:b/2", "object:b/3"]);
        assert_eq!(
            scan(Some("object:a/x")),
            ["object:b/1", "object:b/2", "object:b/3"]
        );
        assert!(scan(Some("object:b/3")).is_empty());
        assert!(
            scan(Some("object:c/")).is_empty(),
            "after the prefix: nothing"
        );
    }

    #[tokio::test]
    async fn rows_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = RocksFenceStore::open(dir.path()).unwrap();
            s.put(vec![("object:b/k".into(), row(34))], Durability::Synced)
                .await
                .unwrap();
            assert_eq!(s.get("object:b/k").await.unwrap(), Some(row(34)));
        }
        let s = RocksFenceStore::open(dir.path()).unwrap();
        assert_eq!(s.get("object:b/k").await.unwrap(), Some(row(34)));
        assert_eq!(s.get("object:b/other").await.unwrap(), None);
    }

    #[tokio::test]
    async fn concurrent_synced_puts_share_fsyncs() {
        let dir = tempfile::tempdir().unwrap();
        let s = Arc::new(RocksFenceStore::open(dir.path()).unwrap());
        let mut tasks = Vec::new();
        for i in 0..64u64 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for j in 0..20u64 {
                    s.put(vec![(format!("object:b/{i}"), row(j))], Durability::Synced)
                        .await
                        .unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let puts = s.stats().puts.load(Ordering::Relaxed);
        let syncs = s.stats().syncs.load(Ordering::Relaxed);
        assert_eq!(puts, 64 * 20);
        assert!(
            syncs < puts / 2,
            "group commit should merge puts: {syncs} syncs for {puts} puts"
        );
        assert_eq!(s.get("object:b/63").await.unwrap(), Some(row(19)));
    }

    /// On the server's runtime, writers that meet in the table still share fsyncs: a put made
    /// alone never takes the group's place.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_synced_puts_share_fsyncs_on_a_multi_thread_runtime() {
        let dir = tempfile::tempdir().unwrap();
        let s = Arc::new(RocksFenceStore::open(dir.path()).unwrap());
        let mut tasks = Vec::new();
        for i in 0..64u64 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for j in 0..20u64 {
                    s.put(vec![(format!("object:b/{i}"), row(j))], Durability::Synced)
                        .await
                        .unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let puts = s.stats().puts.load(Ordering::Relaxed);
        let syncs = s.stats().syncs.load(Ordering::Relaxed);
        assert_eq!(puts, 64 * 20);
        assert!(
            syncs < puts / 2,
            "group commit should merge puts: {syncs} syncs for {puts} puts"
        );
        for i in 0..64u64 {
            assert_eq!(
                s.get(&format!("object:b/{i}")).await.unwrap(),
                Some(row(19))
            );
        }
        assert_eq!(s.lane.busy.load(Ordering::Acquire), 0, "every put answered");
    }

    /// One writer at a time: each synced put is made on its caller's thread, one fsync each,
    /// and is in the table when it returns, across a reopen.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_put_made_alone_skips_the_committer_and_is_durable_when_answered() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = RocksFenceStore::open(dir.path()).unwrap();
            for j in 1..=5u64 {
                s.put(vec![("object:b/k".into(), row(j))], Durability::Synced)
                    .await
                    .unwrap();
                assert_eq!(s.get("object:b/k").await.unwrap(), Some(row(j)));
            }
            assert_eq!(s.stats().alone.load(Ordering::Relaxed), 5);
            assert_eq!(s.stats().syncs.load(Ordering::Relaxed), 5);
        }
        let s = RocksFenceStore::open(dir.path()).unwrap();
        assert_eq!(s.get("object:b/k").await.unwrap(), Some(row(5)));
    }

    /// A put that finds the committer at work joins its queue rather than writing beside it,
    /// and one made alone holds the next group back only until its own fsync is done.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    // The lane's lock, held across the wait, stands for a write in progress.
    #[allow(clippy::await_holding_lock)]
    async fn a_put_never_goes_alone_while_others_are_queued() {
        let dir = tempfile::tempdir().unwrap();
        let s = RocksFenceStore::open(dir.path()).unwrap();
        s.lane.busy.fetch_add(1, Ordering::AcqRel);
        s.put(vec![("object:b/k".into(), row(1))], Durability::Synced)
            .await
            .unwrap();
        assert_eq!(
            s.stats().alone.load(Ordering::Relaxed),
            0,
            "queued behind others"
        );
        s.lane.busy.fetch_sub(1, Ordering::AcqRel);
        let s = Arc::new(s);
        let lane = s.lane.clone();
        let writing = lane.writing.lock().unwrap();
        let queued = {
            let s = s.clone();
            tokio::spawn(async move {
                s.put(vec![("object:b/k".into(), row(2))], Durability::Synced)
                    .await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(
            !queued.is_finished(),
            "the group waits for the write in progress"
        );
        drop(writing);
        queued.await.unwrap().unwrap();
        assert_eq!(s.stats().alone.load(Ordering::Relaxed), 0);
        assert_eq!(s.get("object:b/k").await.unwrap(), Some(row(2)));
    }

    /// A runtime with one worker has no other to go on while that one waits for the disk:
    /// a put made alone there would stop every request for the length of its fsync, and
    /// writers that meet could never share one. Every synced put goes to the committer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_single_worker_runtime_never_waits_for_the_disk_itself() {
        let dir = tempfile::tempdir().unwrap();
        let s = Arc::new(RocksFenceStore::open(dir.path()).unwrap());
        let mut tasks = Vec::new();
        for i in 0..16u64 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for j in 0..10u64 {
                    s.put(vec![(format!("object:b/{i}"), row(j))], Durability::Synced)
                        .await
                        .unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let puts = s.stats().puts.load(Ordering::Relaxed);
        let syncs = s.stats().syncs.load(Ordering::Relaxed);
        assert_eq!(
            s.stats().alone.load(Ordering::Relaxed),
            0,
            "a worker waited"
        );
        assert!(
            syncs < puts / 2,
            "group commit should merge puts: {syncs} syncs for {puts} puts"
        );
    }

    /// A synced put whose caller goes away once it is queued is still written and answered
    /// into the void: the lane counts it out, so the next lone put goes alone again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    // The lane's lock, held across the wait, stands for a write in progress.
    #[allow(clippy::await_holding_lock)]
    async fn puts_dropped_while_queued_leave_the_lane_idle() {
        let dir = tempfile::tempdir().unwrap();
        let s = Arc::new(RocksFenceStore::open(dir.path()).unwrap());
        // Held, so that every put queues for the committer and none goes alone.
        let writing = s.lane.writing.lock().unwrap();
        let mut tasks = Vec::new();
        for i in 0..32u64 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                s.put(vec![(format!("object:b/{i}"), row(i))], Durability::Synced)
                    .await
            }));
        }
        while s.lane.busy.load(Ordering::Acquire) < 32 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        for t in &tasks {
            t.abort();
        }
        drop(writing);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while s.lane.busy.load(Ordering::Acquire) != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "a dropped put is still counted"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        for i in 0..32u64 {
            assert_eq!(s.get(&format!("object:b/{i}")).await.unwrap(), Some(row(i)));
        }
        s.put(vec![("object:b/k".into(), row(1))], Durability::Synced)
            .await
            .unwrap();
        assert_eq!(s.stats().alone.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_second_open_is_refused_with_a_hint() {
        let dir = tempfile::tempdir().unwrap();
        let _first = RocksFenceStore::open(dir.path()).unwrap();
        let err = RocksFenceStore::open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("another fencegate"), "{err}");
    }
}
