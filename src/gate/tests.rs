//! The gate's rules against the in-memory doubles: every error-table row, the token rules, the
//! commit protocol's ordering, tombstones, bypass detection and power loss.

use super::test_kit::{body, req};
use super::*;
use crate::backend::memory::MemoryBackend;
use crate::backend::{BodyError, ByteStream};
use crate::config::{BucketPolicy, BypassPolicy, FencingMode, ScopeKind, TokenOrder};
use crate::fence::memory::MemoryFenceStore;
use bytes::Bytes;
use futures::StreamExt;

struct Fixture {
    gate: Arc<Gate>,
    store: Arc<MemoryFenceStore>,
    backend: Arc<MemoryBackend>,
}

fn fixture(policy: BucketPolicy) -> Fixture {
    let store = Arc::new(MemoryFenceStore::new());
    let backend = Arc::new(MemoryBackend::new());
    Fixture {
        gate: super::test_kit::gate_over(policy, backend.clone(), store.clone()),
        store,
        backend,
    }
}

fn default_fixture() -> Fixture {
    fixture(BucketPolicy::default())
}

/// A body that fails the test if the gate reads it.
fn untouchable() -> ByteStream {
    Box::pin(futures::stream::poll_fn(
        |_| -> std::task::Poll<Option<Result<Bytes, BodyError>>> {
            panic!("the body of a rejected write must not be read")
        },
    ))
}

impl Fixture {
    async fn put(
        &self,
        key: &str,
        token: Option<u64>,
        bytes: &'static [u8],
    ) -> Result<Written, GateError> {
        self.gate.put(req(key, token), body(bytes)).await
    }
    async fn highest(&self, key: &str) -> Option<u64> {
        self.gate.fence_info("b", key, None).await.unwrap().highest
    }
}

#[tokio::test]
async fn stale_token_is_409_with_the_highest_and_changes_nothing() {
    let f = default_fixture();
    f.put("k", Some(34), b"B").await.unwrap();
    let e = f
        .gate
        .put(req("k", Some(33)), untouchable())
        .await
        .unwrap_err();
    assert_eq!(
        (e.status(), e.code(), e.highest()),
        (409, "StaleFencingToken", Some(34))
    );
    assert_eq!(f.backend.bytes("b", "k").unwrap(), &b"B"[..]);
    assert_eq!(f.highest("k").await, Some(34));
}

#[tokio::test]
async fn error_table_rows() {
    let f = default_fixture();
    let missing = f.gate.put(req("k", None), untouchable()).await.unwrap_err();
    assert_eq!(
        (missing.status(), missing.code()),
        (428, "FencingTokenRequired")
    );

    let mut bad = req("k", None);
    bad.token = Err(TokenError::NotDigits("0x10".into()));
    let e = f.gate.put(bad, untouchable()).await.unwrap_err();
    assert_eq!((e.status(), e.code()), (400, "InvalidFencingToken"));

    let mut nobucket = req("k", Some(1));
    nobucket.bucket = "nope".into();
    let e = f.gate.put(nobucket, untouchable()).await.unwrap_err();
    assert_eq!((e.status(), e.code()), (404, "NoSuchBucket"));

    let e = f.gate.get("b", "absent").await.err().unwrap();
    assert_eq!((e.status(), e.code()), (404, "NoSuchKey"));

    // If-Match on an object that does not exist is S3's 404; on one with another ETag, 412.
    let mut cond = req("k", Some(1));
    cond.conditions.if_match = EtagMatch::parse("\"nope\"");
    let e = f.gate.put(cond, body(b"x")).await.unwrap_err();
    assert_eq!((e.status(), e.code()), (404, "NoSuchKey"));
    f.gate.put(req("k", Some(1)), body(b"x")).await.unwrap();
    let mut cond = req("k", Some(2));
    cond.conditions.if_match = EtagMatch::parse("\"nope\"");
    let e = f.gate.put(cond, body(b"x")).await.unwrap_err();
    assert_eq!((e.status(), e.code()), (412, "PreconditionFailed"));

    let e = f
        .gate
        .put(req("a/../b", Some(1)), untouchable())
        .await
        .unwrap_err();
    assert_eq!((e.status(), e.code()), (400, "InvalidKey"));

    f.backend.fail_next_commit();
    let e = f.put("k", Some(5), b"x").await.unwrap_err();
    assert_eq!((e.status(), e.code()), (502, "BackendUnavailable"));
    // Contract line 7: a backend failure leaves the fence at the recorded token, and the
    // holder may retry with the same token.
    assert_eq!(f.highest("k").await, Some(5));
    f.put("k", Some(5), b"retry").await.unwrap();
    assert_eq!(f.backend.bytes("b", "k").unwrap(), &b"retry"[..]);
    // None of the refusals above left anything behind.
    assert_eq!(f.backend.staged_count(), 0);
}

