//! fencegate's lease API over HTTP against the real binary: tokens that only grow (across
//! kill -9 and restart), holding and waiting, bound leases that fence the previous holder at
//! acquire, lease-bound S3 credentials, and bad input.

use crate::common;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use common::{client, Server};
use serde_json::{json, Value};
use std::path::Path;

async fn call(
    c: &reqwest::Client,
    s: &Server,
    method: reqwest::Method,
    name: &str,
    body: Value,
) -> (u16, Value, Option<String>) {
    let resp = c
        .request(method, s.url(&format!("/v1/leases/{name}")))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let text = resp.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, value, retry)
}

async fn acquire(c: &reqwest::Client, s: &Server, name: &str, body: Value) -> (u16, Value) {
    let (status, v, _) = call(c, s, reqwest::Method::POST, name, body).await;
    (status, v)
}

fn start(dir: &Path, extra: &str) -> Server {
    Server::start(
        &dir.join("data"),
        Some(&format!(
            "[leases]\ncredential_grace_secs = 1\n\n[buckets.default]\n{extra}"
        )),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_renew_release_and_tokens_survive_kill9() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), "");
    let c = client();
    let (status, a) = acquire(&c, &s, "nightly", json!({"holder": "a", "ttl_ms": 60000})).await;
    assert_eq!(status, 200, "{a}");
    let t1 = a["token"].as_u64().unwrap();
    let secret = a["lease_secret"].as_str().unwrap().to_string();
    assert!(a["expires_at_ms"].as_u64().unwrap() > 0);

    let (status, v, retry) = call(
        &c,
        &s,
        reqwest::Method::POST,
        "nightly",
        json!({"holder": "b", "ttl_ms": 1000}),
    )
    .await;
    assert_eq!((status, v["error"].as_str()), (409, Some("LeaseHeld")));
    assert_eq!(v["holder"], "a");
    assert!(retry.unwrap().parse::<u64>().unwrap() >= 59);

    let (status, v, _) = call(
        &c,
        &s,
        reqwest::Method::PUT,
        "nightly",
        json!({"holder": "b", "token": t1, "secret": secret, "ttl_ms": 1000}),
    )
    .await;
    assert_eq!((status, v["error"].as_str()), (409, Some("NotLeaseHolder")));
    // The holder and token GET shows are not enough: renew and release need the secret.
    let (status, v, _) = call(
        &c,
        &s,
        reqwest::Method::PUT,
        "nightly",
        json!({"holder": "a", "token": t1, "secret": "guessed", "ttl_ms": 1000}),
    )
    .await;
    assert_eq!((status, v["error"].as_str()), (409, Some("NotLeaseHolder")));
    let (status, v, _) = call(
        &c,
        &s,
        reqwest::Method::DELETE,
        "nightly",
        json!({"holder": "a", "token": t1}),
    )
    .await;
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some("InvalidArgument"))
    );
    let (status, v, _) = call(
        &c,
        &s,
        reqwest::Method::PUT,
        "nightly",
        json!({"holder": "a", "token": t1, "secret": secret, "ttl_ms": 30000}),
    )
    .await;
    assert_eq!((status, v["ttl_ms"].as_u64()), (200, Some(30000)));
    let (status, v, _) = call(&c, &s, reqwest::Method::GET, "nightly", json!({})).await;
    assert_eq!((status, v["holder"].as_str()), (200, Some("a")));
    assert!(v.get("lease_secret").is_none(), "{v}");

    let release = json!({"holder": "a", "token": t1, "secret": secret});
    let (status, _, _) = call(&c, &s, reqwest::Method::DELETE, "nightly", release.clone()).await;
    assert_eq!(status, 204);
    let (status, v, _) = call(&c, &s, reqwest::Method::DELETE, "nightly", release).await;
    assert_eq!((status, v["error"].as_str()), (404, Some("NoSuchLease")));

    // A waiter is served as soon as the holder releases.
    let (_, b) = acquire(&c, &s, "nightly", json!({"holder": "b", "ttl_ms": 60000})).await;
    let t2 = b["token"].as_u64().unwrap();
    assert!(t2 > t1);
    let waiter = {
        let (c, url) = (c.clone(), s.url("/v1/leases/nightly"));
        tokio::spawn(async move {
            c.post(url)
                .json(&json!({"holder": "c", "ttl_ms": 1000, "wait_ms": 20000}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    call(
        &c,
        &s,
        reqwest::Method::DELETE,
        "nightly",
        json!({"holder": "b", "token": t2, "secret": b["lease_secret"]}),
    )
    .await;
    let cgrant = waiter.await.unwrap();
    let t3 = cgrant["token"].as_u64().unwrap();
    assert!(t3 > t2, "{cgrant}");

    // kill -9: leases end, tokens never go back.
    s.kill9();
    let s = start(dir.path(), "");
    let (status, d) = acquire(&c, &s, "nightly", json!({"holder": "d", "ttl_ms": 1000})).await;
    assert_eq!(status, 200, "the restart ended c's lease");
    assert!(d["token"].as_u64().unwrap() > t3, "{d}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lease_requests_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), "");
    let c = client();
    for (name, body, code) in [
        ("ok", json!({"holder": "a", "ttl_ms": 0}), "InvalidTtl"),
        (
            "ok",
            json!({"holder": "a", "ttl_ms": -5}),
            "InvalidArgument",
        ),
        (
            "ok",
            json!({"holder": "a", "ttl_ms": 999999999999u64}),
            "InvalidTtl",
        ),
        ("ok", json!({"holder": "a"}), "InvalidArgument"),
        ("ok", json!({"holder": "", "ttl_ms": 10}), "InvalidArgument"),
        (
            "ok",
            json!({"holder": "a", "ttl_ms": 10, "wait_ms": 3600000}),
            "InvalidArgument",
        ),
        (
            "ok",
            json!({"holder": "a", "ttl_ms": 10, "bucket": "default"}),
            "InvalidArgument",
        ),
        (
            "ok",
            json!({"holder": "a", "ttl_ms": 10, "bucket": "nope", "key": "k"}),
            "NoSuchBucket",
        ),
        (
            "a..b",
            json!({"holder": "a", "ttl_ms": 10}),
            "InvalidLeaseName",
        ),
        (
            "a%00b",
            json!({"holder": "a", "ttl_ms": 10}),
            "InvalidLeaseName",
        ),
        (
            "a%20b",
            json!({"holder": "a", "ttl_ms": 10}),
            "InvalidLeaseName",
        ),
        (
            "x/y",
            json!({"holder": "a", "ttl_ms": 10}),
            "InvalidLeaseName",
        ),
    ] {
        let (status, v) = acquire(&c, &s, name, body.clone()).await;
        let want = if code == "NoSuchBucket" { 404 } else { 400 };
        assert_eq!(
            (status, v["error"].as_str()),
            (want, Some(code)),
            "{name} {body}"
        );
    }
    let long = "n".repeat(201);
    let (status, v) = acquire(&c, &s, &long, json!({"holder": "a", "ttl_ms": 10})).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some("InvalidLeaseName"))
    );
    let resp = c
        .post(s.url("/v1/leases/ok"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    // Nothing was granted by any of that.
    let (status, _) = acquire(&c, &s, "ok", json!({"holder": "z", "ttl_ms": 1000})).await;
    assert_eq!(status, 200);
}

async fn native_put(
    c: &reqwest::Client,
    s: &Server,
    key: &str,
    token: u64,
    body: &'static str,
) -> u16 {
    common::put(
        c,
        &s.object_url("default", key),
        Some(&token.to_string()),
        body.as_bytes(),
    )
    .await
    .0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_lease_fences_the_previous_holder_at_acquire() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), "");
    let c = client();
    let bind = |holder: &str| json!({"holder": holder, "ttl_ms": 300, "bucket": "default", "key": "report"});
    let (_, a) = acquire(&c, &s, "report", bind("a")).await;
    let ta = a["token"].as_u64().unwrap();
    assert_eq!(a["scope"], "object:default/report");
    assert_eq!(native_put(&c, &s, "report", ta, "by a").await, 200);
    // a stalls past its TTL; b acquires. b has not written yet, and a is already fenced.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let (status, b) = acquire(&c, &s, "report", bind("b")).await;
    assert_eq!(status, 200);
    let tb = b["token"].as_u64().unwrap();
    assert!(tb > ta);
    assert_eq!(
        native_put(&c, &s, "report", ta, "late write by a").await,
        409
    );
    let (_, body) = common::get_bytes(&c, &s.object_url("default", "report")).await;
    assert_eq!(body, b"by a");
    assert_eq!(native_put(&c, &s, "report", tb, "by b").await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_bound_s3_credentials_carry_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), "");
    let c = client();
    let body = |holder: &str| json!({"holder": holder, "ttl_ms": 60000, "bucket": "default", "key": "data.csv", "s3_credentials": true});
    let (_, a) = acquire(&c, &s, "data", body("a")).await;
    let ta = a["token"].as_u64().unwrap();
    let creds = &a["s3_credentials"];
    let a3 = common::moto::client_with(
        &s.url(""),
        creds["access_key_id"].as_str().unwrap(),
        creds["secret_access_key"].as_str().unwrap(),
    );
    // No token anywhere in the request: the credentials carry it.
    a3.put_object()
        .bucket("default")
        .key("data.csv")
        .body(ByteStream::from_static(b"by a"))
        .send()
        .await
        .unwrap();
    let head = a3
        .head_object()
        .bucket("default")
        .key("data.csv")
        .send()
        .await
        .unwrap();
    let meta = head.metadata().unwrap();
    assert_eq!(meta.get("fencing-token"), Some(&ta.to_string()));
    // Confined to the lease's scope (review round 3): another key of the bucket, another
    // key in a batch delete, and bucket changes are refused, and no fence moves.
    let e = a3
        .put_object()
        .bucket("default")
        .key("unrelated.csv")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("AccessDenied"));
    // The refusal says what lease credentials may write, not to grant what nobody can.
    assert!(
        e.message()
            .is_some_and(|m| m.contains("may write only default/data.csv")),
        "{e:?}"
    );
    // rclone's bucket check: CreateBucket of the lease's own bucket answers as for an
    // existing bucket (200 in us-east-1), and creates nothing.
    a3.create_bucket().bucket("default").send().await.unwrap();
    let batch = a3
        .delete_objects()
        .bucket("default")
        .delete(
            aws_sdk_s3::types::Delete::builder()
                .objects(
                    aws_sdk_s3::types::ObjectIdentifier::builder()
                        .key("unrelated.csv")
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(batch.errors()[0].code(), Some("AccessDenied"));
    let e = a3
        .create_bucket()
        .bucket("made-by-lease")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("AccessDenied"));
    let e = a3
        .delete_bucket()
        .bucket("default")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("AccessDenied"));
    let f = common::fence(&c, &s, "default", "unrelated.csv").await;
    assert!(f["highest"].is_null(), "{f}");
    // A token that disagrees with the credentials' is refused.
    let e = a3
        .put_object()
        .bucket("default")
        .key("data.csv")
        .metadata("fencing-token", (ta + 5).to_string())
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("InvalidFencingToken"));

    // a is superseded: b's lease advanced the fence, so a's credentials are stale at once.
    call(
        &c,
        &s,
        reqwest::Method::DELETE,
        "data",
        json!({"holder": "a", "token": ta, "secret": a["lease_secret"]}),
    )
    .await;
    let (_, b) = acquire(&c, &s, "data", body("b")).await;
    assert!(b["token"].as_u64().unwrap() > ta);
    let e = a3
        .put_object()
        .bucket("default")
        .key("data.csv")
        .body(ByteStream::from_static(b"zombie a"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("StaleFencingToken"));
    // 403, not the 409 of a header's token: object_store-based libraries read a 409 as a
    // version conflict and retry it; the holder of a lost lease must stop instead.
    assert_eq!(e.raw_response().map(|r| r.status().as_u16()), Some(403));
    // After the grace period (1 s here) they are rejected outright.
    tokio::time::sleep(std::time::Duration::from_millis(1300)).await;
    let e = a3
        .get_object()
        .bucket("default")
        .key("data.csv")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("InvalidAccessKeyId"));
    // They never reached another bucket's writes either: the lease is bound to `default`.
    let creds = &b["s3_credentials"];
    let b3 = common::moto::client_with(
        &s.url(""),
        creds["access_key_id"].as_str().unwrap(),
        creds["secret_access_key"].as_str().unwrap(),
    );
    let e = b3.list_buckets().send().await.unwrap();
    let names: Vec<_> = e.buckets().iter().filter_map(|b| b.name()).collect();
    assert_eq!(names, ["default"]);
}
