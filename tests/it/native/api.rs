//! The native HTTP API against the real binary: the README's quick start, every row of the
//! error table (docs/reference.md) with its JSON body, tombstones, fences, listing and limits.

use crate::common;
use common::{client, get_bytes, put, Server};

#[tokio::test]
async fn the_classic_failure_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = client();
    let url = s.object_url("default", "report.csv");
    // Worker A holds the lock with token 33 and writes.
    assert_eq!(put(&c, &url, Some("33"), b"A's bytes").await.0, 200);
    // A stalls; its lease expires; B gets token 34 and writes.
    let (status, body) = put(&c, &url, Some("34"), b"B's bytes").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["token"], 34);
    // A wakes up and writes with its old token: refused.
    let resp = c
        .put(&url)
        .header("Fencing-Token", "33")
        .body("A's late bytes")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 409);
    assert_eq!(resp.headers()["fencing-token-highest"], "34");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "StaleFencingToken");
    assert_eq!(body["highest"], 34);
    assert_eq!(body["scope"], "object:default/report.csv");
    // The object holds B's bytes, and says which token wrote it.
    let resp = c.get(&url).send().await.unwrap();
    assert_eq!(resp.headers()["fencing-token"], "34");
    assert!(resp.headers()["etag"].to_str().unwrap().starts_with('"'));
    assert_eq!(resp.bytes().await.unwrap(), "B's bytes");
}

#[tokio::test]
async fn error_table_rows_have_json_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = client();
    let url = s.object_url("default", "k");

    let (status, body) = put(&c, &url, None, b"x").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (428, Some("FencingTokenRequired"))
    );
    for bad in ["-1", "18446744073709551616", "0x10", "5,6", "1.5", "abc"] {
        let (status, body) = put(&c, &url, Some(bad), b"x").await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("InvalidFencingToken")),
            "{bad}"
        );
    }
    let two_tokens = c
        .put(&url)
        .header("Fencing-Token", "5")
        .header("Fencing-Token", "6")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(two_tokens.status().as_u16(), 400);

    assert_eq!(put(&c, &url, Some("5"), b"v1").await.0, 200);
    let resp = c
        .put(&url)
        .header("Fencing-Token", "5")
        .header("If-Match", "\"0000\"")
        .body("v2")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 412);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "PreconditionFailed");
    // The other condition rows (If-None-Match: *, a matching If-Match) run on both backends in
    // tests/it/backend_contract.rs.

    let (status, body) = put(&c, &s.object_url("nope", "k"), Some("1"), b"x").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("NoSuchBucket"))
    );
    let resp = c
        .get(s.object_url("default", "absent"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "NoSuchKey");
    let resp = c.get(s.url("/v1/nowhere")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    // Outside /v1/ the S3 gateway answers; in development mode (no keys) it serves an
    // unsigned request too, here for a bucket that does not exist.
    let resp = c.get(s.url("/nowhere")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    assert_eq!(
        c.get(s.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    let metrics = c
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("fencegate_gate_decisions_total"),
        "{metrics}"
    );
}

#[tokio::test]
async fn backend_failure_is_503_and_keeps_the_recorded_token() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let s = Server::start(&data, None);
    let c = client();
    // Break the backend: the bucket directory becomes a plain file.
    let bucket_dir = data.join("objects/default");
    std::fs::remove_dir_all(&bucket_dir).unwrap();
    std::fs::write(&bucket_dir, b"not a directory").unwrap();
    let (status, body) = put(&c, &s.object_url("default", "k"), Some("8"), b"x").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("BackendUnavailable")),
        "{body}"
    );
    // Contract line 7: the fence stays at the recorded token, and nothing was left staged.
    let fence: serde_json::Value = common::fence(&c, &s, "default", "k").await;
    assert_eq!(fence["highest"], 8);
    assert!(common::files_below(&data.join("objects/.staging")).is_empty());
    // Repaired, the holder retries with the same token.
    std::fs::remove_file(&bucket_dir).unwrap();
    std::fs::create_dir(&bucket_dir).unwrap();
    assert_eq!(
        put(&c, &s.object_url("default", "k"), Some("8"), b"x")
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn tombstones_fences_and_listing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = client();
    let url = s.object_url("default", "dir/obj");
    assert_eq!(put(&c, &url, Some("30"), b"v").await.0, 200);
    assert_eq!(
        put(
            &c,
            &s.object_url("default", "dir"),
            Some("1"),
            b"a file beside the dir"
        )
        .await
        .0,
        200
    );
    assert_eq!(
        put(&c, &s.object_url("default", "other"), Some("1"), b"o")
            .await
            .0,
        200
    );

    let list: serde_json::Value = c
        .get(s.url("/v1/objects/default?prefix=dir"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let keys: Vec<&str> = list["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["dir", "dir/obj"]);
    let page: serde_json::Value = c
        .get(s.url("/v1/objects/default?max_keys=1&start_after=dir"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(page["objects"][0]["key"], "dir/obj");
    assert_eq!(page["next_start_after"], "dir/obj");

    let resp = c
        .delete(&url)
        .header("Fencing-Token", "34")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(get_bytes(&c, &url).await.0, 404);
    let (status, body) = put(&c, &url, Some("33"), b"zombie").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("StaleFencingToken"))
    );
    assert_eq!(
        get_bytes(&c, &url).await.0,
        404,
        "the zombie did not re-create it"
    );
    assert_eq!(put(&c, &url, Some("34"), b"back").await.0, 200);

    // A new holder fences out the old one before writing anything.
    let resp = c
        .post(s.url("/v1/fences/default/dir/obj"))
        .header("Fencing-Token", "40")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let fence: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(fence["highest"], 40);
    assert_eq!(fence["scope"], "object:default/dir/obj");
    assert_eq!(put(&c, &url, Some("39"), b"old holder").await.0, 409);
    assert_eq!(get_bytes(&c, &url).await.1, b"back");
}

#[tokio::test]
async fn limits_on_size_and_idle_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[server]\nmax_body_bytes = 1000\nbody_idle_timeout_secs = 1\n";
    let s = Server::start(&dir.path().join("data"), Some(config));
    let c = client();
    let url = s.object_url("default", "k");
    let (status, body) = put(&c, &url, Some("1"), &[b'x'; 1001]).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (413, Some("EntityTooLarge"))
    );
    // Too large without a Content-Length: cut off mid-stream.
    let chunks = futures::stream::iter((0..20).map(|_| Ok::<_, std::io::Error>(vec![b'y'; 100])));
    let resp = c
        .put(&url)
        .header("Fencing-Token", "1")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 413);
    // A client that stops sending is cut off and holds nothing.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
    tx.send(Ok(b"start".to_vec())).await.unwrap();
    let stalled = reqwest::Body::wrap_stream(tokio_stream(rx));
    // A fresh connection: the server closed the previous one after refusing its body mid-way.
    let resp = client()
        .put(&url)
        .header("Fencing-Token", "1")
        .body(stalled)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 408);
    drop(tx);
    assert_eq!(get_bytes(&client(), &url).await.0, 404);
    assert!(common::files_below(&s.data_dir.join("objects/.staging")).is_empty());
    assert_eq!(put(&client(), &url, Some("1"), b"fits").await.0, 200);
}

