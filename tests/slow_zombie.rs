//! The slow zombie: a streaming upload with token 33 is overtaken by a write with 34 while its
//! body is still in flight. It must fail at its commit, leave B's bytes, and leave no
//! temporary file. Also: the in-flight upload holds no lock, so B is not kept waiting.

mod common;
use common::{client, get_bytes, put, Server};
use std::time::Duration;

#[tokio::test]
async fn an_overtaken_upload_fails_at_its_commit() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = client();
    let url = s.object_url("default", "shared.bin");

    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(1);
    let body = futures::StreamExt::map(
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx)),
        Ok::<Vec<u8>, std::io::Error>,
    );
    let a = {
        let c = c.clone();
        let url = url.clone();
        tokio::spawn(async move {
            c.put(&url)
                .header("Fencing-Token", "33")
                .body(reqwest::Body::wrap_stream(body))
                .send()
                .await
                .unwrap()
        })
    };
    // A has passed the early check and is streaming.
    tx.send(vec![b'A'; 64 * 1024]).await.unwrap();
    let staging = s.data_dir.join("objects/.staging");
    // Wait (bounded) until A's body has reached its staging file.
    for _ in 0..1000 {
        if !common::files_below(&staging).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        common::files_below(&staging).len(),
        1,
        "A is staged, invisible"
    );
    assert_eq!(
        get_bytes(&c, &url).await.0,
        404,
        "A's partial body is not visible"
    );

    // B writes with 34 and is not blocked by A's upload in flight.
    let b = tokio::time::timeout(
        Duration::from_secs(10),
        put(&c, &url, Some("34"), b"B wins"),
    )
    .await
    .expect("B is not kept waiting by a slow upload");
    assert_eq!(b.0, 200);

    // A finishes its body: refused at the commit.
    tx.send(vec![b'A'; 64 * 1024]).await.unwrap();
    drop(tx);
    let resp = a.await.unwrap();
    assert_eq!(resp.status().as_u16(), 409);
    assert_eq!(resp.headers()["fencing-token-highest"], "34");
    assert_eq!(get_bytes(&c, &url).await.1, b"B wins");
    assert!(
        common::files_below(&staging).is_empty(),
        "A's temporary file is gone"
    );
}
