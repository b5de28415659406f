//! Deletes, fenced like writes. A delete that carries a token records it, with a tombstone,
//! durably before it answers, whether or not the object existed: S3's idempotent delete plus
//! the fence, so a zombie that was slow to create the object cannot create it after the new
//! holder's acknowledged delete. Like every commit, the locked section runs to its end in a
//! task of its own (see `put.rs`).

use super::checks::Locked;
use super::run_to_end;
use super::{record_outcome, scope, BucketEntry, Gate, GateError, WriteRequest, Written};
use crate::config::ScopeKind;
use crate::fence::{Durability, FenceRow, Pending};
use crate::token::Token;
use std::sync::Arc;

impl Gate {
    /// A batch of deletes (S3's DeleteObjects) judged once, before any key: where the bucket
    /// needs a token on deletes and the request carries none, every key would be refused, so
    /// the request is (a 428 per key inside a 200 is read as success by clients that do not
    /// look at per-key errors: s3cmd, fsspec).
    pub fn admit_batch_delete(
        &self,
        bucket: &str,
        token: &super::TokenInput,
    ) -> Result<(), GateError> {
        let entry = self.bucket(bucket)?;
        match token {
            Ok(None) => Self::admit(bucket, &entry.policy, Ok(None), true).map(|_| ()),
            _ => Ok(()),
        }
    }

    /// DELETE: fenced like a write; leaves a tombstone that keeps the highest token.
    pub async fn delete(self: &Arc<Self>, req: WriteRequest) -> Result<Written, GateError> {
        let bucket = req.bucket.clone();
        let result = self.delete_inner(req).await;
        record_outcome("delete", &bucket, &result);
        if let Ok(w) = &result {
            if !w.replayed && (w.existed == Some(true) || w.token.is_some()) {
                self.count_tombstones(&bucket, 1);
            }
        }
        result
    }

    async fn delete_inner(self: &Arc<Self>, mut req: WriteRequest) -> Result<Written, GateError> {
        let (entry, token, scope) = self.admit_request(&req, true)?;
        let _claim = self.claim_key(&req)?;
        if let Some(idem) = &mut req.idempotency {
            let asked = format!("{scope}\0{:?}", req.conditions);
            idem.fingerprint = super::idempotency::fingerprint(
                "delete",
                &req.bucket,
                &req.key,
                token.map(|t| t.0),
                asked.as_bytes(),
            );
        }
        let gate = Arc::clone(self);
        run_to_end(async move { gate.locked_delete(&req, &entry, &scope, token).await }).await
    }

    async fn locked_delete(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        scope: &str,
        token: Option<Token>,
    ) -> Result<Written, GateError> {
        let object_key = scope::object_row(&req.bucket, &req.key);
        let _locks = self.locks.lock_object(scope, &object_key).await;
        // On a shared fence table, taken again while other instances change the same rows.
        let mut attempt = 0;
        loop {
            match self
                .delete_attempt(req, entry, scope, &object_key, token)
                .await
            {
                Err(e) if super::again(&e, &mut attempt).await => continue,
                result => return result,
            }
        }
    }

