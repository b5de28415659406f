//! Client-driven multipart uploads (the S3 gateway's CreateMultipartUpload, UploadPart and
//! CompleteMultipartUpload) on the store: each maps one to one onto the store's own upload, so
//! parts stream straight through and completion is the store's conditional
//! CompleteMultipartUpload, made under the scope's lock like any other commit.

use super::errors::{classify, S3Failure};
use super::spool::Spooled;
use super::S3Backend;
use crate::backend::{
    multipart_etag, BackendError, BodyError, ByteStream, ObjectMeta, PartInfo, Staged, StagedBody,
};
use aws_sdk_s3::primitives::ByteStream as SdkStream;
use aws_smithy_types::body::SdkBody;
use bytes::Bytes;
use futures::StreamExt;
use md5::{Digest, Md5};
use std::pin::Pin;
use std::task::{Context, Poll};

/// Parts without a Content-Length are buffered to learn their size; above this they are refused.
const UNSIZED_PART_LIMIT: u64 = 64 * 1024 * 1024;

/// A body of known length that the SDK can send with a Content-Length while it streams.
struct SizedBody {
    // The SDK wants a Sync body; a Mutex makes the stream Sync, and `get_mut` never locks.
    inner: std::sync::Mutex<ByteStream>,
    len: u64,
    /// Where the client's body error is kept, for a body streamed straight to the store: the
    /// SDK reports it only as a failed request, which would read as the store's fault.
    failed: Option<BodyFailure>,
    /// Bytes passed on so far.
    sent: u64,
    /// The chunk that reaches `len`, held until the stream is seen to end there: the HTTP
    /// client stops polling at `len`, so a longer body (a client's declared length short of
    /// what it sends) or an error at the end (a Content-MD5 that does not match) would
    /// otherwise go unseen.
    last: Option<Bytes>,
    /// The inner stream has ended (it is not polled again).
    ended: bool,
}

impl SizedBody {
    fn new(inner: ByteStream, len: u64, failed: Option<BodyFailure>) -> SizedBody {
        SizedBody {
            inner: std::sync::Mutex::new(inner),
            len,
            failed,
            sent: 0,
            last: None,
            ended: false,
        }
    }

    fn fail(&self, e: BodyError) -> Poll<Option<Result<http_body::Frame<Bytes>, BodyError>>> {
        if let Some(slot) = &self.failed {
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
        }
        Poll::Ready(Some(Err(e)))
    }
}

/// The error a client's body ended with, if it did, while the SDK sent it.
type BodyFailure = std::sync::Arc<std::sync::Mutex<Option<BodyError>>>;

impl http_body::Body for SizedBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BodyError>>> {
        loop {
            let this = &mut *self;
            if this.ended {
                return Poll::Ready(None);
            }
            let inner = match this.inner.get_mut() {
                Ok(s) => s,
                Err(poisoned) => poisoned.into_inner(),
            };
            let polled = match inner.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(p) => p,
            };
            match polled {
                Some(Err(e)) => return self.fail(e),
                Some(Ok(chunk)) if chunk.is_empty() => {}
                Some(Ok(chunk)) => {
                    this.sent += chunk.len() as u64;
                    if this.sent > this.len || this.last.is_some() {
                        let len = this.len;
                        return self.fail(BodyError::Broken(format!(
                            "the body is longer than the {len} bytes its request declared"
                        )));
                    }
                    if this.sent < this.len {
                        return Poll::Ready(Some(Ok(http_body::Frame::data(chunk))));
                    }
                    // Reaches the length: held until the stream is seen to end.
                    this.last = Some(chunk);
                }
                None => {
                    this.ended = true;
                    if this.sent < this.len {
                        let (sent, len) = (this.sent, this.len);
                        return self.fail(BodyError::Broken(format!(
                            "the body ended after {sent} of the {len} bytes its request declared"
                        )));
                    }
                    return Poll::Ready(this.last.take().map(|c| Ok(http_body::Frame::data(c))));
                }
            }
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len)
    }
}

/// A spooled body for the SDK: in memory as it is, otherwise read from its file again for
/// each attempt.
pub(super) fn spooled_body(body: &Spooled) -> SdkStream {
    if let Some(bytes) = body.bytes() {
        return SdkStream::from(bytes.clone());
    }
    let (body, len) = (body.clone(), body.len());
    SdkStream::new(SdkBody::retryable(move || {
        SdkBody::from_body_1_x(SizedBody::new(body.stream(), len, None))
    }))
}

