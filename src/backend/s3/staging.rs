//! Staging on the store: bodies up to the multipart threshold are spooled; larger ones
//! stream into a multipart upload, a few spooled parts in flight while the next is read, which
//! a guard aborts if the request is dropped. Also the start-up sweep of uploads a crash abandoned.

use super::*;
pub(super) use crate::backend::spool::{PartReader, SpooledPart};
use futures::StreamExt;

/// Parts of one large body sent to the store at once while the next is read.
const PARTS_IN_FLIGHT: usize = 4;

/// Aborts a multipart upload whose staging did not complete, when dropped armed.
pub(super) struct UploadGuard {
    pub(super) client: aws_sdk_s3::Client,
    pub(super) bucket: String,
    pub(super) store_key: String,
    pub(super) upload_id: Option<String>,
}

impl Drop for UploadGuard {
    fn drop(&mut self) {
        let Some(upload_id) = self.upload_id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // The start-up sweep (abandoned_upload_secs) collects it.
            tracing::warn!(key = %self.store_key, %upload_id, "a cancelled request's multipart upload could not be aborted: no runtime");
            return;
        };
        let (client, bucket, key) = (
            self.client.clone(),
            std::mem::take(&mut self.bucket),
            std::mem::take(&mut self.store_key),
        );
        runtime.spawn(async move {
            let result = client
                .abort_multipart_upload()
                .bucket(&bucket)
                .key(&key)
                .upload_id(&upload_id)
                .send()
                .await;
            match result.map_err(|e| classify("AbortMultipartUpload", e)) {
                Ok(_) | Err(S3Failure::NotFound) => {
                    tracing::debug!(key, upload_id, "aborted the multipart upload of a cancelled request")
                }
                Err(e) => {
                    let e = e.into_backend("AbortMultipartUpload");
                    tracing::warn!(key, upload_id, error = %e, "could not abort the multipart upload of a cancelled request; the next start-up sweeps it")
                }
            }
        });
    }
}

impl S3Backend {
    /// CreateMultipartUpload. `split`: fencegate cuts a body written whole into parts of its
    /// own ([`parts::SPLIT_META`]), not a client's multipart upload.
    pub(super) async fn start_multipart(
        &self,
        key: &str,
        meta: &ObjectMeta,
        split: bool,
    ) -> Result<String, BackendError> {
        let mut metadata = Self::metadata(meta);
        if split {
            metadata.insert(parts::SPLIT_META.into(), self.part_size.to_string());
        }
        let out = self
            .clients
            .reads
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(self.store_key(key))
            .content_type(content_type(meta))
            .set_cache_control(meta.header("cache-control"))
            .set_content_disposition(meta.header("content-disposition"))
            .set_content_encoding(meta.header("content-encoding"))
            .set_content_language(meta.header("content-language"))
            .set_expires(expires(meta))
            .set_metadata(Some(metadata))
            .send()
            .await
            .map_err(|e| {
                classify("CreateMultipartUpload", e).into_backend("CreateMultipartUpload")
            })?;
        out.upload_id().map(str::to_string).ok_or_else(|| {
            BackendError::Failing("CreateMultipartUpload returned no upload id".into())
        })
    }

