//! An in-memory backend for unit tests of the gate. It keeps the same promises as a real
//! backend (invisible staging, conditional commit) and lets a test write behind the gate's back
//! ([`MemoryBackend::write_behind`]) or make the next commit fail ([`MemoryBackend::fail_next_commit`]).

use super::{
    Backend, BackendError, ByteStream, ListPage, ObjectInfo, ObjectMeta, ObjectPart, PartInfo,
    Staged, StagedBody,
};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use md5::{Digest, Md5};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Default)]
pub struct MemoryBackend {
    objects: Mutex<BTreeMap<(String, String), (ObjectInfo, Bytes)>>,
    staged: Mutex<HashMap<String, (ObjectInfo, Bytes)>>,
    next_version: AtomicU64,
    fail_next_commit: AtomicBool,
    /// The token of every committed write, in commit order.
    history: Mutex<Vec<Option<u64>>>,
}

impl MemoryBackend {
    pub fn new() -> Self {
        Self::default()
    }

    fn info(&self, key: &str, body: &[u8], meta: ObjectMeta) -> ObjectInfo {
        ObjectInfo {
            key: key.to_string(),
            size: body.len() as u64,
            etag: format!("\"{}\"", hex::encode(Md5::digest(body))),
            version: format!("m{}", self.next_version.fetch_add(1, Ordering::Relaxed)),
            last_modified_ms: 0,
            meta,
            parts: Vec::new(),
        }
    }

    /// Writes an object as a client going around fencegate would.
    pub fn write_behind(&self, bucket: &str, key: &str, body: &[u8]) {
        let info = self.info(key, body, ObjectMeta::default());
        self.objects.lock().insert(
            (bucket.into(), key.into()),
            (info, Bytes::copy_from_slice(body)),
        );
    }

    /// The object's bytes, if present.
    pub fn bytes(&self, bucket: &str, key: &str) -> Option<Bytes> {
        let objects = self.objects.lock();
        objects
            .get(&(bucket.to_string(), key.to_string()))
            .map(|(_, b)| b.clone())
    }

    /// Tokens of committed writes in the order they took effect.
    pub fn history(&self) -> Vec<Option<u64>> {
        self.history.lock().clone()
    }

    pub fn staged_count(&self) -> usize {
        self.staged.lock().len()
    }

    /// The next commit fails as if the backend were unreachable.
    pub fn fail_next_commit(&self) {
        self.fail_next_commit.store(true, Ordering::SeqCst);
    }

