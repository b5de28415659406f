//! The cluster commit protocol (docs/design.md) against the in-memory doubles: two gates (two
//! instances) over one shared fence table, which compares revisions as etcd does, and one
//! store, whose commits are compare-and-swaps as S3's conditional writes are. The store
//! records the token of every commit in the order they land, so the contract's line 1 is
//! checked on that order. tests/it/cluster/protocol.rs runs the same protocol on real etcd and ministack.

use super::test_kit::{body, req};
use super::*;
use crate::backend::memory::MemoryBackend;
use crate::backend::scripted::{Script, Scripted};
use crate::backend::{Backend, BackendError, ObjectInfo, Staged};
use crate::config::BucketPolicy;
use crate::fence::memory::MemoryFenceStore;
use crate::fence::{Durability, FenceRow, StoreError};
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
    /// The negative control of bounded intents: requests land whenever they arrive.
    ignore_deadlines: AtomicBool,
    /// How long an admitted request takes to take effect (ms), as a large completion does.
    apply_ms: AtomicU64,
    /// How far the gates' clock runs ahead of this store's (ms), for the clock watch.
    clock_ahead_ms: std::sync::atomic::AtomicI64,
}

impl Store {
    fn new() -> Arc<Scripted<Store>> {
        let inner = Arc::new(MemoryBackend::new());
        Arc::new(Scripted::new(
            inner.clone(),
            Store {
                inner,
                hold: AtomicBool::new(false),
                held: AtomicU64::new(0),
                release: watch::channel(false).0,
                ignore_conditions: AtomicBool::new(false),
                ignore_deadlines: AtomicBool::new(false),
                apply_ms: AtomicU64::new(0),
                clock_ahead_ms: std::sync::atomic::AtomicI64::new(0),
            },
        ))
    }

    /// Tokens of the commits, in the order they landed.
    fn landed(&self) -> Vec<Option<u64>> {
        self.inner.history()
    }

    /// Held requests wait here; then the store refuses them after their deadline, as a
    /// presigned request's expiry makes S3 do.
    async fn arrive(&self, not_after: std::time::SystemTime) -> Result<(), BackendError> {
        if self.hold.swap(false, Ordering::SeqCst) {
            self.held.fetch_add(1, Ordering::SeqCst);
            let _ = self.release.subscribe().wait_for(|r| *r).await;
        }
        if std::time::SystemTime::now() > not_after && !self.ignore_deadlines.load(Ordering::SeqCst)
        {
            return Err(BackendError::Expired("test store".into()));
        }
        let apply = self.apply_ms.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(apply)).await;
        Ok(())
    }
}

#[async_trait::async_trait]
impl Script for Store {
    async fn commit(
        &self,
        _inner: &Arc<dyn Backend>,
        _: &Staged,
        _: Option<&str>,
    ) -> Result<ObjectInfo, BackendError> {
        unreachable!("a gate on a shared table commits with a deadline")
    }
    async fn commit_by(
        &self,
        _inner: &Arc<dyn Backend>,
        s: &Staged,
        e: Option<&str>,
        not_after: std::time::SystemTime,
    ) -> Result<ObjectInfo, BackendError> {
        self.arrive(not_after).await?;
        if self.ignore_conditions.load(Ordering::SeqCst) {
            let now = self.inner.version(&s.bucket, &s.key).await?;
            return self.inner.commit(s, now.as_deref()).await;
        }
        self.inner.commit(s, e).await
    }
    async fn clock_offset(&self, _inner: &Arc<dyn Backend>) -> Option<Result<(i64, i64), String>> {
        let ahead = self.clock_ahead_ms.load(Ordering::SeqCst);
        Some(Ok((ahead - 999, ahead)))
    }
    async fn delete(
        &self,
        _inner: &Arc<dyn Backend>,
        _: &str,
        _: &str,
        _: &str,
    ) -> Result<(), BackendError> {
        unreachable!("a gate on a shared table deletes with a deadline")
    }
    async fn delete_by(
        &self,
        _inner: &Arc<dyn Backend>,
        b: &str,
        k: &str,
        e: &str,
        not_after: std::time::SystemTime,
    ) -> Result<(), BackendError> {
        self.arrive(not_after).await?;
        self.inner.delete(b, k, e).await
    }
}