fn tokio_stream<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test]
async fn a_huge_header_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let huge = "x".repeat(1 << 20);
    let (status, _) = common::raw_request(
        s.addr,
        &format!("PUT /v1/objects/default/k HTTP/1.1\r\nFencing-Token: 1\r\nX-Huge: {huge}"),
        b"v",
    );
    // hyper answers 431; if the connection is reset before that is read, status is 0.
    assert!(status == 431 || status == 0, "status {status}");
    // Still serving, and nothing was written.
    let c = client();
    assert_eq!(
        c.get(s.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    assert_eq!(get_bytes(&c, &s.object_url("default", "k")).await.0, 404);
    assert!(common::fence(&c, &s, "default", "k").await["highest"].is_null());
}

/// Review round 19, finding 3: headers over `max_header_bytes` (64 KiB) but within twice it
/// get fencegate's own 431 with its explanation, not the HTTP layer's bare one; headers just
/// under the limit still pass.
#[tokio::test]
async fn headers_over_the_limit_get_the_explained_431() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let over = "x".repeat(100 * 1024);
    let (status, body) = common::raw_request(
        s.addr,
        &format!("PUT /v1/objects/default/k HTTP/1.1\r\nFencing-Token: 1\r\nX-Big: {over}"),
        b"v",
    );
    assert_eq!(status, 431, "{body}");
    assert!(body.contains("max_header_bytes"), "{body}");
    let under = "x".repeat(60 * 1024);
    let (status, body) = common::raw_request(
        s.addr,
        &format!("PUT /v1/objects/default/k HTTP/1.1\r\nFencing-Token: 1\r\nX-Big: {under}"),
        b"v",
    );
    assert_eq!(status, 200, "{body}");
}

