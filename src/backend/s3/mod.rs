//! The `s3` backend: one fencegate bucket on a store bucket (plus an optional key prefix),
//! through aws-sdk-s3.
//!
//! Staging spools bodies up to the multipart threshold (in memory while small and the memory
//! budget allows, otherwise in an anonymous local file: [`spool`]); larger bodies stream into a
//! multipart upload, one spooled part at a time, that nobody can see until it is completed.
//! Every PutObject and UploadPart carries the body's Content-MD5, so the store itself refuses
//! bytes that differ from those fencegate read. The commit
//! is a PutObject or a CompleteMultipartUpload carrying `If-Match` (the ETag the gate read) or
//! `If-None-Match: *`, so a write around fencegate is never silently overwritten. A commit whose
//! outcome is unknown (timeout, broken connection) is read back, never re-sent.

/// The system metadata of a HeadObject or GetObject answer.
macro_rules! system_of {
    ($out:expr) => {
        [
            ("cache-control", $out.cache_control()),
            ("content-disposition", $out.content_disposition()),
            ("content-encoding", $out.content_encoding()),
            ("content-language", $out.content_language()),
            ("expires", $out.expires_string()),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_string(), v.filter(|v| !v.is_empty())?.to_string())))
        .collect()
    };
}

pub mod claim;
mod client;
mod commit;
mod direct;
mod errors;
mod metadata;
mod multipart;
mod parts;
pub mod probe;
mod probe_races;
mod read;
pub mod scratch;
mod signer;
mod staging;

pub use crate::backend::spool;

pub use client::{build as build_clients, S3Clients};
pub use probe_races::Race;

use metadata::*;
use staging::*;

use super::{
    Backend, BackendError, BodyError, ByteStream, ListPage, ObjectInfo, ObjectMeta, ObjectPart,
    PartInfo, Staged, StagedBody,
};
use async_trait::async_trait;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use bytes::Bytes;
use errors::{classify, S3Failure};
use md5::{Digest, Md5};
use std::collections::HashMap;

pub use super::TOKEN_META;

pub struct S3Backend {
    clients: S3Clients,
    bucket: String,
    prefix: String,
    part_size: usize,
    /// Set by the probe: whether DeleteObject honours If-Match. Without it, a delete checks the
    /// ETag (under the scope's lock) and then deletes.
    conditional_delete: std::sync::atomic::AtomicBool,
    /// Set by the probe: whether PutObject, and CompleteMultipartUpload, honour the conditions.
    conditional_puts: std::sync::atomic::AtomicBool,
    conditional_completes: std::sync::atomic::AtomicBool,
    /// Set by the probe: whether the store's ETag for a PutObject or UploadPart is the MD5 of
    /// the bytes it kept (not so on stores that encrypt with SSE-KMS). Where it is, every such
    /// answer is compared with the MD5 of what fencegate sent.
    etags_are_md5: std::sync::atomic::AtomicBool,
    /// How long a request whose answer was lost may still be applied by the store.
    commit_deadline: std::time::Duration,
    /// Where bodies wait between the client and the store.
    spooler: std::sync::Arc<spool::Spooler>,
}

impl S3Backend {
    pub fn new(clients: S3Clients, bucket: &str, prefix: &str, part_size: u64) -> S3Backend {
        crate::metrics::register_store_integrity();
        S3Backend {
            clients,
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            part_size: part_size as usize,
            conditional_delete: std::sync::atomic::AtomicBool::new(true),
            conditional_puts: std::sync::atomic::AtomicBool::new(true),
            conditional_completes: std::sync::atomic::AtomicBool::new(true),
            etags_are_md5: std::sync::atomic::AtomicBool::new(false),
            commit_deadline: std::time::Duration::from_secs(900),
            spooler: spool::Spooler::in_temp_dir(),
        }
    }

    /// Spill files go under `dir` (fencegate serves with `<data_dir>/spool`).
    pub fn with_spooler(mut self, spooler: std::sync::Arc<spool::Spooler>) -> S3Backend {
        self.spooler = spooler;
        self
    }

