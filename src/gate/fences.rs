//! Fences moved without a write: `advance` (a new holder fencing out the old one) and
//! `advance_past` (a lease grant bound to a scope, which must be strictly above everything the
//! scope recorded, decided under the scope's lock). Both run to their end in a task of their
//! own (see `put.rs`). Also `reset_fence`, an admin lowering a fence, `admin_advance`, an
//! admin raising one, and the read side: `fence_info`, and `list_fences`, a bucket's rows a
//! bounded page at a time.

use super::run_to_end;
use super::{check_token, scope, FenceInfo, Gate, GateError, TokenInput};
use crate::config::TokenOrder;
use crate::fence::Durability;
use crate::token::Token;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tracing::Span;

/// The most rows one page of a fence listing holds.
pub const MAX_FENCE_PAGE: usize = 1000;

/// One row of a bucket's fence listing (`GET /admin/fences/{bucket}`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FenceListRow {
    /// The row's name in the fence table: a scope (`object:b/k`, `prefix:b/p`, `bucket:b`,
    /// `header:b#lock`). Under wider scopes an object's own `object:` row carries its
    /// version and tombstone, and the scope's row its highest token.
    pub scope: String,
    /// `object`, `prefix`, `bucket` or `header`.
    pub kind: std::borrow::Cow<'static, str>,
    /// The object's key, on an `object:` row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub highest: Option<u64>,
    pub tombstone: bool,
    pub etag: Option<String>,
    /// Header-scoped buckets: the lock's scope the object belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_to: Option<String>,
    /// A commit or delete of the object is in progress, or its store request is unresolved.
    pub pending: bool,
}

/// One page of a bucket's fence rows, in row order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FenceListing {
    pub bucket: String,
    pub prefix: String,
    pub rows: Vec<FenceListRow>,
    /// Where the next page starts (`continuation_token`); absent on the last page.
    pub next_continuation_token: Option<String>,
}

/// What an admin's advance did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AdminAdvance {
    /// The highest token before, as read under the scope's lock.
    pub was: Option<u64>,
    /// False when the fence already stood at or above the token: nothing changed.
    pub advanced: bool,
    pub fence: FenceInfo,
}

/// What an admin's reset did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AdminReset {
    /// The highest token before the reset.
    pub was: Option<u64>,
    pub fence: FenceInfo,
}

/// Where a listing's rows of one kind live in the fence table: every row key starting with
/// `prefix` (or, with `exact`, the one row named `prefix`).
struct Range {
    prefix: String,
    exact: bool,
}

/// The ranges of `bucket`'s rows, in key order (`bucket:` < `header:` < `object:` <
/// `prefix:`), so that one continuation token, the last row key shown, orders every kind.
fn ranges(bucket: &str, prefix: &str) -> Vec<Range> {
    let range = |prefix: String, exact| Range { prefix, exact };
    if prefix.is_empty() {
        vec![
            range(format!("bucket:{bucket}"), true),
            range(format!("header:{bucket}#"), false),
            range(format!("object:{bucket}/"), false),
            range(format!("prefix:{bucket}/"), false),
        ]
    } else {
        // A key prefix says nothing about bucket-wide or header (lock) scopes.
        vec![
            range(format!("object:{bucket}/{prefix}"), false),
            range(format!("prefix:{bucket}/{prefix}"), false),
        ]
    }
}

fn list_row(bucket: &str, name: &str, row: &crate::fence::FenceRow) -> FenceListRow {
    let object = name.strip_prefix(&format!("object:{bucket}/"));
    let kind: &'static str = if object.is_some() {
        "object"
    } else if name.starts_with("prefix:") {
        "prefix"
    } else if name.starts_with("header:") {
        "header"
    } else {
        "bucket"
    };
    FenceListRow {
        scope: name.to_string(),
        kind: kind.into(),
        key: object.map(str::to_string),
        highest: row.highest,
        tombstone: row.tombstone,
        etag: row.etag.clone(),
        bound_to: row.scope.clone(),
        pending: row.pending.is_some()
            || row.unresolved_until_ms.is_some()
            || !row.unresolved.is_empty(),
    }
}