/// Review round 3: a token sent as `x-amz-meta-fencing-token` (the S3 carrier) is honoured on
/// the native API too, never silently dropped; one that disagrees with `Fencing-Token` is a 400.
#[tokio::test]
async fn a_token_in_metadata_is_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[buckets.loose]\nfencing = \"optional\"\n";
    let s = Server::start(&dir.path().join("data"), Some(config));
    let c = client();
    let url = s.object_url("loose", "k");
    assert_eq!(put(&c, &url, Some("10"), b"newer").await.0, 200);
    let resp = c
        .put(&url)
        .header("x-amz-meta-fencing-token", "9")
        .body("stale")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 409);
    let resp = c
        .put(&url)
        .header("Fencing-Token", "11")
        .header("x-amz-meta-fencing-token", "12")
        .body("mixed")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert_eq!(get_bytes(&c, &url).await.1, b"newer");
}

/// Idempotency-Key on the native API: the replay carries `Idempotent-Replayed: true` and the
/// first answer; another body is 422; malformed or repeated keys are 400; a keyed delete is
/// replayed with its first answer.
#[tokio::test]
async fn idempotency_keys() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = client();
    let url = s.object_url("default", "k");
    let send = |token: &str, key: &str, body: &'static str| {
        c.put(&url)
            .header("Fencing-Token", token)
            .header("Idempotency-Key", key)
            .body(body)
            .send()
    };
    let first = send("5", "a1", "five").await.unwrap();
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: serde_json::Value = first.json().await.unwrap();
    let (s6, _) = put(&c, &url, Some("6"), b"six").await;
    assert_eq!(s6, 200);
    let again = send("5", "\"a1\"", "five").await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: serde_json::Value = again.json().await.unwrap();
    assert_eq!(again, first);
    assert_eq!(get_bytes(&c, &url).await.1, b"six");
    let other = send("5", "a1", "FIVE").await.unwrap();
    assert_eq!(other.status(), 422);
    let other: serde_json::Value = other.json().await.unwrap();
    assert_eq!(other["error"], "IdempotencyKeyMismatch");
    for bad in ["", "a b", &"x".repeat(256)] {
        let r = send("7", bad, "x").await.unwrap();
        assert_eq!(r.status(), 400, "{bad:?}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"], "InvalidIdempotencyKey");
    }
    let twice = c
        .put(&url)
        .header("Fencing-Token", "7")
        .header("Idempotency-Key", "a")
        .header("Idempotency-Key", "b")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(twice.status(), 400);
    assert_eq!(
        get_bytes(&c, &url).await.1,
        b"six",
        "refusals changed nothing"
    );
    let delete = || {
        c.delete(&url)
            .header("Fencing-Token", "8")
            .header("Idempotency-Key", "d1")
            .send()
    };
    let d: serde_json::Value = delete().await.unwrap().json().await.unwrap();
    assert_eq!(d["existed"], true);
    let replay = delete().await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let replay: serde_json::Value = replay.json().await.unwrap();
    assert_eq!(replay["existed"], true);
}

/// Review round 24, F6: the native API ignored Content-MD5 and `x-amz-checksum-*`. They are
/// checked as on the S3 gateway: a body that does not match is 400 BadDigest and nothing is
/// written (the token not recorded either).
#[tokio::test]
async fn declared_digests_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = client();
    // MD5 and CRC32 of "hello world", base64.
    for (name, right, wrong) in [
        (
            "content-md5",
            "XrY7u+Ae7tCTyyK7j1rNww==",
            "AAAAAAAAAAAAAAAAAAAAAA==",
        ),
        ("x-amz-checksum-crc32", "DUoRhQ==", "AAAAAA=="),
    ] {
        let url = s.object_url("default", name);
        let resp = c
            .put(&url)
            .header("Fencing-Token", "1")
            .header(name, wrong)
            .body("hello world")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 400, "{name}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["error"], "BadDigest", "{name}");
        assert_eq!(c.get(&url).send().await.unwrap().status().as_u16(), 404);
        let fence: serde_json::Value = c
            .get(s.url(&format!("/v1/fences/default/{name}")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(fence["highest"].is_null(), "{name}: {fence}");
        let resp = c
            .put(&url)
            .header("Fencing-Token", "1")
            .header(name, right)
            .body("hello world")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{name}");
    }
}

/// A body in a transfer coding hyper does not undo (`gzip, chunked`) is refused before any
/// handler, on both APIs, rather than stored still encoded.
#[tokio::test]
async fn a_transfer_coding_other_than_chunked_is_refused() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    for path in ["/v1/objects/default/gz", "/default/gz"] {
        let mut stream = std::net::TcpStream::connect(s.addr).unwrap();
        let head = format!(
            "PUT {path} HTTP/1.1\r\nHost: {}\r\nFencing-Token: 1\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            s.addr
        );
        stream.write_all(head.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 501"), "{path}: {answer}");
        assert!(answer.contains("NotImplemented"), "{path}: {answer}");
    }
    let c = common::client();
    let (status, _) = common::get_bytes(&c, &s.object_url("default", "gz")).await;
    assert_eq!(status, 404, "nothing was stored");
}
