//! Multipart uploads the s3 backend starts for a large body never outlive their request: a
//! request dropped mid-body (the client hung up) aborts its upload, and start-up aborts the
//! uploads a crash left under the bucket's prefix, but never one a client started through the
//! S3 gateway and may still complete.

use crate::common;
use bytes::Bytes;
use common::moto::{client_with, Moto};
use common::s3proxy::{Mode, S3Proxy};
use common::Server;
use fencegate::backend::s3::{build_clients, S3Backend};
use fencegate::backend::{Backend, BodyError, ByteStream, ObjectMeta};
use fencegate::config::S3BackendConfig;
use futures::StreamExt;
use std::time::{Duration, Instant};

const BUCKET: &str = "staging-store";
const PART: u64 = 5 * 1024 * 1024;

async fn backend(moto: &Moto, prefix: &str) -> S3Backend {
    backend_at(moto.endpoint(), prefix).await
}

async fn backend_at(endpoint: String, prefix: &str) -> S3Backend {
    let cfg = S3BackendConfig {
        endpoint: Some(endpoint),
        access_key_id: Some("test".into()),
        secret_access_key: Some("test".into()),
        multipart_threshold_bytes: PART,
        ..S3BackendConfig::default()
    };
    S3Backend::new(build_clients(&cfg).await.unwrap(), BUCKET, prefix, PART)
}

/// The store keys of the multipart uploads in progress.
async fn uploads(moto: &Moto) -> Vec<String> {
    let out = moto
        .client()
        .list_multipart_uploads()
        .bucket(BUCKET)
        .send()
        .await
        .unwrap();
    let mut keys: Vec<String> = out
        .uploads()
        .iter()
        .map(|u| u.key().unwrap().to_string())
        .collect();
    keys.sort();
    keys
}

async fn wait_for(moto: &Moto, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = uploads(moto).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "multipart uploads in the store: {got:?}, expected {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// 6 MiB (over the threshold, so a multipart upload starts), then `tail`.
fn large_body(tail: ByteStream) -> ByteStream {
    let chunk = Bytes::from(vec![7u8; 1024 * 1024]);
    futures::stream::iter((0..6).map(move |_| Ok(chunk.clone())))
        .chain(tail)
        .boxed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_or_broken_large_body_leaves_no_multipart_upload() {
    let moto = Moto::start();
    moto.create_bucket(BUCKET).await;
    let s3 = std::sync::Arc::new(backend(&moto, "t/").await);

    // The client stalls after 6 MiB, then hangs up: the request's future is dropped.
    let stager = s3.clone();
    let task = tokio::spawn(async move {
        let body = large_body(futures::stream::pending().boxed());
        stager
            .stage("b", "dropped", ObjectMeta::default(), body)
            .await
    });
    wait_for(&moto, &["t/dropped"]).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    wait_for(&moto, &[]).await;

    // A body that breaks mid-way is aborted before the error is answered.
    let broken = large_body(
        futures::stream::iter([Err(BodyError::Broken("connection reset".into()))]).boxed(),
    );
    assert!(s3
        .stage("b", "broken", ObjectMeta::default(), broken)
        .await
        .is_err());
    assert_eq!(uploads(&moto).await, Vec::<String>::new());

    // A completed stage is the gate's to commit or discard: its upload stays until then.
    let whole = large_body(futures::stream::empty().boxed());
    let staged = s3
        .stage("b", "whole", ObjectMeta::default(), whole)
        .await
        .unwrap();
    assert_eq!(uploads(&moto).await, ["t/whole"]);
    s3.discard(staged).await;
    assert_eq!(uploads(&moto).await, Vec::<String>::new());
}

async fn plant(moto: &Moto, key: &str) {
    moto.client()
        .create_multipart_upload()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_aborts_abandoned_uploads_under_the_prefix_only() {
    let moto = Moto::start();
    moto.create_bucket(BUCKET).await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = |age: u64| {
        format!(
            "[backends.store]\nkind = \"s3\"\nendpoint = \"{}\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\nunsafe_no_conditional_writes = true\nabandoned_upload_secs = {age}\n\n[buckets.default]\nbackend = \"store\"\nbackend_bucket = \"{BUCKET}\"\nbackend_prefix = \"tenant/\"\n",
            moto.endpoint()
        )
    };
    // Left by a crash under the bucket's prefix, and someone else's beside it.
    plant(&moto, "tenant/abandoned-1").await;
    plant(&moto, "other/not-ours").await;
    let s = Server::start(&data, Some(&config(0)));
    wait_for(&moto, &["other/not-ours"]).await;

    // A client starts an upload through the S3 gateway: it is in the registry, and survives a
    // restart; another crash leftover does not.
    let gateway = client_with(&s.url(""), "fencegate", "fencegate-dev-secret");
    gateway
        .create_multipart_upload()
        .bucket("default")
        .key("client-upload")
        .metadata("fencing-token", "1")
        .send()
        .await
        .unwrap();
    plant(&moto, "tenant/abandoned-2").await;
    s.kill9();
    let s = Server::start(&data, Some(&config(0)));
    wait_for(&moto, &["other/not-ours", "tenant/client-upload"]).await;

    // Uploads younger than abandoned_upload_secs stay. moto dates every upload 2010, so
    // "younger" here takes an age limit of 95 years (fencegate takes at most 100).
    plant(&moto, "tenant/young").await;
    s.kill9();
    let _s = Server::start(&data, Some(&config(3_000_000_000)));
    assert_eq!(
        uploads(&moto).await,
        ["other/not-ours", "tenant/client-upload", "tenant/young"]
    );
}

/// A body of many parts, each of other bytes, goes up a few parts at once: the object the
/// commit leaves holds every byte in order, its version is the store's multipart ETag, and its
/// client is answered the MD5 of the whole body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_sent_parts_at_once_lands_whole_and_in_order() {
    use md5::{Digest, Md5};
    let moto = Moto::start();
    moto.create_bucket(BUCKET).await;
    let s3 = backend(&moto, "p/").await;
    let mut want = Vec::new();
    for i in 0..7u8 {
        want.extend(std::iter::repeat_n(b'a' + i, PART as usize));
    }
    want.extend(b"the tail, less than a part");
    // Uneven chunks, so that no part boundary falls on a chunk's.
    let chunks: Vec<Result<Bytes, BodyError>> = want
        .chunks(777_777)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let staged = s3
        .stage(
            "b",
            "many",
            ObjectMeta::default(),
            futures::stream::iter(chunks).boxed(),
        )
        .await
        .unwrap();
    assert_eq!(
        staged.etag,
        format!("\"{}\"", hex::encode(Md5::digest(&want)))
    );
    assert!(
        staged.version.as_deref().unwrap().ends_with("-8\""),
        "{:?}",
        staged.version
    );
    let info = s3.commit(&staged, None).await.unwrap();
    assert_eq!(Some(info.version), staged.version);
    let got = moto
        .client()
        .get_object()
        .bucket(BUCKET)
        .key("p/many")
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the parts landed out of order or changed");
}

/// One part fails while the next ones are on their way to the store: the upload is aborted
/// only once they have been answered, so that none reaches the store after the abort (S3 may
/// keep a part whose upload was aborted while it was in progress, out of reach of the start-up
/// sweep), and the error is answered with nothing left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_part_aborts_the_upload_only_after_the_parts_in_flight() {
    let moto = Moto::start();
    moto.create_bucket(BUCKET).await;
    let proxy = S3Proxy::start(moto.endpoint()).await;
    let s3 = backend_at(proxy.endpoint(), "f/").await;
    proxy.set(Mode::LateUploadParts);
    let mut want = Vec::new();
    for i in 0..6u8 {
        want.extend(std::iter::repeat_n(b'a' + i, PART as usize));
    }
    let chunks: Vec<Result<Bytes, BodyError>> = want
        .chunks(1024 * 1024)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let started = Instant::now();
    let staged = s3
        .stage(
            "b",
            "failing",
            ObjectMeta::default(),
            futures::stream::iter(chunks).boxed(),
        )
        .await;
    assert!(staged.is_err(), "a refused part was staged");
    let answered = started.elapsed();
    assert_eq!(uploads(&moto).await, Vec::<String>::new());
    // Late parts the proxy still forwards would have been counted by now.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        proxy.parts_after_abort(),
        0,
        "parts reached the store after their upload was aborted"
    );
    // The parts held by the store for a second were answered before the abort.
    assert!(answered >= Duration::from_secs(1), "{answered:?}");
}

