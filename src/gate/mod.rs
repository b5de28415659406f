//! The gate: the one place that decides. It parses nothing from HTTP; surfaces hand it typed
//! requests. For each write it resolves the scope from the bucket policy, rejects stale tokens
//! early (before the body is read), stages the body, and then, under the scope's lock, re-checks
//! the token, detects writes made behind its back, records the token durably and commits
//! conditionally (DESIGN.md §3).

mod conditions;
mod error;
mod locks;
mod multipart;
mod rebuild;
pub mod scope;
mod uploads;

pub use conditions::{Conditions, EtagMatch};
pub use error::GateError;
pub use locks::ScopeLocks;
pub use rebuild::RebuildReport;
pub use uploads::{Upload, UploadRegistry};

use crate::backend::{Backend, BackendError, ByteStream, ListPage, ObjectInfo, ObjectMeta, Staged};
use crate::config::{BucketPolicy, BypassPolicy, FencingMode, TokenOrder};
use crate::fence::{Durability, FenceRow, FenceStore, Pending};
use crate::token::{Token, TokenError};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use tracing::Span;

/// A bucket as the gate sees it: its policy and the backend behind it.
pub struct BucketEntry {
    pub policy: BucketPolicy,
    pub backend: Arc<dyn Backend>,
}

/// The token as a surface found it: absent, malformed, or a value.
pub type TokenInput = Result<Option<Token>, TokenError>;

/// A write or a delete.
pub struct WriteRequest {
    pub bucket: String,
    pub key: String,
    pub token: TokenInput,
    pub scope_header: Option<Vec<u8>>,
    pub conditions: Conditions,
    /// Content type and user metadata; the gate fills in the token.
    pub meta: ObjectMeta,
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
}

/// A scope's state, for `GET /v1/fences`.
#[derive(Debug, Clone, Serialize)]
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
}

/// Compares a token with a scope's highest (DESIGN.md §2, lines 1 and 4).
fn check_token(
    order: TokenOrder,
    token: u64,
    highest: Option<u64>,
    scope: &str,
) -> Result<(), GateError> {
    match highest {
        Some(h) if token < h => Err(GateError::StaleFencingToken {
            token,
            highest: h,
            scope: scope.to_string(),
        }),
        Some(h) if token == h && order == TokenOrder::StrictlyIncreasing => {
            Err(GateError::TokenNotIncreasing {
                token,
                scope: scope.to_string(),
            })
        }
        _ => Ok(()),
    }
}

