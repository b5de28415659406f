//! The registry of uploads in progress when the fence table is shared (etcd), so that any
//! instance serves any step of any upload. An upload is the record `upload:<id>`, written once
//! at its creation, and each part the record `part:<id>/<number>`, written only while the
//! upload's record exists. A completion or an abort removes the upload with its parts in one
//! step, so a part that loses that race is refused as on one instance (NoSuchUpload), and of
//! two instances removing one upload only one is told it did. The parts' bytes are in the store
//! (a cluster's buckets are s3 buckets), which every instance reaches by the upload's handle.
//!
//! The bounds on open uploads hold across instances: each key's and each bucket's open uploads
//! are counted in the records `open:key/<principal>` and `open:bucket/<bucket>`, changed in the
//! same swap as the upload record they count ([`Records::swap`], compared on the count as
//! read). An upload is created only if the counts it raises are below their bounds when its
//! record is written, and its removal (completion, abort, expiry) lowers them in the same step,
//! so a count is never off by an instance that died between the two; of instances that race,
//! one swap is made and the others read the counts again. Uploads recorded before counts were
//! kept (`counted` unset) are in no count and leave none when removed.

use super::uploads::Upload;
use crate::backend::PartInfo;
use crate::fence::records::{Expect, Swap};
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

/// One count of open uploads, as read.
#[derive(Debug, Clone)]
struct Count {
    record: String,
    /// The record's bytes, what the swap that changes it compares.
    read: Option<Vec<u8>>,
    n: u64,
}

impl Count {
    async fn read(records: &dyn Records, record: String) -> Result<Count, StoreError> {
        let read = records.get(&record).await?;
        let n = match &read {
            None => 0,
            Some(bytes) => std::str::from_utf8(bytes)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| {
                    StoreError::Corrupt(format!("the count {record} is not a number"))
                })?,
        };
        Ok(Count { record, read, n })
    }

    fn expect(&self) -> (String, Expect) {
        let expect = match &self.read {
            None => Expect::Absent,
            Some(bytes) => Expect::Bytes(bytes.clone()),
        };
        (self.record.clone(), expect)
    }

    /// The record set to `n` (removed at zero: a key with nothing open leaves nothing behind).
    fn set(&self, n: u64) -> (String, Option<Vec<u8>>) {
        (
            self.record.clone(),
            (n > 0).then(|| n.to_string().into_bytes()),
        )
    }
}

/// The open uploads of one key (in every bucket) and of one bucket, as read.
#[derive(Debug, Clone)]
pub(super) struct Counts {
    key: Count,
    bucket: Count,
}

impl Counts {
    /// The counts `upload` is in, read from the records (both reads at once).
    pub(super) async fn read(
        records: &dyn Records,
        bucket: &str,
        owner: &str,
    ) -> Result<Counts, StoreError> {
        let (key, bucket) = futures::try_join!(
            Count::read(records, format!("open:key/{owner}")),
            Count::read(records, format!("open:bucket/{bucket}")),
        )?;
        Ok(Counts { key, bucket })
    }

    /// `Err` names the bound that leaves no room for one more upload.
    pub(super) fn room(&self, (per_key, per_bucket): (usize, usize)) -> Result<(), &'static str> {
        if self.key.n >= per_key as u64 {
            return Err("per_key");
        }
        if self.bucket.n >= per_bucket as u64 {
            return Err("per_bucket");
        }
        Ok(())
    }
}

/// Records a new upload and raises the counts it is in, in one swap, if they are still as
/// `counts` read them and below the bounds. `Ok(Err(bound))`: no room. `Conflict`: another
/// instance changed a count since it was read (nothing written; read them again).
pub(super) async fn insert_counted(
    records: &dyn Records,
    upload: &Upload,
    counts: &Counts,
    bounds: (usize, usize),
) -> Result<Result<(), &'static str>, StoreError> {
    if let Err(bound) = counts.room(bounds) {
        return Ok(Err(bound));
    }
    let mut record = upload.clone();
    record.parts.clear();
    record.counted = true;
    let bytes = serde_json::to_vec(&record).expect("an upload serializes");
    let key = upload_key(&upload.id);
    let swap = Swap {
        expect: vec![
            (key.clone(), Expect::Absent),
            counts.key.expect(),
            counts.bucket.expect(),
        ],
        set: vec![
            (key.clone(), Some(bytes.clone())),
            counts.key.set(counts.key.n + 1),
            counts.bucket.set(counts.bucket.n + 1),
        ],
        remove_under: None,
    };
    if records.swap(swap).await? {
        return Ok(Ok(()));
    }
    // A swap whose answer was lost on one member and that was made again on another finds
    // its own record: it was made.
    if records.get(&key).await?.as_deref() == Some(&bytes[..]) {
        return Ok(Ok(()));
    }
    Err(StoreError::Conflict(key))
}

/// Removes a counted upload with its parts and lowers its counts, in one swap, if they are
/// still as `counts` read them. False if the upload was gone already; `Conflict` if a count
/// changed since it was read.
pub(super) async fn remove_counted(
    records: &dyn Records,
    id: &str,
    counts: &Counts,
) -> Result<bool, StoreError> {
    let key = upload_key(id);
    let swap = Swap {
        expect: vec![
            (key.clone(), Expect::Present),
            counts.key.expect(),
            counts.bucket.expect(),
        ],
        set: vec![
            (key.clone(), None),
            counts.key.set(counts.key.n.saturating_sub(1)),
            counts.bucket.set(counts.bucket.n.saturating_sub(1)),
        ],
        remove_under: Some(parts_under(id)),
    };
    if records.swap(swap).await? {
        return Ok(true);
    }
    match records.get(&key).await? {
        None => Ok(false),
        Some(_) => Err(StoreError::Conflict(key)),
    }
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
