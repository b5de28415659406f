//! Client-driven multipart uploads (the S3 gateway's CreateMultipartUpload, UploadPart and
//! CompleteMultipartUpload) on the store: each maps one to one onto the store's own upload, so
//! parts stream straight through and completion is the store's conditional
//! CompleteMultipartUpload, made under the scope's lock like any other commit.

use super::errors::{classify, S3Failure};
use super::S3Backend;
use crate::backend::{
    multipart_etag, BackendError, BodyError, ByteStream, ObjectMeta, PartInfo, Staged, StagedBody,
};
use aws_sdk_s3::primitives::ByteStream as SdkStream;
use aws_smithy_types::body::SdkBody;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Parts without a Content-Length are buffered to learn their size; above this they are refused.
const UNSIZED_PART_LIMIT: usize = 64 * 1024 * 1024;

/// A body of known length that the SDK can send with a Content-Length while it streams.
struct SizedBody {
    // The SDK wants a Sync body; a Mutex makes the stream Sync, and `get_mut` never locks.
    inner: std::sync::Mutex<ByteStream>,
    len: u64,
}

impl http_body::Body for SizedBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BodyError>>> {
        let inner = match self.inner.get_mut() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        inner
            .poll_next_unpin(cx)
            .map(|c| c.map(|r| r.map(http_body::Frame::data)))
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len)
    }
}

impl S3Backend {
    pub(super) async fn part_body(
        body: ByteStream,
        size: Option<u64>,
    ) -> Result<SdkStream, BackendError> {
        if let Some(len) = size {
            return Ok(SdkStream::new(SdkBody::from_body_1_x(SizedBody {
                inner: std::sync::Mutex::new(body),
                len,
            })));
        }
        let mut buf = BytesMut::new();
        let mut body = body;
        while let Some(chunk) = body.next().await {
            buf.extend_from_slice(&chunk?);
            if buf.len() > UNSIZED_PART_LIMIT {
                return Err(BackendError::Invalid {
                    code: "MissingContentLength",
                    message:
                        "a part without a Content-Length may be at most 64 MiB; send Content-Length"
                            .into(),
                });
            }
        }
        Ok(SdkStream::from(buf.freeze()))
    }

    pub(super) async fn put_client_part(
        &self,
        key: &str,
        handle: &str,
        number: i32,
        body: ByteStream,
        size: Option<u64>,
    ) -> Result<PartInfo, BackendError> {
        let body = Self::part_body(body, size).await?;
        // A streamed body cannot be replayed, so this goes through the client without retries.
        let out = self
            .clients
            .writes
            .upload_part()
            .bucket(&self.bucket)
            .key(self.store_key(key))
            .upload_id(handle)
            .part_number(number)
            .body(body)
            .send()
            .await
            .map_err(|e| match classify("UploadPart", e) {
                S3Failure::NotFound => BackendError::NoSuchUpload(handle.to_string()),
                other => other.into_backend("UploadPart"),
            })?;
        Ok(PartInfo {
            number,
            etag: out.e_tag().unwrap_or_default().to_string(),
            size: size.unwrap_or_default(),
            last_modified_ms: crate::wall_clock::now_ms(),
        })
    }

    /// The store checks the part list again at CompleteMultipartUpload; the gate has already
    /// checked it against the parts it saw uploaded, so a bad list is the client's 400.
    pub(super) fn assemble_parts(
        &self,
        bucket: &str,
        key: &str,
        handle: &str,
        chosen: &[PartInfo],
        meta: ObjectMeta,
    ) -> Staged {
        let etags: Vec<&str> = chosen.iter().map(|p| p.etag.as_str()).collect();
        let etag = multipart_etag(&etags);
        Staged {
            body: StagedBody::Multipart {
                upload_id: handle.to_string(),
                parts: chosen.iter().map(|p| (p.number, p.etag.clone())).collect(),
            },
            bucket: bucket.to_string(),
            key: key.to_string(),
            version: Some(etag.clone()),
            etag,
            size: chosen.iter().map(|p| p.size).sum(),
            meta,
        }
    }

    /// Aborts the store's upload; one already completed or aborted is fine.
    pub(super) async fn drop_upload(&self, key: &str, handle: &str) -> Result<(), BackendError> {
        let result = self
            .clients
            .reads
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(self.store_key(key))
            .upload_id(handle)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => match classify("AbortMultipartUpload", e) {
                S3Failure::NotFound => Ok(()),
                other => Err(other.into_backend("AbortMultipartUpload")),
            },
        }
    }
}
