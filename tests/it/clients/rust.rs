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

/// A renewal that fails (the server is gone) marks the lease lost at once, before its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_renewal_loses_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let fg = Client::new(&s.url(""));
    let ttl = Duration::from_secs(30);
    let lease = fg
        .acquire("gone", "w", ttl, AcquireOptions::default())
        .await
        .unwrap();
    let health = lease.health();
    s.kill9();
    tokio::time::timeout(ttl / 2, health.lost())
        .await
        .expect("the renewal at a third of the TTL failed, long before the TTL");
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