/// Everything a commit needs, read under the scope's lock.
struct Locked {
    scope_row: FenceRow,
    object_row: FenceRow,
    /// The current object's ETag (`None`: absent).
    current_etag: Option<String>,
    /// The version the backend operation is made conditional on.
    expected: Option<String>,
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
        }
    }

    /// Keeps multipart uploads in `registry` (on disk) instead of in memory.
    pub fn with_uploads(mut self, registry: UploadRegistry) -> Gate {
        self.uploads = registry;
        self
    }

    pub fn bucket(&self, name: &str) -> Result<Arc<BucketEntry>, GateError> {
        self.buckets
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| GateError::NoSuchBucket(name.to_string()))
    }

    /// Serves a new bucket; false if one by that name exists. Its fence rows, if a bucket by
    /// that name existed before, still apply: a zombie of the old bucket stays fenced.
    pub fn add_bucket(&self, name: &str, entry: BucketEntry) -> bool {
        let mut buckets = self.buckets.write();
        if buckets.contains_key(name) {
            return false;
        }
        buckets.insert(name.to_string(), Arc::new(entry));
        true
    }

    /// Stops serving a bucket (the caller checked it is empty).
    pub fn remove_bucket(&self, name: &str) {
        self.buckets.write().remove(name);
    }

    /// Applies the bucket's fencing mode to the token the client sent.
    fn admit(
        bucket: &str,
        policy: &BucketPolicy,
        token: TokenInput,
        is_delete: bool,
    ) -> Result<Option<Token>, GateError> {
        let mode = match policy.fencing {
            FencingMode::Required if is_delete && !policy.fenced_deletes => FencingMode::Optional,
            mode => mode,
        };
        match (mode, token) {
            (FencingMode::Off, _) => Ok(None),
            (_, Err(e)) => Err(e.into()),
            (FencingMode::Required, Ok(None)) => Err(GateError::FencingTokenRequired {
                bucket: bucket.to_string(),
            }),
            (_, Ok(t)) => Ok(t),
        }
    }

    /// The first steps of every fenced request: the bucket, a valid key, the token under the
    /// bucket's fencing mode, and the scope, recorded on the request's span.
    fn admit_request(
        &self,
        req: &WriteRequest,
        is_delete: bool,
    ) -> Result<(Arc<BucketEntry>, Option<Token>, String), GateError> {
        let entry = self.bucket(&req.bucket)?;
        scope::validate_key(&req.key)?;
        let token = Self::admit(&req.bucket, &entry.policy, req.token.clone(), is_delete)?;
        let scope = scope::resolve(
            &entry.policy,
            &req.bucket,
            &req.key,
            req.scope_header.as_deref(),
        )?;
        let span = Span::current();
        span.record("scope", scope.as_str());
        if let Some(t) = token {
            span.record("token", t.0);
        }
        Ok((entry, token, scope))
    }

    fn row(&self, key: &str) -> Result<FenceRow, GateError> {
        Ok(self.store.get(key)?.unwrap_or_default())
    }

    /// Checks, under the scope's lock, the token, the backend's version and the client's
    /// conditions. Nothing has been changed when this returns an error.
    ///
    /// With `trust_row` the version expected is the one the fence table recorded, with no
    /// backend round trip: the backend's commit is an atomic compare-and-swap on it, so a write
    /// made around fencegate still fails the commit (see [`Gate::commit_or_adopt`]).
    async fn lock_checks(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        scope: &str,
        object_key: &str,
        token: Option<Token>,
        trust_row: bool,
    ) -> Result<Locked, GateError> {
        // The version is read (from the fence table, or the backend) before the authoritative
        // token check (DESIGN.md §3): the commit is conditional on it, so a commit from a lower
        // token either lands before a higher token's commit or fails its condition.
        let found = if trust_row {
            None
        } else {
            Some(entry.backend.version(&req.bucket, &req.key).await?)
        };
        let scope_row = self.row(scope)?;
        if let Some(t) = token {
            check_token(entry.policy.tokens, t.0, scope_row.highest, scope)?;
        }
        let object_row = if object_key == scope {
            scope_row.clone()
        } else {
            self.row(object_key)?
        };
        let found = found.unwrap_or_else(|| object_row.version.clone());
        let current_etag = if object_row.owns_version(found.as_deref()) {
            object_row.etag_of(found.as_deref())
        } else {
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
            .check(current_etag.as_deref())
            .map_err(GateError::PreconditionFailed)?;
        Ok(Locked {
            scope_row,
            object_row,
            current_etag,
            expected: found,
        })
    }

    /// A version fencegate did not commit: count and log it, then refuse (the default) or let
    /// the write adopt it, as the bucket's policy says.
    fn bypassed(
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
        metrics::counter!("fencegate_bypass_detected_total", "bucket" => req.bucket.clone())
            .increment(1);
        match entry.policy.on_bypass {
            BypassPolicy::Reject => {
                tracing::error!(bucket = %req.bucket, key = %req.key, %expected, %found,
                    "write behind fencegate's back detected; refusing to overwrite it (on_bypass = reject)");
                Err(GateError::BypassDetected { expected, found })
            }
            BypassPolicy::Adopt => {
                tracing::warn!(bucket = %req.bucket, key = %req.key, %expected, %found,
                    "write behind fencegate's back detected; adopting the backend's version (on_bypass = adopt)");
                Ok(())
            }
        }
    }

    /// Writes the scope row and the object row (one row when they are the same) in one put.
    async fn save(
        &self,
        scope: &str,
        scope_row: FenceRow,
        object_key: &str,
        object_row: FenceRow,
        durability: Durability,
    ) -> Result<(), GateError> {
        let rows = if object_key == scope {
            vec![(
                scope.to_string(),
                FenceRow {
                    highest: scope_row.highest,
                    ..object_row
                },
            )]
        } else {
            vec![
                (scope.to_string(), scope_row),
                (object_key.to_string(), object_row),
            ]
        };
        self.store.put(rows, durability).await?;
        Ok(())
    }

    /// PUT: the whole commit protocol for one write.
    pub async fn put(&self, req: WriteRequest, body: ByteStream) -> Result<Written, GateError> {
        let result = self.put_inner(req, body).await;
        record_outcome("put", &result);
        result
    }

    async fn put_inner(
        &self,
        mut req: WriteRequest,
        body: ByteStream,
    ) -> Result<Written, GateError> {
        let (entry, token, scope) = self.admit_request(&req, false)?;
        if let Some(t) = token {
            // Early check: a stale writer is refused before a single body byte is read.
            check_token(entry.policy.tokens, t.0, self.row(&scope)?.highest, &scope)?;
        }
        req.meta.token = token.map(|t| t.0);

        let staged = entry
            .backend
            .stage(&req.bucket, &req.key, req.meta.clone(), body)
            .await?;

        self.lock_and_commit(&req, &entry, &scope, token, staged)
            .await
    }

    /// The authoritative half of a write: under the scope's lock, re-check and commit a body
    /// already staged (discarding it on any refusal).
    async fn lock_and_commit(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        scope: &str,
        token: Option<Token>,
        staged: Staged,
    ) -> Result<Written, GateError> {
        let object_key = scope::object_row(&req.bucket, &req.key);
        let _scope_lock = self.locks.lock(scope).await;
        let _object_lock = if object_key != scope {
            Some(self.locks.lock(&object_key).await)
        } else {
            None
        };
        let trust_row = entry.backend.conditional_commit(&staged);
        let locked = match self
            .lock_checks(req, entry, scope, &object_key, token, trust_row)
            .await
        {
            Ok(l) => l,
            Err(e) => {
                entry.backend.discard(staged).await;
                return Err(e);
            }
        };
        self.commit_staged(req, entry, scope, &object_key, token, locked, staged)
            .await
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
        staged: Staged,
    ) -> Result<Written, GateError> {
        let Locked {
            mut scope_row,
            mut object_row,
            current_etag,
            expected,
        } = locked;
        let before = (scope_row.clone(), object_row.clone());
        if let Some(t) = token {
            scope_row.highest = Some(scope_row.highest.map_or(t.0, |h| h.max(t.0)));
        }
        // The intent is made durable before the backend changes: after a crash between the two,
        // the token is still recorded and either version is recognised as ours.
        object_row.version = expected.clone();
        object_row.etag = current_etag;
        object_row.pending = Some(Pending {
            version: staged.version.clone(),
            etag: Some(staged.etag.clone()),
        });
        if let Err(e) = self
            .save(
                scope,
                scope_row.clone(),
                object_key,
                object_row.clone(),
                Durability::Synced,
            )
            .await
        {
            entry.backend.discard(staged).await;
            return Err(e);
        }
        let size = staged.size;
        let info = match self
            .commit_or_adopt(req, entry, (scope, object_key), before, &staged, expected)
            .await
        {
            Ok(info) => info,
            Err(e) => {
                entry.backend.discard(staged).await;
                return Err(e);
            }
        };
        object_row.version = Some(info.version);
        object_row.etag = Some(info.etag.clone());
        object_row.pending = None;
        object_row.tombstone = false;
        // Lazy: losing this in a crash is safe, the pending entry above still recognises it.
        self.save(scope, scope_row, object_key, object_row, Durability::Lazy)
            .await?;
        Ok(Written {
            bucket: req.bucket.clone(),
            key: req.key.clone(),
            scope: scope.to_string(),
            token: token.map(|t| t.0),
            etag: Some(info.etag),
            size,
        })
    }

    /// The conditional commit. A conflict means the object is not at the version expected:
    /// either a crash left it at our own pending version (committed again on that), or a write
    /// made around fencegate changed it. That is refused, with the fence rows restored to
    /// `before` so that the refused write leaves the table as it was (contract line 7), or,
    /// under `on_bypass = "adopt"`, committed once more over the foreign version.
    async fn commit_or_adopt(
        &self,
        req: &WriteRequest,
        entry: &BucketEntry,
        (scope, object_key): (&str, &str),
        before: (FenceRow, FenceRow),
        staged: &Staged,
        expected: Option<String>,
    ) -> Result<ObjectInfo, GateError> {
        match entry.backend.commit(staged, expected.as_deref()).await {
            Err(BackendError::Conflict { found, .. }) => {
                let (scope_row, object_row) = before;
                if !object_row.owns_version(found.as_deref()) {
                    if let Err(refused) = self.bypassed(req, entry, &object_row, found.as_deref()) {
                        self.save(scope, scope_row, object_key, object_row, Durability::Synced)
                            .await?;
                        return Err(refused);
                    }
                }
                Ok(entry.backend.commit(staged, found.as_deref()).await?)
            }
            other => Ok(other?),
        }
    }

    /// DELETE: fenced like a write; leaves a tombstone that keeps the highest token.
    pub async fn delete(&self, req: WriteRequest) -> Result<Written, GateError> {
        let result = self.delete_inner(req).await;
        record_outcome("delete", &result);
        result
    }

    async fn delete_inner(&self, req: WriteRequest) -> Result<Written, GateError> {
        let (entry, token, scope) = self.admit_request(&req, true)?;
        let object_key = scope::object_row(&req.bucket, &req.key);
        let _scope_lock = self.locks.lock(&scope).await;
        let _object_lock = if object_key != scope {
            Some(self.locks.lock(&object_key).await)
        } else {
            None
        };
        let Locked {
            mut scope_row,
            mut object_row,
            expected,
            ..
        } = self
            .lock_checks(&req, &entry, &scope, &object_key, token, false)
            .await?;
        let Some(expected) = expected else {
            return Err(GateError::NoSuchKey {
                bucket: req.bucket.clone(),
                key: req.key.clone(),
            });
        };
        if let Some(t) = token {
            scope_row.highest = Some(scope_row.highest.map_or(t.0, |h| h.max(t.0)));
        }
        object_row.version = Some(expected.clone());
        object_row.pending = Some(Pending::default());
        self.save(
            &scope,
            scope_row.clone(),
            &object_key,
            object_row.clone(),
            Durability::Synced,
        )
        .await?;
        entry
            .backend
            .delete(&req.bucket, &req.key, &expected)
            .await?;
        let tombstone = FenceRow {
            tombstone: true,
            ..FenceRow::default()
        };
        self.save(&scope, scope_row, &object_key, tombstone, Durability::Lazy)
            .await?;
        Ok(Written {
            bucket: req.bucket.clone(),
            key: req.key.clone(),
            scope,
            token: token.map(|t| t.0),
            etag: None,
            size: 0,
        })
    }

    /// Advances a scope's fence to `token` without writing (a new holder fencing out the old).
    /// A token equal to the highest is a no-op, whatever the bucket's token order.
    pub async fn advance(
        &self,
        bucket: &str,
        key: &str,
        token: TokenInput,
        scope_header: Option<&[u8]>,
    ) -> Result<FenceInfo, GateError> {
        let entry = self.bucket(bucket)?;
        scope::validate_key(key)?;
        let token = token?.ok_or_else(|| GateError::FencingTokenRequired {
            bucket: bucket.to_string(),
        })?;
        let scope = scope::resolve(&entry.policy, bucket, key, scope_header)?;
        Span::current().record("scope", scope.as_str());
        Span::current().record("token", token.0);
        let _lock = self.locks.lock(&scope).await;
        let mut row = self.row(&scope)?;
        check_token(TokenOrder::NonDecreasing, token.0, row.highest, &scope)?;
        if row.highest != Some(token.0) {
            row.highest = Some(token.0);
            self.store
                .put(vec![(scope.clone(), row)], Durability::Synced)
                .await?;
        }
        drop(_lock);
        self.fence_info(bucket, key, scope_header)
    }

    /// The scope a key maps to, its highest token and the object's recorded state.
    pub fn fence_info(
        &self,
        bucket: &str,
        key: &str,
        scope_header: Option<&[u8]>,
    ) -> Result<FenceInfo, GateError> {
        let entry = self.bucket(bucket)?;
        scope::validate_key(key)?;
        let scope = scope::resolve(&entry.policy, bucket, key, scope_header)?;
        let scope_row = self.row(&scope)?;
        let object_key = scope::object_row(bucket, key);
        let object_row = if object_key == scope {
            scope_row.clone()
        } else {
            self.row(&object_key)?
        };
        Ok(FenceInfo {
            bucket: bucket.to_string(),
            key: key.to_string(),
            scope,
            highest: scope_row.highest,
            etag: object_row.etag,
            tombstone: object_row.tombstone,
        })
    }

    pub async fn head(&self, bucket: &str, key: &str) -> Result<ObjectInfo, GateError> {
        let entry = self.bucket(bucket)?;
        scope::validate_key(key)?;
        entry
            .backend
            .head(bucket, key)
            .await?
            .ok_or_else(|| no_such_key(bucket, key))
    }

    pub async fn get(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<(ObjectInfo, ByteStream), GateError> {
        let entry = self.bucket(bucket)?;
        scope::validate_key(key)?;
        entry
            .backend
            .get(bucket, key)
            .await?
            .ok_or_else(|| no_such_key(bucket, key))
    }

    /// Bytes `start..=end` of an object (`end` clamped by the backend).
    pub async fn get_range(
        &self,
        bucket: &str,
        key: &str,
        start: u64,
        end: u64,
    ) -> Result<(ObjectInfo, ByteStream), GateError> {
        let entry = self.bucket(bucket)?;
        scope::validate_key(key)?;
        entry
            .backend
            .get_range(bucket, key, start, end)
            .await?
            .ok_or_else(|| no_such_key(bucket, key))
    }

    /// The buckets served, by name.
    pub fn bucket_names(&self) -> Vec<String> {
        self.buckets.read().keys().cloned().collect()
    }

    pub async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<ListPage, GateError> {
        let entry = self.bucket(bucket)?;
        Ok(entry.backend.list(bucket, prefix, start_after, max).await?)
    }
}

fn no_such_key(bucket: &str, key: &str) -> GateError {
    GateError::NoSuchKey {
        bucket: bucket.to_string(),
        key: key.to_string(),
    }
}

fn record_outcome<T>(op: &'static str, result: &Result<T, GateError>) {
    let outcome = match result {
        Ok(_) => "accepted",
        Err(e) => e.outcome(),
    };
    Span::current().record("outcome", outcome);
    metrics::counter!("fencegate_requests_total", "op" => op, "outcome" => outcome).increment(1);
}

#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod tests;