impl Gate {
    /// Advances a scope's fence to `token` without writing (a new holder fencing out the old).
    /// A token equal to the highest is a no-op, whatever the bucket's token order.
    pub async fn advance(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        token: TokenInput,
        scope_header: Option<&[u8]>,
    ) -> Result<FenceInfo, GateError> {
        self.advance_by(bucket, key, token, scope_header, None)
            .await
            .map(|(_, info)| info)
    }

    /// An admin's advance (`POST /admin/fences/...?advance_to=N`): [`Gate::advance`] with the
    /// principal in the audit line. It never lowers a fence: a token below the highest
    /// changes nothing and answers `advanced: false`, so that repeating it is harmless.
    pub async fn admin_advance(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        scope_header: Option<&[u8]>,
        to: u64,
        by: &str,
    ) -> Result<AdminAdvance, GateError> {
        let token = Ok(Some(Token(to)));
        match self
            .advance_by(bucket, key, token, scope_header, Some(by.to_string()))
            .await
        {
            Ok((was, fence)) => Ok(AdminAdvance {
                advanced: was != Some(to),
                was,
                fence,
            }),
            Err(GateError::StaleFencingToken { highest, .. }) => {
                tracing::info!(target: "fencegate::audit", bucket, key, token = to, highest, principal = %by, "fence advance by an admin changed nothing: the fence is already higher");
                Ok(AdminAdvance {
                    was: Some(highest),
                    advanced: false,
                    fence: self.fence_info(bucket, key, scope_header).await?,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// One page of `bucket`'s fence rows whose key starts with `prefix`, after the row named
    /// by `continuation` (a page's `next_continuation_token`), at most `limit` rows (1 to
    /// [`MAX_FENCE_PAGE`]). Reads `limit + 1` rows at most, whatever the table holds.
    pub async fn list_fences(
        &self,
        bucket: &str,
        prefix: &str,
        continuation: Option<&str>,
        limit: usize,
    ) -> Result<FenceListing, GateError> {
        self.bucket(bucket)?;
        if prefix.len() > scope::MAX_KEY_BYTES || prefix.chars().any(char::is_control) {
            return Err(GateError::InvalidArgument(format!(
                "the prefix must be at most {} bytes without control characters",
                scope::MAX_KEY_BYTES
            )));
        }
        if !(1..=MAX_FENCE_PAGE).contains(&limit) {
            return Err(GateError::InvalidArgument(format!(
                "max_rows={limit}: a page holds 1 to {MAX_FENCE_PAGE} rows"
            )));
        }
        let ranges = ranges(bucket, prefix);
        if let Some(c) = continuation {
            let ours = ranges.iter().any(|r| {
                if r.exact {
                    c == r.prefix
                } else {
                    c.starts_with(&r.prefix)
                }
            });
            if !ours {
                return Err(GateError::InvalidArgument(format!(
                    "continuation_token {c:?} is not from a listing of bucket {bucket} with prefix {prefix:?}; pass the next_continuation_token of the page before, with the same bucket and prefix"
                )));
            }
        }
        let store = self.store.clone();
        let after = continuation.map(str::to_string);
        let wanted = limit + 1;
        let mut found = tokio::task::spawn_blocking(move || {
            let mut found: Vec<(String, crate::fence::FenceRow)> = Vec::new();
            for range in &ranges {
                if found.len() >= wanted {
                    break;
                }
                store.scan_after(&range.prefix, after.as_deref(), &mut |name, row| {
                    if range.exact {
                        // The first row of the range is the exact one or none is (a longer
                        // name, `bucket:logs-2` after `bucket:logs`, sorts after it).
                        if name == range.prefix {
                            found.push((name.to_string(), row.clone()));
                        }
                        return false;
                    }
                    found.push((name.to_string(), row.clone()));
                    found.len() < wanted
                })?;
            }
            Ok::<_, GateError>(found)
        })
        .await
        .map_err(|e| GateError::Internal(format!("the fence-table scan failed: {e}")))??;
        let next_continuation_token = if found.len() > limit {
            found.truncate(limit);
            found.last().map(|(name, _)| name.clone())
        } else {
            None
        };
        Ok(FenceListing {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            rows: found
                .iter()
                .map(|(name, row)| list_row(bucket, name, row))
                .collect(),
            next_continuation_token,
        })
    }

    /// [`Gate::advance`], returning the highest before; `by` names an admin in the audit line.
    async fn advance_by(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        token: TokenInput,
        scope_header: Option<&[u8]>,
        by: Option<String>,
    ) -> Result<(Option<u64>, FenceInfo), GateError> {
        let entry = self.bucket(bucket)?;
        scope::validate_key(key)?;
        let token = token?.ok_or_else(|| GateError::FencingTokenRequired {
            bucket: bucket.to_string(),
        })?;
        let scope = scope::resolve(&entry.policy, bucket, key, scope_header)?;
        Span::current().record("scope", scope.as_str());
        Span::current().record("token", token.0);
        let gate = Arc::clone(self);
        let locked_scope = scope.clone();
        let (bucket_name, key_name) = (bucket.to_string(), key.to_string());
        let was = run_to_end(async move {
            let _lock = gate.locks.lock(&locked_scope).await;
            let mut attempt = 0;
            loop {
                let result = async {
                    let mut row = gate.row(&locked_scope).await?;
                    let rules = super::TokenRules {
                        order: TokenOrder::NonDecreasing,
                        max_jump: entry.policy.max_token_jump,
                    };
                    check_token(rules, token.0, &row, &locked_scope)?;
                    gate.settled(&entry, &bucket_name, &key_name, &locked_scope, &mut row)
                        .await?;
                    let was = row.highest;
                    if was != Some(token.0) {
                        row.highest = Some(token.0);
                        row.fresh = true;
                        gate.store
                            .put(vec![(locked_scope.clone(), row)], Durability::Synced)
                            .await?;
                        match &by {
                            Some(by) => tracing::warn!(target: "fencegate::audit", scope = %locked_scope, token = token.0, was, principal = %by, "fence advanced by an admin"),
                            None => tracing::info!(target: "fencegate::audit", scope = %locked_scope, token = token.0, "fence advanced"),
                        }
                    }
                    Ok::<_, GateError>(was)
                }
                .await;
                match result {
                    Err(e) if super::again(&e, &mut attempt).await => continue,
                    other => return other,
                }
            }
        })
        .await?;
        Ok((was, self.fence_info(bucket, key, scope_header).await?))
    }

    /// Records a token for `bucket`/`key`'s scope that is at least `floor` and strictly above
    /// the scope's highest, decided and synced under the scope's lock, so no writer's token
    /// recorded before it can equal it. Returns the token and the scope. A scope already at
    /// u64::MAX cannot grow: `TokenSpaceExhausted`. `also` is a row (a lease name's, as read)
    /// that records the same token in the same atomic, synced put: the grant is durable the
    /// moment the scope's lock is released, before any writer waiting on the lock can answer.
    /// On a shared table a `Conflict` comes back to the caller, which read `also` and `floor`
    /// and must read them again.
    pub async fn advance_past(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        floor: u64,
        also: Option<(String, crate::fence::FenceRow)>,
    ) -> Result<(Token, String), GateError> {
        self.advance_past_with(bucket, key, floor, also, None).await
    }

    /// [`Gate::advance_past`], with `with` written as it is in the same put (a lease
    /// principal's count of its leases, on a shared table).
    pub async fn advance_past_with(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        floor: u64,
        also: Option<(String, crate::fence::FenceRow)>,
        with: Option<(String, crate::fence::FenceRow)>,
    ) -> Result<(Token, String), GateError> {
        let entry = self.bucket(bucket)?;
        scope::validate_key(key)?;
        let scope = scope::resolve(&entry.policy, bucket, key, None)?;
        let gate = Arc::clone(self);
        let (bucket_name, key_name) = (bucket.to_string(), key.to_string());
        run_to_end(async move {
            let _lock = gate.locks.lock(&scope).await;
            let mut row = gate.row(&scope).await?;
            gate.settled(&entry, &bucket_name, &key_name, &scope, &mut row)
                .await?;
            let above = match row.highest {
                None => 1,
                Some(h) => h
                    .checked_add(1)
                    .ok_or_else(|| GateError::TokenSpaceExhausted {
                        scope: scope.clone(),
                    })?,
            };
            let token = floor.max(above);
            // A lease name's counter can be far above this scope's highest (the same name bound
            // elsewhere before): the bucket's jump limit holds for grants too.
            if let Some(limit) = entry.policy.max_token_jump {
                let highest = row.highest.unwrap_or(0);
                if token > highest.saturating_add(limit) {
                    return Err(GateError::TokenJumpTooLarge {
                        token,
                        highest,
                        limit,
                        scope: scope.clone(),
                    });
                }
            }
            row.highest = Some(token);
            row.fresh = true;
            let mut rows = vec![(scope.clone(), row)];
            if let Some((also, mut also_row)) = also {
                also_row.highest = Some(token);
                rows.push((also, also_row));
            }
            rows.extend(with);
            gate.store.put(rows, Durability::Synced).await?;
            tracing::info!(target: "fencegate::audit", scope = %scope, token, "fence advanced by a lease grant");
            Ok::<_, GateError>((Token(token), scope))
        })
        .await
    }

    /// Lowers a scope's highest token to `to`: the operator's way back from a scope fenced at
    /// the top of the token space by mistake (docs/design.md, "The admin HTTP contract"). It undoes
    /// fencing on purpose, so only an admin may ask, the audit log names who, and `to` must be
    /// below the highest. Tokens from `to + 1` on are accepted again, so a holder paused with
    /// such a token could write: the operator first makes sure its lock service hands out
    /// tokens above every token still alive. Returns the highest it replaced.
    pub async fn reset_fence(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        scope_header: Option<&[u8]>,
        to: u64,
        by: String,
    ) -> Result<AdminReset, GateError> {
        let entry = self.bucket(bucket)?;
        scope::validate_key(key)?;
        let scope = scope::resolve(&entry.policy, bucket, key, scope_header)?;
        let gate = Arc::clone(self);
        let (bucket_name, key_name) = (bucket.to_string(), key.to_string());
        let was = run_to_end(async move {
            let _lock = gate.locks.lock(&scope).await;
            // One attempt: on a shared table another instance's change refuses the reset
            // (503, retry), rather than lowering a fence that just moved.
            let mut row = gate.row(&scope).await?;
            gate.settled(&entry, &bucket_name, &key_name, &scope, &mut row)
                .await?;
            let was = row.highest;
            if was.is_none_or(|h| to >= h) {
                return Err(GateError::InvalidArgument(format!(
                    "reset_to={to} is not below scope {scope}'s highest token ({}); a reset only lowers a fence, and advancing one is POST /v1/fences",
                    was.map_or("none".to_string(), |h| h.to_string())
                )));
            }
            row.highest = Some(to);
            row.fresh = false;
            gate.store
                .put(vec![(scope.clone(), row)], Durability::Synced)
                .await?;
            crate::metrics::fence_reset();
            tracing::warn!(target: "fencegate::audit", scope = %scope, was, to, principal = %by, "fence reset by an admin");
            Ok::<_, GateError>(was)
        })
        .await?;
        Ok(AdminReset {
            was,
            fence: self.fence_info(bucket, key, scope_header).await?,
        })
    }

    /// A fence moved while a store request of the scope is unresolved would be acknowledged
    /// before that request lands: refuse until the store shows its outcome. In cluster mode
    /// (object scope: `scope_row` is the object's row) an intent that has ended, landed or past
    /// its deadline, is resolved on the row the caller writes back, so that a request landing
    /// later after all is not taken for fencegate's own: the next write finds it as a bypass,
    /// and its sender raises the stale-landing alarm.
    async fn settled(
        &self,
        entry: &super::BucketEntry,
        bucket: &str,
        key: &str,
        scope: &str,
        scope_row: &mut crate::fence::FenceRow,
    ) -> Result<(), GateError> {
        let object_key = scope::object_row(bucket, key);
        let object_row = if object_key == scope {
            scope_row.clone()
        } else {
            self.row(&object_key).await?
        };
        self.still_unresolved(entry, bucket, key, &object_row)
            .await?;
        if self.intents.is_some() && object_key == scope {
            self.resolve_intent(entry, bucket, key, scope_row).await?;
        }
        self.scope_resolved(entry, bucket, scope_row, Some(key))
            .await
    }

    /// The scope a key maps to, its highest token and the object's recorded state.
    pub async fn fence_info(
        &self,
        bucket: &str,
        key: &str,
        scope_header: Option<&[u8]>,
    ) -> Result<FenceInfo, GateError> {
        let entry = self.bucket(bucket)?;
        scope::validate_key(key)?;
        let scope = scope::resolve(&entry.policy, bucket, key, scope_header)?;
        let scope_row = self.row(&scope).await?;
        let object_key = scope::object_row(bucket, key);
        let object_row = if object_key == scope {
            scope_row.clone()
        } else {
            self.row(&object_key).await?
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::config::{BucketPolicy, ScopeKind};
    use crate::fence::memory::MemoryFenceStore;
    use crate::fence::{FenceRow, FenceStore};
    use std::collections::BTreeMap;

    async fn gate_with(rows: &[(&str, u64)], policy: BucketPolicy) -> Arc<Gate> {
        let store = Arc::new(MemoryFenceStore::new());
        let put = rows
            .iter()
            .map(|(k, h)| {
                let row = FenceRow {
                    highest: Some(*h),
                    ..FenceRow::default()
                };
                (k.to_string(), row)
            })
            .collect();
        store.put(put, Durability::Synced).await.unwrap();
        let mut buckets = BTreeMap::new();
        let backend = Arc::new(MemoryBackend::new());
        buckets.insert(
            "b".to_string(),
            super::super::BucketEntry::new(policy.clone(), backend.clone()),
        );
        buckets.insert(
            "bb".to_string(),
            super::super::BucketEntry::new(policy, backend),
        );
        Arc::new(Gate::new(store, buckets))
    }

    fn scopes(page: &FenceListing) -> Vec<&str> {
        page.rows.iter().map(|r| r.scope.as_str()).collect()
    }

    /// Every kind of row of the bucket, in row order, and nothing of other buckets (`bb`,
    /// `bucket:bx`) or of the table's own rows (`policy:`, `lease:`).
    #[tokio::test]
    async fn a_listing_holds_the_buckets_rows_only_page_after_page() {
        let rows = [
            ("bucket:b", 1),
            ("bucket:bb", 2),
            ("header:b#lock one", 3),
            ("object:b/k1", 4),
            ("object:b/k2", 5),
            ("object:bb/k", 6),
            ("prefix:b/t", 7),
            ("policy:b", 8),
            ("lease:b", 9),
        ];
        let gate = gate_with(&rows, BucketPolicy::default()).await;
        let all = gate.list_fences("b", "", None, 1000).await.unwrap();
        assert_eq!(
            scopes(&all),
            [
                "bucket:b",
                "header:b#lock one",
                "object:b/k1",
                "object:b/k2",
                "prefix:b/t"
            ]
        );
        assert_eq!(all.next_continuation_token, None);
        let kinds: Vec<&str> = all.rows.iter().map(|r| r.kind.as_ref()).collect();
        assert_eq!(kinds, ["bucket", "header", "object", "object", "prefix"]);
        assert_eq!(all.rows[2].key.as_deref(), Some("k1"));
        assert_eq!(all.rows[2].highest, Some(4));

        // Pages of two, each continuing where the last ended, across kinds.
        let mut seen = Vec::new();
        let mut next = None;
        loop {
            let page = gate.list_fences("b", "", next.as_deref(), 2).await.unwrap();
            assert!(page.rows.len() <= 2);
            seen.extend(scopes(&page).into_iter().map(str::to_string));
            match page.next_continuation_token {
                Some(t) => next = Some(t),
                None => break,
            }
        }
        assert_eq!(seen, scopes(&all));

        // A prefix keeps to keys (and prefix scopes).
        let page = gate.list_fences("b", "k", None, 1000).await.unwrap();
        assert_eq!(scopes(&page), ["object:b/k1", "object:b/k2"]);
        let page = gate.list_fences("b", "t", None, 1000).await.unwrap();
        assert_eq!(scopes(&page), ["prefix:b/t"]);
        // `bucket:b` itself as a continuation: the exact row is not repeated.
        let page = gate
            .list_fences("b", "", Some("bucket:b"), 1)
            .await
            .unwrap();
        assert_eq!(scopes(&page), ["header:b#lock one"]);
    }

    #[tokio::test]
    async fn bad_listing_input_is_invalid_argument() {
        let gate = gate_with(&[("object:b/k", 1)], BucketPolicy::default()).await;
        for (prefix, token, limit) in [
            ("", None, 0),
            ("", None, MAX_FENCE_PAGE + 1),
            ("\u{1}", None, 10),
            ("", Some("object:bb/k"), 10),
            ("", Some("policy:b"), 10),
            ("k", Some("bucket:b"), 10),
        ] {
            let e = gate
                .list_fences("b", prefix, token, limit)
                .await
                .unwrap_err();
            assert_eq!(
                e.code(),
                "InvalidArgument",
                "{prefix:?} {token:?} {limit}: {e}"
            );
        }
        let long = "k".repeat(scope::MAX_KEY_BYTES + 1);
        let e = gate.list_fences("b", &long, None, 10).await.unwrap_err();
        assert_eq!(e.code(), "InvalidArgument");
        let e = gate.list_fences("nope", "", None, 10).await.unwrap_err();
        assert_eq!(e.code(), "NoSuchBucket");
    }

    #[tokio::test]
    async fn an_admin_advance_raises_and_never_lowers() {
        let gate = gate_with(&[("object:b/k", 10)], BucketPolicy::default()).await;
        let done = gate
            .admin_advance("b", "k", None, 12, "key:ops")
            .await
            .unwrap();
        assert_eq!(
            (done.was, done.advanced, done.fence.highest),
            (Some(10), true, Some(12))
        );
        for lower in [0, 11, 12] {
            let done = gate
                .admin_advance("b", "k", None, lower, "key:ops")
                .await
                .unwrap();
            assert_eq!(
                (done.was, done.advanced, done.fence.highest),
                (Some(12), false, Some(12)),
                "{lower}"
            );
        }
        let done = gate
            .admin_advance("b", "new", None, u64::MAX, "key:ops")
            .await
            .unwrap();
        assert_eq!(
            (done.was, done.advanced, done.fence.highest),
            (None, true, Some(u64::MAX))
        );
        // The bucket's jump limit holds for admins too.
        let policy = BucketPolicy {
            max_token_jump: Some(100),
            ..BucketPolicy::default()
        };
        let gate = gate_with(&[("object:b/k", 10)], policy).await;
        let e = gate
            .admin_advance("b", "k", None, 1000, "key:ops")
            .await
            .unwrap_err();
        assert_eq!(e.code(), "TokenJumpTooLarge");
        // A header-scoped bucket needs the lock's name.
        let policy = BucketPolicy {
            scope: ScopeKind::Header,
            ..BucketPolicy::default()
        };
        let gate = gate_with(&[], policy).await;
        let e = gate
            .admin_advance("b", "k", None, 5, "key:ops")
            .await
            .unwrap_err();
        assert_eq!(e.code(), "InvalidFencingScope");
        let done = gate
            .admin_advance("b", "k", Some(&b"lock"[..]), 5, "key:ops")
            .await
            .unwrap();
        assert_eq!(done.fence.scope, "header:b#lock");
    }
}
