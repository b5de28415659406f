//! The commit protocol of one write (ARCHITECTURE.md, "The path of one write"): admit, early
//! check, stage, then under the scope's lock re-check, record the intent durably, commit
//! conditionally and record the outcome.
//!
//! **A commit, once started, runs to its end.** Everything from taking the scope's lock to the
//! backend's answer and the rows that record it runs in a task of its own ([`run_to_end`]);
//! the request only awaits that task's answer. A client that hangs up drops the request's
//! future, never the commit, so the scope's lock is released only when the backend has
//! answered and no later holder can slip in between a re-check and a rename. Every path that
//! changes a fence or an object goes through [`run_to_end`]: put, the multipart completion,
//! delete, fence advances and lease grants.

use super::checks::{header_scope_name, Locked};
use super::{
    check_token, record_outcome, scope, BucketEntry, Gate, GateError, WriteRequest, WriteTicket,
    Written,
};
use crate::backend::{BackendError, ByteStream, ObjectInfo, Staged};
use crate::config::ScopeKind;
use crate::fence::{Durability, FenceRow, Pending};
use crate::token::Token;
use std::future::Future;
use std::sync::Arc;
use tracing::Instrument;

/// Runs `work` to its end in a task of its own and returns its answer. Dropping the returned
/// future (a client that hangs up) leaves the task running: tokio detaches a task whose
/// handle is dropped. The task is tracked, so a shutdown waits for it (`crate::shutdown`).
pub async fn run_to_end<T, F>(work: F) -> Result<T, GateError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, GateError>> + Send + 'static,
{
    match crate::shutdown::commits()
        .spawn(work.in_current_span())
        .await
    {
        Ok(result) => result,
        Err(e) => {
            tracing::error!(error = %e, "a commit task panicked; its scope's lock was released when it unwound");
            Err(GateError::Internal(format!("the commit task failed: {e}")))
        }
    }
}

/// `fencing-token`, `fencing-scope` and `fencegate-split` in an object's metadata are written
/// by fencegate only: a client's own values would pass for the token or lock that wrote the
/// object, or for fencegate's own parts (dropped on every backend alike).
pub(super) fn reserve_meta(meta: &mut crate::backend::ObjectMeta) {
    meta.user_meta.remove("fencing-token");
    meta.user_meta.remove("fencing-scope");
    meta.user_meta.remove("fencegate-split");
}

/// S3 keeps at most 2 KB of user metadata, names and values.
const MAX_STORED_META: usize = 2048;

/// The metadata a write stores: the client's, the token, and in a header-scoped bucket the
/// lock's name. S3's 2 KB limit counts fencegate's entries too, so a write that would not fit
/// is refused here, before any intent, never by the store after it.
pub(super) fn own_meta(
    meta: &mut crate::backend::ObjectMeta,
    token: Option<u64>,
    entry: &super::BucketEntry,
    scope: &str,
) -> Result<(), GateError> {
    meta.token = token;
    reserve_meta(meta);
    if entry.policy.scope == ScopeKind::Header {
        // The object's metadata names its lock too, for whoever reads the store directly.
        meta.user_meta
            .insert("fencing-scope".into(), header_scope_name(scope).into());
    }
    let bytes = meta.user_meta_bytes();
    if bytes > MAX_STORED_META {
        return Err(GateError::InvalidArgument(format!(
            "the object's user metadata would be {bytes} bytes as a store counts it, with the room fencegate keeps for its own fencing-token{} and fencegate-split entries (and non-ASCII values encoded); S3 keeps at most {MAX_STORED_META}: send less",
            if entry.policy.scope == ScopeKind::Header { ", fencing-scope" } else { "" }
        )));
    }
    Ok(())
}

impl Gate {
    /// PUT: the whole commit protocol for one write.
    pub async fn put(
        self: &Arc<Self>,
        req: WriteRequest,
        body: ByteStream,
    ) -> Result<Written, GateError> {
        let bucket = req.bucket.clone();
        let result = self.put_inner(req, body).await;
        record_outcome("put", &bucket, &result);
        result
    }