impl S3Backend {
    /// A part streams straight through when its length is known; without one it is spooled
    /// first to learn it (within the memory budget, or on disk).
    pub(super) async fn part_body(
        &self,
        mut body: ByteStream,
        size: Option<u64>,
        failed: &BodyFailure,
    ) -> Result<SdkStream, BackendError> {
        if let Some(len) = size.filter(|&len| len > 0) {
            return Ok(SdkStream::new(SdkBody::from_body_1_x(SizedBody::new(
                body,
                len,
                Some(failed.clone()),
            ))));
        }
        let spool_err = |e: std::io::Error| {
            BackendError::Failing(format!(
                "cannot spool a part on its way to the store: {e}; check the free space in the data directory's spool/"
            ))
        };
        let mut spool = self.spooler.spool();
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            if spool.len() + chunk.len() as u64 > UNSIZED_PART_LIMIT {
                return Err(BackendError::Invalid {
                    code: "MissingContentLength",
                    message:
                        "a part without a Content-Length may be at most 64 MiB; send Content-Length"
                            .into(),
                });
            }
            spool.push(&chunk).await.map_err(spool_err)?;
        }
        Ok(spooled_body(&spool.finish().await.map_err(spool_err)?))
    }

    pub(super) async fn put_client_part(
        &self,
        key: &str,
        handle: &str,
        number: i32,
        body: ByteStream,
        size: Option<u64>,
    ) -> Result<PartInfo, BackendError> {
        let failed = BodyFailure::default();
        // The MD5 of what went to the store, for its answer's ETag (S3Backend::check_kept).
        // Its length too: a part sent without Content-Length is measured here (EntityTooSmall
        // is judged on it at completion).
        let digest = std::sync::Arc::new(std::sync::Mutex::new((Md5::new(), 0u64)));
        let hashing = digest.clone();
        let body: ByteStream = Box::pin(body.inspect(move |chunk| {
            if let Ok(bytes) = chunk {
                let mut seen = hashing.lock().unwrap_or_else(|p| p.into_inner());
                seen.0.update(bytes);
                seen.1 += bytes.len() as u64;
            }
        }));
        let body = self.part_body(body, size, &failed).await?;
        // A streamed body cannot be replayed, so this goes through the client without retries.
        let sent = self
            .clients
            .writes
            .upload_part()
            .bucket(&self.bucket)
            .key(self.store_key(key))
            .upload_id(handle)
            .part_number(number)
            .body(body)
            .send()
            .await;
        // The client's body failed (cut short, too large, or not its Content-MD5): its error,
        // not the store's.
        if let Some(e) = failed.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(BackendError::Body(e));
        }
        let out = sent.map_err(|e| match classify("UploadPart", e) {
            S3Failure::NotFound => BackendError::NoSuchUpload(handle.to_string()),
            other => other.into_backend("UploadPart"),
        })?;
        let etag = out.e_tag().unwrap_or_default().to_string();
        let (sent, length) = std::mem::take(&mut *digest.lock().unwrap_or_else(|p| p.into_inner()));
        self.check_kept(
            "UploadPart",
            key,
            &format!("\"{}\"", hex::encode(sent.finalize())),
            &etag,
        )?;
        Ok(PartInfo {
            number,
            etag,
            size: length,
            last_modified_ms: crate::wall_clock::now_ms(),
            checksum: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;

    /// Polls a body to its end: the data it gave, or the error it ended with.
    async fn drain(mut body: SizedBody) -> Result<Vec<u8>, BodyError> {
        let mut out = Vec::new();
        while let Some(frame) =
            futures::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            out.extend_from_slice(&frame?.into_data().unwrap());
        }
        Ok(out)
    }

    fn stream(items: Vec<Result<&'static [u8], BodyError>>) -> ByteStream {
        futures::stream::iter(items.into_iter().map(|r| r.map(Bytes::from_static))).boxed()
    }

    #[tokio::test]
    async fn a_streamed_body_is_passed_on_only_if_it_is_exactly_its_length() {
        let ok = SizedBody::new(stream(vec![Ok(b"hel"), Ok(b"lo"), Ok(b"")]), 5, None);
        assert_eq!(drain(ok).await.unwrap(), b"hello");
        // Longer than declared: an error, never a cut-short part.
        let slot = BodyFailure::default();
        let long = SizedBody::new(
            stream(vec![Ok(b"hello"), Ok(b"WORLD")]),
            5,
            Some(slot.clone()),
        );
        assert!(drain(long).await.is_err());
        assert!(slot.lock().unwrap().is_some(), "the client's error is kept");
        // An error in place of the end (a Content-MD5 that does not match) is seen too.
        let slot = BodyFailure::default();
        let bad = stream(vec![
            Ok(b"hello"),
            Err(BodyError::BadDigest("not its MD5".into())),
        ]);
        let bad = SizedBody::new(bad, 5, Some(slot.clone()));
        assert!(matches!(drain(bad).await, Err(BodyError::BadDigest(_))));
        assert!(matches!(
            *slot.lock().unwrap(),
            Some(BodyError::BadDigest(_))
        ));
        // Shorter than declared.
        let short = SizedBody::new(stream(vec![Ok(b"hel")]), 5, None);
        assert!(drain(short).await.is_err());
    }
}
