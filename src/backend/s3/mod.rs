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

mod client;
mod errors;
mod multipart;
mod parts;
mod presigned;
pub mod probe;
pub mod spool;

pub use client::{build as build_clients, S3Clients};

use super::{
    Backend, BackendError, BodyError, ByteStream, ListPage, ObjectInfo, ObjectMeta, ObjectPart,
    PartInfo, Staged, StagedBody,
};
use async_trait::async_trait;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use bytes::Bytes;
use errors::{classify, S3Failure};
use futures::StreamExt;
use md5::{Digest, Md5};
use std::collections::HashMap;

/// The metadata name that carries the token (`x-amz-meta-fencing-token`).
pub const TOKEN_META: &str = "fencing-token";

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

    pub fn set_etags_are_md5(&self, md5: bool) {
        self.etags_are_md5
            .store(md5, std::sync::atomic::Ordering::Relaxed);
    }

    /// Where the store's ETags are MD5s, refuses an answer whose ETag is not the MD5 of the
    /// bytes sent (`sent`, `"hex"`): the store kept other bytes (moto, for one, parses a body
    /// sent as `application/x-www-form-urlencoded` and keeps an empty object). Nothing is
    /// acknowledged then (issue 14 §3; docs/design.md, "The store's answer is checked").
    fn check_kept(
        &self,
        what: &str,
        key: &str,
        sent: &str,
        answered: &str,
    ) -> Result<(), BackendError> {
        if !self
            .etags_are_md5
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Ok(());
        }
        let bare = |e: &str| e.trim_matches('"').to_ascii_lowercase();
        if bare(sent) == bare(answered) {
            return Ok(());
        }
        crate::metrics::store_integrity_failure(what);
        tracing::error!(
            key,
            operation = what,
            sent,
            answered,
            "the store kept other bytes than fencegate sent"
        );
        Err(BackendError::KeptDifferentBytes(format!(
            "the store answered {what} of {key} with ETag {answered}, but the MD5 of the bytes fencegate sent is {sent}: the store kept other bytes, so nothing was acknowledged and the next write to the key is refused as BypassDetected until the object is inspected; check for a proxy that rewrites bodies, or a store that parses bodies by their Content-Type (moto keeps an empty object for application/x-www-form-urlencoded; send the body as application/octet-stream)"
        )))
    }

    pub fn set_conditional_delete(&self, honoured: bool) {
        self.conditional_delete
            .store(honoured, std::sync::atomic::Ordering::Relaxed);
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

    /// User metadata as the store takes it. A value that is not printable ASCII goes RFC 2047
    /// encoded, as AWS answers such values: stores differ on raw UTF-8 (ministack keeps it and
    /// answers bytes the SDK cannot parse, so the object could no longer be read or deleted).
    fn metadata(meta: &ObjectMeta) -> HashMap<String, String> {
        let mut m: HashMap<String, String> = meta
            .user_meta
            .iter()
            .filter(|(k, _)| k.as_str() != TOKEN_META && k.as_str() != parts::SPLIT_META)
            .map(|(k, v)| (k.clone(), encode_word(v)))
            .collect();
        if let Some(t) = meta.token {
            m.insert(TOKEN_META.into(), t.to_string());
        }
        m
    }

    fn object_meta(
        content_type: Option<&str>,
        metadata: Option<&HashMap<String, String>>,
        headers: std::collections::BTreeMap<String, String>,
    ) -> ObjectMeta {
        let mut user_meta: std::collections::BTreeMap<String, String> = metadata
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.to_lowercase(), decode_word(v)))
                    .collect()
            })
            .unwrap_or_default();
        let token = user_meta.remove(TOKEN_META).and_then(|t| t.parse().ok());
        user_meta.remove(parts::SPLIT_META);
        ObjectMeta {
            content_type: content_type.map(str::to_string),
            user_meta,
            token,
            headers,
        }
    }

    /// An object's description from the fields S3 answers HEAD, GET and LIST with.
    fn info(
        key: &str,
        etag: Option<&str>,
        size: Option<i64>,
        modified: Option<&aws_smithy_types::DateTime>,
        meta: ObjectMeta,
    ) -> ObjectInfo {
        let etag = etag.unwrap_or_default().to_string();
        ObjectInfo {
            key: key.to_string(),
            size: size.unwrap_or(0).max(0) as u64,
            version: etag.clone(),
            etag,
            last_modified_ms: modified
                .and_then(|t| t.to_millis().ok())
                .unwrap_or(0)
                .max(0) as u64,
            meta,
            parts: Vec::new(),
        }
    }

    /// CreateMultipartUpload. `split`: fencegate cuts a body written whole into parts of its
    /// own ([`parts::SPLIT_META`]), not a client's multipart upload.
    async fn start_multipart(
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
            .set_content_type(meta.content_type.clone())
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

    async fn upload_part(
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
    async fn abort(&self, key: &str, upload_id: &str) {
        if let Err(e) = self.drop_upload(key, upload_id).await {
            // The store's lifecycle rules (AbortIncompleteMultipartUpload) collect what is left.
            tracing::warn!(key, upload_id, error = %e, "could not abort a losing multipart upload");
        }
    }

    /// Streams the rest of a large body into parts (`first`, already spooled and full, is the
    /// first one); on any error the upload is aborted. Returns the upload, its parts and the
    /// MD5 of their MD5s (S3's ETag for the object).
    async fn stage_multipart(
        &self,
        key: &str,
        meta: &ObjectMeta,
        first: SpooledPart,
        body: &mut PartReader<'_>,
        size: &mut u64,
    ) -> Result<(String, Vec<(i32, String)>, Md5), BackendError> {
        let upload_id = self.start_multipart(key, meta, true).await?;
        // A request dropped while its body streams (the client hung up) never reaches the
        // match below; the guard aborts the upload then, so it does not linger in the store.
        let mut guard = UploadGuard {
            client: self.clients.reads.clone(),
            bucket: self.bucket.clone(),
            store_key: self.store_key(key),
            upload_id: Some(upload_id.clone()),
        };
        let result: Result<(Vec<(i32, String)>, Md5), BackendError> = async {
            let mut md5_of_parts = Md5::new();
            let mut parts = Vec::new();
            let mut current = first;
            loop {
                let SpooledPart {
                    body: part,
                    md5,
                    ended,
                } = current;
                let digest = md5.finalize();
                md5_of_parts.update(digest);
                let number = parts.len() as i32 + 1;
                let etag = self
                    .upload_part(key, &upload_id, number, &part, &digest)
                    .await?;
                parts.push((number, etag));
                if ended {
                    break;
                }
                // Only one part is spooled at a time: this one goes before the next is read.
                drop(part);
                current = self.spool_part(body, size).await?;
                if current.body.is_empty() {
                    // The body ended right at a part boundary.
                    break;
                }
            }
            Ok((parts, md5_of_parts))
        }
        .await;
        // Either way the guard's work is done here: a staged upload is the gate's to commit or
        // discard, and a failed one is aborted now, before the error is answered.
        guard.upload_id = None;
        match result {
            Ok((parts, md5_of_parts)) => Ok((upload_id, parts, md5_of_parts)),
            Err(e) => {
                self.abort(key, &upload_id).await;
                Err(e)
            }
        }
    }

    /// Spools the body's next part: up to the part size, or to the body's end. A chunk that
    /// straddles the part size is split, its rest held back for the next part.
    async fn spool_part(
        &self,
        body: &mut PartReader<'_>,
        size: &mut u64,
    ) -> Result<SpooledPart, BackendError> {
        let mut part = self.spooler.spool();
        let mut md5 = Md5::new();
        let limit = self.part_size as u64;
        let spool_err = |e: std::io::Error| {
            BackendError::Failing(format!(
                "cannot spool a body on its way to the store: {e}; check the free space in the data directory's spool/"
            ))
        };
        let ended = loop {
            let Some(chunk) = body.next().await else {
                break true;
            };
            let chunk = chunk?;
            let room = (limit - part.len()) as usize;
            if room == 0 {
                body.held = Some(chunk);
                break false;
            }
            let now = if chunk.len() > room {
                body.held = Some(chunk.slice(room..));
                chunk.slice(..room)
            } else {
                chunk
            };
            *size += now.len() as u64;
            md5.update(&now);
            part.push(&now).await.map_err(spool_err)?;
        };
        Ok(SpooledPart {
            body: part.finish().await.map_err(spool_err)?,
            md5,
            ended,
        })
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

    /// A commit answered without an ETag: read it back. The caller still holds the scope's
    /// lock, so what is there now is the object just committed (barring a write around
    /// fencegate, which the next commit's condition catches).
    async fn etag_after_commit(&self, staged: &Staged) -> Result<String, BackendError> {
        match self.head(&staged.bucket, &staged.key).await? {
            Some(info) if !info.etag.is_empty() => Ok(info.etag),
            _ => Err(BackendError::Failing(format!(
                "the store accepted the commit of {} but reports no ETag for it; check that the store returns ETags on PutObject, CompleteMultipartUpload or HeadObject",
                staged.key
            ))),
        }
    }

    /// After a commit whose outcome is unknown: did it land? Read the ETag back.
    async fn landed(&self, staged: &Staged) -> Option<ObjectInfo> {
        match self.head(&staged.bucket, &staged.key).await {
            Ok(Some(info)) if info.etag == staged.etag => Some(info),
            _ => None,
        }
    }

    /// Sends the conditional commit; returns the ETag the store answered with, if any.
    async fn send_commit(
        &self,
        staged: &Staged,
        meta: &ObjectMeta,
        expected: Option<&str>,
        not_after: Option<std::time::SystemTime>,
    ) -> Result<Option<String>, S3Failure> {
        let key = self.store_key(&staged.key);
        if let Some(not_after) = not_after {
            return self
                .send_commit_by(staged, meta, &key, expected, not_after)
                .await;
        }
        let (if_match, if_none_match) = match expected {
            Some(etag) => (Some(etag.to_string()), None),
            None => (None, Some("*".to_string())),
        };
        match &staged.body {
            StagedBody::Spooled(body) => self
                .clients
                .writes
                .put_object()
                .bucket(&self.bucket)
                .key(key)
                .content_length(body.len() as i64)
                .set_content_md5(content_md5(&staged.etag))
                .body(multipart::spooled_body(body))
                .set_content_type(meta.content_type.clone())
                .set_cache_control(meta.header("cache-control"))
                .set_content_disposition(meta.header("content-disposition"))
                .set_content_encoding(meta.header("content-encoding"))
                .set_content_language(meta.header("content-language"))
                .set_expires(expires(meta))
                .set_metadata(Some(Self::metadata(meta)))
                .set_if_match(if_match)
                .set_if_none_match(if_none_match)
                .send()
                .await
                .map(|out| out.e_tag().map(str::to_string))
                .map_err(|e| classify("PutObject", e)),
            StagedBody::Multipart { upload_id, parts } => {
                let parts = parts
                    .iter()
                    .map(|(n, e)| CompletedPart::builder().part_number(*n).e_tag(e).build())
                    .collect();
                self.clients
                    .writes
                    .complete_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(upload_id)
                    .multipart_upload(
                        CompletedMultipartUpload::builder()
                            .set_parts(Some(parts))
                            .build(),
                    )
                    .set_if_match(if_match)
                    .set_if_none_match(if_none_match)
                    .send()
                    .await
                    .map(|out| out.e_tag().map(str::to_string))
                    .map_err(|e| classify("CompleteMultipartUpload", e))
            }
            // Not staged by this backend: refuse rather than panic.
            StagedBody::Handle(_) => Err(S3Failure::Fault(BackendError::Failing(
                "a body staged by another backend cannot be committed to s3".into(),
            ))),
        }
    }
    /// [`Self::send_commit`] in cluster mode: presigned to be refused after `not_after`.
    async fn send_commit_by(
        &self,
        staged: &Staged,
        meta: &ObjectMeta,
        key: &str,
        expected: Option<&str>,
        not_after: std::time::SystemTime,
    ) -> Result<Option<String>, S3Failure> {
        let mut headers = vec![match expected {
            Some(etag) => ("if-match".to_string(), etag.to_string()),
            None => ("if-none-match".to_string(), "*".to_string()),
        }];
        let (op, method, upload_id, body) = match &staged.body {
            StagedBody::Spooled(body) => {
                if let Some(t) = &meta.content_type {
                    headers.push(("content-type".into(), t.clone()));
                }
                if let Some(md5) = content_md5(&staged.etag) {
                    headers.push(("content-md5".into(), md5));
                }
                for (k, v) in Self::metadata(meta) {
                    headers.push((format!("x-amz-meta-{k}"), v));
                }
                for (k, v) in &meta.headers {
                    headers.push((k.clone(), v.clone()));
                }
                ("PutObject", "PUT", None, body.clone())
            }
            StagedBody::Multipart { upload_id, parts } => {
                let xml = presigned::completion_xml(parts);
                headers.push(("content-type".into(), "application/xml".into()));
                (
                    "CompleteMultipartUpload",
                    "POST",
                    Some(upload_id.as_str()),
                    spool::Spooled::from(Bytes::from(xml)),
                )
            }
            StagedBody::Handle(_) => {
                return Err(S3Failure::Fault(BackendError::Failing(
                    "a body staged by another backend cannot be committed to s3".into(),
                )))
            }
        };
        let req = presigned::Request {
            method,
            bucket: &self.bucket,
            key,
            upload_id,
            headers,
            body,
        };
        self.clients.presigner.send(op, req, not_after).await
    }

    /// The commit, with a store-enforced deadline in cluster mode (`not_after`).
    async fn commit_inner(
        &self,
        staged: &Staged,
        expected: Option<&str>,
        not_after: Option<std::time::SystemTime>,
    ) -> Result<ObjectInfo, BackendError> {
        let meta = staged.meta.clone();
        let answered = match self.send_commit(staged, &meta, expected, not_after).await {
            Ok(etag) => etag,
            Err(S3Failure::Precondition | S3Failure::NotFound) => {
                // 404 answers If-Match on an object that is gone; both mean "changed". The
                // version found is read here once; a failed read is a fault, not "absent".
                let found = self.version(&staged.bucket, &staged.key).await?;
                return Err(BackendError::Conflict {
                    expected: expected.map(str::to_string),
                    found,
                });
            }
            Err(f) if f.outcome_unknown() => {
                // Never re-sent: a late duplicate could land after a newer token's commit.
                let error = match f.into_backend("commit") {
                    BackendError::Timeout(e) => BackendError::Timeout(format!(
                        "{e}; the store did not confirm the commit and it may still take effect: retry with the same token"
                    )),
                    other => other,
                };
                // Its ETag shows the request applied only if it differs from the ETag it
                // replaces: a rewrite of the same bytes looks landed before it is, so it stays
                // unknown.
                let changes = expected != Some(staged.etag.as_str());
                return match self.landed(staged).await.filter(|_| changes) {
                    Some(info) => {
                        tracing::info!(key = %staged.key, "a commit that timed out had landed; read back its ETag");
                        Ok(info)
                    }
                    None => Err(error),
                };
            }
            Err(f) => return Err(f.into_backend("commit")),
        };
        // The version recorded must be the store's own ETag: it is what the next HEAD, and a
        // conditional commit's If-Match, compare against. It differs from the MD5 computed
        // while staging on stores that encrypt (SSE-KMS) or compute multipart ETags otherwise.
        let etag = match answered.filter(|e| !e.is_empty()) {
            Some(etag) => etag,
            None => self.etag_after_commit(staged).await?,
        };
        // A completion's ETag is not the MD5 of the bytes; each part's was checked instead.
        if matches!(staged.body, StagedBody::Spooled(_)) {
            self.check_kept("PutObject", &staged.key, &staged.etag, &etag)?;
        }
        Ok(ObjectInfo {
            key: staged.key.clone(),
            size: staged.size,
            version: etag.clone(),
            etag,
            last_modified_ms: crate::wall_clock::now_ms(),
            meta,
            parts: Vec::new(),
        })
    }

    /// DeleteObject if still at `expected`, with a store-enforced deadline in cluster mode.
    async fn delete_inner(
        &self,
        bucket: &str,
        key: &str,
        expected: &str,
        not_after: Option<std::time::SystemTime>,
    ) -> Result<(), BackendError> {
        let conditional = self
            .conditional_delete
            .load(std::sync::atomic::Ordering::Relaxed);
        let result = match not_after {
            Some(not_after) => {
                let req = presigned::Request {
                    method: "DELETE",
                    bucket: &self.bucket,
                    key: &self.store_key(key),
                    upload_id: None,
                    headers: vec![("if-match".into(), expected.to_string())],
                    body: Bytes::new().into(),
                };
                self.clients
                    .presigner
                    .send("DeleteObject", req, not_after)
                    .await
                    .map(|_| ())
            }
            None => self
                .clients
                .writes
                .delete_object()
                .bucket(&self.bucket)
                .key(self.store_key(key))
                .set_if_match(conditional.then(|| expected.to_string()))
                .send()
                .await
                .map(|_| ())
                .map_err(|e| classify("DeleteObject", e)),
        };
        match result {
            Ok(()) => Ok(()),
            Err(failure) => match failure {
                S3Failure::Precondition | S3Failure::NotFound => Err(BackendError::Conflict {
                    expected: Some(expected.to_string()),
                    found: self.version(bucket, key).await?,
                }),
                f if f.outcome_unknown() => {
                    let error = f.into_backend("DeleteObject");
                    match self.version(bucket, key).await {
                        Ok(None) => Ok(()),
                        _ => Err(error),
                    }
                }
                other => Err(other.into_backend("DeleteObject")),
            },
        }
    }

    /// GetObject, whole or a byte range; the info describes the whole object either way.
    async fn get_object(
        &self,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        let out = match self
            .clients
            .reads
            .get_object()
            .bucket(&self.bucket)
            .key(self.store_key(key))
            .set_range(range.map(|(s, e)| format!("bytes={s}-{e}")))
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) => {
                return match classify("GetObject", e) {
                    S3Failure::NotFound => Ok(None),
                    other => Err(other.into_backend("GetObject")),
                }
            }
        };
        // A ranged answer's Content-Length is the range's; the total follows the `/`.
        let total = out
            .content_range()
            .and_then(|r| r.rsplit('/').next())
            .and_then(|t| t.parse::<i64>().ok())
            .or(out.content_length());
        let info = Self::info(
            key,
            out.e_tag(),
            total,
            out.last_modified(),
            Self::object_meta(out.content_type(), out.metadata(), system_of!(out)),
        );
        let stream = futures::stream::unfold(out.body, |mut body| async move {
            body.next()
                .await
                .map(|chunk| (chunk.map_err(|e| BodyError::Broken(e.to_string())), body))
        });
        Ok(Some((info, Box::pin(stream))))
    }
}

