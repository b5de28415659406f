//! The lease rules against the in-memory doubles: strictly increasing tokens (also under
//! concurrent acquires and after power loss), holding, waiting, renewing, releasing, binding,
//! credentials and bad input.

use super::tests_kit::{acquire, proof};
use super::*;
use crate::backend::memory::MemoryBackend;
use crate::config::BucketPolicy;
use crate::fence::memory::MemoryFenceStore;
use crate::fence::scripted::{Script, Scripted};
use crate::gate::{BucketEntry, WriteRequest};
use crate::token::Token;
use std::collections::BTreeMap;

fn leases() -> (Arc<Leases>, Arc<Gate>, Arc<MemoryFenceStore>) {
    let store = Arc::new(MemoryFenceStore::new());
    let mut buckets = BTreeMap::new();
    buckets.insert(
        "b".to_string(),
        BucketEntry::new(BucketPolicy::default(), Arc::new(MemoryBackend::new())),
    );
    let gate = Arc::new(Gate::new(store.clone(), buckets));
    let leases = Arc::new(Leases::new(
        gate.clone(),
        store.clone(),
        Duration::from_millis(300),
    ));
    (leases, gate, store)
}

#[tokio::test]
async fn tokens_only_grow_and_a_held_lease_is_refused() {
    let (l, _, _) = leases();
    let a = l.acquire(acquire("job", "a", 60_000)).await.unwrap();
    assert_eq!(a.token, 1);
    let err = l.acquire(acquire("job", "b", 60_000)).await.unwrap_err();
    assert_eq!(err.code(), "LeaseHeld");
    assert!(err.retry_after().unwrap() >= 59);
    l.release("job", &proof("a", &a)).await.unwrap();
    // Releasing twice, or as someone else, is refused.
    assert_eq!(
        l.release("job", &proof("a", &a)).await.unwrap_err().code(),
        "NoSuchLease"
    );
    let b = l.acquire(acquire("job", "b", 60_000)).await.unwrap();
    assert_eq!(b.token, 2);
    assert_eq!(
        l.renew("job", &proof("a", &a), Duration::from_secs(1))
            .await
            .unwrap_err()
            .code(),
        "NotLeaseHolder"
    );
    assert_eq!(
        l.release("job", &proof("b", &a)).await.unwrap_err().code(),
        "NotLeaseHolder"
    );
    // Names are independent counters.
    assert_eq!(
        l.acquire(acquire("other", "a", 1000)).await.unwrap().token,
        1
    );
}

#[tokio::test]
async fn expiry_frees_the_lease_and_a_waiter_gets_it() {
    let (l, _, _) = leases();
    let a = l.acquire(acquire("job", "a", 200)).await.unwrap();
    let waiter = {
        let l = l.clone();
        tokio::spawn(async move {
            let mut req = acquire("job", "b", 1000);
            req.wait = Duration::from_secs(5);
            l.acquire(req).await
        })
    };
    // b is woken by a's expiry, not by a release.
    let b = waiter.await.unwrap().unwrap();
    assert_eq!(b.token, a.token + 1);
    assert_eq!(
        l.renew("job", &proof("a", &a), Duration::from_secs(1))
            .await
            .unwrap_err()
            .code(),
        "NotLeaseHolder"
    );
    // A release wakes a waiter at once.
    let waiter = {
        let l = l.clone();
        tokio::spawn(async move {
            let mut req = acquire("job", "c", 1000);
            req.wait = Duration::from_secs(30);
            l.acquire(req).await
        })
    };
    tokio::task::yield_now().await;
    l.release("job", &proof("b", &b)).await.unwrap();
    assert_eq!(waiter.await.unwrap().unwrap().token, b.token + 1);
}

#[tokio::test]
async fn concurrent_acquires_get_distinct_increasing_tokens_that_survive_power_loss() {
    let (l, gate, store) = leases();
    let mut tasks = Vec::new();
    for i in 0..32 {
        let l = l.clone();
        tasks.push(tokio::spawn(async move {
            // Each holder releases at once, so every acquire succeeds.
            let g = l
                .acquire(acquire("hot", &format!("w{i}"), 60_000))
                .await
                .unwrap();
            l.release("hot", &proof(&g.holder, &g)).await.unwrap();
            g.token
        }));
    }
    let mut tokens = Vec::new();
    for t in tasks {
        tokens.push(t.await.unwrap());
    }
    tokens.sort();
    assert_eq!(tokens, (1..=32).collect::<Vec<_>>());
    // Every granted token was synced: after power loss the next one is still higher.
    store.lose_unsynced();
    let l2 = Leases::new(gate, store, Duration::from_secs(1));
    assert_eq!(
        l2.acquire(acquire("hot", "x", 1000)).await.unwrap().token,
        33
    );
}

