//! Backends: where the bytes live. The gate drives every backend through [`Backend`] in the
//! same order: stage the body invisibly, then (under the scope's lock) commit it conditional on
//! the version fencegate last saw, or discard it.

#[cfg(feature = "azure")]
pub mod azure;
pub mod claim;
pub mod clock;
pub mod fs;
#[cfg(feature = "gcs")]
pub mod gcs;
pub mod instrumented;
pub mod memory;
mod meta;
mod parts;
pub mod probe_race;
#[cfg(feature = "s3")]
pub mod s3;
pub mod scripted;
pub mod spool;
pub mod store_http;
#[cfg(any(feature = "azure", feature = "gcs"))]
pub mod stored_meta;
#[cfg(any(feature = "azure", feature = "gcs"))]
pub mod strict;

pub use meta::{
    decode_tags, encode_tags, encoded_word_needed, printable, BodyChecksums, KeptChecksum,
    ObjectMeta, CHECKSUM_META, SYSTEM_HEADERS, TAGS_META,
};
pub use parts::{
    match_parts, multipart_etag, part_of_whole, range_of_whole, slice_stream, ObjectPart,
    PartChecksum, PartInfo, PartSpan, MIN_PART_BYTES,
};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use serde::Serialize;

/// A request or response body: a stream of chunks, never one buffer.
pub type ByteStream = BoxStream<'static, Result<Bytes, BodyError>>;

/// Why a client's body could not be read to its end.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BodyError {
    #[error("the body is larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("the client sent no body bytes for {secs} s")]
    Idle { secs: u64 },
    #[error("the body ended early or could not be read: {0}")]
    Broken(String),
    /// The body's MD5 is not the Content-MD5 its request declared (checked as its last bytes
    /// pass, so nothing is committed).
    #[error("{0}")]
    BadDigest(String),
    /// The body does not match what its request signed (checked as its last bytes pass).
    #[error("{message}")]
    Unauthenticated {
        status: u16,
        code: &'static str,
        message: String,
    },
}

/// An object as the backend holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ObjectInfo {
    pub key: String,
    pub size: u64,
    /// The client-visible ETag, quoted as S3 does (`"md5hex"`).
    pub etag: String,
    /// The backend's identity of this exact version, used for bypass detection.
    #[serde(skip)]
    pub version: String,
    pub last_modified_ms: u64,
    #[serde(flatten)]
    pub meta: ObjectMeta,
    /// The parts it was completed from, in order, as (the number it was uploaded with, size),
    /// when the backend knows them (fs); empty for an object written whole. GetObject
    /// `partNumber` reads by them.
    #[serde(skip)]
    pub parts: Vec<(u32, u64)>,
}

/// A body written where no reader can see it yet.
#[derive(Debug)]
pub struct Staged {
    /// Where the backend keeps it.
    pub body: StagedBody,
    pub bucket: String,
    pub key: String,
    pub etag: String,
    pub size: u64,
    /// The version the object will have once this is committed, when known in advance.
    pub version: Option<String>,
    /// What is stored beside the bytes (the token included).
    pub meta: ObjectMeta,
}

/// Backend-private: where a staged body waits for its commit.
#[derive(Debug)]
pub enum StagedBody {
    /// An id (the memory double).
    Handle(String),
    /// A temporary file (fs), with the handle it was written through: the commit reads the
    /// file's identity from it, without opening the path again; and its fsync, which the
    /// commit waits for before the rename.
    File {
        path: String,
        file: std::sync::Arc<std::fs::File>,
        synced: fs::StagedSync,
    },
    /// A body up to the multipart threshold, spooled (s3, azure), sent in one conditional
    /// request.
    Spooled(spool::Spooled),
    /// What an azure commit sends: a spooled body, or a staging blob it copies.
    #[cfg(feature = "azure")]
    Azure(azure::Staging),
    #[cfg(feature = "gcs")]
    Gcs(gcs::Staging),
    /// A multipart upload, invisible until CompleteMultipartUpload.
    Multipart {
        upload_id: String,
        /// (part number, part ETag)
        parts: Vec<(i32, String)>,
    },
}

