//! The azure backend's faults on a real Azurite: a commit held in flight past its deadline
//! (a network that delays a connection's bytes) never lands over what newer tokens did since.

use crate::common;
use common::azurite::Azurite;
use common::relay::Relay;
use common::{client, get_bytes, put, Server};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Review finding: a Put Blob held in flight past the commit deadline landed when it finally
/// reached the service, after the key had been written by token 6 and deleted by token 7 (its
/// `If-None-Match: *` held again), because nothing in the request expired. Each commit now
/// carries a SAS that expires with its deadline, and the service refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_held_past_its_deadline_never_lands() {
    let az = Azurite::start();
    az.create_container("held");
    let port: u16 = az
        .endpoint()
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let relay = Relay::start(([127, 0, 0, 1], port).into()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[backends.az]\nkind = \"azure\"\naccount = \"{}\"\naccess_key = \"{}\"\nendpoint = \"http://127.0.0.1:{}/devstoreaccount1\"\nread_timeout_secs = 2\ncall_timeout_secs = 2\ncommit_deadline_secs = 3\n\n[buckets.default]\nbackend = \"az\"\nbackend_bucket = \"held\"\n",
        az.account(),
        az.key(),
        relay.port
    );
    let server = Server::start(&dir.path().join("data"), Some(&config));
    let c = client();
    let url = server.object_url("default", "doc");
    relay.hold.store(true, Ordering::SeqCst);
    let (status, body) = put(&c, &url, Some("5"), b"five").await;
    assert!(
        status >= 500,
        "the held commit has no answer: {status} {body}"
    );
    relay.hold.store(false, Ordering::SeqCst);
    // Once its deadline has passed the key is given to newer tokens: written, then deleted.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = put(&c, &url, Some("6"), b"six").await;
        if status == 200 {
            break;
        }
        assert_eq!(body["error"], "CommitUnresolved", "{status} {body}");
        assert!(
            Instant::now() < deadline,
            "the key stayed unresolved: {body}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let deleted = c
        .delete(&url)
        .header("Fencing-Token", "7")
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(deleted, 200, "token 7 deletes the key");
    // Token 5's Put Blob reaches the service now, whole, past its SAS's expiry.
    relay.release.send(true).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        az.get_behind("held", "doc"),
        None,
        "the held token-5 commit landed after token 7's delete"
    );
    assert_eq!(get_bytes(&c, &url).await.0, 404);
}

/// What a crash leaves under `.fencegate-probe/` is swept at start-up: a staging blob whose
/// body never reached its commit goes, the blob of a client's multipart upload that the
/// registry still holds stays, and that upload completes after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_staging_blobs_are_swept_and_live_uploads_kept() {
    let az = Azurite::start();
    az.create_container("sweep");
    az.put_behind("sweep", ".fencegate-probe/staging/left-by-a-crash", b"x");
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[backends.az]\nkind = \"azure\"\naccount = \"{}\"\naccess_key = \"{}\"\nendpoint = \"{}\"\nabandoned_upload_secs = 0\n\n[buckets.default]\nbackend = \"az\"\nbackend_bucket = \"sweep\"\nfencing = \"optional\"\n",
        az.account(),
        az.key(),
        az.endpoint()
    );
    let data = dir.path().join("data");
    let server = Server::start(&data, Some(&config));
    assert_eq!(
        az.list_staged_behind("sweep", ".fencegate-probe/staging/"),
        Vec::<String>::new(),
        "the abandoned staging blob was swept"
    );
    let s3 = common::moto::client_with(&server.url(""), "fencegate", "fencegate-dev-secret");
    let up = s3
        .create_multipart_upload()
        .bucket("default")
        .key("m")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap().to_string();
    let part = s3
        .upload_part()
        .bucket("default")
        .key("m")
        .upload_id(&id)
        .part_number(1)
        .body(aws_sdk_s3::primitives::ByteStream::from_static(
            b"kept part",
        ))
        .send()
        .await
        .unwrap();
    let uploads = || az.list_staged_behind("sweep", ".fencegate-probe/uploads/");
    assert_eq!(uploads().len(), 1, "the upload's blob holds its part");
    server.kill9();
    let server = Server::start(&data, Some(&config));
    assert_eq!(uploads().len(), 1, "a registered upload's blob is kept");
    let s3 = common::moto::client_with(&server.url(""), "fencegate", "fencegate-dev-secret");
    s3.complete_multipart_upload()
        .bucket("default")
        .key("m")
        .upload_id(&id)
        .multipart_upload(
            aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .parts(
                    aws_sdk_s3::types::CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.e_tag().unwrap())
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        az.get_behind("sweep", "m").as_deref(),
        Some(&b"kept part"[..])
    );
    assert!(uploads().is_empty(), "the completed upload's blob is gone");
}

