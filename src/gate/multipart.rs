//! Multipart uploads through the gate. The token is given once, at CreateMultipartUpload, and
//! kept with the upload; parts carrying another token are refused. Each part is checked early
//! against the scope's highest token (cheap), and the completion is the authoritative check: it
//! is an ordinary commit under the scope's lock, so a completion overtaken by a newer token
//! fails, and the upload is dropped with nothing made visible. A part refused as stale drops
//! the upload too. AbortMultipartUpload is fenced
//! by the upload's token.

use super::run_to_end;
use super::uploads::{Reservation, Upload, UploadRegistry};
use super::{
    check_token, record_outcome, scope, Gate, GateError, TokenInput, WriteRequest, Written,
};
use crate::backend::{match_parts, BackendError, ByteStream, PartChecksum, PartInfo};
use crate::token::TokenError;
use std::sync::Arc;
use tracing::Span;

impl Gate {
    /// CreateMultipartUpload: checks the token early and registers the upload with it, as
    /// `owner`'s (open uploads are bounded per key and per bucket, [`UploadLimits`]).
    /// Runs to its end whatever the client does (a store upload created with no record would
    /// be counted nowhere and never expire).
    pub async fn create_upload(
        self: &Arc<Self>,
        req: WriteRequest,
        owner: &str,
    ) -> Result<Upload, GateError> {
        let bucket = req.bucket.clone();
        let gate = Arc::clone(self);
        let owner = owner.to_string();
        let result = run_to_end(async move { gate.create_upload_inner(req, &owner).await }).await;
        record_outcome("create_upload", &bucket, &result);
        result
    }

    async fn create_upload_inner(
        &self,
        mut req: WriteRequest,
        owner: &str,
    ) -> Result<Upload, GateError> {
        let (entry, token, scope) = self.admit_request(&req, false)?;
        if let Some(t) = token {
            check_token(&entry.policy, t.0, &self.row(&scope).await?, &scope)?;
        }
        let place = self.upload_room(&req.bucket, owner).await?;
        super::meta::own_meta(&mut req.meta, token.map(|t| t.0), &entry, &scope)?;
        let handle = entry
            .backend
            .create_upload(&req.bucket, &req.key, &req.meta)
            .await?;
        let upload = Upload {
            id: UploadRegistry::new_id(),
            bucket: req.bucket,
            key: req.key,
            scope_header: req.scope_header,
            meta: req.meta,
            handle,
            initiated_ms: crate::wall_clock::now_ms(),
            owner: Some(owner.to_string()),
            parts: Default::default(),
            counted: false,
        };
        if let Err(bound) = self.uploads.insert(upload.clone(), place).await? {
            // Creates through other instances took the last places while the store made
            // this one: it is dropped, as it is counted nowhere.
            if let Err(e) = entry
                .backend
                .finish_upload(&upload.bucket, &upload.key, &upload.handle)
                .await
            {
                tracing::warn!(bucket = %upload.bucket, key = %upload.key, error = %e, "could not drop a store upload refused past the bounds on open uploads");
            }
            return Err(self.too_many_uploads(&upload.bucket, owner, bound));
        }
        Ok(upload)
    }

    /// The upload `id` without its parts (what a part or an abort is judged by, at a cost that
    /// does not grow with the parts uploaded), which must belong to `bucket`/`key`.
    async fn upload_head(&self, bucket: &str, key: &str, id: &str) -> Result<Upload, GateError> {
        self.bucket(bucket)?;
        match self.uploads.head(id).await? {
            Some(u) if u.bucket == bucket && u.key == key => Ok(u),
            _ => Err(GateError::Backend(BackendError::NoSuchUpload(
                id.to_string(),
            ))),
        }
    }

    /// A place for a new upload within the bounds on open uploads ([`UploadLimits`]), or the
    /// refusal that names the bound.
    async fn upload_room(&self, bucket: &str, owner: &str) -> Result<Reservation, GateError> {
        let limits = &self.upload_limits;
        match self
            .uploads
            .reserve(bucket, owner, (limits.per_key, limits.per_bucket))
            .await?
        {
            Ok(place) => Ok(place),
            Err(bound) => Err(self.too_many_uploads(bucket, owner, bound)),
        }
    }

