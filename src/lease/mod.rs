//! fencegate's own lease service (`/v1/leases/{name}`): a lock with a TTL whose every grant
//! carries a fencing token strictly greater than every token granted for that name before,
//! synced to the fence table before it is returned, so it survives kill -9.
//!
//! Expiry only decides liveness (when the next holder may acquire); correctness is the fence's:
//! a holder paused past its TTL keeps its old token, which the gate refuses once the next
//! holder's token is recorded. A lease bound to a scope advances that fence at acquire, so the
//! previous holder is fenced out before the new one writes at all. Holders and expiries live in
//! memory: a restart ends every lease, and tokens still never go back.

mod credentials;
mod error;

pub use credentials::{LeaseCredential, LeaseCredentials, LeaseIdentity};
pub use error::LeaseError;

use crate::fence::{Durability, FenceRow, FenceStore};
use crate::gate::{Gate, GateError};
use crate::token::Token;
use crate::wall_clock::now_ms;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, Notify};
use tokio::time::Instant;

/// Longest TTL a lease may ask for: beyond this a typo (ms for s) holds a lock for days.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Longest a blocked acquire may wait.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// What to fence with a lease: every grant advances this scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Binding {
    pub bucket: String,
    pub key: String,
}

/// One acquire request.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    pub name: String,
    pub holder: String,
    pub ttl: Duration,
    /// How long to wait for a held lease to free up (zero: answer at once).
    pub wait: Duration,
    pub bind: Option<Binding>,
    /// Also issue S3 credentials that carry the token implicitly.
    pub s3_credentials: bool,
}

/// A lease as a client sees it.
#[derive(Debug, Clone, Serialize)]
pub struct Grant {
    pub name: String,
    pub holder: String,
    pub token: u64,
    pub ttl_ms: u64,
    /// Wall-clock expiry (Unix ms), for display; the server judges expiry monotonically.
    pub expires_at_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound: Option<Binding>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_credentials: Option<LeaseCredential>,
}

struct Held {
    grant: Grant,
    expires: Instant,
}

pub struct Leases {
    gate: Arc<Gate>,
    store: Arc<dyn FenceStore>,
    /// One lock for the table: acquires are rare next to writes, and each await inside is a
    /// synced put that must not interleave with another grant of the same name.
    held: Mutex<HashMap<String, Held>>,
    freed: Notify,
    pub credentials: LeaseCredentials,
}

/// Lease names: 1-200 characters of letters, digits, `.`, `_`, `-`, `:`, `/`; no `..`.
pub fn validate_name(name: &str) -> Result<(), LeaseError> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && !name.contains("..")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-:/".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(LeaseError::InvalidName(
            name.chars().take(64).collect::<String>(),
        ))
    }
}

pub fn validate_ttl(ttl: Duration) -> Result<(), LeaseError> {
    if ttl.is_zero() || ttl > MAX_TTL {
        return Err(LeaseError::InvalidTtl(ttl.as_millis() as u64));
    }
    Ok(())
}

fn validate_holder(holder: &str) -> Result<(), LeaseError> {
    if holder.is_empty() || holder.len() > 200 || holder.chars().any(char::is_control) {
        return Err(LeaseError::InvalidHolder);
    }
    Ok(())
}

impl Leases {
    pub fn new(gate: Arc<Gate>, store: Arc<dyn FenceStore>, grace: Duration) -> Leases {
        Leases {
            gate,
            store,
            held: Mutex::new(HashMap::new()),
            freed: Notify::new(),
            credentials: LeaseCredentials::new(grace),
        }
    }

    fn row_key(name: &str) -> String {
        format!("lease:{name}")
    }

    /// The last token granted for `name` (durable).
    fn last_token(&self, name: &str) -> Result<u64, LeaseError> {
        Ok(self
            .store
            .get(&Self::row_key(name))
            .map_err(GateError::from)?
            .and_then(|r| r.highest)
            .unwrap_or(0))
    }

