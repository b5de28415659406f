//! The `azure` backend: one fencegate bucket on an Azure Blob Storage container (plus an
//! optional key prefix), through the Blob service's REST API signed with Shared Key or a SAS
//! token (`client.rs`).
//!
//! Bodies up to the block size are spooled and committed with one Put Blob carrying their
//! Content-MD5 (the service refuses other bytes) and `If-Match` (the ETag the gate read) or
//! `If-None-Match: *`. Larger bodies, and multipart uploads, travel as blocks of a staging blob
//! under `<prefix>.fencegate-probe/`, which nobody else writes (Azure discards a blob's
//! uncommitted blocks whenever that blob is written, so blocks staged on the object itself
//! would be lost to any other writer); the commit copies that staging blob onto the object
//! with the same conditions (`blocks.rs`). A commit whose answer was lost is read back by the
//! commit id it stored, never re-sent.

mod blocks;
mod claim;
mod client;
mod commit;
mod errors;
mod listing;
mod meta;
pub mod probe;
mod sweep;

pub use client::AzureClient;

use super::spool::{Spooled, Spooler};
use super::{
    Backend, BackendError, BodyError, ByteStream, ListPage, ObjectInfo, ObjectMeta, ObjectPart,
    PartInfo, Staged, StagedBody,
};
use crate::backend::strict::random_id;
use async_trait::async_trait;
use client::Request;
use errors::AzFailure;
use futures::StreamExt;
use reqwest::Method;
use std::sync::Arc;
use std::time::Duration;

/// What the commit of a staged body sends.
#[derive(Debug)]
pub struct Staging {
    pub from: Source,
    /// Stored with the blob: shows whether a commit whose answer was lost landed.
    pub commit: String,
    /// A completed upload's parts, (number, size), stored with the blob; empty otherwise.
    pub parts: Vec<(u32, u64)>,
}

#[derive(Debug)]
pub enum Source {
    /// Up to the block size: sent in one Put Blob.
    Spooled(Spooled),
    /// A staging blob the commit copies: a large body (`upload: false`, deleted once
    /// committed or discarded), or a multipart upload's assembly (kept until the upload ends),
    /// at the ETag its Put Block List answered: the copy takes it only at that version, so a
    /// late assembly of the same upload cannot change what is committed.
    Blob {
        name: String,
        upload: bool,
        etag: String,
    },
}

/// How far the service's clock may run behind this instance's when fencegate starts without a
/// shared table: a commit's SAS expires by the service's clock, so the gate holds an object
/// whose answer was lost this much longer than the deadline.
pub const CLOCK_MARGIN: Duration = Duration::from_secs(2);

/// Under the bucket's prefix, where fencegate keeps what no client may read or write.
const STAGING: &str = ".fencegate-probe/staging/";
const UPLOADS: &str = ".fencegate-probe/uploads/";

pub struct AzureBackend {
    client: Arc<AzureClient>,
    container: String,
    prefix: String,
    block_size: u64,
    commit_deadline: Duration,
    spooler: Arc<Spooler>,
    /// Where the service's listing goes on after a page fencegate answered, by (prefix, the
    /// page's last key): Azure continues a listing by an opaque marker, not by a key.
    markers: parking_lot::Mutex<std::collections::HashMap<(String, String), String>>,
}