    async fn delete_attempt(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        scope: &str,
        object_key: &str,
        token: Option<Token>,
    ) -> Result<Written, GateError> {
        let Locked {
            mut scope_row,
            mut object_row,
            expected,
            replay,
            ..
        } = self
            .lock_checks(req, entry, (scope, None), object_key, token, false, true)
            .await?;
        if let Some(replay) = replay {
            return Ok(replay);
        }
        if let Some(t) = token {
            scope_row.highest = Some(scope_row.highest.map_or(t.0, |h| h.max(t.0)));
            scope_row.fresh = false;
        }
        // A header-scoped object stays bound through the delete (to the deleter's lock, which
        // is the bound one or took it over). A key no lock owns is not claimed by a delete:
        // the token is recorded on the deleter's scope row, but binding the key would let one
        // delete (say with the top token) keep every other lock off it for good.
        let binding = (entry.policy.scope == ScopeKind::Header && object_row.scope.is_some())
            .then(|| scope.to_string());
        let mut tombstone = FenceRow {
            tombstone: true,
            scope: binding.clone(),
            answered: object_row.answered.clone(),
            rev: object_row.rev,
            floor_guard: object_row.floor_guard.clone(),
            ..FenceRow::default()
        };
        let written = |existed| Written {
            bucket: req.bucket.clone(),
            key: req.key.clone(),
            scope: scope.to_string(),
            token: token.map(|t| t.0),
            etag: None,
            size: 0,
            existed: Some(existed),
            replayed: false,
        };
        let Some(expected) = expected else {
            // Nothing to delete. With a token, the token and the tombstone are recorded (synced)
            // before the answer; without one there is nothing to fence, and no row is written
            // for a key nobody fences, unless the delete is keyed: its answer is kept, so that
            // its retry does not delete an object created since.
            if token.is_some() || req.idempotency.is_some() {
                if let Some(answer) =
                    self.answer_for(req, token.map(|t| t.0), (None, 0, Some(false)))
                {
                    super::idempotency::remember(&mut tombstone, answer);
                }
                self.save(scope, scope_row, object_key, tombstone, Durability::Synced)
                    .await?;
            }
            return Ok(written(false));
        };
        let unchanged = object_row.clone();
        object_row.version = Some(expected.clone());
        object_row.pending = Some(Pending {
            answer: self.answer_for(req, token.map(|t| t.0), (None, 0, Some(true))),
            in_flight_bound_ms: self.recorded_bound(entry),
            ..Pending::default()
        });
        // Cluster mode: the delete's request gets a deadline, on its intent (see `Gate::record_intent`, put.rs).
        let deadline = self.intent_deadline();
        object_row.unresolved_until_ms = deadline.map(|(_, until)| until);
        object_row.scope = binding;
        self.mark_in_flight(entry, (scope, object_key), &req.key, &mut scope_row);
        // The intent (the raised highest among it) is synced before the backend changes. If the
        // backend then refuses or fails, the raised highest stays: a token that was sent is
        // never forgotten, and the holder retries with the same token (docs/threat-model.md).
        // On a shared table it is the compare-and-swap that orders this delete against other
        // instances' commits.
        let rev = self
            .save(
                scope,
                scope_row.clone(),
                object_key,
                object_row.clone(),
                Durability::Synced,
            )
            .await?;
        for row in [&mut scope_row, &mut object_row, &mut tombstone] {
            row.rev = rev;
        }
        let deleted = match deadline {
            Some((not_after, _)) => {
                entry
                    .backend
                    .delete_by(&req.bucket, &req.key, &expected, not_after)
                    .await
            }
            None => entry.backend.delete(&req.bucket, &req.key, &expected).await,
        };
        if let Err(e) = deleted {
            let e = GateError::from(e);
            let conflict = matches!(
                e,
                GateError::Backend(crate::backend::BackendError::Conflict { .. })
            );
            if conflict {
                // Another instance's commit, most likely: taken again from the checks.
                self.still_ours(object_key, rev).await?;
            }
            if conflict || !super::intents::outcome_unknown(&e) {
                // The store answered (a write around fencegate, expired: after its deadline,
                // or another refusal): nothing of this delete can land, so the object's row is
                // as it was (the raised highest stays), and an expired request is taken again.
                let unchanged = FenceRow { rev, ..unchanged };
                super::intents::unmark_in_flight(&mut scope_row, &req.key);
                let saved = self
                    .save(scope, scope_row, object_key, unchanged, Durability::Synced)
                    .await;
                if conflict {
                    saved?;
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
        super::idempotency::settle(&mut tombstone, object_row.pending.take(), None);
        // Synced: the tombstone is part of what the acknowledgement promises (the raised
        // highest is already durable, on the scope row the intent wrote).
        self.finish(
            (scope, scope_row),
            (object_key, &req.key),
            tombstone,
            Durability::Synced,
        )
        .await?;
        Ok(written(true))
    }
}
