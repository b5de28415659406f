//! Backends: where the bytes live. The gate drives every backend through [`Backend`] in the
//! same order: stage the body invisibly, then (under the scope's lock) commit it conditional on
//! the version fencegate last saw, or discard it.

pub mod instrumented;
pub mod fs;
pub mod memory;
pub mod s3;
pub mod scripted;

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

/// What a write stores beside the bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ObjectMeta {
    pub content_type: Option<String>,
    /// User metadata (`x-amz-meta-*`), names lowercased.
    pub user_meta: BTreeMap<String, String>,
    /// The token that wrote the object, if any.
    pub token: Option<u64>,
    /// S3's system metadata sent with the write ([`SYSTEM_HEADERS`]), by lowercase header name,
    /// answered back on every read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// The headers a write may set that every read answers with, as S3 keeps them.
pub const SYSTEM_HEADERS: [&str; 5] = [
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "expires",
];

/// A header or metadata value fencegate stores and forwards: printable ASCII and spaces only.
/// A tab or other control character is signed differently by different S3 implementations,
/// and a byte outside ASCII is not a header value every store returns intact.
pub fn printable(value: &str) -> bool {
    value.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// Whether a user metadata value goes to an S3 store as an RFC 2047 encoded word: one that is
/// not printable ASCII, or one that reads as an encoded word itself, so that reading back
/// decodes only what fencegate encoded.
pub fn encoded_word_needed(value: &str) -> bool {
    !printable(value)
        || (value.starts_with("=?") && value.ends_with("?="))
        // A header value loses its outer spaces on the way.
        || value.trim() != value
}

impl ObjectMeta {
    /// The system metadata of a write's headers, one rule for both surfaces: each header once,
    /// printable, an Expires that is an HTTP date. `aws-chunked` names the transfer, not the
    /// object, and is dropped from Content-Encoding as S3 drops it; a coding that only contains
    /// it is refused, since stores take it for aws-chunked.
    pub fn system_headers(headers: &http::HeaderMap) -> Result<BTreeMap<String, String>, String> {
        let mut out = BTreeMap::new();
        for name in SYSTEM_HEADERS {
            let mut values = headers.get_all(name).iter();
            let Some(value) = values.next() else { continue };
            if values.next().is_some() {
                return Err(format!("{name} is sent more than once; send it once"));
            }
            let value = String::from_utf8_lossy(value.as_bytes());
            let value = value.trim();
            if !printable(value) {
                return Err(format!(
                    "{name} must be printable ASCII without tabs or other control characters"
                ));
            }
            let value = match name {
                "content-encoding" => {
                    let mut kept = Vec::new();
                    for coding in value.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                        let lower = coding.to_ascii_lowercase();
                        if lower == "aws-chunked" {
                            continue;
                        }
                        if lower.contains("aws-chunked") {
                            return Err(format!(
                                "Content-Encoding {coding:?} is not a content coding; send aws-chunked for an aws-chunked body, or the object's own coding"
                            ));
                        }
                        kept.push(coding);
                    }
                    kept.join(",")
                }
                "expires" if httpdate::parse_http_date(value).is_err() => {
                    return Err(format!(
                        "Expires {value:?} is not an HTTP date such as \"Wed, 21 Oct 2026 07:28:00 GMT\""
                    ))
                }
                _ => value.to_string(),
            };
            if !value.is_empty() {
                out.insert(name.to_string(), value);
            }
        }
        Ok(out)
    }

    /// The bytes of user metadata as a store counts them (names and values as sent, encoded
    /// words included), fencegate's own entries included: the token, and the marker of a body
    /// it stores in parts of its own, whose room is kept for every write since a body's size is
    /// known only once it has streamed.
    pub fn user_meta_bytes(&self) -> usize {
        let token = self
            .token
            .map_or(0, |t| "fencing-token".len() + t.to_string().len());
        let split = "fencegate-split".len() + u64::MAX.to_string().len();
        let stored = |v: &str| match encoded_word_needed(v) {
            true => "=?UTF-8?B??=".len() + v.len().div_ceil(3) * 4,
            false => v.len(),
        };
        token
            + split
            + self
                .user_meta
                .iter()
                .map(|(k, v)| k.len() + stored(v))
                .sum::<usize>()
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).cloned()
    }
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
    /// The parts it was completed from, in order, as (the number it was uploaded with, size),
    /// when the backend knows them (fs); empty for an object written whole. GetObject
    /// `partNumber` reads by them.
    #[serde(skip)]
    pub parts: Vec<(u32, u64)>,
}

