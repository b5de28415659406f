//! The read before the body on a real etcd (docs/design.md, "The read before the body"): an
//! instance decides a write on the row it read before the body, and the intent's
//! compare-and-swap on that row's revision is what keeps it sound. Here the other instance
//! changes the row while the body streams, after the early read; the write must see it.

use crate::common;
use common::cluster::Cluster;
use common::{client, get_bytes, put};
use std::time::Duration;

use super::SERIAL;

/// Starts a PUT through `url` whose body's first bytes go at once and whose last bytes wait
/// for the returned sender: a write past its early check, still being received.
fn streaming_put(
    c: &reqwest::Client,
    url: &str,
    headers: &[(&'static str, &'static str)],
) -> (
    tokio::task::JoinHandle<(u16, serde_json::Value)>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let first = futures::stream::once(async { Ok::<_, std::io::Error>(bytes::Bytes::from("sta")) });
    let last = futures::stream::once(async move {
        let _ = wait.await;
        Ok::<_, std::io::Error>(bytes::Bytes::from("le"))
    });
    let mut request = c.put(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(reqwest::Body::wrap_stream(futures::StreamExt::chain(
        first, last,
    )));
    let task = tokio::spawn(async move {
        let resp = request.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(serde_json::Value::Null))
    });
    (task, go)
}

/// A newer token recorded through instance 2 while a write's body streams into instance 1
/// (whose early read saw the older token): the write is refused as stale and the object is
/// instance 2's. An exclusive create (`If-None-Match: *`) of a key instance 2 creates in the
/// meantime fails its condition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_changed_while_the_body_streams_is_seen_by_the_decision() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::up(2, "ministack");
    let c = client();
    let (s, _) = put(&c, &cluster.object(1, "k"), Some("5"), b"five").await;
    assert_eq!(s, 200, "{}", cluster.logs());

    let (slow, go) = streaming_put(&c, &cluster.object(1, "k"), &[("Fencing-Token", "6")]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, _) = put(&c, &cluster.object(2, "k"), Some("7"), b"seven").await;
    assert_eq!(s, 200);
    let _ = go.send(());
    let (s, answer) = slow.await.unwrap();
    assert_eq!(s, 409, "{answer}");
    assert_eq!(answer["error"], "StaleFencingToken");
    assert_eq!(get_bytes(&c, &cluster.object(1, "k")).await.1, b"seven");

    let (slow, go) = streaming_put(
        &c,
        &cluster.object(1, "new"),
        &[("Fencing-Token", "3"), ("If-None-Match", "*")],
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resp = c
        .put(cluster.object(2, "new"))
        .header("Fencing-Token", "3")
        .header("If-None-Match", "*")
        .body("other")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let _ = go.send(());
    let (s, answer) = slow.await.unwrap();
    assert_eq!(s, 412, "{answer}");
    assert_eq!(get_bytes(&c, &cluster.object(1, "new")).await.1, b"other");
}

/// A key without a row: instance 1's early read found it absent, judged by the bucket's floor.
/// While the body streams, instance 2 deletes the key with a newer token and folds that
/// tombstone into the floor, so the key is without a row again when instance 1 records its
/// intent. The intent's compare on the floor's revision refuses the write as stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fold_while_the_body_streams_refuses_the_write() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::up(2, "ministack");
    for n in ["fg1", "fg2"] {
        let file = cluster.dir.path().join(format!("{n}.toml"));
        let text = std::fs::read_to_string(&file)
            .unwrap()
            .replace("[server]\n", "[server]\nmax_tombstones_per_bucket = 1\n");
        std::fs::write(&file, text).unwrap();
        cluster.signal(n, "TERM");
        cluster.start(n);
    }
    let c = client();
    let (slow, go) = streaming_put(&c, &cluster.object(1, "k"), &[("Fencing-Token", "6")]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resp = c
        .delete(cluster.object(2, "k"))
        .header("Fencing-Token", "8")
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", cluster.logs());
    // The fold runs in the background after the delete that reached the bound.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let _ = go.send(());
    let (s, answer) = slow.await.unwrap();
    assert_eq!(s, 409, "{answer}");
    assert_eq!(answer["error"], "StaleFencingToken");
    assert_eq!(
        c.get(cluster.object(1, "k")).send().await.unwrap().status(),
        404
    );
}
