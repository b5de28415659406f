//! What the gate checks under a scope's lock before anything changes: the token against the
//! scope's highest, the object's scope binding (header-scoped buckets), the backend's version
//! (bypass detection) and the client's conditions. Also the one way rows are saved.

use super::{check_token, BucketEntry, Gate, GateError, WriteRequest};
use crate::backend::BackendError;
use crate::config::{BypassPolicy, ScopeKind};
use crate::fence::{Durability, FenceRow};
use crate::token::Token;
use crate::version::same_version;

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

/// Whether a failed store request's outcome is unknown: its answer was lost, and the request
/// may still be applied. Any other failure is the store's answer, or came before the request
/// left: nothing of it can land.
pub(super) fn outcome_unknown(error: &GateError) -> bool {
    matches!(
        error,
        GateError::Backend(
            BackendError::Timeout(_)
                | BackendError::Unreachable(_)
                | BackendError::Failing(_)
                // A 503 from an intermediary may come after it forwarded the request.
                | BackendError::Throttled(_)
        )
    )
}

/// Did the row's pending commit or delete land, as far as the store's current version `found`
/// shows? Only if that outcome differs from what was there before: a rewrite of the same
/// bytes (same ETag), or a delete of an absent object, looks applied before it is, and counts
/// as not landed.
pub(super) fn pending_landed(row: &FenceRow, found: Option<&str>) -> bool {
    row.pending.as_ref().is_some_and(|p| {
        same_version(p.version.as_deref(), found)
            && !same_version(row.version.as_deref(), p.version.as_deref())
    })
}

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
    /// Checks, under the scope's lock, the token, the scope binding, the backend's version and
    /// the client's conditions. Nothing has been changed when this returns an error.
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
        scope: &str,
        object_key: &str,
        token: Option<Token>,
        trust_row: bool,
        is_delete: bool,
    ) -> Result<Locked, GateError> {
        let scope_row = self.row(scope).await?;
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
        self.check_resolved(req, entry, &object_row).await?;
        // Cluster mode: an ended intent is resolved before this decision builds on the row, so
        // that its version, if it lands after all (beyond every bound), is not taken for
        // fencegate's own by this commit's 412 path.
        let mut object_row = object_row;
        if self.intents.is_some() && object_key == scope {
            self.resolve_intent(entry, &req.bucket, &req.key, &mut object_row)
                .await?;
        }
        self.scope_resolved(entry, &req.bucket, &scope_row, Some(&req.key))
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
        Ok(Locked {
            scope_row,
            object_row,
            current_etag,
            expected: found,
            replay: None,
        })
    }

    /// An earlier request to the store whose answer was lost may still be applied (a slow
    /// store, a buffering proxy): nothing cancels a request in flight, and S3's conditions
    /// cannot fence it (it can find the key absent again, or its If-Match ETag back). So the
    /// object is refused until the store shows that request's outcome (the pending version) or
    /// the backend's bound on in-flight requests has passed (docs/threat-model.md).
    async fn check_resolved(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        object_row: &FenceRow,
    ) -> Result<(), GateError> {
        self.still_unresolved(entry, &req.bucket, &req.key, object_row)
            .await
    }

    /// Refuses while the object's row marks a store request whose outcome is unknown.
    pub(super) async fn still_unresolved(
        &self,
        entry: &BucketEntry,
        bucket: &str,
        key: &str,
        object_row: &FenceRow,
    ) -> Result<(), GateError> {
        let now = crate::wall_clock::now_ms();
        let until = match (object_row.unresolved_until_ms, &object_row.pending) {
            (Some(until), _) => until,
            // An intent with no deadline was left by a process that stopped mid-commit (a
            // crash, kill -9): its request may still be on its way to the store. On a store
            // whose requests can land late, it is held back like a lost answer, for the
            // backend's bound from this start.
            (None, Some(_)) if self.intents.is_none() => match entry.backend.in_flight_bound() {
                Some(bound) => self.started_ms.saturating_add(bound.as_millis() as u64),
                None => return Ok(()),
            },
            (None, _) => return Ok(()),
        };
        if now >= until {
            // Cluster mode: the intent has ended by this clock, which must be trusted for it.
            if let Some(bound) = self.intents {
                self.clock_trusted()?;
                self.ended_by_the_store(entry, key, until, bound).await?;
            }
            return Ok(());
        }
        let found = entry.backend.version(bucket, key).await?;
        if pending_landed(object_row, found.as_deref()) {
            return Ok(());
        }
        let key = key.to_string();
        let retry_after = (until - now).div_ceil(1000);
        if self.intents.is_some() {
            // Cluster mode: every intent carries its deadline, so this is a commit in
            // progress (here or on another instance), and usually ends within a round trip.
            return Err(GateError::CommitInProgress { key, retry_after });
        }
        Err(GateError::CommitUnresolved { key, retry_after })
    }

    /// Cluster mode, before deciding over an intent whose deadline this clock says has passed:
    /// the clock is compared with the store's now, not only by the watch's last sample (a
    /// clock stepped ahead in between). The store's `Date` has whole seconds, so this clock may
    /// run up to `ahead_max` ahead of the store's; the decision waits until the deadline has
    /// passed even then. Rare: only intents left by a paused or dead instance end this way.
    async fn ended_by_the_store(
        &self,
        entry: &BucketEntry,
        key: &str,
        until: u64,
        bound: super::IntentBound,
    ) -> Result<(), GateError> {
        let ahead_max = match entry.backend.clock_offset().await {
            None => return Ok(()),
            Some(Ok((_, ahead_max))) => ahead_max,
            Some(Err(e)) => {
                return Err(GateError::ClockSkewed(format!(
                    "cannot compare this instance's clock with the store's before deciding over an ended commit: {e}"
                )))
            }
        };
        let margin = (ahead_max - bound.skew.as_millis() as i64).max(0) as u64;
        let now = crate::wall_clock::now_ms();
        if now < until.saturating_add(margin) {
            return Err(GateError::CommitInProgress {
                key: key.to_string(),
                retry_after: (until + margin - now).div_ceil(1000),
            });
        }
        Ok(())
    }

    /// Cluster mode: an intent on `row` that [`Gate::still_unresolved`] let pass (it has
    /// landed, or its deadline has passed) is folded into the row: the landed version becomes
    /// the committed one, or the intent is dropped. Only for decisions that keep the row's
    /// versions (fence advances, lease grants); commits and deletes replace the intent with
    /// their own.
    pub(super) async fn resolve_intent(
        &self,
        entry: &BucketEntry,
        bucket: &str,
        key: &str,
        row: &mut FenceRow,
    ) -> Result<(), GateError> {
        let Some(pending) = row.pending.clone() else {
            return Ok(());
        };
        if row.unresolved_until_ms.is_none() {
            // Not a bounded intent (left by a crash of a single instance before cluster mode):
            // both versions stay fencegate's own.
            return Ok(());
        }
        let found = entry.backend.version(bucket, key).await?;
        if same_version(pending.version.as_deref(), found.as_deref()) {
            super::idempotency::keep_landed_answer(row, found.as_deref());
            row.version = pending.version;
            row.etag = pending.etag;
            row.tombstone = row.version.is_none();
        }
        row.pending = None;
        row.unresolved_until_ms = None;
        Ok(())
    }

    /// Cluster mode, for a commit or delete about to record its intent: the time after which
    /// the store refuses its request (`not_after`, the store's clock) and the deadline written
    /// on the intent (Unix ms), after which every instance may decide without its answer.
    /// `None` on a local table, where the scope's lock orders every decision.
    pub(super) fn intent_deadline(&self) -> Option<(std::time::SystemTime, u64)> {
        let bound = self.intents?;
        let now = crate::wall_clock::now_ms();
        let not_after = now.saturating_add(bound.ttl.as_millis() as u64);
        let until = not_after
            .saturating_add(bound.apply.as_millis() as u64)
            .saturating_add(bound.skew.as_millis() as u64);
        Some((
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(not_after),
            until,
        ))
    }

    /// Refuses while any other object of the scope has a store request whose outcome is
    /// unknown: that request would land in the scope after whatever this one is acknowledged
    /// for (a write of another object, an advance, a bound grant). `skip` is the object the
    /// caller checks itself.
    pub(super) async fn scope_resolved(
        &self,
        entry: &BucketEntry,
        bucket: &str,
        scope_row: &FenceRow,
        skip: Option<&str>,
    ) -> Result<(), GateError> {
        let now = crate::wall_clock::now_ms();
        for (key, until) in &scope_row.unresolved {
            if *until <= now || Some(key.as_str()) == skip {
                continue;
            }
            let row = self.row(&super::scope::object_row(bucket, key)).await?;
            self.still_unresolved(entry, bucket, key, &row).await?;
        }
        Ok(())
    }

    /// After a failed commit or delete: if the store's answer was lost and its request may
    /// still land, the object's row says until when (synced), so that `check_resolved` holds
    /// later requests back. The intent rows were already synced; this only adds the deadline.
    pub(super) async fn mark_unresolved(
        &self,
        entry: &BucketEntry,
        key: &str,
        rows: (&str, &FenceRow, &str, &FenceRow),
        error: &GateError,
    ) {
        let unknown = outcome_unknown(error);
        // Cluster mode: the intent already carries the deadline after which its request can
        // no longer land, and the rows say so until then.
        let Some(bound) = entry
            .backend
            .in_flight_bound()
            .filter(|_| unknown && self.intents.is_none())
        else {
            return;
        };
        let (scope, scope_row, object_key, object_row) = rows;
        let now = crate::wall_clock::now_ms();
        let until = now.saturating_add(bound.as_millis() as u64);
        let object_row = FenceRow {
            unresolved_until_ms: Some(until),
            ..object_row.clone()
        };
        let mut scope_row = scope_row.clone();
        if scope != object_key {
            scope_row.unresolved.retain(|_, u| *u > now);
            scope_row.unresolved.insert(key.to_string(), until);
        }
        let saved = self
            .save(scope, scope_row, object_key, object_row, Durability::Synced)
            .await;
        if let Err(GateError::Store(crate::fence::StoreError::Conflict(_))) = saved {
            // Another instance has taken the object over since: its commit is conditional on
            // the store's version, which this request's late landing changes.
            tracing::debug!(
                key = object_key,
                "the object changed on another instance; not marking it unresolved"
            );
        } else if let Err(e) = saved {
            tracing::error!(error = %e, key = object_key, "could not record an unresolved store request");
        } else {
            tracing::warn!(key = object_key, until_ms = until, "the store did not answer; the object is refused until its outcome shows or the deadline passes");
        }
    }

    /// In a header-scoped bucket an object belongs to the scope (the lock) that first wrote
    /// it, and keeps it through deletes (the tombstone keeps the binding). Tokens of different
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
                Err(GateError::BypassDetected { expected, found })
            }
            BypassPolicy::Adopt => {
                tracing::warn!(target: "fencegate::audit", bucket = %req.bucket, key = %req.key, %expected, %found,
                    "write behind fencegate's back detected; adopting the backend's version (on_bypass = adopt)");
                Ok(())
            }
        }
    }

    /// Records a commit's or a delete's outcome, after the store answered. The scope row is as
    /// the intent left it, so only the object's row is written (with the scope row when they
    /// are one row). On a shared table another instance may have taken the object over since
    /// (its own commit was conditional on this one's outcome): the row is then its, and this
    /// outcome is not written over it. Returns whether that happened.
    pub(super) async fn finish(
        &self,
        scope: &str,
        scope_row: FenceRow,
        object_key: &str,
        object_row: FenceRow,
        durability: Durability,
    ) -> Result<bool, GateError> {
        let finished = if object_key == scope {
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
}
