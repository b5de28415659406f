//! An in-memory fence store for tests. It keeps what a crash would keep apart from what it
//! would lose, so tests can simulate power loss with [`MemoryFenceStore::lose_unsynced`].

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
}

impl MemoryFenceStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets every put not yet covered by a synced put, as a power loss would.
    pub fn lose_unsynced(&self) {
        let mut inner = self.inner.lock();
        inner.live = inner.durable.clone();
    }
}

#[async_trait]
impl FenceStore for MemoryFenceStore {
    fn get(&self, key: &str) -> Result<Option<FenceRow>, StoreError> {
        Ok(self.inner.lock().live.get(key).cloned())
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
    ) -> Result<(), StoreError> {
        let mut inner = self.inner.lock();
        for (k, v) in rows {
            inner.live.insert(k, v);
        }
        if durability == Durability::Synced {
            // A WAL sync makes every earlier write durable too, not just this one.
            inner.durable = inner.live.clone();
        }
        Ok(())
    }
}