impl AzureBackend {
    pub fn new(client: Arc<AzureClient>, container: &str, prefix: &str, block_size: u64) -> Self {
        crate::metrics::register_store_integrity();
        AzureBackend {
            client,
            container: container.to_string(),
            prefix: prefix.to_string(),
            block_size: block_size.max(1),
            commit_deadline: Duration::from_secs(900),
            spooler: Spooler::in_temp_dir(),
            markers: Default::default(),
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

    /// `container/prefix`, for messages.
    pub fn location(&self) -> String {
        format!("{}/{}", self.container, self.prefix)
    }

    pub fn container(&self) -> &str {
        &self.container
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn blob(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// Get Container Properties: the container exists and our credentials reach it.
    pub async fn check_container(&self) -> Result<(), BackendError> {
        let req = || Request::new(Method::HEAD, &self.container, "").query("restype", "container");
        match self.client.read("Get Container Properties", req).await {
            Ok(_) => Ok(()),
            Err(AzFailure::NotFound) => Err(BackendError::Failing(format!(
                "the storage account has no container {:?}; create it, or set backend_bucket",
                self.container
            ))),
            Err(f) => Err(f.into_backend("Get Container Properties")),
        }
    }

    /// The blob's description, or `None` if absent.
    async fn head_blob(&self, key: &str) -> Result<Option<ObjectInfo>, BackendError> {
        let blob = self.blob(key);
        let req = || Request::new(Method::HEAD, &self.container, &blob);
        match self.client.read("Get Blob Properties", req).await {
            Ok(r) => {
                let size = length(&r);
                Ok(Some(meta::info(key, r.headers(), size)))
            }
            Err(AzFailure::NotFound) => Ok(None),
            Err(f) => Err(f.into_backend("Get Blob Properties")),
        }
    }

    /// Get Blob, whole or bytes `start..=end`.
    async fn get_blob(
        &self,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        let blob = self.blob(key);
        let req = || {
            let r = Request::new(Method::GET, &self.container, &blob);
            match range {
                Some((start, end)) => r.header("x-ms-range", format!("bytes={start}-{end}")),
                None => r,
            }
        };
        let response = match self.client.read("Get Blob", req).await {
            Ok(r) => r,
            Err(AzFailure::NotFound) => return Ok(None),
            Err(f) => return Err(f.into_backend("Get Blob")),
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

    /// Delete Blob (its snapshots too), if still at `expected` when given; a conditional
    /// delete is authorized by a SAS that expires as a commit's does.
    async fn delete_blob(
        &self,
        blob: &str,
        expected: Option<&str>,
        not_after: Option<std::time::SystemTime>,
    ) -> Result<(), AzFailure> {
        let mut req = Request::new(Method::DELETE, &self.container, blob)
            .header("x-ms-delete-snapshots", "include");
        if let Some(etag) = expected {
            let sas = self
                .client
                .sas(&self.container, blob, "d", self.expiry(not_after));
            req = req.header("if-match", etag).sas(sas);
        }
        self.client.send("Delete Blob", req).await.map(|_| ())
    }

    /// Deletes one of fencegate's own staging blobs; a failure is only logged (a lifecycle rule
    /// on `.fencegate-probe/` collects what is left).
    async fn drop_staging(&self, blob: &str) {
        match self.delete_blob(blob, None, None).await {
            Ok(()) | Err(AzFailure::NotFound) => {}
            Err(f) => {
                let e = f.into_backend("Delete Blob");
                tracing::warn!(blob, error = %e, "could not delete a staging blob; the start-up sweep (abandoned_upload_secs) or a lifecycle rule on .fencegate-probe/ collects it")
            }
        }
    }
}

/// The Content-Length header (a HEAD answer's body is empty, so reqwest's own count is 0).
fn length(r: &reqwest::Response) -> u64 {
    header(r, "content-length").parse().unwrap_or(0)
}

pub(super) fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

#[async_trait]
impl Backend for AzureBackend {
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

    /// Cluster mode: the commit's SAS expires at `not_after`, the intent's deadline, so the
    /// service refuses it after that as S3 refuses an expired presigned request.
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
        // The SAS expires by the service's clock, which the start-up check allows to run
        // behind this one's by up to CLOCK_MARGIN.
        Some(self.commit_deadline + CLOCK_MARGIN)
    }

    async fn clock_offset(&self) -> Option<Result<(i64, i64), String>> {
        Some(self.client.clock_offset().await)
    }

    async fn check_ready(&self, _bucket: &str) -> Result<(), BackendError> {
        self.check_container().await
    }

    async fn discard(&self, staged: Staged) {
        if let StagedBody::Azure(Staging {
            from:
                Source::Blob {
                    name,
                    upload: false,
                    ..
                },
            ..
        }) = &staged.body
        {
            self.drop_staging(name).await;
        }
    }

    async fn release(&self, staged: Staged) {
        // A large body's staging blob goes; an upload's assembly stays for the retry.
        self.discard(staged).await
    }

    async fn version(&self, _bucket: &str, key: &str) -> Result<Option<String>, BackendError> {
        Ok(self.head_blob(key).await?.map(|i| i.version))
    }

    async fn head(&self, _bucket: &str, key: &str) -> Result<Option<ObjectInfo>, BackendError> {
        self.head_blob(key).await
    }

    async fn get(
        &self,
        _bucket: &str,
        key: &str,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        self.get_blob(key, None).await
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
        self.get_blob(key, Some((start, end))).await
    }

    async fn get_part(
        &self,
        bucket: &str,
        key: &str,
        number: u32,
        body: bool,
    ) -> Result<Option<ObjectPart>, BackendError> {
        crate::backend::stored_meta::recorded_part(self, bucket, key, number, body, "GetObject and HeadObject by partNumber of this multipart object on azure (its parts were not recorded with it); read the part by Range")
            .await
    }

    async fn create_upload(
        &self,
        _bucket: &str,
        key: &str,
        meta: &ObjectMeta,
    ) -> Result<String, BackendError> {
        blocks::refuse_unstorable(key)?;
        meta::check_fits(meta)?;
        // The upload's blob appears with its first block; the metadata comes with the commit.
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
        match self
            .delete_blob(&self.upload_blob(handle), None, None)
            .await
        {
            Ok(()) | Err(AzFailure::NotFound) => Ok(()),
            Err(f) => Err(f.into_backend("Delete Blob")),
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