/// Where one part of an object lies, for GetObject and HeadObject `partNumber`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartSpan {
    /// The part's first byte in the object.
    pub offset: u64,
    pub len: u64,
    /// The object's part count (`x-amz-mp-parts-count`) when it was completed from parts;
    /// `None` for an object written whole, whose only part is the object itself.
    pub count: Option<u32>,
}

impl PartSpan {
    /// Part `number` of an object of `size` bytes completed from `parts` (number uploaded
    /// with, size; empty: written whole). A part is asked for by the number it was uploaded
    /// with, as the store serves it (ministack), so that an upload completed from parts 1, 3
    /// and 5 reads alike on fs and on s3 (counted in order, it would not). An object written
    /// whole has the one part 1.
    pub fn of(parts: &[(u32, u64)], size: u64, number: u32) -> Result<PartSpan, BackendError> {
        let missing = || BackendError::NoSuchPart {
            number,
            count: parts.len().max(1) as u32,
        };
        if parts.is_empty() {
            return match number {
                1 => Ok(PartSpan {
                    offset: 0,
                    len: size,
                    count: None,
                }),
                _ => Err(missing()),
            };
        }
        let index = parts
            .iter()
            .position(|(n, _)| *n == number)
            .ok_or_else(missing)?;
        Ok(PartSpan {
            offset: parts[..index].iter().map(|(_, s)| s).sum(),
            len: parts[index].1,
            count: Some(parts.len() as u32),
        })
    }

    /// The part's bytes out of the whole object's stream.
    pub fn slice(&self, body: ByteStream) -> ByteStream {
        match self.len {
            0 => Box::pin(futures::stream::empty()),
            len => slice_stream(body, self.offset, self.offset + len - 1),
        }
    }
}

/// One part of an object (GetObject / HeadObject `partNumber`), all of one version.
pub struct ObjectPart {
    /// The whole object.
    pub info: ObjectInfo,
    pub span: PartSpan,
    /// The part's bytes, when they were asked for.
    pub body: Option<ByteStream>,
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
    /// A body up to the multipart threshold, spooled (s3), sent in one conditional PutObject.
    Spooled(s3::spool::Spooled),
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

/// One uploaded part of a multipart upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PartInfo {
    pub number: i32,
    /// Quoted, as S3 answers it.
    pub etag: String,
    pub size: u64,
    pub last_modified_ms: u64,
    /// The `x-amz-checksum-*` the part was uploaded with and proved to have, if any: what a
    /// completion's checksums are judged by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<PartChecksum>,
}

/// A checksum of a part's bytes: S3's algorithm name (`crc32`, `crc32c`, `sha1`, `sha256`,
/// `crc64nvme`) and the base64 value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PartChecksum {
    pub algorithm: String,
    pub value: String,
}

pub use crate::version::same_version;

/// The S3 ETag of a multipart object: the MD5 of the parts' MD5s, then `-` and the count.
pub fn multipart_etag(part_etags: &[&str]) -> String {
    use md5::{Digest, Md5};
    let mut md5 = Md5::new();
    for etag in part_etags {
        let hexed = etag.trim_matches('"');
        match hex::decode(hexed) {
            Ok(raw) => md5.update(raw),
            // Not an MD5 (some stores use other ETags): still deterministic.
            Err(_) => md5.update(hexed.as_bytes()),
        }
    }
    format!("\"{}-{}\"", hex::encode(md5.finalize()), part_etags.len())
}

