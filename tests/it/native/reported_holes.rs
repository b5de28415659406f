//! The holes an independent review found (issue 11), each replayed against the real binary
//! through the native API exactly as it was reported; each test failed before its fix. The
//! S3 surface's versions are in tests/it/s3/gateway.rs (`holes_are_closed`), and the races
//! (clients that hang up mid-commit, grants racing writers) in the torture harness.

use crate::common;
use common::{client, fence, put, Server};
use serde_json::json;

const HEADER_BUCKET: &str = "[buckets.default]\n\n[buckets.locks]\nscope = \"header\"\n";

async fn send(c: &reqwest::Client, req: reqwest::RequestBuilder) -> (u16, serde_json::Value) {
    let _ = c;
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

#[tokio::test]
async fn an_acknowledged_delete_of_an_absent_key_fences_the_zombie() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = client();
    let url = s.object_url("default", "gone");
    let (status, body) = send(&c, c.delete(&url).header("Fencing-Token", "7")).await;
    assert_eq!((status, &body["existed"]), (200, &json!(false)), "{body}");
    let f = fence(&c, &s, "default", "gone").await;
    assert_eq!((&f["highest"], &f["tombstone"]), (&json!(7), &json!(true)));
    // A zombie that was slow to create the object is refused, across a kill -9 too.
    assert_eq!(put(&c, &url, Some("6"), b"zombie").await.0, 409);
    let data = s.data_dir.clone();
    s.kill9();
    let s = Server::start(&data, None);
    let url = s.object_url("default", "gone");
    let (status, body) = put(&c, &url, Some("6"), b"zombie").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("StaleFencingToken"))
    );
    assert_eq!(c.get(&url).send().await.unwrap().status(), 404);
}

#[tokio::test]
async fn a_header_scoped_object_is_not_overwritten_under_another_scope_name() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), Some(HEADER_BUCKET));
    let c = client();
    let url = s.object_url("locks", "obj");
    let w = |token: &str, scope: &str| {
        c.put(&url)
            .header("Fencing-Token", token)
            .header("Fencing-Scope", scope)
            .body(format!("{scope}-{token}"))
    };
    assert_eq!(send(&c, w("10", "lockA")).await.0, 200);
    assert_eq!(send(&c, w("9", "lockA")).await.0, 409);
    let (status, body) = send(&c, w("9", "lockA-x")).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("FencingScopeMismatch")),
        "{body}"
    );
    // Deleted under lockA; the tombstone keeps the binding, so it does not come back.
    let del = c
        .delete(&url)
        .header("Fencing-Token", "11")
        .header("Fencing-Scope", "lockA");
    assert_eq!(send(&c, del).await.0, 200);
    assert_eq!(send(&c, w("9", "lockA-x")).await.0, 409);
    assert_eq!(c.get(&url).send().await.unwrap().status(), 404);
    // An explicit takeover, above lockA's highest, moves it.
    let (status, body) = send(
        &c,
        w("12", "lockB").header("Fencing-Scope-Takeover", "lockA"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(send(&c, w("13", "lockA")).await.0, 409);
    let got = c.get(&url).send().await.unwrap();
    assert_eq!(got.headers()["x-amz-meta-fencing-scope"], "lockB");
    assert_eq!(got.text().await.unwrap(), "lockB-12");
}

#[tokio::test]
async fn lease_tokens_do_not_wrap_at_u64() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = client();
    let adv = c
        .post(s.url("/v1/fences/default/ov"))
        .header("Fencing-Token", u64::MAX.to_string());
    assert_eq!(send(&c, adv).await.0, 200);
    let lease = s.url("/v1/leases/L");
    let acquire = |extra: serde_json::Value| {
        let mut body = json!({"holder": "h", "ttl_ms": 60000});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        c.post(&lease).json(&body)
    };
    for want in 1..=3u64 {
        let (status, g) = send(&c, acquire(json!({}))).await;
        assert_eq!((status, g["token"].as_u64()), (200, Some(want)), "{g}");
        let rel = c
            .delete(&lease)
            .json(&json!({"holder": "h", "token": want, "secret": g["lease_secret"]}));
        assert_eq!(send(&c, rel).await.0, 204);
    }
    let (status, e) = send(&c, acquire(json!({"bucket": "default", "key": "ov"}))).await;
    assert_eq!(
        (status, e["error"].as_str()),
        (409, Some("TokenSpaceExhausted")),
        "{e}"
    );
    let (status, g) = send(&c, acquire(json!({}))).await;
    assert_eq!((status, g["token"].as_u64()), (200, Some(4)), "{g}");
}

#[tokio::test]
async fn a_bound_grant_fences_a_foreign_writer_that_recorded_first() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = client();
    let url = s.object_url("default", "k");
    assert_eq!(put(&c, &url, Some("10"), b"ten").await.0, 200);
    assert_eq!(put(&c, &url, Some("11"), b"foreign").await.0, 200);
    let acquire = c
        .post(s.url("/v1/leases/job"))
        .json(&json!({"holder": "h", "ttl_ms": 60000, "bucket": "default", "key": "k"}));
    let (status, g) = send(&c, acquire).await;
    assert_eq!((status, g["token"].as_u64()), (200, Some(12)), "{g}");
    // The foreign holder's next write with 11 is refused.
    assert_eq!(put(&c, &url, Some("11"), b"late").await.0, 409);
}

#[tokio::test]
async fn repeated_condition_lines_are_one_list() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = client();
    let url = s.object_url("default", "k");
    let (_, first) = put(&c, &url, Some("1"), b"first").await;
    let etag = first["etag"].as_str().unwrap().to_string();
    // `If-None-Match: "x"` then `If-None-Match: <current ETag>`: 412. Before the fix only the
    // first line was judged and the object was overwritten.
    let req = c
        .put(&url)
        .header("Fencing-Token", "2")
        .header("If-None-Match", "\"x\"")
        .header("If-None-Match", etag)
        .body("second");
    let (status, body) = send(&c, req).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (412, Some("PreconditionFailed")),
        "{body}"
    );
    // `"x"` then `*` makes a list with `*` in it: malformed, refused.
    let req = c
        .put(&url)
        .header("Fencing-Token", "2")
        .header("If-None-Match", "\"x\"")
        .header("If-None-Match", "*")
        .body("second");
    let (status, body) = send(&c, req).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("InvalidArgument")),
        "{body}"
    );
    assert_eq!(
        c.get(&url).send().await.unwrap().text().await.unwrap(),
        "first"
    );
}
