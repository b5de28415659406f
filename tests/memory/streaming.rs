//! Bodies stream both ways: a 2 GiB upload and its download keep fencegate's resident memory
//! far below the object's size.

use crate::common;
use common::{client, Server};
use futures::StreamExt;
use md5::{Digest, Md5};

const CHUNK: usize = 1 << 20;
const TOTAL: u64 = 2 << 30;
/// Generous: the process idles at ~15 MiB; buffering the object would need 2048 MiB.
const PEAK_RSS_LIMIT_KIB: u64 = 256 * 1024;

#[tokio::test]
async fn a_2_gib_upload_and_download_stream() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = client();
    let url = s.object_url("default", "big.bin");

    let chunk: Vec<u8> = (0..CHUNK).map(|i| (i % 251) as u8).collect();
    let mut expected = Md5::new();
    for _ in 0..(TOTAL / CHUNK as u64) {
        expected.update(&chunk);
    }
    let expected = format!("\"{}\"", hex::encode(expected.finalize()));

    let upload_chunk = bytes::Bytes::from(chunk);
    let body = futures::stream::iter(0..(TOTAL / CHUNK as u64))
        .map(move |_| Ok::<_, std::io::Error>(upload_chunk.clone()));
    let resp = c
        .put(&url)
        .header("Fencing-Token", "1")
        .header("Content-Length", TOTAL.to_string())
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["etag"].to_str().unwrap(), expected);
    let after_upload = s.peak_rss_kib();

    let resp = c.get(&url).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.content_length(), Some(TOTAL));
    let mut got = 0u64;
    let mut md5 = Md5::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        got += chunk.len() as u64;
        md5.update(&chunk);
    }
    assert_eq!(got, TOTAL);
    assert_eq!(format!("\"{}\"", hex::encode(md5.finalize())), expected);
    let peak = s.peak_rss_kib();
    eprintln!("peak RSS after 2 GiB upload: {after_upload} KiB, after download: {peak} KiB");
    assert!(
        peak < PEAK_RSS_LIMIT_KIB,
        "peak RSS {peak} KiB for a 2 GiB object"
    );
}

/// The same through the S3 gateway: a 1 GiB PutObject (signed with its payload's SHA-256,
/// which `s3s` checks as the body streams) and GetObject, with aws-sdk-s3 as the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_gib_s3_put_and_get_stream() {
    const SIZE: u64 = 1 << 30;
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let file = dir.path().join("upload.bin");
    // Zeros, written sparse: the client reads them from disk, never from memory.
    std::fs::File::create(&file).unwrap().set_len(SIZE).unwrap();
    let c = common::moto::client_with(&s.url(""), "fencegate", "fencegate-dev-secret");
    let body = aws_sdk_s3::primitives::ByteStream::from_path(&file)
        .await
        .unwrap();
    c.put_object()
        .bucket("default")
        .key("big-s3.bin")
        .metadata("fencing-token", "1")
        .body(body)
        .send()
        .await
        .unwrap();
    let after_upload = s.peak_rss_kib();
    let out = c
        .get_object()
        .bucket("default")
        .key("big-s3.bin")
        .send()
        .await
        .unwrap();
    assert_eq!(out.content_length(), Some(SIZE as i64));
    let mut body = out.body;
    let mut got = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.unwrap();
        assert!(chunk.iter().all(|b| *b == 0));
        got += chunk.len() as u64;
    }
    assert_eq!(got, SIZE);
    let peak = s.peak_rss_kib();
    eprintln!("S3 gateway: peak RSS after 1 GiB PutObject: {after_upload} KiB, after GetObject: {peak} KiB");
    assert!(
        peak < PEAK_RSS_LIMIT_KIB,
        "peak RSS {peak} KiB for a 1 GiB object"
    );
}

/// Connections sending bodies that must be read before their signature can be checked (signed
/// over the body's own hash, with a wrong secret: anyone who knows a key id can send them).
/// However many there are, fencegate holds at most `max_unverified_body_bytes` (64 MiB by
/// default) of their bodies: before that budget, 1,000 connections of 1 MiB each took about
/// 1 GiB. What the connections themselves cost (their read buffers, bounded by
/// `max_connections`) is measured apart, on a second instance whose clients send one body byte
/// each, and taken off. `FENCEGATE_UNVERIFIED_CONNECTIONS` sets the number (300 unless set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_bodies_hold_at_most_the_budget() {
    let connections: usize = std::env::var("FENCEGATE_UNVERIFIED_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let len = (1 << 20) - 1;
    let (connections_only, _) = unverified_load(connections, len, 1).await;
    let (with_bodies, refused) = unverified_load(connections, len, len - 1).await;
    eprintln!(
        "{connections} connections: RSS grew {connections_only} KiB holding 1 body byte each, {with_bodies} KiB sending 1 MiB - 1 each; {refused} refused"
    );
    assert!(refused > 0, "no connection was refused");
    // The budget (64 MiB); the read buffers the held connections filled (128 KiB each, twice
    // max_header_bytes: what a connection may hold whatever it sends); 32 MiB of slack for the
    // allocator and the refused connections' buffers while they close. Without the budget the
    // bodies alone took 1 MiB each, 300 MiB here.
    let held = (connections - refused) as u64;
    let bound = 64 * 1024 + held * 128 + 32 * 1024;
    let bodies = with_bodies.saturating_sub(connections_only);
    assert!(
        bodies < bound,
        "{connections} unauthenticated bodies held {bodies} KiB beyond what their connections cost (bound {bound} KiB)"
    );
}

/// Starts an instance, has `connections` clients each send the head of a `len`-byte
/// body-hash-signed PUT and `sent` body bytes, with a wrong secret, and hold; the growth of its
/// peak RSS (KiB) and how many were refused.
async fn unverified_load(connections: usize, len: usize, sent: usize) -> (u64, usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let config = "[keys.worker]\naccess_key_id = \"worker-key\"\nsecret_access_key = \"worker-secret-0123456\"\nbuckets = { \"default\" = [\"write\"] }\n";
    let s = Server::start(&dir.path().join("data"), Some(config));
    let forger = common::sign::Creds {
        key: "worker-key",
        secret: "not-the-secret",
    };
    let idle = s.peak_rss_kib();
    let addr = s.addr;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..connections {
        tasks.spawn(async move {
            let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
            let head =
                common::sign::body_hash_signed_head(addr, "/v1/objects/default/x", forger, len);
            // The bytes, then hold; a refused connection is closed under us.
            let wrote = async {
                conn.write_all(head.as_bytes()).await?;
                conn.write_all(&vec![b'x'; sent]).await
            };
            let limit = std::time::Duration::from_secs(30);
            let refused = match tokio::time::timeout(limit, wrote).await {
                Ok(Ok(())) => {
                    let mut buf = [0u8; 512];
                    let wait = std::time::Duration::from_millis(500);
                    matches!(
                        tokio::time::timeout(wait, conn.read(&mut buf)).await,
                        Ok(Ok(n)) if String::from_utf8_lossy(&buf[..n]).contains(" 503 ")
                    )
                }
                _ => true,
            };
            (conn, refused)
        });
    }
    let mut held = Vec::new();
    let mut refused = 0;
    while let Some(done) = tasks.join_next().await {
        let (conn, was_refused) = done.unwrap();
        refused += usize::from(was_refused);
        held.push(conn);
    }
    let peak = s.peak_rss_kib();
    drop(held);
    (peak.saturating_sub(idle), refused)
}