/// The shared table, yielding to the scheduler around every call so that two gates'
/// decisions interleave as two processes' would, counting the conflicts it reports and the
/// reads that found another commit in progress (an intent with a deadline).
struct Interleaved {
    conflicts: AtomicU64,
    busy: AtomicU64,
}

#[async_trait::async_trait]
impl crate::fence::scripted::Script for Interleaved {
    async fn get(
        &self,
        inner: &Arc<dyn FenceStore>,
        key: &str,
    ) -> Result<Option<FenceRow>, StoreError> {
        tokio::task::yield_now().await;
        let row = inner.get(key).await?;
        if row
            .as_ref()
            .is_some_and(|r| r.unresolved_until_ms.is_some())
        {
            self.busy.fetch_add(1, Ordering::SeqCst);
        }
        Ok(row)
    }
    async fn put(
        &self,
        inner: &Arc<dyn FenceStore>,
        rows: Vec<(String, FenceRow)>,
        d: Durability,
    ) -> Result<i64, StoreError> {
        tokio::task::yield_now().await;
        let result = inner.put(rows, d).await;
        if matches!(result, Err(StoreError::Conflict(_))) {
            self.conflicts.fetch_add(1, Ordering::SeqCst);
        }
        tokio::task::yield_now().await;
        result
    }
}

type Table = crate::fence::scripted::Scripted<Interleaved>;

/// The intents' deadline: short, so that the tests wait it out.
const TTL: Duration = Duration::from_millis(100);

/// Two gates over one shared table and one store.
fn cluster() -> ([Arc<Gate>; 2], Arc<Scripted<Store>>, Arc<Table>) {
    cluster_with(Duration::from_millis(20))
}

/// [`cluster`], with `apply` as the gates' margin for the store's apply time.
fn cluster_with(apply: Duration) -> ([Arc<Gate>; 2], Arc<Scripted<Store>>, Arc<Table>) {
    let table = Arc::new(Table::new(
        Arc::new(MemoryFenceStore::new_shared()),
        Interleaved {
            conflicts: AtomicU64::new(0),
            busy: AtomicU64::new(0),
        },
    ));
    let store = Store::new();
    let gate = || {
        let mut buckets = BTreeMap::new();
        buckets.insert(
            "b".to_string(),
            BucketEntry::new(BucketPolicy::default(), store.clone()),
        );
        Arc::new(
            Gate::new(table.clone(), buckets).with_intent_bound(IntentBound {
                ttl: TTL,
                apply,
                skew: Duration::ZERO,
            }),
        )
    };
    ([gate(), gate()], store, table)
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
    a.put(req("k", 5), body(b"five")).await.unwrap();
    let e = b.put(req("k", 4), body(b"four")).await.unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    b.put(req("k", 6), body(b"six")).await.unwrap();
    let e = a.put(req("k", 5), body(b"again")).await.unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    // A delete of an absent key through one gate fences the other.
    b.delete(req("gone", 9)).await.unwrap();
    let e = a.put(req("gone", 8), body(b"zombie")).await.unwrap_err();
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
        table.conflicts.load(Ordering::SeqCst) + table.busy.load(Ordering::SeqCst) > 0,
        "the gates never met on a row: the race did not happen"
    );
}

/// Takes `decide` again while it meets another commit in progress (503 CommitInProgress, which
/// a client retries), so that a test can wait for a held intent's deadline, or a row changed
/// under it (a conflict, which `advance_past`'s callers take again).
async fn retried<T, F, Fut>(mut decide: F) -> Result<T, GateError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, GateError>>,
{
    loop {
        match decide().await {
            Err(e) if matches!(e.code(), "CommitInProgress" | "FenceStoreUnavailable") => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            other => return other,
        }
    }
}

/// The store misbehaves as the negative controls need.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// Lands requests after their deadline (no presigned expiry).
    IgnoreDeadlines,
    /// Also ignores If-Match / If-None-Match.
    IgnoreEverything,
}

impl Store {
    fn misbehave(&self, fault: Fault) {
        let (deadlines, conditions) = match fault {
            Fault::None => (false, false),
            Fault::IgnoreDeadlines => (true, false),
            Fault::IgnoreEverything => (true, true),
        };
        self.ignore_deadlines.store(deadlines, Ordering::SeqCst);
        self.ignore_conditions.store(conditions, Ordering::SeqCst);
    }

