//! Bounds what deletes leave behind. A delete that carries a token leaves a tombstone row
//! keeping that token, also for a key that never existed, so anyone who may delete could grow
//! the fence table without end (about 1 KB a delete, for nothing the store holds). Past
//! `[server] max_tombstones_per_bucket` in a bucket, its tombstones that keep nothing but a
//! token are *folded*: each row goes, and its token is kept by the bucket's floor row
//! (`floor:<bucket>`), the highest token of every tombstone folded there. A key without a row
//! is judged as if its row held the floor, so no write below a folded tombstone's token ever
//! lands; what a fold costs is that a never-written key of the bucket needs a token at least
//! the floor too (docs/design.md, "Tombstones and the floor").
//!
//! The fold of one row takes that row's scope lock and re-reads it, so it never races the
//! row's writer on this instance; on a shared table every put that creates a row is also
//! conditional on the floor it was judged against ([`FenceRow::floor_guard`]), which orders it
//! against a fold on another instance.

use super::{scope, Gate, GateError};
use crate::fence::{FenceRow, StoreError};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The floor row of `bucket`.
pub fn floor_row(bucket: &str) -> String {
    format!("floor:{bucket}")
}

/// The floor row of the bucket of an object's row key (`object:bucket/key`).
pub(super) fn floor_of(key: &str) -> Option<String> {
    let rest = key.strip_prefix("object:")?;
    Some(floor_row(rest.split_once('/')?.0))
}

/// On a shared table, the row of an object key that has none, judged by its bucket's floor
/// as read (`floor`, at `floor_key`): a put that creates the row is conditional on the floor's
/// revision.
pub(super) fn shared_absent_row(floor_key: String, floor: Option<FenceRow>) -> FenceRow {
    FenceRow {
        highest: floor.as_ref().and_then(|f| f.highest),
        floor_guard: Some((floor_key, floor.map_or(0, |f| f.rev))),
        ..FenceRow::default()
    }
}

/// How many tombstones a bucket may keep before they are folded, and what this instance has
/// counted since its last fold of each bucket.
#[derive(Default)]
pub struct TombstoneBound {
    /// `0`: never folded.
    max: u64,
    written: Mutex<HashMap<String, u64>>,
    folding: Mutex<HashSet<String>>,
}

impl TombstoneBound {
    pub fn new(max: u64) -> TombstoneBound {
        TombstoneBound {
            max,
            ..TombstoneBound::default()
        }
    }
}

/// How often one row's fold is tried again when another instance changed it or the floor.
const CONFLICT_ATTEMPTS: u32 = 8;

impl Gate {
    /// The row of an object key that has none: empty, with its bucket's floor as its highest
    /// token (and, on a shared table, the floor's revision as its guard).
    pub(super) async fn absent_row(&self, key: &str) -> Result<FenceRow, GateError> {
        let Some(bucket) = key
            .strip_prefix("object:")
            .and_then(|rest| rest.split_once('/'))
            .map(|(bucket, _)| bucket)
        else {
            return Ok(FenceRow::default());
        };
        // Read every time, never cached: a fold of another key may raise the floor between a
        // read and a cache's update, and a cache written with the older value would forget the
        // folded tokens (a point read of a row that is mostly absent costs a bloom filter).
        let floor_key = floor_row(bucket);
        let floor = self.store.get(&floor_key).await?;
        let highest = floor.as_ref().and_then(|f| f.highest);
        if self.store.shared() {
            return Ok(shared_absent_row(floor_key, floor));
        }
        // A local table ignores the guard; it marks where the highest token came from.
        Ok(FenceRow {
            highest,
            floor_guard: highest.map(|_| (floor_key, 0)),
            ..FenceRow::default()
        })
    }

