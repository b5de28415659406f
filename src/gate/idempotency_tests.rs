//! Idempotency-Key against the in-memory doubles: a retry is replayed and changes nothing, a
//! different request under the same key is refused, a retry while the first is still being
//! received gets 409, and deletes are replayed too, and answers expire.
//! Power loss at every step is in `crash_tests.rs`, multipart completions in
//! `tests/it/s3/gateway.rs`, several instances in `tests/it/cluster/protocol.rs`.

use super::test_kit::body;
use super::*;
use crate::backend::memory::MemoryBackend;
use crate::backend::ByteStream;
use crate::config::{BucketPolicy, TokenOrder};
use crate::fence::memory::MemoryFenceStore;
use bytes::Bytes;

fn gate_with(policy: BucketPolicy) -> (Arc<Gate>, Arc<MemoryBackend>) {
    let backend = Arc::new(MemoryBackend::new());
    let store = Arc::new(MemoryFenceStore::new());
    (
        super::test_kit::gate_over(policy, backend.clone(), store),
        backend,
    )
}

fn keyed(key: &str, token: u64, idem: Option<&str>) -> WriteRequest {
    WriteRequest {
        bucket: "b".into(),
        key: key.into(),
        token: Ok(Some(Token(token))),
        scope_header: None,
        scope_takeover: None,
        conditions: Conditions::default(),
        meta: ObjectMeta::default(),
        idempotency: idem.map(|k| Idempotency::from_header("key:test", k.as_bytes()).unwrap()),
    }
}

fn commits_of(backend: &MemoryBackend, token: u64) -> usize {
    backend
        .history()
        .iter()
        .filter(|t| **t == Some(token))
        .count()
}