/// Checks a CompleteMultipartUpload part list against the parts uploaded: ascending numbers,
/// each one uploaded with that ETag. Returns the matching parts in order.
pub fn match_parts(
    requested: &[(i32, String)],
    uploaded: &[PartInfo],
) -> Result<Vec<PartInfo>, BackendError> {
    if requested.is_empty() {
        return Err(BackendError::Invalid {
            code: "MalformedXML",
            message: "CompleteMultipartUpload lists no parts".into(),
        });
    }
    let mut out = Vec::with_capacity(requested.len());
    let mut last = 0;
    for (number, etag) in requested {
        if *number <= last {
            return Err(BackendError::Invalid {
                code: "InvalidPartOrder",
                message: format!("part {number} is listed after part {last}; list parts in ascending order, each once"),
            });
        }
        last = *number;
        let want = etag.trim_matches('"');
        match uploaded.iter().find(|p| p.number == *number) {
            Some(p) if p.etag.trim_matches('"') == want => out.push(p.clone()),
            _ => {
                return Err(BackendError::Invalid {
                    code: "InvalidPart",
                    message: format!("part {number} with ETag {etag} was not uploaded; list the ETags UploadPart returned"),
                })
            }
        }
    }
    if let Some(small) = out[..out.len() - 1]
        .iter()
        .find(|p| p.size < MIN_PART_BYTES)
    {
        return Err(BackendError::Invalid {
            code: "EntityTooSmall",
            message: format!(
                "part {} is {} bytes; every part but the last must be at least 5 MiB, as on S3",
                small.number, small.size
            ),
        });
    }
    Ok(out)
}

/// S3's smallest part, but for the last.
pub const MIN_PART_BYTES: u64 = 5 * 1024 * 1024;

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

/// [`Backend::get_range`] for a backend that can only read whole objects: the whole object,
/// sliced.
pub async fn range_of_whole(
    backend: &dyn Backend,
    bucket: &str,
    key: &str,
    start: u64,
    end: u64,
) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
    let Some((info, body)) = backend.get(bucket, key).await? else {
        return Ok(None);
    };
    Ok(Some((info, slice_stream(body, start, end))))
}

/// [`Backend::get_part`] for a backend that can only read whole objects: the whole object
/// read once and sliced by [`ObjectInfo::parts`].
pub async fn part_of_whole(
    backend: &dyn Backend,
    bucket: &str,
    key: &str,
    number: u32,
    body: bool,
) -> Result<Option<ObjectPart>, BackendError> {
    let Some((info, stream)) = backend.get(bucket, key).await? else {
        return Ok(None);
    };
    let span = PartSpan::of(&info.parts, info.size, number)?;
    Ok(Some(ObjectPart {
        info,
        span,
        body: body.then(|| span.slice(stream)),
    }))
}

