//! The fence table: scope -> highest token, and object -> the backend version fencegate last
//! committed (plus a tombstone flag). The trait hides where it lives: RocksDB on disk
//! ([`rocks::RocksFenceStore`]) or memory for tests ([`memory::MemoryFenceStore`]).
//!
//! Several instances share one table on etcd ([`etcd::EtcdFenceStore`]): each row then carries
//! the revision it was read at, and a put is a compare-and-swap on those revisions, refused
//! with [`StoreError::Conflict`] when another instance changed a row in between (the cluster
//! commit protocol, docs/design.md). A local table has one writer, ordered by the gate's
//! scope locks, and ignores revisions.
//!
//! Rows are keyed by the scope string (`object:bucket/key`, `prefix:bucket/p`, ...). With the
//! default `object` scope the scope row and the object row are the same row; with wider scopes
//! the highest token lives on the scope row and each object's version on its own row.

pub mod background;
pub mod census;
#[cfg(feature = "cluster")]
pub mod etcd;
#[cfg(feature = "cluster")]
mod etcd_batch;
#[cfg(feature = "cluster")]
mod etcd_records;
pub mod instrumented;
pub mod memory;
pub mod records;
pub mod rocks;
pub mod scripted;

use crate::version::same_version;
use async_trait::async_trait;
pub use records::{Records, When};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One row of the fence table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceRow {
    /// The highest token recorded for this scope; `None` until a token is seen.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "h")]
    pub highest: Option<u64>,
    /// The backend's version of the object as fencegate last committed it (an fs file
    /// fingerprint, or an S3 ETag); `None` when fencegate believes the object is absent.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "v")]
    pub version: Option<String>,
    /// The client-visible ETag of that version.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "e")]
    pub etag: Option<String>,
    /// A commit recorded as intended but not yet confirmed: after a crash between the backend
    /// commit and the row update, the backend may hold either version, and both are ours.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "p")]
    pub pending: Option<Pending>,
    /// The object was deleted through fencegate; the highest token stays forever.
    #[serde(default, skip_serializing_if = "std::ops::Not::not", rename = "t")]
    pub tombstone: bool,
    /// Header-scoped buckets: the scope row (`header:bucket#lock`) of the lock this object
    /// belongs to. Kept by tombstones; another lock's write is refused unless it takes over.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "s")]
    pub scope: Option<String>,
    /// The highest token was set by a fence advance or a lease grant and no write has used
    /// it yet: under strictly-increasing tokens its holder may still write with it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not", rename = "f")]
    pub fresh: bool,
    /// A commit or delete of this object left the store's answer unknown, and its request may
    /// still be applied until this wall-clock time (Unix ms): the object is refused until the
    /// store shows the pending version or the time has passed.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "u")]
    pub unresolved_until_ms: Option<u64>,
    /// Policy rows (`policy:bucket`): when fencegate first served the bucket (Unix ms), the
    /// creation date ListBuckets answers.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "c")]
    pub created_ms: Option<u64>,
    /// On a scope row: the objects of this scope (keys in the bucket) whose store request is
    /// unresolved, with the same deadline. A late request lands in the scope, so every write,
    /// advance and bound grant of the scope waits for it, not only those of its object.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", rename = "U")]
    pub unresolved: BTreeMap<String, u64>,
    /// On a `policy:<bucket>` row: the bucket's scope kind when its rows were written
    /// (`object`, `bucket`, `header`, `prefix/<segments>`), checked at start-up.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "k")]
    pub scope_kind: Option<String>,
    /// On a `lease:<name>` row of a shared table: who holds the lease now. Its token is the
    /// row's `highest`, written in the same put.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "L")]
    pub held: Option<HeldLease>,
    /// On a `lease:<name>` row of a shared table: the grants that ended (released, revoked,
    /// replaced) while their S3 credentials may still work, by token, with when each ended
    /// (Unix ms). Kept for the credentials' grace (`lease::credentials_shared`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", rename = "E")]
    pub ended: BTreeMap<u64, u64>,
    /// On a `leases-of:<principal>` row of a shared table: the leases the principal holds, by
    /// name, with each one's expiry (Unix ms), written with the lease rows they follow, so that
    /// `[leases] max_live_per_key` holds for every instance together (`lease::owned`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", rename = "N")]
    pub owned_leases: BTreeMap<String, u64>,
    /// On an object's row: the answers of the idempotent requests (Idempotency-Key, and each
    /// completed multipart upload) that changed this object, by key digest, kept until they
    /// expire so that a retry is answered as the first request was (`gate::idempotency`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", rename = "A")]
    pub answered: BTreeMap<String, Answered>,
    /// On the [`TABLE_ID_ROW`] row: the table's id, drawn once when the table is first used,
    /// which the claim each s3 store place holds names (`catalog::claim`).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "I")]
    pub table_id: Option<String>,
    /// Shared tables only: the revision this row was read at (0: absent when read). A put of
    /// the row succeeds only if the row is still at that revision. Not stored.
    #[serde(skip)]
    pub rev: i64,
    /// Shared tables, on an object row read absent: its bucket's floor row and the revision
    /// it was read at. A put that creates the row holds only if the floor is still at that
    /// revision: a tombstone folded into the floor in between leaves the row absent again, and
    /// a token judged against the floor before the fold must not land (`gate::tombstones`).
    /// A local table ignores the guard; there it only marks a highest token that came from
    /// the floor ([`Self::judged_by_floor`]). Not stored.
    #[serde(skip)]
    pub floor_guard: Option<(String, i64)>,
}

