//! The gate: the one place that decides. It parses nothing from HTTP; surfaces hand it typed
//! requests. For each write it resolves the scope from the bucket policy, rejects stale tokens
//! early (before the body is read), stages the body, and then, under the scope's lock, re-checks
//! the token, detects writes made behind its back, records the token durably and commits
//! conditionally (ARCHITECTURE.md, "The path of one write").
//!
//! The rule every change obeys: **a commit, once started, runs to its end.** The section from
//! taking the scope's lock to the backend's answer runs in a task of its own ([`run_to_end`]),
//! never in the request's future, so a client that hangs up cannot release the lock while its
//! commit is still changing the backend.
//!
//! Files: `put.rs` (the put protocol, top to bottom), `checks.rs` (the re-check under the
//! lock), `intents.rs` (requests whose outcome is unknown), `rows.rs` (saving fence rows),
//! `meta.rs` (the metadata a write stores), `delete.rs`, `multipart.rs`, `fences.rs` (advances,
//! resets, fence info), `tokens.rs` (fencing mode, token rules), `buckets.rs` (the bucket
//! registry), `read.rs`, `scope.rs`, `locks.rs`, `conditions.rs`, `uploads.rs` (with `parts_log.rs`, an upload's files), `rebuild.rs`,
//! `inflight.rs` (writes in flight per bucket), `tombstones.rs` (folding them into a floor),
//! `idempotency.rs` (Idempotency-Key), `clock.rs` (cluster mode's clock watch), `error.rs`. On
//! a shared table `uploads_shared.rs` keeps the uploads, and the counts that bound them, as
//! records every instance reads.

mod buckets;
mod checks;
mod clock;
mod conditions;
mod delete;
mod error;
mod fences;
pub mod idempotency;
mod inflight;
mod intents;
mod locks;
mod meta;
mod multipart;
mod parts_log;
mod put;
mod read;
mod rebuild;
mod rows;
pub mod scope;
mod tokens;
mod tombstones;
mod uploads;
mod uploads_shared;

pub use buckets::BucketEntry;
pub use conditions::{Conditions, EtagMatch};
pub use error::GateError;
pub use fences::{AdminAdvance, AdminReset, FenceListRow, FenceListing, MAX_FENCE_PAGE};
pub use idempotency::Idempotency;
pub use inflight::{Closing, WriteTicket};
pub use locks::ScopeLocks;
pub use rebuild::RebuildReport;
pub(crate) use tokens::{check_token, TokenRules};
pub use tombstones::{floor_row, TombstoneBound};
pub use uploads::{Upload, UploadRegistry};

use crate::backend::ObjectMeta;
use crate::fence::{FenceStore, StoreError};
use crate::token::{Token, TokenError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use tracing::Span;

/// The token as a surface found it: absent, malformed, or a value.
pub type TokenInput = Result<Option<Token>, TokenError>;

/// A write or a delete.
pub struct WriteRequest {
    pub bucket: String,
    pub key: String,
    pub token: TokenInput,
    pub scope_header: Option<Vec<u8>>,
    pub conditions: Conditions,
    /// `Fencing-Scope-Takeover`: in a header-scoped bucket, the scope a write takes an object
    /// over from (see `checks.rs`).
    pub scope_takeover: Option<Vec<u8>>,
    /// Content type and user metadata; the gate fills in the token.
    pub meta: ObjectMeta,
    /// `Idempotency-Key`: a retry is answered as the first request was (`idempotency.rs`).
    pub idempotency: Option<Idempotency>,
}

/// What a successful write or delete reports.
#[derive(Debug, Clone, Serialize)]
pub struct Written {
    pub bucket: String,
    pub key: String,
    pub scope: String,
    pub token: Option<u64>,
    /// `None` for a delete.
    pub etag: Option<String>,
    pub size: u64,
    /// Deletes only: whether the object existed (a delete of an absent key is still fenced).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub existed: Option<bool>,
    /// The answer of an earlier request with the same Idempotency-Key, replayed: nothing was
    /// written this time (surfaces say so in `Idempotent-Replayed`).
    #[serde(skip)]
    pub replayed: bool,
}

/// A scope's state, for `GET /v1/fences` and `GET /admin/fences/{bucket}/{key}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FenceInfo {
    pub bucket: String,
    pub key: String,
    pub scope: String,
    pub highest: Option<u64>,
    pub etag: Option<String>,
    pub tombstone: bool,
}

