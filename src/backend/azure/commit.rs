//! The commit and the delete: conditional on the version the gate read, each authorized by
//! a SAS that expires at its deadline (so a request held in flight cannot land after the gate
//! stopped waiting for it), read back by its commit id rather than re-sent when its answer is
//! lost, and refused when the service kept other bytes than were sent.

use super::client::Request;
use super::errors::AzFailure;
use super::*;

impl AzureBackend {
    /// After a commit whose outcome is unknown: the object, if it is the one this commit wrote.
    pub(super) async fn landed(&self, staged: &Staged, commit: &str) -> Option<ObjectInfo> {
        let blob = self.blob(&staged.key);
        let req = || Request::new(Method::HEAD, &self.container, &blob);
        let r = self.client.read("Get Blob Properties", req).await.ok()?;
        let size = length(&r);
        (meta::stored(r.headers())?.commit == commit)
            .then(|| meta::info(&staged.key, r.headers(), size))
    }

    /// When a commit or delete sent now must no longer be applied: `not_after` in cluster
    /// mode (the intent's deadline), else `commit_deadline` from now, the time the gate holds
    /// an object whose answer was lost.
    pub(super) fn expiry(&self, not_after: Option<std::time::SystemTime>) -> std::time::SystemTime {
        not_after.unwrap_or_else(|| std::time::SystemTime::now() + self.commit_deadline)
    }

    pub(super) async fn commit_inner(
        &self,
        staged: &Staged,
        expected: Option<&str>,
        not_after: Option<std::time::SystemTime>,
    ) -> Result<ObjectInfo, BackendError> {
        let StagedBody::Azure(staging) = &staged.body else {
            return Err(BackendError::Failing(
                "a body staged by another backend cannot be committed to azure".into(),
            ));
        };
        let mut stored = meta::Stored {
            meta: staged.meta.clone(),
            etag: staged.etag.clone(),
            commit: staging.commit.clone(),
            parts: meta::part_runs(&staging.parts),
        };
        if meta::metadata_size(&stored) > meta::METADATA_LIMIT {
            // The parts give way to what the client sent: the object is then refused by part
            // number (501), never read as one part.
            stored.parts.clear();
        }
        let blob = self.blob(&staged.key);
        // Authorized by a SAS that expires when the gate stops waiting for this commit, so a
        // request held in flight (a proxy, a stalled connection) cannot land after the object
        // was given to a newer token.
        let expiry = self.expiry(not_after);
        let mut req = Request::new(Method::PUT, &self.container, &blob)
            .sas(self.client.sas(&self.container, &blob, "cw", expiry))
            .header(meta::META_HEADER, meta::encode(&stored));
        req = match expected {
            Some(etag) => req.header("if-match", etag),
            None => req.header("if-none-match", "*"),
        };
        let (op, req) = match &staging.from {
            Source::Spooled(body) => {
                let mut req = req
                    .header("x-ms-blob-type", "BlockBlob")
                    .header("content-type", blocks::content_type(&staged.meta))
                    .body(body.clone());
                if let Some(md5) = meta::content_md5(&staged.etag) {
                    req = req.header("content-md5", md5);
                }
                ("Put Blob", req)
            }
            Source::Blob { name, etag, .. } => {
                let read = self.client.sas(&self.container, name, "r", expiry);
                let source = self.client.blob_url(&self.container, name, Some(&read));
                let mut req = req.header("x-ms-copy-source", source);
                if !etag.is_empty() {
                    req = req.header("x-ms-source-if-match", etag.clone());
                }
                ("Copy Blob", req)
            }
        };
        let answer = match self
            .client
            .send(op, req)
            .await
            .map_err(|f| past_expiry(f, expiry))
        {
            Ok(r) => r,
            Err(AzFailure::Precondition | AzFailure::NotFound) => {
                return Err(BackendError::Conflict {
                    expected: expected.map(str::to_string),
                    found: self.version(&staged.bucket, &staged.key).await?,
                })
            }
            Err(f) if f.outcome_unknown() => {
                // Never re-sent: a late duplicate could land after a newer token's commit.
                let error = match f.into_backend(op) {
                    BackendError::Timeout(e) => BackendError::Timeout(format!(
                        "{e}; the store did not confirm the commit and it may still take effect: retry with the same token"
                    )),
                    other => other,
                };
                return match self.landed(staged, &staging.commit).await {
                    Some(info) => {
                        tracing::info!(key = %staged.key, "a commit that timed out had landed; read back its ETag");
                        Ok(info)
                    }
                    None => Err(error),
                };
            }
            Err(f) => return Err(f.into_backend(op)),
        };
        let mut etag = header(&answer, "etag");
        if let Source::Spooled(_) = &staging.from {
            // The service checked the body against Content-MD5; an answer naming another
            // digest means something between kept other bytes.
            if let Some(kept) = answer
                .headers()
                .get("content-md5")
                .and_then(|v| v.to_str().ok())
                .and_then(meta::md5_etag)
            {
                if kept != staged.etag {
                    crate::metrics::store_integrity_failure("Put Blob");
                    return Err(BackendError::KeptDifferentBytes(format!(
                        "the store answered Put Blob of {} with Content-MD5 {kept}, but the MD5 of the bytes fencegate sent is {}: nothing was acknowledged; check for a proxy that rewrites bodies",
                        staged.key, staged.etag
                    )));
                }
            }
        } else if header(&answer, "x-ms-copy-status") == "pending" {
            let copy = header(&answer, "x-ms-copy-id");
            etag = self
                .copy_finished(&staged.key, &copy, &staging.commit)
                .await?;
        }
        if let Source::Blob {
            name,
            upload: false,
            ..
        } = &staging.from
        {
            // Copied: a large body's staging blob has done its work.
            self.drop_staging(name).await;
        }
        if etag.is_empty() {
            etag = self
                .head_blob(&staged.key)
                .await?
                .map(|i| i.version)
                .unwrap_or_default();
        }
        Ok(ObjectInfo {
            key: staged.key.clone(),
            size: staged.size,
            etag: staged.etag.clone(),
            version: etag,
            last_modified_ms: crate::wall_clock::now_ms(),
            meta: staged.meta.clone(),
            parts: meta::parts_of(&stored.parts),
        })
    }