/// The row holding the table's id ([`table_id`]).
pub const TABLE_ID_ROW: &str = "table:id";

/// The table's id: read, or drawn (random 128-bit hex) and recorded if the table has none
/// yet. On a shared table the put is made only if the row is still absent, so every instance
/// of a cluster reads the same id, whichever drew it first.
pub async fn table_id(store: &dyn FenceStore) -> Result<String, StoreError> {
    for _ in 0..5 {
        let row = store.get(TABLE_ID_ROW).await?.unwrap_or_default();
        if let Some(id) = &row.table_id {
            return Ok(id.clone());
        }
        let id = format!("{:032x}", rand::random::<u128>());
        let row = FenceRow {
            table_id: Some(id.clone()),
            ..row
        };
        match store
            .put(vec![(TABLE_ID_ROW.to_string(), row)], Durability::Synced)
            .await
        {
            Ok(_) => return Ok(id),
            Err(StoreError::Conflict(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Conflict(TABLE_ID_ROW.to_string()))
}

/// A lease held, as every instance sharing the table sees it (`lease::shared`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldLease {
    #[serde(rename = "h")]
    pub holder: String,
    /// The principal that acquired it.
    #[serde(rename = "o")]
    pub owner: String,
    /// SHA-256 (hex) of the lease's secret: the secret itself is shown once, to the holder.
    #[serde(rename = "s")]
    pub secret_sha256: String,
    /// Wall-clock expiry (Unix ms): instances share no monotonic clock.
    #[serde(rename = "x")]
    pub expires_at_ms: u64,
    #[serde(rename = "t")]
    pub ttl_ms: u64,
    /// The bound object (bucket, key) and its scope, for a bound lease.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "b")]
    pub bound: Option<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "c")]
    pub scope: Option<String>,
}

/// The version a commit in progress will leave behind (`None`: a delete).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    #[serde(default, rename = "v")]
    pub version: Option<String>,
    #[serde(default, rename = "e")]
    pub etag: Option<String>,
    /// An idempotent request's key digest and the answer it gives if this commit lands:
    /// synced with the intent, so that a retry after a crash finds it (`gate::idempotency`).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "i")]
    pub answer: Option<(String, Answered)>,
    /// Single instance, on a store whose requests can land late: the backend's bound on a
    /// request in flight (ms) when this intent was written, which the request was signed
    /// with. After a crash the object is held for at least this long from the restart, even
    /// if the restarted configuration's bound is shorter.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "b")]
    pub in_flight_bound_ms: Option<u64>,
}

/// What an idempotent request answered (or will, once its commit lands).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answered {
    /// SHA-256 (hex) of what the request asked: operation, object, token, body.
    #[serde(rename = "f")]
    pub fingerprint: String,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "t")]
    pub token: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "e")]
    pub etag: Option<String>,
    #[serde(default, rename = "z")]
    pub size: u64,
    /// Deletes: whether the object existed.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "x")]
    pub existed: Option<bool>,
    /// Wall-clock expiry (Unix ms), after which the key may be used afresh.
    #[serde(rename = "X")]
    pub expires_at_ms: u64,
}

impl FenceRow {
    /// A tombstone that keeps nothing but its highest token: no version, nothing pending or
    /// unresolved, no lock binding, no answer still kept. It may be folded into its bucket's
    /// floor (`gate::tombstones`), which then keeps its token for it.
    pub fn foldable(&self, now_ms: u64) -> bool {
        self.tombstone
            && self.version.is_none()
            && self.etag.is_none()
            && self.pending.is_none()
            && self.unresolved_until_ms.is_none()
            && self.unresolved.is_empty()
            && self.scope.is_none()
            && self.held.is_none()
            && self.ended.is_empty()
            && !self.fresh
            && self.answered.values().all(|a| a.expires_at_ms <= now_ms)
    }

    /// A key without a row of its own, whose highest token is its bucket's floor (the row
    /// `gate::tombstones` reads for it): a refusal then says the floor judged it.
    pub fn judged_by_floor(&self) -> bool {
        self.floor_guard.is_some() && self.rev == 0
    }

    /// Is `found` (the backend's current version) one that fencegate itself committed?
    pub fn owns_version(&self, found: Option<&str>) -> bool {
        same_version(self.version.as_deref(), found)
            || self
                .pending
                .as_ref()
                .is_some_and(|p| same_version(p.version.as_deref(), found))
    }

