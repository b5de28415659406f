//! Lease-bound S3 credentials when the fence table is shared (etcd), so that a credential one
//! instance issued works through every instance, with the same grace and revocation as on one.
//! Each is the record `cred:<access key id>` (its secret, lease, token, bucket, scope, owner
//! and holder), written once when issued. How long it works is read from its lease's row at
//! each use, so it follows the lease as any instance changed it:
//! - while its grant holds the lease, until the grant's expiry (renewals move it);
//! - once the grant was released or replaced, until the moment the row recorded for it
//!   ([`FenceRow::ended`]);
//! - plus the grace, either way. A grant the row no longer knows has no working credential.
//!
//! An admin's revoke removes the records. A request signed with such a credential costs two
//! etcd reads (the record and the lease's row); one with an id no instance issued costs none, as
//! ids carry a tag made with a key the instances share (`cred-id-key`, [`id_key`]). The records hold the secrets, as the signature
//! check needs them: guard etcd as the fence table it already holds.

use super::credentials::Issued;
use super::row_key;
use crate::fence::{FenceRow, FenceStore, HeldLease, Records, StoreError, When};
use std::collections::HashMap;

/// Ended grants a lease row remembers at most (their credentials' grace is short).
const ENDED_KEPT: usize = 16;

/// The record holding the key every instance signs its credentials' ids with.
const ID_KEY: &str = "cred-id-key";

/// The key credential ids are signed with on this shared table: the one the first instance to
/// need it wrote (of instances that race, one writes, and all read that one).
pub(super) async fn id_key(store: &dyn FenceStore) -> Result<Vec<u8>, StoreError> {
    let records = records(store)?;
    if let Some(key) = records.get(ID_KEY).await? {
        return Ok(key);
    }
    let fresh: [u8; 32] = rand::random();
    records.put(ID_KEY, fresh.to_vec(), When::Absent).await?;
    records
        .get(ID_KEY)
        .await?
        .ok_or_else(|| StoreError::Io("the credential id key vanished as it was written".into()))
}

fn record_key(access_key: &str) -> String {
    format!("cred:{access_key}")
}

fn records(store: &dyn FenceStore) -> Result<&dyn Records, StoreError> {
    store
        .records()
        .ok_or_else(|| StoreError::Io("lease credentials need a shared table's records".into()))
}

/// Ends the grant on a lease row (released, revoked or replaced) at `now`, or at its expiry
/// if that came first, keeping when it ended for its credentials' grace.
pub(super) fn end_grant(row: &mut FenceRow, now_ms: u64, grace_ms: u64) {
    if let (Some(HeldLease { expires_at_ms, .. }), Some(token)) = (row.held.take(), row.highest) {
        row.ended.insert(token, expires_at_ms.min(now_ms));
    }
    row.ended.retain(|_, ended| *ended + grace_ms >= now_ms);
    while row.ended.len() > ENDED_KEPT {
        row.ended.pop_first();
    }
}

/// Until when (Unix ms, before the grace) the grant `token` of the lease on `row` lasts; 0
/// when the row no longer knows it.
pub(super) fn grant_until_ms(row: &FenceRow, token: u64) -> u64 {
    match &row.held {
        Some(h) if row.highest == Some(token) => h.expires_at_ms,
        _ => row.ended.get(&token).copied().unwrap_or(0),
    }
}

pub(super) async fn issue(
    store: &dyn FenceStore,
    access_key: &str,
    credential: &Issued,
) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec(credential).expect("a credential serializes");
    if records(store)?
        .put(&record_key(access_key), bytes, When::Absent)
        .await?
    {
        Ok(())
    } else {
        Err(StoreError::Conflict(record_key(access_key)))
    }
}

async fn lease_row(store: &dyn FenceStore, lease: &str) -> Result<FenceRow, StoreError> {
    Ok(store.get(&row_key(lease)).await?.unwrap_or_default())
}

fn decode(bytes: &[u8]) -> Result<Issued, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(format!("a credential: {e}")))
}

/// The credential and until when its grant lasts (Unix ms, before the grace), as etcd holds
/// them now; `None` when there is no such credential (never issued, revoked, or pruned).
pub(super) async fn load(
    store: &dyn FenceStore,
    access_key: &str,
) -> Result<Option<(Issued, u64)>, StoreError> {
    let Some(bytes) = records(store)?.get(&record_key(access_key)).await? else {
        return Ok(None);
    };
    let credential = decode(&bytes)?;
    let row = lease_row(store, &credential.lease).await?;
    let until = grant_until_ms(&row, credential.token);
    Ok(Some((credential, until)))
}

/// Every credential, with until when its grant lasts (as [`load`]).
pub(super) async fn all(store: &dyn FenceStore) -> Result<Vec<(String, Issued, u64)>, StoreError> {
    let mut rows: HashMap<String, FenceRow> = HashMap::new();
    let mut out = Vec::new();
    for (key, bytes) in records(store)?.scan("cred:").await? {
        let credential = match decode(&bytes) {
            Ok(c) => c,
            Err(e) => {
                // Never loaded by a request either (it fails the same way): gone for good.
                tracing::error!(record = %key, error = %e, "removing an unreadable lease credential record");
                records(store)?.remove(&key, None).await?;
                continue;
            }
        };
        if !rows.contains_key(&credential.lease) {
            let row = lease_row(store, &credential.lease).await?;
            rows.insert(credential.lease.clone(), row);
        }
        let until = grant_until_ms(&rows[&credential.lease], credential.token);
        let id = key.trim_start_matches("cred:").to_string();
        out.push((id, credential, until));
    }
    Ok(out)
}

pub(super) async fn remove(store: &dyn FenceStore, access_key: &str) -> Result<(), StoreError> {
    records(store)?
        .remove(&record_key(access_key), None)
        .await?;
    Ok(())
}
