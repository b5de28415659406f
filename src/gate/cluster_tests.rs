//! The cluster commit protocol (docs/design.md) against the in-memory doubles: two gates (two
//! instances) over one shared fence table, which compares revisions as etcd does, and one
//! store, whose commits are compare-and-swaps as S3's conditional writes are. The store
//! records the token of every commit in the order they land, so the contract's line 1 is
//! checked on that order. tests/cluster.rs runs the same protocol on real etcd and ministack.

use super::*;
use crate::backend::memory::MemoryBackend;
use crate::backend::{Backend, BackendError, BodyError, ByteStream, ListPage, ObjectInfo, Staged};
use crate::config::BucketPolicy;
use crate::fence::memory::MemoryFenceStore;
use crate::fence::{Durability, StoreError};
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// The memory store, atomic per commit like S3, able to hold commits before they reach it (an
/// instance paused between its intent and the store), or to ignore their conditions (the
/// negative control).
struct Store {
    inner: Arc<MemoryBackend>,
    hold: AtomicBool,
    held: AtomicU64,
    release: watch::Sender<bool>,
    ignore_conditions: AtomicBool,
}

impl Store {
    fn new() -> Arc<Store> {
        Arc::new(Store {
            inner: Arc::new(MemoryBackend::new()),
            hold: AtomicBool::new(false),
            held: AtomicU64::new(0),
            release: watch::channel(false).0,
            ignore_conditions: AtomicBool::new(false),
        })
    }

    /// Tokens of the commits, in the order they landed.
    fn landed(&self) -> Vec<Option<u64>> {
        self.inner.history()
    }
}

#[async_trait::async_trait]
impl Backend for Store {
    async fn stage(
        &self,
        b: &str,
        k: &str,
        m: ObjectMeta,
        body: ByteStream,
    ) -> Result<Staged, BackendError> {
        self.inner.stage(b, k, m, body).await
    }
    async fn commit(&self, s: &Staged, e: Option<&str>) -> Result<ObjectInfo, BackendError> {
        if self.hold.swap(false, Ordering::SeqCst) {
            self.held.fetch_add(1, Ordering::SeqCst);
            let _ = self.release.subscribe().wait_for(|r| *r).await;
        }
        if self.ignore_conditions.load(Ordering::SeqCst) {
            let now = self.inner.version(&s.bucket, &s.key).await?;
            return self.inner.commit(s, now.as_deref()).await;
        }
        self.inner.commit(s, e).await
    }
    async fn discard(&self, s: Staged) {
        self.inner.discard(s).await
    }
    async fn version(&self, b: &str, k: &str) -> Result<Option<String>, BackendError> {
        self.inner.version(b, k).await
    }
    async fn head(&self, b: &str, k: &str) -> Result<Option<ObjectInfo>, BackendError> {
        self.inner.head(b, k).await
    }
    async fn get(
        &self,
        b: &str,
        k: &str,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        self.inner.get(b, k).await
    }
    async fn delete(&self, b: &str, k: &str, e: &str) -> Result<(), BackendError> {
        self.inner.delete(b, k, e).await
    }
    async fn list(
        &self,
        b: &str,
        p: &str,
        s: Option<&str>,
        m: usize,
    ) -> Result<ListPage, BackendError> {
        self.inner.list(b, p, s, m).await
    }
}

/// The shared table, yielding to the scheduler around every call so that two gates'
/// decisions interleave as two processes' would, and counting the conflicts it reports.
struct Interleaved {
    inner: MemoryFenceStore,
    conflicts: AtomicU64,
}

#[async_trait::async_trait]
impl FenceStore for Interleaved {
    async fn get(&self, key: &str) -> Result<Option<FenceRow>, StoreError> {
        tokio::task::yield_now().await;
        self.inner.get(key).await
    }
    fn scan_prefix(
        &self,
        prefix: &str,
        visit: &mut dyn FnMut(&str, &FenceRow) -> bool,
    ) -> Result<(), StoreError> {
        self.inner.scan_prefix(prefix, visit)
    }
    async fn put(&self, rows: Vec<(String, FenceRow)>, d: Durability) -> Result<i64, StoreError> {
        tokio::task::yield_now().await;
        let result = self.inner.put(rows, d).await;
        if matches!(result, Err(StoreError::Conflict(_))) {
            self.conflicts.fetch_add(1, Ordering::SeqCst);
        }
        tokio::task::yield_now().await;
        result
    }
    fn shared(&self) -> bool {
        true
    }
}

/// Two gates over one shared table and one store.
fn cluster() -> ([Arc<Gate>; 2], Arc<Store>, Arc<Interleaved>) {
    let table = Arc::new(Interleaved {
        inner: MemoryFenceStore::new_shared(),
        conflicts: AtomicU64::new(0),
    });
    let store = Store::new();
    let gate = || {
        let mut buckets = BTreeMap::new();
        buckets.insert(
            "b".to_string(),
            BucketEntry::new(BucketPolicy::default(), store.clone()),
        );
        Arc::new(Gate::new(table.clone(), buckets))
    };
    ([gate(), gate()], store, table)
}

