//! Power loss at every point of the commit protocol. A scripted run of writes, deletes, fence
//! advances and a write made around the gate is repeated once per operation the gate makes on
//! the fence store or the backend; each time the "machine" loses power just before, or just
//! after, that operation: everything the store had not synced is forgotten and a fresh gate
//! starts on what is left. Then every acknowledged token must still fence out the token below
//! it (docs/design.md, contract line 2), and a new lock holder must be able to carry on without the gate's own
//! half-finished commits being taken for writes around it.

use super::test_kit::{body, req};
use super::*;
use crate::backend::memory::MemoryBackend;
use crate::backend::scripted::{Script, Scripted};
use crate::backend::{Backend, BackendError, ObjectInfo, Staged};
use crate::config::BucketPolicy;
use crate::fence::memory::MemoryFenceStore;
use crate::fence::StoreError;
use crate::fence::{Durability, FenceRow};
use bytes::Bytes;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts the gate's durable operations and fails every one from the crash point on.
#[derive(Default)]
struct Power {
    ops: AtomicUsize,
    /// (operation index, whether it happens before the crash)
    crash_at: Option<(usize, bool)>,
}

impl Power {
    /// Returns Err if power is already lost; `apply` runs if the operation happens.
    fn step(&self) -> Result<bool, ()> {
        let n = self.ops.fetch_add(1, Ordering::SeqCst);
        match self.crash_at {
            Some((at, _)) if n > at => Err(()),
            Some((at, applied)) if n == at => {
                if applied {
                    Ok(false)
                } else {
                    Err(())
                }
            }
            _ => Ok(true),
        }
    }
}

struct CrashStore {
    power: Arc<Power>,
}

#[async_trait::async_trait]
impl crate::fence::scripted::Script for CrashStore {
    async fn put(
        &self,
        inner: &Arc<dyn FenceStore>,
        rows: Vec<(String, FenceRow)>,
        d: Durability,
    ) -> Result<i64, StoreError> {
        match self.power.step() {
            Err(()) => Err(StoreError::Io("power lost".into())),
            Ok(alive) => {
                inner.put(rows, d).await?;
                // Applied, but the power went right after: the caller never hears back.
                if alive {
                    Ok(0)
                } else {
                    Err(StoreError::Io("power lost".into()))
                }
            }
        }
    }
}

struct CrashBackend {
    inner: Arc<MemoryBackend>,
    power: Arc<Power>,
}

#[async_trait::async_trait]
impl Script for CrashBackend {
    async fn commit(
        &self,
        _inner: &Arc<dyn Backend>,
        staged: &Staged,
        expected: Option<&str>,
    ) -> Result<ObjectInfo, BackendError> {
        match self.power.step() {
            Err(()) => Err(BackendError::Unreachable("power lost".into())),
            Ok(alive) => {
                let info = self.inner.commit(staged, expected).await?;
                if alive {
                    Ok(info)
                } else {
                    Err(BackendError::Unreachable("power lost".into()))
                }
            }
        }
    }
    async fn delete(
        &self,
        _inner: &Arc<dyn Backend>,
        b: &str,
        k: &str,
        e: &str,
    ) -> Result<(), BackendError> {
        match self.power.step() {
            Err(()) => Err(BackendError::Unreachable("power lost".into())),
            Ok(alive) => {
                self.inner.delete(b, k, e).await?;
                if alive {
                    Ok(())
                } else {
                    Err(BackendError::Unreachable("power lost".into()))
                }
            }
        }
    }
}

fn gate(store: Arc<dyn FenceStore>, backend: Arc<dyn Backend>) -> Arc<Gate> {
    super::test_kit::gate_over(BucketPolicy::default(), backend, store)
}

/// The scripted run; returns the acknowledged (key, token) pairs.
async fn script(g: &Arc<Gate>, backend: &MemoryBackend) -> Vec<(&'static str, u64)> {
    let mut acked = Vec::new();
    for (key, token) in [("a", 5), ("a", 6), ("c", 2)] {
        if g.put(req(key, token), body(b"v")).await.is_ok() {
            acked.push((key, token));
        }
    }
    if g.delete(req("a", 7)).await.is_ok() {
        acked.push(("a", 7));
    }
    if g.advance("b", "c", Ok(Some(Token(9))), None).await.is_ok() {
        acked.push(("c", 9));
    }
    if g.put(req("a", 8), body(b"v")).await.is_ok() {
        acked.push(("a", 8));
    }
    // A write around the gate, then a write that must be refused and rolled back.
    backend.write_behind("b", "x", b"theirs");
    let _ = g.put(req("x", 4), body(b"v")).await;
    if g.put(req("c", 10), body(b"v")).await.is_ok() {
        acked.push(("c", 10));
    }
    acked
}

