//! The registry of uploads in progress when the fence table is shared (etcd), so that any
//! instance serves any step of any upload. An upload is the record `upload:<id>`, written once
//! at its creation, and each part the record `part:<id>/<number>`, written only while the
//! upload's record exists. A completion or an abort removes the upload with its parts in one
//! step, so a part that loses that race is refused as on one instance (NoSuchUpload), and of
//! two instances removing one upload only one is told it did. The parts' bytes are in the store
//! (a cluster's buckets are s3 buckets), which every instance reaches by the upload's handle.

use super::uploads::Upload;
use crate::backend::PartInfo;
use crate::fence::{Records, StoreError, When};

fn upload_key(id: &str) -> String {
    format!("upload:{id}")
}

fn parts_under(id: &str) -> String {
    format!("part:{id}/")
}

/// Zero-padded, so that the parts scan in number order (numbers are 1 to 10,000).
fn part_key(id: &str, number: i32) -> String {
    format!("part:{id}/{number:05}")
}

fn corrupt(what: &str, e: serde_json::Error) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

/// Records a new upload, without its parts.
pub(super) async fn insert(records: &dyn Records, upload: &Upload) -> Result<(), StoreError> {
    let mut record = upload.clone();
    record.parts.clear();
    let bytes = serde_json::to_vec(&record).expect("an upload serializes");
    if records
        .put(&upload_key(&upload.id), bytes, When::Absent)
        .await?
    {
        Ok(())
    } else {
        // Ids are 128 random bits: only a retried write whose first answer was lost meets one.
        Err(StoreError::Conflict(upload_key(&upload.id)))
    }
}

/// Records a part (replacing one with the same number); false if the upload is gone.
pub(super) async fn add_part(
    records: &dyn Records,
    id: &str,
    part: &PartInfo,
) -> Result<bool, StoreError> {
    let bytes = serde_json::to_vec(part).expect("a part serializes");
    records
        .put(
            &part_key(id, part.number),
            bytes,
            When::Exists(&upload_key(id)),
        )
        .await
}

/// The upload without its parts.
pub(super) async fn head(records: &dyn Records, id: &str) -> Result<Option<Upload>, StoreError> {
    match records.get(&upload_key(id)).await? {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| corrupt("an upload record", e)),
    }
}

/// The upload with its parts.
pub(super) async fn get(records: &dyn Records, id: &str) -> Result<Option<Upload>, StoreError> {
    let Some(mut upload) = head(records, id).await? else {
        return Ok(None);
    };
    for part in decoded::<PartInfo>(records, &parts_under(id)).await? {
        upload.parts.insert(part.number, part);
    }
    Ok(Some(upload))
}

/// Removes the upload and its parts; false if it was gone already.
pub(super) async fn remove(records: &dyn Records, id: &str) -> Result<bool, StoreError> {
    records
        .remove(&upload_key(id), Some(&parts_under(id)))
        .await
}

/// The records under `prefix` that decode; one that does not is logged and passed over, so
/// that a damaged record costs its own upload, not every listing.
async fn decoded<T: serde::de::DeserializeOwned>(
    records: &dyn Records,
    prefix: &str,
) -> Result<Vec<T>, StoreError> {
    Ok(records
        .scan(prefix)
        .await?
        .into_iter()
        .filter_map(|(key, bytes)| match serde_json::from_slice(&bytes) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::error!(record = %key, error = %e, "passing over an unreadable upload record in etcd; remove it by hand");
                None
            }
        })
        .collect())
}

/// Every upload, without its parts.
pub(super) async fn all(records: &dyn Records) -> Result<Vec<Upload>, StoreError> {
    decoded(records, "upload:").await
}

/// The bytes of every part recorded, for the gauge (the expiry sweep's pass only: it reads
/// every part record).
pub(super) async fn bytes(records: &dyn Records) -> Result<u64, StoreError> {
    let parts: Vec<PartInfo> = decoded(records, "part:").await?;
    Ok(parts.iter().map(|p| p.size).sum())
}