#[tokio::test]
async fn if_none_match_star_creates_only() {
    let f = default_fixture();
    let mut create = req("k", Some(1));
    create.conditions.if_none_match = Some(EtagMatch::Any);
    f.gate.put(create, body(b"first")).await.unwrap();
    let mut again = req("k", Some(2));
    again.conditions.if_none_match = Some(EtagMatch::Any);
    let e = f.gate.put(again, body(b"second")).await.unwrap_err();
    assert_eq!(e.code(), "PreconditionFailed");
    // A refused precondition records nothing, not even the higher token.
    assert_eq!(f.highest("k").await, Some(1));
}

#[tokio::test]
async fn equal_tokens_pass_unless_strict() {
    let f = default_fixture();
    f.put("k", Some(7), b"1").await.unwrap();
    f.put("k", Some(7), b"2").await.unwrap();
    let strict = fixture(BucketPolicy {
        tokens: TokenOrder::StrictlyIncreasing,
        ..BucketPolicy::default()
    });
    strict.put("k", Some(7), b"1").await.unwrap();
    let e = strict.put("k", Some(7), b"2").await.unwrap_err();
    assert_eq!((e.status(), e.code()), (409, "StaleFencingToken"));
    strict.put("k", Some(8), b"3").await.unwrap();
}

#[tokio::test]
async fn optional_and_off_modes() {
    let opt = fixture(BucketPolicy {
        fencing: FencingMode::Optional,
        ..BucketPolicy::default()
    });
    opt.put("k", None, b"unfenced").await.unwrap();
    opt.put("k", Some(10), b"fenced").await.unwrap();
    assert_eq!(
        opt.put("k", Some(9), b"x").await.unwrap_err().code(),
        "StaleFencingToken"
    );
    let mut bad = req("k", None);
    bad.token = Err(TokenError::Empty);
    assert_eq!(
        opt.gate.put(bad, body(b"x")).await.unwrap_err().code(),
        "InvalidFencingToken"
    );

    let off = fixture(BucketPolicy {
        fencing: FencingMode::Off,
        ..BucketPolicy::default()
    });
    off.put("k", Some(10), b"a").await.unwrap();
    off.put("k", Some(3), b"b").await.unwrap();
    off.put("k", None, b"c").await.unwrap();
    assert_eq!(off.backend.bytes("b", "k").unwrap(), &b"c"[..]);
    assert_eq!(off.highest("k").await, None);
}

#[tokio::test]
async fn tombstones_keep_the_token() {
    let f = default_fixture();
    f.put("k", Some(30), b"v").await.unwrap();
    f.gate.delete(req("k", Some(34))).await.unwrap();
    assert!(f.backend.bytes("b", "k").is_none());
    let info = f.gate.fence_info("b", "k", None).await.unwrap();
    assert!(info.tombstone);
    assert_eq!(info.highest, Some(34));
    assert_eq!(
        f.put("k", Some(33), b"zombie").await.unwrap_err().code(),
        "StaleFencingToken"
    );
    f.put("k", Some(34), b"again").await.unwrap();
    assert!(!f.gate.fence_info("b", "k", None).await.unwrap().tombstone);
    // Deleting an absent object is acknowledged, and its token and tombstone are recorded.
    let d = f.gate.delete(req("never", Some(99))).await.unwrap();
    assert_eq!(d.existed, Some(false));
    assert_eq!(f.highest("never").await, Some(99));
    assert!(
        f.gate
            .fence_info("b", "never", None)
            .await
            .unwrap()
            .tombstone
    );
    // A stale delete is refused like a stale write.
    let e = f.gate.delete(req("k", Some(1))).await.unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    assert!(f.backend.bytes("b", "k").is_some());
}

#[tokio::test]
async fn writes_behind_the_gate_are_not_overwritten() {
    let f = default_fixture();
    f.put("k", Some(1), b"ours").await.unwrap();
    f.backend.write_behind("b", "k", b"theirs");
    let e = f.put("k", Some(2), b"new").await.unwrap_err();
    assert_eq!((e.status(), e.code()), (409, "BypassDetected"));
    assert_eq!(f.backend.bytes("b", "k").unwrap(), &b"theirs"[..]);
    assert_eq!(
        f.highest("k").await,
        Some(1),
        "a rejected write records nothing"
    );
    // An object created behind the gate for a key it never saw is caught too.
    f.backend.write_behind("b", "fresh", b"theirs");
    assert_eq!(
        f.put("fresh", Some(1), b"x").await.unwrap_err().code(),
        "BypassDetected"
    );

    let adopt = fixture(BucketPolicy {
        on_bypass: BypassPolicy::Adopt,
        ..BucketPolicy::default()
    });
    adopt.put("k", Some(1), b"ours").await.unwrap();
    adopt.backend.write_behind("b", "k", b"theirs");
    adopt.put("k", Some(2), b"new").await.unwrap();
    assert_eq!(adopt.backend.bytes("b", "k").unwrap(), &b"new"[..]);
}

