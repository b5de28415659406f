//! aws-chunked bodies cost a frame, not a chunk: 8 connections each sending one chunk declared
//! at 4 GiB keep fencegate's resident memory within 64 MiB of idle, from a key that may only
//! read (refused before its body is read) and from one that may write (streamed to staging).

use crate::common;
use common::sign::{sign_payload, Creds};
use common::Server;
use futures::StreamExt;

const CONFIG: &str = r#"
[keys.reader]
access_key_id = "reader"
secret_access_key = "reader-secret-0123"
buckets = { "default" = ["read"] }

[keys.writer]
access_key_id = "writer"
secret_access_key = "writer-secret-0123"
buckets = { "default" = ["read", "write"] }

[buckets.default]
fencing = "optional"
"#;
const CONNECTIONS: usize = 8;
/// What each connection sends of its chunk before it stops.
const SENT: usize = 48 << 20;

/// One connection sending a chunk declared at 4 GiB: a PutObject, or (`delete`) the body of a
/// DeleteObjects, which a key that may only read can send.
async fn one(url: String, creds: Creds, delete: bool) -> (u16, String) {
    one_chunk(url, creds, delete, 4 << 30, 4 << 30, SENT).await
}

/// One connection sending an aws-chunked body that declares `decoded` bytes
/// (`x-amz-decoded-content-length`) and starts one chunk of `chunk` bytes, of which it sends
/// `sent` (whole MiB) before the body ends: a PutObject, or (`delete`) a DeleteObjects. The
/// status (0: the server closed before answering) and the answer's text.
pub(crate) async fn one_chunk(
    url: String,
    creds: Creds,
    delete: bool,
    decoded: u64,
    chunk: u64,
    sent: usize,
) -> (u16, String) {
    assert_eq!(sent % (1 << 20), 0, "whole MiB only");
    let http = reqwest::Client::new();
    let builder = if delete {
        http.post(format!("{url}?delete"))
    } else {
        http.put(&url)
    };
    let mut req = builder
        .header("content-encoding", "aws-chunked")
        .header("x-amz-decoded-content-length", decoded.to_string())
        .header("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
        .body(Vec::new())
        .build()
        .unwrap();
    sign_payload(&mut req, creds, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD");
    let header = format!("{chunk:x};chunk-signature={}\r\n", "0".repeat(64));
    let piece = bytes::Bytes::from(vec![b'x'; 1 << 20]);
    let body = futures::stream::iter(std::iter::once(bytes::Bytes::from(header)))
        .chain(futures::stream::iter(0..sent >> 20).map(move |_| piece.clone()))
        .map(Ok::<_, std::io::Error>);
    *req.body_mut() = Some(reqwest::Body::wrap_stream(body));
    match http.execute(req).await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            (status, resp.text().await.unwrap_or_default())
        }
        // The server answered and closed before the body was all sent.
        Err(e) => (0, e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4_gib_chunk_is_never_held() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), Some(CONFIG));
    let idle = s.peak_rss_kib();
    let reader = Creds {
        key: "reader",
        secret: "reader-secret-0123",
    };
    let writer = Creds {
        key: "writer",
        secret: "writer-secret-0123",
    };
    // The reader's PutObject is refused by the access check, its DeleteObjects for the body
    // (aws-chunked is taken for PutObject and UploadPart only), both before the body is read;
    // the writer's streams until its body ends short.
    for (creds, delete, want) in [
        (reader, false, 403),
        (reader, true, 400),
        (writer, false, 400),
    ] {
        let tasks: Vec<_> = (0..CONNECTIONS)
            .map(|i| {
                let url = if delete {
                    s.url("/default")
                } else {
                    s.url(&format!("/default/big-{i}"))
                };
                tokio::spawn(one(url, creds, delete))
            })
            .collect();
        for t in tasks {
            let (status, text) = t.await.unwrap();
            assert!(
                status == want || status == 0,
                "{}: {status} {text}",
                creds.key
            );
        }
        let peak = s.peak_rss_kib();
        eprintln!("{}: peak RSS {peak} KiB, idle {idle} KiB", creds.key);
        assert!(
            peak < idle + 64 * 1024,
            "{}: peak RSS {peak} KiB, {} KiB above idle",
            creds.key,
            peak - idle
        );
    }
    // Nothing was stored: each body ended before its chunk did.
    let c = common::moto::client_with(&s.url(""), "reader", "reader-secret-0123");
    for i in 0..CONNECTIONS {
        let r = c
            .head_object()
            .bucket("default")
            .key(format!("big-{i}"))
            .send()
            .await;
        let status = r
            .err()
            .and_then(|e| e.raw_response().map(|r| r.status().as_u16()));
        assert_eq!(status, Some(404), "big-{i}");
    }
}
