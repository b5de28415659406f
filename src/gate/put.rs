//! The put protocol, top to bottom, in ARCHITECTURE.md's order ("The path of one write"):
//!
//! 1. **admit** ([`Gate::admit_request`]): the bucket, the key, the token under the bucket's
//!    fencing mode, the scope;
//! 2. **early check**: a stale token is refused before a body byte is read;
//! 3. **stage**: the backend takes the body where no reader sees it;
//! 4. **lock** the scope (and the object, when the scope is wider) — from here on in a task of
//!    its own ([`super::run_to_end`]), so no client can cancel it;
//! 5. **re-check** under the lock (`checks.rs`, [`Gate::lock_checks`]);
//! 6. **intent** ([`Gate::record_intent`]): the token and the pending version, synced;
//! 7. **commit** ([`Gate::commit_or_adopt`]), conditional on the version recorded;
//! 8. **outcome** ([`Gate::record_landed`]): the row's version becomes the new one.
//!
//! Helpers live in files named for what they hold: `checks.rs` (the re-check), `rows.rs`
//! (saving rows), `intents.rs` (requests whose outcome is unknown), `meta.rs` (the metadata
//! stored), `idempotency.rs` (Idempotency-Key). Deletes and multipart completions reuse steps 1,
//! 4, 5 and the helpers.

use super::checks::Locked;
use super::intents::outcome_unknown;
use super::meta::own_meta;
use super::rows::rows_restored;
use super::{
    check_token, record_outcome, run_to_end, scope, BucketEntry, Gate, GateError, WriteRequest,
    WriteTicket, Written,
};
use crate::backend::{BackendError, ByteStream, ObjectInfo, Staged};
use crate::config::ScopeKind;
use crate::fence::{Durability, FenceRow, Pending};
use crate::token::Token;
use std::sync::Arc;
use tracing::Span;

/// A commit's intent as recorded: the rows saved with it, the rows a refusal restores, and the
/// version the commit is conditional on.
struct Intent {
    scope_row: FenceRow,
    object_row: FenceRow,
    before: (FenceRow, FenceRow),
    expected: Option<String>,
    /// Cluster mode: when the store refuses this commit's request.
    not_after: Option<std::time::SystemTime>,
}

