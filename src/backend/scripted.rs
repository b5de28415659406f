//! The one scripted [`Backend`] double for tests: [`Scripted`] sends every call through a
//! [`Script`], whose hooks (one per operation) forward to the wrapped backend unless a test
//! overrides them: a commit that lands but answers with a timeout, a store that applies a
//! request late, a crash between two steps. A test writes only the hooks it scripts.
//!
//! [`Backend`] itself has no defaults, so this file (like the metrics wrapper) must forward
//! every operation, and a new one fails to compile here until it is forwarded.

use super::{
    Backend, BackendError, ByteStream, ListPage, ObjectInfo, ObjectMeta, ObjectPart, PartInfo,
    Staged,
};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// What a test changes of a backend's behaviour: each hook gets the wrapped backend.
// A hook takes the wrapped backend beside the operation's own arguments.
#[allow(clippy::too_many_arguments)]
#[async_trait]
pub trait Script: Send + Sync + 'static {
    async fn stage(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        body: ByteStream,
    ) -> Result<Staged, BackendError> {
        inner.stage(bucket, key, meta, body).await
    }

    async fn commit(
        &self,
        inner: &Arc<dyn Backend>,
        staged: &Staged,
        expected: Option<&str>,
    ) -> Result<ObjectInfo, BackendError> {
        inner.commit(staged, expected).await
    }

    async fn commit_by(
        &self,
        inner: &Arc<dyn Backend>,
        staged: &Staged,
        expected: Option<&str>,
        not_after: SystemTime,
    ) -> Result<ObjectInfo, BackendError> {
        inner.commit_by(staged, expected, not_after).await
    }

    async fn delete_by(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
        expected: &str,
        not_after: SystemTime,
    ) -> Result<(), BackendError> {
        inner.delete_by(bucket, key, expected, not_after).await
    }

    fn conditional_commit(&self, inner: &Arc<dyn Backend>, staged: &Staged) -> bool {
        inner.conditional_commit(staged)
    }

    fn in_flight_bound(&self, inner: &Arc<dyn Backend>) -> Option<Duration> {
        inner.in_flight_bound()
    }

    async fn clock_offset(&self, inner: &Arc<dyn Backend>) -> Option<Result<(i64, i64), String>> {
        inner.clock_offset().await
    }

    async fn check_ready(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
    ) -> Result<(), BackendError> {
        inner.check_ready(bucket).await
    }

    async fn discard(&self, inner: &Arc<dyn Backend>, staged: Staged) {
        inner.discard(staged).await
    }

    async fn release(&self, inner: &Arc<dyn Backend>, staged: Staged) {
        inner.release(staged).await
    }

    async fn version(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
    ) -> Result<Option<String>, BackendError> {
        inner.version(bucket, key).await
    }

    async fn head(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
    ) -> Result<Option<ObjectInfo>, BackendError> {
        inner.head(bucket, key).await
    }

    async fn get(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        inner.get(bucket, key).await
    }

    async fn delete(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
        expected: &str,
    ) -> Result<(), BackendError> {
        inner.delete(bucket, key, expected).await
    }

    async fn get_range(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
        start: u64,
        end: u64,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        inner.get_range(bucket, key, start, end).await
    }

    async fn get_part(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
        number: u32,
        body: bool,
    ) -> Result<Option<ObjectPart>, BackendError> {
        inner.get_part(bucket, key, number, body).await
    }

    async fn create_upload(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
    ) -> Result<String, BackendError> {
        inner.create_upload(bucket, key, meta).await
    }

    async fn upload_part(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
        handle: &str,
        number: i32,
        body: ByteStream,
        size: Option<u64>,
    ) -> Result<PartInfo, BackendError> {
        inner
            .upload_part(bucket, key, handle, number, body, size)
            .await
    }

    async fn assemble(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
        handle: &str,
        parts: &[PartInfo],
        meta: ObjectMeta,
    ) -> Result<Staged, BackendError> {
        inner.assemble(bucket, key, handle, parts, meta).await
    }

    async fn finish_upload(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
        handle: &str,
    ) -> Result<(), BackendError> {
        inner.finish_upload(bucket, key, handle).await
    }

    async fn list(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<ListPage, BackendError> {
        inner.list(bucket, prefix, start_after, max).await
    }
}