    /// Holds the next request to the store, sends `request` (a put of `bytes`) through `gate`,
    /// and waits until it is held: a commit paused between its intent and the store.
    async fn held_put(
        &self,
        gate: &Arc<Gate>,
        request: WriteRequest,
        bytes: &'static [u8],
    ) -> tokio::task::JoinHandle<Result<Written, GateError>> {
        self.hold.store(true, Ordering::SeqCst);
        let gate = gate.clone();
        let task = tokio::spawn(async move { gate.put(request, body(bytes)).await });
        while self.held.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        task
    }
}

/// An instance paused between its intent and the store: the other gate does not decide over
/// the pending intent (CommitInProgress) until its deadline has passed, then the store refuses
/// the held request as expired, and the held commit, taken again, is refused as stale. With a
/// store that enforces nothing (the negative control), token 2 lands after token 3.
async fn paused(fault: Fault) -> (Vec<Option<u64>>, Result<Written, GateError>) {
    let ([a, b], store, _) = cluster();
    a.put(req("k", 1), body(b"first")).await.unwrap();
    store.misbehave(fault);
    let zombie = store.held_put(&a, req("k", 2), b"zombie").await;
    retried(|| b.put(req("k", 3), body(b"newer")))
        .await
        .unwrap();
    let _ = store.release.send(true);
    let answer = zombie.await.unwrap();
    (store.landed(), answer)
}

#[tokio::test]
async fn a_paused_commit_is_refused_by_the_store_after_its_deadline() {
    let (landed, answer) = paused(Fault::None).await;
    in_token_order(&landed).unwrap();
    assert_eq!(landed, vec![Some(1), Some(3)]);
    assert_eq!(answer.unwrap_err().code(), "StaleFencingToken");
}

#[tokio::test]
async fn negative_control_a_store_enforcing_nothing_is_caught() {
    let (landed, _) = paused(Fault::IgnoreEverything).await;
    assert!(in_token_order(&landed).is_err(), "{landed:?}");
}

/// A fence advance (a bound grant) through one gate while a commit of the object is held on its
/// way to the store through the other. The advance does not change the store, so nothing but
/// the held request's deadline can stop it landing after the advance was acknowledged: the
/// advance waits for that deadline. Returns the tokens that landed after the advance's
/// acknowledgement, and the token it granted.
async fn advance_over_held(fault: Fault) -> (Vec<Option<u64>>, u64) {
    let ([a, b], store, _) = cluster();
    a.put(req("k", 1), body(b"first")).await.unwrap();
    store.misbehave(fault);
    let zombie = store.held_put(&a, req("k", 2), b"zombie").await;
    let (granted, _) = retried(|| b.advance_past("b", "k", 1, None)).await.unwrap();
    let acked = store.landed().len();
    let _ = store.release.send(true);
    let _ = zombie.await.unwrap();
    (store.landed()[acked..].to_vec(), granted.0)
}

#[tokio::test]
async fn an_advance_waits_for_a_commit_in_flight_on_another_instance() {
    let (after, granted) = advance_over_held(Fault::None).await;
    assert_eq!(granted, 3);
    assert!(after.is_empty(), "landed after the advance: {after:?}");
}

#[tokio::test]
async fn negative_control_an_advance_over_a_commit_without_deadline_is_caught() {
    let (after, granted) = advance_over_held(Fault::IgnoreDeadlines).await;
    assert!(
        after.iter().flatten().any(|t| *t < granted),
        "the held commit did not land after the advance: {after:?}"
    );
}

/// A delete of an absent key through one gate while a create of it is held through the other.
/// Absence comes back with every delete, so If-None-Match cannot fence the create: the delete
/// waits for its deadline. Returns whether the object exists after the delete was acknowledged
/// and the held create answered.
async fn delete_over_held_create(fault: Fault) -> bool {
    let ([a, b], store, _) = cluster();
    store.misbehave(fault);
    let zombie = store.held_put(&a, req("z", 5), b"zombie").await;
    let deleted = retried(|| b.delete(req("z", 6))).await.unwrap();
    assert_eq!(deleted.existed, Some(false));
    let _ = store.release.send(true);
    let _ = zombie.await.unwrap();
    a.get("b", "z").await.is_ok()
}

#[tokio::test]
async fn an_acknowledged_delete_is_not_undone_by_a_create_in_flight() {
    assert!(!delete_over_held_create(Fault::None).await);
}

#[tokio::test]
async fn negative_control_a_create_without_deadline_comes_back() {
    assert!(delete_over_held_create(Fault::IgnoreDeadlines).await);
}

