//! The read before the body (docs/design.md, "The read before the body"): on a shared table
//! the decision under the lock is taken on the row read at the early check, and the intent's
//! compare-and-swap on that row's revision is what keeps it sound. Each test changes the row
//! through the other gate while a body streams, after the early read, and fails if the
//! decision was taken on the early read without that compare.

use super::*;
use crate::backend::ByteStream;
use crate::gate::conditions::EtagMatch;
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::oneshot;

/// A body whose first chunk comes at once and whose last comes when `go` is sent: a write
/// that has passed its early check and is still being received.
fn streaming(first: &'static [u8], last: &'static [u8]) -> (ByteStream, oneshot::Sender<()>) {
    let (go, wait) = oneshot::channel::<()>();
    let first = futures::stream::once(async move { Ok(Bytes::from_static(first)) });
    let last = futures::stream::once(async move {
        let _ = wait.await;
        Ok::<_, crate::backend::BodyError>(Bytes::from_static(last))
    });
    (Box::pin(first.chain(last)), go)
}

/// Waits until `gate` has read the row before the body (its staging has begun).
async fn received(task: &tokio::task::JoinHandle<Result<Written, GateError>>) {
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(!task.is_finished(), "the write ended before its body did");
}

/// A newer token recorded through the other instance while this write's body streams: the
/// write, whose early read saw the older token, is refused as stale and never lands.
#[tokio::test]
async fn a_token_recorded_while_the_body_streams_refuses_the_write() {
    let ([a, b], store, table) = cluster();
    a.put(req("k", 5), body(b"five")).await.unwrap();
    let (stream, go) = streaming(b"si", b"x");
    let gate = a.clone();
    let slow = tokio::spawn(async move { gate.put(req("k", 6), stream).await });
    received(&slow).await;
    b.put(req("k", 7), body(b"seven")).await.unwrap();
    let _ = go.send(());
    let e = slow.await.unwrap().unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken", "{e}");
    assert_eq!(store.landed(), vec![Some(5), Some(7)]);
    // The decision on the early read was tried and its compare failed: the path under test
    // was taken, not a read under the lock.
    assert!(table.conflicts.load(Ordering::SeqCst) > 0);
}

/// A key without a row: the early read found it absent (and the floor), the other instance
/// creates it while the body streams. An `If-None-Match: *` write must then fail its
/// condition, not create the object over the other one.
#[tokio::test]
async fn a_create_while_the_body_streams_fails_an_exclusive_create() {
    let ([a, b], store, table) = cluster();
    let (stream, go) = streaming(b"fir", b"st");
    let mut first = req("new", 3);
    first.conditions.if_none_match = EtagMatch::parse("*");
    let gate = a.clone();
    let slow = tokio::spawn(async move { gate.put(first, stream).await });
    received(&slow).await;
    let mut other = req("new", 3);
    other.conditions.if_none_match = EtagMatch::parse("*");
    b.put(other, body(b"other")).await.unwrap();
    let _ = go.send(());
    let e = slow.await.unwrap().unwrap_err();
    assert_eq!(e.code(), "PreconditionFailed", "{e}");
    assert_eq!(store.landed(), vec![Some(3)]);
    assert!(table.conflicts.load(Ordering::SeqCst) > 0);
    let (info, _) = a.get("b", "new").await.unwrap();
    assert_eq!(info.size, 5, "the other instance's object stays");
}

/// A client's `If-Match` judged on the early read's ETag: the other instance replaces the
/// object while the body streams, so the condition fails instead of overwriting it.
#[tokio::test]
async fn an_object_replaced_while_the_body_streams_fails_if_match() {
    let ([a, b], store, _) = cluster();
    let first = a.put(req("k", 1), body(b"one")).await.unwrap();
    let (stream, go) = streaming(b"tw", b"o");
    let mut conditional = req("k", 1);
    conditional.conditions.if_match = EtagMatch::parse(&first.etag.unwrap());
    let gate = a.clone();
    let slow = tokio::spawn(async move { gate.put(conditional, stream).await });
    received(&slow).await;
    b.put(req("k", 1), body(b"replaced")).await.unwrap();
    let _ = go.send(());
    let e = slow.await.unwrap().unwrap_err();
    assert_eq!(e.code(), "PreconditionFailed", "{e}");
    assert_eq!(store.landed(), vec![Some(1), Some(1)]);
}

/// Two writes of one key through one gate: the second waits for the first's lock, so it reads
/// the row again instead of deciding on its early read (which the first has changed), and
/// meets no failed compare.
#[tokio::test]
async fn a_write_that_waited_for_this_instances_lock_reads_again() {
    let ([a, _], store, table) = cluster();
    a.put(req("k", 1), body(b"one")).await.unwrap();
    let first = store.held_put(&a, req("k", 2), b"two").await;
    let gate = a.clone();
    let second = tokio::spawn(async move { gate.put(req("k", 3), body(b"three")).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let _ = store.release.send(true);
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    assert_eq!(store.landed(), vec![Some(1), Some(2), Some(3)]);
    assert_eq!(table.conflicts.load(Ordering::SeqCst), 0);
}

/// A key the early read found without a row, judged by its bucket's floor: the other instance
/// writes it with a newer token, deletes it and folds the tombstone into the floor while the
/// body streams, so the key is without a row again when the intent is recorded. The compare on
/// the floor's revision refuses the write as stale; a compare on the row's absence alone would
/// let it land after the newer token's delete.
#[tokio::test]
async fn a_fold_while_the_body_streams_refuses_the_write() {
    let ([a, b], store, table) = cluster();
    let (stream, go) = streaming(b"si", b"x");
    let gate = a.clone();
    let slow = tokio::spawn(async move { gate.put(req("k", 6), stream).await });
    received(&slow).await;
    b.put(req("k", 8), body(b"eight")).await.unwrap();
    b.delete(req("k", 8)).await.unwrap();
    assert_eq!(b.fold_tombstones("b").await.unwrap(), 1);
    assert!(table.get("object:b/k").await.unwrap().is_none());
    let _ = go.send(());
    let e = slow.await.unwrap().unwrap_err();
    assert_eq!(e.code(), "StaleFencingToken", "{e}");
    assert_eq!(store.landed(), vec![Some(8)]);
    assert!(table.conflicts.load(Ordering::SeqCst) > 0);
}