#[tokio::test]
async fn no_acknowledged_token_is_forgotten_at_any_crash_point() {
    // A run without a crash counts the durable operations.
    let power = Arc::new(Power::default());
    let store = Arc::new(MemoryFenceStore::new());
    let backend = Arc::new(MemoryBackend::new());
    let g = gate(
        Arc::new(crate::fence::scripted::Scripted::new(
            store.clone(),
            CrashStore {
                power: power.clone(),
            },
        )),
        Arc::new(Scripted::new(
            backend.clone(),
            CrashBackend {
                inner: backend.clone(),
                power: power.clone(),
            },
        )),
    );
    let full = script(&g, &backend).await;
    assert_eq!(full.len(), 7, "{full:?}");
    let ops = power.ops.load(Ordering::SeqCst);
    assert!(ops >= 14, "the script makes {ops} durable operations");

    let mut checked = 0;
    for at in 0..ops {
        for applied in [false, true] {
            let power = Arc::new(Power {
                crash_at: Some((at, applied)),
                ..Power::default()
            });
            let store = Arc::new(MemoryFenceStore::new());
            let backend = Arc::new(MemoryBackend::new());
            let g = gate(
                Arc::new(crate::fence::scripted::Scripted::new(
                    store.clone(),
                    CrashStore {
                        power: power.clone(),
                    },
                )),
                Arc::new(Scripted::new(
                    backend.clone(),
                    CrashBackend {
                        inner: backend.clone(),
                        power,
                    },
                )),
            );
            let acked = script(&g, &backend).await;
            // Power loss: unsynced fence rows are gone; a fresh gate starts on what is left.
            store.lose_unsynced();
            let g = gate(store.clone(), backend.clone());
            for &(key, token) in &acked {
                let e = g.put(req(key, token - 1), body(b"v")).await.unwrap_err();
                assert_eq!(
                    e.code(),
                    "StaleFencingToken",
                    "crash at {at} ({applied}): {key} {token}"
                );
            }
            // A new holder (a token above any sent) carries on: the crash left no state that
            // the gate mistakes for a write around it. (An unacknowledged write's token may
            // have been recorded, so the acknowledged ones are not the upper bound.)
            for key in ["a", "c"] {
                let r = g.put(req(key, 100), body(b"v")).await;
                assert!(r.is_ok(), "crash at {at} ({applied}): {key}: {:?}", r.err());
            }
            checked += 1;
        }
    }
    assert_eq!(checked, ops * 2);
}

fn keyed(key: &str, token: u64, idem: &str) -> WriteRequest {
    WriteRequest {
        idempotency: Some(crate::gate::Idempotency::from_header("key:t", idem.as_bytes()).unwrap()),
        ..req(key, token)
    }
}