impl StagedBody {
    /// The handle of a body that a backend staged as a handle itself.
    pub fn handle(&self) -> Result<&str, BackendError> {
        match self {
            StagedBody::Handle(h) | StagedBody::File { path: h, .. } => Ok(h),
            _ => Err(BackendError::Failing(
                "a body staged by another backend cannot be committed here".into(),
            )),
        }
    }
}

pub use crate::version::same_version;

/// The metadata name that carries the token on an s3 store (`x-amz-meta-fencing-token`),
/// which the S3 gateway also reads from a client.
pub const TOKEN_META: &str = "fencing-token";

/// One page of a listing, in key order.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ListPage {
    pub objects: Vec<ObjectInfo>,
    /// Pass as `start_after` to get the next page.
    pub next_start_after: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The object is not at the version the commit was conditional on.
    #[error("the object changed on the backend (expected version {expected:?}, found {found:?})")]
    Conflict {
        expected: Option<String>,
        found: Option<String>,
    },
    #[error(transparent)]
    Body(#[from] BodyError),
    #[error("the backend cannot be reached: {0}")]
    Unreachable(String),
    #[error("the backend did not answer in time: {0}")]
    Timeout(String),
    #[error("the backend is throttling requests: {0}")]
    Throttled(String),
    #[error("the backend is failing: {0}")]
    Failing(String),
    /// The store answered with a refusal (a 4xx other than the conditions', or the request
    /// could not be built to be sent): nothing of it was written, so nothing of it can land
    /// later. `status` 0: it was never sent.
    #[error("the store refused the request ({status} {code}): {message}; nothing was written")]
    Refused {
        status: u16,
        code: String,
        message: String,
    },
    #[error("a stored object is corrupt: {0}")]
    Corrupt(String),
    /// The store answered a write with the digest of other bytes than fencegate sent it: it
    /// kept something else (docs/design.md, "The store's answer is checked").
    #[error("{0}")]
    KeptDifferentBytes(String),
    /// The client asked for something malformed (a part list, a range): 400 with this code.
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
    #[error("no multipart upload {0:?}; it was completed or aborted, or never existed")]
    NoSuchUpload(String),
    /// GetObject / HeadObject `partNumber` beyond the object's parts: 416 InvalidPartNumber.
    #[error("the object has no part {number}; it has {count} (an object written whole has the one part 1); ask for a part by the number it was uploaded with (ListParts named them), or read a Range")]
    NoSuchPart { number: u32, count: u32 },
    #[error("this backend does not support {0}")]
    Unsupported(&'static str),
    /// The store refused a request sent with a deadline (cluster mode, [`Backend::commit_by`])
    /// because it arrived after it: nothing was written.
    #[error("the store refused the request because it arrived after its deadline ({0}); nothing was written, retry")]
    Expired(String),
}

impl From<std::io::Error> for BackendError {
    fn from(e: std::io::Error) -> Self {
        BackendError::Failing(e.to_string())
    }
}

/// Where the bytes live. Every method is required, with no default: a wrapper (metrics, a
/// test's script) that forgot to forward one would otherwise change behaviour silently, as a
/// defaulted `conditional_commit` would trust a store the probe found ignoring If-Match.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Writes the body somewhere invisible and durable. On error nothing is left behind.
    async fn stage(
        &self,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        body: ByteStream,
    ) -> Result<Staged, BackendError>;

    /// Makes a staged body the object, if the object is still at `expected` (None: absent).
    /// The caller holds the scope's lock. On error the body stays staged: the caller may try
    /// again or [`Backend::discard`] it.
    async fn commit(
        &self,
        staged: &Staged,
        expected: Option<&str>,
    ) -> Result<ObjectInfo, BackendError>;

    /// Cluster mode (a shared fence table): [`Backend::commit`], sent so that the store itself
    /// refuses it once `not_after` has passed (an S3 presigned request's expiry). An instance
    /// paused past `not_after` can then no longer land it, and other instances may decide
    /// after that time without its answer (docs/design.md, "Bounded intents"). Only the s3
    /// backend runs with a shared table (configuration checks refuse the others), so the others
    /// commit as [`Backend::commit`] does.
    async fn commit_by(
        &self,
        staged: &Staged,
        expected: Option<&str>,
        not_after: std::time::SystemTime,
    ) -> Result<ObjectInfo, BackendError>;

    /// [`Backend::delete`] with a store-enforced deadline, as [`Backend::commit_by`].
    async fn delete_by(
        &self,
        bucket: &str,
        key: &str,
        expected: &str,
        not_after: std::time::SystemTime,
    ) -> Result<(), BackendError>;

    /// Whether committing `staged` is an atomic compare-and-swap on the object's version: true
    /// for `fs` (checked under the scope's lock) and for s3 stores the start-up probe proved
    /// honour If-Match / If-None-Match on that kind of commit. The gate then trusts its fence
    /// table for the version instead of reading it from the backend before the commit.
    fn conditional_commit(&self, staged: &Staged) -> bool;

    /// How long a commit or delete whose answer was lost (a timeout, a reset) may still be
    /// applied by the store. `None`: never, because the operation ended when the call returned
    /// (fs: a blocking task that ran to its end). The gate refuses the object until then.
    fn in_flight_bound(&self) -> Option<std::time::Duration>;

    /// How far this instance's clock runs ahead of the store's (ms, as a range: negative is
    /// behind), for cluster mode's clock watch. `None`: the backend has no clock that matters
    /// (a local file store).
    async fn clock_offset(&self) -> Option<Result<(i64, i64), String>>;

    /// Readiness (`GET /readyz`): whether `bucket` can be served now, checked cheaply (fs: its
    /// directory and the staging area are usable; s3: HeadBucket).
    async fn check_ready(&self, bucket: &str) -> Result<(), BackendError>;

    /// Drops a staged body that lost (or whose commit failed).
    async fn discard(&self, staged: Staged);

    /// Drops what a multipart completion assembled, but keeps the upload's parts: its commit
    /// was refused for now (a commit in progress, the fence table unavailable) and the client
    /// will complete it again. A backend whose assembly is the store's own upload keeps it.
    async fn release(&self, staged: Staged);

    /// The identity of the object's current version (`None`: absent), without reading it. This
    /// is what bypass detection compares; it works even on an object fencegate cannot parse.
    async fn version(&self, bucket: &str, key: &str) -> Result<Option<String>, BackendError>;

    /// The object's metadata, or `None` if absent.
    async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectInfo>, BackendError>;

    /// The object's metadata and body.
    async fn get(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError>;

    /// Deletes the object if it is still at `expected`. The caller holds the scope's lock.
    async fn delete(&self, bucket: &str, key: &str, expected: &str) -> Result<(), BackendError>;

    /// Bytes `start..=end` of the object (the caller clamps `end` to the size).
    async fn get_range(
        &self,
        bucket: &str,
        key: &str,
        start: u64,
        end: u64,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError>;

    /// Part `number` of the object (GetObject / HeadObject `partNumber`), with its bytes when
    /// `body`; `None`: absent. [`BackendError::NoSuchPart`] when the object has no such part.
    /// [`part_of_whole`] serves a backend that can only read whole objects.
    async fn get_part(
        &self,
        bucket: &str,
        key: &str,
        number: u32,
        body: bool,
    ) -> Result<Option<ObjectPart>, BackendError>;

    /// Starts a multipart upload whose object will carry `meta`; returns the backend's handle.
    async fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
    ) -> Result<String, BackendError>;

    /// Stores one part, invisible to readers. `size` is the Content-Length when known.
    async fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        handle: &str,
        number: i32,
        body: ByteStream,
        size: Option<u64>,
    ) -> Result<PartInfo, BackendError>;

    /// Joins the parts (already checked against those uploaded, in order) into a staged body,
    /// committed like any other. The parts stay until [`Backend::finish_upload`].
    async fn assemble(
        &self,
        bucket: &str,
        key: &str,
        handle: &str,
        parts: &[PartInfo],
        meta: ObjectMeta,
    ) -> Result<Staged, BackendError>;

    /// Drops what is left of an upload: after its commit, or when it is aborted. Idempotent.
    async fn finish_upload(
        &self,
        bucket: &str,
        key: &str,
        handle: &str,
    ) -> Result<(), BackendError>;

    /// Keys starting with `prefix`, after `start_after`, at most `max`.
    async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<ListPage, BackendError>;
}
