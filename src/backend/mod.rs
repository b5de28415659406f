//! Backends: where the bytes live. The gate drives every backend through [`Backend`] in the
//! same order: stage the body invisibly, then (under the scope's lock) commit it conditional on
//! the version fencegate last saw, or discard it.

pub mod fs;
pub mod memory;
pub mod s3;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use serde::Serialize;
use std::collections::BTreeMap;

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
}

/// What a write stores beside the bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ObjectMeta {
    pub content_type: Option<String>,
    /// User metadata (`x-amz-meta-*`), names lowercased.
    pub user_meta: BTreeMap<String, String>,
    /// The token that wrote the object, if any.
    pub token: Option<u64>,
}

/// An object as the backend holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    /// A temporary file (fs) or an id (the memory double).
    Handle(String),
    /// A small body held in memory, sent in one conditional PutObject.
    Buffered(Bytes),
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
            StagedBody::Handle(h) => Ok(h),
            _ => Err(BackendError::Failing(
                "a body staged by another backend cannot be committed here".into(),
            )),
        }
    }
}

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
    #[error("a stored object is corrupt: {0}")]
    Corrupt(String),
}

impl From<std::io::Error> for BackendError {
    fn from(e: std::io::Error) -> Self {
        BackendError::Failing(e.to_string())
    }
}

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

    /// Whether committing `staged` is an atomic compare-and-swap on the object's version: true
    /// for `fs` (checked under the scope's lock) and for s3 stores the start-up probe proved
    /// honour If-Match / If-None-Match on that kind of commit. The gate then trusts its fence
    /// table for the version instead of reading it from the backend before the commit.
    fn conditional_commit(&self, _staged: &Staged) -> bool {
        true
    }

    /// Drops a staged body that lost (or whose commit failed).
    async fn discard(&self, staged: Staged);

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

    /// Keys starting with `prefix`, after `start_after`, at most `max`.
    async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<ListPage, BackendError>;
}
