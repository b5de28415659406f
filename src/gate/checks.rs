//! What the gate checks under a scope's lock before anything changes: the token against the
//! scope's highest, the object's scope binding (header-scoped buckets), the backend's version
//! (bypass detection) and the client's conditions: the re-check of every write and delete.

use super::{check_token, BucketEntry, Gate, GateError, WriteRequest};
use crate::config::{BypassPolicy, ScopeKind};
use crate::fence::{Durability, FenceRow};
use crate::token::Token;

/// Everything a commit needs, read under the scope's lock.
pub(super) struct Locked {
    pub scope_row: FenceRow,
    pub object_row: FenceRow,
    /// The current object's ETag (`None`: absent).
    pub current_etag: Option<String>,
    /// The version the backend operation is made conditional on.
    pub expected: Option<String>,
    /// An idempotent request answered before: its answer, replayed, and nothing is changed.
    pub replay: Option<super::Written>,
}

/// The lock name a `header:` scope row carries (`header:bucket#name` -> `name`).
pub(super) fn header_scope_name(scope: &str) -> &str {
    scope.split_once('#').map_or(scope, |(_, name)| name)
}

impl Gate {
    /// Checks, under the scope's lock, the token, the scope binding, the backend's version and
    /// the client's conditions. Nothing has been changed when this returns an error.
    ///
    /// `seen`: the scope's row as read before the body on a shared table, taken instead of a
    /// second read.
    ///
    /// With `trust_row` the version expected is the one the fence table recorded, with no
    /// backend round trip: the backend's commit is an atomic compare-and-swap on it, so a write
    /// made around fencegate still fails the commit (see [`Gate::commit_or_adopt`]). A row with
    /// a pending version is never trusted: the commit that wrote it ended without confirming
    /// (fencegate crashed, or the backend failed), the backend may hold either version, and the
    /// client's conditions must be judged against the one it really holds.
    #[allow(clippy::too_many_arguments)] // one call site each for writes and deletes
    pub(super) async fn lock_checks(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        (scope, seen): (&str, Option<FenceRow>),
        object_key: &str,
        token: Option<Token>,
        trust_row: bool,
        is_delete: bool,
    ) -> Result<Locked, GateError> {
        let mut scope_row = match seen {
            // A shared table's linearizable read of this row, made before the body: every
            // save below compares its revision, so a change since fails it and writes nothing
            // (docs/design.md, "The read before the body").
            Some(row) => row,
            None => self.row(scope).await?,
        };
        let object_row = if object_key == scope {
            scope_row.clone()
        } else {
            self.row(object_key).await?
        };
        // Before the token: a retry is answered as its first request was, even once a newer
        // token has been recorded. Judged on the rows this decision saves over, so that two
        // instances cannot both carry out one key (the save is a compare-and-swap on them).
        if let Some(replay) = self.answered_before(entry, req, scope, &object_row).await? {
            if Self::recorded(req, &object_row).is_none() {
                // Replayed from an intent that landed: its outcome is recorded now, so that
                // the next retry finds the answer whatever happens to the intent.
                let mut folded = object_row.clone();
                super::idempotency::fold_landed(&mut folded);
                self.save(
                    scope,
                    scope_row.clone(),
                    object_key,
                    folded,
                    Durability::Synced,
                )
                .await?;
            }
            return Ok(Locked {
                scope_row,
                object_row,
                current_etag: None,
                expected: None,
                replay: Some(replay),
            });
        }
        // The token is judged under the bucket's policy as it is now, not as the request found
        // it: a reload may have made tokens required (or strictly increasing) since this
        // request, or the multipart upload it completes, began, and a write begun before must
        // not land after the holder's token or tombstone under the old rules. After the replay
        // above, which writes nothing.
        let now = self.bucket(&req.bucket)?;
        match token {
            None => {
                Self::admit(&req.bucket, &now.policy, Ok(None), is_delete)?;
            }
            Some(t) => check_token(&now.policy, t.0, &scope_row, scope)?,
        }
        self.check_binding(req, entry, scope, &object_row, token)
            .await?;
        self.still_unresolved(entry, &req.bucket, &req.key, &object_row)
            .await?;
        // Cluster mode: an ended intent is resolved before this decision builds on the row, so
        // that its version, if it lands after all (beyond every bound), is not taken for
        // fencegate's own by this commit's 412 path.
        let mut object_row = object_row;
        if self.intents.is_some() && object_key == scope {
            self.resolve_intent(entry, &req.bucket, &req.key, &mut object_row)
                .await?;
        }
        self.scope_resolved(entry, &req.bucket, &mut scope_row, Some(&req.key))
            .await?;
        let found = if trust_row && object_row.pending.is_none() {
            object_row.version.clone()
        } else {
            entry.backend.version(&req.bucket, &req.key).await?
        };
        super::idempotency::keep_landed_answer(&mut object_row, found.as_deref());
        let current_etag = if object_row.owns_version(found.as_deref()) {
            object_row.etag_of(found.as_deref())
        } else {
            // Shared tables: the row read may be older than the store's version (another
            // instance's commit landed and finished in between): read again, not a bypass.
            self.still_ours(object_key, object_row.rev).await?;
            self.bypassed(req, entry, &object_row, found.as_deref())?;
            // Adopted: the foreign object's ETag, if it can be read at all ("" still exists).
            let head = entry
                .backend
                .head(&req.bucket, &req.key)
                .await
                .ok()
                .flatten();
            head.map(|i| i.etag)
                .or_else(|| found.as_ref().map(|_| String::new()))
        };
        req.conditions
            .judge(current_etag.as_deref(), &req.bucket, &req.key)?;
        if req.conditions.if_unchanged.is_some() {
            // Only a rewrite asks: one more read of the object, under the lock.
            let now = entry.backend.head(&req.bucket, &req.key).await?;
            req.conditions.unchanged(now.as_ref())?;
        }
        Ok(Locked {
            scope_row,
            object_row,
            current_etag,
            expected: found,
            replay: None,
        })
    }

