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
