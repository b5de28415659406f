//! fencegate's own lease service (`/v1/leases/{name}`): a lock with a TTL whose every grant
//! carries a fencing token strictly greater than every token granted for that name before,
//! synced to the fence table before it is returned, so it survives kill -9.
//!
//! Expiry only decides liveness (when the next holder may acquire); correctness is the fence's:
//! a holder paused past its TTL keeps its old token, which the gate refuses once the next
//! holder's token is recorded. A lease bound to a scope advances that fence at acquire, so the
//! previous holder is fenced out before the new one writes at all. Holders and expiries live in
//! memory: a restart ends every lease, and tokens still never go back. When the fence table is
//! shared by several instances, they live on the lease's row instead (`shared.rs`), and each
//! principal's live leases are counted on a row of its own (`owned.rs`).

mod credentials;
mod credentials_shared;
mod error;
mod owned;
mod shared;
mod wire;

pub use credentials::{CredentialInGrace, LeaseCredential, LeaseCredentials, LeaseIdentity};
pub use error::LeaseError;
use wire::public;
pub use wire::{AcquireRequest, Binding, Grant, LeaseListing, LeaseShown, ListedLease, Revoked};

use crate::fence::{Durability, FenceRow, FenceStore};
use crate::gate::{run_to_end, Gate, GateError, ScopeLocks};
use crate::wall_clock::now_ms;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Longest TTL a lease may ask for: beyond this a typo (ms for s) holds a lock for days.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Longest a blocked acquire may wait.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

struct Held {
    grant: Grant,
    expires: Instant,
    secret: String,
    owner: String,
}

/// Drops the leases that expired since the last look, counting each once, and sets the gauge
/// of the leases held now. An expired lease needs nothing kept: its name is free, its token
/// stays in the fence table (`lease:<name>`), and its S3 credentials keep their own expiry and
/// grace (`credentials.rs`).
fn census(held: &mut HashMap<String, Held>) {
    let now = Instant::now();
    let before = held.len();
    held.retain(|name, h| {
        let live = h.expires > now;
        if !live {
            // Its S3 key id too: a request signed with it after the grace answers 403
            // InvalidAccessKeyId, and this line says whose it was.
            tracing::info!(target: "fencegate::audit", lease = %name, holder = h.grant.holder.as_str(), principal = %h.owner, token = h.grant.token, s3_access_key_id = %credential_id(&h.grant), "lease expired");
        }
        live
    });
    let expired = before - held.len();
    if expired > 0 {
        crate::metrics::leases_expired(expired as u64);
    }
    crate::metrics::leases_held(held.len());
}

/// The key id of a grant's S3 credentials, or `-`, for the audit lines.
fn credential_id(grant: &Grant) -> &str {
    grant
        .s3_credentials
        .as_ref()
        .map_or("-", |c| c.access_key_id.as_str())
}

/// Live leases one principal may hold at once unless configured (`[leases] max_live_per_key`).
pub const DEFAULT_MAX_LIVE_PER_KEY: usize = 1_000;

