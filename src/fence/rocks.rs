//! The fence table on RocksDB. Synced puts go through one committer thread that merges every
//! put waiting in its queue into a single WriteBatch and a single WAL fsync (group commit), so
//! 64 concurrent writers share fsyncs instead of paying one each.

use super::{Durability, FenceRow, FenceStore, StoreError};
use async_trait::async_trait;
use rocksdb::{BlockBasedOptions, Cache, Options, WriteBatch, WriteOptions, DB};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
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
    stats: Arc<GroupStats>,
}

/// Counters for the group committer: how many fsyncs served how many puts.
#[derive(Default, Debug)]
pub struct GroupStats {
    pub syncs: AtomicU64,
    pub puts: AtomicU64,
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
        let (thread_db, thread_stats) = (db.clone(), stats.clone());
        let handle = std::thread::Builder::new()
            .name("fence-commit".into())
            .spawn(move || committer(thread_db, rx, thread_stats))
            .map_err(|e| StoreError::Io(format!("cannot start the committer thread: {e}")))?;
        Ok(RocksFenceStore {
            db,
            queue: Some(tx),
            committer: Some(handle),
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

fn committer(db: Arc<DB>, rx: mpsc::Receiver<Job>, stats: Arc<GroupStats>) {
    let mut sync = WriteOptions::default();
    sync.set_sync(true);
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
        let mut batch = WriteBatch::default();
        for job in &jobs {
            for (key, row) in &job.rows {
                batch.put(key.as_bytes(), row.encode());
            }
        }
        let started = std::time::Instant::now();
        let result = db
            .write_opt(batch, &sync)
            .map_err(|e| StoreError::Io(e.to_string()));
        stats.syncs.fetch_add(1, Ordering::Relaxed);
        stats.puts.fetch_add(jobs.len() as u64, Ordering::Relaxed);
        crate::metrics::fence_sync(
            jobs.len(),
            started.elapsed(),
            crate::metrics::FENCE_GROUP_SIZE,
        );
        if let Err(e) = &result {
            tracing::error!(error = %e, "fence table sync failed; the writes waiting on it are refused");
        }
        for job in jobs {
            let _ = job.done.send(result.clone());
        }
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
                let (done, wait) = oneshot::channel();
                self.queue
                    .as_ref()
                    .ok_or_else(|| StoreError::Io("the fence table is closing".into()))?
                    .send(Job { rows, done })
                    .map_err(|_| StoreError::Io("the committer thread has stopped".into()))?;
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

    #[test]
    fn a_second_open_is_refused_with_a_hint() {
        let dir = tempfile::tempdir().unwrap();
        let _first = RocksFenceStore::open(dir.path()).unwrap();
        let err = RocksFenceStore::open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("another fencegate"), "{err}");
    }
}