    /// Acquires `name`, waiting up to `wait` for the current holder to release or expire.
    pub async fn acquire(&self, req: AcquireRequest) -> Result<Grant, LeaseError> {
        validate_name(&req.name)?;
        validate_holder(&req.holder)?;
        validate_ttl(req.ttl)?;
        if req.wait > MAX_WAIT {
            return Err(LeaseError::InvalidWait(req.wait.as_millis() as u64));
        }
        if let Some(b) = &req.bind {
            // Fails now (unknown bucket, bad key) rather than after the token is spent.
            self.gate.fence_info(&b.bucket, &b.key, None)?;
        }
        let deadline = Instant::now() + req.wait;
        loop {
            let freed = self.freed.notified();
            let mut held = self.held.lock().await;
            match held.get(&req.name) {
                Some(h) if h.expires > Instant::now() && h.grant.holder != req.holder => {
                    let remaining = h.expires - Instant::now();
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(LeaseError::Held {
                            holder: h.grant.holder.clone(),
                            retry_after: remaining,
                        });
                    }
                    let until = (now + remaining).min(deadline);
                    drop(held);
                    // Woken by a release, or at the holder's expiry, or at our deadline.
                    let _ = tokio::time::timeout_at(until, freed).await;
                    continue;
                }
                _ => {}
            }
            let grant = self.grant(&req).await?;
            if let Some(old) = held.insert(
                req.name.clone(),
                Held {
                    grant: grant.clone(),
                    expires: Instant::now() + req.ttl,
                },
            ) {
                self.credentials.end(&old.grant.name, old.grant.token);
            }
            tracing::info!(lease = %req.name, holder = %req.holder, token = grant.token, "lease granted");
            metrics::counter!("fencegate_leases_granted_total").increment(1);
            return Ok(grant);
        }
    }

    /// Mints the next token (synced), advances the bound fence, issues credentials.
    async fn grant(&self, req: &AcquireRequest) -> Result<Grant, LeaseError> {
        let mut token = self.last_token(&req.name)? + 1;
        let mut scope = None;
        if let Some(b) = &req.bind {
            // Above the scope's highest too, so the advance fences out whoever wrote last,
            // whatever service their token came from. Retried if a writer raced ahead.
            for _ in 0..8 {
                let info = self.gate.fence_info(&b.bucket, &b.key, None)?;
                token = token.max(info.highest.unwrap_or(0) + 1);
                self.save_token(&req.name, token).await?;
                match self
                    .gate
                    .advance(&b.bucket, &b.key, Ok(Some(Token(token))), None)
                    .await
                {
                    Ok(info) => {
                        scope = Some(info.scope);
                        break;
                    }
                    Err(GateError::StaleFencingToken { highest, .. }) => token = highest + 1,
                    Err(e) => return Err(e.into()),
                }
            }
            if scope.is_none() {
                return Err(LeaseError::Contended);
            }
        } else {
            self.save_token(&req.name, token).await?;
        }
        let credential = req.s3_credentials.then(|| {
            self.credentials.issue(
                &req.name,
                token,
                req.bind.as_ref().map(|b| b.bucket.clone()),
                Instant::now() + req.ttl,
            )
        });
        Ok(Grant {
            name: req.name.clone(),
            holder: req.holder.clone(),
            token,
            ttl_ms: req.ttl.as_millis() as u64,
            expires_at_ms: now_ms() + req.ttl.as_millis() as u64,
            bound: req.bind.clone(),
            scope,
            s3_credentials: credential,
        })
    }

    async fn save_token(&self, name: &str, token: u64) -> Result<(), LeaseError> {
        let row = FenceRow {
            highest: Some(token),
            ..FenceRow::default()
        };
        self.store
            .put(vec![(Self::row_key(name), row)], Durability::Synced)
            .await
            .map_err(GateError::from)?;
        Ok(())
    }

    /// The current holder's lease, checked: same holder, same token, not expired.
    fn current<'a>(
        held: &'a mut HashMap<String, Held>,
        name: &str,
        holder: &str,
        token: u64,
    ) -> Result<&'a mut Held, LeaseError> {
        match held.get_mut(name) {
            Some(h)
                if h.grant.holder == holder
                    && h.grant.token == token
                    && h.expires > Instant::now() =>
            {
                Ok(h)
            }
            Some(h) if h.expires > Instant::now() => Err(LeaseError::NotHolder {
                name: name.to_string(),
            }),
            _ => Err(LeaseError::NotHeld {
                name: name.to_string(),
            }),
        }
    }

    /// Extends a lease the caller still holds.
    pub async fn renew(
        &self,
        name: &str,
        holder: &str,
        token: u64,
        ttl: Duration,
    ) -> Result<Grant, LeaseError> {
        validate_name(name)?;
        validate_ttl(ttl)?;
        let mut held = self.held.lock().await;
        let h = Self::current(&mut held, name, holder, token)?;
        h.expires = Instant::now() + ttl;
        self.credentials.set_until(name, token, h.expires);
        h.grant.ttl_ms = ttl.as_millis() as u64;
        h.grant.expires_at_ms = now_ms() + h.grant.ttl_ms;
        Ok(h.grant.clone())
    }

    /// Ends a lease early, so the next acquire need not wait for the TTL.
    pub async fn release(&self, name: &str, holder: &str, token: u64) -> Result<(), LeaseError> {
        validate_name(name)?;
        let mut held = self.held.lock().await;
        Self::current(&mut held, name, holder, token)?;
        held.remove(name);
        self.credentials.end(name, token);
        drop(held);
        self.freed.notify_waiters();
        tracing::info!(lease = name, holder, token, "lease released");
        Ok(())
    }

    /// The live lease on `name`, if any.
    pub async fn show(&self, name: &str) -> Result<Grant, LeaseError> {
        validate_name(name)?;
        let held = self.held.lock().await;
        match held.get(name) {
            Some(h) if h.expires > Instant::now() => {
                let mut g = h.grant.clone();
                // The secret was shown once, to the holder; never again.
                g.s3_credentials = g.s3_credentials.map(|c| LeaseCredential {
                    secret_access_key: "<hidden>".into(),
                    ..c
                });
                Ok(g)
            }
            _ => Err(LeaseError::NotHeld {
                name: name.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests;