/// Idempotency-Key at every crash point: a client whose request's outcome was lost to the
/// crash retries it, with the same key, on the gate that starts on what is left. Each request
/// then takes effect exactly once (one commit of its token, whatever the crash point), the
/// retry answers as a first run would, and a second retry is a replay of that answer.
#[tokio::test]
async fn a_retry_after_a_crash_at_any_point_commits_once() {
    // "c" exists (written through fencegate) before the script deletes and writes it again.
    async fn setup() -> (Arc<MemoryFenceStore>, Arc<MemoryBackend>) {
        let store = Arc::new(MemoryFenceStore::new());
        let backend = Arc::new(MemoryBackend::new());
        let g = gate(store.clone(), backend.clone());
        g.put(req("c", 1), body(b"v")).await.unwrap();
        (store, backend)
    }
    async fn run(g: &Arc<Gate>) -> Vec<Result<Written, GateError>> {
        vec![
            g.put(keyed("a", 5, "p"), body(b"v")).await,
            g.delete(keyed("c", 3, "d")).await,
            g.put(keyed("c", 4, "q"), body(b"v")).await,
        ]
    }
    let ops = {
        let (store, backend) = setup().await;
        let power = Arc::new(Power::default());
        let g = gate(
            Arc::new(crate::fence::scripted::Scripted::new(
                store,
                CrashStore {
                    power: power.clone(),
                },
            )),
            Arc::new(Scripted::new(
                backend.clone(),
                CrashBackend {
                    inner: backend,
                    power: power.clone(),
                },
            )),
        );
        assert!(run(&g).await.iter().all(|r| r.is_ok()));
        power.ops.load(Ordering::SeqCst)
    };
    for at in 0..ops {
        for applied in [false, true] {
            let power = Arc::new(Power {
                crash_at: Some((at, applied)),
                ..Power::default()
            });
            let (store, backend) = setup().await;
            let g = gate(
                Arc::new(crate::fence::scripted::Scripted::new(
                    store.clone(),
                    CrashStore {
                        power: power.clone(),
                    },
                )),
                Arc::new(Scripted::new(
                    backend.clone(),
                    CrashBackend {
                        inner: backend.clone(),
                        power,
                    },
                )),
            );
            run(&g).await;
            store.lose_unsynced();
            let g = gate(store.clone(), backend.clone());
            let ctx = format!("crash at {at} ({applied})");
            let first: Vec<Written> = run(&g)
                .await
                .into_iter()
                .map(|r| r.unwrap_or_else(|e| panic!("{ctx}: {e}")))
                .collect();
            assert_eq!(first[1].existed, Some(true), "{ctx}");
            let history = backend.history();
            for token in [5, 4] {
                let n = history.iter().filter(|t| **t == Some(token)).count();
                assert_eq!(
                    n, 1,
                    "{ctx}: token {token} committed {n} times: {history:?}"
                );
            }
            // The second retry replays the first retry's answer, and writes nothing.
            let again: Vec<Written> = run(&g).await.into_iter().map(Result::unwrap).collect();
            for (a, b) in first.iter().zip(&again) {
                assert!(b.replayed, "{ctx}");
                assert_eq!((&a.etag, a.existed), (&b.etag, b.existed), "{ctx}");
            }
            assert_eq!(backend.history(), history, "{ctx}: a replay wrote");
        }
    }
}

/// A store whose requests can land late (an S3 store: `in_flight_bound`), with one commit held
/// on its way until `land` is sent, as a request still in the network when its sender died.
struct LateStore {
    inner: Arc<MemoryBackend>,
    bound: Option<std::time::Duration>,
    hold: std::sync::atomic::AtomicBool,
    held: std::sync::atomic::AtomicBool,
    land: tokio::sync::watch::Sender<bool>,
}

#[async_trait::async_trait]
impl Script for LateStore {
    async fn commit(
        &self,
        _inner: &Arc<dyn Backend>,
        staged: &Staged,
        expected: Option<&str>,
    ) -> Result<ObjectInfo, BackendError> {
        if self.hold.swap(false, Ordering::SeqCst) {
            self.held.store(true, Ordering::SeqCst);
            let _ = self.land.subscribe().wait_for(|l| *l).await;
        }
        self.inner.commit(staged, expected).await
    }
    async fn delete(
        &self,
        _inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
        expected: &str,
    ) -> Result<(), BackendError> {
        if self.hold.swap(false, Ordering::SeqCst) {
            self.held.store(true, Ordering::SeqCst);
            let _ = self.land.subscribe().wait_for(|l| *l).await;
        }
        self.inner.delete(bucket, key, expected).await
    }
    fn in_flight_bound(&self, _inner: &Arc<dyn Backend>) -> Option<std::time::Duration> {
        self.bound
    }
}

/// A fence table whose process has died: nothing more is written to it.
struct Dead {
    dead: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl crate::fence::scripted::Script for Dead {
    async fn put(
        &self,
        inner: &Arc<dyn FenceStore>,
        rows: Vec<(String, FenceRow)>,
        d: Durability,
    ) -> Result<i64, StoreError> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(StoreError::Io("the process is dead".into()));
        }
        inner.put(rows, d).await
    }
}