    /// The ETag fencegate recorded for `found`, one of its own versions.
    pub fn etag_of(&self, found: Option<&str>) -> Option<String> {
        match &self.pending {
            Some(p) if same_version(p.version.as_deref(), found) => p.etag.clone(),
            _ => self.etag.clone(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a fence row always serializes")
    }

    pub fn decode(bytes: &[u8]) -> Result<FenceRow, StoreError> {
        serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))
    }
}

/// How durable a put must be before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// On stable storage (WAL fsynced) before returning: guards an acknowledgement.
    Synced,
    /// Written, to be synced by the next synced put: bookkeeping that a crash may lose safely.
    Lazy,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("the fence table failed: {0}")]
    Io(String),
    #[error("a fence-table row is corrupt: {0}")]
    Corrupt(String),
    /// Shared tables: another instance changed `0` since it was read. Nothing was written;
    /// the caller reads again and decides again.
    #[error("fence-table row {0} was changed by another instance")]
    Conflict(String),
}

/// Storage for fence rows. Implementations must apply one `put` atomically.
#[async_trait]
pub trait FenceStore: Send + Sync + 'static {
    /// The row, with [`FenceRow::rev`] set on a shared table. Linearizable on a shared table:
    /// it sees every put acknowledged before it began, by any instance.
    async fn get(&self, key: &str) -> Result<Option<FenceRow>, StoreError>;
    /// The rows of `key` and `with`, as two [`FenceStore::get`]s would give them. etcd reads
    /// both in one request (one round trip, both at one revision).
    async fn get_pair(
        &self,
        key: &str,
        with: &str,
    ) -> Result<(Option<FenceRow>, Option<FenceRow>), StoreError> {
        Ok((self.get(key).await?, self.get(with).await?))
    }
    /// Calls `visit` with every row whose key starts with `prefix`, in key order, until it
    /// returns false. Blocking: call it off the async workers.
    fn scan_prefix(
        &self,
        prefix: &str,
        visit: &mut dyn FnMut(&str, &FenceRow) -> bool,
    ) -> Result<(), StoreError> {
        self.scan_after(prefix, None, visit)
    }
    /// As [`FenceStore::scan_prefix`], starting after the key `after` (a page of a listing
    /// resumes where the last one ended, without walking the rows before it again). Stores
    /// read ahead of `visit` by a bounded batch at most, so a visitor that stops after N rows
    /// costs N rows plus that batch, however large the table. Blocking.
    fn scan_after(
        &self,
        prefix: &str,
        after: Option<&str>,
        visit: &mut dyn FnMut(&str, &FenceRow) -> bool,
    ) -> Result<(), StoreError>;
    /// Writes `rows` atomically. On a shared table, only if every row is still at the
    /// revision it carries (else [`StoreError::Conflict`], nothing written); returns the
    /// revision the rows now have (0 on a local table), for a later put of the same rows.
    async fn put(
        &self,
        rows: Vec<(String, FenceRow)>,
        durability: Durability,
    ) -> Result<i64, StoreError>;
    /// Writes `floor` (if any) and removes every row of `gone` in one atomic write, not
    /// synced (a crash loses all of it or none). On a shared table only if the floor row and
    /// every removed row are still at the revisions they carry (else
    /// [`StoreError::Conflict`], nothing written); returns the revision written (0 on a local
    /// table). The only way rows leave the table (`gate::tombstones`).
    async fn fold(
        &self,
        floor: Option<(String, FenceRow)>,
        gone: Vec<(String, i64)>,
    ) -> Result<i64, StoreError>;
    /// Whether other instances write this table too (etcd): rows then carry revisions and a
    /// put can meet [`StoreError::Conflict`]. Required: a wrapper that forgot it would take a
    /// shared table for a local one.
    fn shared(&self) -> bool;
    /// The records instances share beside the table (`records.rs`): on a shared table only.
    /// Required, as `shared` is, so a wrapper cannot hide them.
    fn records(&self) -> Option<&dyn Records>;
    /// What the table takes on disk, where it is cheap to know (a local table); `None`
    /// elsewhere (etcd reports its own).
    fn usage(&self) -> Option<Usage> {
        None
    }
    /// How each member of a shared table's cluster answers now (etcd's endpoint status), for
    /// `fencegate status`; empty for a local table.
    async fn members(&self) -> Vec<Member> {
        Vec::new()
    }
}

/// One member of a shared table's cluster, as it answered a status call.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Member {
    /// Its client URL, as `[fence_store] endpoints` names it.
    pub endpoint: String,
    /// It answered the status call in time.
    pub ok: bool,
    /// It is the cluster's leader.
    #[serde(default)]
    pub leader: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Its database's size on disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_size_bytes: Option<u64>,
    /// Its raft index: members far behind the others are lagging.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raft_index: Option<u64>,
    /// Why it did not answer, or the alarms it reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A local table's size, as its engine estimates it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes of the table's files on disk (tables, write-ahead log, manifests).
    pub bytes_on_disk: u64,
    /// Bytes that compactions still have to rewrite (RocksDB stalls writes when it grows).
    pub pending_compaction_bytes: u64,
}
