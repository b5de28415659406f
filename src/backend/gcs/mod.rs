//! The `gcs` backend: one fencegate bucket on a Google Cloud Storage bucket (plus an optional
//! key prefix), through GCS's XML API (objects) and JSON API (listings, which carry each
//! object's metadata), with a service account's key (`client.rs`).
//!
//! The version the gate conditions on is the object's generation. Bodies up to the block size
//! are spooled and committed with one PUT carrying their Content-MD5 (the service refuses other
//! bytes) and `x-goog-if-generation-match` (the generation the gate read, or 0: absent).
//! Larger bodies, and multipart uploads, travel as staging objects of one block each under
//! `<prefix>.fencegate-probe/`, which nobody else writes; the commit composes them, each pinned
//! to its generation, onto the object with the same condition (`pieces.rs`). Every commit and
//! conditional delete goes by a V4 signed URL that expires at its deadline, so a request held
//! in flight cannot land after the gate stopped waiting for it. A commit whose answer was lost
//! is read back by the commit id it stored, never re-sent.

mod claim;
mod client;
mod commit;
mod errors;
mod listing;
mod meta;
mod pieces;
pub mod probe;
mod sweep;

pub use client::GcsClient;

use super::spool::{Spooled, Spooler};
use super::{
    Backend, BackendError, BodyError, ByteStream, ListPage, ObjectInfo, ObjectMeta, ObjectPart,
    PartInfo, Staged, StagedBody,
};
use crate::backend::strict::random_id;
use async_trait::async_trait;
use client::Request;
use errors::GcsFailure;
use futures::StreamExt;
use reqwest::Method;
use std::sync::Arc;
use std::time::Duration;

/// What the commit of a staged body sends.
#[derive(Debug)]
pub struct Staging {
    pub from: Source,
    /// Stored with the object: shows whether a commit whose answer was lost landed.
    pub commit: String,
    /// A completed upload's parts, (number, size), stored with the object; empty otherwise.
    pub parts: Vec<(u32, u64)>,
}

#[derive(Debug)]
pub enum Source {
    /// Up to the block size: sent in one PUT.
    Spooled(Spooled),
    /// Staging objects the commit composes, in order, each at the generation it was written
    /// with (so nothing written to those names later changes what is committed). `owned`:
    /// a large body's pieces, deleted once committed or discarded (a multipart upload's stay
    /// until the upload ends).
    Pieces {
        pieces: Vec<(String, String)>,
        owned: bool,
    },
}

/// How far the service's clock may run behind this instance's when fencegate starts without a
/// shared table: a commit's signed URL expires by the service's clock, so the gate holds an
/// object whose answer was lost this much longer than the deadline.
pub const CLOCK_MARGIN: Duration = Duration::from_secs(2);

/// Under the bucket's prefix, where fencegate keeps what no client may read or write.
const STAGING: &str = ".fencegate-probe/staging/";
const UPLOADS: &str = ".fencegate-probe/uploads/";

pub struct GcsBackend {
    client: Arc<GcsClient>,
    bucket: String,
    prefix: String,
    block_size: u64,
    commit_deadline: Duration,
    spooler: Arc<Spooler>,
}

impl GcsBackend {
    pub fn new(client: Arc<GcsClient>, bucket: &str, prefix: &str, block_size: u64) -> Self {
        crate::metrics::register_store_integrity();
        GcsBackend {
            client,
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            block_size: block_size.max(1),
            commit_deadline: Duration::from_secs(900),
            spooler: Spooler::in_temp_dir(),
        }
    }

    pub fn with_spooler(mut self, spooler: Arc<Spooler>) -> Self {
        self.spooler = spooler;
        self
    }

    pub fn with_commit_deadline(mut self, deadline: Duration) -> Self {
        self.commit_deadline = deadline;
        self
    }