/// Bodies that end right at a part boundary, with and without an empty chunk after the last
/// byte: no empty trailing part is sent, and the ETags are the whole body's MD5 and the MD5
/// of the parts' MD5s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_ending_at_a_part_boundary_sends_no_empty_part() {
    use md5::{Digest, Md5};
    let moto = Moto::start();
    moto.create_bucket(BUCKET).await;
    let s3 = backend(&moto, "e/").await;
    for (n, empty_tail) in [(2u8, false), (5, true), (6, false)] {
        let mut want = Vec::new();
        let mut of_parts = Md5::new();
        for i in 0..n {
            let part = vec![b'a' + i; PART as usize];
            of_parts.update(Md5::digest(&part));
            want.extend(part);
        }
        let mut chunks: Vec<Result<Bytes, BodyError>> = want
            .chunks(PART as usize)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        if empty_tail {
            chunks.push(Ok(Bytes::new()));
        }
        let key = format!("edge-{n}");
        let staged = s3
            .stage(
                "b",
                &key,
                ObjectMeta::default(),
                futures::stream::iter(chunks).boxed(),
            )
            .await
            .unwrap();
        assert_eq!(
            staged.etag,
            format!("\"{}\"", hex::encode(Md5::digest(&want))),
            "{n} parts"
        );
        assert_eq!(
            staged.version.as_deref(),
            Some(format!("\"{}-{n}\"", hex::encode(of_parts.finalize())).as_str()),
            "{n} parts"
        );
        s3.commit(&staged, None).await.unwrap();
        let got = moto
            .client()
            .get_object()
            .bucket(BUCKET)
            .key(format!("e/{key}"))
            .send()
            .await
            .unwrap()
            .body
            .collect()
            .await
            .unwrap()
            .into_bytes();
        assert!(got == want, "{n} parts: the object differs from the body");
    }
}