    /// Adds `n` to what this instance counted in `bucket` (one per tombstone a delete leaves,
    /// or a start-up count), and starts a fold of the bucket in the background once the count
    /// reaches the bound.
    pub fn count_tombstones(self: &Arc<Self>, bucket: &str, n: u64) {
        let bound = &self.tombstones;
        if bound.max == 0 {
            return;
        }
        {
            let mut written = bound.written.lock();
            let count = written.entry(bucket.to_string()).or_default();
            *count += n;
            if *count < bound.max || !bound.folding.lock().insert(bucket.to_string()) {
                return;
            }
            *count = 0;
        }
        let gate = Arc::clone(self);
        let bucket = bucket.to_string();
        tokio::spawn(async move {
            match gate.fold_tombstones(&bucket).await {
                Ok(folded) => {
                    tracing::info!(%bucket, folded, max_tombstones_per_bucket = gate.tombstones.max,
                    "folded the bucket's tombstones into its floor: a key without a row now needs a token at least the floor")
                }
                Err(e) => {
                    tracing::warn!(%bucket, error = %e, "cannot fold the bucket's tombstones; the next delete past the bound tries again")
                }
            }
            gate.tombstones.folding.lock().remove(&bucket);
        });
    }

    /// Folds every tombstone of `bucket` that keeps nothing but its token into the bucket's
    /// floor. Returns how many rows went.
    pub async fn fold_tombstones(&self, bucket: &str) -> Result<u64, GateError> {
        let now = crate::wall_clock::now_ms();
        let candidates = self
            .foldable_rows(scope::object_row(bucket, ""), now)
            .await?;
        let floor_key = floor_row(bucket);
        let mut floor = self.store.get(&floor_key).await?.unwrap_or_default();
        let mut folded = 0;
        for key in candidates {
            // The row's own lock: its writers on this instance wait, and find it gone (or
            // find the fold skipped it, if they changed it first).
            let _lock = self.locks.lock(&key).await;
            let mut attempt = 0;
            loop {
                let Some(row) = self.store.get(&key).await? else {
                    break;
                };
                if !row.foldable(now) {
                    break;
                }
                let raised = row.highest.is_some_and(|h| floor.highest < Some(h));
                let mut new_floor = floor.clone();
                if raised {
                    new_floor.highest = row.highest;
                }
                let write = raised.then(|| (floor_key.clone(), new_floor.clone()));
                match self.store.fold(write, vec![(key.clone(), row.rev)]).await {
                    Ok(rev) => {
                        if raised {
                            floor = FenceRow { rev, ..new_floor };
                        }
                        folded += 1;
                        break;
                    }
                    Err(StoreError::Conflict(_)) if attempt < CONFLICT_ATTEMPTS => {
                        // Another instance changed the row or the floor: read both again.
                        attempt += 1;
                        floor = self.store.get(&floor_key).await?.unwrap_or_default();
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        crate::metrics::tombstones_folded(bucket, folded);
        Ok(folded)
    }

    /// At start-up: counts each bucket's foldable tombstones, so that a bucket already past the
    /// bound is folded now rather than after the next `max` deletes (a restart forgets what
    /// this instance counted, and on a shared table every restart would otherwise let one
    /// instance add up to the bound again). A scan of the object rows, in the background; on
    /// etcd, in pages, once per start of each instance.
    pub async fn count_tombstones_at_start(self: &Arc<Self>) -> Result<(), GateError> {
        if self.tombstones.max == 0 {
            return Ok(());
        }
        let rows = self
            .foldable_rows("object:".to_string(), crate::wall_clock::now_ms())
            .await?;
        let mut counts: HashMap<&str, u64> = HashMap::new();
        for key in &rows {
            if let Some((bucket, _)) = key["object:".len()..].split_once('/') {
                *counts.entry(bucket).or_default() += 1;
            }
        }
        for (bucket, n) in counts {
            self.count_tombstones(bucket, n);
        }
        Ok(())
    }

    /// The keys under `prefix` whose rows keep nothing but a token at `now` (a scan, paced and
    /// at the lowest priority: bookkeeping gives way to writes, see
    /// [`crate::fence::background`]).
    async fn foldable_rows(&self, prefix: String, now: u64) -> Result<Vec<String>, GateError> {
        let store = self.store.clone();
        crate::fence::background::run("fence-fold-scan", move || {
            let mut keys = Vec::new();
            crate::fence::background::scan_paced(&*store, &prefix, &mut |key, row| {
                if row.foldable(now) {
                    keys.push(key.to_string());
                }
                true
            })?;
            Ok::<_, StoreError>(keys)
        })
        .await
        .and_then(|scanned| scanned)
        .map_err(GateError::from)
    }
}