pub struct Leases {
    gate: Arc<Gate>,
    store: Arc<dyn FenceStore>,
    /// The live leases. A plain mutex never held across an await, so a renewal or a release
    /// never waits behind a grant's synced put or fence advance.
    held: Mutex<HashMap<String, Held>>,
    /// Serialises the grants of one name (check, mint, record) without blocking other names.
    granting: ScopeLocks,
    freed: Notify,
    pub credentials: LeaseCredentials,
    /// Live leases one principal may hold at once (on a shared table, on every instance
    /// together: `owned.rs`).
    max_live_per_key: usize,
    /// Shared tables: serialises this instance's changes of one principal's row (`owned.rs`),
    /// by principal, so that only other instances' changes make one read it again.
    counting: ScopeLocks,
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
        let credentials = if store.shared() {
            LeaseCredentials::new(grace).shared_on(Arc::clone(&store))
        } else {
            LeaseCredentials::new(grace)
        };
        Leases {
            gate,
            store,
            held: Mutex::new(HashMap::new()),
            granting: ScopeLocks::default(),
            counting: ScopeLocks::default(),
            freed: Notify::new(),
            credentials,
            max_live_per_key: DEFAULT_MAX_LIVE_PER_KEY,
        }
    }

    /// At most `limit` live leases per principal (`[leases] max_live_per_key`); past it an
    /// acquire of a new name is refused with 429 `TooManyLeases`.
    pub fn with_max_live_per_key(mut self, limit: usize) -> Leases {
        self.max_live_per_key = limit;
        self
    }

    /// Acquires `name`, waiting up to `wait` for the current holder to release or expire.
    pub async fn acquire(&self, req: AcquireRequest) -> Result<Grant, LeaseError> {
        validate_name(&req.name)?;
        validate_holder(&req.holder)?;
        validate_ttl(req.ttl)?;
        if req.wait > MAX_WAIT {
            return Err(LeaseError::InvalidWait(req.wait.as_millis() as u64));
        }
        if req.s3_credentials && req.bind.is_none() {
            return Err(LeaseError::Invalid(
                "S3 credentials are issued only for a lease bound to a scope, which they are confined to: add \"bucket\" and \"key\"".into(),
            ));
        }
        if let Some(b) = &req.bind {
            // Fails now (unknown bucket, bad key) rather than after the token is spent.
            self.gate.fence_info(&b.bucket, &b.key, None).await?;
        }
        if self.store.shared() {
            return self.acquire_shared(req).await;
        }
        let deadline = Instant::now() + req.wait;
        loop {
            let freed = self.freed.notified();
            let granting = self.granting.lock(&req.name).await;
            let busy = match self.held.lock().get(&req.name) {
                Some(h)
                    if h.expires > Instant::now()
                        && (h.grant.holder != req.holder || h.owner != req.owner) =>
                {
                    Some((h.grant.holder.clone(), h.expires - Instant::now()))
                }
                _ => None,
            };
            if busy.is_none() {
                self.room_for(&req)?;
            }
            if let Some((holder, remaining)) = busy {
                drop(granting);
                let now = Instant::now();
                if now >= deadline {
                    return Err(LeaseError::Held {
                        holder,
                        retry_after: remaining,
                    });
                }
                // Woken by a release, or at the holder's expiry, or at our deadline.
                let _ = tokio::time::timeout_at((now + remaining).min(deadline), freed).await;
                continue;
            }
            let mut grant = self.grant(&req).await?;
            let secret = random_secret();
            let old = {
                let mut held = self.held.lock();
                // Before the insert, so that a lease this grant replaces after its expiry is
                // counted as expired.
                census(&mut held);
                let old = held.insert(
                    req.name.clone(),
                    Held {
                        grant: grant.clone(),
                        expires: Instant::now() + req.ttl,
                        secret: secret.clone(),
                        owner: req.owner.clone(),
                    },
                );
                census(&mut held);
                old
            };
            grant.lease_secret = Some(secret);
            drop(granting);
            if let Some(old) = old {
                self.credentials.end(&old.grant.name, old.grant.token);
            }
            tracing::info!(target: "fencegate::audit", lease = %req.name, holder = req.holder.as_str(), principal = %req.owner, token = grant.token, s3_access_key_id = %credential_id(&grant), "lease granted");
            crate::metrics::lease_granted();
            return Ok(grant);
        }
    }

    /// Refuses a new lease past the live leases its principal may hold (a renewal by the same
    /// holder, or a re-acquire of its own lease, takes no more room).
    fn room_for(&self, req: &AcquireRequest) -> Result<(), LeaseError> {
        let mut held = self.held.lock();
        census(&mut held);
        if held.get(&req.name).is_some_and(|h| h.owner == req.owner) {
            return Ok(());
        }
        let owned = held.values().filter(|h| h.owner == req.owner).count();
        if owned >= self.max_live_per_key {
            return Err(LeaseError::TooManyLeases {
                owner: req.owner.clone(),
                limit: self.max_live_per_key,
            });
        }
        Ok(())
    }

    /// Mints the next token and advances the bound fence (both synced, in a task that runs to
    /// its end whatever the client does), then issues credentials.
    async fn grant(&self, req: &AcquireRequest) -> Result<Grant, LeaseError> {
        let (token, scope) = run_to_end(mint(
            Arc::clone(&self.gate),
            Arc::clone(&self.store),
            req.name.clone(),
            req.bind.clone(),
        ))
        .await?;
        let credential = match (&req.bind, &scope) {
            (Some(b), Some(scope)) if req.s3_credentials => Some(self.credentials.issue(
                &req.name,
                token,
                b.bucket.clone(),
                scope.clone(),
                (Instant::now() + req.ttl, &req.owner, &req.holder),
            )),
            _ => None,
        };
        Ok(Grant {
            name: req.name.clone(),
            holder: req.holder.clone(),
            token,
            ttl_ms: req.ttl.as_millis() as u64,
            expires_at_ms: now_ms() + req.ttl.as_millis() as u64,
            bound: req.bind.clone(),
            scope,
            s3_credentials: credential,
            lease_secret: None,
        })
    }

    /// The current holder's lease, checked: same holder, same token, the lease's secret, not
    /// expired.
    fn current<'a>(
        held: &'a mut HashMap<String, Held>,
        name: &str,
        proof: &Proof<'_>,
    ) -> Result<&'a mut Held, LeaseError> {
        match held.get_mut(name) {
            Some(h)
                if h.grant.holder == proof.holder
                    && h.grant.token == proof.token
                    && bool::from(subtle::ConstantTimeEq::ct_eq(
                        h.secret.as_bytes(),
                        proof.secret.as_bytes(),
                    ))
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
        proof: &Proof<'_>,
        ttl: Duration,
    ) -> Result<Grant, LeaseError> {
        validate_name(name)?;
        validate_ttl(ttl)?;
        if self.store.shared() {
            return self.renew_shared(name, proof, ttl).await;
        }
        let mut held = self.held.lock();
        let h = Self::current(&mut held, name, proof)?;
        h.expires = Instant::now() + ttl;
        self.credentials.set_until(name, proof.token, h.expires);
        h.grant.ttl_ms = ttl.as_millis() as u64;
        h.grant.expires_at_ms = now_ms() + h.grant.ttl_ms;
        Ok(h.grant.clone())
    }

    /// Ends a lease early, so the next acquire need not wait for the TTL.
    pub async fn release(&self, name: &str, proof: &Proof<'_>) -> Result<(), LeaseError> {
        validate_name(name)?;
        if self.store.shared() {
            return self.release_shared(name, proof).await;
        }
        let mut held = self.held.lock();
        Self::current(&mut held, name, proof)?;
        held.remove(name);
        census(&mut held);
        self.credentials.end(name, proof.token);
        drop(held);
        self.freed.notify_waiters();
        tracing::info!(target: "fencegate::audit", lease = name, holder = proof.holder, token = proof.token, "lease released");
        Ok(())
    }

    /// The live lease on `name`, if any.
    pub async fn show(&self, name: &str) -> Result<Grant, LeaseError> {
        validate_name(name)?;
        if self.store.shared() {
            return self.show_shared(name).await;
        }
        let held = self.held.lock();
        match held.get(name) {
            Some(h) if h.expires > Instant::now() => Ok(public(&h.grant)),
            _ => Err(LeaseError::NotHeld {
                name: name.to_string(),
            }),
        }
    }

    /// Keeps `fencegate_lease_expiries_total` and `fencegate_leases_held` current, every
    /// second (every 10 s on a shared table, where looking means a scan of the lease rows).
    pub fn watch(self: &Arc<Self>, shutdown: &crate::shutdown::Shutdown) {
        let leases = Arc::clone(self);
        shutdown.spawn_background(async move {
            let mut seen = HashMap::new();
            loop {
                if leases.store.shared() {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    leases.census_shared(&mut seen).await;
                    if let Err(e) = leases.credentials.prune_shared().await {
                        tracing::warn!(error = %e, "could not remove the lease credentials that no longer work; trying again in 10 s");
                    }
                } else {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    census(&mut leases.held.lock());
                    leases.credentials.prune();
                }
            }
        });
    }

    /// [`census`] on a shared table: `seen` holds each lease name's token and expiry as last
    /// scanned. A lease gone from the scan (or replaced by another token) after its expiry
    /// time has expired; one gone before it was released or revoked. Every instance counts
    /// the expiries it sees.
    async fn census_shared(&self, seen: &mut HashMap<String, (u64, u64)>) {
        let live = match self.list_shared().await {
            Ok(live) => live,
            Err(e) => {
                tracing::debug!(error = %e, "lease census: the lease rows cannot be read now");
                return;
            }
        };
        let now = now_ms();
        let current: HashMap<String, (u64, u64)> = live
            .iter()
            .map(|(g, _)| (g.name.clone(), (g.token, g.expires_at_ms)))
            .collect();
        let expired = seen
            .iter()
            .filter(|(name, (token, expires))| {
                *expires <= now && current.get(*name).map(|c| c.0) != Some(*token)
            })
            .count();
        if expired > 0 {
            crate::metrics::leases_expired(expired as u64);
        }
        crate::metrics::leases_held(current.len());
        *seen = current;
    }

    /// Every live lease, by name (the admin surface), with the principal that holds it.
    pub async fn list(&self) -> Result<Vec<(Grant, String)>, LeaseError> {
        if self.store.shared() {
            return self.list_shared().await;
        }
        let now = Instant::now();
        let held = self.held.lock();
        let mut all: Vec<_> = held
            .values()
            .filter(|h| h.expires > now)
            .map(|h| (public(&h.grant), h.owner.clone()))
            .collect();
        all.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        Ok(all)
    }

    /// The live lease `name` with its principal, and its credentials still in their grace, for
    /// the admin; `NotHeld` when there is neither.
    pub async fn admin_show(&self, name: &str) -> Result<LeaseShown, LeaseError> {
        validate_name(name)?;
        let lease = self
            .list()
            .await?
            .into_iter()
            .find(|(grant, _)| grant.name == name)
            .map(|(grant, principal)| ListedLease { grant, principal });
        let credentials_in_grace: Vec<_> = self
            .credentials_in_grace()
            .await?
            .into_iter()
            .filter(|c| c.lease == name)
            .collect();
        if lease.is_none() && credentials_in_grace.is_empty() {
            return Err(LeaseError::NotHeld {
                name: name.to_string(),
            });
        }
        Ok(LeaseShown {
            lease,
            credentials_in_grace,
        })
    }

    /// Ends the lease `name` whoever holds it (an admin's decision, named in the audit log),
    /// and every S3 credential it issued at once, also those of an expired or released grant
    /// still in their grace period. The holder's token is not fenced out by this: the next
    /// grant does that, as after an expiry. `NotHeld` when there was neither a live lease nor a
    /// working credential.
    pub async fn revoke(&self, name: &str, by: &str) -> Result<Revoked, LeaseError> {
        validate_name(name)?;
        let lease = if self.store.shared() {
            self.revoke_shared(name).await?
        } else {
            let now = Instant::now();
            let mut held = self.held.lock();
            census(&mut held);
            let removed = held.remove(name);
            census(&mut held);
            removed
                .filter(|h| h.expires > now)
                .map(|h| public(&h.grant))
        };
        let credentials = self
            .credentials
            .revoke_everywhere(name)
            .await
            .map_err(GateError::from)?;
        if lease.is_none() && credentials == 0 {
            return Err(LeaseError::NotHeld {
                name: name.to_string(),
            });
        }
        self.freed.notify_waiters();
        tracing::warn!(target: "fencegate::audit", lease = name, holder = lease.as_ref().map(|g| g.holder.as_str()), token = lease.as_ref().map(|g| g.token), credentials, principal = by, "lease revoked");
        Ok(Revoked { lease, credentials })
    }

    /// The S3 credentials that still work after their grant ended (the grace after an
    /// expiry, a release or a new grant), for the admin's list.
    pub async fn credentials_in_grace(
        &self,
    ) -> Result<Vec<credentials::CredentialInGrace>, LeaseError> {
        Ok(self
            .credentials
            .listed_in_grace()
            .await
            .map_err(GateError::from)?)
    }
}