#[tokio::test]
async fn a_retry_is_replayed_once_and_even_after_a_newer_token() {
    let (g, backend) = gate_with(BucketPolicy::default());
    let first = g.put(keyed("o", 5, Some("k1")), body(b"v1")).await.unwrap();
    assert!(!first.replayed);
    let again = g.put(keyed("o", 5, Some("k1")), body(b"v1")).await.unwrap();
    assert!(again.replayed);
    assert_eq!(
        (again.etag.as_deref(), again.token, again.size),
        (first.etag.as_deref(), Some(5), 2)
    );
    assert_eq!(commits_of(&backend, 5), 1, "exactly one commit");
    // A newer holder writes; the old request's retry still gets its own first answer (the
    // write did happen), and nothing is written.
    g.put(keyed("o", 6, None), body(b"v2")).await.unwrap();
    let late = g.put(keyed("o", 5, Some("k1")), body(b"v1")).await.unwrap();
    assert!(late.replayed);
    assert_eq!(late.etag, first.etag);
    assert_eq!(commits_of(&backend, 5), 1);
    assert_eq!(backend.bytes("b", "o").unwrap(), Bytes::from_static(b"v2"));
    // Without the key the same stale write is refused.
    let e = g.put(keyed("o", 5, None), body(b"v1")).await.unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    // The negative control: another key is another request, refused as stale too.
    let e = g
        .put(keyed("o", 5, Some("k2")), body(b"v1"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
}

#[tokio::test]
async fn the_same_key_for_another_request_is_422_and_changes_nothing() {
    let (g, backend) = gate_with(BucketPolicy::default());
    g.put(keyed("o", 5, Some("k")), body(b"v1")).await.unwrap();
    for (token, bytes) in [(5, &b"other"[..]), (6, &b"v1"[..])] {
        let e = g
            .put(keyed("o", token, Some("k")), body(bytes))
            .await
            .unwrap_err();
        assert_eq!((e.status(), e.code()), (422, "IdempotencyKeyMismatch"));
    }
    let e = g.delete(keyed("o", 6, Some("k"))).await.unwrap_err();
    assert_eq!(e.code(), "IdempotencyKeyMismatch");
    assert_eq!(backend.bytes("b", "o").unwrap(), Bytes::from_static(b"v1"));
    assert_eq!(backend.history(), vec![Some(5)]);
    assert_eq!(
        g.fence_info("b", "o", None).await.unwrap().highest,
        Some(5),
        "a refused retry records no token"
    );
}

#[tokio::test]
async fn keys_belong_to_their_principal() {
    let (g, backend) = gate_with(BucketPolicy::default());
    g.put(keyed("o", 5, Some("k")), body(b"v1")).await.unwrap();
    let mut other = keyed("o", 5, None);
    other.idempotency = Some(Idempotency::from_header("key:other", b"k").unwrap());
    let w = g.put(other, body(b"v1")).await.unwrap();
    assert!(!w.replayed, "another principal's key is another key");
    assert_eq!(commits_of(&backend, 5), 2);
}

#[tokio::test]
async fn a_retry_while_the_first_is_received_is_409_and_then_replayed() {
    let (g, backend) = gate_with(BucketPolicy::default());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    // A body that ends only when told: the first request is still being received.
    let slow: ByteStream = Box::pin(futures::stream::unfold(Some(rx), |rx| async move {
        let rx = rx?;
        let _ = rx.await;
        Some((Ok(Bytes::from_static(b"v1")), None))
    }));
    let first = {
        let g = Arc::clone(&g);
        tokio::spawn(async move { g.put(keyed("o", 5, Some("k")), slow).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let e = g
        .put(keyed("o", 5, Some("k")), body(b"v1"))
        .await
        .unwrap_err();
    assert_eq!((e.status(), e.code()), (409, "IdempotencyKeyInUse"));
    assert_eq!(e.retry_after(), Some(1));
    tx.send(()).unwrap();
    let first = first.await.unwrap().unwrap();
    let again = g.put(keyed("o", 5, Some("k")), body(b"v1")).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.etag, first.etag);
    assert_eq!(commits_of(&backend, 5), 1);
}

#[tokio::test]
async fn a_client_that_hangs_up_then_retries_gets_one_commit() {
    let (g, backend) = gate_with(BucketPolicy::default());
    // The client hangs up once the body is read: its commit runs to its end anyway.
    let first = {
        let g = Arc::clone(&g);
        tokio::spawn(async move { g.put(keyed("o", 5, Some("k")), body(b"v1")).await })
    };
    first.abort();
    let _ = first.await;
    let mut retry = None;
    for _ in 0..100 {
        let w = g.put(keyed("o", 5, Some("k")), body(b"v1")).await;
        match w {
            Err(e) if e.code() == "IdempotencyKeyInUse" => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await
            }
            other => {
                retry = Some(other.unwrap());
                break;
            }
        }
    }
    let retry = retry.expect("the key was released");
    assert_eq!(commits_of(&backend, 5), 1, "{retry:?}");
}

#[tokio::test]
async fn deletes_are_replayed_with_their_first_answer() {
    let (g, _) = gate_with(BucketPolicy::default());
    g.put(keyed("o", 5, None), body(b"v1")).await.unwrap();
    let first = g.delete(keyed("o", 6, Some("d"))).await.unwrap();
    assert_eq!(first.existed, Some(true));
    let again = g.delete(keyed("o", 6, Some("d"))).await.unwrap();
    assert!(again.replayed);
    assert_eq!(
        again.existed,
        Some(true),
        "replayed, not re-run on an absent key"
    );
    // An absent key: fenced and answered once as well.
    let absent = g.delete(keyed("gone", 3, Some("a"))).await.unwrap();
    assert_eq!((absent.existed, absent.replayed), (Some(false), false));
    let again = g.delete(keyed("gone", 3, Some("a"))).await.unwrap();
    assert_eq!((again.existed, again.replayed), (Some(false), true));
    // The tombstone kept the answer and the token.
    let info = g.fence_info("b", "o", None).await.unwrap();
    assert_eq!((info.highest, info.tombstone), (Some(6), true));
}

#[tokio::test]
async fn strict_tokens_replay_instead_of_refusing_the_spent_token() {
    let policy = BucketPolicy {
        tokens: TokenOrder::StrictlyIncreasing,
        ..BucketPolicy::default()
    };
    let (g, backend) = gate_with(policy);
    g.put(keyed("o", 5, Some("k")), body(b"v1")).await.unwrap();
    let again = g.put(keyed("o", 5, Some("k")), body(b"v1")).await.unwrap();
    assert!(again.replayed, "a retry is not a second use of the token");
    assert_eq!(commits_of(&backend, 5), 1);
}

#[tokio::test]
async fn answers_expire() {
    let (g, backend) = gate_with(BucketPolicy::default());
    let g = Arc::new(
        Arc::try_unwrap(g)
            .ok()
            .unwrap()
            .with_idempotency_ttl(std::time::Duration::from_millis(100)),
    );
    g.put(keyed("o", 5, Some("k")), body(b"v1")).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    let w = g.put(keyed("o", 5, Some("k")), body(b"v1")).await.unwrap();
    assert!(!w.replayed, "an expired key is used afresh");
    assert_eq!(commits_of(&backend, 5), 2);
}

/// A gate over `store` (shared with an earlier gate, as after a restart) and `backend`.
fn gate_on(
    store: Arc<MemoryFenceStore>,
    backend: Arc<MemoryBackend>,
    policy: BucketPolicy,
) -> Arc<Gate> {
    let mut buckets = BTreeMap::new();
    buckets.insert("b".to_string(), BucketEntry::new(policy, backend));
    Arc::new(Gate::new(store, buckets))
}

/// A request that landed but whose outcome was not recorded (a crash after the store's answer:
/// the lazily written outcome is lost, the intent with its answer stays) is replayed to its
/// retry on a strictly-increasing bucket, where the early token check would refuse its token as
/// spent; and the replay records the answer, so that every later retry is replayed too.
#[tokio::test]
async fn a_landed_answer_on_the_intent_is_replayed_before_the_token_and_kept() {
    let strict = BucketPolicy {
        tokens: TokenOrder::StrictlyIncreasing,
        ..BucketPolicy::default()
    };
    let store = Arc::new(MemoryFenceStore::new());
    let backend = Arc::new(MemoryBackend::new());
    let g = gate_on(store.clone(), backend.clone(), strict.clone());
    let first = g.put(keyed("o", 5, Some("k")), body(b"v1")).await.unwrap();
    store.lose_unsynced();
    let row = store.get("object:b/o").await.unwrap().unwrap();
    assert!(row.pending.is_some(), "the crash left the intent: {row:?}");
    let g = gate_on(store.clone(), backend.clone(), strict.clone());
    let again = g.put(keyed("o", 5, Some("k")), body(b"v1")).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.etag, first.etag);
    // The replay recorded the outcome (synced): a second crash keeps it.
    store.lose_unsynced();
    let row = store.get("object:b/o").await.unwrap().unwrap();
    assert!(row.pending.is_none() && row.answered.len() == 1, "{row:?}");
    let g = gate_on(store.clone(), backend.clone(), strict);
    assert!(
        g.put(keyed("o", 5, Some("k")), body(b"v1"))
            .await
            .unwrap()
            .replayed
    );
    assert_eq!(commits_of(&backend, 5), 1);
    let e = g.put(keyed("o", 5, None), body(b"v1")).await.unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken", "the token itself is spent");
}

/// A keyed delete without a token (fencing optional) of an absent key records its answer, so
/// that its retry does not delete the object created since.
#[tokio::test]
async fn an_unfenced_keyed_delete_of_an_absent_key_is_replayed() {
    let optional = BucketPolicy {
        fencing: crate::config::FencingMode::Optional,
        ..BucketPolicy::default()
    };
    let (g, backend) = gate_with(optional);
    let unfenced = |idem: Option<&str>| WriteRequest {
        token: Ok(None),
        ..keyed("o", 0, idem)
    };
    let first = g.delete(unfenced(Some("d"))).await.unwrap();
    assert_eq!(first.existed, Some(false));
    g.put(unfenced(None), body(b"created")).await.unwrap();
    let again = g.delete(unfenced(Some("d"))).await.unwrap();
    assert_eq!((again.replayed, again.existed), (true, Some(false)));
    assert_eq!(
        backend.bytes("b", "o").unwrap(),
        Bytes::from_static(b"created")
    );
}

/// What the key is matched on includes the lock (Fencing-Scope), the metadata and the
/// conditions, not only the body and token.
#[tokio::test]
async fn the_lock_metadata_and_conditions_are_part_of_the_request() {
    let header = BucketPolicy {
        scope: crate::config::ScopeKind::Header,
        ..BucketPolicy::default()
    };
    let (g, _) = gate_with(header);
    let under = |lock: &str| WriteRequest {
        scope_header: Some(lock.as_bytes().to_vec()),
        ..keyed("o", 5, Some("k"))
    };
    g.put(under("A"), body(b"v1")).await.unwrap();
    let e = g.put(under("B"), body(b"v1")).await.unwrap_err();
    assert_eq!(e.code(), "IdempotencyKeyMismatch", "another lock: {e}");
    let mut typed = under("A");
    typed.meta.content_type = Some("text/plain".into());
    let e = g.put(typed, body(b"v1")).await.unwrap_err();
    assert_eq!(e.code(), "IdempotencyKeyMismatch", "other metadata: {e}");
    let mut conditional = under("A");
    conditional.conditions.if_none_match = Some(EtagMatch::Any);
    let e = g.put(conditional, body(b"v1")).await.unwrap_err();
    assert_eq!(e.code(), "IdempotencyKeyMismatch", "other conditions: {e}");
    assert!(g.put(under("A"), body(b"v1")).await.unwrap().replayed);
}
