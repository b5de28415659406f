//! The s3 backend records the ETag the store answers with, not the MD5 it computed while
//! staging. moto's ETags are MD5s, so a proxy in front of it answers with ETags of its own (the
//! same hex, uppercased), as stores that encrypt objects (SSE-KMS) do, and maps them back on
//! the way in (If-Match).

use crate::common;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use common::moto::Moto;
use common::{client, Server};
use md5::Digest;

const BUCKET: &str = "etag-store";
const PART: usize = 5 * 1024 * 1024;

/// The store's ETag for an object: moto's, uppercased.
fn store_etag(moto_etag: &str) -> String {
    moto_etag.to_uppercase()
}

/// Rewrites one `<ETag>...</ETag>` element of a CompleteMultipartUpload answer.
fn rewrite_xml(body: &str) -> String {
    let (Some(start), Some(end)) = (body.find("<ETag>"), body.find("</ETag>")) else {
        return body.to_string();
    };
    let inner = &body[start + "<ETag>".len()..end];
    format!(
        "{}<ETag>{}</ETag>{}",
        &body[..start],
        store_etag(inner),
        &body[end + "</ETag>".len()..]
    )
}

type ProxyState = (String, reqwest::Client);

async fn forward(State((upstream, client)): State<ProxyState>, req: Request) -> Response {
    let query = req.uri().query().unwrap_or_default().to_string();
    // A part's ETag goes back to the store in the part list: leave parts alone.
    let is_part = query.contains("partNumber=");
    let is_complete = req.method() == "POST" && query.contains("uploadId=");
    let url = format!(
        "{upstream}{}",
        req.uri().path_and_query().map_or("/", |p| p.as_str())
    );
    let mut out = client.request(req.method().clone(), url);
    for (name, value) in req.headers() {
        if name == "host" {
            continue;
        }
        if name == "if-match" {
            out = out.header(name, value.to_str().unwrap().to_lowercase());
        } else {
            out = out.header(name, value);
        }
    }
    let body = axum::body::to_bytes(req.into_body(), usize::MAX)
        .await
        .unwrap();
    let resp = out.body(body).send().await.unwrap();
    let mut builder = Response::builder().status(resp.status().as_u16());
    for (name, value) in resp.headers() {
        if name == "content-length" || name == "transfer-encoding" {
            continue;
        }
        if name == "etag" && !is_part {
            builder = builder.header(name, store_etag(value.to_str().unwrap()));
        } else {
            builder = builder.header(name, value);
        }
    }
    let bytes = resp.bytes().await.unwrap();
    let body = if is_complete {
        Body::from(rewrite_xml(&String::from_utf8_lossy(&bytes)))
    } else {
        Body::from(bytes)
    };
    builder.body(body).unwrap()
}

async fn start_proxy(upstream: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new()
        .fallback(forward)
        .with_state((upstream, reqwest::Client::new()));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://127.0.0.1:{port}")
}

async fn put_body(c: &reqwest::Client, url: &str, token: &str, body: Vec<u8>) -> (u16, String) {
    let resp = c
        .put(url)
        .header("Fencing-Token", token)
        .body(body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_version_recorded_is_the_etag_the_store_answered() {
    let moto = Moto::start();
    moto.create_bucket(BUCKET).await;
    let proxy = start_proxy(moto.endpoint()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[backends.store]\nkind = \"s3\"\nendpoint = \"{proxy}\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\nmultipart_threshold_bytes = {PART}\nunsafe_no_conditional_writes = true\n\n[buckets.default]\nbackend = \"store\"\nbackend_bucket = \"{BUCKET}\"\n"
    );
    let s = Server::start(&dir.path().join("data"), Some(&config));
    let c = client();
    let store = common::moto::client_for(&proxy);
    // One small object (PutObject) and one over the threshold (CompleteMultipartUpload).
    for (key, size) in [("small", 1000usize), ("large", PART + PART / 2)] {
        let url = s.object_url("default", key);
        let body: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let (status, text) = put_body(&c, &url, "1", body.clone()).await;
        assert_eq!(status, 200, "{text}");
        let written: serde_json::Value = serde_json::from_str(&text).unwrap();
        let head = store
            .head_object()
            .bucket(BUCKET)
            .key(key)
            .send()
            .await
            .unwrap();
        let etag = head.e_tag().unwrap();
        assert_ne!(etag, etag.to_lowercase(), "the proxy rewrites ETags");
        // A body written whole is answered its MD5 when fencegate split it into store parts
        // itself; a PutObject's ETag is the store's.
        let answered = if key == "large" {
            format!("\"{}\"", hex::encode(md5::Md5::digest(&body)))
        } else {
            etag.to_string()
        };
        assert_eq!(
            written["etag"].as_str(),
            Some(answered.as_str()),
            "{key}: the ETag reported"
        );
        // The version recorded is the store's too: on a store that ignores If-Match on
        // CompleteMultipartUpload, the next write compares it with a HEAD, and a recorded MD5
        // would look like a write made around fencegate.
        let (status, text) = put_body(&c, &url, "2", body).await;
        assert_eq!(status, 200, "{key}: the second write: {text}");
        let resp = c.get(&url).send().await.unwrap();
        assert_eq!(resp.headers()["etag"].to_str().unwrap(), answered);
    }
}