#[tokio::test]
async fn a_bound_lease_fences_the_previous_holder_at_acquire() {
    let (l, gate, _) = leases();
    // Someone wrote with a token from elsewhere (say etcd revision 500).
    let put = |token: u64| {
        let gate = gate.clone();
        async move {
            gate.put(
                WriteRequest {
                    bucket: "b".into(),
                    key: "report".into(),
                    token: Ok(Some(Token(token))),
                    scope_header: None,
                    scope_takeover: None,
                    conditions: Default::default(),
                    meta: Default::default(),
                    idempotency: None,
                },
                Box::pin(futures::stream::iter([Ok(bytes::Bytes::from_static(b"x"))])),
            )
            .await
        }
    };
    put(500).await.unwrap();
    let mut req = acquire("report", "a", 60_000);
    req.bind = Some(Binding {
        bucket: "b".into(),
        key: "report".into(),
    });
    let a = l.acquire(req.clone()).await.unwrap();
    assert_eq!(a.token, 501, "above the scope's highest");
    assert_eq!(a.scope.as_deref(), Some("object:b/report"));
    // The fence moved at acquire: 500 is refused before the new holder wrote anything.
    assert!(matches!(
        put(500).await,
        Err(GateError::StaleFencingToken { highest: 501, .. })
    ));
    l.release("report", &proof("a", &a)).await.unwrap();
    req.holder = "b".into();
    let b = l.acquire(req.clone()).await.unwrap();
    assert_eq!(b.token, 502);
    assert!(
        put(a.token).await.is_err(),
        "a, now a zombie, is fenced out"
    );
    put(b.token).await.unwrap();
    // An unknown bucket fails before a token is spent.
    req.bind = Some(Binding {
        bucket: "nope".into(),
        key: "k".into(),
    });
    req.holder = "c".into();
    req.name = "elsewhere".into();
    assert_eq!(l.acquire(req).await.unwrap_err().code(), "NoSuchBucket");
}

#[tokio::test]
async fn credentials_live_for_the_lease_plus_grace() {
    let (l, _, _) = leases();
    let mut req = acquire("job", "a", 100);
    req.s3_credentials = true;
    // Only a bound lease mints credentials: they are confined to its scope.
    assert_eq!(
        l.acquire(req.clone()).await.unwrap_err().code(),
        "InvalidArgument"
    );
    req.bind = Some(Binding {
        bucket: "b".into(),
        key: "out.parquet".into(),
    });
    let g = l.acquire(req).await.unwrap();
    let cred = g.s3_credentials.clone().unwrap();
    assert!(cred.access_key_id.starts_with("FGL"));
    assert_eq!(
        (cred.bucket.as_str(), cred.scope.as_str()),
        ("b", "object:b/out.parquet")
    );
    assert_eq!(
        l.credentials.secret(&cred.access_key_id).as_deref(),
        Some(cred.secret_access_key.as_str())
    );
    assert_eq!(
        l.credentials.identity(&cred.access_key_id).unwrap().token,
        g.token
    );
    // Renewal needs the lease's secret; it extends them; expiry plus grace (300 ms) ends them.
    let forged = Proof {
        holder: "a",
        token: g.token,
        secret: "0000",
    };
    assert_eq!(
        l.renew("job", &forged, Duration::from_secs(60))
            .await
            .unwrap_err()
            .code(),
        "NotLeaseHolder"
    );
    l.renew("job", &proof("a", &g), Duration::from_millis(400))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        l.credentials.secret(&cred.access_key_id).is_some(),
        "expired, within grace"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        l.credentials.secret(&cred.access_key_id).is_none(),
        "past grace"
    );
    assert!(l.credentials.secret("FGLUNKNOWN").is_none());
    // `show` never repeats the secrets.
    let mut req = acquire("job2", "a", 1000);
    req.s3_credentials = true;
    req.bind = Some(Binding {
        bucket: "b".into(),
        key: "k2".into(),
    });
    l.acquire(req).await.unwrap();
    let shown = l.show("job2").await.unwrap();
    assert_eq!(shown.s3_credentials.unwrap().secret_access_key, "<hidden>");
    assert!(shown.lease_secret.is_none());
}