/// `value`, or its RFC 2047 encoded word ([`super::encoded_word_needed`]).
fn encode_word(value: &str) -> String {
    if !super::encoded_word_needed(value) {
        value.to_string()
    } else {
        format!(
            "=?UTF-8?B?{}?=",
            aws_smithy_types::base64::encode(value.as_bytes())
        )
    }
}

/// The text of an RFC 2047 base64 UTF-8 encoded word ([`encode_word`]); any other value as it
/// is.
fn decode_word(value: &str) -> String {
    let inner = value
        .strip_prefix("=?")
        .and_then(|v| v.strip_suffix("?="))
        .and_then(|v| v.split_once('?'))
        .filter(|(charset, _)| charset.eq_ignore_ascii_case("utf-8"))
        .and_then(|(_, rest)| rest.split_once('?'))
        .filter(|(encoding, _)| encoding.eq_ignore_ascii_case("b"));
    inner
        .and_then(|(_, text)| aws_smithy_types::base64::decode(text).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_else(|| value.to_string())
}

/// The Expires header as the SDK takes it; one that is not an HTTP date is not sent.
fn expires(meta: &ObjectMeta) -> Option<aws_smithy_types::DateTime> {
    let text = meta.headers.get("expires")?;
    aws_smithy_types::DateTime::from_str(text, aws_smithy_types::date_time::Format::HttpDate).ok()
}

/// The Content-MD5 header for a body whose ETag is its MD5 (`"hex"`), so the store checks
/// that it kept the bytes fencegate read.
fn content_md5(etag: &str) -> Option<String> {
    let digest = hex::decode(etag.trim_matches('"')).ok()?;
    (digest.len() == 16).then(|| aws_smithy_types::base64::encode(digest))
}

/// A client's body read part by part: the rest of a chunk split at a part boundary is held
/// for the next part.
struct PartReader<'a> {
    body: &'a mut ByteStream,
    held: Option<Bytes>,
}