    async fn put_inner(
        self: &Arc<Self>,
        mut req: WriteRequest,
        body: ByteStream,
    ) -> Result<Written, GateError> {
        let (entry, token, scope) = self.admit_request(&req, false)?;
        let _claim = self.claim_key(&req)?;
        own_meta(&mut req.meta, token.map(|t| t.0), &entry, &scope)?;
        let mut answer_pending = false;
        if req.idempotency.is_some() {
            // A retry of a request already answered is answered again, whatever its token
            // is worth now, without staging its body (only hashing it).
            let row = self.row(&scope::object_row(&req.bucket, &req.key)).await?;
            if Self::recorded(&req, &row).is_some() {
                let digest = super::idempotency::drain(body).await?;
                self.fingerprint_put(&mut req, &scope, &digest);
                return match self.answered_before(&entry, &req, &scope, &row).await? {
                    Some(replay) => Ok(replay),
                    // The answer expired while the body was read.
                    None => Err(GateError::IdempotencyKeyInUse(
                        "the answer kept for this Idempotency-Key expired while this request was received; send it again to have it carried out".into(),
                    )),
                };
            }
            // A first request that may have landed (its answer still on its intent) is judged
            // under the lock, where its answer comes before the token.
            answer_pending = Self::pending_answer(&req, &row);
        }
        if let Some(t) = token.filter(|_| !answer_pending) {
            // Early check: a stale writer is refused before a single body byte is read.
            check_token(&entry.policy, t.0, &self.row(&scope).await?, &scope)?;
        }

        let (body, digest) = match req.idempotency {
            Some(_) => {
                let (body, digest) = super::idempotency::BodyDigest::wrap(body);
                (body, Some(digest))
            }
            None => (body, None),
        };
        let staged = entry
            .backend
            .stage(&req.bucket, &req.key, req.meta.clone(), body)
            .await?;
        if let Some(digest) = digest {
            self.fingerprint_put(&mut req, &scope, &digest.finish());
        }

        self.lock_and_commit(req, entry, scope, token, staged).await
    }

    /// What a put asks: its object, scope (the lock, in a header-scoped bucket), token, body,
    /// metadata and conditions, so that a retry differing in any of them is not answered as the
    /// first (pinned by `the_lock_metadata_and_conditions_are_part_of_the_request`).
    fn fingerprint_put(&self, req: &mut WriteRequest, scope: &str, body_digest: &[u8]) {
        let mut content = body_digest.to_vec();
        content.extend_from_slice(
            format!("\0{scope}\0{:?}\0{:?}", req.meta, req.conditions).as_bytes(),
        );
        let fingerprint =
            super::idempotency::fingerprint("put", &req.bucket, &req.key, req.meta.token, &content);
        if let Some(idem) = &mut req.idempotency {
            idem.fingerprint = fingerprint;
        }
    }

    /// The authoritative half of a write: under the scope's lock, re-check and commit a body
    /// already staged (discarding it on any refusal). Runs to its end whatever the client does.
    pub(super) async fn lock_and_commit(
        self: &Arc<Self>,
        req: WriteRequest,
        entry: WriteTicket,
        scope: String,
        token: Option<Token>,
        staged: Staged,
    ) -> Result<Written, GateError> {
        let gate = Arc::clone(self);
        run_to_end(async move {
            gate.locked_commit(&req, &entry, &scope, token, staged, false)
                .await
        })
        .await
    }

