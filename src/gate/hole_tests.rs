//! Regression tests for the holes an independent review found (issue 11), each against the
//! in-memory doubles: a client that hangs up mid-commit, deletes of absent keys, preconditions
//! after an unknown outcome, scope switching in header-scoped buckets, bound advances racing
//! writers, tokens at the u64 edge and fenced aborts. Each fails on the code before its fix.

use super::test_kit::{body, req};
use super::*;
use crate::backend::memory::MemoryBackend;
use crate::backend::scripted::{Script, Scripted};
use crate::backend::{Backend, BackendError, ObjectInfo, Staged};
use crate::config::{BucketPolicy, ScopeKind};
use crate::fence::memory::MemoryFenceStore;
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The memory backend with the faults of a real one: a commit that keeps running after its
/// caller is gone and whose compare-and-swap holds only under the scope's lock (the fs
/// backend's `spawn_blocking`: check the version, then rename), a slow commit, and a commit
/// that lands but answers with a timeout.
#[derive(Default)]
struct Faulty {
    inner: Arc<MemoryBackend>,
    commit_delay_ms: AtomicU64,
    lands_but_times_out: AtomicBool,
    commits_started: AtomicU64,
}

#[async_trait::async_trait]
impl Script for Faulty {
    async fn commit(
        &self,
        _inner: &Arc<dyn Backend>,
        s: &Staged,
        e: Option<&str>,
    ) -> Result<ObjectInfo, BackendError> {
        self.commits_started.fetch_add(1, Ordering::SeqCst);
        let delay = Duration::from_millis(self.commit_delay_ms.load(Ordering::SeqCst));
        let inner = self.inner.clone();
        let staged = handle_copy(s);
        let expected = e.map(str::to_string);
        // Like the fs backend: the version is compared, then the rename replaces whatever is
        // there (the compare-and-swap holds only under the scope's lock), in a blocking task
        // that finishes even if this future is dropped.
        let landed = tokio::spawn(async move {
            let found = inner.version(&staged.bucket, &staged.key).await?;
            if found != expected {
                return Err(BackendError::Conflict { expected, found });
            }
            tokio::time::sleep(delay).await;
            let now = inner.version(&staged.bucket, &staged.key).await?;
            inner.commit(&staged, now.as_deref()).await
        })
        .await
        .expect("the commit task");
        if self.lands_but_times_out.swap(false, Ordering::SeqCst) && landed.is_ok() {
            return Err(BackendError::Timeout(
                "the store did not answer in time".into(),
            ));
        }
        landed
    }
}

/// A second handle on a body the memory backend staged, for a commit that outlives its call.
fn handle_copy(s: &Staged) -> Staged {
    Staged {
        body: match &s.body {
            crate::backend::StagedBody::Handle(h) => crate::backend::StagedBody::Handle(h.clone()),
            crate::backend::StagedBody::File { path, file, synced } => {
                crate::backend::StagedBody::File {
                    path: path.clone(),
                    file: file.clone(),
                    synced: synced.clone(),
                }
            }
            other => panic!("the memory backend stages handles, not {other:?}"),
        },
        bucket: s.bucket.clone(),
        key: s.key.clone(),
        etag: s.etag.clone(),
        size: s.size,
        version: s.version.clone(),
        meta: s.meta.clone(),
    }
}

fn gate_with(policy: BucketPolicy) -> (Arc<Gate>, Arc<Scripted<Faulty>>, Arc<MemoryFenceStore>) {
    let store = Arc::new(MemoryFenceStore::new());
    let faulty = Faulty::default();
    let backend = Arc::new(Scripted::new(faulty.inner.clone(), faulty));
    let gate = super::test_kit::gate_over(policy, backend.clone(), store.clone());
    (gate, backend, store)
}

fn scoped(key: &str, token: u64, scope: &str) -> WriteRequest {
    WriteRequest {
        scope_header: Some(scope.as_bytes().to_vec()),
        ..req(key, Some(token))
    }
}