impl PartReader<'_> {
    async fn next(&mut self) -> Option<Result<Bytes, BodyError>> {
        match self.held.take() {
            Some(chunk) => Some(Ok(chunk)),
            None => self.body.next().await,
        }
    }
}

/// One part (or a whole small body), spooled, with its MD5.
struct SpooledPart {
    body: spool::Spooled,
    md5: Md5,
    /// The client's body ended with this part.
    ended: bool,
}

/// Aborts a multipart upload whose staging did not complete, when dropped armed.
struct UploadGuard {
    client: aws_sdk_s3::Client,
    bucket: String,
    store_key: String,
    upload_id: Option<String>,
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
        let first = self.spool_part(&mut body, &mut size).await?;
        let (body, etag) = if first.ended {
            // Up to the part size: one PutObject.
            let etag = format!("\"{}\"", hex::encode(first.md5.finalize()));
            (StagedBody::Spooled(first.body), etag)
        } else {
            // Larger: the rest streams into a multipart upload.
            let (upload_id, parts, md5_of_parts) = self
                .stage_multipart(key, &meta, first, &mut body, &mut size)
                .await?;
            let etag = format!(
                "\"{}-{}\"",
                hex::encode(md5_of_parts.finalize()),
                parts.len()
            );
            (StagedBody::Multipart { upload_id, parts }, etag)
        };
        Ok(Staged {
            body,
            bucket: bucket.to_string(),
            key: key.to_string(),
            version: Some(etag.clone()),
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
        Some(self.clients.presigner.clock_offset().await)
    }

    fn conditional_commit(&self, staged: &Staged) -> bool {
        let flag = match staged.body {
            StagedBody::Multipart { .. } => &self.conditional_completes,
            _ => &self.conditional_puts,
        };
        flag.load(std::sync::atomic::Ordering::Relaxed)
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
        match self
            .clients
            .reads
            .head_object()
            .bucket(&self.bucket)
            .key(self.store_key(key))
            .send()
            .await
        {
            Ok(out) => Ok(Some(Self::info(
                key,
                out.e_tag(),
                out.content_length(),
                out.last_modified(),
                Self::object_meta(out.content_type(), out.metadata(), system_of!(out)),
            ))),
            Err(e) => match classify("HeadObject", e) {
                S3Failure::NotFound => Ok(None),
                other => Err(other.into_backend("HeadObject")),
            },
        }
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