    fn current(&self, bucket: &str, key: &str) -> Option<String> {
        let objects = self.objects.lock();
        objects
            .get(&(bucket.to_string(), key.to_string()))
            .map(|(i, _)| i.version.clone())
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    async fn stage(
        &self,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        mut body: ByteStream,
    ) -> Result<Staged, BackendError> {
        let mut buf = BytesMut::new();
        while let Some(chunk) = body.next().await {
            buf.extend_from_slice(&chunk?);
        }
        let info = self.info(key, &buf, meta.clone());
        let handle = info.version.clone();
        let staged = Staged {
            body: StagedBody::Handle(handle.clone()),
            bucket: bucket.to_string(),
            key: key.to_string(),
            etag: info.etag.clone(),
            size: info.size,
            version: Some(info.version.clone()),
            meta,
        };
        self.staged.lock().insert(handle, (info, buf.freeze()));
        Ok(staged)
    }

    async fn commit(
        &self,
        staged: &Staged,
        expected: Option<&str>,
    ) -> Result<ObjectInfo, BackendError> {
        if self.fail_next_commit.swap(false, Ordering::SeqCst) {
            return Err(BackendError::Unreachable("injected fault".into()));
        }
        let found = self.current(&staged.bucket, &staged.key);
        if found.as_deref() != expected {
            return Err(BackendError::Conflict {
                expected: expected.map(str::to_string),
                found,
            });
        }
        let (info, body) = self
            .staged
            .lock()
            .remove(staged.body.handle()?)
            .expect("committed a body that was staged");
        let mut objects = self.objects.lock();
        self.history.lock().push(info.meta.token);
        objects.insert(
            (staged.bucket.clone(), staged.key.clone()),
            (info.clone(), body),
        );
        Ok(info)
    }

    async fn discard(&self, staged: Staged) {
        if let Ok(handle) = staged.body.handle() {
            self.staged.lock().remove(handle);
        }
    }

    async fn version(&self, bucket: &str, key: &str) -> Result<Option<String>, BackendError> {
        Ok(self.current(bucket, key))
    }

    async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectInfo>, BackendError> {
        let objects = self.objects.lock();
        Ok(objects
            .get(&(bucket.to_string(), key.to_string()))
            .map(|(i, _)| i.clone()))
    }

    async fn get(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        let objects = self.objects.lock();
        Ok(objects
            .get(&(bucket.to_string(), key.to_string()))
            .map(|(i, b)| {
                let body = b.clone();
                let stream: ByteStream = Box::pin(futures::stream::once(async move { Ok(body) }));
                (i.clone(), stream)
            }))
    }

    async fn delete(&self, bucket: &str, key: &str, expected: &str) -> Result<(), BackendError> {
        let found = self.current(bucket, key);
        if found.as_deref() != Some(expected) {
            return Err(BackendError::Conflict {
                expected: Some(expected.to_string()),
                found,
            });
        }
        self.objects
            .lock()
            .remove(&(bucket.to_string(), key.to_string()));
        Ok(())
    }

    async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<ListPage, BackendError> {
        let objects = self.objects.lock();
        let mut page = ListPage::default();
        let matching = objects
            .iter()
            .filter(|((b, k), _)| b == bucket && k.starts_with(prefix))
            .filter(|((_, k), _)| start_after.is_none_or(|s| k.as_str() > s));
        for (n, (_, (info, _))) in matching.enumerate() {
            if n == max {
                page.next_start_after = page.objects.last().map(|o| o.key.clone());
                break;
            }
            page.objects.push(info.clone());
        }
        Ok(page)
    }

    // What no test of the gate asks of it: a conditional store without a clock, whose calls
    // end when they return, reading whole objects and taking no multipart uploads.

    async fn commit_by(
        &self,
        staged: &Staged,
        expected: Option<&str>,
        _not_after: std::time::SystemTime,
    ) -> Result<ObjectInfo, BackendError> {
        self.commit(staged, expected).await
    }

    async fn delete_by(
        &self,
        bucket: &str,
        key: &str,
        expected: &str,
        _not_after: std::time::SystemTime,
    ) -> Result<(), BackendError> {
        self.delete(bucket, key, expected).await
    }

    fn conditional_commit(&self, _staged: &Staged) -> bool {
        true
    }

    fn in_flight_bound(&self) -> Option<std::time::Duration> {
        None
    }

    async fn clock_offset(&self) -> Option<Result<(i64, i64), String>> {
        None
    }

    async fn check_ready(&self, _bucket: &str) -> Result<(), BackendError> {
        Ok(())
    }

    async fn release(&self, staged: Staged) {
        self.discard(staged).await
    }

    async fn get_range(
        &self,
        bucket: &str,
        key: &str,
        start: u64,
        end: u64,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        super::range_of_whole(self, bucket, key, start, end).await
    }

    async fn get_part(
        &self,
        bucket: &str,
        key: &str,
        number: u32,
        body: bool,
    ) -> Result<Option<ObjectPart>, BackendError> {
        super::part_of_whole(self, bucket, key, number, body).await
    }

    async fn create_upload(
        &self,
        _bucket: &str,
        _key: &str,
        _meta: &ObjectMeta,
    ) -> Result<String, BackendError> {
        Err(BackendError::Unsupported("multipart uploads"))
    }

    async fn upload_part(
        &self,
        _bucket: &str,
        _key: &str,
        _handle: &str,
        _number: i32,
        _body: ByteStream,
        _size: Option<u64>,
    ) -> Result<PartInfo, BackendError> {
        Err(BackendError::Unsupported("multipart uploads"))
    }

    async fn assemble(
        &self,
        _bucket: &str,
        _key: &str,
        _handle: &str,
        _parts: &[PartInfo],
        _meta: ObjectMeta,
    ) -> Result<Staged, BackendError> {
        Err(BackendError::Unsupported("multipart uploads"))
    }

    async fn finish_upload(
        &self,
        _bucket: &str,
        _key: &str,
        _handle: &str,
    ) -> Result<(), BackendError> {
        Ok(())
    }
}
