//! The commit and the delete: conditional on the generation the gate read (0: absent), each
//! going by a V4 signed URL that expires at its deadline (so a request held in flight cannot
//! land after the gate stopped waiting for it), read back by its commit id rather than re-sent
//! when its answer is lost, and refused when the service kept other bytes than were sent.

use super::client::Request;
use super::errors::GcsFailure;
use super::pieces::{compose_request, content_type, generation_of};
use super::*;

/// The MD5 of no bytes, base64.
const EMPTY_MD5: &str = "1B2M2Y8AsgTpgAmY7PhCfg==";

impl GcsBackend {
    /// After a commit whose outcome is unknown: the object, if it is the one this commit wrote.
    pub(super) async fn landed(&self, staged: &Staged, commit: &str) -> Option<ObjectInfo> {
        let name = self.object(&staged.key);
        let req = || Request::xml(Method::HEAD, &self.bucket, &name);
        let r = self.client.read("HEAD Object", req).await.ok()?;
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
        let StagedBody::Gcs(staging) = &staged.body else {
            return Err(BackendError::Failing(
                "a body staged by another backend cannot be committed to gcs".into(),
            ));
        };
        // Fixed before anything is sent: the signed URL expires when the gate stops waiting
        // for this commit, so a request held in flight (a proxy, a stalled connection) cannot
        // land after the object was given to a newer token.
        let expiry = self.expiry(not_after);
        let mut stored = meta::Stored {
            meta: staged.meta.clone(),
            etag: staged.etag.clone(),
            commit: staging.commit.clone(),
            parts: meta::part_runs(&staging.parts),
        };
        if meta::metadata_size(&stored) > meta::METADATA_LIMIT {
            // The parts give way to what the client sent: the object is then refused by part
            // number, never read as one part.
            stored.parts.clear();
        }
        let name = self.object(&staged.key);
        let mut req = Request::xml(Method::PUT, &self.bucket, &name)
            .header("x-goog-if-generation-match", expected.unwrap_or("0"))
            .header(meta::META_HEADER, meta::encode(&stored))
            .header("content-type", content_type(&staged.meta));
        let mut made = Vec::new();
        let op = match &staging.from {
            Source::Spooled(body) => {
                req = req.body(body.clone());
                match meta::content_md5(&staged.etag) {
                    Some(md5) => req = req.header("content-md5", md5),
                    // An upload of empty parts (its ETag is S3's multipart one): the MD5 of
                    // nothing, so its bytes are pinned as every other body's.
                    None if body.is_empty() => {
                        req = req.header("content-md5", EMPTY_MD5);
                    }
                    None => {}
                }
                "PUT Object"
            }
            Source::Pieces { pieces, .. } => {
                let (sources, intermediate) = self.fold_pieces(pieces).await?;
                made = intermediate;
                let body = compose_request(&sources);
                // The source list is signed with the request, so a held compose cannot be
                // altered to take other pieces.
                if let Some(bytes) = body.bytes() {
                    use sha2::Digest;
                    req = req.header(
                        "x-goog-content-sha256",
                        hex::encode(sha2::Sha256::digest(bytes)),
                    );
                }
                req = req.query("compose", "").body(body);
                "Compose"
            }
        };
        let outcome = self.client.send(op, req.signed_until(expiry)).await;
        for name in &made {
            self.drop_staging(name).await;
        }
        let answer = match outcome {
            Ok(r) => r,
            Err(GcsFailure::Precondition) => {
                return Err(BackendError::Conflict {
                    expected: expected.map(str::to_string),
                    found: self.version(&staged.bucket, &staged.key).await?,
                })
            }
            // A definite answer (nothing was applied), so the key is not held.
            Err(GcsFailure::NotFound) => {
                return Err(match &staging.from {
                    Source::Pieces { owned: false, .. } => BackendError::Invalid {
                        code: "InvalidPart",
                        message: format!("a stored piece of this upload's parts is gone from the store (a lifecycle rule on .fencegate-probe/?); upload the parts again, then complete: {}", staged.key),
                    },
                    Source::Pieces { .. } => BackendError::Refused {
                        status: 409,
                        code: "StagedPieceGone".into(),
                        message: format!("a staged piece of the body of {} is gone from the store (a lifecycle rule on .fencegate-probe/?); nothing was written, send the object again", staged.key),
                    },
                    Source::Spooled(_) => BackendError::Refused {
                        status: 404,
                        code: "NoSuchBucket".into(),
                        message: format!("the store has no bucket {:?}; nothing was written", self.bucket),
                    },
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
                        tracing::info!(key = %staged.key, "a commit that timed out had landed; read back its generation");
                        Ok(info)
                    }
                    None => Err(error),
                };
            }
            Err(f) => return Err(f.into_backend(op)),
        };
        let generation = generation_of(&answer, op)?;
        if let (Source::Spooled(_), Some(_)) = (&staging.from, meta::content_md5(&staged.etag)) {
            // The service checked the body against Content-MD5; an answer naming another
            // digest means something between kept other bytes.
            if let Some(kept) = meta::md5_of(answer.headers()) {
                if kept != staged.etag {
                    crate::metrics::store_integrity_failure("PUT Object");
                    return Err(BackendError::KeptDifferentBytes(format!(
                        "the store answered the PUT of {} with MD5 {kept}, but the MD5 of the bytes fencegate sent is {}: nothing was acknowledged; check for a proxy that rewrites bodies",
                        staged.key, staged.etag
                    )));
                }
            }
        }
        if let Source::Pieces {
            pieces,
            owned: true,
        } = &staging.from
        {
            // Composed: a large body's pieces have done their work.
            for (name, _) in pieces {
                self.drop_staging(name).await;
            }
        }
        Ok(ObjectInfo {
            key: staged.key.clone(),
            size: staged.size,
            etag: staged.etag.clone(),
            version: generation,
            last_modified_ms: crate::wall_clock::now_ms(),
            meta: staged.meta.clone(),
            parts: meta::parts_of(&stored.parts),
        })
    }

    /// DELETE Object if still at generation `expected`, refused by the service after
    /// `not_after` (or the commit deadline); a delete whose answer was lost is read back.
    pub(super) async fn delete_inner(
        &self,
        bucket: &str,
        key: &str,
        expected: &str,
        not_after: Option<std::time::SystemTime>,
    ) -> Result<(), BackendError> {
        let deleted = self
            .delete_object(&self.object(key), Some(expected), not_after)
            .await;
        match deleted {
            Ok(()) => Ok(()),
            Err(GcsFailure::Precondition | GcsFailure::NotFound) => Err(BackendError::Conflict {
                expected: Some(expected.to_string()),
                found: self.version(bucket, key).await?,
            }),
            Err(f) if f.outcome_unknown() => {
                let error = f.into_backend("DELETE Object");
                match self.version(bucket, key).await {
                    Ok(None) => Ok(()),
                    _ => Err(error),
                }
            }
            Err(f) => Err(f.into_backend("DELETE Object")),
        }
    }
}
