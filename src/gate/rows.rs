//! The one way the gate writes fence rows: a decision's scope row and object row saved
//! together, and a commit's outcome recorded after the store answered.

use super::{BucketEntry, Gate, GateError, WriteRequest};
use crate::backend::BackendError;
use crate::fence::{Durability, FenceRow};
use crate::token::Token;

/// Whether the refusal already put the rows back as they were (docs/design.md, contract line 7).
pub(super) fn rows_restored(error: &GateError) -> bool {
    matches!(
        error,
        GateError::PreconditionFailed(_)
            // If-Match on an absent object: a failed condition too.
            | GateError::NoSuchKey { .. }
            | GateError::BypassDetected { .. }
            | GateError::Backend(BackendError::Conflict { .. })
            | GateError::Store(_)
    )
}

impl Gate {
    /// Records a commit's or a delete's outcome, after the store answered. The scope row is as
    /// the intent left it, so only the object's row is written (with the scope row when they
    /// are one row, or when the intent marked it in flight, `intents::IN_FLIGHT`: `key`'s mark
    /// goes with the outcome). On a shared table another instance may have taken the object
    /// over since (its own commit was conditional on this one's outcome): the row is then its,
    /// and this outcome is not written over it. Returns whether that happened.
    pub(super) async fn finish(
        &self,
        (scope, mut scope_row): (&str, FenceRow),
        (object_key, key): (&str, &str),
        object_row: FenceRow,
        durability: Durability,
    ) -> Result<bool, GateError> {
        let unmarked = super::intents::unmark_in_flight(&mut scope_row, key);
        let finished = if object_key == scope || unmarked {
            self.save(scope, scope_row, object_key, object_row, durability)
                .await
        } else {
            self.store
                .put(vec![(object_key.to_string(), object_row)], durability)
                .await
                .map_err(GateError::from)
        };
        match finished {
            Err(GateError::Store(crate::fence::StoreError::Conflict(_))) => Ok(true),
            Ok(_) => Ok(false),
            // Cluster mode: the store has answered, and the intent (token, pending version,
            // deadline) is durable on etcd, so every instance recognises the outcome from the
            // store; the client is told what happened, not that the fence table failed.
            Err(GateError::Store(e)) if self.intents.is_some() => {
                tracing::warn!(error = %e, row = object_key, "the outcome is in the store but could not be recorded in the fence table; its intent stands for it");
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Writes the scope row and the object row (one row when they are the same) in one put.
    /// Returns the revision both rows have now (shared tables; 0 on a local one).
    pub(super) async fn save(
        &self,
        scope: &str,
        scope_row: FenceRow,
        object_key: &str,
        object_row: FenceRow,
        durability: Durability,
    ) -> Result<i64, GateError> {
        let rows = if object_key == scope {
            vec![(
                scope.to_string(),
                FenceRow {
                    highest: scope_row.highest,
                    fresh: scope_row.fresh,
                    ..object_row
                },
            )]
        } else {
            vec![
                (scope.to_string(), scope_row),
                (object_key.to_string(), object_row),
            ]
        };
        Ok(self.store.put(rows, durability).await?)
    }

    /// A row as the table holds it; for a key without one, the empty row, whose highest token
    /// is its bucket's floor when it is an object's row (`tombstones.rs`).
    pub(super) async fn row(&self, key: &str) -> Result<FenceRow, GateError> {
        // A shared table reads an object's row and its bucket's floor in one round trip: a
        // key without a row needs both, and one request costs what one read of the row does.
        if let Some(floor_key) = super::tombstones::floor_of(key).filter(|_| self.store.shared()) {
            let (row, floor) = self.store.get_pair(key, &floor_key).await?;
            return Ok(
                row.unwrap_or_else(|| super::tombstones::shared_absent_row(floor_key, floor))
            );
        }
        match self.store.get(key).await? {
            Some(row) => Ok(row),
            None => self.absent_row(key).await,
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
    pub(super) async fn landed_after_newer(
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
}