/// Two `If-None-Match: *` creates with the same token through two gates, the first held:
/// exactly one is acknowledged, the other answers 412.
#[tokio::test]
async fn two_exclusive_creates_through_two_gates_acknowledge_one() {
    let ([a, b], store, _) = cluster();
    let once = |key: &str| WriteRequest {
        conditions: Conditions {
            if_none_match: Some(EtagMatch::Any),
            ..Default::default()
        },
        ..req(key, 5)
    };
    let first = store.held_put(&a, once("once"), b"first").await;
    let second = retried(|| b.put(once("once"), body(b"second"))).await;
    let _ = store.release.send(true);
    let first = first.await.unwrap();
    let codes = [&first, &second].map(|r| r.as_ref().err().map(|e| e.code()));
    assert_eq!(codes.iter().filter(|c| c.is_none()).count(), 1, "{codes:?}");
    assert!(codes.contains(&Some("PreconditionFailed")), "{codes:?}");
}

/// Puts and deletes of one key racing through both gates never take each other for writes
/// around fencegate (no BypassDetected), and the object is never wedged: a write with a newer
/// token succeeds afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_puts_and_deletes_never_look_like_bypasses() {
    let ([a, b], store, _) = cluster();
    for round in 0..30u64 {
        let t = 10 + round * 3;
        let (a1, b1) = (a.clone(), b.clone());
        let put =
            tokio::spawn(
                async move { a1.put(req("w", t), body(format!("{t}").into_bytes())).await },
            );
        let delete = tokio::spawn(async move { b1.delete(req("w", t + 1)).await });
        for result in [
            put.await.unwrap().map(|_| ()),
            delete.await.unwrap().map(|_| ()),
        ] {
            if let Err(e) = result {
                assert!(
                    matches!(
                        e.code(),
                        "StaleFencingToken" | "CommitInProgress" | "FenceStoreUnavailable"
                    ),
                    "round {round}: {e}"
                );
            }
        }
        retried(|| a.put(req("w", t + 2), body(b"after")))
            .await
            .unwrap_or_else(|e| panic!("round {round}: the object is wedged: {e}"));
    }
    in_token_order(&store.landed()).unwrap();
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

/// A commit the store admits just before its deadline but applies later (a large multipart
/// completion). The other gate's advance waits for the deadline plus the apply margin; with a
/// margin shorter than the store's apply time (the negative control), the commit lands after
/// the advance was acknowledged. Returns the tokens that landed after it.
async fn advance_over_slow_apply(margin: Duration) -> Vec<Option<u64>> {
    let ([a, b], store, table) = cluster_with(margin);
    a.put(req("k", 1), body(b"first")).await.unwrap();
    store.apply_ms.store(80, Ordering::SeqCst);
    let zombie = store.held_put(&a, req("k", 2), b"slow").await;
    // Admitted 30 ms before its deadline (the row's `u` is the deadline plus the margin).
    let until = table.wrapped.get("object:b/k").await.unwrap().unwrap();
    let not_after = until.unresolved_until_ms.unwrap() - margin.as_millis() as u64;
    let now = crate::wall_clock::now_ms();
    tokio::time::sleep(Duration::from_millis(not_after.saturating_sub(now + 30))).await;
    let _ = store.release.send(true);
    let (granted, _) = retried(|| b.advance_past("b", "k", 1, None)).await.unwrap();
    assert_eq!(granted.0, 3);
    let acked = store.landed().len();
    let _ = zombie.await.unwrap();
    store.landed()[acked..].to_vec()
}

#[tokio::test]
async fn an_advance_waits_for_a_commit_the_store_is_still_applying() {
    let after = advance_over_slow_apply(Duration::from_millis(300)).await;
    assert!(after.is_empty(), "landed after the advance: {after:?}");
}

#[tokio::test]
async fn negative_control_an_apply_margin_too_short_is_caught() {
    let after = advance_over_slow_apply(Duration::from_millis(5)).await;
    assert_eq!(after, vec![Some(2)]);
}