/// Bytes `start..=end` of a stream, dropping the rest as it passes.
pub fn slice_stream(body: ByteStream, start: u64, end: u64) -> ByteStream {
    use futures::StreamExt;
    // Stop reading at the chunk past `end`, then trim the chunks kept to the range.
    let mut read = 0u64;
    let mut offset = 0u64;
    body.take_while(move |chunk| {
        let go = read <= end;
        if let Ok(b) = chunk {
            read += b.len() as u64;
        }
        futures::future::ready(go)
    })
    .filter_map(move |chunk| {
        let out = match chunk {
            Err(e) => Some(Err(e)),
            Ok(bytes) => {
                let from = offset;
                let to = offset + bytes.len() as u64;
                offset = to;
                let lo = start.max(from);
                let hi = end.saturating_add(1).min(to);
                (lo < hi).then(|| Ok(bytes.slice((lo - from) as usize..(hi - from) as usize)))
            }
        };
        futures::future::ready(out)
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn slices_across_chunks() {
        let chunks: Vec<Result<Bytes, BodyError>> = vec![
            Ok(Bytes::from_static(b"0123")),
            Ok(Bytes::from_static(b"4567")),
            Ok(Bytes::from_static(b"89")),
        ];
        for (start, end, want) in [
            (0, 9, "0123456789"),
            (2, 5, "2345"),
            (4, 4, "4"),
            (8, 20, "89"),
        ] {
            let body = futures::stream::iter(chunks.clone()).boxed();
            let got: Vec<u8> = slice_stream(body, start, end)
                .map(|c| c.unwrap().to_vec())
                .concat()
                .await;
            assert_eq!(String::from_utf8(got).unwrap(), want, "{start}..={end}");
        }
    }

    #[test]
    fn part_lists_are_checked() {
        let uploaded = vec![
            PartInfo {
                number: 1,
                etag: "\"aa\"".into(),
                size: MIN_PART_BYTES,
                last_modified_ms: 0,
                checksum: None,
            },
            PartInfo {
                number: 2,
                etag: "\"bb\"".into(),
                size: 1,
                last_modified_ms: 0,
                checksum: None,
            },
        ];
        assert!(match_parts(&[(1, "aa".into()), (2, "\"bb\"".into())], &uploaded).is_ok());
        let code = |r: Result<Vec<PartInfo>, BackendError>| match r {
            Err(BackendError::Invalid { code, .. }) => code,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            code(match_parts(
                &[(2, "bb".into()), (1, "aa".into())],
                &uploaded
            )),
            "InvalidPartOrder"
        );
        assert_eq!(
            code(match_parts(&[(1, "zz".into())], &uploaded)),
            "InvalidPart"
        );
        assert_eq!(
            code(match_parts(&[(3, "aa".into())], &uploaded)),
            "InvalidPart"
        );
        assert_eq!(code(match_parts(&[], &uploaded)), "MalformedXML");
        // Every part but the last is at least 5 MiB; the last may be anything.
        let mut small = uploaded.clone();
        small[0].size = MIN_PART_BYTES - 1;
        assert_eq!(
            code(match_parts(&[(1, "aa".into()), (2, "bb".into())], &small)),
            "EntityTooSmall"
        );
        assert!(match_parts(&[(1, "aa".into())], &small).is_ok());
    }

    #[tokio::test]
    async fn parts_are_numbered_in_order_and_a_whole_object_is_part_one() {
        // Uploaded as parts 1, 3 and 5: asked for by those numbers.
        let sizes = [(1, MIN_PART_BYTES), (3, MIN_PART_BYTES), (5, 3)];
        let total = 2 * MIN_PART_BYTES + 3;
        assert_eq!(
            PartSpan::of(&sizes, total, 3).unwrap(),
            PartSpan {
                offset: MIN_PART_BYTES,
                len: MIN_PART_BYTES,
                count: Some(3)
            }
        );
        assert_eq!(PartSpan::of(&sizes, total, 5).unwrap().offset, total - 3);
        for number in [0, 2, 4, 6, u32::MAX] {
            match PartSpan::of(&sizes, total, number) {
                Err(BackendError::NoSuchPart { count: 3, .. }) => {}
                other => panic!("part {number}: {other:?}"),
            }
        }
        assert_eq!(
            PartSpan::of(&[], 10, 1).unwrap(),
            PartSpan {
                offset: 0,
                len: 10,
                count: None
            }
        );
        assert!(matches!(
            PartSpan::of(&[], 10, 2),
            Err(BackendError::NoSuchPart { count: 1, .. })
        ));
        // The slice is the part's bytes, an empty part none.
        let body = || -> ByteStream {
            Box::pin(futures::stream::iter(vec![
                Ok(Bytes::from_static(b"abc")),
                Ok(Bytes::from_static(b"defg")),
            ]))
        };
        let parts = [(1, 2), (2, 4), (3, 0), (4, 1)];
        let span = PartSpan::of(&parts, 7, 2).unwrap();
        let got: Vec<u8> = span
            .slice(body())
            .map(|c| c.unwrap().to_vec())
            .concat()
            .await;
        assert_eq!(got, b"cdef");
        let empty = PartSpan::of(&parts, 7, 3).unwrap();
        assert_eq!(empty.slice(body()).count().await, 0);
    }

    #[test]
    fn multipart_etag_is_md5_of_md5s() {
        // Two parts "a" and "b": md5("a") = 0cc175b9..., md5("b") = 92eb5ffe...
        let etag = multipart_etag(&[
            "\"0cc175b9c0f1b6a831c399e269772661\"",
            "\"92eb5ffee6ae2fec3ad71c777531578f\"",
        ]);
        assert!(etag.ends_with("-2\""), "{etag}");
    }
}
