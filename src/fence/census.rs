//! Keeps the fence table's size gauges current: its bytes on disk and the space left under
//! the data directory every [`EVERY`], and its rows and tombstones, which only a full scan
//! counts exactly, every [`CENSUS_EVERY`] (a local table only: on etcd every instance would
//! read the whole shared table). RocksDB's own row estimate counts every overwrite until a
//! compaction, so a table of twenty busy rows read as hundreds.
//!
//! A fence table only grows (a scope's highest token is kept forever), so these are the
//! figures an operator plans disk for, and `docs/alerts.yaml` warns before the disk is full.

use super::FenceStore;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How often the cheap figures are read.
pub const EVERY: Duration = Duration::from_secs(15);
/// How often the rows are counted. A scan costs about a microsecond per row (ten seconds of
/// one core for ten million rows), on a thread of its own at the lowest priority
/// ([`super::background`]).
pub const CENSUS_EVERY: Duration = Duration::from_secs(600);

/// Watches `store` and the file system of `data_dir` until shutdown.
pub fn watch(store: Arc<dyn FenceStore>, data_dir: PathBuf, shutdown: &crate::shutdown::Shutdown) {
    let census_shutdown = shutdown.clone();
    shutdown.spawn_background(async move {
        let mut last_census: Option<tokio::time::Instant> = None;
        // A census runs beside this loop: at low priority it may take minutes on a busy
        // machine, and the disk figures the alerts read must not wait for it.
        let counting = Arc::new(std::sync::atomic::AtomicBool::new(false));
        loop {
            if let Some(usage) = store.usage() {
                crate::metrics::fence_table_usage(
                    usage.bytes_on_disk,
                    usage.pending_compaction_bytes,
                );
            }
            if let Some((free, size)) = free_space(&data_dir) {
                crate::metrics::data_dir_space(free, size);
            }
            if !store.shared()
                && last_census.is_none_or(|t| t.elapsed() >= CENSUS_EVERY)
                && !counting.swap(true, Ordering::AcqRel)
            {
                last_census = Some(tokio::time::Instant::now());
                let (store, counting) = (store.clone(), counting.clone());
                // Under the shutdown, which drops the wait: the scan then ends at its next page.
                census_shutdown.spawn_background(async move {
                    match super::background::run("fence-census", move || census(&*store)).await {
                        Ok(Ok(c)) => crate::metrics::fence_table_census(c.rows, c.tombstones),
                        Ok(Err(e)) | Err(e) => {
                            tracing::warn!(error = %e, "cannot count the fence table's rows")
                        }
                    }
                    counting.store(false, Ordering::Release);
                });
            }
            tokio::time::sleep(EVERY).await;
        }
    });
}

/// What one scan of the table counted.
#[derive(Debug, PartialEq, Eq)]
pub struct Census {
    pub rows: u64,
    /// The rows that record a deleted object (their highest token kept).
    pub tombstones: u64,
}

/// Counts the table's rows, each once however often it was written. Blocking, and paced to a
/// tenth of a core ([`super::background::scan_paced`]).
pub fn census(store: &dyn FenceStore) -> Result<Census, super::StoreError> {
    let mut c = Census {
        rows: 0,
        tombstones: 0,
    };
    super::background::scan_paced(store, "", &mut |_, row| {
        c.rows += 1;
        c.tombstones += u64::from(row.tombstone);
        true
    })?;
    Ok(c)
}

/// Bytes free for fencegate (not counting the root's reserve) and the file system's size.
fn free_space(dir: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `stat` a buffer of the right type.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    let block = stat.f_frsize as u64;
    Some((
        (stat.f_bavail as u64).saturating_mul(block),
        (stat.f_blocks as u64).saturating_mul(block),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence::{memory::MemoryFenceStore, Durability, FenceRow};

    #[tokio::test]
    async fn rows_are_counted_once_however_often_written() {
        let store = MemoryFenceStore::default();
        let row = |tombstone| FenceRow {
            highest: Some(3),
            tombstone,
            ..FenceRow::default()
        };
        store
            .put(
                vec![
                    ("object:b/gone".into(), row(true)),
                    ("object:b/kept".into(), row(false)),
                    ("object:b/gone-too".into(), row(true)),
                ],
                Durability::Synced,
            )
            .await
            .unwrap();
        // Each row written again: still three rows.
        store
            .put(
                vec![("object:b/kept".into(), row(false))],
                Durability::Synced,
            )
            .await
            .unwrap();
        assert_eq!(
            census(&store).unwrap(),
            Census {
                rows: 3,
                tombstones: 2
            }
        );
    }

    #[test]
    fn the_data_directory_has_room() {
        let dir = tempfile::tempdir().unwrap();
        let (free, size) = free_space(dir.path()).unwrap();
        assert!(size > 0 && free <= size, "{free} of {size}");
        assert!(free_space(&dir.path().join("absent")).is_none());
    }
}