    pub(super) async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        number: i32,
        part: &spool::Spooled,
        md5: &[u8],
    ) -> Result<String, BackendError> {
        // Part uploads are idempotent (same number, same bytes), so the retrying client is
        // safe; a spooled part can be read again for each attempt.
        let out = self
            .clients
            .reads
            .upload_part()
            .bucket(&self.bucket)
            .key(self.store_key(key))
            .upload_id(upload_id)
            .part_number(number)
            .content_length(part.len() as i64)
            .content_md5(aws_smithy_types::base64::encode(md5))
            .body(multipart::spooled_body(part))
            .send()
            .await
            .map_err(|e| classify("UploadPart", e).into_backend("UploadPart"))?;
        let etag = out
            .e_tag()
            .map(str::to_string)
            .ok_or_else(|| BackendError::Failing("UploadPart returned no ETag".into()))?;
        let sent = format!("\"{}\"", hex::encode(md5));
        self.check_kept("UploadPart", key, &sent, &etag)?;
        Ok(etag)
    }

    /// Aborts a losing upload; a failure is only logged.
    pub(super) async fn abort(&self, key: &str, upload_id: &str) {
        if let Err(e) = self.drop_upload(key, upload_id).await {
            // The store's lifecycle rules (AbortIncompleteMultipartUpload) collect what is left.
            tracing::warn!(key, upload_id, error = %e, "could not abort a losing multipart upload");
        }
    }

    /// Streams the rest of a large body into parts (`first`, already spooled and full, is the
    /// first one); on any error the upload is aborted. Returns the upload, its parts, the MD5
    /// of their MD5s (the store's ETag for the object) and the MD5 of the whole body (the ETag
    /// its client is answered, as for any object written whole).
    pub(super) async fn stage_multipart(
        &self,
        key: &str,
        meta: &ObjectMeta,
        first: SpooledPart,
        body: &mut PartReader<'_>,
        size: &mut u64,
    ) -> Result<(String, Vec<(i32, String)>, Md5, Md5), BackendError> {
        let upload_id = self.start_multipart(key, meta, true).await?;
        // The first part's digest so far is the whole body's so far.
        let mut whole = first.md5.clone();
        // A request dropped while its body streams (the client hung up) never reaches the
        // match below; the guard aborts the upload then, so it does not linger in the store.
        let mut guard = UploadGuard {
            client: self.clients.reads.clone(),
            bucket: self.bucket.clone(),
            store_key: self.store_key(key),
            upload_id: Some(upload_id.clone()),
        };
        // Parts go up while the next ones are read: up to PARTS_IN_FLIGHT at once, each
        // spooled (to a spill file past the memory budget), so memory stays bounded. They are
        // polled by this request's own future: a client that hangs up drops them all.
        let mut in_flight = futures::stream::FuturesUnordered::new();
        let result: Result<(Vec<(i32, String)>, Md5), BackendError> = async {
            let whole = &mut whole;
            let in_flight = &mut in_flight;
            let mut md5_of_parts = Md5::new();
            let mut parts = Vec::new();
            let mut current = first;
            let mut number = 0;
            loop {
                let SpooledPart {
                    body: part,
                    md5,
                    ended,
                } = current;
                let digest = md5.finalize();
                md5_of_parts.update(digest);
                number += 1;
                let upload_id = upload_id.as_str();
                in_flight.push(async move {
                    let etag = self
                        .upload_part(key, upload_id, number, &part, &digest)
                        .await?;
                    Ok::<_, BackendError>((number, etag))
                });
                if ended {
                    break;
                }
                while in_flight.len() >= PARTS_IN_FLIGHT {
                    if let Some(done) = in_flight.next().await {
                        parts.push(done?);
                    }
                }
                // The next part is read while those in flight go on.
                let next = self.spool_part(body, size, Some(&mut *whole));
                tokio::pin!(next);
                current = loop {
                    tokio::select! {
                        next = &mut next => break next?,
                        Some(done) = in_flight.next(), if !in_flight.is_empty() => parts.push(done?),
                    }
                };
                if current.body.is_empty() {
                    // The body ended right at a part boundary.
                    break;
                }
            }
            while let Some(done) = in_flight.next().await {
                parts.push(done?);
            }
            parts.sort_unstable_by_key(|(n, _)| *n);
            Ok((parts, md5_of_parts))
        }
        .await;
        match result {
            Ok((parts, md5_of_parts)) => {
                // A staged upload is the gate's to commit or discard.
                guard.upload_id = None;
                drop(in_flight);
                Ok((upload_id, parts, md5_of_parts, whole))
            }
            Err(e) => {
                // The parts still on their way are waited for first: a store may keep a part
                // whose upload was aborted while it was in progress (S3 says to abort again),
                // out of reach of the start-up sweep. A failed upload is aborted before the
                // error is answered; the guard stays armed until then, for a client that hangs
                // up meanwhile.
                while in_flight.next().await.is_some() {}
                self.abort(key, &upload_id).await;
                guard.upload_id = None;
                Err(e)
            }
        }
    }

    /// Spools the body's next part, up to the part size ([`spool::Spooler::spool_part`]).
    pub(super) async fn spool_part(
        &self,
        body: &mut PartReader<'_>,
        size: &mut u64,
        whole: Option<&mut Md5>,
    ) -> Result<SpooledPart, BackendError> {
        self.spooler
            .spool_part(body, self.part_size as u64, size, whole)
            .await
    }

    /// Aborts the multipart uploads under this bucket's prefix that began more than `min_age`
    /// ago and whose ids are not in `known` (the uploads clients started through the S3
    /// gateway). What is left is fencegate's own staging, from a request that never finished
    /// (a crash, or a cancelled request whose abort failed). Returns how many were aborted.
    pub async fn sweep_uploads(
        &self,
        known: &std::collections::HashSet<String>,
        min_age: std::time::Duration,
    ) -> Result<usize, BackendError> {
        let now_ms = crate::wall_clock::now_ms() as i64;
        let mut aborted = 0;
        let mut key_marker: Option<String> = None;
        let mut id_marker: Option<String> = None;
        loop {
            let page = self
                .clients
                .reads
                .list_multipart_uploads()
                .bucket(&self.bucket)
                .prefix(&self.prefix)
                .set_key_marker(key_marker.clone())
                .set_upload_id_marker(id_marker.clone())
                .send()
                .await
                .map_err(|e| {
                    classify("ListMultipartUploads", e).into_backend("ListMultipartUploads")
                })?;
            for upload in page.uploads() {
                let (Some(store_key), Some(id)) = (upload.key(), upload.upload_id()) else {
                    continue;
                };
                let Some(key) = store_key.strip_prefix(&self.prefix) else {
                    continue;
                };
                let age_ms = upload
                    .initiated()
                    .and_then(|t| t.to_millis().ok())
                    .map_or(i64::MAX, |t| now_ms.saturating_sub(t));
                if known.contains(id)
                    || age_ms < i64::try_from(min_age.as_millis()).unwrap_or(i64::MAX)
                {
                    continue;
                }
                self.drop_upload(key, id).await?;
                tracing::info!(bucket = %self.bucket, key = store_key, upload_id = id, age_ms, "aborted an abandoned multipart upload");
                aborted += 1;
            }
            if page.is_truncated() != Some(true) {
                return Ok(aborted);
            }
            key_marker = page.next_key_marker().map(str::to_string);
            id_marker = page.next_upload_id_marker().map(str::to_string);
            if key_marker.is_none() && id_marker.is_none() {
                return Ok(aborted);
            }
        }
    }
}
