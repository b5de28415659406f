//! Leases when the fence table is shared (`[fence_store] kind = "etcd"`): the holder lives on
//! the lease name's row (`lease:<name>`, [`HeldLease`]) beside the last token granted, so any
//! instance grants, renews, releases, shows and revokes any lease, and every grant is one
//! compare-and-swap on that row (with the bound scope's row, for a bound lease). A grant that
//! meets another instance's is taken again from a fresh read (`gate::again`), so one holder at
//! a time gets the lease and the tokens stay one strictly increasing sequence. The holder's
//! principal's row (`owned.rs`) is in every one of those puts, so that its live leases are
//! bounded across instances.
//!
//! Expiry is judged on the wall clock, since instances share no monotonic one: it decides only
//! liveness (when the next holder may acquire), never the fence, which is the token's.

use super::credentials_shared::end_grant;
use super::owned;
use super::{random_secret, row_key, AcquireRequest, Binding, Grant, LeaseError, Leases, Proof};
use crate::fence::{Durability, FenceRow, HeldLease};
use crate::gate::{again, run_to_end, GateError};
use crate::wall_clock::now_ms;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How often a blocked acquire looks again: no instance can wake another's waiters.
const POLL: Duration = Duration::from_millis(100);

fn digest(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// The live holder on `row`, if any.
fn live(row: &FenceRow, now: u64) -> Option<&HeldLease> {
    row.held.as_ref().filter(|h| h.expires_at_ms > now)
}

fn grant_of(name: &str, token: u64, h: &HeldLease) -> Grant {
    Grant {
        name: name.to_string(),
        holder: h.holder.clone(),
        token,
        ttl_ms: h.ttl_ms,
        expires_at_ms: h.expires_at_ms,
        bound: h.bound.as_ref().map(|(bucket, key)| Binding {
            bucket: bucket.clone(),
            key: key.clone(),
        }),
        scope: h.scope.clone(),
        s3_credentials: None,
        lease_secret: None,
    }
}

impl Leases {
    async fn lease_row(&self, name: &str) -> Result<FenceRow, LeaseError> {
        Ok(self
            .store
            .get(&row_key(name))
            .await
            .map_err(GateError::from)?
            .unwrap_or_default())
    }

    pub(super) async fn acquire_shared(&self, req: AcquireRequest) -> Result<Grant, LeaseError> {
        let deadline = Instant::now() + req.wait;
        let scope = match &req.bind {
            Some(b) => Some(self.gate.scope_of(&b.bucket, &b.key, None)?),
            None => None,
        };
        let mut attempt = 0;
        loop {
            let row = self.lease_row(&req.name).await?;
            let now = now_ms();
            if let Some(h) =
                live(&row, now).filter(|h| h.holder != req.holder || h.owner != req.owner)
            {
                let remaining = Duration::from_millis(h.expires_at_ms - now);
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(LeaseError::Held {
                        holder: h.holder.clone(),
                        retry_after: remaining,
                    });
                }
                tokio::time::sleep(remaining.min(left).min(POLL)).await;
                continue;
            }
            // From here to the put, this instance's other changes of the principal's row wait.
            let counting = self.counting.lock(&req.owner).await;
            let mut owned = owned::read(self.store.as_ref(), &req.owner, now).await?;
            let secret = random_secret();
            let held = HeldLease {
                holder: req.holder.clone(),
                owner: req.owner.clone(),
                secret_sha256: digest(&secret),
                expires_at_ms: now + req.ttl.as_millis() as u64,
                ttl_ms: req.ttl.as_millis() as u64,
                bound: req.bind.as_ref().map(|b| (b.bucket.clone(), b.key.clone())),
                scope: scope.clone(),
            };
            if !owned::take(
                &mut owned,
                &req.name,
                held.expires_at_ms,
                self.max_live_per_key,
            ) {
                return Err(LeaseError::TooManyLeases {
                    owner: req.owner.clone(),
                    limit: self.max_live_per_key,
                });
            }
            let minted = run_to_end(mint_held(
                Arc::clone(&self.gate),
                Arc::clone(&self.store),
                (req.name.clone(), row),
                (held.clone(), self.credentials.grace()),
                (owned::row_key(&req.owner), owned),
            ))
            .await;
            drop(counting);
            match minted {
                Err(e) if again(&e, &mut attempt).await => continue,
                Err(e) => return Err(e.into()),
                Ok(token) => {
                    let mut grant = grant_of(&req.name, token, &held);
                    grant.lease_secret = Some(secret);
                    if let (Some(b), Some(scope), true) = (&req.bind, &scope, req.s3_credentials) {
                        let issued = self
                            .credentials
                            .issue_shared(
                                &req.name,
                                token,
                                b.bucket.clone(),
                                scope.clone(),
                                (&req.owner, &req.holder),
                            )
                            .await
                            .map_err(GateError::from)?;
                        grant.s3_credentials = Some(issued);
                    }
                    tracing::info!(target: "fencegate::audit", lease = %req.name, holder = req.holder.as_str(), principal = %req.owner, token, "lease granted");
                    crate::metrics::lease_granted();
                    return Ok(grant);
                }
            }
        }
    }

    /// Reads the lease's row, checks `proof` against its live holder, and writes back what
    /// `change` makes of it, with the holder's principal's row following it, in one
    /// compare-and-swap, taken again if another instance wrote either row in between. Returns
    /// the lease's row as written.
    async fn change_held(
        &self,
        name: &str,
        proof: &Proof<'_>,
        change: impl Fn(&mut FenceRow),
    ) -> Result<FenceRow, LeaseError> {
        let mut attempt = 0;
        loop {
            let mut row = self.lease_row(name).await?;
            let now = now_ms();
            let Some(h) = live(&row, now) else {
                return Err(LeaseError::NotHeld {
                    name: name.to_string(),
                });
            };
            let proven = h.holder == proof.holder
                && row.highest == Some(proof.token)
                && bool::from(subtle::ConstantTimeEq::ct_eq(
                    h.secret_sha256.as_bytes(),
                    digest(proof.secret).as_bytes(),
                ));
            if !proven {
                return Err(LeaseError::NotHolder {
                    name: name.to_string(),
                });
            }
            let owner = h.owner.clone();
            change(&mut row);
            let counting = self.counting.lock(&owner).await;
            let mut owned = owned::read(self.store.as_ref(), &owner, now).await?;
            owned::follow(&mut owned, name, &owner, &row);
            let put = self
                .store
                .put(
                    vec![
                        (row_key(name), row.clone()),
                        (owned::row_key(&owner), owned),
                    ],
                    Durability::Synced,
                )
                .await
                .map_err(GateError::from);
            drop(counting);
            match put {
                Err(e) if again(&e, &mut attempt).await => continue,
                Err(e) => return Err(e.into()),
                Ok(_) => return Ok(row),
            }
        }
    }

    pub(super) async fn renew_shared(
        &self,
        name: &str,
        proof: &Proof<'_>,
        ttl: Duration,
    ) -> Result<Grant, LeaseError> {
        let ttl_ms = ttl.as_millis() as u64;
        let row = self
            .change_held(name, proof, |row| {
                if let Some(h) = row.held.as_mut() {
                    h.ttl_ms = ttl_ms;
                    h.expires_at_ms = now_ms() + ttl_ms;
                }
            })
            .await?;
        let held = row.held.as_ref().expect("a renewed lease is held");
        Ok(grant_of(name, row.highest.unwrap_or(0), held))
    }

    pub(super) async fn release_shared(
        &self,
        name: &str,
        proof: &Proof<'_>,
    ) -> Result<(), LeaseError> {
        let grace_ms = self.credentials.grace().as_millis() as u64;
        self.change_held(name, proof, |row| end_grant(row, now_ms(), grace_ms))
            .await?;
        tracing::info!(target: "fencegate::audit", lease = name, holder = proof.holder, token = proof.token, "lease released");
        Ok(())
    }

    pub(super) async fn show_shared(&self, name: &str) -> Result<Grant, LeaseError> {
        let row = self.lease_row(name).await?;
        match live(&row, now_ms()) {
            Some(h) => Ok(grant_of(name, row.highest.unwrap_or(0), h)),
            None => Err(LeaseError::NotHeld {
                name: name.to_string(),
            }),
        }
    }

    /// Every live lease of every instance, with its principal.
    pub(super) async fn list_shared(&self) -> Result<Vec<(Grant, String)>, LeaseError> {
        let store = Arc::clone(&self.store);
        let rows = tokio::task::spawn_blocking(move || {
            let mut rows = Vec::new();
            store
                .scan_prefix("lease:", &mut |key, row| {
                    rows.push((key.to_string(), row.clone()));
                    true
                })
                .map(|()| rows)
        })
        .await
        .map_err(|e| GateError::Internal(e.to_string()))?
        .map_err(GateError::from)?;
        let now = now_ms();
        Ok(rows
            .iter()
            .filter_map(|(key, row)| {
                let name = key.strip_prefix("lease:")?;
                live(row, now)
                    .map(|h| (grant_of(name, row.highest.unwrap_or(0), h), h.owner.clone()))
            })
            .collect())
    }

    /// Ends the live lease on `name` whoever holds it (an admin). Returns it, if there was one.
    pub(super) async fn revoke_shared(&self, name: &str) -> Result<Option<Grant>, LeaseError> {
        let mut attempt = 0;
        loop {
            let mut row = self.lease_row(name).await?;
            let now = now_ms();
            let Some(h) = live(&row, now).cloned() else {
                return Ok(None);
            };
            let grant = grant_of(name, row.highest.unwrap_or(0), &h);
            // Revoked with its credentials, also those of earlier grants in their grace.
            row.held = None;
            row.ended.clear();
            let counting = self.counting.lock(&h.owner).await;
            let mut owned = owned::read(self.store.as_ref(), &h.owner, now).await?;
            owned::follow(&mut owned, name, &h.owner, &row);
            let put = self
                .store
                .put(
                    vec![(row_key(name), row), (owned::row_key(&h.owner), owned)],
                    Durability::Synced,
                )
                .await
                .map_err(GateError::from);
            drop(counting);
            match put {
                Err(e) if again(&e, &mut attempt).await => continue,
                Err(e) => return Err(e.into()),
                Ok(_) => return Ok(Some(grant)),
            }
        }
    }
}

/// The next token for the lease, with `held` recorded on its row and the principal's row
/// (`owned`, counting it) in the same put ([`super::mint_on`]). `row` is the lease row as
/// read; a `Conflict` means another instance wrote it (or the principal's row, or the bound
/// scope's row) since.
async fn mint_held(
    gate: Arc<crate::gate::Gate>,
    store: Arc<dyn crate::fence::FenceStore>,
    (name, mut row): (String, FenceRow),
    (held, grace): (HeldLease, Duration),
    owned: (String, FenceRow),
) -> Result<u64, GateError> {
    let bind = held
        .bound
        .clone()
        .map(|(bucket, key)| Binding { bucket, key });
    // The grant this one replaces ends now (or at its expiry): its credentials' grace runs
    // from then.
    end_grant(&mut row, now_ms(), grace.as_millis() as u64);
    let row = FenceRow {
        held: Some(held),
        ..row
    };
    let (token, _) = super::mint_on(
        &gate,
        store.as_ref(),
        (row_key(&name), row),
        bind.as_ref(),
        Some(owned),
    )
    .await?;
    Ok(token)
}