    /// Only ever called inside [`run_to_end`]. On a shared fence table, the decision is taken
    /// again while another instance changes the same rows in between (see [`super::again`]).
    /// `upload`: a multipart completion, whose parts are kept when it is refused only for now.
    pub(super) async fn locked_commit(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        scope: &str,
        token: Option<Token>,
        staged: Staged,
        upload: bool,
    ) -> Result<Written, GateError> {
        let object_key = scope::object_row(&req.bucket, &req.key);
        let _locks = self.locks.lock_object(scope, &object_key).await;
        // Under `on_bypass = "adopt"` the store's real version is read first, so the client's
        // conditions are judged against the object the write will replace.
        let trust_row = entry.backend.conditional_commit(&staged)
            && entry.policy.on_bypass == crate::config::BypassPolicy::Reject;
        let mut attempt = 0;
        loop {
            let result = match self
                .lock_checks(req, entry, scope, &object_key, token, trust_row, false)
                .await
            {
                Ok(locked) => {
                    self.commit_staged(req, entry, scope, &object_key, token, locked, &staged)
                        .await
                }
                Err(e) => Err(e),
            };
            match result {
                Err(e) if super::again(&e, &mut attempt).await => continue,
                Err(e) if upload && e.for_now() => {
                    entry.backend.release(staged).await;
                    return Err(e);
                }
                Err(e) => {
                    entry.backend.discard(staged).await;
                    return Err(e);
                }
                Ok(written) => {
                    if written.replayed {
                        entry.backend.discard(staged).await;
                    }
                    return Ok(written);
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn commit_staged(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        scope: &str,
        object_key: &str,
        token: Option<Token>,
        locked: Locked,
        staged: &Staged,
    ) -> Result<Written, GateError> {
        let Locked {
            mut scope_row,
            mut object_row,
            current_etag,
            expected,
            replay,
        } = locked;
        if let Some(replay) = replay {
            return Ok(replay);
        }
        // The checks passed, so any earlier unresolved request has shown its outcome or can
        // no longer land. In cluster mode this commit's own request gets a deadline, written
        // on its intent: until then no instance decides over it (docs/design.md, "Bounded
        // intents").
        // `before` is taken first: a refusal restores it, and must not leave this commit's
        // deadline behind with no intent to go with it.
        let mut before = (scope_row.clone(), object_row.clone());
        let deadline = self.intent_deadline();
        object_row.unresolved_until_ms = deadline.map(|(_, until)| until);
        if let Some(t) = token {
            scope_row.highest = Some(scope_row.highest.map_or(t.0, |h| h.max(t.0)));
            scope_row.fresh = false;
        }
        if entry.policy.scope == ScopeKind::Header {
            object_row.scope = Some(scope.to_string());
        }
        // The intent is made durable before the backend changes: after a crash between the two,
        // the token is still recorded and either version is recognised as ours. On a shared
        // table it is also the compare-and-swap that orders this commit against every other
        // instance's: it succeeds only if no one changed these rows since they were checked.
        object_row.version = expected.clone();
        object_row.etag = current_etag;
        object_row.pending = Some(Pending {
            version: staged.version.clone(),
            etag: Some(staged.etag.clone()),
            answer: self.answer_for(
                req,
                token.map(|t| t.0),
                (Some(staged.etag.clone()), staged.size, None),
            ),
        });
        let rev = self
            .save(
                scope,
                scope_row.clone(),
                object_key,
                object_row.clone(),
                Durability::Synced,
            )
            .await?;
        for row in [
            &mut scope_row,
            &mut object_row,
            &mut before.0,
            &mut before.1,
        ] {
            row.rev = rev;
        }
        let size = staged.size;
        let undo = before.1.clone();
        let info = match self
            .commit_or_adopt(
                req,
                entry,
                (scope, object_key),
                before,
                staged,
                (expected, deadline.map(|(not_after, _)| not_after)),
            )
            .await
        {
            Ok(info) => info,
            Err(e) => {
                if !super::checks::outcome_unknown(&e) {
                    // The store answered (or the request never left): nothing of it can land,
                    // so its intent goes (the raised token stays) instead of holding the
                    // object back. A refusal that put the rows back itself is left as it is. A
                    // failure here only delays.
                    if !super::checks::rows_restored(&e) {
                        let undone = FenceRow { rev, ..undo };
                        let _ = self
                            .save(scope, scope_row, object_key, undone, Durability::Synced)
                            .await;
                    }
                    return Err(e);
                }
                self.mark_unresolved(
                    entry,
                    &req.key,
                    (scope, &scope_row, object_key, &object_row),
                    &e,
                )
                .await;
                return Err(e);
            }
        };
        object_row.unresolved_until_ms = None;
        let landed = info.version.clone();
        object_row.version = Some(info.version);
        object_row.etag = Some(info.etag.clone());
        let pending = object_row.pending.take();
        super::idempotency::settle(&mut object_row, pending, Some(&info.etag));
        object_row.tombstone = false;
        // Lazy: losing this in a crash is safe, the pending entry above still recognises it.
        let overtaken = self
            .finish(scope, scope_row, object_key, object_row, Durability::Lazy)
            .await?;
        if overtaken {
            self.landed_after_newer(req, entry, (scope, object_key), token, &landed)
                .await;
        }
        Ok(Written {
            bucket: req.bucket.clone(),
            key: req.key.clone(),
            scope: scope.to_string(),
            token: token.map(|t| t.0),
            etag: Some(info.etag),
            size,
            existed: None,
            replayed: false,
        })
    }

    /// The conditional commit. A conflict means the object is not at the version expected:
    /// either a crash left it at our own pending version (committed again on that), or a write
    /// made around fencegate changed it. That is refused, with the fence rows restored to
    /// `before` so that the refused write leaves the table as it was (docs/design.md, contract line 7), or,
    /// under `on_bypass = "adopt"`, committed once more over the foreign version.
    async fn commit_or_adopt(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        (scope, object_key): (&str, &str),
        before: (FenceRow, FenceRow),
        staged: &Staged,
        (expected, not_after): (Option<String>, Option<std::time::SystemTime>),
    ) -> Result<ObjectInfo, GateError> {
        let commit = |expected: Option<String>| async move {
            match not_after {
                Some(t) => {
                    entry
                        .backend
                        .commit_by(staged, expected.as_deref(), t)
                        .await
                }
                None => entry.backend.commit(staged, expected.as_deref()).await,
            }
        };
        match commit(expected).await {
            Err(BackendError::Conflict { found, .. }) => {
                self.still_ours(object_key, before.1.rev).await?;
                let (scope_row, object_row) = before;
                if !object_row.owns_version(found.as_deref()) {
                    let refused = match self.bypassed(req, entry, &object_row, found.as_deref()) {
                        Err(refused) => Some(refused),
                        // Adopted: the client's conditions are judged against the object
                        // this write replaces, not the one the fence table remembered.
                        Ok(()) => {
                            let foreign = match &found {
                                None => None,
                                Some(_) => Some(
                                    entry
                                        .backend
                                        .head(&req.bucket, &req.key)
                                        .await
                                        .ok()
                                        .flatten()
                                        .map_or_else(String::new, |i| i.etag),
                                ),
                            };
                            req.conditions
                                .judge(foreign.as_deref(), &req.bucket, &req.key)
                                .err()
                        }
                    };
                    if let Some(refused) = refused {
                        self.save(scope, scope_row, object_key, object_row, Durability::Synced)
                            .await?;
                        return Err(refused);
                    }
                } else if let Err(failed) = req.conditions.judge(
                    object_row.etag_of(found.as_deref()).as_deref(),
                    &req.bucket,
                    &req.key,
                ) {
                    // One of fencegate's own versions, but not the one the client's conditions
                    // were judged against (a crash, or another instance's commit, left it):
                    // judged again on it.
                    self.save(scope, scope_row, object_key, object_row, Durability::Synced)
                        .await?;
                    return Err(failed);
                }
                Ok(commit(found).await?)
            }
            other => Ok(other?),
        }
    }

    /// Shared tables: this commit landed, but another instance changed the object's row since
    /// this one's intent. Normally that instance's commit comes after this one's: it saw this
    /// version (its row owns `landed`), or its commit is still going (a pending version: its
    /// condition fails on `landed` and it takes this version over), or it has landed (the
    /// store holds its version). If instead a newer token's commit has finished, its row does
    /// not know `landed`, and the store holds `landed`, then the store's condition matched a
    /// version that came back: the newer holder rewrote the exact bytes this commit expected
    /// (the ETag ABA). Bounded intents (docs/design.md) leave no way to this on a store that
    /// refuses expired presigned requests; it stays as the alarm for one that does not.
    /// Nothing undoes that now; it is said loudly, for an alert, and the next write of the
    /// object is refused as a bypass until an operator looks.
    async fn landed_after_newer(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        (scope, object_key): (&str, &str),
        token: Option<Token>,
        landed: &str,
    ) {
        let Some(t) = token else { return };
        let (Ok(scope_row), Ok(object_row)) = (self.row(scope).await, self.row(object_key).await)
        else {
            return;
        };
        let newer = scope_row.highest.is_some_and(|h| h > t.0);
        if !newer || object_row.pending.is_some() || object_row.owns_version(Some(landed)) {
            return;
        }
        let Ok(found) = entry.backend.version(&req.bucket, &req.key).await else {
            return;
        };
        if crate::version::same_version(found.as_deref(), Some(landed)) {
            crate::metrics::stale_landing(&req.bucket);
            tracing::error!(bucket = %req.bucket, key = %req.key, token = t.0, highest = scope_row.highest,
                "a stale write landed after a newer token's: the store applied this commit's request after its intent's deadline (check that the store refuses expired presigned requests and that the clocks agree, docs/design.md, \"Bounded intents\"); the next write of this object is refused as a bypass until an operator checks it");
        }
    }

    /// Shared tables, after the store refused a conditional commit or delete: if another
    /// instance changed the object's row since this one recorded its intent (at `rev`), the
    /// store's new version is most likely that instance's commit, not a write around
    /// fencegate. Nothing of this attempt landed, so it is taken again from the checks
    /// ([`StoreError::Conflict`](crate::fence::StoreError::Conflict)), where a newer token
    /// refuses it as stale.
    pub(super) async fn still_ours(&self, object_key: &str, rev: i64) -> Result<(), GateError> {
        if !self.store.shared() {
            return Ok(());
        }
        let now = self.row(object_key).await?;
        if now.rev != rev {
            return Err(crate::fence::StoreError::Conflict(object_key.to_string()).into());
        }
        Ok(())
    }
}