    /// `bucket/prefix`, for messages.
    pub fn location(&self) -> String {
        format!("{}/{}", self.bucket, self.prefix)
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn object(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// The bucket exists and the service account reaches it.
    pub async fn check_bucket(&self) -> Result<(), BackendError> {
        let req = || Request::xml(Method::HEAD, &self.bucket, "");
        match self.client.read("HEAD Bucket", req).await {
            Ok(_) => Ok(()),
            Err(GcsFailure::NotFound) => Err(BackendError::Failing(format!(
                "GCS has no bucket {:?} (or the service account may not see it); create it, or set backend_bucket",
                self.bucket
            ))),
            Err(f) => Err(f.into_backend("HEAD Bucket")),
        }
    }

    /// How far this machine's clock runs ahead of the service's (ms, a range).
    pub async fn clock_offset_now(&self) -> Result<(i64, i64), String> {
        self.client.clock_offset(&self.bucket).await
    }

    /// The object's description, or `None` if absent.
    async fn head_object(&self, key: &str) -> Result<Option<ObjectInfo>, BackendError> {
        let name = self.object(key);
        let req = || Request::xml(Method::HEAD, &self.bucket, &name);
        match self.client.read("HEAD Object", req).await {
            Ok(r) => {
                let size = length(&r);
                Ok(Some(meta::info(key, r.headers(), size)))
            }
            Err(GcsFailure::NotFound) => Ok(None),
            Err(f) => Err(f.into_backend("HEAD Object")),
        }
    }

    /// GET Object, whole or bytes `start..=end`.
    async fn get_object(
        &self,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        let name = self.object(key);
        let req = || {
            let r = Request::xml(Method::GET, &self.bucket, &name);
            match range {
                Some((start, end)) => r.header("range", format!("bytes={start}-{end}")),
                None => r,
            }
        };
        let response = match self.client.read("GET Object", req).await {
            Ok(r) => r,
            Err(GcsFailure::NotFound) => return Ok(None),
            Err(f) => return Err(f.into_backend("GET Object")),
        };
        // A ranged answer's Content-Range names the whole size: `bytes 0-4/10`.
        let size = response
            .headers()
            .get("content-range")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit_once('/'))
            .and_then(|(_, total)| total.parse().ok())
            .unwrap_or_else(|| length(&response));
        let info = meta::info(key, response.headers(), size);
        let body = response
            .bytes_stream()
            .map(|chunk| {
                chunk.map_err(|e| BodyError::Broken(format!("reading from the store: {e}")))
            })
            .boxed();
        Ok(Some((info, body)))
    }

    /// DELETE Object, if still at generation `expected` when given; a conditional delete goes
    /// by a signed URL that expires as a commit's does.
    async fn delete_object(
        &self,
        name: &str,
        expected: Option<&str>,
        not_after: Option<std::time::SystemTime>,
    ) -> Result<(), GcsFailure> {
        let mut req = Request::xml(Method::DELETE, &self.bucket, name);
        if let Some(generation) = expected {
            req = req
                .header("x-goog-if-generation-match", generation)
                .signed_until(self.expiry(not_after));
        }
        self.client.send("DELETE Object", req).await.map(|_| ())
    }

    /// Deletes one of fencegate's own staging objects; a failure is only logged (the start-up
    /// sweep or a lifecycle rule on `.fencegate-probe/` collects what is left).
    async fn drop_staging(&self, name: &str) {
        match self.delete_object(name, None, None).await {
            Ok(()) | Err(GcsFailure::NotFound) => {}
            Err(f) => {
                let e = f.into_backend("DELETE Object");
                tracing::warn!(object = name, error = %e, "could not delete a staging object; the start-up sweep (abandoned_upload_secs) or a lifecycle rule on .fencegate-probe/ collects it")
            }
        }
    }
}

/// The Content-Length header (a HEAD answer's body is empty, so reqwest's own count is 0).
fn length(r: &reqwest::Response) -> u64 {
    header(r, "x-goog-stored-content-length")
        .parse()
        .or_else(|_| header(r, "content-length").parse())
        .unwrap_or(0)
}

pub(super) fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

#[async_trait]
impl Backend for GcsBackend {
    async fn stage(
        &self,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        body: ByteStream,
    ) -> Result<Staged, BackendError> {
        self.stage_body(bucket, key, meta, body).await
    }