    pub fn with_commit_deadline(mut self, deadline: std::time::Duration) -> S3Backend {
        self.commit_deadline = deadline;
        self
    }

    /// Records what the probe proved about PutObject and CompleteMultipartUpload.
    pub fn set_conditional_commits(&self, puts: bool, completes: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        self.conditional_puts.store(puts, Relaxed);
        self.conditional_completes.store(completes, Relaxed);
    }

    /// Whether the store honours the condition of `staged`'s commit (as the probe found it).
    fn conditional_commit_sent(&self, staged: &Staged) -> bool {
        let flag = match staged.body {
            StagedBody::Multipart { .. } => &self.conditional_completes,
            _ => &self.conditional_puts,
        };
        flag.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn set_etags_are_md5(&self, md5: bool) {
        self.etags_are_md5
            .store(md5, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn set_conditional_delete(&self, honoured: bool) {
        self.conditional_delete
            .store(honoured, std::sync::atomic::Ordering::Relaxed);
    }

    /// The store's bucket this backend writes into.
    pub fn store_bucket(&self) -> &str {
        &self.bucket
    }

    /// The prefix of every key this backend writes.
    pub fn store_prefix(&self) -> &str {
        &self.prefix
    }

    /// `store-bucket/prefix`, for messages.
    pub fn location(&self) -> String {
        format!("{}/{}", self.bucket, self.prefix)
    }

    fn store_key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// Checks that the store bucket exists and answers.
    pub async fn check_bucket(&self) -> Result<(), BackendError> {
        match self
            .clients
            .reads
            .head_bucket()
            .bucket(&self.bucket)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(match classify("HeadBucket", e) {
                S3Failure::NotFound => BackendError::Failing(format!(
                    "the store has no bucket {:?}; create it, or set backend_bucket",
                    self.bucket
                )),
                other => other.into_backend("HeadBucket"),
            }),
        }
    }
}

#[async_trait]
impl Backend for S3Backend {
    /// HeadBucket on the store bucket: the store answers, and our credentials still reach it.
    async fn check_ready(&self, _bucket: &str) -> Result<(), BackendError> {
        self.check_bucket().await
    }

    async fn stage(
        &self,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        mut body: ByteStream,
    ) -> Result<Staged, BackendError> {
        let mut body = PartReader {
            body: &mut body,
            held: None,
        };
        let mut size = 0u64;
        let first = self.spool_part(&mut body, &mut size, None).await?;
        let (body, etag, version) = if first.ended {
            // Up to the part size: one PutObject.
            let etag = format!("\"{}\"", hex::encode(first.md5.finalize()));
            (StagedBody::Spooled(first.body), etag.clone(), etag)
        } else {
            // Larger: the rest streams into a multipart upload. Its client wrote it whole, so
            // it is answered the body's MD5; the store's multipart ETag is its version.
            let (upload_id, parts, md5_of_parts, whole) = self
                .stage_multipart(key, &meta, first, &mut body, &mut size)
                .await?;
            let version = format!(
                "\"{}-{}\"",
                hex::encode(md5_of_parts.finalize()),
                parts.len()
            );
            let etag = format!("\"{}\"", hex::encode(whole.finalize()));
            (StagedBody::Multipart { upload_id, parts }, etag, version)
        };
        Ok(Staged {
            body,
            bucket: bucket.to_string(),
            key: key.to_string(),
            version: Some(version),
            etag,
            size,
            meta,
        })
    }

    async fn commit(
        &self,
        staged: &Staged,
        expected: Option<&str>,
    ) -> Result<ObjectInfo, BackendError> {
        self.commit_inner(staged, expected, None).await
    }

    async fn commit_by(
        &self,
        staged: &Staged,
        expected: Option<&str>,
        not_after: std::time::SystemTime,
    ) -> Result<ObjectInfo, BackendError> {
        self.commit_inner(staged, expected, Some(not_after)).await
    }

    async fn delete_by(
        &self,
        bucket: &str,
        key: &str,
        expected: &str,
        not_after: std::time::SystemTime,
    ) -> Result<(), BackendError> {
        self.delete_inner(bucket, key, expected, Some(not_after))
            .await
    }

    fn in_flight_bound(&self) -> Option<std::time::Duration> {
        Some(self.commit_deadline)
    }

    async fn clock_offset(&self) -> Option<Result<(i64, i64), String>> {
        Some(self.clients.signer.clock_offset().await)
    }

    fn conditional_commit(&self, staged: &Staged) -> bool {
        self.conditional_commit_sent(staged)
    }

    async fn discard(&self, staged: Staged) {
        if let StagedBody::Multipart { upload_id, .. } = &staged.body {
            self.abort(&staged.key, upload_id).await;
        }
    }

    async fn release(&self, staged: Staged) {
        // The assembly is the store's own upload, which the completion's retry completes.
        if !matches!(staged.body, StagedBody::Multipart { .. }) {
            self.discard(staged).await
        }
    }

    async fn version(&self, bucket: &str, key: &str) -> Result<Option<String>, BackendError> {
        Ok(self.head(bucket, key).await?.map(|i| i.version))
    }

    async fn head(&self, _bucket: &str, key: &str) -> Result<Option<ObjectInfo>, BackendError> {
        self.head_now(key)
            .await
            .map_err(|f| f.into_backend("HeadObject"))
    }

    async fn get(
        &self,
        _bucket: &str,
        key: &str,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        self.get_object(key, None).await
    }

    async fn get_range(
        &self,
        _bucket: &str,
        key: &str,
        start: u64,
        end: u64,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        self.get_object(key, Some((start, end))).await
    }

    async fn get_part(
        &self,
        _bucket: &str,
        key: &str,
        number: u32,
        body: bool,
    ) -> Result<Option<ObjectPart>, BackendError> {
        self.read_part(key, number, body).await
    }

    async fn create_upload(
        &self,
        _bucket: &str,
        key: &str,
        meta: &ObjectMeta,
    ) -> Result<String, BackendError> {
        self.start_multipart(key, meta, false).await
    }

    async fn upload_part(
        &self,
        _bucket: &str,
        key: &str,
        handle: &str,
        number: i32,
        body: ByteStream,
        size: Option<u64>,
    ) -> Result<PartInfo, BackendError> {
        self.put_client_part(key, handle, number, body, size).await
    }

    async fn assemble(
        &self,
        bucket: &str,
        key: &str,
        handle: &str,
        parts: &[PartInfo],
        meta: ObjectMeta,
    ) -> Result<Staged, BackendError> {
        Ok(self.assemble_parts(bucket, key, handle, parts, meta))
    }

    async fn finish_upload(
        &self,
        _bucket: &str,
        key: &str,
        handle: &str,
    ) -> Result<(), BackendError> {
        self.drop_upload(key, handle).await
    }

    async fn delete(&self, bucket: &str, key: &str, expected: &str) -> Result<(), BackendError> {
        self.delete_inner(bucket, key, expected, None).await
    }

    async fn list(
        &self,
        _bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<ListPage, BackendError> {
        let out = self
            .clients
            .reads
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(self.store_key(prefix))
            .set_start_after(start_after.map(|s| self.store_key(s)))
            .max_keys(max as i32)
            .send()
            .await
            .map_err(|e| classify("ListObjectsV2", e).into_backend("ListObjectsV2"))?;
        let mut page = ListPage::default();
        for o in out.contents() {
            let Some(key) = o.key().and_then(|k| k.strip_prefix(&self.prefix)) else {
                continue;
            };
            // A listing does not carry metadata; HEAD the object for its token.
            let meta = ObjectMeta::default();
            page.objects.push(Self::info(
                key,
                o.e_tag(),
                o.size(),
                o.last_modified(),
                meta,
            ));
        }
        if out.is_truncated() == Some(true) {
            page.next_start_after = page.objects.last().map(|o| o.key.clone());
        }
        Ok(page)
    }
}
