//! An in-memory fence store for tests. It keeps what a crash would keep apart from what it
//! would lose, so tests can simulate power loss with [`MemoryFenceStore::lose_unsynced`].
//! [`MemoryFenceStore::new_shared`] makes one that behaves as etcd does for several gates sharing
//! it: rows carry revisions and a put is a compare-and-swap on them.

use super::{Durability, FenceRow, FenceStore, StoreError};
use async_trait::async_trait;
use parking_lot::Mutex;
use std::collections::HashMap;

#[derive(Default)]
pub struct MemoryFenceStore {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    live: HashMap<String, FenceRow>,
    /// The state a power loss would leave: everything up to the last synced put.
    durable: HashMap<String, FenceRow>,
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

    fn scan_prefix(
        &self,
        prefix: &str,
        visit: &mut dyn FnMut(&str, &FenceRow) -> bool,
    ) -> Result<(), StoreError> {
        let rows: std::collections::BTreeMap<String, FenceRow> = self
            .inner
            .lock()
            .live
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (k, v) in &rows {
            if !visit(k, v) {
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
        let mut inner = self.inner.lock();
        if inner.shared {
            if let Some((k, _)) = rows
                .iter()
                .find(|(k, v)| inner.revs.get(k).copied().unwrap_or(0) != v.rev)
            {
                return Err(StoreError::Conflict(k.clone()));
            }
            inner.revision += 1;
        }
        let revision = inner.revision;
        for (k, v) in rows {
            if inner.shared {
                inner.revs.insert(k.clone(), revision);
            }
            inner.live.insert(k, FenceRow { rev: 0, ..v });
        }
        if durability == Durability::Synced {
            // A WAL sync makes every earlier write durable too, not just this one.
            inner.durable = inner.live.clone();
        }
        Ok(revision)
    }

    fn shared(&self) -> bool {
        self.inner.lock().shared
    }
}
