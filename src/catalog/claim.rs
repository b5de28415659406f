//! The claim check each store place (s3, azure) passes before it is served: the place's claim object
//! (`backend::claim`) must name this instance's fence table, or be written now naming it.
//! Two fence tables on one place (two instances with data dirs of their own, or two
//! spellings of one store) would each decide conditions and tokens alone, so racing
//! conditional creates both win and a zombie's stale token writes through the table that never
//! saw the newer one. Two buckets of one table on one place (a bucket renamed, two DNS names of
//! one store) keep their rows apart just the same, so the claim names the bucket too. The
//! instances of a cluster share one table, hence one id, and the bucket names, and pass.

use crate::backend::claim::{Claim, ClaimStore};
use std::time::Duration;

/// How long a store that ignores `If-None-Match` is given before the claim written is read
/// back: an instance claiming at the same moment has written by then, and the later write is
/// the one both read back, so one of them refuses.
const SETTLE: Duration = Duration::from_secs(1);

/// Checks (or makes) the claim of `backend`'s place for bucket `bucket` of the table
/// `table_id`. `place` names
/// the place for messages; `honours_conditions`: the store honours `If-None-Match: *`;
/// `take_over`: another table's claim is replaced rather than refused (`fences rebuild`, which
/// makes this table the place's fences from the objects themselves, its writers stopped);
/// `shared`: the table is on etcd, where there is no rebuild.
pub async fn claim_place(
    backend: &dyn ClaimStore,
    (table_id, bucket): (&str, &str),
    place: &str,
    honours_conditions: bool,
    take_over: bool,
    shared: bool,
) -> Result<(), String> {
    let mut wrote = false;
    let mut replace = false;
    for _ in 0..3 {
        match backend.read_claim().await.map_err(|e| {
            format!("{e}; fencegate checks that no other fence table fences {place} before serving it, so it cannot start until the store answers")
        })? {
            Some(claim) if ours(&claim, table_id, bucket) => {
                if wrote {
                    tracing::info!(%place, key = %backend.claim_key(), table_id, "claimed the store place for this fence table");
                }
                return Ok(());
            }
            Some(claim) if take_over && !replace => {
                tracing::warn!(%place, key = %backend.claim_key(), previous = %claim.table_id, previous_bucket = %claim.bucket, host = %claim.host, at = %claim.at, table_id, "the rebuilt fence table takes over the store place's claim from the table named; if an instance on that table still runs, stop it: two tables on one place decide apart");
                replace = true;
            }
            Some(claim) => {
                return Err(refusal(
                    backend,
                    place,
                    &claim,
                    (table_id, bucket),
                    shared,
                ))
            }
            None => {}
        }
        wrote = backend
            .write_claim(&Claim::new(table_id, bucket), replace)
            .await?;
        if wrote && !honours_conditions {
            tokio::time::sleep(SETTLE).await;
        }
    }
    Err(format!(
        "the claim {} of {place} keeps vanishing (something deletes it as fencegate writes it); stop whatever removes objects under .fencegate-probe/ and start again",
        backend.claim_key()
    ))
}

/// A claim made by this table for this bucket (a claim naming no bucket names any).
fn ours(claim: &Claim, table_id: &str, bucket: &str) -> bool {
    claim.table_id == table_id && (claim.bucket.is_empty() || claim.bucket == bucket)
}

/// Why the place is refused to `bucket`, and what to do. The way back for a place whose
/// fences are gone is the rebuild on a RocksDB table: deleting the claim instead leaves the
/// place to a table that knows no token, and accepts a stale one.
fn refusal(
    backend: &dyn ClaimStore,
    place: &str,
    claim: &Claim,
    (table_id, bucket): (&str, &str),
    shared: bool,
) -> String {
    let held = format!(
        "its claim {} in store bucket {} was made by host {} at {}",
        backend.claim_key(),
        backend.store_bucket(),
        claim.host,
        claim.at
    );
    let recover = if shared {
        format!(
            "`fences rebuild` works on a RocksDB table only, so once nothing serves the place through the other fences, delete {} from store bucket {}, start again, and set on_bypass = \"adopt\" on {bucket:?} until its old objects have been rewritten (docs/operations.md, moving a bucket behind a cluster)",
            backend.claim_key(),
            backend.store_bucket()
        )
    } else {
        format!(
            "rebuild this bucket's fences from the objects with `fencegate fences rebuild --bucket {bucket}` (writers stopped), which takes the claim over"
        )
    };
    if claim.table_id == table_id {
        return format!(
            "{place} is already fenced by bucket {:?} of this fence table ({held}): two buckets on one place keep two fences for each object, and the tokens recorded under {:?} do not fence writes through {bucket:?}; if two store endpoints name one store, use one; if {:?} was renamed to {bucket:?}, {recover}",
            claim.bucket, claim.bucket, claim.bucket
        );
    }
    format!(
        "{place} is already fenced by another fence table (id {}; {held}): two fence tables on one place decide apart and lose commits; if that table's instances still run, join them on one etcd table (docs/cluster.md) or give {bucket:?} another place (backend_bucket or backend_prefix); if that table is gone for good, {recover}",
        claim.table_id
    )
}

#[cfg(any(feature = "azure", feature = "gcs"))]
impl super::Backends {
    /// The claim check of an azure or gcs bucket's place (those stores honour
    /// `If-None-Match: *` or its like, which their start-up probes prove), skipped while
    /// `fences rebuild` rebuilds another bucket.
    pub(super) async fn claim_store_place(
        &self,
        config: &crate::config::Config,
        bucket: &str,
        policy: &crate::config::BucketPolicy,
        backend: &dyn ClaimStore,
    ) -> Result<(), String> {
        let Some(table_id) = self.table_id.as_deref() else {
            return Err(
                "the fence table is not open, so the store place cannot be claimed; this is a bug in fencegate".into(),
            );
        };
        let place = format!(
            "store place {} (bucket {bucket}, backend {})",
            config.namespace(bucket, policy),
            policy.backend
        );
        let take_over = self
            .take_over_claim
            .as_deref()
            .map(|rebuilt| rebuilt == bucket);
        if take_over == Some(false) {
            return Ok(());
        }
        claim_place(
            backend,
            (table_id, bucket),
            &place,
            true,
            take_over == Some(true),
            config.etcd.is_some(),
        )
        .await
    }
}