impl Gate {
    /// PUT: the whole protocol for one write.
    pub async fn put(
        self: &Arc<Self>,
        mut req: WriteRequest,
        body: ByteStream,
    ) -> Result<Written, GateError> {
        let bucket = req.bucket.clone();
        let result: Result<Written, GateError> = async {
            // 1. Admit.
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
                // A first request that may have landed (its answer still on its intent) is
                // judged under the lock, where its answer comes before the token.
                answer_pending = Self::pending_answer(&req, &row);
            }

            // 2. Early check: a stale writer is refused before a single body byte is read.
            // On a shared table the row read here is also the decision's, unless it has to
            // be read again (docs/design.md, "The read before the body").
            let mut early = None;
            if let Some(t) = token.filter(|_| !answer_pending) {
                let row = self.row(&scope).await?;
                check_token(&entry.policy, t.0, &row, &scope)?;
                early = (self.store.shared() && req.idempotency.is_none()).then_some(row);
            }

            // 3. Stage, with no lock held: a slow upload never blocks the next holder.
            let (body, digest) = match req.idempotency {
                Some(_) => {
                    let (body, digest) = super::idempotency::BodyDigest::wrap(body);
                    (body, Some(digest))
                }
                None => (body, None),
            };
            let mut staged = entry
                .backend
                .stage(&req.bucket, &req.key, req.meta.clone(), body)
                .await?;
            // The body has ended: a checksum it proved to have is kept with the object.
            staged.meta.settle();
            if let Some(digest) = digest {
                self.fingerprint_put(&mut req, &scope, &digest.finish());
            }

            // 4 to 8 run to their end whatever the client does.
            let gate = Arc::clone(self);
            run_to_end(async move {
                gate.locked_commit(&req, &entry, &scope, token, staged, false, early)
                    .await
            })
            .await
        }
        .await;
        record_outcome("put", &bucket, &result);
        result
    }

    /// Step 1 of every fenced request: the bucket, a valid key, the token under the bucket's
    /// fencing mode, and the scope, recorded on the request's span.
    pub(super) fn admit_request(
        &self,
        req: &WriteRequest,
        is_delete: bool,
    ) -> Result<(WriteTicket, Option<Token>, String), GateError> {
        let entry = self.bucket_for_write(&req.bucket)?;
        scope::validate_key(&req.key)?;
        let token = Self::admit(&req.bucket, &entry.policy, req.token.clone(), is_delete)?;
        let scope = scope::resolve(
            &entry.policy,
            &req.bucket,
            &req.key,
            req.scope_header.as_deref(),
        )?;
        if req.scope_takeover.is_some() && entry.policy.scope != ScopeKind::Header {
            return Err(GateError::InvalidFencingScope(format!(
                "bucket {} does not fence by a Fencing-Scope header, so there is no scope to take an object over from; remove Fencing-Scope-Takeover",
                req.bucket
            )));
        }
        let span = Span::current();
        span.record("scope", scope.as_str());
        if let Some(t) = token {
            span.record("token", t.0);
        }
        Ok((entry, token, scope))
    }

    /// Steps 4 to 8 for a body already staged, discarding it on any refusal. Only ever called
    /// inside [`run_to_end`]. On a shared fence table, the decision is taken again while another
    /// instance changes the same rows in between (see [`super::again`]). `upload`: a multipart
    /// completion, whose parts are kept when it is refused only for now. `early`: the scope's
    /// row as a shared table's linearizable read gave it before the body, which the first
    /// decision may take instead of reading it again.
    #[allow(clippy::too_many_arguments)] // one call site each for puts and completions
    pub(super) async fn locked_commit(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        scope: &str,
        token: Option<Token>,
        staged: Staged,
        upload: bool,
        early: Option<FenceRow>,
    ) -> Result<Written, GateError> {
        // 4. Lock.
        let object_key = scope::object_row(&req.bucket, &req.key);
        let locks = self.locks.lock_object(scope, &object_key).await;
        // Another commit of this instance held the scope: it has most likely changed the row
        // since the early read, which would only cost a failed compare.
        let mut early =
            early.filter(|_| !locks.0.waited() && !locks.1.as_ref().is_some_and(|l| l.waited()));
        // Under `on_bypass = "adopt"` the store's real version is read first, so the client's
        // conditions are judged against the object the write will replace.
        let trust_row = entry.backend.conditional_commit(&staged)
            && entry.policy.on_bypass == crate::config::BypassPolicy::Reject;
        let mut attempt = 0;
        loop {
            let seen = early.take();
            let from_early = seen.is_some();
            let result = self
                .commit_once(
                    req,
                    entry,
                    (scope, &object_key),
                    token,
                    (trust_row, seen),
                    &staged,
                )
                .await;
            match result {
                // The row changed after the read before the body: decided again at once from
                // a fresh read, without the back-off that contention gets.
                Err(GateError::Store(crate::fence::StoreError::Conflict(_))) if from_early => {
                    crate::metrics::fence_conflict();
                    continue;
                }
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

    /// Steps 5 to 8, once, under the lock.
    async fn commit_once(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        (scope, object_key): (&str, &str),
        token: Option<Token>,
        (trust_row, seen): (bool, Option<FenceRow>),
        staged: &Staged,
    ) -> Result<Written, GateError> {
        // 5. Re-check.
        let locked = self
            .lock_checks(
                req,
                entry,
                (scope, seen),
                object_key,
                token,
                trust_row,
                false,
            )
            .await?;
        if let Some(replay) = locked.replay {
            return Ok(replay);
        }
        // 6. Intent.
        let intent = self
            .record_intent(req, entry, (scope, object_key), token, locked, staged)
            .await?;
        let rev = intent.object_row.rev;
        let undo = intent.before.1.clone();
        let Intent {
            scope_row,
            object_row,
            before,
            expected,
            not_after,
        } = intent;
        // 7. Commit.
        let landed = self
            .commit_or_adopt(
                req,
                entry,
                (scope, object_key),
                before,
                staged,
                (expected, not_after),
            )
            .await;
        let info = match landed {
            Ok(info) => info,
            Err(e) => {
                if !outcome_unknown(&e) {
                    // The store answered (or the request never left): nothing of it can land,
                    // so its intent goes (the raised token stays) instead of holding the
                    // object back. A refusal that put the rows back itself is left as it is. A
                    // failure here only delays.
                    if !rows_restored(&e) {
                        let undone = FenceRow { rev, ..undo };
                        let mut scope_row = scope_row;
                        super::intents::unmark_in_flight(&mut scope_row, &req.key);
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
        // 8. Outcome.
        self.record_landed(
            req,
            entry,
            (scope, object_key),
            token,
            (scope_row, object_row),
            (info, staged.size),
        )
        .await
    }

    /// Step 6: the token and the pending version, made durable before the backend changes.
    /// After a crash between the two, the token is still recorded and either version is
    /// recognised as ours. On a shared table the save is also the compare-and-swap that orders
    /// this commit against every other instance's: it succeeds only if no one changed these
    /// rows since they were checked.
    async fn record_intent(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        (scope, object_key): (&str, &str),
        token: Option<Token>,
        locked: Locked,
        staged: &Staged,
    ) -> Result<Intent, GateError> {
        let Locked {
            mut scope_row,
            mut object_row,
            current_etag,
            expected,
            replay: _,
        } = locked;
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
        self.mark_in_flight(entry, (scope, object_key), &req.key, &mut scope_row);
        object_row.version = expected.clone();
        object_row.etag = current_etag;
        object_row.pending = Some(Pending {
            // A write always leaves an object: a version the store has yet to assign is
            // unknown, never absent.
            version: Some(
                staged
                    .version
                    .clone()
                    .unwrap_or_else(|| crate::version::UNKNOWN_UNTIL_APPLIED.into()),
            ),
            etag: Some(staged.etag.clone()),
            answer: self.answer_for(
                req,
                token.map(|t| t.0),
                (Some(staged.etag.clone()), staged.size, None),
            ),
            in_flight_bound_ms: self.recorded_bound(entry),
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
        Ok(Intent {
            scope_row,
            object_row,
            before,
            expected,
            not_after: deadline.map(|(not_after, _)| not_after),
        })
    }

    /// Step 8: the row's version becomes the one that landed, and the intent is settled.
    async fn record_landed(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        (scope, object_key): (&str, &str),
        token: Option<Token>,
        (scope_row, mut object_row): (FenceRow, FenceRow),
        (info, size): (ObjectInfo, u64),
    ) -> Result<Written, GateError> {
        object_row.unresolved_until_ms = None;
        let landed = info.version.clone();
        object_row.version = Some(info.version);
        object_row.etag = Some(info.etag.clone());
        let pending = object_row.pending.take();
        super::idempotency::settle(&mut object_row, pending, Some(&info.etag));
        object_row.tombstone = false;
        // Lazy: losing this in a crash is safe, the pending entry above still recognises it.
        let overtaken = self
            .finish(
                (scope, scope_row),
                (object_key, &req.key),
                object_row,
                Durability::Lazy,
            )
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

    /// Step 7: the conditional commit. A conflict means the object is not at the version expected:
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
}