/// A commit or delete the store refused as expired leaves no deadline behind. Its own retry
/// goes ahead at once (the request can no longer land), and so does the other instance's next
/// write. With a long apply margin, a deadline left behind would hold both back for seconds
/// (503 CommitInProgress).
#[tokio::test]
async fn a_request_refused_as_expired_leaves_no_deadline_behind() {
    let ([a, b], store, _) = cluster_with(Duration::from_secs(5));
    a.put(req("k", 1), body(b"first")).await.unwrap();
    let held = store.held_put(&a, req("k", 2), b"late").await;
    tokio::time::sleep(TTL + Duration::from_millis(50)).await;
    let _ = store.release.send(true);
    let started = std::time::Instant::now();
    let retried_commit = held.await.unwrap();
    assert!(retried_commit.is_ok(), "{:?}", retried_commit.err());
    b.put(req("k", 3), body(b"next")).await.unwrap();
    // The same for a delete.
    let _ = store.release.send(false);
    store.hold.store(true, Ordering::SeqCst);
    store.held.store(0, Ordering::SeqCst);
    let deleting = {
        let a = a.clone();
        tokio::spawn(async move { a.delete(req("k", 4)).await })
    };
    while store.held.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(TTL + Duration::from_millis(50)).await;
    let _ = store.release.send(true);
    assert_eq!(deleting.await.unwrap().unwrap().existed, Some(true));
    b.put(req("k", 5), body(b"again")).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "held back by a deadline left behind: {:?}",
        started.elapsed()
    );
    assert_eq!(store.landed(), vec![Some(1), Some(2), Some(3), Some(5)]);
}

/// A write refused as a bypass leaves the row as it was, without its deadline: the next write
/// is refused as a bypass too, not held back as a commit in progress.
#[tokio::test]
async fn a_write_refused_as_a_bypass_leaves_no_deadline_behind() {
    let ([a, b], store, _) = cluster_with(Duration::from_secs(5));
    a.put(req("k", 1), body(b"first")).await.unwrap();
    store.inner.write_behind("b", "k", b"around");
    for (gate, token) in [(&a, 2), (&b, 3), (&a, 4)] {
        let e = gate.put(req("k", token), body(b"mine")).await.unwrap_err();
        assert_eq!(e.code(), "BypassDetected", "token {token}: {e}");
    }
}

/// A clock that drifts ahead after start-up. The clock watch finds it (the store's clock
/// against this instance's), and the instance then does not decide over an intent whose
/// deadline its clock says has passed: the held commit is not overtaken through it (503
/// ClockSkewed) until the clock is back within the bound. Without the watch's verdict (the
/// negative control is `paused`'s run with a correct clock) the decision is taken.
#[tokio::test]
async fn a_clock_found_too_far_ahead_does_not_decide_over_an_intent() {
    let ([a, b], store, _) = cluster();
    a.put(req("k", 1), body(b"first")).await.unwrap();
    let held = store.held_put(&a, req("k", 2), b"held").await;
    store.clock_ahead_ms.store(5_000, Ordering::SeqCst);
    b.check_clocks().await;
    tokio::time::sleep(TTL + Duration::from_millis(100)).await;
    let e = b.put(req("k", 3), body(b"newer")).await.unwrap_err();
    assert_eq!((e.status(), e.code()), (503, "ClockSkewed"), "{e}");
    let e = b
        .advance("b", "k", Ok(Some(Token(4))), None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "ClockSkewed");
    // Within the bound again (the store's Date has whole seconds: up to 999 ms is no proof).
    store.clock_ahead_ms.store(900, Ordering::SeqCst);
    b.check_clocks().await;
    retried(|| b.put(req("k", 3), body(b"newer")))
        .await
        .unwrap();
    let _ = store.release.send(true);
    assert_eq!(held.await.unwrap().unwrap_err().code(), "StaleFencingToken");
    assert_eq!(store.landed(), vec![Some(1), Some(3)]);
}

