//! Fence-table failures, counted in one place: [`Instrumented`] wraps the store that start-up
//! opens. A failing fence table stops every write (nothing is acknowledged without its
//! token recorded), so this is the first thing to alert on. Conflicts are not failures: on a
//! shared table they mean another instance wrote first, and the decision is taken again.

use crate::fence::{Durability, FenceRow, FenceStore, StoreError};
use async_trait::async_trait;
use std::sync::Arc;

pub struct Instrumented {
    inner: Arc<dyn FenceStore>,
}

impl Instrumented {
    pub fn wrap(inner: Arc<dyn FenceStore>) -> Arc<dyn FenceStore> {
        Arc::new(Instrumented { inner })
    }
}

fn count<T>(operation: &'static str, result: &Result<T, StoreError>) {
    if let Err(StoreError::Io(_) | StoreError::Corrupt(_)) = result {
        metrics::counter!(crate::metrics::FENCE_STORE_ERRORS, "operation" => operation)
            .increment(1);
    }
}

#[async_trait]
impl FenceStore for Instrumented {
    async fn get(&self, key: &str) -> Result<Option<FenceRow>, StoreError> {
        let result = self.inner.get(key).await;
        count("get", &result);
        result
    }

    async fn get_pair(
        &self,
        key: &str,
        with: &str,
    ) -> Result<(Option<FenceRow>, Option<FenceRow>), StoreError> {
        let result = self.inner.get_pair(key, with).await;
        count("get", &result);
        result
    }

    fn scan_prefix(
        &self,
        prefix: &str,
        visit: &mut dyn FnMut(&str, &FenceRow) -> bool,
    ) -> Result<(), StoreError> {
        let result = self.inner.scan_prefix(prefix, visit);
        count("scan", &result);
        result
    }

    fn scan_after(
        &self,
        prefix: &str,
        after: Option<&str>,
        visit: &mut dyn FnMut(&str, &FenceRow) -> bool,
    ) -> Result<(), StoreError> {
        let result = self.inner.scan_after(prefix, after, visit);
        count("scan", &result);
        result
    }

    async fn put(
        &self,
        rows: Vec<(String, FenceRow)>,
        durability: Durability,
    ) -> Result<i64, StoreError> {
        let result = self.inner.put(rows, durability).await;
        count("put", &result);
        result
    }

    async fn fold(
        &self,
        floor: Option<(String, FenceRow)>,
        gone: Vec<(String, i64)>,
    ) -> Result<i64, StoreError> {
        let result = self.inner.fold(floor, gone).await;
        count("fold", &result);
        result
    }

    fn shared(&self) -> bool {
        self.inner.shared()
    }

    fn records(&self) -> Option<&dyn crate::fence::Records> {
        self.inner.records()
    }

    fn usage(&self) -> Option<crate::fence::Usage> {
        self.inner.usage()
    }

    async fn members(&self) -> Vec<crate::fence::Member> {
        self.inner.members().await
    }
}