#[tokio::test]
async fn prefix_bucket_and_header_scopes() {
    let f = fixture(BucketPolicy {
        scope: ScopeKind::Prefix,
        prefix_segments: 1,
        ..BucketPolicy::default()
    });
    f.put("acme/a", Some(5), b"x").await.unwrap();
    assert_eq!(
        f.put("acme/b", Some(4), b"x").await.unwrap_err().code(),
        "StaleFencingToken"
    );
    f.put("other/b", Some(1), b"x").await.unwrap();
    assert_eq!(
        f.gate
            .fence_info("b", "acme/zzz", None)
            .await
            .unwrap()
            .scope,
        "prefix:b/acme"
    );

    let h = fixture(BucketPolicy {
        scope: ScopeKind::Header,
        ..BucketPolicy::default()
    });
    let with_scope = |key: &str, t: u64, s: &str| {
        let mut r = req(key, Some(t));
        r.scope_header = Some(s.as_bytes().to_vec());
        r
    };
    h.gate
        .put(with_scope("x", 10, "job-1"), body(b"a"))
        .await
        .unwrap();
    let e = h
        .gate
        .put(with_scope("y", 9, "job-1"), body(b"a"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    h.gate
        .put(with_scope("y", 1, "job-2"), body(b"a"))
        .await
        .unwrap();
    let e = h.put("z", Some(1), b"a").await.unwrap_err();
    assert_eq!((e.status(), e.code()), (400, "InvalidFencingScope"));
}

#[tokio::test]
async fn advance_fences_out_the_old_holder() {
    let f = default_fixture();
    f.put("k", Some(33), b"A").await.unwrap();
    let info = f
        .gate
        .advance("b", "k", Ok(Some(Token(34))), None)
        .await
        .unwrap();
    assert_eq!(info.highest, Some(34));
    assert_eq!(
        f.put("k", Some(33), b"A2").await.unwrap_err().code(),
        "StaleFencingToken"
    );
    assert_eq!(f.backend.bytes("b", "k").unwrap(), &b"A"[..]);
    let e = f
        .gate
        .advance("b", "k", Ok(Some(Token(20))), None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken");
    let e = f.gate.advance("b", "k", Ok(None), None).await.unwrap_err();
    assert_eq!(e.code(), "FencingTokenRequired");
}

#[tokio::test]
async fn acknowledged_tokens_survive_power_loss() {
    let f = default_fixture();
    f.put("k", Some(40), b"v").await.unwrap();
    f.gate
        .advance("b", "j", Ok(Some(Token(50))), None)
        .await
        .unwrap();
    f.gate.delete(req("k", Some(41))).await.unwrap();
    f.store.lose_unsynced();
    assert_eq!(f.highest("k").await, Some(41));
    assert_eq!(f.highest("j").await, Some(50));
    assert_eq!(
        f.put("k", Some(40), b"z").await.unwrap_err().code(),
        "StaleFencingToken"
    );
}

#[tokio::test]
async fn a_crash_between_commit_and_bookkeeping_is_not_mistaken_for_a_bypass() {
    let f = default_fixture();
    f.put("k", Some(1), b"v1").await.unwrap();
    // Lose the lazy row update that follows the backend commit of v2.
    f.put("k", Some(2), b"v2").await.unwrap();
    f.store.lose_unsynced();
    f.put("k", Some(3), b"v3").await.unwrap();
    assert_eq!(f.backend.bytes("b", "k").unwrap(), &b"v3"[..]);
}

#[tokio::test]
async fn concurrent_random_tokens_commit_in_order() {
    use rand::{Rng, SeedableRng};
    let f = default_fixture();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let token = rng.random_range(0..60u64);
        let gate = f.gate.clone();
        tasks.push(tokio::spawn(async move {
            // Yield mid-body so writers interleave between the early check and the commit.
            let chunks =
                futures::stream::iter([Ok(Bytes::from(token.to_string()))]).then(|c| async move {
                    tokio::task::yield_now().await;
                    c
                });
            (
                token,
                gate.put(req("k", Some(token)), Box::pin(chunks)).await,
            )
        }));
    }
    let mut accepted = 0;
    for t in tasks {
        let (token, result) = t.await.unwrap();
        match result {
            Ok(w) => {
                accepted += 1;
                assert_eq!(w.token, Some(token));
            }
            Err(e) => assert_eq!(e.code(), "StaleFencingToken"),
        }
    }
    let history: Vec<u64> = f
        .backend
        .history()
        .into_iter()
        .map(Option::unwrap)
        .collect();
    assert_eq!(history.len(), accepted);
    assert!(
        history.windows(2).all(|w| w[0] <= w[1]),
        "commit order {history:?}"
    );
    let last = history.last().unwrap().to_string();
    assert_eq!(f.backend.bytes("b", "k").unwrap(), last.as_bytes());
    assert_eq!(f.highest("k").await, history.last().copied());
}
