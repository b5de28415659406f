//! Fences moved without a write: `advance` (a new holder fencing out the old one) and
//! `advance_past` (a lease grant bound to a scope, which must be strictly above everything the
//! scope recorded, decided under the scope's lock). Both run to their end in a task of their
//! own (see `commit.rs`). Also `reset_fence`, an admin lowering a fence, and `fence_info`,
//! the read side.

use super::commit::run_to_end;
use super::{check_token, scope, FenceInfo, Gate, GateError, TokenInput};
use crate::config::TokenOrder;
use crate::fence::Durability;
use crate::token::Token;
use std::sync::Arc;
use tracing::Span;

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
        run_to_end(async move {
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
                    if row.highest != Some(token.0) {
                        row.highest = Some(token.0);
                        row.fresh = true;
                        gate.store
                            .put(vec![(locked_scope.clone(), row)], Durability::Synced)
                            .await?;
                        tracing::info!(target: "fencegate::audit", scope = %locked_scope, token = token.0, "fence advanced");
                    }
                    Ok::<(), GateError>(())
                }
                .await;
                match result {
                    Err(e) if super::again(&e, &mut attempt).await => continue,
                    other => return other,
                }
            }
        })
        .await?;
        self.fence_info(bucket, key, scope_header).await
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
            // elsewhere before): the bucket's jump limit holds for grants too (review round 5).
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
            gate.store.put(rows, Durability::Synced).await?;
            tracing::info!(target: "fencegate::audit", scope = %scope, token, "fence advanced by a lease grant");
            Ok::<_, GateError>((Token(token), scope))
        })
        .await
    }

    /// Lowers a scope's highest token to `to`: the operator's way back from a scope fenced at
    /// the top of the token space by mistake (docs/design.md, "Recovering a scope"). It undoes
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
    ) -> Result<(Option<u64>, FenceInfo), GateError> {
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
            tracing::warn!(target: "fencegate::audit", scope = %scope, was, to, principal = %by, "fence reset by an admin");
            Ok::<_, GateError>(was)
        })
        .await?;
        Ok((was, self.fence_info(bucket, key, scope_header).await?))
    }

    /// A fence moved while a store request of the scope is unresolved would be acknowledged
    /// before that request lands (review round 3): refuse until the store shows its outcome.
    /// In cluster mode (object scope: `scope_row` is the object's row) an intent that has
    /// ended, landed or past its deadline, is resolved on the row the caller writes back, so
    /// that a request landing later after all is not taken for fencegate's own (review round
    /// 13, N1): the next write finds it as a bypass, and its sender raises the stale-landing
    /// alarm.
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