/// A proxy in front of Azurite that forwards every request, and on each Copy Blob then writes
/// the same blob around fencegate (a Put Blob authorized by the copy's own SAS) and answers the
/// copy as still `pending`: a write that lands while fencegate waits for its copy to finish.
async fn copy_race_proxy(upstream: String) -> u16 {
    use axum::body::Body;
    use axum::extract::{Request, State};
    use axum::response::Response;
    // Recomputed by the client on each hop, or hop-by-hop. The Host header is forwarded:
    // Azurite takes a copy whose source names the host the request was sent to as a copy
    // within the account.
    const HOP: [&str; 3] = ["content-length", "transfer-encoding", "connection"];
    async fn relay(
        State((upstream, c)): State<(String, reqwest::Client)>,
        req: Request,
    ) -> Response {
        let (parts, body) = req.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        let url = format!("{upstream}{}", parts.uri.path_and_query().unwrap());
        let mut out = c.request(parts.method.clone(), &url);
        for (name, value) in &parts.headers {
            if !HOP.contains(&name.as_str()) {
                out = out.header(name, value);
            }
        }
        let resp = out.body(body).send().await.unwrap();
        let status = resp.status().as_u16();
        let mut headers = resp.headers().clone();
        let bytes = resp.bytes().await.unwrap();
        if parts.method == "PUT" && parts.headers.contains_key("x-ms-copy-source") && status == 202
        {
            let around = c
                .put(&url)
                .header("x-ms-blob-type", "BlockBlob")
                .header("x-ms-version", "2021-08-06")
                .body("written around fencegate")
                .send()
                .await
                .unwrap();
            assert_eq!(around.status().as_u16(), 201, "the write around fencegate");
            headers.insert("x-ms-copy-status", "pending".parse().unwrap());
        }
        let mut builder = Response::builder().status(status);
        for (name, value) in &headers {
            if !HOP.contains(&name.as_str()) {
                builder = builder.header(name, value);
            }
        }
        builder.body(Body::from(bytes)).unwrap()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new()
        .fallback(relay)
        .with_state((upstream, reqwest::Client::new()));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    port
}

/// A large body is committed by a Copy Blob of its staging blob, which the service may answer
/// `pending`. Found while finishing issue 51: fencegate then waited for the blob's copy status
/// without checking that the copy was its own, so a write landing meanwhile (which ends the
/// copy and leaves no copy status) was acknowledged as the commit, with the other write's
/// ETag. The blob's `x-ms-copy-id` must now be the copy's: the PUT is refused as a bypass, and
/// the other write stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_during_a_pending_copy_is_not_taken_for_the_commit() {
    let az = Azurite::start();
    az.create_container("copies");
    let port = copy_race_proxy(format!("http://127.0.0.1:{}", az.port)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[backends.az]\nkind = \"azure\"\naccount = \"{}\"\naccess_key = \"{}\"\nendpoint = \"http://127.0.0.1:{port}/devstoreaccount1\"\nblock_size_bytes = 1048576\n\n[buckets.default]\nbackend = \"az\"\nbackend_bucket = \"copies\"\n",
        az.account(),
        az.key(),
    );
    let server = Server::start(&dir.path().join("data"), Some(&config));
    let c = client();
    let url = server.object_url("default", "big");
    // Over the block size: staged in blocks, committed by Copy Blob.
    let body: &'static [u8] = Box::leak(vec![b'f'; 3 << 20].into_boxed_slice());
    let (status, answer) = put(&c, &url, Some("5"), body).await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (409, Some("BypassDetected")),
        "{answer}"
    );
    assert_eq!(
        az.get_behind("copies", "big").as_deref(),
        Some(&b"written around fencegate"[..])
    );
}