#[tokio::test]
async fn bad_input_is_refused() {
    let (l, _, _) = leases();
    for (name, ttl) in [("ok", 0), ("ok", MAX_TTL.as_millis() as u64 + 1)] {
        assert_eq!(
            l.acquire(acquire(name, "a", ttl)).await.unwrap_err().code(),
            "InvalidTtl"
        );
    }
    for name in ["", "../etc", "a b", "x\u{0}y", &"n".repeat(201), "é"] {
        assert_eq!(
            l.acquire(acquire(name, "a", 1000))
                .await
                .unwrap_err()
                .code(),
            "InvalidLeaseName",
            "{name:?}"
        );
    }
    assert_eq!(
        l.acquire(acquire("ok", "", 1000)).await.unwrap_err().code(),
        "InvalidArgument"
    );
    let mut req = acquire("ok", "a", 1000);
    req.wait = Duration::from_secs(3600);
    assert_eq!(l.acquire(req).await.unwrap_err().code(), "InvalidArgument");
    assert_eq!(l.show("free").await.unwrap_err().code(), "NoSuchLease");
}

#[tokio::test]
async fn a_grant_that_cannot_grow_is_refused_and_tokens_never_go_back() {
    let (l, gate, store) = leases();
    gate.advance("b", "ov", Ok(Some(crate::token::Token(u64::MAX))), None)
        .await
        .unwrap();
    for want in 1..=3 {
        let g = l.acquire(acquire("L", "h", 60_000)).await.unwrap();
        assert_eq!(g.token, want);
        l.release("L", &proof("h", &g)).await.unwrap();
    }
    // Bound to a scope at u64::MAX: no token above it exists. Before the fix this wrapped
    // to 0 and synced 0 as the name's last token, so the next grant went back to 1.
    let mut bound = acquire("L", "h", 60_000);
    bound.bind = Some(Binding {
        bucket: "b".into(),
        key: "ov".into(),
    });
    let e = l.acquire(bound).await.unwrap_err();
    assert_eq!((e.status(), e.code()), (409, "TokenSpaceExhausted"));
    let g = l.acquire(acquire("L", "h", 60_000)).await.unwrap();
    assert_eq!(g.token, 4);
    l.release("L", &proof("h", &g)).await.unwrap();
    // A name whose own counter is at the top.
    store
        .put(
            vec![(
                "lease:top".into(),
                FenceRow {
                    highest: Some(u64::MAX),
                    ..FenceRow::default()
                },
            )],
            Durability::Synced,
        )
        .await
        .unwrap();
    let e = l.acquire(acquire("top", "h", 60_000)).await.unwrap_err();
    assert_eq!(e.code(), "TokenSpaceExhausted");
}

#[tokio::test]
async fn a_bound_grant_is_strictly_above_a_foreign_write_recorded_first() {
    let (l, gate, _) = leases();
    gate.advance("b", "k", Ok(Some(crate::token::Token(10))), None)
        .await
        .unwrap();
    // A foreign holder's write with 11 is recorded before the grant.
    gate.advance("b", "k", Ok(Some(crate::token::Token(11))), None)
        .await
        .unwrap();
    let mut bound = acquire("job", "h", 60_000);
    bound.bind = Some(Binding {
        bucket: "b".into(),
        key: "k".into(),
    });
    let g = l.acquire(bound).await.unwrap();
    assert_eq!(g.token, 12);
}

/// A fence table whose synced puts take a while (a busy disk).
struct SlowStore {
    delay: Duration,
}

#[async_trait::async_trait]
impl Script for SlowStore {
    async fn put(
        &self,
        inner: &Arc<dyn FenceStore>,
        rows: Vec<(String, FenceRow)>,
        d: Durability,
    ) -> Result<i64, crate::fence::StoreError> {
        tokio::time::sleep(self.delay).await;
        inner.put(rows, d).await
    }
}

