//! fencegate-client (clients/rust): a lease renewed past its TTL, a lost lease that refuses to
//! send, and the typed errors a worker acts on.

use crate::common::Server;
use fencegate_client::{AcquireOptions, Client, Error};
use std::time::Duration;

const TTL: Duration = Duration::from_millis(600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_keep_a_lease_past_its_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let fg = Client::new(&s.url(""));
    let lease = fg
        .acquire("renewed", "w1", TTL, AcquireOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(TTL * 3).await;
    assert!(!lease.is_lost(), "renewed every third of the TTL");
    match fg
        .acquire("renewed", "w2", TTL, AcquireOptions::default())
        .await
    {
        Err(Error::Held { holder, .. }) => assert_eq!(holder, "w1"),
        other => panic!("the lease is still held: {other:?}"),
    }
    lease.release().await.unwrap();
    let next = fg
        .acquire("renewed", "w2", TTL, AcquireOptions::default())
        .await
        .expect("released, so free at once");
    assert!(next.token() > 1);
}

/// A holder whose renewals stopped finds its lease lost once the TTL passes; its writes then
/// fail without being sent (the object never appears, though its token is still the highest),
/// and the new holder's write lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_sends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let fg = Client::new(&s.url(""));
    let opts = AcquireOptions::default().bind("default", "lost.txt");
    let a = fg.acquire("lost", "a", TTL, opts.clone()).await.unwrap();
    let health = a.health();
    a.stop_renewing();
    tokio::time::timeout(TTL * 2, health.lost())
        .await
        .expect("lost once the TTL passed");
    assert!(a.is_lost());
    match a.put("default", "lost.txt", "from a zombie").await {
        Err(Error::LeaseLost { name }) => assert_eq!(name, "lost"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        a.delete("default", "lost.txt").await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(
        matches!(
            fg.head("default", "lost.txt").await,
            Err(Error::NotFound { .. })
        ),
        "nothing was sent, though a's token is still the highest"
    );
    let b = fg
        .acquire("lost", "b", TTL, opts.wait(Duration::from_secs(5)))
        .await
        .unwrap();
    b.put("default", "lost.txt", "from b").await.unwrap();
    // The zombie's raw token, sent by other means, is refused by the fence.
    match fg.put("default", "lost.txt", a.token(), "late").await {
        Err(Error::Stale { token, highest }) => {
            assert_eq!((token, highest), (a.token(), b.token()))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(&fg.get("default", "lost.txt").await.unwrap()[..], b"from b");
}

/// A server that is gone: each renewal fails on the way and is retried, and the lease is lost
/// when its TTL runs out without one landing (not at the first failure: a reset connection is
/// no proof the lease ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stays_gone_loses_the_lease_at_its_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let fg = Client::new(&s.url(""));
    let ttl = Duration::from_secs(3);
    let lease = fg
        .acquire("gone", "w", ttl, AcquireOptions::default())
        .await
        .unwrap();
    let health = lease.health();
    let started = std::time::Instant::now();
    s.kill9();
    tokio::time::timeout(ttl * 2, health.lost())
        .await
        .expect("lost once the TTL passed without a renewal");
    assert!(
        started.elapsed() >= ttl - Duration::from_millis(300),
        "kept while retrying within the TTL: lost after {:?}",
        started.elapsed()
    );
    assert!(matches!(
        lease.put("default", "gone.txt", "x").await,
        Err(Error::LeaseLost { .. })
    ));
}

/// Each refusal a worker acts on differently has its own error, with what it needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_typed() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[buckets.default]\nmax_token_jump = 10\n";
    let s = Server::start(&dir.path().join("data"), Some(config));
    let fg = Client::new(&s.url(""));
    let written = fg.put("default", "typed.txt", 5, "five").await.unwrap();
    assert_eq!(written.token, Some(5));
    assert!(written.etag.is_some());
    let head = fg.head("default", "typed.txt").await.unwrap();
    assert_eq!((head.token, head.size), (Some(5), Some(4)));
    assert_eq!(head.etag, written.etag);

    let jump = fg
        .put("default", "typed.txt", 500, "jump")
        .await
        .unwrap_err();
    assert!(matches!(jump, Error::TokenJumpTooLarge { .. }), "{jump:?}");
    assert_eq!(jump.code(), Some("TokenJumpTooLarge"));

    fg.advance("default", "typed.txt", 9).await.unwrap();
    match fg.delete("default", "typed.txt", 6).await {
        Err(Error::Stale { token, highest }) => assert_eq!((token, highest), (6, 9)),
        other => panic!("{other:?}"),
    }
    let deleted = fg.delete("default", "typed.txt", 9).await.unwrap();
    assert!(deleted.existed);
    assert!(matches!(
        fg.get("default", "typed.txt").await,
        Err(Error::NotFound { .. })
    ));
    let other = fg.put("nope", "x", 1, "x").await.unwrap_err();
    assert_eq!(other.code(), Some("NoSuchBucket"), "{other:?}");
    assert!(other.to_string().contains("nope"), "{other}");
}

/// A key with a `.` or `..` segment would be resolved away by the HTTP stack before sending
/// (`a/../victim` written as `victim`, `../other/x` in another bucket): refused without
/// sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_segments_are_refused_without_sending() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let fg = Client::new(&s.url(""));
    for key in ["a/../victim", "./victim", "victim/.", "../default/victim"] {
        let err = fg.put("default", key, 1, "x").await.unwrap_err();
        assert!(matches!(err, Error::InvalidKey { .. }), "{key}: {err:?}");
        assert_eq!(err.code(), Some("InvalidKey"));
        assert!(matches!(
            fg.delete("default", key, 1).await,
            Err(Error::InvalidKey { .. })
        ));
        assert!(matches!(
            fg.advance("default", key, 1).await,
            Err(Error::InvalidKey { .. })
        ));
    }
    assert!(matches!(
        fg.put("..", "victim", 1, "x").await,
        Err(Error::InvalidKey { .. })
    ));
    let bind = AcquireOptions::default().bind("default", "x/../victim");
    assert!(matches!(
        fg.acquire("dots", "w", TTL, bind).await,
        Err(Error::InvalidKey { .. })
    ));
    assert!(
        matches!(
            fg.head("default", "victim").await,
            Err(Error::NotFound { .. })
        ),
        "nothing reached the key the dots resolve to"
    );
    // Dots inside a segment are ordinary characters.
    fg.put("default", "v1.2/..hidden/x..", 1, "ok")
        .await
        .unwrap();
}

/// A write through the lease refused as stale loses the lease: a newer holder exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_refusal_loses_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let fg = Client::new(&s.url(""));
    let lease = fg
        .acquire(
            "fenced",
            "w",
            Duration::from_secs(30),
            AcquireOptions::default(),
        )
        .await
        .unwrap();
    fg.advance("default", "fenced.txt", lease.token() + 5)
        .await
        .unwrap();
    assert!(matches!(
        lease.put("default", "fenced.txt", "x").await,
        Err(Error::Stale { .. })
    ));
    assert!(lease.is_lost());
    assert!(matches!(
        lease.put("default", "fenced.txt", "x").await,
        Err(Error::LeaseLost { .. })
    ));
}