/// What renew and release must show: the holder, its token and the lease's secret.
#[derive(Debug, Clone, Copy)]
pub struct Proof<'a> {
    pub holder: &'a str,
    pub token: u64,
    pub secret: &'a str,
}

fn random_secret() -> String {
    let bytes: [u8; 24] = rand::random();
    hex::encode(bytes)
}

fn row_key(name: &str) -> String {
    format!("lease:{name}")
}

/// The next token for `name`: one above the last granted (checked: a name at u64::MAX cannot
/// grow), and for a bound lease strictly above everything its scope recorded, decided under
/// the scope's lock, where the name's row is saved in the same atomic, synced put. On a shared
/// fence table every instance mints from the same row: a put that meets another instance's
/// grant is taken again from the read, so the sequence stays strictly increasing.
async fn mint(
    gate: Arc<Gate>,
    store: Arc<dyn FenceStore>,
    name: String,
    bind: Option<Binding>,
) -> Result<(u64, Option<String>), GateError> {
    let mut attempt = 0;
    loop {
        let result = mint_once(&gate, store.as_ref(), &name, bind.as_ref()).await;
        match result {
            Err(e) if crate::gate::again(&e, &mut attempt).await => continue,
            other => return other,
        }
    }
}

async fn mint_once(
    gate: &Arc<Gate>,
    store: &dyn FenceStore,
    name: &str,
    bind: Option<&Binding>,
) -> Result<(u64, Option<String>), GateError> {
    let key = row_key(name);
    let row = store.get(&key).await?.unwrap_or_default();
    mint_on(gate, store, (key, row), bind, None).await
}

/// Mints on the name's row as read (`row`, carrying whatever else the grant records on it, as
/// the holder on a shared table): the floor is one above its last token, and the row is saved
/// with the new token, in the bound scope's own put for a bound lease. `with`, a row written
/// as it is in the same put (the principal's count of leases on a shared table).
async fn mint_on(
    gate: &Arc<Gate>,
    store: &dyn FenceStore,
    (key, row): (String, FenceRow),
    bind: Option<&Binding>,
    with: Option<(String, FenceRow)>,
) -> Result<(u64, Option<String>), GateError> {
    let floor = row
        .highest
        .unwrap_or(0)
        .checked_add(1)
        .ok_or_else(|| GateError::TokenSpaceExhausted { scope: key.clone() })?;
    if let Some(b) = bind {
        // The name's row goes in the scope's own synced put, under the scope's lock.
        let (token, scope) = gate
            .advance_past_with(&b.bucket, &b.key, floor, Some((key, row)), with)
            .await?;
        return Ok((token.0, Some(scope)));
    }
    let row = FenceRow {
        highest: Some(floor),
        ..row
    };
    let rows = std::iter::once((key, row)).chain(with).collect();
    store.put(rows, Durability::Synced).await?;
    Ok((floor, None))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_kit;
