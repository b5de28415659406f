//! Tombstones folded into their bucket's floor (`tombstones.rs`): the rows go, their tokens
//! stay enforced, on a local table and across instances sharing one, through power loss, and
//! only rows that keep nothing else go.

use super::test_kit::{body, req};
use super::*;
use crate::backend::memory::MemoryBackend;
use crate::config::BucketPolicy;
use crate::fence::memory::MemoryFenceStore;
use crate::fence::{Durability, FenceRow, StoreError};
use std::time::Duration;

fn gate(store: Arc<MemoryFenceStore>, backend: Arc<MemoryBackend>, max: u64) -> Arc<Gate> {
    let mut buckets = BTreeMap::new();
    buckets.insert(
        "b".to_string(),
        BucketEntry::new(BucketPolicy::default(), backend),
    );
    Arc::new(Gate::new(store, buckets).with_tombstone_bound(max))
}

fn stale(e: GateError) -> bool {
    e.code() == "StaleFencingToken"
}

#[tokio::test]
async fn folded_tombstones_go_and_their_tokens_stay_enforced() {
    let store = Arc::new(MemoryFenceStore::new());
    let g = gate(store.clone(), Arc::new(MemoryBackend::new()), 0);
    // A key with its own row and a low token of its own lock.
    g.put(req("live", Some(2)), body(b"l")).await.unwrap();
    for (key, token) in [("k1", 10), ("k2", 30), ("k3", 15), ("k4", 5)] {
        g.delete(req(key, Some(token))).await.unwrap();
    }
    // A deleted object's tombstone folds too; one whose answer is still kept does not.
    g.put(req("was", Some(12)), body(b"w")).await.unwrap();
    g.delete(req("was", Some(12))).await.unwrap();
    let mut keyed = req("keyed", Some(40));
    keyed.idempotency = Some(Idempotency::from_header("p", b"retry-me").unwrap());
    g.delete(keyed).await.unwrap();

    assert_eq!(g.fold_tombstones("b").await.unwrap(), 5);
    for key in ["k1", "k2", "k3", "k4", "was"] {
        assert_eq!(store.get(&format!("object:b/{key}")).await.unwrap(), None);
    }
    assert!(store.get("object:b/keyed").await.unwrap().is_some());
    assert_eq!(
        store.get("floor:b").await.unwrap().unwrap().highest,
        Some(30)
    );
    // No write below a folded token lands, on the folded keys or any key without a row.
    for key in ["k1", "k2", "k4", "was", "never"] {
        assert!(stale(
            g.put(req(key, Some(29)), body(b"z")).await.unwrap_err()
        ));
    }
    assert!(stale(g.delete(req("k2", Some(29))).await.unwrap_err()));
    assert_eq!(
        g.fence_info("b", "k4", None).await.unwrap().highest,
        Some(30)
    );
    // A key with a row of its own keeps judging by it.
    g.put(req("live", Some(3)), body(b"l")).await.unwrap();
    // At the floor, writes go through, and the key has a row again.
    g.put(req("k1", Some(30)), body(b"n")).await.unwrap();
    g.put(req("never", Some(31)), body(b"n")).await.unwrap();
    assert!(stale(
        g.put(req("k1", Some(29)), body(b"z")).await.unwrap_err()
    ));
    // A second fold finds nothing new to fold, and the floor stays.
    assert_eq!(g.fold_tombstones("b").await.unwrap(), 0);
    assert_eq!(
        store.get("floor:b").await.unwrap().unwrap().highest,
        Some(30)
    );
}

#[tokio::test]
async fn a_fold_lost_to_power_loss_loses_its_rows_and_floor_together() {
    let store = Arc::new(MemoryFenceStore::new());
    let g = gate(store.clone(), Arc::new(MemoryBackend::new()), 0);
    g.delete(req("k", Some(9))).await.unwrap();
    assert_eq!(g.fold_tombstones("b").await.unwrap(), 1);
    store.lose_unsynced();
    // The fold was not synced: the tombstone is back, and still refuses the stale write.
    let g = gate(store.clone(), Arc::new(MemoryBackend::new()), 0);
    assert!(store.get("object:b/k").await.unwrap().unwrap().tombstone);
    assert!(stale(
        g.put(req("k", Some(8)), body(b"z")).await.unwrap_err()
    ));
}

