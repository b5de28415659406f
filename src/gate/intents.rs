//! Store requests whose outcome is not known yet. An intent (a pending version on an object's
//! row) is written before every commit or delete; when the store's answer is lost, the row also
//! says until when the request may still land, and the object (and its scope) is refused until
//! the store shows the outcome or that deadline passes (docs/threat-model.md, "Store outages,
//! stalls and slow disks"; in cluster mode, docs/design.md, "Bounded intents").

use super::{BucketEntry, Gate, GateError};
use crate::backend::BackendError;
use crate::fence::{Durability, FenceRow};
use crate::version::same_version;

/// A scope row's mark for a commit or delete in flight on one of its objects (one instance, a
/// scope wider than the object, a store whose requests can land late). It is saved with the
/// intent and removed with the outcome, so a crash leaves it behind: [`Gate::scope_resolved`]
/// then holds the whole scope back for that request, as `still_unresolved` holds its object,
/// and a newer token's write to another object, or an advance of the scope, waits until the
/// request's outcome shows or it can no longer land.
pub(super) const IN_FLIGHT: u64 = u64::MAX;

/// Removes `key`'s in-flight mark from its scope row; whether there was one.
pub(super) fn unmark_in_flight(scope_row: &mut FenceRow, key: &str) -> bool {
    let marked = scope_row.unresolved.get(key) == Some(&IN_FLIGHT);
    if marked {
        scope_row.unresolved.remove(key);
    }
    marked
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

impl Gate {
    /// Refuses while the object's row marks a store request whose outcome is unknown. An
    /// earlier request whose answer was lost may still be applied (a slow store, a buffering
    /// proxy): nothing cancels a request in flight, and S3's conditions cannot fence it (it can
    /// find the key absent again, or its If-Match ETag back). So the object is refused until the
    /// store shows that request's outcome (the pending version) or the backend's bound on
    /// in-flight requests has passed.
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
            // whose requests can land late, it is held back like a lost answer, from this
            // start (after the request was sent) for the longer of the backend's bound now and
            // the one the request was made with: a configuration lowered across the restart
            // does not shorten a signed request's validity.
            // In this process, a lost answer whose deadline could not be written leaves its
            // intent without one too: it is held by the deadline kept in memory.
            (None, Some(pending)) if self.intents.is_none() => {
                let now_bound = entry
                    .backend
                    .in_flight_bound()
                    .map(|b| b.as_millis() as u64);
                let crashed = now_bound
                    .max(pending.in_flight_bound_ms)
                    .map(|bound| self.started_ms.saturating_add(bound));
                let unmarked = self
                    .unmarked
                    .lock()
                    .get(&super::scope::object_row(bucket, key))
                    .copied();
                match crashed.max(unmarked) {
                    Some(until) => until,
                    None => return Ok(()),
                }
            }
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

    /// Single instance, for a commit or delete about to record its intent: the backend's bound
    /// on a request in flight, kept on the intent for [`Gate::still_unresolved`] after a crash.
    /// `None` in cluster mode, where the intent carries its deadline instead.
    pub(super) fn recorded_bound(&self, entry: &BucketEntry) -> Option<u64> {
        if self.intents.is_some() {
            return None;
        }
        let bound = entry.backend.in_flight_bound()?;
        Some(u64::try_from(bound.as_millis()).unwrap_or(u64::MAX))
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

    /// Marks `key`'s commit or delete in flight on its scope row ([`IN_FLIGHT`]), where a crash
    /// could leave it: the scope is wider than the object, the store's requests can land late,
    /// and no shared table gives every intent a deadline of its own.
    pub(super) fn mark_in_flight(
        &self,
        entry: &BucketEntry,
        (scope, object_key): (&str, &str),
        key: &str,
        scope_row: &mut FenceRow,
    ) {
        if self.intents.is_none()
            && scope != object_key
            && entry.backend.in_flight_bound().is_some()
        {
            scope_row.unresolved.insert(key.to_string(), IN_FLIGHT);
        }
    }

    /// Refuses while any other object of the scope has a store request whose outcome is
    /// unknown: that request would land in the scope after whatever this one is acknowledged
    /// for (a write of another object, an advance, a bound grant). `skip` is the object the
    /// caller has already found resolved itself ([`Gate::still_unresolved`]).
    ///
    /// The marks of requests found resolved (landed, or past their bound) are dropped from
    /// `scope_row`, which the caller saves with its decision: an in-flight mark a crash left
    /// has no outcome to remove it, and would otherwise hold the whole scope back again, for
    /// the full bound, after every later restart.
    pub(super) async fn scope_resolved(
        &self,
        entry: &BucketEntry,
        bucket: &str,
        scope_row: &mut FenceRow,
        skip: Option<&str>,
    ) -> Result<(), GateError> {
        let now = crate::wall_clock::now_ms();
        let mut resolved = Vec::new();
        for (key, until) in &scope_row.unresolved {
            if *until > now && Some(key.as_str()) != skip {
                let row = self.row(&super::scope::object_row(bucket, key)).await?;
                self.still_unresolved(entry, bucket, key, &row).await?;
            }
            resolved.push(key.clone());
        }
        for key in resolved {
            scope_row.unresolved.remove(&key);
        }
        Ok(())
    }

    /// After a failed commit or delete: if the store's answer was lost and its request may
    /// still land, the object's row says until when (synced), so that [`Gate::still_unresolved`] holds
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
            // The intent stays on the table without its deadline: held by this one, in memory.
            let mut unmarked = self.unmarked.lock();
            unmarked.retain(|_, u| *u > now);
            unmarked.insert(object_key.to_string(), until);
            tracing::error!(error = %e, key = object_key, until_ms = until, "could not record an unresolved store request; the object is refused until its outcome shows or the deadline passes, unless this process stops first");
        } else {
            tracing::warn!(key = object_key, until_ms = until, "the store did not answer; the object is refused until its outcome shows or the deadline passes");
        }
    }
}