/// A grant after a wait: the server says how long it waited (`waited_ms`), and the client
/// counts the TTL from the grant, not from its request, so a lease granted after a wait
/// longer than its TTL is held, not taken for lost at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_after_a_wait_counts_its_ttl_from_the_grant() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let fg = Client::new(&s.url(""));
    let a = fg
        .acquire("waited", "a", TTL, AcquireOptions::default())
        .await
        .unwrap();
    a.stop_renewing();
    let short = Duration::from_millis(400);
    let b = fg
        .acquire(
            "waited",
            "b",
            short,
            AcquireOptions::default().wait(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    assert!(
        !b.is_lost(),
        "granted after a wait longer than its TTL: held"
    );
    b.stop_renewing();
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    assert!(b.is_lost(), "and lost once its own TTL passed");
    // The answer's field, read raw.
    let raw: serde_json::Value = reqwest::Client::new()
        .post(s.url("/v1/leases/raw"))
        .body(r#"{"holder": "r", "ttl_ms": 1000}"#)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(raw["waited_ms"].as_u64().is_some(), "{raw}");
}

/// A renewal answered 503 (a proxy or the server failing for a moment) is retried until the
/// TTL runs out; a lease whose renewals fail only for a moment stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_fails_for_a_moment_is_retried() {
    use crate::common::s3proxy::{Mode, S3Proxy};
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let proxy = S3Proxy::start(s.url("")).await;
    let fg = Client::new(&proxy.endpoint());
    let ttl = Duration::from_millis(1500);
    let held = fg
        .acquire("flaky", "w", ttl, AcquireOptions::default())
        .await
        .unwrap();
    // Every PUT (a renewal) answered 503 across the first renewal, for a third of the TTL.
    proxy.set(Mode::ThrottleWrites);
    tokio::time::sleep(ttl / 3 + ttl / 6).await;
    proxy.set(Mode::Pass);
    tokio::time::sleep(ttl).await;
    assert!(!held.is_lost(), "retried until a renewal landed");

    // Failing until the TTL runs out loses it.
    proxy.set(Mode::ThrottleWrites);
    tokio::time::timeout(ttl * 2, held.health().lost())
        .await
        .expect("lost once no renewal landed within the TTL");
}
