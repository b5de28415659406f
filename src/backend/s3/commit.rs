//! The commit and the delete: conditional on the version the gate read, with or without a
//! store-enforced deadline (cluster mode), read back rather than re-sent when their answer
//! is lost, and refused when the store kept other bytes than were sent.

use super::direct::{self, Condition};
use super::*;

impl S3Backend {
    /// Where the store's ETags are MD5s, refuses an answer whose ETag is not the MD5 of the
    /// bytes sent (`sent`, `"hex"`): the store kept other bytes (moto, for one, parses a body
    /// sent as `application/x-www-form-urlencoded` and keeps an empty object). Nothing is
    /// acknowledged then (issue 14 §3; docs/design.md, "The store's answer is checked").
    pub(super) fn check_kept(
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

    /// A commit answered without an ETag: read it back. The caller still holds the scope's
    /// lock, so what is there now is the object just committed (barring a write around
    /// fencegate, which the next commit's condition catches).
    pub(super) async fn etag_after_commit(&self, staged: &Staged) -> Result<String, BackendError> {
        match self.head(&staged.bucket, &staged.key).await? {
            Some(info) if !info.etag.is_empty() => Ok(info.etag),
            _ => Err(BackendError::Failing(format!(
                "the store accepted the commit of {} but reports no ETag for it; check that the store returns ETags on PutObject, CompleteMultipartUpload or HeadObject",
                staged.key
            ))),
        }
    }

    /// After a commit whose outcome is unknown: did it land? Read the ETag back: the store
    /// shows the staged version.
    pub(super) async fn landed(&self, staged: &Staged) -> Option<ObjectInfo> {
        match self.head(&staged.bucket, &staged.key).await {
            Ok(Some(info)) if info.version == stored_version(staged) => Some(ObjectInfo {
                etag: visible_etag(staged, &info.version),
                ..info
            }),
            _ => None,
        }
    }

    /// Sends the conditional commit; returns the ETag the store answered with, if any.
    pub(super) async fn send_commit(
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
            StagedBody::Spooled(body) => {
                let headers = direct::put_headers(meta, content_md5(&staged.etag));
                self.put_now(&key, body.clone(), headers, Condition::on(expected))
                    .await
            }
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
            _ => Err(S3Failure::Fault(BackendError::Failing(
                "a body staged by another backend cannot be committed to s3".into(),
            ))),
        }
    }

    /// [`Self::send_commit`] in cluster mode: presigned to be refused after `not_after`.
    pub(super) async fn send_commit_by(
        &self,
        staged: &Staged,
        meta: &ObjectMeta,
        key: &str,
        expected: Option<&str>,
        not_after: std::time::SystemTime,
    ) -> Result<Option<String>, S3Failure> {
        // Where the probe found the store ignoring the condition, it is not sent: the order
        // of commits comes from the intents on etcd and the deadline, and a signed header
        // the store would ignore only adds what a proxy or the store could trip over.
        let mut headers = Vec::new();
        if self.conditional_commit_sent(staged) {
            headers.push(match expected {
                Some(etag) => ("if-match".to_string(), etag.to_string()),
                None => ("if-none-match".to_string(), "*".to_string()),
            });
        }
        let (op, method, upload_id, body) = match &staged.body {
            StagedBody::Spooled(body) => {
                headers.extend(direct::put_headers(meta, content_md5(&staged.etag)));
                ("PutObject", "PUT", None, body.clone())
            }
            StagedBody::Multipart { upload_id, parts } => {
                let xml = signer::completion_xml(parts);
                headers.push(("content-type".into(), "application/xml".into()));
                (
                    "CompleteMultipartUpload",
                    "POST",
                    Some(upload_id.as_str()),
                    spool::Spooled::from(Bytes::from(xml)),
                )
            }
            _ => {
                return Err(S3Failure::Fault(BackendError::Failing(
                    "a body staged by another backend cannot be committed to s3".into(),
                )))
            }
        };
        let req = signer::Request {
            method,
            bucket: &self.bucket,
            key,
            upload_id,
            headers,
            body,
        };
        self.clients.signer.send(op, req, not_after).await
    }

    /// The commit, with a store-enforced deadline in cluster mode (`not_after`).
    pub(super) async fn commit_inner(
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
                let changes = expected != Some(stored_version(staged));
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
            etag: visible_etag(staged, &etag),
            version: etag,
            last_modified_ms: crate::wall_clock::now_ms(),
            meta,
            parts: Vec::new(),
        })
    }

    /// DeleteObject if still at `expected`, with a store-enforced deadline in cluster mode.
    pub(super) async fn delete_inner(
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
                let req = signer::Request {
                    method: "DELETE",
                    bucket: &self.bucket,
                    key: &self.store_key(key),
                    upload_id: None,
                    // As for commits: not sent to a store that ignores it.
                    headers: conditional
                        .then(|| ("if-match".into(), expected.to_string()))
                        .into_iter()
                        .collect(),
                    body: Bytes::new().into(),
                };
                self.clients
                    .signer
                    .send("DeleteObject", req, not_after)
                    .await
                    .map(|_| ())
            }
            None => {
                self.delete_now(&self.store_key(key), conditional.then_some(expected))
                    .await
            }
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
}

/// The ETag the store will show for `staged` once committed.
fn stored_version(staged: &Staged) -> &str {
    staged.version.as_deref().unwrap_or(&staged.etag)
}

/// The ETag a client is answered for `staged`, committed as the store's `version`: the body's
/// MD5 for a body fencegate split into store parts itself, otherwise the store's own ETag
/// (which is the MD5 on most stores, and not on those that encrypt with SSE-KMS).
fn visible_etag(staged: &Staged, version: &str) -> String {
    if stored_version(staged) != staged.etag {
        staged.etag.clone()
    } else {
        version.to_string()
    }
}