    /// In a header-scoped bucket an object belongs to the scope (the lock) that first wrote
    /// it, and keeps it through deletes (the tombstone keeps the binding); a delete of a key no
    /// lock owns binds nothing (see `delete.rs`). Tokens of different
    /// locks are not comparable, so a write under another scope is refused, unless it takes the
    /// object over explicitly: `Fencing-Scope-Takeover` names the bound scope and the token is
    /// strictly above everything that scope recorded (docs/threat-model.md).
    async fn check_binding(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        scope: &str,
        object_row: &FenceRow,
        token: Option<Token>,
    ) -> Result<(), GateError> {
        if entry.policy.scope != ScopeKind::Header {
            return Ok(());
        }
        let Some(bound) = object_row.scope.as_deref() else {
            return Ok(());
        };
        if bound == scope {
            return Ok(());
        }
        let bound_name = header_scope_name(bound).to_string();
        let mismatch = || GateError::FencingScopeMismatch {
            key: req.key.clone(),
            bound: bound_name.clone(),
            scope: header_scope_name(scope).to_string(),
        };
        if req.scope_takeover.as_deref() != Some(bound_name.as_bytes()) {
            return Err(mismatch());
        }
        let Some(t) = token else {
            return Err(mismatch());
        };
        match self.row(bound).await?.highest {
            Some(h) if t.0 <= h => Err(GateError::StaleFencingToken {
                token: t.0,
                highest: h,
                scope: bound.to_string(),
                floor: false,
            }),
            _ => {
                tracing::warn!(target: "fencegate::audit", bucket = %req.bucket, key = %req.key,
                    from = %bound_name, to = %header_scope_name(scope), token = t.0,
                    "object taken over by another fencing scope");
                Ok(())
            }
        }
    }

    /// A version fencegate did not commit: count and log it, then refuse (the default) or let
    /// the write adopt it, as the bucket's policy says.
    pub(super) fn bypassed(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        object_row: &FenceRow,
        found: Option<&str>,
    ) -> Result<(), GateError> {
        let expected = object_row
            .version
            .as_deref()
            .unwrap_or("absent")
            .to_string();
        let found = found.unwrap_or("absent").to_string();
        crate::metrics::bypass_detected(&req.bucket);
        match entry.policy.on_bypass {
            BypassPolicy::Reject => {
                tracing::error!(bucket = %req.bucket, key = %req.key, %expected, %found,
                    "write behind fencegate's back detected; refusing to overwrite it (on_bypass = reject)");
                // A key deleted or written through fencegate is known, whatever it holds now:
                // only one fencegate has no trace of gets the advice for a moved bucket.
                let never_recorded = object_row.version.is_none()
                    && object_row.etag.is_none()
                    && object_row.highest.is_none()
                    && object_row.pending.is_none()
                    && !object_row.tombstone;
                Err(GateError::BypassDetected {
                    bucket: req.bucket.clone(),
                    expected,
                    found,
                    never_recorded,
                })
            }
            BypassPolicy::Adopt => {
                tracing::warn!(target: "fencegate::audit", bucket = %req.bucket, key = %req.key, %expected, %found,
                    "write behind fencegate's back detected; adopting the backend's version (on_bypass = adopt)");
                Ok(())
            }
        }
    }
}