/// fencegate is killed while a commit's request is on its way to a store where requests can
/// land late; it restarts, and a newer holder deletes the object. The intent the crash left is
/// held back like a lost answer (503 CommitUnresolved) until the store shows the request's
/// outcome or the backend's bound from the restart has passed, so the late request cannot undo
/// the acknowledged delete. Returns what the object holds at the end and the delete's first
/// answer. `bounds`: the store's bound before the crash and after the restart (`None`, the
/// negative control: a store whose requests cannot land late, which the restarted gate
/// believes).
async fn killed_mid_commit(
    bounds: [Option<std::time::Duration>; 2],
) -> (Option<Bytes>, Result<Written, GateError>) {
    let table = Arc::new(MemoryFenceStore::new());
    let objects = Arc::new(MemoryBackend::new());
    let late = |hold, bound| {
        Arc::new(Scripted::new(
            objects.clone(),
            LateStore {
                inner: objects.clone(),
                bound,
                hold: std::sync::atomic::AtomicBool::new(hold),
                held: std::sync::atomic::AtomicBool::new(false),
                land: tokio::sync::watch::channel(false).0,
            },
        ))
    };
    let first = late(true, bounds[0]);
    let dying = Arc::new(crate::fence::scripted::Scripted::new(
        table.clone(),
        Dead {
            dead: std::sync::atomic::AtomicBool::new(false),
        },
    ));
    let g = gate(dying.clone(), first.clone());
    let zombie = tokio::spawn(async move { g.put(req("k", 5), body(b"v")).await });
    while !first.held.load(Ordering::SeqCst) {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    // kill -9: the table keeps what was synced; the request is still in the network.
    dying.dead.store(true, Ordering::SeqCst);
    table.lose_unsynced();
    let g = gate(table.clone(), late(false, bounds[1]));
    let answer = g.delete(req("k", 6)).await;
    // The late request lands now.
    let _ = first.land.send(true);
    let _ = zombie.await;
    // The newer holder retries its delete as told: it removes what landed, if the hold knew.
    loop {
        match g.delete(req("k", 6)).await {
            Err(e) if e.code() == "CommitUnresolved" => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await
            }
            _ => break,
        }
    }
    (objects.bytes("b", "k"), answer)
}

#[tokio::test]
async fn an_intent_left_by_a_crash_is_held_back_on_a_store_that_lands_late() {
    let bound = Some(std::time::Duration::from_millis(500));
    let (bytes, answer) = killed_mid_commit([bound, bound]).await;
    assert_eq!(answer.unwrap_err().code(), "CommitUnresolved");
    assert_eq!(bytes, None, "the acknowledged delete stands");
}

/// The bound is lowered across the restart (a shorter `commit_deadline_secs`): the request in
/// flight was made with the old one, which its intent recorded, so the hold keeps to that.
#[tokio::test]
async fn a_bound_lowered_across_the_crash_does_not_shorten_the_hold() {
    let ms = |n| Some(std::time::Duration::from_millis(n));
    let (bytes, answer) = killed_mid_commit([ms(500), ms(0)]).await;
    assert_eq!(answer.unwrap_err().code(), "CommitUnresolved");
    assert_eq!(bytes, None, "the acknowledged delete stands");
}

#[tokio::test]
async fn negative_control_without_the_hold_the_late_request_undoes_the_delete() {
    let (bytes, answer) = killed_mid_commit([None, None]).await;
    assert_eq!(answer.unwrap().existed, Some(false));
    assert_eq!(
        bytes.as_deref(),
        Some(&b"v"[..]),
        "the stale write landed after the acknowledged delete"
    );
}

/// The backend kind changes across the restart to one whose requests cannot land late (or its
/// bound is removed): the request in flight was made under the old bound, which its intent
/// recorded, so the hold keeps to that.
#[tokio::test]
async fn a_bound_removed_across_the_crash_still_holds() {
    let (bytes, answer) =
        killed_mid_commit([Some(std::time::Duration::from_millis(500)), None]).await;
    assert_eq!(answer.unwrap_err().code(), "CommitUnresolved");
    assert_eq!(bytes, None, "the acknowledged delete stands");
}