    /// Waits for the Copy Blob with id `copy` that the service answered `pending` (it may,
    /// even within one account) and returns the object's ETag once it is done. A blob that
    /// carries another copy id, or none, was written by someone else meanwhile (which ends a
    /// pending copy): this commit's bytes are not what the blob holds, so it is not
    /// acknowledged, and the other write is reported as a bypass. So is a finished copy whose
    /// blob no longer carries this commit's id (`commit`) in its entry: Set Blob Metadata
    /// keeps the copy's id and status, and its ETag is not this commit's.
    pub(super) async fn copy_finished(
        &self,
        key: &str,
        copy: &str,
        commit: &str,
    ) -> Result<String, BackendError> {
        let blob = self.blob(key);
        for _ in 0..600 {
            let req = || Request::new(Method::HEAD, &self.container, &blob);
            let r = match self.client.read("Get Blob Properties", req).await {
                Ok(r) => r,
                Err(AzFailure::NotFound) => {
                    return Err(BackendError::Conflict {
                        expected: None,
                        found: None,
                    })
                }
                Err(f) => return Err(f.into_backend("Get Blob Properties")),
            };
            if header(&r, "x-ms-copy-id") != copy {
                tracing::warn!(key, "the blob was written by another request while fencegate's copy onto it was pending; the commit is not acknowledged");
                return Err(BackendError::Conflict {
                    expected: None,
                    found: Some(header(&r, "etag")),
                });
            }
            match header(&r, "x-ms-copy-status").as_str() {
                "pending" => tokio::time::sleep(Duration::from_millis(100)).await,
                "success" if meta::stored(r.headers()).is_some_and(|s| s.commit == commit) => {
                    return Ok(header(&r, "etag"))
                }
                "success" => {
                    tracing::warn!(key, "the blob's metadata was changed by another request once fencegate's copy onto it had finished; the commit is not acknowledged");
                    return Err(BackendError::Conflict {
                        expected: None,
                        found: Some(header(&r, "etag")),
                    });
                }
                other => {
                    return Err(BackendError::Failing(format!(
                        "Copy Blob onto {key} ended {other:?}: {}",
                        header(&r, "x-ms-copy-status-description")
                    )))
                }
            }
        }
        Err(BackendError::Timeout(format!(
            "Copy Blob onto {key} was still pending after 60 s"
        )))
    }

    /// Delete Blob if still at `expected`, refused by the service after `not_after` (or the
    /// commit deadline); a delete whose answer was lost is read back.
    pub(super) async fn delete_inner(
        &self,
        bucket: &str,
        key: &str,
        expected: &str,
        not_after: Option<std::time::SystemTime>,
    ) -> Result<(), BackendError> {
        let expiry = self.expiry(not_after);
        let deleted = self
            .delete_blob(&self.blob(key), Some(expected), Some(expiry))
            .await
            .map_err(|f| past_expiry(f, expiry));
        match deleted {
            Ok(()) => Ok(()),
            Err(AzFailure::Precondition | AzFailure::NotFound) => Err(BackendError::Conflict {
                expected: Some(expected.to_string()),
                found: self.version(bucket, key).await?,
            }),
            Err(f) if f.outcome_unknown() => {
                let error = f.into_backend("Delete Blob");
                match self.version(bucket, key).await {
                    Ok(None) => Ok(()),
                    _ => Err(error),
                }
            }
            Err(f) => Err(f.into_backend("Delete Blob")),
        }
    }
}

/// The service's 403 to a request whose SAS had expired by the time it arrived (its clock may
/// run a little ahead of this one's): nothing was written, and the gate may retry.
fn past_expiry(f: AzFailure, expiry: std::time::SystemTime) -> AzFailure {
    match f {
        AzFailure::Fault(BackendError::Refused {
            status: 403,
            message,
            ..
        }) if std::time::SystemTime::now() + Duration::from_secs(5) >= expiry => {
            AzFailure::Fault(BackendError::Expired(message))
        }
        other => other,
    }
}