    async fn commit(
        &self,
        staged: &Staged,
        expected: Option<&str>,
    ) -> Result<ObjectInfo, BackendError> {
        self.commit_inner(staged, expected, None).await
    }

    /// Cluster mode: the commit's signed URL expires at `not_after`, the intent's deadline, so
    /// the service refuses it after that as S3 refuses an expired presigned request.
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

    fn conditional_commit(&self, _staged: &Staged) -> bool {
        // The start-up probe refuses a service that ignores the conditions.
        true
    }

    fn in_flight_bound(&self) -> Option<Duration> {
        // The signed URL expires by the service's clock, which the start-up check allows to
        // run behind this one's by up to CLOCK_MARGIN.
        Some(self.commit_deadline + CLOCK_MARGIN)
    }

    async fn clock_offset(&self) -> Option<Result<(i64, i64), String>> {
        Some(self.client.clock_offset(&self.bucket).await)
    }

    async fn check_ready(&self, _bucket: &str) -> Result<(), BackendError> {
        self.check_bucket().await
    }

    async fn discard(&self, staged: Staged) {
        if let StagedBody::Gcs(Staging {
            from:
                Source::Pieces {
                    pieces,
                    owned: true,
                },
            ..
        }) = &staged.body
        {
            for (name, _) in pieces {
                self.drop_staging(name).await;
            }
        }
    }

    async fn release(&self, staged: Staged) {
        // A large body's pieces go; an upload's stay for the retry.
        self.discard(staged).await
    }

    async fn version(&self, _bucket: &str, key: &str) -> Result<Option<String>, BackendError> {
        Ok(self.head_object(key).await?.map(|i| i.version))
    }

    async fn head(&self, _bucket: &str, key: &str) -> Result<Option<ObjectInfo>, BackendError> {
        self.head_object(key).await
    }

    async fn get(
        &self,
        _bucket: &str,
        key: &str,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        self.get_object(key, None).await
    }

    async fn delete(&self, bucket: &str, key: &str, expected: &str) -> Result<(), BackendError> {
        self.delete_inner(bucket, key, expected, None).await
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
        bucket: &str,
        key: &str,
        number: u32,
        body: bool,
    ) -> Result<Option<ObjectPart>, BackendError> {
        crate::backend::stored_meta::recorded_part(self, bucket, key, number, body, "GetObject and HeadObject by partNumber of this multipart object on gcs (its parts were not recorded with it); read the part by Range")
            .await
    }

    async fn create_upload(
        &self,
        _bucket: &str,
        key: &str,
        meta: &ObjectMeta,
    ) -> Result<String, BackendError> {
        pieces::refuse_unstorable(&self.object(key))?;
        meta::check_fits(meta)?;
        // The upload's pieces appear with its parts; the metadata comes with the commit.
        Ok(random_id())
    }

    async fn upload_part(
        &self,
        _bucket: &str,
        _key: &str,
        handle: &str,
        number: i32,
        body: ByteStream,
        _size: Option<u64>,
    ) -> Result<PartInfo, BackendError> {
        self.put_part(handle, number, body).await
    }

    async fn assemble(
        &self,
        bucket: &str,
        key: &str,
        handle: &str,
        parts: &[PartInfo],
        meta: ObjectMeta,
    ) -> Result<Staged, BackendError> {
        self.assemble_parts(bucket, key, handle, parts, meta).await
    }

    async fn finish_upload(
        &self,
        _bucket: &str,
        _key: &str,
        handle: &str,
    ) -> Result<(), BackendError> {
        let prefix = self.upload_prefix(handle);
        let mut after = None;
        loop {
            let page = self.list_objects(&prefix, after.as_deref(), 1000).await?;
            for item in &page.objects {
                self.drop_staging(&item.key).await;
            }
            match page.next_start_after {
                Some(next) => after = Some(next),
                None => return Ok(()),
            }
        }
    }

    async fn list(
        &self,
        _bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<ListPage, BackendError> {
        self.list_page(prefix, start_after, max).await
    }
}