/// A gate killed while `zombie`'s request (a put, or a delete if `delete`) is held on its way
/// to a store that lands late (bound `bounds[0]`), restarted over the same table with the
/// store's bound `bounds[1]`. `before` are writes acknowledged before, through a gate that
/// does not hold. Land the held request with `first.land`.
struct Crashed {
    g: Arc<Gate>,
    table: Arc<MemoryFenceStore>,
    objects: Arc<MemoryBackend>,
    first: Arc<Scripted<LateStore>>,
    zombie: tokio::task::JoinHandle<Result<Written, GateError>>,
}

async fn crash_mid_request(
    policy: BucketPolicy,
    before: Vec<WriteRequest>,
    zombie: WriteRequest,
    delete: bool,
    bounds: [Option<std::time::Duration>; 2],
) -> Crashed {
    let table = Arc::new(MemoryFenceStore::new());
    let objects = Arc::new(MemoryBackend::new());
    let late = |hold, bound| {
        Arc::new(Scripted::new(
            objects.clone(),
            LateStore {
                inner: objects.clone(),
                bound,
                hold: std::sync::atomic::AtomicBool::new(hold),
                held: std::sync::atomic::AtomicBool::new(false),
                land: tokio::sync::watch::channel(false).0,
            },
        ))
    };
    let over = |backend: Arc<dyn Backend>| {
        super::test_kit::gate_over(policy.clone(), backend, table.clone())
    };
    let g0 = over(late(false, bounds[0]) as Arc<dyn Backend>);
    for r in before {
        g0.put(r, body(b"before")).await.unwrap();
    }
    let first = late(true, bounds[0]);
    let dying = Arc::new(crate::fence::scripted::Scripted::new(
        table.clone(),
        Dead {
            dead: std::sync::atomic::AtomicBool::new(false),
        },
    ));
    let g = super::test_kit::gate_over(policy.clone(), first.clone(), dying.clone());
    let zombie = tokio::spawn(async move {
        if delete {
            g.delete(zombie).await
        } else {
            g.put(zombie, body(b"zombie")).await
        }
    });
    while !first.held.load(Ordering::SeqCst) {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    dying.dead.store(true, Ordering::SeqCst);
    table.lose_unsynced();
    let g = over(late(false, bounds[1]) as Arc<dyn Backend>);
    Crashed {
        g,
        table,
        objects,
        first,
        zombie,
    }
}

/// A keyed retry after the restart, with the bound lowered to nothing: the first request may
/// still land, so the retry is held (not carried out again, which would commit token 5 twice,
/// nor taken as not landed); once it has landed, the retry replays its answer.
#[tokio::test]
async fn a_keyed_retry_after_a_crash_keeps_to_the_recorded_bound() {
    let ms = |n| Some(std::time::Duration::from_millis(n));
    let c = crash_mid_request(
        BucketPolicy::default(),
        vec![],
        keyed("k", 5, "k1"),
        false,
        [ms(60_000), ms(0)],
    )
    .await;
    let held = c.g.put(keyed("k", 5, "k1"), body(b"zombie")).await;
    assert_eq!(held.unwrap_err().code(), "CommitUnresolved");
    let _ = c.first.land.send(true);
    let _ = c.zombie.await;
    let again = c.g.put(keyed("k", 5, "k1"), body(b"zombie")).await.unwrap();
    assert!(again.replayed, "{again:?}");
    let commits = c
        .objects
        .history()
        .iter()
        .filter(|t| **t == Some(5))
        .count();
    assert_eq!(commits, 1, "token 5 committed {commits} times");
}

/// A delete in flight when the process died, the bound lowered across the restart: a newer
/// holder's write of the object is held until the delete's outcome shows, so the late delete
/// cannot remove an acknowledged write.
#[tokio::test]
async fn a_delete_left_in_flight_by_a_crash_cannot_remove_a_newer_write() {
    let ms = |n| Some(std::time::Duration::from_millis(n));
    let c = crash_mid_request(
        BucketPolicy::default(),
        vec![req("k", 4)],
        req("k", 5),
        true,
        [ms(60_000), ms(0)],
    )
    .await;
    let answer = c.g.put(req("k", 6), body(b"newer")).await;
    assert_eq!(answer.unwrap_err().code(), "CommitUnresolved");
    let _ = c.first.land.send(true);
    let _ = c.zombie.await;
    // The delete landed: the newer holder's retry now writes, and it stays.
    c.g.put(req("k", 6), body(b"newer")).await.unwrap();
    assert_eq!(c.objects.bytes("b", "k").as_deref(), Some(&b"newer"[..]));
}

/// A crash left an intent on `k` in a bucket-wide scope (token 5, its request still on its
/// way). After the restart a newer holder (token 6) writes `j` of the same scope, and the
/// scope is advanced: both are refused until k's outcome shows or its bound passes, since the
/// intent marked the scope row in flight (`intents::IN_FLIGHT`); otherwise the stale request
/// could land after them.
#[tokio::test]
async fn a_crash_intent_holds_back_its_whole_scope() {
    let policy = BucketPolicy {
        scope: crate::config::ScopeKind::Bucket,
        ..BucketPolicy::default()
    };
    let bound = Some(std::time::Duration::from_secs(60));
    let c = crash_mid_request(policy, vec![], req("k", 5), false, [bound, bound]).await;
    let other = c.g.put(req("j", 6), body(b"newer")).await;
    let advance = c.g.advance("b", "j", Ok(Some(Token(9))), None).await;
    let _ = c.first.land.send(true);
    let _ = c.zombie.await;
    assert_eq!(
        other.map(|w| w.token).map_err(|e| e.code()),
        Err("CommitUnresolved"),
        "a newer token's write was acknowledged while token 5's request could still land"
    );
    assert_eq!(
        advance.map(|_| ()).map_err(|e| e.code()),
        Err("CommitUnresolved"),
        "the scope was advanced while token 5's request could still land"
    );
}

/// The same for a delete left in flight by the crash, in a prefix scope: a newer token's write
/// to another key of the prefix waits for it, and is acknowledged once it has landed.
#[tokio::test]
async fn a_crash_left_delete_holds_back_its_prefix() {
    let policy = BucketPolicy {
        scope: crate::config::ScopeKind::Prefix,
        prefix_segments: 1,
        ..BucketPolicy::default()
    };
    let bound = Some(std::time::Duration::from_secs(60));
    let c = crash_mid_request(
        policy,
        vec![req("p/k", 4)],
        req("p/k", 5),
        true,
        [bound, bound],
    )
    .await;
    let held = c.g.put(req("p/j", 6), body(b"newer")).await;
    assert_eq!(
        held.map(|_| ()).map_err(|e| e.code()),
        Err("CommitUnresolved")
    );
    let _ = c.first.land.send(true);
    let _ = c.zombie.await;
    c.g.put(req("p/j", 6), body(b"newer")).await.unwrap();
    assert_eq!(c.objects.bytes("b", "p/k"), None, "the delete landed");
}

/// The in-flight mark lives only as long as its request: a commit that lands, a delete, and a
/// commit the store refused each leave the scope row without it, so nothing else in the scope
/// waits on them afterwards.
#[tokio::test]
async fn the_in_flight_mark_goes_with_the_outcome() {
    let policy = BucketPolicy {
        scope: crate::config::ScopeKind::Bucket,
        ..BucketPolicy::default()
    };
    let table = Arc::new(MemoryFenceStore::new());
    let objects = Arc::new(MemoryBackend::new());
    let store = Arc::new(Scripted::new(
        objects.clone(),
        LateStore {
            inner: objects.clone(),
            bound: Some(std::time::Duration::from_secs(60)),
            hold: std::sync::atomic::AtomicBool::new(false),
            held: std::sync::atomic::AtomicBool::new(false),
            land: tokio::sync::watch::channel(false).0,
        },
    ));
    let g = super::test_kit::gate_over(policy, store, table.clone());
    let marks = || async {
        table
            .get("bucket:b")
            .await
            .unwrap()
            .unwrap()
            .unresolved
            .clone()
    };
    g.put(req("k", 5), body(b"a")).await.unwrap();
    assert!(
        marks().await.is_empty(),
        "after a commit: {:?}",
        marks().await
    );
    g.delete(req("k", 6)).await.unwrap();
    assert!(
        marks().await.is_empty(),
        "after a delete: {:?}",
        marks().await
    );
    // The store refuses the commit (its answer: nothing can land), the rows are restored.
    let refusing = Arc::new(Scripted::new(objects.clone(), Refuses));
    let g = super::test_kit::gate_over(
        BucketPolicy {
            scope: crate::config::ScopeKind::Bucket,
            ..BucketPolicy::default()
        },
        refusing,
        table.clone(),
    );
    let refused = g.put(req("k", 7), body(b"b")).await;
    assert_eq!(
        refused.map(|_| ()).map_err(|e| e.code()),
        Err("StoreRefusedRequest")
    );
    assert!(
        marks().await.is_empty(),
        "after a refusal: {:?}",
        marks().await
    );
}

/// A store that refuses every commit with a 400 (nothing written), and whose requests could
/// otherwise land late.
struct Refuses;

#[async_trait::async_trait]
impl Script for Refuses {
    async fn commit(
        &self,
        _inner: &Arc<dyn Backend>,
        _staged: &Staged,
        _expected: Option<&str>,
    ) -> Result<ObjectInfo, BackendError> {
        Err(BackendError::Refused {
            status: 400,
            code: "InvalidArgument".into(),
            message: "refused".into(),
        })
    }
    fn in_flight_bound(&self, _inner: &Arc<dyn Backend>) -> Option<std::time::Duration> {
        Some(std::time::Duration::from_secs(60))
    }
}

/// A store whose commits time out (the answer lost, the request not applied yet), with the
/// in-flight bound `bound`.
struct LostAnswers {
    bound: std::time::Duration,
}

#[async_trait::async_trait]
impl Script for LostAnswers {
    async fn commit(
        &self,
        _inner: &Arc<dyn Backend>,
        _staged: &Staged,
        _expected: Option<&str>,
    ) -> Result<ObjectInfo, BackendError> {
        Err(BackendError::Timeout("the answer was lost".into()))
    }
    fn in_flight_bound(&self, _inner: &Arc<dyn Backend>) -> Option<std::time::Duration> {
        Some(self.bound)
    }
}

/// A fence table that fails the write marking a lost answer's deadline (a momentary I/O error),
/// and writes everything else.
struct FailsTheMark;

#[async_trait::async_trait]
impl crate::fence::scripted::Script for FailsTheMark {
    async fn put(
        &self,
        inner: &Arc<dyn FenceStore>,
        rows: Vec<(String, FenceRow)>,
        d: Durability,
    ) -> Result<i64, StoreError> {
        if rows
            .iter()
            .any(|(_, r)| r.pending.is_some() && r.unresolved_until_ms.is_some())
        {
            return Err(StoreError::Io("a momentary write error".into()));
        }
        inner.put(rows, d).await
    }
}

/// In one process, up longer than the bound: a commit's answer is lost and the write marking
/// its deadline fails. The intent is left without a deadline, which reads as a crash's, held
/// from this process's start, long passed: the deadline is kept in memory instead, so a newer
/// holder's delete is not acknowledged while token 5's request may still land and re-create
/// the object after it.
#[tokio::test]
async fn a_lost_answer_whose_mark_failed_is_still_held() {
    let bound = std::time::Duration::from_secs(1);
    let objects = Arc::new(MemoryBackend::new());
    let store = Arc::new(Scripted::new(objects.clone(), LostAnswers { bound }));
    let table = Arc::new(crate::fence::scripted::Scripted::new(
        Arc::new(MemoryFenceStore::new()),
        FailsTheMark,
    ));
    let g = gate(table, store);
    // Up longer than the bound.
    tokio::time::sleep(bound + std::time::Duration::from_millis(100)).await;
    let lost = g.put(req("k", 5), body(b"zombie")).await;
    assert!(lost.is_err(), "{lost:?}");
    let newer = g.delete(req("k", 6)).await;
    assert_eq!(
        newer.map(|w| w.existed).map_err(|e| e.code()),
        Err("CommitUnresolved"),
        "a newer delete was acknowledged while token 5's request may still land"
    );
}

/// DeleteBucket's last check after a crash, the bound lowered across the restart: the bucket
/// is not settled while the intent's request may still land (it would put an object in a
/// bucket answered deleted), and is once the store shows it landed.
#[tokio::test]
async fn delete_bucket_waits_for_a_crash_intent_by_its_recorded_bound() {
    let ms = |n| Some(std::time::Duration::from_millis(n));
    let c = crash_mid_request(
        BucketPolicy::default(),
        vec![],
        req("k", 5),
        false,
        [ms(60_000), ms(0)],
    )
    .await;
    let settled = c.g.bucket_settled("b").await;
    assert_eq!(settled.map_err(|e| e.code()), Err("CommitUnresolved"));
    let _ = c.first.land.send(true);
    let _ = c.zombie.await;
    c.g.bucket_settled("b").await.unwrap();
}

/// A crash-left request that can no longer land (its bound has passed since the restart)
/// holds nothing any more: the first decision of the scope after that drops its mark, so a
/// later restart does not hold the whole scope back again for the full bound, nor does
/// `fences list` show the scope pending for ever.
#[tokio::test]
async fn a_crash_mark_goes_once_its_request_can_no_longer_land() {
    let policy = BucketPolicy {
        scope: crate::config::ScopeKind::Bucket,
        ..BucketPolicy::default()
    };
    let bound = Some(std::time::Duration::from_millis(300));
    let c = crash_mid_request(policy.clone(), vec![], req("k", 5), false, [bound, bound]).await;
    let held = c.g.put(req("j", 6), body(b"newer")).await;
    assert_eq!(
        held.map(|_| ()).map_err(|e| e.code()),
        Err("CommitUnresolved")
    );
    // The request never lands; the bound passes on the restarted gate.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    c.g.put(req("j", 6), body(b"newer")).await.unwrap();
    let marks = c.table.get("bucket:b").await.unwrap().unwrap().unresolved;
    assert!(marks.is_empty(), "a mark outlived its request: {marks:?}");
    // Restarted again: the scope's other objects are not held for the request's sake.
    let again = super::test_kit::gate_over(
        policy,
        Arc::new(Scripted::new(
            c.objects.clone(),
            LateStore {
                inner: c.objects.clone(),
                bound,
                hold: std::sync::atomic::AtomicBool::new(false),
                held: std::sync::atomic::AtomicBool::new(false),
                land: tokio::sync::watch::channel(false).0,
            },
        )),
        c.table.clone(),
    );
    again.put(req("j", 7), body(b"newest")).await.unwrap();
    drop(c.zombie);
}

/// The same in a header scope: the crash-left request holds back its own lock's scope (a newer
/// token of that lock writing another object), and only that one.
#[tokio::test]
async fn a_crash_intent_holds_back_its_header_scope_only() {
    let policy = BucketPolicy {
        scope: crate::config::ScopeKind::Header,
        ..BucketPolicy::default()
    };
    let under = |key: &str, token: u64, lock: &str| WriteRequest {
        scope_header: Some(lock.as_bytes().to_vec()),
        ..req(key, token)
    };
    let bound = Some(std::time::Duration::from_secs(60));
    let c = crash_mid_request(policy, vec![], under("k", 5, "a"), false, [bound, bound]).await;
    let held = c.g.put(under("j", 6, "a"), body(b"newer")).await;
    assert_eq!(
        held.map(|_| ()).map_err(|e| e.code()),
        Err("CommitUnresolved")
    );
    c.g.put(under("i", 1, "other"), body(b"x")).await.unwrap();
    let _ = c.first.land.send(true);
    let _ = c.zombie.await;
    c.g.put(under("j", 6, "a"), body(b"newer")).await.unwrap();
}

/// A lease grant (`advance_past`) and a delete of an absent key in the scope record a newer
/// token without sending a store request: both wait for the crash-left request as writes do.
#[tokio::test]
async fn a_crash_intent_holds_back_grants_and_absent_deletes_in_its_scope() {
    let policy = BucketPolicy {
        scope: crate::config::ScopeKind::Prefix,
        prefix_segments: 1,
        ..BucketPolicy::default()
    };
    let bound = Some(std::time::Duration::from_secs(60));
    let c = crash_mid_request(policy, vec![], req("p/k", 5), false, [bound, bound]).await;
    let grant = c.g.advance_past("b", "p/j", 0, None).await;
    assert_eq!(
        grant.map(|_| ()).map_err(|e| e.code()),
        Err("CommitUnresolved")
    );
    let absent = c.g.delete(req("p/j", 6)).await;
    assert_eq!(
        absent.map(|_| ()).map_err(|e| e.code()),
        Err("CommitUnresolved")
    );
    let _ = c.first.land.send(true);
    let _ = c.zombie.await;
    let (token, _) = c.g.advance_past("b", "p/j", 0, None).await.unwrap();
    assert_eq!(token.0, 6);
}