/// `wrapped`, with each call going through `script`. It derefs to the script, so a test reads
/// and sets the script's knobs through the backend it handed the gate.
pub struct Scripted<S> {
    pub wrapped: Arc<dyn Backend>,
    pub script: S,
}

impl<S: Script> Scripted<S> {
    pub fn new<B: Backend>(wrapped: Arc<B>, script: S) -> Scripted<S> {
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
impl<S: Script> Backend for Scripted<S> {
    async fn stage(
        &self,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        body: ByteStream,
    ) -> Result<Staged, BackendError> {
        self.script
            .stage(&self.wrapped, bucket, key, meta, body)
            .await
    }

    async fn commit(
        &self,
        staged: &Staged,
        expected: Option<&str>,
    ) -> Result<ObjectInfo, BackendError> {
        self.script.commit(&self.wrapped, staged, expected).await
    }

    async fn commit_by(
        &self,
        staged: &Staged,
        expected: Option<&str>,
        not_after: SystemTime,
    ) -> Result<ObjectInfo, BackendError> {
        self.script
            .commit_by(&self.wrapped, staged, expected, not_after)
            .await
    }

    async fn delete_by(
        &self,
        bucket: &str,
        key: &str,
        expected: &str,
        not_after: SystemTime,
    ) -> Result<(), BackendError> {
        self.script
            .delete_by(&self.wrapped, bucket, key, expected, not_after)
            .await
    }

    fn conditional_commit(&self, staged: &Staged) -> bool {
        self.script.conditional_commit(&self.wrapped, staged)
    }

    fn in_flight_bound(&self) -> Option<Duration> {
        self.script.in_flight_bound(&self.wrapped)
    }

    async fn clock_offset(&self) -> Option<Result<(i64, i64), String>> {
        self.script.clock_offset(&self.wrapped).await
    }

    async fn check_ready(&self, bucket: &str) -> Result<(), BackendError> {
        self.script.check_ready(&self.wrapped, bucket).await
    }

    async fn discard(&self, staged: Staged) {
        self.script.discard(&self.wrapped, staged).await
    }

    async fn release(&self, staged: Staged) {
        self.script.release(&self.wrapped, staged).await
    }

    async fn version(&self, bucket: &str, key: &str) -> Result<Option<String>, BackendError> {
        self.script.version(&self.wrapped, bucket, key).await
    }

    async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectInfo>, BackendError> {
        self.script.head(&self.wrapped, bucket, key).await
    }

    async fn get(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        self.script.get(&self.wrapped, bucket, key).await
    }

    async fn delete(&self, bucket: &str, key: &str, expected: &str) -> Result<(), BackendError> {
        self.script
            .delete(&self.wrapped, bucket, key, expected)
            .await
    }

    async fn get_range(
        &self,
        bucket: &str,
        key: &str,
        start: u64,
        end: u64,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        self.script
            .get_range(&self.wrapped, bucket, key, start, end)
            .await
    }

    async fn get_part(
        &self,
        bucket: &str,
        key: &str,
        number: u32,
        body: bool,
    ) -> Result<Option<ObjectPart>, BackendError> {
        self.script
            .get_part(&self.wrapped, bucket, key, number, body)
            .await
    }

    async fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
    ) -> Result<String, BackendError> {
        self.script
            .create_upload(&self.wrapped, bucket, key, meta)
            .await
    }

    async fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        handle: &str,
        number: i32,
        body: ByteStream,
        size: Option<u64>,
    ) -> Result<PartInfo, BackendError> {
        self.script
            .upload_part(&self.wrapped, bucket, key, handle, number, body, size)
            .await
    }

    async fn assemble(
        &self,
        bucket: &str,
        key: &str,
        handle: &str,
        parts: &[PartInfo],
        meta: ObjectMeta,
    ) -> Result<Staged, BackendError> {
        self.script
            .assemble(&self.wrapped, bucket, key, handle, parts, meta)
            .await
    }

    async fn finish_upload(
        &self,
        bucket: &str,
        key: &str,
        handle: &str,
    ) -> Result<(), BackendError> {
        self.script
            .finish_upload(&self.wrapped, bucket, key, handle)
            .await
    }

    async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<ListPage, BackendError> {
        self.script
            .list(&self.wrapped, bucket, prefix, start_after, max)
            .await
    }
}
