//! `fencegate healthcheck` (docs/operations.md, "Health and readiness"), run as the real
//! binary against a real instance and against servers that only look healthy: ready only on
//! `/readyz`'s own answer, never on a redirect, a body that does not come, another route's 200
//! or a 200 that says it is unready.

use crate::common;
use std::process::Command;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn healthcheck(url: &str) -> (bool, String) {
    let out = Command::new(common::binary())
        .args(["healthcheck", "--url", url, "--timeout", "2s"])
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A server that answers every request with `answer`, then keeps the connection open.
async fn fake(answer: &'static str) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut conn, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = conn.write_all(answer.as_bytes()).await;
                tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_readyz_s_own_answer_is_ready() {
    let dir = tempfile::tempdir().unwrap();
    let s = common::Server::start(&dir.path().join("data"), None);
    let (ok, out) = tokio::task::spawn_blocking({
        let url = s.url("/readyz");
        move || healthcheck(&url)
    })
    .await
    .unwrap();
    assert!(ok && out.contains("ready"), "{out}");
    let (ok, out) = tokio::task::spawn_blocking({
        let url = s.url("/readyz?verbose");
        move || healthcheck(&url)
    })
    .await
    .unwrap();
    assert!(ok, "{out}");
    // /healthz answers ok while writes cannot be served: not a readiness probe.
    let (ok, out) = tokio::task::spawn_blocking({
        let url = s.url("/healthz");
        move || healthcheck(&url)
    })
    .await
    .unwrap();
    assert!(!ok && out.contains("does not name /readyz"), "{out}");

    let cases = [
        (
            "HTTP/1.1 302 Found\r\nlocation: /login\r\ncontent-length: 0\r\n\r\n",
            "302",
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nok",
            "body could not be read",
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 21\r\n\r\n{\"status\":\"unready\"}\n",
            "200",
        ),
        ("HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nhello\n", "200"),
    ];
    for (answer, said) in cases {
        let addr = fake(answer).await;
        let url = format!("http://{addr}/readyz");
        let started = std::time::Instant::now();
        let (ok, out) = tokio::task::spawn_blocking(move || healthcheck(&url))
            .await
            .unwrap();
        assert!(!ok, "{answer:?} was taken as ready: {out}");
        assert!(
            out.contains("not ready") && out.contains(said),
            "{answer:?}: {out}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{answer:?}: {:?}",
            started.elapsed()
        );
    }
}
