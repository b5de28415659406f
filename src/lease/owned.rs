//! `[leases] max_live_per_key` on a shared table (`[fence_store] kind = "etcd"`), for every
//! instance together: the row `leases-of:<principal>` lists the leases the principal holds,
//! by name, with each one's expiry, and is written in the same compare-and-swap as the lease
//! row whose holder it follows. A grant adds its name (refused with 429 `TooManyLeases` when
//! the principal already holds the most it may), a renewal moves its expiry, a release or a
//! revocation takes it out. An expired lease stops counting at its expiry with nothing written,
//! and is dropped from the row at the principal's next change: an instance that dies leaves
//! nothing counted past the TTLs of the leases it granted.
//!
//! Every grant, renewal and release of one principal writes its row, so across instances they
//! are ordered by etcd (one compare-and-swap wins, the others read again: `gate::again`), and
//! on one instance they queue on a local lock instead of failing each other's puts.

use crate::fence::{FenceRow, FenceStore};
use crate::gate::GateError;

/// The principal's row.
pub(super) fn row_key(owner: &str) -> String {
    format!("leases-of:{owner}")
}

/// The principal's row as read (with its revision, for the put that changes it), without the
/// leases that expired by `now`.
pub(super) async fn read(
    store: &dyn FenceStore,
    owner: &str,
    now: u64,
) -> Result<FenceRow, GateError> {
    let mut row = store.get(&row_key(owner)).await?.unwrap_or_default();
    row.owned_leases.retain(|_, expires| *expires > now);
    Ok(row)
}

/// Counts `name` on the principal's `row` until `expires_at_ms`. False, with the row as it
/// was, when it is a new lease and the principal holds `limit` already (a lease it holds, got
/// again or renewed, takes no more room).
pub(super) fn take(row: &mut FenceRow, name: &str, expires_at_ms: u64, limit: usize) -> bool {
    if !row.owned_leases.contains_key(name) && row.owned_leases.len() >= limit {
        return false;
    }
    row.owned_leases.insert(name.to_string(), expires_at_ms);
    true
}

/// Makes the principal's `row` follow the lease row `lease` of `name` as it will be written:
/// counted until its expiry while the principal holds it, out of the count once it does not.
pub(super) fn follow(row: &mut FenceRow, name: &str, owner: &str, lease: &FenceRow) {
    match &lease.held {
        Some(h) if h.owner == owner => {
            row.owned_leases.insert(name.to_string(), h.expires_at_ms);
        }
        _ => {
            row.owned_leases.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests_kit::{acquire, proof};
    use super::super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::config::BucketPolicy;
    use crate::fence::memory::MemoryFenceStore;
    use crate::gate::BucketEntry;
    use std::collections::BTreeMap;

    /// Two instances' lease services over one shared table, each bounding a principal at
    /// `limit` live leases.
    fn two(limit: usize) -> [Arc<Leases>; 2] {
        let store: Arc<dyn FenceStore> = Arc::new(MemoryFenceStore::new_shared());
        let one = || {
            let mut buckets = BTreeMap::new();
            buckets.insert(
                "b".to_string(),
                BucketEntry::new(BucketPolicy::default(), Arc::new(MemoryBackend::new())),
            );
            let gate = Arc::new(Gate::new(store.clone(), buckets));
            Arc::new(
                Leases::new(gate, store.clone(), Duration::from_millis(300))
                    .with_max_live_per_key(limit),
            )
        };
        [one(), one()]
    }

    fn too_many(r: &Result<Grant, LeaseError>) -> bool {
        matches!(r, Err(LeaseError::TooManyLeases { .. }))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_grants_through_two_instances_stop_at_the_bound() {
        let [a, b] = two(3);
        let grants: Vec<_> = (0..12)
            .map(|i| {
                let l = if i % 2 == 0 { a.clone() } else { b.clone() };
                tokio::spawn(async move { l.acquire(acquire(&format!("n{i}"), "h", 60_000)).await })
            })
            .collect();
        let mut granted = Vec::new();
        for g in grants {
            match g.await.unwrap() {
                Ok(grant) => granted.push(grant),
                refused => assert!(too_many(&refused), "{refused:?}"),
            }
        }
        assert_eq!(granted.len(), 3, "{granted:?}");
        // Got again or renewed through the other instance: no more room taken.
        let first = &granted[0];
        let again = b.acquire(acquire(&first.name, "h", 60_000)).await.unwrap();
        a.renew(&first.name, &proof("h", &again), Duration::from_secs(60))
            .await
            .unwrap();
        assert!(too_many(&a.acquire(acquire("more", "h", 60_000)).await));
        // Another principal has room of its own.
        let mut other = acquire("theirs", "h", 60_000);
        other.owner = "someone-else".into();
        b.acquire(other).await.unwrap();
        // A release through one instance frees a place for the other.
        b.release(&first.name, &proof("h", &again)).await.unwrap();
        a.acquire(acquire("after-release", "h", 60_000))
            .await
            .unwrap();
        assert!(too_many(&b.acquire(acquire("more", "h", 60_000)).await));
        // A revocation frees one too.
        a.revoke(&granted[1].name, "admin").await.unwrap();
        b.acquire(acquire("after-revoke", "h", 60_000))
            .await
            .unwrap();
        assert!(too_many(&a.acquire(acquire("more", "h", 60_000)).await));
    }

    #[tokio::test]
    async fn an_expired_lease_stops_counting_with_nothing_written() {
        let [a, b] = two(1);
        let short = a.acquire(acquire("short", "h", 150)).await.unwrap();
        assert!(too_many(&b.acquire(acquire("other", "h", 60_000)).await));
        // Renewed, it counts past its first expiry.
        a.renew("short", &proof("h", &short), Duration::from_millis(400))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(too_many(&b.acquire(acquire("other", "h", 60_000)).await));
        tokio::time::sleep(Duration::from_millis(300)).await;
        b.acquire(acquire("other", "h", 60_000)).await.unwrap();
        let row = a.store.get(&super::row_key("test")).await.unwrap().unwrap();
        assert_eq!(
            row.owned_leases.keys().collect::<Vec<_>>(),
            ["other"],
            "the expired lease was dropped from the count at the next grant"
        );
    }
}