pub struct Gate {
    /// Behind a lock because buckets can be created and deleted through the S3 API.
    buckets: parking_lot::RwLock<BTreeMap<String, Arc<BucketEntry>>>,
    store: Arc<dyn FenceStore>,
    locks: ScopeLocks,
    uploads: UploadRegistry,
    upload_limits: UploadLimits,
    /// How many tombstones a bucket keeps before they are folded into its floor.
    tombstones: TombstoneBound,
    /// Shared fence tables: every intent's store request carries a deadline the store enforces.
    intents: Option<IntentBound>,
    /// How long an idempotent request's answer is kept.
    idempotency_ttl: std::time::Duration,
    /// Idempotency keys of requests being received on this instance.
    idempotency_claims: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// Cluster mode: why this instance's clock is not trusted now (`clock.rs`).
    clock_verdict: parking_lot::Mutex<Option<String>>,
    /// When this gate started (Unix ms): intents left by an earlier process are held back
    /// from then for the backend's in-flight bound (`intents.rs`, `still_unresolved`).
    started_ms: u64,
    /// Single instance: the deadlines of lost answers whose mark could not be written
    /// (`intents.rs`, `mark_unresolved`), by object row, so that their intents, left without
    /// one on the table, are still held until then.
    unmarked: parking_lot::Mutex<std::collections::HashMap<String, u64>>,
}

/// What multipart uploads a client may leave open: at most `per_key` per access key and
/// `per_bucket` per bucket (CreateMultipartUpload past either is refused with 400
/// `TooManyUploads`), each aborted `expiry` after its creation if it is still incomplete.
#[derive(Debug, Clone, Copy)]
pub struct UploadLimits {
    pub expiry: std::time::Duration,
    pub per_key: usize,
    pub per_bucket: usize,
}

impl Default for UploadLimits {
    fn default() -> Self {
        UploadLimits {
            expiry: std::time::Duration::from_secs(crate::config::DEFAULT_UPLOAD_EXPIRY_SECS),
            per_key: crate::config::DEFAULT_MAX_UPLOADS_PER_KEY,
            per_bucket: crate::config::DEFAULT_MAX_UPLOADS_PER_BUCKET,
        }
    }
}

impl UploadLimits {
    /// How often the sweep looks for expired uploads: a tenth of the age, between 1 s and a
    /// minute.
    pub fn sweep_every(&self) -> std::time::Duration {
        (self.expiry / 10).clamp(
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(60),
        )
    }
}

/// Cluster mode (docs/design.md, "Bounded intents"): a commit's or a delete's store request is
/// refused by the store after `ttl` from its intent, and every instance waits for a pending
/// intent until that deadline plus `apply` (how long the store may still be applying a request
/// it admitted just in time) plus `skew` (the most any instance's clock may run ahead of the
/// store's) before deciding without its answer.
#[derive(Debug, Clone, Copy)]
pub struct IntentBound {
    pub ttl: std::time::Duration,
    pub apply: std::time::Duration,
    pub skew: std::time::Duration,
}

impl Gate {
    pub fn new(store: Arc<dyn FenceStore>, buckets: BTreeMap<String, BucketEntry>) -> Gate {
        Gate {
            buckets: parking_lot::RwLock::new(
                buckets
                    .into_iter()
                    .map(|(name, entry)| (name, Arc::new(entry)))
                    .collect(),
            ),
            store,
            locks: ScopeLocks::default(),
            uploads: UploadRegistry::default(),
            upload_limits: UploadLimits::default(),
            tombstones: TombstoneBound::default(),
            intents: None,
            idempotency_ttl: idempotency::DEFAULT_TTL,
            idempotency_claims: Default::default(),
            clock_verdict: Default::default(),
            started_ms: crate::wall_clock::now_ms(),
            unmarked: Default::default(),
        }
    }

    /// Keeps idempotent requests' answers this long (`[server] idempotency_ttl_secs`).
    pub fn with_idempotency_ttl(mut self, ttl: std::time::Duration) -> Gate {
        self.idempotency_ttl = ttl;
        self
    }

    /// On a shared fence table: bounds every intent's store request (see [`IntentBound`]).
    pub fn with_intent_bound(mut self, bound: IntentBound) -> Gate {
        self.intents = Some(bound);
        self
    }

    /// Bounds open multipart uploads and their age (`[server]`'s upload settings).
    pub fn with_upload_limits(mut self, limits: UploadLimits) -> Gate {
        self.upload_limits = limits;
        self
    }

    /// Folds a bucket's tombstones into its floor past `max` (`[server]
    /// max_tombstones_per_bucket`; 0: never).
    pub fn with_tombstone_bound(mut self, max: u64) -> Gate {
        self.tombstones = TombstoneBound::new(max);
        self
    }

