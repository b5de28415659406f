//! The claim check each s3 store place passes before it is served: the place's claim object
//! (`backend::s3::claim`) must name this instance's fence table, or be written now naming it.
//! Two fence tables on one place (two instances with data dirs of their own, or two
//! spellings of one store) would each decide conditions and tokens alone, so racing
//! conditional creates both win and a zombie's stale token writes through the table that never
//! saw the newer one. Two buckets of one table on one place (a bucket renamed, two DNS names of
//! one store) keep their rows apart just the same, so the claim names the bucket too. The
//! instances of a cluster share one table, hence one id, and the bucket names, and pass.

use crate::backend::s3::claim::Claim;
use crate::backend::s3::S3Backend;
use std::time::Duration;

/// How long a store that ignores `If-None-Match` is given before the claim written is read
/// back: an instance claiming at the same moment has written by then, and the later write is
/// the one both read back, so one of them refuses.
const SETTLE: Duration = Duration::from_secs(1);

/// Checks (or makes) the claim of `backend`'s place for bucket `bucket` of the table
/// `table_id`. `place` names
/// the place for messages; `honours_conditions`: the store honours `If-None-Match: *`;
/// `take_over`: another table's claim is replaced rather than refused (`fences rebuild`, which
/// makes this table the place's fences from the objects themselves, its writers stopped).
pub async fn claim_place(
    backend: &S3Backend,
    (table_id, bucket): (&str, &str),
    place: &str,
    honours_conditions: bool,
    take_over: bool,
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
            Some(claim) => return Err(refusal(backend, place, &claim, table_id)),
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

fn refusal(backend: &S3Backend, place: &str, claim: &Claim, table_id: &str) -> String {
    if claim.table_id == table_id {
        return format!(
            "{place} is already fenced by bucket {:?} of this fence table (claimed by host {} at {}): two buckets on one place keep two fences for each object, and the tokens recorded under {:?} do not fence writes through this one; if {:?} was renamed, rebuild this bucket's fences from the objects (`fencegate fences rebuild --bucket`, writers stopped), which takes the claim over; if two store endpoints name one store, use one; if {:?} is gone for good, delete {} from store bucket {} and start again",
            claim.bucket,
            claim.host,
            claim.at,
            claim.bucket,
            claim.bucket,
            claim.bucket,
            backend.claim_key(),
            backend.store_bucket()
        );
    }
    format!(
        "{place} is already fenced by another fence table (id {}, claimed by host {} at {}): two fence tables on one place decide apart and lose commits; run the instances as a cluster on one etcd table, or give this one another place (backend_bucket or backend_prefix); if that table is gone for good, delete {} from store bucket {} and start again",
        claim.table_id,
        claim.host,
        claim.at,
        backend.claim_key(),
        backend.store_bucket()
    )
}