    /// The refusal of a create past `bound` (`per_key` or `per_bucket`), counted.
    fn too_many_uploads(&self, bucket: &str, owner: &str, bound: &'static str) -> GateError {
        let limits = &self.upload_limits;
        let (what, limit, setting) = if bound == "per_key" {
            (
                format!("key {owner}"),
                limits.per_key,
                "max_uploads_per_key",
            )
        } else {
            (
                format!("bucket {bucket}"),
                limits.per_bucket,
                "max_uploads_per_bucket",
            )
        };
        crate::metrics::upload_refused(bound);
        let expiry = limits.expiry.as_secs();
        GateError::TooManyUploads(format!(
            "{what} has {limit} multipart uploads open, the most [server] {setting} allows: complete or abort some (ListMultipartUploads shows them), or wait until they expire {expiry} s after they were created (upload_expiry_secs)"
        ))
    }

    /// Aborts every upload created more than [`UploadLimits::expiry`] ago, as S3's
    /// AbortIncompleteMultipartUpload lifecycle rule does: its parts and its record go. Runs
    /// while serving (`server`), every [`UploadLimits::sweep_every`]. Returns how many went.
    pub async fn expire_uploads(&self) -> usize {
        let now = crate::wall_clock::now_ms();
        let before = now.saturating_sub(self.upload_limits.expiry.as_millis() as u64);
        let mut expired = 0;
        let old = match self.uploads.older_than(before).await {
            Ok(old) => old,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the multipart uploads to expire; trying again at the next sweep");
                return 0;
            }
        };
        for upload in old {
            let discarded = match self.discard_upload(&upload).await {
                // Its bucket was deleted since: only the record is left to go.
                Err(GateError::NoSuchBucket(_)) => {
                    self.uploads.remove(&upload).await;
                    Ok(())
                }
                other => other,
            };
            match discarded {
                Ok(()) => {
                    expired += 1;
                    crate::metrics::upload_expired();
                    tracing::info!(target: "fencegate::audit", upload = %upload.id, bucket = %upload.bucket, key = %upload.key,
                        owner = upload.owner.as_deref().unwrap_or("-"), "incomplete multipart upload expired (upload_expiry_secs)");
                }
                // The store is down, or refused: the next sweep tries again.
                Err(e) => {
                    tracing::warn!(upload = %upload.id, error = %e, "could not expire an incomplete multipart upload; trying again at the next sweep")
                }
            }
        }
        expired
    }

    /// The upload `id`, which must belong to `bucket`/`key`.
    pub async fn upload(&self, bucket: &str, key: &str, id: &str) -> Result<Upload, GateError> {
        self.bucket(bucket)?;
        match self.uploads.get(id).await? {
            Some(u) if u.bucket == bucket && u.key == key => Ok(u),
            _ => Err(GateError::Backend(BackendError::NoSuchUpload(
                id.to_string(),
            ))),
        }
    }

    pub async fn uploads(&self, bucket: &str, prefix: &str) -> Result<Vec<Upload>, GateError> {
        self.bucket(bucket)?;
        self.uploads.list(bucket, prefix).await
    }

    /// A token sent with a part or a completion must be the upload's own.
    fn same_token(upload: &Upload, token: TokenInput) -> Result<(), GateError> {
        match (token?, upload.token()) {
            (Some(t), Some(u)) if t.0 != u => Err(TokenError::Disagree {
                first: u,
                other: t.0,
                by: "at CreateMultipartUpload",
                what: "this request",
            }
            .into()),
            (Some(t), None) => Err(GateError::InvalidArgument(format!(
                "this upload was created without a token, so token {} cannot be added now; start a new upload with the token",
                t.0
            ))),
            _ => Ok(()),
        }
    }

    /// Early check of an upload's token against its scope's highest.
    async fn upload_current(&self, upload: &Upload, check: bool) -> Result<String, GateError> {
        let entry = self.bucket(&upload.bucket)?;
        let scope = scope::resolve(
            &entry.policy,
            &upload.bucket,
            &upload.key,
            upload.scope_header.as_deref(),
        )?;
        Span::current().record("scope", scope.as_str());
        if let Some(t) = upload.token() {
            Span::current().record("token", t);
            if check {
                check_token(&entry.policy, t, &self.row(&scope).await?, &scope)?;
            }
        }
        Ok(scope)
    }

    /// UploadPart (and UploadPartCopy, whose source the surface opens).
    #[allow(clippy::too_many_arguments)]
    pub async fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        number: i32,
        token: TokenInput,
        body: ByteStream,
        size: Option<u64>,
        checksum: impl FnOnce() -> Option<PartChecksum> + Send,
    ) -> Result<PartInfo, GateError> {
        let result = async {
            let upload = self.upload_head(bucket, key, id).await?;
            Self::same_token(&upload, token)?;
            // A part refused as stale leaves an upload whose completion would be refused too
            // (its token is the upload's), short of an admin resetting the fence below it:
            // aborted at once, as a refused completion is, so the writer is not left with an
            // upload only a newer token may abort.
            if let Err(e) = self.upload_current(&upload, true).await {
                return Err(self.drop_if_final(&upload, e).await);
            }
            let entry = self.bucket(bucket)?;
            let mut part = match entry
                .backend
                .upload_part(bucket, key, &upload.handle, number, body, size)
                .await
            {
                Ok(part) => part,
                // Completed, aborted or dropped while this part streamed in: its place on the
                // backend went with it. The client's answer is the upload's, not a fault.
                Err(e) => {
                    return Err(match self.uploads.head(id).await {
                        Ok(None) => GateError::Backend(BackendError::NoSuchUpload(id.to_string())),
                        _ => e.into(),
                    })
                }
            };
            // Known once the body has passed whole (a trailer comes last).
            part.checksum = checksum();
            if self.uploads.add_part(id, part.clone()).await? {
                Ok(part)
            } else {
                // Completed or aborted while this part streamed in.
                Err(GateError::Backend(BackendError::NoSuchUpload(
                    id.to_string(),
                )))
            }
        }
        .await;
        record_outcome("upload_part", bucket, &result);
        result
    }

    pub async fn list_parts(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
    ) -> Result<Vec<PartInfo>, GateError> {
        Ok(self
            .upload(bucket, key, id)
            .await?
            .parts
            .into_values()
            .collect())
    }

    /// CompleteMultipartUpload: the commit point. A part list that does not match keeps the
    /// upload (fix the list and retry); any refusal at the commit itself (a stale token, a
    /// precondition, a write behind fencegate's back, a backend fault) drops the whole upload,
    /// so nothing of it lingers.
    ///
    /// `declared` is what else the completion declares that its answer vouches for (the S3
    /// gateway: its checksums, judged before this is called). It is in the completion's
    /// fingerprint, so a repeated completion is answered as the first only when it declares the
    /// same: otherwise a replay would answer 200 to checksums nobody judged.
    pub async fn complete_upload(
        self: &Arc<Self>,
        req: WriteRequest,
        id: &str,
        parts: &[(i32, String)],
        declared: &str,
    ) -> Result<Written, GateError> {
        let bucket = req.bucket.clone();
        let result = self.complete_inner(req, id, parts, declared).await;
        record_outcome("complete_upload", &bucket, &result);
        result
    }

    async fn complete_inner(
        self: &Arc<Self>,
        req: WriteRequest,
        id: &str,
        parts: &[(i32, String)],
        declared: &str,
    ) -> Result<Written, GateError> {
        // A completion is idempotent by its upload id, as on S3: completing an upload again
        // (its first answer was lost) is answered as the first completion was.
        let mut idem = super::Idempotency::upload(id);
        let mut listed: String = parts.iter().map(|(n, e)| format!("{n}:{e}\n")).collect();
        listed.push_str(declared);
        idem.fingerprint = super::idempotency::fingerprint(
            "complete",
            &req.bucket,
            &req.key,
            None,
            listed.as_bytes(),
        );
        let upload = match self.upload(&req.bucket, &req.key, id).await {
            Ok(upload) => upload,
            Err(e) => return self.completed_before(req, idem, e).await,
        };
        Self::same_token(&upload, req.token.clone())?;
        let entry = self.bucket_for_write(&upload.bucket)?;
        // A completion whose answer is on the row (it landed, and its answer was lost) is
        // judged under the lock, where its answer comes before the token: the early check
        // would refuse it as stale and drop the upload.
        let row = self
            .row(&scope::object_row(&upload.bucket, &upload.key))
            .await?;
        let answered =
            Self::recorded_for(Some(&idem), &row).is_some() || Self::pending_for(Some(&idem), &row);
        let scope = match self.upload_current(&upload, !answered).await {
            Ok(s) => s,
            Err(e) => return Err(self.drop_if_final(&upload, e).await),
        };
        let uploaded: Vec<PartInfo> = upload.parts.values().cloned().collect();
        let chosen = match_parts(parts, &uploaded)?;
        let token = upload.token().map(crate::token::Token);
        // The upload's metadata, with the checksum the completion proved for the whole.
        let mut meta = upload.meta.clone();
        if req.meta.checksum.is_some() {
            meta.checksum = req.meta.checksum.clone();
        }
        let req = WriteRequest {
            bucket: upload.bucket.clone(),
            key: upload.key.clone(),
            token: Ok(token),
            scope_header: upload.scope_header.clone(),
            conditions: req.conditions,
            scope_takeover: req.scope_takeover,
            meta,
            idempotency: Some(idem),
        };
        // From the assembly on, the completion runs to its end whatever the client does: the
        // commit itself, and the upload's clean-up after it.
        let gate = Arc::clone(self);
        run_to_end(async move {
            let staged = entry
                .backend
                .assemble(
                    &upload.bucket,
                    &upload.key,
                    &upload.handle,
                    &chosen,
                    req.meta.clone(),
                )
                .await?;
            match gate
                .locked_commit(&req, &entry, &scope, token, staged, true, None)
                .await
            {
                Ok(w) => {
                    gate.uploads.remove(&upload).await;
                    if let Err(e) = entry
                        .backend
                        .finish_upload(&upload.bucket, &upload.key, &upload.handle)
                        .await
                    {
                        tracing::warn!(upload = %upload.id, error = %e, "the object is committed but its parts could not be removed");
                    }
                    Ok(w)
                }
                // Refused for now (503, "retry later"): the upload stays for the retry.
                Err(e) if e.for_now() => Err(e),
                // The commit discarded what was assembled (on s3, the store's own upload), so
                // the upload cannot be completed again: drop it whole.
                Err(e) => {
                    gate.drop_upload(&upload).await;
                    Err(e)
                }
            }
        })
        .await
    }

    /// A completion of an upload that is no longer registered: the answer of its completion,
    /// if it completed (here or through another instance), else `missing`.
    async fn completed_before(
        &self,
        req: WriteRequest,
        idem: super::Idempotency,
        missing: GateError,
    ) -> Result<Written, GateError> {
        let (Ok(entry), Ok(scope)) = (
            self.bucket(&req.bucket),
            self.scope_of(&req.bucket, &req.key, req.scope_header.as_deref()),
        ) else {
            return Err(missing);
        };
        let req = WriteRequest {
            idempotency: Some(idem),
            ..req
        };
        let row = self.row(&scope::object_row(&req.bucket, &req.key)).await?;
        if Self::recorded(&req, &row).is_none() {
            return Err(missing);
        }
        match self.answered_before(&entry, &req, &scope, &row).await? {
            Some(replay) => Ok(replay),
            None => Err(missing),
        }
    }

    /// An upload that can never complete (its token is stale, or the object was changed behind
    /// fencegate's back) is aborted at once, so no part of it lingers.
    async fn drop_if_final(&self, upload: &Upload, e: GateError) -> GateError {
        if matches!(
            e,
            GateError::StaleFencingToken { .. }
                | GateError::TokenNotIncreasing { .. }
                | GateError::BypassDetected { .. }
        ) {
            self.drop_upload(upload).await;
        }
        e
    }

    async fn drop_upload(&self, upload: &Upload) {
        if let Err(abort) = self.discard_upload(upload).await {
            tracing::warn!(upload = %upload.id, error = %abort, "could not abort a refused upload");
        }
    }

    async fn discard_upload(&self, upload: &Upload) -> Result<(), GateError> {
        let entry = self.bucket(&upload.bucket)?;
        entry
            .backend
            .finish_upload(&upload.bucket, &upload.key, &upload.handle)
            .await?;
        self.uploads.remove(upload).await;
        Ok(())
    }

    /// AbortMultipartUpload. Fenced: an upload created with a token is aborted only by a
    /// request carrying that token or a higher one, so one writer cannot throw away another
    /// holder's upload. An upload created without a token can be aborted by anyone who may
    /// write the bucket, as on S3.
    pub async fn abort_upload(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        token: TokenInput,
    ) -> Result<(), GateError> {
        let upload = self.upload_head(bucket, key, id).await?;
        if let Some(owner) = upload.token() {
            match token? {
                None => {
                    return Err(GateError::FencingTokenRequired {
                        bucket: bucket.to_string(),
                    })
                }
                Some(t) if t.0 < owner => {
                    return Err(GateError::StaleFencingToken {
                        token: t.0,
                        highest: owner,
                        scope: format!("upload {id}"),
                        floor: false,
                    })
                }
                Some(_) => {}
            }
        }
        self.discard_upload(&upload).await
    }
}