#[tokio::test]
async fn a_renewal_does_not_wait_behind_another_grant() {
    let (_, _, store) = leases();
    let slow: Arc<dyn FenceStore> = Arc::new(Scripted::new(
        store,
        SlowStore {
            delay: Duration::from_millis(300),
        },
    ));
    let mut buckets = BTreeMap::new();
    buckets.insert(
        "b".to_string(),
        BucketEntry::new(BucketPolicy::default(), Arc::new(MemoryBackend::new())),
    );
    let gate = Arc::new(Gate::new(slow.clone(), buckets));
    let l = Arc::new(Leases::new(gate, slow, Duration::from_millis(300)));
    let a = l.acquire(acquire("a", "h", 60_000)).await.unwrap();
    // Another name's bound grant is busy in the slow store...
    let granting = {
        let l = l.clone();
        tokio::spawn(async move {
            let mut req = acquire("other", "h", 60_000);
            req.bind = Some(Binding {
                bucket: "b".into(),
                key: "k".into(),
            });
            l.acquire(req).await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // ...and a renewal of "a" answers while that grant is still in the store.
    l.renew("a", &proof("h", &a), Duration::from_secs(60))
        .await
        .unwrap();
    assert!(!granting.is_finished(), "the renewal waited for the grant");
    granting.await.unwrap().unwrap();
}

/// A live lease is re-granted to its holder only when the same principal asks: another key
/// that knows the holder's name cannot take the lease over.
#[tokio::test]
async fn another_principal_cannot_reacquire_as_the_holder() {
    let (l, _, _) = leases();
    let first = l.acquire(acquire("job", "a", 60_000)).await.unwrap();
    let mut thief = acquire("job", "a", 60_000);
    thief.owner = "key:other".into();
    assert_eq!(l.acquire(thief).await.unwrap_err().code(), "LeaseHeld");
    let again = l.acquire(acquire("job", "a", 60_000)).await.unwrap();
    assert!(again.token > first.token);
}

#[tokio::test]
async fn an_expired_lease_is_dropped_from_memory() {
    let (l, _, _) = leases();
    for i in 0..500 {
        l.acquire(acquire(&format!("short-{i}"), "h", 1))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    // The next grant (or the watch's census) drops them: only the live one is held.
    let live = l.acquire(acquire("long", "h", 60_000)).await.unwrap();
    assert_eq!(l.held.lock().len(), 1);
    // The names are free, and their tokens kept: a re-acquire gets the next one.
    let again = l
        .acquire(acquire("short-0", "other", 60_000))
        .await
        .unwrap();
    assert_eq!(again.token, 2);
    assert_eq!(live.token, 1);
}

#[tokio::test]
async fn one_principal_holds_at_most_max_live_per_key_leases() {
    let (_, gate, store) = leases();
    let l = Arc::new(Leases::new(gate, store, Duration::from_millis(300)).with_max_live_per_key(2));
    l.acquire(acquire("a", "h", 60_000)).await.unwrap();
    l.acquire(acquire("b", "h", 60_000)).await.unwrap();
    let err = l.acquire(acquire("c", "h", 60_000)).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (429, "TooManyLeases"));
    assert_eq!(err.retry_after(), Some(1));
    // Another principal has room of its own; the same lease acquired again takes none.
    let mut other = acquire("c", "h", 60_000);
    other.owner = "someone-else".into();
    l.acquire(other).await.unwrap();
    let a = l.acquire(acquire("a", "h", 60_000)).await.unwrap();
    // A release frees room.
    l.release("a", &proof("h", &a)).await.unwrap();
    l.acquire(acquire("c2", "h", 60_000)).await.unwrap();
}

/// On a shared table, credential ids carry a tag made with a key every instance reads from the
/// table: an id an instance issued is plausible to every other, and a made-up one (or one of
/// the untagged form) is known unknown without reading its record.
#[tokio::test]
async fn made_up_credential_ids_are_told_apart_without_the_table() {
    use super::credentials::LeaseCredentials;
    let store: Arc<dyn crate::fence::FenceStore> = Arc::new(MemoryFenceStore::new_shared());
    let one = LeaseCredentials::new(Duration::from_secs(1)).shared_on(Arc::clone(&store));
    let two = LeaseCredentials::new(Duration::from_secs(1)).shared_on(Arc::clone(&store));
    let issued = one
        .issue_shared("l", 1, "b".into(), "object:b/k".into(), ("key:k", "h"))
        .await
        .unwrap();
    let id = issued.access_key_id;
    assert_eq!(id.len(), 3 + 16 + 8, "{id}");
    assert!(
        two.plausible_here(&id).await.unwrap(),
        "another instance's id"
    );
    let mut forged = id.clone();
    let last = if forged.ends_with('A') { "B" } else { "A" };
    forged.replace_range(forged.len() - 1.., last);
    for made_up in [
        forged.as_str(),
        "FGLNOSUCHKEY0000000",
        "FGLAAAAAAAAAAAAAAAAAAAAAAAA",
        "FGLAAAAAAAAAAAAAAAAé",
    ] {
        assert!(!two.plausible_here(made_up).await.unwrap(), "{made_up}");
    }
}