#[tokio::test]
async fn past_the_bound_deletes_fold_the_bucket_in_the_background() {
    let store = Arc::new(MemoryFenceStore::new());
    let g = gate(store.clone(), Arc::new(MemoryBackend::new()), 4);
    for i in 0..4u64 {
        g.delete(req(&format!("k{i}"), Some(100 + i)))
            .await
            .unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while store.get("floor:b").await.unwrap().is_none() {
        assert!(tokio::time::Instant::now() < deadline, "no fold began");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut rows = 0;
    store
        .scan_prefix("object:b/", &mut |_, _| {
            rows += 1;
            true
        })
        .unwrap();
    assert_eq!(rows, 0);
    assert!(stale(
        g.put(req("k0", Some(102)), body(b"z")).await.unwrap_err()
    ));
}

#[tokio::test]
async fn an_instance_cannot_create_a_row_judged_against_a_floor_raised_since() {
    // Two instances over one shared table. A reads k absent (the floor empty) and judges a
    // token 5 against that; meanwhile B deletes k with 7 and folds it, so k is absent again.
    let store = Arc::new(MemoryFenceStore::new_shared());
    let backend = Arc::new(MemoryBackend::new());
    let a = gate(store.clone(), backend.clone(), 0);
    let b = gate(store.clone(), backend.clone(), 0);
    let read = a.row("object:b/k").await.unwrap();
    assert_eq!(read.floor_guard, Some(("floor:b".to_string(), 0)));
    b.delete(req("k", Some(7))).await.unwrap();
    assert_eq!(b.fold_tombstones("b").await.unwrap(), 1);
    assert_eq!(store.get("object:b/k").await.unwrap(), None);
    // A's put of what it decided is refused: the floor it was judged against has moved.
    let decided = FenceRow {
        highest: Some(5),
        ..read.clone()
    };
    let e = store
        .put(
            vec![("object:b/k".into(), decided.clone())],
            Durability::Synced,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e}");
    // Decided again, A reads the floor and refuses the token.
    assert!(stale(
        a.put(req("k", Some(5)), body(b"z")).await.unwrap_err()
    ));
    // The negative control: without the guard the same put lands, below the folded token.
    let unguarded = FenceRow {
        floor_guard: None,
        ..decided
    };
    store
        .put(vec![("object:b/k".into(), unguarded)], Durability::Synced)
        .await
        .unwrap();
    assert_eq!(
        store.get("object:b/k").await.unwrap().unwrap().highest,
        Some(5)
    );
}

#[tokio::test]
async fn a_key_written_again_after_its_delete_is_not_folded() {
    let store = Arc::new(MemoryFenceStore::new_shared());
    let backend = Arc::new(MemoryBackend::new());
    let a = gate(store.clone(), backend.clone(), 0);
    a.delete(req("k", Some(3))).await.unwrap();
    // Written again since: it holds a version, and its row stays.
    a.put(req("k", Some(4)), body(b"v")).await.unwrap();
    assert_eq!(a.fold_tombstones("b").await.unwrap(), 0);
    let row = store.get("object:b/k").await.unwrap().unwrap();
    assert_eq!((row.highest, row.tombstone), (Some(4), false));
    assert_eq!(store.get("floor:b").await.unwrap(), None);
}

// A fold that raises the floor while another write reads it for the first time: a cache of the
// floor, filled from a read made before the fold, would forget the folded tokens and let a
// stale write land on a folded key. The floor is read every time.
#[tokio::test]
async fn a_first_floor_read_racing_a_fold_does_not_forget_the_raised_floor() {
    use crate::fence::scripted::{Script, Scripted};
    use crate::fence::FenceStore;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::sync::Notify;

    #[derive(Default)]
    struct PauseState {
        armed: AtomicBool,
        reached: Notify,
        go: Notify,
    }
    struct Pause(Arc<PauseState>);
    #[async_trait::async_trait]
    impl Script for Pause {
        async fn get(
            &self,
            inner: &Arc<dyn FenceStore>,
            key: &str,
        ) -> Result<Option<FenceRow>, StoreError> {
            let found = inner.get(key).await;
            // The first floor read after arming: read, then held before its caller caches it.
            if key == "floor:b" && self.0.armed.swap(false, Ordering::SeqCst) {
                self.0.reached.notify_one();
                self.0.go.notified().await;
            }
            found
        }
    }

    let store = Arc::new(MemoryFenceStore::new());
    let backend = Arc::new(MemoryBackend::new());
    // Before a restart: k deleted with token 30 (a tombstone not folded yet).
    let before = gate(store.clone(), backend.clone(), 0);
    before.delete(req("k", Some(30))).await.unwrap();
    drop(before);

    // The restarted instance: nothing cached yet.
    let state = Arc::new(PauseState::default());
    let scripted: Arc<dyn FenceStore> =
        Arc::new(Scripted::new(store.clone(), Pause(state.clone())));
    let mut buckets = BTreeMap::new();
    buckets.insert(
        "b".to_string(),
        BucketEntry::new(BucketPolicy::default(), backend.clone()),
    );
    let g = Arc::new(Gate::new(scripted, buckets).with_tombstone_bound(0));

    // A first write of another key reads the (empty) floor, and is held before caching it.
    state.armed.store(true, Ordering::SeqCst);
    let writer = {
        let g = g.clone();
        tokio::spawn(async move { g.put(req("other", Some(1)), body(b"o")).await })
    };
    state.reached.notified().await;
    // Meanwhile the fold (the start-up count's) folds k into the floor: 30.
    assert_eq!(g.fold_tombstones("b").await.unwrap(), 1);
    assert_eq!(
        store.get("floor:b").await.unwrap().unwrap().highest,
        Some(30)
    );
    state.go.notify_one();
    // "other" never had a row: judged against the floor before the fold it may land, against
    // the floor read again under its lock it is refused; either way the fold is not undone.
    let other = writer.await.unwrap();
    assert!(
        other
            .as_ref()
            .map_or_else(|e| e.code() == "StaleFencingToken", |_| true),
        "{other:?}"
    );

    // k's tombstone said 30: a zombie holding 29 must still be refused.
    let zombie = g.put(req("k", Some(29)), body(b"stale")).await;
    assert!(
        matches!(&zombie, Err(e) if e.code() == "StaleFencingToken"),
        "a write with token 29 landed on a key whose folded tombstone kept 30: {zombie:?}"
    );
}

#[tokio::test]
async fn under_strictly_increasing_tokens_a_key_without_a_row_needs_a_token_above_the_floor() {
    use crate::config::TokenOrder;
    let store = Arc::new(MemoryFenceStore::new());
    let mut buckets = BTreeMap::new();
    let policy = BucketPolicy {
        tokens: TokenOrder::StrictlyIncreasing,
        ..BucketPolicy::default()
    };
    buckets.insert(
        "b".to_string(),
        BucketEntry::new(policy, Arc::new(MemoryBackend::new())),
    );
    let g = Arc::new(Gate::new(store.clone(), buckets).with_tombstone_bound(0));
    // Before any fold: the holder of token 30 deletes k1, and creates k2 with the same token.
    g.delete(req("k1", Some(30))).await.unwrap();
    g.put(req("k2", Some(30)), body(b"v")).await.unwrap();
    // After k1's tombstone was folded, the floor stands for it: 30 is spent on k1 (a delayed
    // duplicate of the holder's earlier write to k1 must not undo its delete), and the floor
    // cannot tell k1 from a key never written, so a key without a row needs a token above it.
    // The refusal says so, and names the floor (docs/design.md, "Tombstones and the floor").
    assert_eq!(g.fold_tombstones("b").await.unwrap(), 1);
    for key in ["k1", "k4"] {
        let e = g.put(req(key, Some(30)), body(b"v")).await.unwrap_err();
        assert_eq!(e.code(), "StaleFencingToken");
        assert!(e.to_string().contains("bucket's floor"), "{e}");
    }
    g.put(req("k4", Some(31)), body(b"v")).await.unwrap();
}
