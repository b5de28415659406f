//! Buckets created through the S3 API when the fence table is shared (etcd): each is the
//! record `bucket:<name>` holding its policy, written by the instance that created it only if
//! no other did, so every instance serves it. An instance learns of a bucket another created
//! when a request names it ([`super::Catalog::discover`]), before ListBuckets, and every
//! [`SYNC_EVERY`]; of one deleted, at the next pass. Until then a write admitted through it
//! can still land in the deleted bucket's keys, fenced as ever (its fence rows stay), and shows
//! again if the bucket is created again.

use super::CatalogError;
use crate::config::BucketPolicy;
use crate::fence::{Records, StoreError, When};
use std::collections::BTreeMap;
use std::time::Duration;

/// How often each instance looks for buckets created or deleted through the others.
pub const SYNC_EVERY: Duration = Duration::from_secs(2);

fn key(name: &str) -> String {
    format!("bucket:{name}")
}

fn failed(e: StoreError) -> CatalogError {
    CatalogError::Failed(format!("cannot read or record the created buckets: {e}"))
}

fn decode(name: &str, bytes: &[u8]) -> Result<BucketPolicy, CatalogError> {
    serde_json::from_slice(bytes).map_err(|e| {
        CatalogError::Failed(format!("the record of bucket {name} is unreadable: {e}"))
    })
}

pub(super) async fn created(
    records: &dyn Records,
) -> Result<BTreeMap<String, BucketPolicy>, CatalogError> {
    let mut out = BTreeMap::new();
    for (k, bytes) in records.scan("bucket:").await.map_err(failed)? {
        let name = k.trim_start_matches("bucket:").to_string();
        // A damaged record costs its own bucket, not every bucket's creation and deletion.
        match decode(&name, &bytes) {
            Ok(policy) => {
                out.insert(name, policy);
            }
            Err(e) => {
                tracing::error!(bucket = %name, error = %e, "not serving a bucket whose record in etcd is unreadable; fix or remove the record")
            }
        }
    }
    Ok(out)
}

pub(super) async fn one(
    records: &dyn Records,
    name: &str,
) -> Result<Option<BucketPolicy>, CatalogError> {
    match records.get(&key(name)).await.map_err(failed)? {
        Some(bytes) => decode(name, &bytes).map(Some),
        None => Ok(None),
    }
}

/// Records the bucket; false if another instance recorded it first.
pub(super) async fn create(
    records: &dyn Records,
    name: &str,
    policy: &BucketPolicy,
) -> Result<bool, CatalogError> {
    let bytes = serde_json::to_vec(policy).expect("a policy serializes");
    records
        .put(&key(name), bytes, When::Absent)
        .await
        .map_err(failed)
}

pub(super) async fn delete(records: &dyn Records, name: &str) -> Result<(), CatalogError> {
    records.remove(&key(name), None).await.map_err(failed)?;
    Ok(())
}
