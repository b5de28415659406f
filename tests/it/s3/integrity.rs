//! Never acknowledge bytes the store did not keep (issue 14 §3; docs/design.md, "The store's
//! answer is checked"). Two real misbehaving stores: moto, which parses a body sent as
//! `application/x-www-form-urlencoded` and keeps an empty object, and a proxy in front of moto
//! that answers every PUT with the ETag of other bytes. Each write is refused with 502
//! `StoreKeptDifferentBytes`, nothing is recorded as committed, and a well-behaved store
//! (negative control) acknowledges the same requests.

use crate::common;
use aws_sdk_s3::primitives::ByteStream;
use common::moto::Moto;
use common::s3proxy::{Mode, S3Proxy};
use common::{client, fence, get_bytes, Server};

const BUCKET: &str = "fencegate-integrity";
const PART: usize = 5 * 1024 * 1024;

struct Rig {
    _moto: Moto,
    proxy: S3Proxy,
    _dir: tempfile::TempDir,
    s: Server,
}

/// fencegate → proxy → moto (moto ignores conditional completions: the unsafe mode).
async fn rig() -> Rig {
    let moto = Moto::start();
    moto.create_bucket(BUCKET).await;
    let proxy = S3Proxy::start(moto.endpoint()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[backends.store]\nkind = \"s3\"\nendpoint = \"{}\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\nmultipart_threshold_bytes = {PART}\nunsafe_no_conditional_writes = true\n\n[buckets.default]\nbackend = \"store\"\nbackend_bucket = \"{BUCKET}\"\n",
        proxy.endpoint()
    );
    let s = Server::start(&dir.path().join("data"), Some(&config));
    Rig {
        _moto: moto,
        proxy,
        _dir: dir,
        s,
    }
}

/// A native PUT with the given Content-Type; (status, JSON answer).
async fn put_typed(
    s: &Server,
    key: &str,
    token: u64,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, serde_json::Value) {
    let resp = client()
        .put(s.object_url("default", key))
        .header("Fencing-Token", token.to_string())
        .header("Content-Type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or_default())
}

fn assert_refused(answer: &(u16, serde_json::Value)) {
    assert_eq!(answer.0, 502, "{:?}", answer.1);
    assert_eq!(
        answer.1["error"], "StoreKeptDifferentBytes",
        "{:?}",
        answer.1
    );
    let message = answer.1["message"].as_str().unwrap();
    assert!(
        message.contains("nothing was acknowledged"),
        "the message says what happened: {message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn moto_parsing_a_form_body_is_refused_not_acknowledged() {
    let r = rig().await;
    // curl --data-binary's default Content-Type: moto parses the body as a form, keeps "".
    let answer = put_typed(
        &r.s,
        "form",
        1,
        "application/x-www-form-urlencoded",
        b"abc".to_vec(),
    )
    .await;
    assert_refused(&answer);
    let message = answer.1["message"].as_str().unwrap();
    assert!(message.contains("application/octet-stream"), "{message}");
    // Nothing recorded as committed: the fence table holds no version for the key, so the
    // next write finds the empty object as a write made around fencegate.
    let f = fence(&client(), &r.s, "default", "form").await;
    assert!(f["etag"].is_null(), "no version recorded: {f}");
    assert_eq!(f["highest"], 1, "the token stays recorded: {f}");
    let next = put_typed(&r.s, "form", 2, "application/octet-stream", b"abc".to_vec()).await;
    assert_eq!(next.0, 409, "{:?}", next.1);
    assert_eq!(next.1["error"], "BypassDetected");
    // Negative control: the same bytes as octet-stream are kept and acknowledged.
    let ok = put_typed(
        &r.s,
        "octet",
        1,
        "application/octet-stream",
        b"abc".to_vec(),
    )
    .await;
    assert_eq!(ok.0, 200, "{:?}", ok.1);
    assert_eq!(
        get_bytes(&client(), &r.s.object_url("default", "octet")).await,
        (200, b"abc".to_vec())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_answering_with_another_etag_is_refused_for_puts_and_parts() {
    let r = rig().await;
    r.proxy.set(Mode::WrongPutEtags);
    // One PutObject.
    assert_refused(
        &put_typed(
            &r.s,
            "small",
            1,
            "application/octet-stream",
            b"abc".to_vec(),
        )
        .await,
    );
    // A body over the threshold: staged as parts, the first part's answer is refused and the
    // upload aborted.
    let big = vec![7u8; PART + 1000];
    assert_refused(&put_typed(&r.s, "big", 1, "application/octet-stream", big.clone()).await);
    // A part sent through the S3 gateway (streamed to the store as it arrives).
    let c = common::moto::client_with(&r.s.url(""), "fencegate", "fencegate-dev-secret");
    let upload = c
        .create_multipart_upload()
        .bucket("default")
        .key("mp")
        .metadata("fencing-token", "1")
        .send()
        .await
        .unwrap();
    let id = upload.upload_id().unwrap();
    let e = c
        .upload_part()
        .bucket("default")
        .key("mp")
        .upload_id(id)
        .part_number(1)
        .body(ByteStream::from(vec![1u8; 1000]))
        .send()
        .await
        .expect_err("a part the store kept otherwise is refused");
    let raw = e.raw_response().expect("an HTTP answer");
    assert_eq!(raw.status().as_u16(), 502);
    assert!(
        String::from_utf8_lossy(raw.body().bytes().unwrap()).contains("StoreKeptDifferentBytes"),
        "{e:?}"
    );
    // Negative control: the same requests through an honest store are acknowledged.
    r.proxy.set(Mode::Pass);
    let ok = put_typed(
        &r.s,
        "small2",
        1,
        "application/octet-stream",
        b"abc".to_vec(),
    )
    .await;
    assert_eq!(ok.0, 200, "{:?}", ok.1);
    let ok = put_typed(&r.s, "big2", 1, "application/octet-stream", big.clone()).await;
    assert_eq!(ok.0, 200, "{:?}", ok.1);
    assert_eq!(
        get_bytes(&client(), &r.s.object_url("default", "big2")).await,
        (200, big)
    );
    c.upload_part()
        .bucket("default")
        .key("mp")
        .upload_id(id)
        .part_number(1)
        .body(ByteStream::from(vec![1u8; 1000]))
        .send()
        .await
        .expect("an honest store's part is acknowledged");
    let metrics = client()
        .get(r.s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // An alert can count them (the SDK retries a 502, so a refused part may count more than once).
    for operation in ["PutObject", "UploadPart"] {
        let prefix =
            format!("fencegate_store_integrity_failures_total{{operation=\"{operation}\"}} ");
        assert!(
            metrics.lines().any(|l| l.starts_with(&prefix)),
            "{operation} counted: {metrics}"
        );
    }
}
