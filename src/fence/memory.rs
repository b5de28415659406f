//! An in-memory fence store for tests. It keeps what a crash would keep apart from what it
//! would lose, so tests can simulate power loss with [`MemoryFenceStore::lose_unsynced`].
//! [`MemoryFenceStore::new_shared`] makes one that behaves as etcd does for several gates sharing
//! it: rows carry revisions and a put is a compare-and-swap on them.

use super::{Durability, FenceRow, FenceStore, StoreError};
use async_trait::async_trait;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};

#[derive(Default)]
pub struct MemoryFenceStore {
    inner: Mutex<Inner>,
    /// Shared mode: the records beside the table, as etcd keeps them.
    records: super::records::MemoryRecords,
}

#[derive(Default)]
struct Inner {
    /// Ordered, so that a scan pages through a range as the real stores do.
    live: BTreeMap<String, FenceRow>,
    /// The state a power loss would leave: everything up to the last synced put.
    durable: BTreeMap<String, FenceRow>,
    /// Shared mode: the store's revision, bumped by every put, and each row's last one.
    shared: bool,
    revision: i64,
    revs: HashMap<String, i64>,
}

impl MemoryFenceStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A table several gates share, as on etcd.
    pub fn new_shared() -> Self {
        let store = Self::default();
        store.inner.lock().shared = true;
        store
    }

    /// Forgets every put not yet covered by a synced put, as a power loss would.
    pub fn lose_unsynced(&self) {
        let mut inner = self.inner.lock();
        inner.live = inner.durable.clone();
    }
}

#[async_trait]
impl FenceStore for MemoryFenceStore {
    async fn get(&self, key: &str) -> Result<Option<FenceRow>, StoreError> {
        let inner = self.inner.lock();
        Ok(inner.live.get(key).map(|row| FenceRow {
            rev: inner.revs.get(key).copied().unwrap_or(0),
            ..row.clone()
        }))
    }

    fn scan_after(
        &self,
        prefix: &str,
        after: Option<&str>,
        visit: &mut dyn FnMut(&str, &FenceRow) -> bool,
    ) -> Result<(), StoreError> {
        use std::ops::Bound;
        // In batches, so that `visit` never runs under the lock (it may call the store) and a
        // visitor that stops early never copies the whole table.
        const BATCH: usize = 256;
        let mut from = match after {
            Some(a) if a >= prefix => Bound::Excluded(a.to_string()),
            _ => Bound::Included(prefix.to_string()),
        };
        loop {
            let batch: Vec<(String, FenceRow)> = self
                .inner
                .lock()
                .live
                .range((from.clone(), Bound::Unbounded))
                .take_while(|(k, _)| k.starts_with(prefix))
                .take(BATCH)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for (k, v) in &batch {
                if !visit(k, v) {
                    return Ok(());
                }
            }
            match batch.last() {
                Some((last, _)) if batch.len() == BATCH => from = Bound::Excluded(last.clone()),
                _ => return Ok(()),
            }
        }
    }

    async fn put(
        &self,
        rows: Vec<(String, FenceRow)>,
        durability: Durability,
    ) -> Result<i64, StoreError> {
        let mut inner = self.inner.lock();
        if inner.shared {
            let rev = |k: &str| inner.revs.get(k).copied().unwrap_or(0);
            if let Some((k, _)) = rows.iter().find(|(k, v)| {
                rev(k) != v.rev
                    || (v.rev == 0 && v.floor_guard.as_ref().is_some_and(|(f, r)| rev(f) != *r))
            }) {
                return Err(StoreError::Conflict(k.clone()));
            }
            inner.revision += 1;
        }
        let revision = inner.revision;
        for (k, v) in rows {
            if inner.shared {
                inner.revs.insert(k.clone(), revision);
            }
            inner.live.insert(
                k,
                FenceRow {
                    rev: 0,
                    floor_guard: None,
                    ..v
                },
            );
        }
        if durability == Durability::Synced {
            // A WAL sync makes every earlier write durable too, not just this one.
            inner.durable = inner.live.clone();
        }
        Ok(revision)
    }

    async fn fold(
        &self,
        floor: Option<(String, FenceRow)>,
        gone: Vec<(String, i64)>,
    ) -> Result<i64, StoreError> {
        let mut inner = self.inner.lock();
        if inner.shared {
            let rev = |k: &str| inner.revs.get(k).copied().unwrap_or(0);
            let checked = floor
                .iter()
                .map(|(k, v)| (k, v.rev))
                .chain(gone.iter().map(|(k, r)| (k, *r)));
            for (k, r) in checked {
                if rev(k) != r {
                    return Err(StoreError::Conflict(k.clone()));
                }
            }
            inner.revision += 1;
        }
        let revision = inner.revision;
        if let Some((k, v)) = floor {
            if inner.shared {
                inner.revs.insert(k.clone(), revision);
            }
            inner.live.insert(
                k,
                FenceRow {
                    rev: 0,
                    floor_guard: None,
                    ..v
                },
            );
        }
        for (k, _) in gone {
            inner.revs.remove(&k);
            inner.live.remove(&k);
        }
        Ok(revision)
    }

    fn shared(&self) -> bool {
        self.inner.lock().shared
    }

    fn records(&self) -> Option<&dyn super::Records> {
        self.shared()
            .then_some(&self.records as &dyn super::Records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages past its internal batch, resumes after a key, and stops when told.
    #[tokio::test]
    async fn a_scan_resumes_after_a_key_in_batches() {
        let s = MemoryFenceStore::new();
        let mut rows: Vec<(String, FenceRow)> = (0..600)
            .map(|i| (format!("object:b/{i:04}"), FenceRow::default()))
            .collect();
        rows.push(("object:bb/x".into(), FenceRow::default()));
        rows.push(("object:a/x".into(), FenceRow::default()));
        s.put(rows, Durability::Synced).await.unwrap();
        let scan = |after: Option<&str>, stop: usize| {
            let mut seen = Vec::new();
            s.scan_after("object:b/", after, &mut |k, _| {
                seen.push(k.to_string());
                seen.len() < stop
            })
            .unwrap();
            seen
        };
        let all = scan(None, usize::MAX);
        assert_eq!(all.len(), 600);
        assert_eq!(all[599], "object:b/0599");
        let rest = scan(Some("object:b/0299"), usize::MAX);
        assert_eq!(rest.len(), 300);
        assert_eq!(rest[0], "object:b/0300");
        assert_eq!(
            scan(Some("object:a/x"), 2),
            ["object:b/0000", "object:b/0001"]
        );
        assert!(scan(Some("object:b/0599"), usize::MAX).is_empty());
    }
}