fn req(key: &str, token: u64) -> WriteRequest {
    WriteRequest {
        bucket: "b".into(),
        key: key.into(),
        token: Ok(Some(Token(token))),
        scope_header: None,
        scope_takeover: None,
        conditions: Conditions::default(),
        meta: ObjectMeta::default(),
    }
}

fn body(bytes: Vec<u8>) -> ByteStream {
    Box::pin(futures::stream::once(async move {
        Ok::<_, BodyError>(Bytes::from(bytes))
    }))
}

/// Line 1's check on the store's order: no commit lands after a higher token's.
fn in_token_order(landed: &[Option<u64>]) -> Result<(), String> {
    let mut highest = 0;
    for t in landed.iter().flatten() {
        if *t < highest {
            return Err(format!("token {t} landed after {highest}: {landed:?}"));
        }
        highest = *t;
    }
    Ok(())
}

#[tokio::test]
async fn a_token_recorded_through_one_gate_fences_the_other() {
    let ([a, b], store, _) = cluster();
    a.put(req("k", 5), body(b"five".to_vec())).await.unwrap();
    let e = b
        .put(req("k", 4), body(b"four".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    b.put(req("k", 6), body(b"six".to_vec())).await.unwrap();
    let e = a
        .put(req("k", 5), body(b"again".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    // A delete of an absent key through one gate fences the other.
    b.delete(req("gone", 9)).await.unwrap();
    let e = a
        .put(req("gone", 8), body(b"zombie".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    assert_eq!(store.landed(), vec![Some(5), Some(6)]);
}

/// Writers with tokens 1..=60 race on one key through both gates; the shared table's
/// compare-and-swap makes the losers decide again. The store's order stays in token order,
/// the object ends at the highest acknowledged token, and the race really happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_gates_land_in_token_order() {
    let ([a, b], store, table) = cluster();
    let mut tasks = Vec::new();
    for t in 1..=60u64 {
        let gate = if t % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            (
                t,
                gate.put(req("k", t), body(format!("{t}").into_bytes()))
                    .await,
            )
        }));
    }
    let mut acked = Vec::new();
    for task in tasks {
        let (t, result) = task.await.unwrap();
        match result {
            Ok(_) => acked.push(t),
            Err(e) => assert!(
                e.code() == "StaleFencingToken" || e.code() == "FenceStoreUnavailable",
                "token {t}: {e}"
            ),
        }
    }
    in_token_order(&store.landed()).unwrap();
    let max = *acked.iter().max().unwrap();
    let (info, _) = a.get("b", "k").await.unwrap();
    assert!(info.meta.token.unwrap() >= max);
    assert!(
        table.conflicts.load(Ordering::SeqCst) > 0,
        "the gates never met on a row: the race did not happen"
    );
}

/// An instance paused between its intent and the store: its commit reaches the store after a
/// newer token's commit through the other gate, and the store's condition refuses it; the
/// gate then finds the newer token and answers stale. With a store that ignores conditions
/// (the negative control), the same run lands token 2 after token 3, and the check sees it.
async fn paused(ignore_conditions: bool) -> (Vec<Option<u64>>, Result<Written, GateError>) {
    let ([a, b], store, _) = cluster();
    a.put(req("k", 1), body(b"first".to_vec())).await.unwrap();
    store
        .ignore_conditions
        .store(ignore_conditions, Ordering::SeqCst);
    store.hold.store(true, Ordering::SeqCst);
    let zombie = {
        let a = a.clone();
        tokio::spawn(async move { a.put(req("k", 2), body(b"zombie".to_vec())).await })
    };
    while store.held.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    b.put(req("k", 3), body(b"newer".to_vec())).await.unwrap();
    let _ = store.release.send(true);
    let answer = zombie.await.unwrap();
    (store.landed(), answer)
}

#[tokio::test]
async fn a_paused_commit_is_refused_by_the_store_after_a_newer_one() {
    let (landed, answer) = paused(false).await;
    in_token_order(&landed).unwrap();
    assert_eq!(landed, vec![Some(1), Some(3)]);
    assert_eq!(answer.unwrap_err().code(), "StaleFencingToken");
}

#[tokio::test]
async fn negative_control_a_store_ignoring_conditions_is_caught() {
    let (landed, _) = paused(true).await;
    assert!(in_token_order(&landed).is_err(), "{landed:?}");
}

/// A bound lease grant through one gate and a write through the other: the grant's token is
/// strictly above everything the scope recorded, whichever decides first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn advances_through_one_gate_order_against_writes_through_the_other() {
    let ([a, b], store, _) = cluster();
    let mut tasks = Vec::new();
    for t in 1..=20u64 {
        let (a, b) = (a.clone(), b.clone());
        tasks.push(tokio::spawn(async move {
            let _ = b.put(req("k", t), body(format!("{t}").into_bytes())).await;
            a.advance_past("b", "k", 1, None).await.map(|(t, _)| t.0)
        }));
    }
    let mut granted = Vec::new();
    for task in tasks {
        if let Ok(t) = task.await.unwrap() {
            granted.push(t);
        }
    }
    granted.sort_unstable();
    let before = granted.len();
    granted.dedup();
    assert_eq!(granted.len(), before, "two grants got the same token");
    in_token_order(&store.landed()).unwrap();
}