    /// How often [`Gate::expire_uploads`] should run.
    pub fn upload_sweep_every(&self) -> std::time::Duration {
        self.upload_limits.sweep_every()
    }

    /// Keeps multipart uploads in `registry` (on disk) instead of in memory.
    pub fn with_uploads(mut self, registry: UploadRegistry) -> Gate {
        self.uploads = registry;
        self
    }

    /// The scope a write of `bucket/key` (with this `Fencing-Scope`) fences under.
    pub fn scope_of(
        &self,
        bucket: &str,
        key: &str,
        scope_header: Option<&[u8]>,
    ) -> Result<String, GateError> {
        let entry = self.bucket(bucket)?;
        scope::resolve(&entry.policy, bucket, key, scope_header)
    }

    /// The fence table, for the readiness check's read.
    pub fn fence_store(&self) -> &Arc<dyn FenceStore> {
        &self.store
    }

    /// Every bucket served, with its backend's name and the backend, for the readiness check.
    pub fn bucket_backends(&self) -> Vec<(String, String, Arc<dyn crate::backend::Backend>)> {
        self.buckets
            .read()
            .iter()
            .map(|(name, e)| {
                (
                    name.clone(),
                    e.policy.backend.clone(),
                    Arc::clone(&e.backend),
                )
            })
            .collect()
    }
}

/// Runs `work` to its end in a task of its own and returns its answer. Dropping the returned
/// future (a client that hangs up) leaves the task running: tokio detaches a task whose
/// handle is dropped. The task is tracked, so a shutdown waits for it (`crate::shutdown`).
pub async fn run_to_end<T, F>(work: F) -> Result<T, GateError>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T, GateError>> + Send + 'static,
{
    match crate::shutdown::commits()
        .spawn(tracing::Instrument::in_current_span(work))
        .await
    {
        Ok(result) => result,
        Err(e) => {
            tracing::error!(error = %e, "a commit task panicked; its scope's lock was released when it unwound");
            Err(GateError::Internal(format!("the commit task failed: {e}")))
        }
    }
}

/// How many times a decision is taken again after another instance changed its rows.
const CONFLICT_ATTEMPTS: u32 = 16;

/// After an error from one attempt at a decision: whether to take it again. Only a shared
/// fence table's answers qualify: a [`StoreError::Conflict`] (another instance changed a row
/// this decision read, so nothing was written and the rows must be read again), and
/// [`GateError::CommitInProgress`] (another commit of the object is still going; it usually
/// ends within a store round trip). It waits a little, longer each time and jittered, so that
/// instances contending for one scope spread out. `attempt` counts the attempts taken.
pub(crate) async fn again(e: &GateError, attempt: &mut u32) -> bool {
    match e {
        GateError::Store(StoreError::Conflict(_)) => crate::metrics::fence_conflict(),
        GateError::CommitInProgress { .. } => crate::metrics::commit_wait(),
        // The store refused a request that arrived after its intent's deadline: nothing
        // landed, so the decision is taken again (where a newer token refuses it as stale).
        GateError::Backend(crate::backend::BackendError::Expired(_)) => {
            crate::metrics::expired_request();
            tracing::warn!(error = %e, "the store refused a commit as expired: it reached the store after its intent's deadline. If this repeats, this instance's clock may run behind the store's, or intent_ttl_secs is too short for the fence table's and the store's latency");
        }
        _ => return false,
    }
    *attempt += 1;
    if *attempt >= CONFLICT_ATTEMPTS {
        tracing::warn!(error = %e, attempts = *attempt, "giving up on a scope other instances keep changing");
        return false;
    }
    let ceiling = 2u64 << (*attempt).min(6);
    let pause = rand::random_range(0..=ceiling);
    tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
    true
}

fn no_such_key(bucket: &str, key: &str) -> GateError {
    GateError::NoSuchKey {
        bucket: bucket.to_string(),
        key: key.to_string(),
    }
}

fn record_outcome<T>(op: &'static str, bucket: &str, result: &Result<T, GateError>) {
    let outcome = match result {
        Ok(_) => "accepted",
        Err(e) => e.outcome(),
    };
    Span::current().record("outcome", outcome);
    crate::metrics::gate_decision(op, bucket, outcome);
}

#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod hole_tests;
#[cfg(test)]
mod idempotency_tests;
#[cfg(test)]
mod test_kit;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tombstone_tests;
#[cfg(test)]
mod upload_limit_tests;