/// A clock stepped ahead after the watch's last sample (its verdict still "trusted") is
/// compared with the store's again before it decides over an ended intent, and waits until the
/// deadline has passed by the store's clock too: the held commit is not overtaken early. The
/// negative control is `paused`, whose clock agrees with the store's.
#[tokio::test]
async fn a_clock_stepped_ahead_between_samples_waits_for_the_stores_deadline() {
    let ([a, b], store, _) = cluster();
    a.put(req("k", 1), body(b"first")).await.unwrap();
    let held = store.held_put(&a, req("k", 2), b"held").await;
    tokio::time::sleep(TTL + Duration::from_millis(50)).await;
    // Stepped 5 s ahead since the last sample: the intent looks long over to this clock.
    store.clock_ahead_ms.store(5_000, Ordering::SeqCst);
    let started = std::time::Instant::now();
    let e = b.put(req("k", 3), body(b"newer")).await.unwrap_err();
    assert_eq!(e.code(), "CommitInProgress", "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    store.clock_ahead_ms.store(0, Ordering::SeqCst);
    retried(|| b.put(req("k", 3), body(b"newer")))
        .await
        .unwrap();
    let _ = store.release.send(true);
    assert_eq!(held.await.unwrap().unwrap_err().code(), "StaleFencingToken");
    assert_eq!(store.landed(), vec![Some(1), Some(3)]);
}

/// Multipart uploads on a shared table: created through one instance, a part through the
/// other, listed and completed through either; a part after an abort through the other
/// instance is NoSuchUpload, and a completion overtaken by a newer token written through the
/// other instance is refused with nothing landed.
#[tokio::test]
async fn an_upload_is_served_by_either_instance() {
    // Two gates over one shared table and one store that takes multipart uploads (an fs
    // directory stands in for the s3 store both instances reach).
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(crate::backend::fs::FsBackend::open(dir.path(), &["b"]).unwrap());
    let table = Arc::new(MemoryFenceStore::new_shared());
    let gate =
        || super::test_kit::gate_over(BucketPolicy::default(), backend.clone(), table.clone());
    let with_uploads = |g: Arc<Gate>| {
        Arc::new(
            Arc::into_inner(g)
                .unwrap()
                .with_uploads(UploadRegistry::shared(table.clone())),
        )
    };
    let (a, b) = (with_uploads(gate()), with_uploads(gate()));
    let token_of =
        |g: Arc<Gate>| async move { g.head("b", "m").await.ok().and_then(|o| o.meta.token) };
    let part = |gate: &Arc<Gate>, id: &str, n: i32, bytes: &'static [u8]| {
        let (gate, id) = (gate.clone(), id.to_string());
        async move {
            gate.upload_part(
                "b",
                "m",
                &id,
                n,
                Ok(Some(crate::token::Token(5))),
                body(bytes),
                Some(bytes.len() as u64),
                || None,
            )
            .await
        }
    };
    let up = a.create_upload(req("m", 5), "alice").await.unwrap();
    // Every part but the last is at least 5 MiB, as on S3.
    let first: &'static [u8] = Box::leak(vec![b'1'; 5 << 20].into_boxed_slice());
    let p1 = part(&b, &up.id, 1, first).await.unwrap();
    let p2 = part(&a, &up.id, 2, b"two").await.unwrap();
    assert_eq!(b.list_parts("b", "m", &up.id).await.unwrap().len(), 2);
    assert_eq!(a.uploads("b", "").await.unwrap().len(), 1);
    let w = b
        .complete_upload(req("m", 5), &up.id, &[(1, p1.etag), (2, p2.etag)], "")
        .await
        .unwrap();
    assert_eq!(w.token, Some(5));
    assert_eq!(token_of(a.clone()).await, Some(5));
    assert!(a.uploads("b", "").await.unwrap().is_empty());

    let up = b.create_upload(req("m", 6), "alice").await.unwrap();
    a.abort_upload("b", "m", &up.id, Ok(Some(crate::token::Token(6))))
        .await
        .unwrap();
    let late = b
        .upload_part(
            "b",
            "m",
            &up.id,
            1,
            Ok(Some(crate::token::Token(6))),
            body("x"),
            Some(1),
            || None,
        )
        .await;
    assert!(
        matches!(late, Err(GateError::Backend(BackendError::NoSuchUpload(_)))),
        "{late:?}"
    );

    let up = a.create_upload(req("m", 7), "alice").await.unwrap();
    let p = part(&a, &up.id, 1, b"old").await;
    assert!(p.is_err(), "token 5 is not the upload's 7");
    let p = a
        .upload_part(
            "b",
            "m",
            &up.id,
            1,
            Ok(Some(crate::token::Token(7))),
            body("old"),
            Some(3),
            || None,
        )
        .await
        .unwrap();
    b.put(req("m", 8), body("new")).await.unwrap();
    let refused = b
        .complete_upload(req("m", 7), &up.id, &[(1, p.etag)], "")
        .await;
    assert!(
        matches!(refused, Err(GateError::StaleFencingToken { .. })),
        "{refused:?}"
    );
    assert_eq!(token_of(b.clone()).await, Some(8));
    assert!(
        b.uploads("b", "").await.unwrap().is_empty(),
        "the refused upload is dropped"
    );
}

mod early_read;