#[tokio::test]
async fn a_client_that_hangs_up_mid_commit_cannot_land_after_a_newer_write() {
    let (gate, backend, _) = gate_with(BucketPolicy::default());
    backend.commit_delay_ms.store(300, Ordering::SeqCst);
    // A's request future is dropped (its client hung up) while its commit is in the backend.
    let a = {
        let gate = gate.clone();
        tokio::spawn(async move { gate.put(req("k", Some(5)), body(b"A")).await })
    };
    while backend.commits_started.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    a.abort();
    backend.commit_delay_ms.store(0, Ordering::SeqCst);
    let b = gate.put(req("k", Some(6)), body(b"B")).await.unwrap();
    // B waited for A's commit to end, then committed over it: B's bytes are the object's.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(backend.inner.history(), vec![Some(5), Some(6)]);
    assert_eq!(
        backend.inner.bytes("b", "k").unwrap(),
        Bytes::from_static(b"B")
    );
    assert_eq!(
        b.etag.unwrap(),
        format!("\"{}\"", hex::encode(md5_of(b"B")))
    );
}

fn md5_of(b: &[u8]) -> Vec<u8> {
    use md5::{Digest, Md5};
    Md5::digest(b).to_vec()
}

#[tokio::test]
async fn a_delete_of_an_absent_key_records_its_token_and_a_tombstone() {
    let (gate, _, store) = gate_with(BucketPolicy::default());
    let d = gate.delete(req("gone", Some(7))).await.unwrap();
    assert_eq!(d.existed, Some(false));
    let info = gate.fence_info("b", "gone", None).await.unwrap();
    assert_eq!(info.highest, Some(7));
    assert!(info.tombstone);
    // Synced, not lazy: it survives power loss.
    store.lose_unsynced();
    assert_eq!(
        gate.fence_info("b", "gone", None).await.unwrap().highest,
        Some(7)
    );
    // The zombie that was slow to create it is refused.
    let e = gate
        .put(req("gone", Some(6)), body(b"z"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    // A present key: same after the delete.
    gate.put(req("here", Some(3)), body(b"h")).await.unwrap();
    assert_eq!(
        gate.delete(req("here", Some(4))).await.unwrap().existed,
        Some(true)
    );
    let e = gate
        .put(req("here", Some(3)), body(b"z"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
}

#[tokio::test]
async fn conditions_after_an_unknown_outcome_are_judged_against_the_store() {
    let (gate, backend, _) = gate_with(BucketPolicy::default());
    // The commit lands but the store's answer times out: the row stays pending.
    backend.lands_but_times_out.store(true, Ordering::SeqCst);
    let e = gate.put(req("k", Some(5)), body(b"A")).await.unwrap_err();
    assert_eq!(e.status(), 504);
    assert_eq!(
        backend.inner.bytes("b", "k").unwrap(),
        Bytes::from_static(b"A")
    );
    // "Create only if absent" must see A's object, not the row's last confirmed state.
    let mut create = req("k", Some(6));
    create.conditions.if_none_match = Some(EtagMatch::Any);
    let e = gate.put(create, body(b"B")).await.unwrap_err();
    assert_eq!(e.code(), "PreconditionFailed");
    assert_eq!(
        backend.inner.bytes("b", "k").unwrap(),
        Bytes::from_static(b"A")
    );
}

fn header_policy() -> BucketPolicy {
    BucketPolicy {
        scope: ScopeKind::Header,
        ..BucketPolicy::default()
    }
}

#[tokio::test]
async fn a_header_scoped_object_stays_with_its_lock() {
    let (gate, backend, _) = gate_with(header_policy());
    gate.put(scoped("o", 10, "lockA"), body(b"a10"))
        .await
        .unwrap();
    let e = gate
        .put(scoped("o", 9, "lockA"), body(b"x"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    // Another lock's name, with a lower token: refused, naming the bound scope.
    let e = gate
        .put(scoped("o", 9, "lockA-x"), body(b"x"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "FencingScopeMismatch");
    assert!(e.to_string().contains("lockA"), "{e}");
    // Deleted under lockA: the tombstone keeps the binding.
    gate.delete(scoped("o", 11, "lockA")).await.unwrap();
    let e = gate
        .put(scoped("o", 1, "other"), body(b"x"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "FencingScopeMismatch");
    let e = gate.delete(scoped("o", 1, "other")).await.unwrap_err();
    assert_eq!(e.code(), "FencingScopeMismatch");
    // A takeover must name the bound scope and carry a token above its highest.
    let mut take = scoped("o", 11, "lockB");
    take.scope_takeover = Some(b"lockA".to_vec());
    let e = gate.put(take, body(b"x")).await.unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    let mut take = scoped("o", 12, "lockB");
    take.scope_takeover = Some(b"wrong".to_vec());
    assert_eq!(
        gate.put(take, body(b"x")).await.unwrap_err().code(),
        "FencingScopeMismatch"
    );
    let mut take = scoped("o", 12, "lockB");
    take.scope_takeover = Some(b"lockA".to_vec());
    gate.put(take, body(b"b12")).await.unwrap();
    // Now lockA's holders are the other lock.
    let e = gate
        .put(scoped("o", 50, "lockA"), body(b"x"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "FencingScopeMismatch");
    assert_eq!(
        backend.inner.bytes("b", "o").unwrap(),
        Bytes::from_static(b"b12")
    );
}

#[tokio::test]
async fn a_bound_advance_is_strictly_above_every_recorded_token() {
    let (gate, _, _) = gate_with(BucketPolicy::default());
    gate.put(req("k", Some(11)), body(b"f")).await.unwrap();
    let (t, scope) = gate.advance_past("b", "k", 3, None).await.unwrap();
    assert_eq!((t.0, scope.as_str()), (12, "object:b/k"));
    // The writer that held 11 is fenced out by the grant.
    let e = gate.put(req("k", Some(11)), body(b"f")).await.unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    // A floor above the highest wins.
    assert_eq!(
        gate.advance_past("b", "k", 40, None).await.unwrap().0 .0,
        40
    );
    // Racing writers: every grant is above every write acknowledged before it.
    let mut tasks = Vec::new();
    for i in 0..20u64 {
        let g = gate.clone();
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                let h = g
                    .fence_info("b", "r", None)
                    .await
                    .unwrap()
                    .highest
                    .unwrap_or(0);
                g.put(req("r", Some(h + 1)), body(b"w"))
                    .await
                    .ok()
                    .map(|w| ("write", w.token.unwrap()))
            } else {
                g.advance_past("b", "r", 1, None)
                    .await
                    .ok()
                    .map(|(t, _)| ("grant", t.0))
            }
        }));
    }
    let mut grants = std::collections::HashSet::new();
    for t in tasks {
        if let Some(("grant", t)) = t.await.unwrap() {
            assert!(grants.insert(t), "two grants with token {t}");
        }
    }
}

#[tokio::test]
async fn a_scope_at_the_top_of_u64_cannot_be_advanced_past() {
    let (gate, _, _) = gate_with(BucketPolicy::default());
    gate.advance("b", "ov", Ok(Some(Token(u64::MAX))), None)
        .await
        .unwrap();
    let e = gate.advance_past("b", "ov", 1, None).await.unwrap_err();
    assert_eq!((e.status(), e.code()), (409, "TokenSpaceExhausted"));
    // u64::MAX itself is still a valid, equal token for the holder of it.
    gate.put(req("ov", Some(u64::MAX)), body(b"m"))
        .await
        .unwrap();
    let e = gate
        .put(req("ov", Some(u64::MAX - 1)), body(b"m"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
}

#[tokio::test]
async fn an_upload_is_aborted_only_with_its_token_or_a_higher_one() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(crate::backend::fs::FsBackend::open(dir.path(), &["b"]).unwrap());
    let store = Arc::new(MemoryFenceStore::new());
    let mut buckets = BTreeMap::new();
    buckets.insert(
        "b".to_string(),
        BucketEntry::new(BucketPolicy::default(), backend),
    );
    let gate = Arc::new(Gate::new(store, buckets));
    let up = gate
        .create_upload(req("m", Some(8)), "alice")
        .await
        .unwrap();
    let e = gate
        .abort_upload("b", "m", &up.id, Ok(None))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "FencingTokenRequired");
    let e = gate
        .abort_upload("b", "m", &up.id, Ok(Some(Token(7))))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    gate.abort_upload("b", "m", &up.id, Ok(Some(Token(8))))
        .await
        .unwrap();
    assert!(gate.upload("b", "m", &up.id).await.is_err());
}

/// A part still streaming in when its upload is aborted (or dropped, or completed) answers
/// NoSuchUpload, as its upload's fate, not a 503 for the backend's vanished directory; and a
/// part refused as stale drops its upload, whose completion would be refused too.
#[tokio::test]
async fn a_part_outlived_by_its_upload_is_no_such_upload() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(crate::backend::fs::FsBackend::open(dir.path(), &["b"]).unwrap());
    let gate = super::test_kit::gate_over(
        BucketPolicy::default(),
        backend,
        Arc::new(MemoryFenceStore::new()),
    );
    let up = gate
        .create_upload(req("m", Some(8)), "alice")
        .await
        .unwrap();
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let first = futures::stream::once(async { Ok(Bytes::from_static(b"half ")) });
    let rest = futures::stream::once(async move {
        let _ = wait.await;
        Ok(Bytes::from_static(b"and the rest"))
    });
    let slow: crate::backend::ByteStream = Box::pin(futures::StreamExt::chain(first, rest));
    let part = {
        let (gate, id) = (gate.clone(), up.id.clone());
        tokio::spawn(async move {
            gate.upload_part("b", "m", &id, 1, Ok(Some(Token(8))), slow, None, || None)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    gate.abort_upload("b", "m", &up.id, Ok(Some(Token(8))))
        .await
        .unwrap();
    go.send(()).unwrap();
    let e = part.await.unwrap().unwrap_err();
    assert_eq!(e.code(), "NoSuchUpload", "{e:?}");

    let up = gate
        .create_upload(req("m", Some(9)), "alice")
        .await
        .unwrap();
    gate.put(req("m", Some(10)), body("newer")).await.unwrap();
    let e = gate
        .upload_part("b", "m", &up.id, 1, Ok(None), body("late"), Some(4), || {
            None
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    assert!(
        gate.upload("b", "m", &up.id).await.is_err(),
        "the doomed upload is dropped"
    );
}

#[tokio::test]
async fn an_adopting_write_judges_its_conditions_against_the_foreign_object() {
    let (gate, backend, _) = gate_with(BucketPolicy {
        on_bypass: crate::config::BypassPolicy::Adopt,
        ..BucketPolicy::default()
    });
    // A foreign object appears where fencegate believes there is none.
    backend.inner.write_behind("b", "k", b"foreign");
    let mut create = req("k", Some(1));
    create.conditions.if_none_match = Some(EtagMatch::Any);
    let e = gate.put(create, body(b"mine")).await.unwrap_err();
    assert_eq!(e.code(), "PreconditionFailed");
    assert_eq!(
        backend.inner.bytes("b", "k").unwrap(),
        Bytes::from_static(b"foreign")
    );
    // If-Match on the version fencegate remembered, after a foreign overwrite: refused.
    let mine = gate.put(req("k", Some(2)), body(b"mine")).await.unwrap();
    backend.inner.write_behind("b", "k", b"foreign again");
    let mut replace = req("k", Some(3));
    let tag = mine.etag.unwrap().trim_matches('"').to_string();
    replace.conditions.if_match = Some(EtagMatch::Tags(vec![tag]));
    let e = gate.put(replace, body(b"late")).await.unwrap_err();
    assert_eq!(e.code(), "PreconditionFailed");
    assert_eq!(
        backend.inner.bytes("b", "k").unwrap(),
        Bytes::from_static(b"foreign again")
    );
}

#[tokio::test]
async fn under_strict_tokens_an_advanced_token_writes_once() {
    let (gate, _, _) = gate_with(BucketPolicy {
        tokens: crate::config::TokenOrder::StrictlyIncreasing,
        ..BucketPolicy::default()
    });
    gate.advance("b", "k", Ok(Some(Token(5))), None)
        .await
        .unwrap();
    gate.put(req("k", Some(5)), body(b"a")).await.unwrap();
    let e = gate.put(req("k", Some(5)), body(b"b")).await.unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    assert_eq!(e.status(), 409);
    // A bound lease grant is the same: its holder writes with the granted token.
    let (t, _) = gate.advance_past("b", "k", 1, None).await.unwrap();
    gate.put(req("k", Some(t.0)), body(b"c")).await.unwrap();
}

#[tokio::test]
async fn a_takeover_header_outside_a_header_scoped_bucket_is_refused() {
    let (gate, backend, _) = gate_with(BucketPolicy::default());
    let mut r = req("k", Some(1));
    r.scope_takeover = Some(b"lockA".to_vec());
    let e = gate.put(r, body(b"x")).await.unwrap_err();
    assert_eq!((e.status(), e.code()), (400, "InvalidFencingScope"));
    assert!(backend.inner.bytes("b", "k").is_none());
}

/// A store whose answers get lost: the commit times out at once, and the request is applied
/// `late` later (if its condition still holds then, as a conditional PutObject would be).
struct LateStore {
    inner: Arc<MemoryBackend>,
    late: Duration,
}

#[async_trait::async_trait]
impl Script for LateStore {
    async fn commit(
        &self,
        _inner: &Arc<dyn Backend>,
        s: &Staged,
        e: Option<&str>,
    ) -> Result<ObjectInfo, BackendError> {
        let (inner, late) = (self.inner.clone(), self.late);
        let staged = handle_copy(s);
        let expected = e.map(str::to_string);
        tokio::spawn(async move {
            tokio::time::sleep(late).await;
            let _ = inner.commit(&staged, expected.as_deref()).await;
        });
        Err(BackendError::Timeout(
            "the store did not answer in time".into(),
        ))
    }
    fn in_flight_bound(&self, _inner: &Arc<dyn Backend>) -> Option<Duration> {
        Some(Duration::from_secs(60))
    }
    async fn discard(&self, _inner: &Arc<dyn Backend>, _s: Staged) {
        // The request in flight still needs its staged body.
    }
}

/// A gate over bucket `b` whose store applies every commit 300 ms after answering with a
/// timeout; also the store behind it and the fence table.
fn late_gate(policy: BucketPolicy) -> (Arc<Gate>, Arc<MemoryBackend>, Arc<MemoryFenceStore>) {
    let inner = Arc::new(MemoryBackend::new());
    let store = Arc::new(MemoryFenceStore::new());
    let mut buckets = BTreeMap::new();
    let late = LateStore {
        inner: inner.clone(),
        late: Duration::from_millis(300),
    };
    let late = Arc::new(Scripted::new(inner.clone(), late));
    buckets.insert("b".to_string(), BucketEntry::new(policy, late));
    (Arc::new(Gate::new(store.clone(), buckets)), inner, store)
}

#[tokio::test]
async fn a_write_whose_answer_was_lost_holds_the_object_until_it_shows() {
    let (gate, inner, store) = late_gate(BucketPolicy::default());
    let e = gate
        .put(req("k", Some(5)), body(b"zombie"))
        .await
        .unwrap_err();
    assert_eq!(e.status(), 504);
    // Before the fix, this delete of the (still) absent key was acknowledged, and the write
    // with token 5 landed after it.
    let e = gate.delete(req("k", Some(6))).await.unwrap_err();
    assert_eq!((e.status(), e.code()), (503, "CommitUnresolved"));
    assert!(e.retry_after().unwrap() >= 1);
    let e = gate.put(req("k", Some(7)), body(b"new")).await.unwrap_err();
    assert_eq!(e.code(), "CommitUnresolved");
    // Across a restart too (the deadline is on the synced row).
    store.lose_unsynced();
    assert_eq!(
        gate.delete(req("k", Some(6))).await.unwrap_err().code(),
        "CommitUnresolved"
    );
    // The late request lands; its outcome shows, and the object is served again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        inner.bytes("b", "k").unwrap(),
        Bytes::from_static(b"zombie")
    );
    let d = gate.delete(req("k", Some(6))).await.unwrap();
    assert_eq!(d.existed, Some(true));
    assert!(inner.bytes("b", "k").is_none());
}

#[tokio::test]
async fn an_adopting_write_sees_an_object_deleted_behind_its_back_as_absent() {
    let (gate, backend, _) = gate_with(BucketPolicy {
        on_bypass: crate::config::BypassPolicy::Adopt,
        ..BucketPolicy::default()
    });
    gate.put(req("k", Some(1)), body(b"mine")).await.unwrap();
    let v = backend.inner.version("b", "k").await.unwrap().unwrap();
    backend.inner.delete("b", "k", &v).await.unwrap();
    // The store holds nothing: "create only if absent" holds, though the row remembers one.
    let mut create = req("k", Some(2));
    create.conditions.if_none_match = Some(EtagMatch::Any);
    gate.put(create, body(b"again")).await.unwrap();
    assert_eq!(
        backend.inner.bytes("b", "k").unwrap(),
        Bytes::from_static(b"again")
    );
}

#[tokio::test]
async fn the_token_and_scope_in_metadata_are_the_gates_own() {
    let (gate, backend, _) = gate_with(BucketPolicy::default());
    let mut r = req("k", None);
    r.token = Ok(Some(Token(7)));
    r.meta.user_meta.insert("fencing-token".into(), "1".into());
    r.meta
        .user_meta
        .insert("fencing-scope".into(), "forged".into());
    gate.put(r, body(b"x")).await.unwrap();
    let info = backend.inner.head("b", "k").await.unwrap().unwrap();
    assert_eq!(info.meta.token, Some(7));
    assert!(info.meta.user_meta.is_empty(), "{:?}", info.meta.user_meta);
}

/// A lost store request lands in its scope, so under a prefix scope every write of the scope,
/// and every advance and bound grant, waits for it, not only its object's.
#[tokio::test]
async fn a_lost_request_holds_its_whole_scope() {
    let (gate, inner, _) = late_gate(BucketPolicy {
        scope: ScopeKind::Prefix,
        prefix_segments: 1,
        ..BucketPolicy::default()
    });
    let e = gate
        .put(req("p/a", Some(5)), body(b"zombie"))
        .await
        .unwrap_err();
    assert_eq!(e.status(), 504);
    let e = gate.delete(req("p/b", Some(6))).await.unwrap_err();
    assert_eq!(e.code(), "CommitUnresolved", "{e}");
    let e = gate
        .advance("b", "p/c", Ok(Some(Token(7))), None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "CommitUnresolved", "{e}");
    let e = gate.advance_past("b", "p/c", 1, None).await.unwrap_err();
    assert_eq!(e.code(), "CommitUnresolved", "{e}");
    // Another scope is not held.
    gate.advance("b", "q/c", Ok(Some(Token(7))), None)
        .await
        .unwrap();
    // Once the request's outcome shows, the scope is free again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        inner.bytes("b", "p/a").unwrap(),
        Bytes::from_static(b"zombie")
    );
    gate.advance("b", "p/c", Ok(Some(Token(7))), None)
        .await
        .unwrap();
}

/// `max_token_jump`: one request cannot fence a scope far ahead (at u64::MAX, say) of what its
/// holders use; measured from 0 on a fresh scope, for writes, deletes and advances alike.
#[tokio::test]
async fn a_token_too_far_ahead_is_refused_when_the_bucket_limits_jumps() {
    let (gate, _, _) = gate_with(BucketPolicy {
        max_token_jump: Some(1000),
        ..BucketPolicy::default()
    });
    let e = gate
        .put(req("k", Some(1001)), body(b"x"))
        .await
        .unwrap_err();
    assert_eq!((e.status(), e.code()), (400, "TokenJumpTooLarge"));
    assert!(e.to_string().contains("max_token_jump"), "{e}");
    gate.put(req("k", Some(5)), body(b"x")).await.unwrap();
    let e = gate
        .advance("b", "k", Ok(Some(Token(u64::MAX))), None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "TokenJumpTooLarge");
    let e = gate.delete(req("k", Some(1006))).await.unwrap_err();
    assert_eq!(e.code(), "TokenJumpTooLarge");
    gate.advance("b", "k", Ok(Some(Token(1005))), None)
        .await
        .unwrap();
    assert_eq!(
        gate.fence_info("b", "k", None).await.unwrap().highest,
        Some(1005)
    );
}

/// A lease name's counter can be far ahead of a scope (the same name bound elsewhere before); a
/// bound grant obeys the bucket's jump limit too.
#[tokio::test]
async fn a_bound_grant_obeys_the_jump_limit() {
    let (gate, _, _) = gate_with(BucketPolicy {
        max_token_jump: Some(10),
        ..BucketPolicy::default()
    });
    let e = gate
        .advance_past("b", "v", 1 << 63, None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "TokenJumpTooLarge");
    assert_eq!(gate.fence_info("b", "v", None).await.unwrap().highest, None);
    let (t, _) = gate.advance_past("b", "v", 3, None).await.unwrap();
    assert_eq!(t.0, 3);
}

#[tokio::test]
async fn a_delete_of_a_key_no_lock_owns_does_not_claim_it() {
    let (gate, backend, _) = gate_with(header_policy());
    // lockA deletes a key nobody ever wrote, with the top token: recorded, not claimed.
    let d = gate
        .delete(scoped("free", u64::MAX, "lockA"))
        .await
        .unwrap();
    assert_eq!(d.existed, Some(false));
    let info = gate.fence_info("b", "free", Some(b"lockA")).await.unwrap();
    assert_eq!(info.highest, Some(u64::MAX));
    assert!(info.tombstone);
    let row = gate.row(&scope::object_row("b", "free")).await.unwrap();
    assert_eq!(row.scope, None);
    // lockA's own zombie stays fenced out by its scope's highest.
    let e = gate
        .put(scoped("free", 5, "lockA"), body(b"z"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    // Another lock writes it with no takeover and owns it from then on.
    gate.put(scoped("free", 1, "lockB"), body(b"b1"))
        .await
        .unwrap();
    assert_eq!(
        backend.inner.bytes("b", "free").unwrap(),
        Bytes::from_static(b"b1")
    );
    let e = gate
        .put(scoped("free", u64::MAX, "lockA"), body(b"x"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "FencingScopeMismatch");
    // A delete of a bound object keeps the binding, absent or not.
    gate.delete(scoped("free", 2, "lockB")).await.unwrap();
    gate.delete(scoped("free", 3, "lockB")).await.unwrap();
    let e = gate
        .put(scoped("free", 1, "lockC"), body(b"x"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "FencingScopeMismatch");
}

/// A backend whose CreateMultipartUpload takes a while (a slow store).
struct SlowCreate;

#[async_trait::async_trait]
impl Script for SlowCreate {
    async fn create_upload(
        &self,
        inner: &Arc<dyn Backend>,
        bucket: &str,
        key: &str,
        meta: &crate::backend::ObjectMeta,
    ) -> Result<String, BackendError> {
        tokio::time::sleep(Duration::from_millis(50)).await;
        inner.create_upload(bucket, key, meta).await
    }
}

/// A gate over an fs backend whose creates are slow, and the directory it lives in.
fn upload_gate(limits: UploadLimits) -> (Arc<Gate>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let fs = crate::backend::fs::FsBackend::open(dir.path(), &["b", "c"]).unwrap();
    let backend = Arc::new(Scripted::new(Arc::new(fs), SlowCreate));
    let mut buckets = BTreeMap::new();
    for b in ["b", "c"] {
        buckets.insert(
            b.to_string(),
            BucketEntry::new(BucketPolicy::default(), backend.clone()),
        );
    }
    let gate =
        Arc::new(Gate::new(Arc::new(MemoryFenceStore::new()), buckets).with_upload_limits(limits));
    (gate, dir)
}

#[tokio::test]
async fn open_uploads_are_bounded_per_key_over_every_bucket_and_creates_at_once() {
    let (gate, _dir) = upload_gate(UploadLimits {
        per_key: 5,
        per_bucket: 7,
        ..UploadLimits::default()
    });
    // Twenty at once against a bound of five: five pass, however they interleave.
    let creates: Vec<_> = (0..20)
        .map(|i| {
            let gate = gate.clone();
            tokio::spawn(async move {
                gate.create_upload(req(&format!("k{i}"), Some(1)), "alice")
                    .await
            })
        })
        .collect();
    let mut passed = 0;
    for c in creates {
        match c.await.unwrap() {
            Ok(_) => passed += 1,
            Err(e) => assert_eq!((e.status(), e.code()), (400, "TooManyUploads")),
        }
    }
    assert_eq!(passed, 5);
    // The bound is the key's, in every bucket.
    let mut other = req("x", Some(1));
    other.bucket = "c".into();
    let e = gate.create_upload(other, "alice").await.unwrap_err();
    assert_eq!(e.code(), "TooManyUploads");
    // The bucket's bound counts every key.
    gate.create_upload(req("y", Some(1)), "bob").await.unwrap();
    gate.create_upload(req("z", Some(1)), "bob").await.unwrap();
    let e = gate
        .create_upload(req("w", Some(1)), "carol")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("max_uploads_per_bucket"), "{e}");
}

#[tokio::test]
async fn a_create_whose_client_hangs_up_is_recorded_and_counted() {
    let (gate, _dir) = upload_gate(UploadLimits {
        per_key: 1,
        ..UploadLimits::default()
    });
    // The client goes away while the store creates the upload.
    let create = gate.create_upload(req("k", Some(1)), "alice");
    assert!(tokio::time::timeout(Duration::from_millis(10), create)
        .await
        .is_err());
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The upload the store made has its record: it counts against the bound, and expires.
    assert_eq!(gate.uploads("b", "").await.unwrap().len(), 1);
    let e = gate
        .create_upload(req("k2", Some(1)), "alice")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "TooManyUploads");
}

/// A rewrite of an object read whole (a change of its tags) lands only on the very version it
/// read: a newer write of the same bytes with other metadata, landing in between, has the same
/// ETag, and the rewrite must not undo its metadata (412, the newer write kept).
#[tokio::test]
async fn a_rewrite_never_undoes_a_newer_write_of_the_same_bytes() {
    let (gate, _, _) = gate_with(BucketPolicy::default());
    let mut first = req("k", Some(1));
    first.meta.content_type = Some("text/one".into());
    gate.put(first, body(b"same")).await.unwrap();
    let (read, bytes) = gate.get("b", "k").await.unwrap();
    // The newer write: the same bytes, another content type.
    let mut newer = req("k", Some(2));
    newer.meta.content_type = Some("text/two".into());
    gate.put(newer, body(b"same")).await.unwrap();
    let mut rewrite = req("k", Some(3));
    rewrite.meta = read.meta.clone();
    rewrite.meta.tags.insert("t".into(), "1".into());
    rewrite.conditions.if_match = Some(EtagMatch::Tags(vec![read
        .etag
        .trim_matches('"')
        .to_string()]));
    rewrite.conditions.if_unchanged = Some(Box::new(read));
    let e = gate.put(rewrite, bytes).await.unwrap_err();
    assert_eq!(e.code(), "PreconditionFailed");
    let now = gate.head("b", "k").await.unwrap();
    assert_eq!(now.meta.content_type.as_deref(), Some("text/two"));
    assert!(now.meta.tags.is_empty());
}
