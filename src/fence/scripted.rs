//! The one scripted [`FenceStore`] double for tests: [`Scripted`] sends every call through a
//! [`Script`], whose hooks (one per operation) forward to the wrapped table unless a test
//! overrides them: a busy disk, power lost around a put, a process that died, two instances'
//! calls interleaved. A test writes only the hooks it scripts.
//!
//! [`FenceStore::shared`] has no default, so a wrapper that forgets it fails to compile
//! instead of taking a shared table for a local one.

use super::{Durability, FenceRow, FenceStore, StoreError};
use async_trait::async_trait;
use std::sync::Arc;

/// What a test changes of a fence table's behaviour: each hook gets the wrapped table.
#[async_trait]
pub trait Script: Send + Sync + 'static {
    async fn get(
        &self,
        inner: &Arc<dyn FenceStore>,
        key: &str,
    ) -> Result<Option<FenceRow>, StoreError> {
        inner.get(key).await
    }

    fn scan_after(
        &self,
        inner: &Arc<dyn FenceStore>,
        prefix: &str,
        after: Option<&str>,
        visit: &mut dyn FnMut(&str, &FenceRow) -> bool,
    ) -> Result<(), StoreError> {
        inner.scan_after(prefix, after, visit)
    }

    async fn put(
        &self,
        inner: &Arc<dyn FenceStore>,
        rows: Vec<(String, FenceRow)>,
        durability: Durability,
    ) -> Result<i64, StoreError> {
        inner.put(rows, durability).await
    }

    fn shared(&self, inner: &Arc<dyn FenceStore>) -> bool {
        inner.shared()
    }
}

/// A fence table whose calls go through `script`. Derefs to the script, so a test reads the
/// script's counters and switches through the double itself.
pub struct Scripted<S> {
    pub wrapped: Arc<dyn FenceStore>,
    pub script: S,
}

impl<S: Script> Scripted<S> {
    pub fn new<F: FenceStore>(wrapped: Arc<F>, script: S) -> Scripted<S> {
        Scripted { wrapped, script }
    }
}

impl<S> std::ops::Deref for Scripted<S> {
    type Target = S;

    fn deref(&self) -> &S {
        &self.script
    }
}

#[async_trait]
impl<S: Script> FenceStore for Scripted<S> {
    async fn get(&self, key: &str) -> Result<Option<FenceRow>, StoreError> {
        self.script.get(&self.wrapped, key).await
    }

    fn scan_after(
        &self,
        prefix: &str,
        after: Option<&str>,
        visit: &mut dyn FnMut(&str, &FenceRow) -> bool,
    ) -> Result<(), StoreError> {
        self.script.scan_after(&self.wrapped, prefix, after, visit)
    }

    async fn put(
        &self,
        rows: Vec<(String, FenceRow)>,
        durability: Durability,
    ) -> Result<i64, StoreError> {
        self.script.put(&self.wrapped, rows, durability).await
    }

    async fn fold(
        &self,
        floor: Option<(String, FenceRow)>,
        gone: Vec<(String, i64)>,
    ) -> Result<i64, StoreError> {
        self.wrapped.fold(floor, gone).await
    }

    fn shared(&self) -> bool {
        self.script.shared(&self.wrapped)
    }

    fn records(&self) -> Option<&dyn super::Records> {
        self.wrapped.records()
    }
}
