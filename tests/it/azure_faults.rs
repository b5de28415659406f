//! Attacks on the azure backend (and the gate code it shares with gcs) through the real binary
//! on Azurite: lost answers whose commit lands late, kill -9 with a commit in flight, writes,
//! deletes and metadata changes made around fencegate between its check and its commit (a
//! pending copy too), the service's own throttling, a service that ignores a SAS's expiry,
//! racing tokens, metadata at Azure's 8 KiB cap with a trailing checksum, a part uploaded
//! again after a block size change, and a part read while its object is replaced. Each either held (and pins a contract line)
//! or was a finding, now fixed or ignored with the reason (docs/history.md).

use crate::common;
use common::azurite::Azurite;
use common::gcs_fake::GcsFake;
use common::relay::Relay;
use common::{client, get_bytes, put, Server};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn config(az: &Azurite, port: u16, container: &str, extra: &str) -> String {
    format!(
        "[backends.az]\nkind = \"azure\"\naccount = \"{}\"\naccess_key = \"{}\"\nendpoint = \"http://127.0.0.1:{port}/devstoreaccount1\"\n{extra}\n\n[buckets.default]\nbackend = \"az\"\nbackend_bucket = \"{container}\"\nfencing = \"optional\"\n",
        az.account(),
        az.key(),
    )
}

fn s3(server: &Server) -> aws_sdk_s3::Client {
    common::moto::client_with(&server.url(""), "fencegate", "fencegate-dev-secret")
}

/// PUT with a token and an Idempotency-Key.
async fn put_keyed(
    c: &reqwest::Client,
    url: &str,
    token: &str,
    key: &str,
    body: &'static [u8],
) -> (u16, serde_json::Value) {
    let r = c
        .put(url)
        .header("Fencing-Token", token)
        .header("Idempotency-Key", key)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// Sends `send` again while it is refused with `CommitUnresolved`, for up to `limit`.
async fn past_unresolved<F, Fut>(limit: Duration, mut send: F) -> (u16, serde_json::Value)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (u16, serde_json::Value)>,
{
    let started = Instant::now();
    loop {
        let (status, body) = send().await;
        if body["error"] != "CommitUnresolved" {
            return (status, body);
        }
        assert!(
            started.elapsed() < limit,
            "still unresolved after {limit:?}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What the scripted proxy does to fencegate's commits (a Put Blob or Copy Blob carrying
/// `x-ms-meta-fencegate`, or a Delete Blob, of a blob outside `.fencegate-probe/`).
#[derive(Default)]
struct Script {
    /// The next commits answered `(status, x-ms-error-code)` without being forwarded (an empty
    /// code: no `x-ms-error-code`, as an intermediary answers).
    refuse: Mutex<Vec<(u16, &'static str)>>,
    /// Before the next commit is forwarded: the blob is written (`Some`) or deleted (`None`)
    /// around fencegate, with the Azure SDK.
    around: Mutex<Vec<Option<&'static [u8]>>>,
    /// The largest `x-ms-meta-fencegate` entry (name and value) a commit carried.
    max_meta: AtomicUsize,
    commits: AtomicU32,
    /// After the next read of an object (Get Blob Properties or Get Blob) is answered by
    /// Azurite, and before the answer goes back: the blob is written around fencegate with
    /// these bytes and this `fencegate` metadata entry.
    replace_after_read: Mutex<Option<(Vec<u8>, String)>>,
    /// The next Copy Blob commit, once Azurite has carried it out, is answered `pending`, and
    /// the blob's metadata is set around fencegate (Set Blob Metadata) before the answer goes
    /// back: a change that lands while fencegate waits for its copy, leaving the copy's id.
    pending_copy_then_meta: std::sync::atomic::AtomicBool,
}

/// A proxy in front of Azurite, doing to fencegate's commits what `script` says.
async fn scripted_proxy(az: Arc<Azurite>, container: &'static str, script: Arc<Script>) -> u16 {
    use axum::body::Body;
    use axum::extract::{Request, State};
    use axum::response::Response;
    const HOP: [&str; 3] = ["content-length", "transfer-encoding", "connection"];
    type St = (Arc<Azurite>, &'static str, Arc<Script>, reqwest::Client);
    async fn relay(State((az, container, script, c)): State<St>, req: Request) -> Response {
        let (parts, body) = req.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        let path = parts.uri.path().to_string();
        let blob = path
            .splitn(4, '/')
            .nth(3)
            .map(|b| {
                percent_encoding::percent_decode_str(b)
                    .decode_utf8_lossy()
                    .into_owned()
            })
            .unwrap_or_default();
        let ours = !path.contains(".fencegate-probe") && path.matches('/').count() >= 3;
        let commit = ours
            && ((parts.method == "PUT" && parts.headers.contains_key("x-ms-meta-fencegate"))
                || parts.method == "DELETE");
        if commit {
            script.commits.fetch_add(1, Ordering::SeqCst);
            if let Some(v) = parts.headers.get("x-ms-meta-fencegate") {
                script
                    .max_meta
                    .fetch_max("fencegate".len() + v.len(), Ordering::SeqCst);
            }
            let refusal = {
                let mut r = script.refuse.lock().unwrap();
                (!r.is_empty()).then(|| r.remove(0))
            };
            if let Some((status, code)) = refusal {
                let mut b = Response::builder().status(status);
                if !code.is_empty() {
                    b = b.header("x-ms-error-code", code);
                }
                return b
                    .body(Body::from(format!(
                        "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>{code}</Code><Message>scripted</Message></Error>"
                    )))
                    .unwrap();
            }
            let around = {
                let mut a = script.around.lock().unwrap();
                (!a.is_empty()).then(|| a.remove(0))
            };
            if let Some(what) = around {
                let (az, blob) = (az.clone(), blob.clone());
                tokio::task::spawn_blocking(move || match what {
                    Some(bytes) => az.put_behind(container, &blob, bytes),
                    None => az.delete_behind(container, &blob),
                })
                .await
                .unwrap();
            }
        }
        let url = format!(
            "http://127.0.0.1:{}{}",
            az.port,
            parts.uri.path_and_query().unwrap()
        );
        let mut out = c.request(parts.method.clone(), &url);
        for (name, value) in &parts.headers {
            if !HOP.contains(&name.as_str()) {
                out = out.header(name, value);
            }
        }
        let resp = out.body(body).send().await.unwrap();
        let copy_then_meta = commit
            && parts.headers.contains_key("x-ms-copy-source")
            && resp.status().as_u16() == 202
            && script.pending_copy_then_meta.swap(false, Ordering::SeqCst);
        if copy_then_meta {
            let (az, blob) = (az.clone(), blob.clone());
            tokio::task::spawn_blocking(move || {
                az.set_meta_behind(container, &blob, &[("changed", "around-fencegate")])
            })
            .await
            .unwrap();
        }
        let replace = if ours && (parts.method == "HEAD" || parts.method == "GET") {
            script.replace_after_read.lock().unwrap().take()
        } else {
            None
        };
        if let Some((bytes, meta)) = replace {
            tokio::task::spawn_blocking(move || {
                az.put_behind_with(container, &blob, &bytes, &[("fencegate", &meta)])
            })
            .await
            .unwrap();
        }
        let mut builder = Response::builder().status(resp.status());
        for (name, value) in resp.headers() {
            let replaced = copy_then_meta && name == "x-ms-copy-status";
            if !HOP.contains(&name.as_str()) && !replaced {
                builder = builder.header(name, value);
            }
        }
        if copy_then_meta {
            builder = builder.header("x-ms-copy-status", "pending");
        }
        let bytes = resp.bytes().await.unwrap();
        builder.body(Body::from(bytes)).unwrap()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().fallback(relay).with_state((
        az,
        container,
        script,
        reqwest::Client::new(),
    ));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    port
}

/// Azurite behind the scripted proxy, and fencegate in front of both.
async fn scripted(
    container: &'static str,
    extra: &str,
) -> (Arc<Azurite>, Arc<Script>, Server, tempfile::TempDir) {
    let az = Arc::new(Azurite::start());
    az.create_container(container);
    let script = Arc::new(Script::default());
    let port = scripted_proxy(az.clone(), container, script.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        Some(&config(&az, port, container, extra)),
    );
    (az, script, server, dir)
}

/// Review 51 finding: a Put Blob whose answer was lost and that the service applied only
/// after fencegate's read-back (held in flight, then delivered within its SAS) is fencegate's
/// own commit, with its commit id on the blob. Its intent's pending version is
/// `UNKNOWN_UNTIL_APPLIED`, which no store version ever equals, so once the deadline has
/// passed the gate took fencegate's own landed write for one made around it: the retry with
/// the same Idempotency-Key got 409 BypassDetected instead of its answer, and so did every
/// later write of the key, until an operator stepped in. Expected: the retry is answered 200
/// (replayed), and token 3 writes.
#[ignore = "open (MEDIUM): a pending write whose version the store assigns at apply time is never recognised as landed; needs the commit id on the intent, resolved against the stored commit id (docs/backends.md)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_commit_that_lands_late_is_fencegates_own() {
    let az = Azurite::start();
    az.create_container("late");
    let relay = Relay::start(([127, 0, 0, 1], az.port).into()).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &az,
        relay.port,
        "late",
        "read_timeout_secs = 2\ncall_timeout_secs = 2\ncommit_deadline_secs = 8",
    );
    let server = Server::start(&dir.path().join("data"), Some(&cfg));
    let c = client();
    let url = server.object_url("default", "doc");
    let (status, body) = put(&c, &url, Some("1"), b"one").await;
    assert_eq!(status, 200, "{body}");
    relay.hold.store(true, Ordering::SeqCst);
    let (status, body) = put_keyed(&c, &url, "2", "k2", b"two").await;
    assert!(
        status >= 500,
        "the held commit has no answer: {status} {body}"
    );
    relay.hold.store(false, Ordering::SeqCst);
    // Delivered now, within its SAS: it lands after fencegate's read-back found nothing.
    relay.release.send(true).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(az.get_behind("late", "doc").as_deref(), Some(&b"two"[..]));
    let (status, body) = past_unresolved(Duration::from_secs(30), || {
        put_keyed(&c, &url, "2", "k2", b"two")
    })
    .await;
    assert_eq!(
        status, 200,
        "the retry of a write that landed is answered as it: {body}"
    );
    let (status, body) = put(&c, &url, Some("3"), b"three").await;
    assert_eq!(status, 200, "fencegate's own write is no bypass: {body}");
    assert_eq!(az.get_behind("late", "doc").as_deref(), Some(&b"three"[..]));
}

/// The same as [`a_lost_commit_that_lands_late_is_fencegates_own`] on gcs (the gate code is
/// shared): a PUT held past the client timeout lands after the read-back, inside its signed
/// URL's time.
#[ignore = "open (MEDIUM): a pending write whose version the store assigns at apply time is never recognised as landed; needs the commit id on the intent, resolved against the stored commit id (docs/backends.md)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_commit_that_lands_late_is_fencegates_own_on_gcs() {
    let fake = GcsFake::start().await;
    let relay = Relay::start(fake.addr).await;
    let dir = tempfile::tempdir().unwrap();
    fake.create_bucket("late");
    let key = fake.write_service_account(dir.path());
    let cfg = format!(
        "[backends.g]\nkind = \"gcs\"\ncredentials_file = \"{}\"\nendpoint = \"http://127.0.0.1:{}\"\nread_timeout_secs = 1\ncall_timeout_secs = 1\ncommit_deadline_secs = 6\n\n[buckets.default]\nbackend = \"g\"\nbackend_bucket = \"late\"\nfencing = \"optional\"\n",
        key.display(),
        relay.port
    );
    let server = Server::start(&dir.path().join("data"), Some(&cfg));
    let c = client();
    let url = server.object_url("default", "doc");
    let (status, body) = put(&c, &url, Some("1"), b"one").await;
    assert_eq!(status, 200, "{body}");
    relay.hold.store(true, Ordering::SeqCst);
    let (status, body) = put_keyed(&c, &url, "2", "k2", b"two").await;
    assert!(
        status >= 500,
        "the held commit has no answer: {status} {body}"
    );
    relay.hold.store(false, Ordering::SeqCst);
    // Delivered now, inside its signed URL's time: it lands after the read-back found nothing.
    relay.release.send(true).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        fake.get_direct("late", "doc")
            .map(|d| d.0.to_vec())
            .as_deref(),
        Some(&b"two"[..]),
        "the held PUT landed"
    );
    let (status, body) = past_unresolved(Duration::from_secs(30), || {
        put_keyed(&c, &url, "2", "k2", b"two")
    })
    .await;
    assert_eq!(
        status, 200,
        "the retry of a write that landed is answered as it: {body}"
    );
    let (status, body) = put(&c, &url, Some("3"), b"three").await;
    assert_eq!(status, 200, "fencegate's own write is no bypass: {body}");
}

/// fencegate is killed with its Put Blob held in flight; the Put Blob lands (inside its SAS)
/// while it is down. After the restart the object is held for the backend's bound, and then
/// token 3 must write: the blob holds fencegate's own token-2 commit (its commit id), not a
/// write made around it. Open, as the lost answer above: the gate refuses every write of the
/// key with 409 BypassDetected from then on (the intent's pending version is unknown until
/// applied, and no store version ever matches it).
#[ignore = "open (MEDIUM): a pending write whose version the store assigns at apply time is never recognised as landed; needs the commit id on the intent, resolved against the stored commit id (docs/backends.md)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_lands_while_fencegate_is_down_is_fencegates_own() {
    let az = Azurite::start();
    az.create_container("down");
    let relay = Relay::start(([127, 0, 0, 1], az.port).into()).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &az,
        relay.port,
        "down",
        "read_timeout_secs = 60\ncall_timeout_secs = 60\ncommit_deadline_secs = 6",
    );
    let data = dir.path().join("data");
    let server = Server::start(&data, Some(&cfg));
    let c = client();
    let url = server.object_url("default", "doc");
    let (status, body) = put(&c, &url, Some("1"), b"one").await;
    assert_eq!(status, 200, "{body}");
    relay.hold.store(true, Ordering::SeqCst);
    let held = tokio::spawn({
        let (c, url) = (c.clone(), url.clone());
        async move { put(&c, &url, Some("2"), b"two").await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.kill9();
    let _ = held.await;
    relay.hold.store(false, Ordering::SeqCst);
    relay.release.send(true).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(az.get_behind("down", "doc").as_deref(), Some(&b"two"[..]));
    let server = Server::start(&data, Some(&cfg));
    let url = server.object_url("default", "doc");
    let (status, body) = past_unresolved(Duration::from_secs(30), || {
        put(&c, &url, Some("3"), b"three")
    })
    .await;
    assert_eq!(status, 200, "fencegate's own write is no bypass: {body}");
    assert_eq!(az.get_behind("down", "doc").as_deref(), Some(&b"three"[..]));
}

/// Held (pins the gate's side of `UNKNOWN_UNTIL_APPLIED` across a crash): fencegate is killed
/// with its keyed Put Blob held in flight, and that request never reaches the service. After
/// the restart the object is held for the backend's bound (the intent may still land), then
/// the retry with the same Idempotency-Key is carried out as a first request: 200, the store
/// holds its bytes, and a second retry is replayed. Nothing is acknowledged that is not there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_lost_with_its_process_is_carried_out_by_its_retry() {
    let az = Azurite::start();
    az.create_container("crash");
    let relay = Relay::start(([127, 0, 0, 1], az.port).into()).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &az,
        relay.port,
        "crash",
        "read_timeout_secs = 60\ncall_timeout_secs = 60\ncommit_deadline_secs = 4",
    );
    let data = dir.path().join("data");
    let server = Server::start(&data, Some(&cfg));
    let c = client();
    let url = server.object_url("default", "doc");
    let (status, body) = put(&c, &url, Some("1"), b"one").await;
    assert_eq!(status, 200, "{body}");
    relay.hold.store(true, Ordering::SeqCst);
    let held = tokio::spawn({
        let (c, url) = (c.clone(), url.clone());
        async move { put_keyed(&c, &url, "2", "k2", b"two").await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.kill9();
    let _ = held.await;
    // The held Put Blob is never delivered.
    relay.hold.store(false, Ordering::SeqCst);
    let server = Server::start(&data, Some(&cfg));
    let url = server.object_url("default", "doc");
    let (status, body) = put_keyed(&c, &url, "2", "k2", b"two").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("CommitUnresolved")),
        "held while the lost request may land: {body}"
    );
    assert_eq!(az.get_behind("crash", "doc").as_deref(), Some(&b"one"[..]));
    let (status, body) = past_unresolved(Duration::from_secs(30), || {
        put_keyed(&c, &url, "2", "k2", b"two")
    })
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(az.get_behind("crash", "doc").as_deref(), Some(&b"two"[..]));
    let (status, body) = put_keyed(&c, &url, "2", "k2", b"two").await;
    assert_eq!(status, 200, "replayed: {body}");
    let (status, body) = put(&c, &url, Some("1"), b"stale").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(az.get_behind("crash", "doc").as_deref(), Some(&b"two"[..]));
}

/// Held (pins `UNKNOWN_UNTIL_APPLIED` on azure, as gcs_faults pins it on gcs): a PUT whose
/// answer is lost, a delete made around fencegate meanwhile, and the held Put Blob (If-Match
/// the old ETag) delivered after the delete, which the service refuses. The retry with the
/// same Idempotency-Key must not be answered 200 unless the store holds its bytes, and the
/// direct delete is reported (409 BypassDetected), not written over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_put_is_not_acknowledged_after_a_direct_delete() {
    let az = Azurite::start();
    az.create_container("gone");
    let relay = Relay::start(([127, 0, 0, 1], az.port).into()).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &az,
        relay.port,
        "gone",
        "read_timeout_secs = 2\ncall_timeout_secs = 2\ncommit_deadline_secs = 4",
    );
    let server = Server::start(&dir.path().join("data"), Some(&cfg));
    let c = client();
    let url = server.object_url("default", "doc");
    let (status, body) = put(&c, &url, Some("1"), b"one").await;
    assert_eq!(status, 200, "{body}");
    relay.hold.store(true, Ordering::SeqCst);
    let (status, body) = put_keyed(&c, &url, "2", "k2", b"two").await;
    assert!(status >= 500, "{status} {body}");
    relay.hold.store(false, Ordering::SeqCst);
    az.delete_behind("gone", "doc");
    relay.release.send(true).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (retry, body) = past_unresolved(Duration::from_secs(30), || {
        put_keyed(&c, &url, "2", "k2", b"two")
    })
    .await;
    let stored = az.get_behind("gone", "doc");
    assert!(
        !(retry == 200 && stored.as_deref() != Some(&b"two"[..])),
        "the retry was acknowledged ({body}) but the store holds {stored:?}"
    );
    let (status, body) = put(&c, &url, Some("3"), b"three").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("BypassDetected")),
        "the direct delete is reported: {body}"
    );
    assert_eq!(az.get_behind("gone", "doc"), None);
}

/// Review 51 finding: Azure's own throttling (503 `ServerBusy`, or a 429, each naming its
/// `x-ms-error-code`) refuses a request before applying it, but the backend reported it as
/// throttled with an unknown outcome and the gate held the key for commit_deadline_secs (900
/// s by default) after one busy answer. Now such an answer is a refusal: 503 with
/// Retry-After, nothing stored, the key writable at once; the same for a Delete Blob, and a
/// write with an Idempotency-Key is carried out by its retry (once, then replayed). A 503
/// without the service's error code (an intermediary, which may have forwarded the request)
/// still holds the key, as a lost answer does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_own_throttling_does_not_hold_the_key() {
    let (az, script, server, _dir) =
        scripted("busy", "read_attempts = 1\ncommit_deadline_secs = 3").await;
    let c = client();
    let url = server.object_url("default", "k");
    let (status, body) = put(&c, &url, Some("1"), b"one").await;
    assert_eq!(status, 200, "{body}");
    for (status, code) in [(503, "ServerBusy"), (429, "TooManyRequests")] {
        script.refuse.lock().unwrap().push((status, code));
        let r = c
            .put(&url)
            .header("Fencing-Token", "2")
            .body("two")
            .send()
            .await
            .unwrap();
        let answered = r.status().as_u16();
        let retry_after = r.headers().get("retry-after").cloned();
        let text = r.text().await.unwrap();
        assert_eq!(answered, 503, "{status} {code}: {text}");
        assert!(retry_after.is_some(), "{status} {code}: no Retry-After");
        assert_eq!(az.get_behind("busy", "k").as_deref(), Some(&b"one"[..]));
        let (s, body) = put(&c, &url, Some("2"), b"two").await;
        assert_eq!(s, 200, "after the service's own {status} {code}: {body}");
        let (s, body) = put(&c, &url, Some("2"), b"one").await;
        assert_eq!(s, 200, "{body}");
    }
    // A delete refused the same way: nothing deleted, and the next delete goes through.
    script.refuse.lock().unwrap().push((503, "ServerBusy"));
    let del = |t: &'static str| {
        let (c, url) = (c.clone(), url.clone());
        async move {
            let r = c
                .delete(&url)
                .header("Fencing-Token", t)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (s, text) = del("2").await;
    assert_eq!(s, 503, "{text}");
    assert_eq!(az.get_behind("busy", "k").as_deref(), Some(&b"one"[..]));
    let (s, text) = del("2").await;
    assert_eq!(s, 200, "after a busy Delete Blob: {text}");
    // A keyed write refused as busy is carried out by its retry, once.
    script.refuse.lock().unwrap().push((503, "ServerBusy"));
    let (s, body) = put_keyed(&c, &url, "2", "busy-key", b"keyed").await;
    assert_eq!(s, 503, "{body}");
    let (s, body) = put_keyed(&c, &url, "2", "busy-key", b"keyed").await;
    assert_eq!(s, 200, "{body}");
    let (s, body) = put_keyed(&c, &url, "2", "busy-key", b"keyed").await;
    assert_eq!(s, 200, "replayed: {body}");
    assert_eq!(az.get_behind("busy", "k").as_deref(), Some(&b"keyed"[..]));
    // An intermediary's 503 (no x-ms-error-code): the request may have been forwarded.
    script.refuse.lock().unwrap().push((503, ""));
    let (s, body) = put(&c, &url, Some("3"), b"three").await;
    assert_eq!(s, 503, "{body}");
    let (s, body) = put(&c, &url, Some("3"), b"three").await;
    assert_eq!(
        (s, body["error"].as_str()),
        (503, Some("CommitUnresolved")),
        "{body}"
    );
    let (s, body) = past_unresolved(Duration::from_secs(20), || {
        put(&c, &url, Some("3"), b"three")
    })
    .await;
    assert_eq!(s, 200, "{body}");
}

/// Held (pins the contract on Put Blob; the pending copy is pinned in azure_backend): a write
/// made around fencegate after its checks and just before its Put Blob, and a delete made the
/// same way before the next one, are each refused by the service's condition and reported as
/// 409 BypassDetected; the write around stays, and nothing is written over the delete.
/// A write around fencegate just before a Delete Blob, or before a large body's Copy Blob, is
/// kept the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_and_deletes_around_fencegate_before_its_commit_are_detected() {
    let (az, script, server, _dir) = scripted("around", "block_size_bytes = 1048576").await;
    let c = client();
    let url = server.object_url("default", "k");
    let (status, body) = put(&c, &url, Some("1"), b"one").await;
    assert_eq!(status, 200, "{body}");
    script
        .around
        .lock()
        .unwrap()
        .push(Some(&b"written around fencegate"[..]));
    let (status, body) = put(&c, &url, Some("2"), b"two").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("BypassDetected")),
        "{body}"
    );
    assert_eq!(
        az.get_behind("around", "k").as_deref(),
        Some(&b"written around fencegate"[..])
    );
    // A new key: created, then deleted around fencegate just before a rewrite.
    let url = server.object_url("default", "d");
    let (status, body) = put(&c, &url, Some("1"), b"one").await;
    assert_eq!(status, 200, "{body}");
    script.around.lock().unwrap().push(None);
    let (status, body) = put(&c, &url, Some("2"), b"two").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("BypassDetected")),
        "{body}"
    );
    assert_eq!(az.get_behind("around", "d"), None);
    // A delete through fencegate, with a write around it just before its Delete Blob.
    let url = server.object_url("default", "e");
    let (status, body) = put(&c, &url, Some("1"), b"one").await;
    assert_eq!(status, 200, "{body}");
    script
        .around
        .lock()
        .unwrap()
        .push(Some(&b"kept around fencegate"[..]));
    let r = c
        .delete(&url)
        .header("Fencing-Token", "2")
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("BypassDetected"), "{text}");
    assert_eq!(
        az.get_behind("around", "e").as_deref(),
        Some(&b"kept around fencegate"[..])
    );
    // A body over the block size, committed by Copy Blob, with a write around it just before.
    let url = server.object_url("default", "big");
    let big: &'static [u8] = Box::leak(vec![b'b'; (3 << 20) / 2].into_boxed_slice());
    let (status, body) = put(&c, &url, Some("1"), big).await;
    assert_eq!(status, 200, "{body}");
    script
        .around
        .lock()
        .unwrap()
        .push(Some(&b"written around a copy"[..]));
    let (status, body) = put(&c, &url, Some("2"), big).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("BypassDetected")),
        "{body}"
    );
    assert_eq!(
        az.get_behind("around", "big").as_deref(),
        Some(&b"written around a copy"[..])
    );
}

/// Held (pins "no stale write lands" on azure under concurrency, small bodies by Put Blob and
/// large ones by Copy Blob mixed): 12 tokens race on one key; no request gets a 500, and the
/// blob ends with the body of the highest token acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_tokens_on_one_key() {
    let az = Azurite::start();
    az.create_container("race");
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&az, az.port, "race", "block_size_bytes = 1048576");
    let server = Server::start(&dir.path().join("data"), Some(&cfg));
    let body = |t: u8| -> Vec<u8> {
        let n = if t.is_multiple_of(3) {
            (3 << 20) / 2
        } else {
            64
        };
        vec![t; n]
    };
    let mut tasks = Vec::new();
    for t in 1..=12u8 {
        let (c, url, bytes) = (client(), server.object_url("default", "hot"), body(t));
        tasks.push(tokio::spawn(async move {
            let r = c
                .put(&url)
                .header("Fencing-Token", t.to_string())
                .body(bytes)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (t, status, r.text().await.unwrap())
        }));
    }
    let mut acked = Vec::new();
    for task in tasks {
        let (t, status, text) = task.await.unwrap();
        assert!(status < 500, "token {t}: {status} {text}");
        if status == 200 {
            acked.push(t);
        } else {
            assert!(text.contains("StaleFencingToken"), "token {t}: {text}");
        }
    }
    let top = *acked.iter().max().expect("one write won");
    assert_eq!(
        az.get_behind("race", "hot"),
        Some(body(top)),
        "the blob holds token {top}'s body ({acked:?} acknowledged)"
    );
    let (status, got) = get_bytes(&client(), &server.object_url("default", "hot")).await;
    assert_eq!((status, got), (200, body(top)));
}

/// The S3 head of an unsigned-trailer PutObject of `data` (aws-chunked, the trailer
/// `x-amz-checksum-sha256`), with a Content-Disposition of `disposition`.
async fn put_with_trailing_sha256(
    server: &Server,
    key: &str,
    disposition: &str,
    data: &[u8],
) -> (u16, String) {
    use base64::Engine as _;
    use sha2::Digest;
    const PAYLOAD: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";
    let sum = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(data));
    let mut body = format!("{:x}\r\n", data.len()).into_bytes();
    body.extend_from_slice(data);
    body.extend_from_slice(format!("\r\n0\r\nx-amz-checksum-sha256:{sum}\r\n\r\n").as_bytes());
    let http = reqwest::Client::new();
    let mut req = http
        .put(server.url(&format!("/default/{key}")))
        .header("content-encoding", "aws-chunked")
        .header("x-amz-decoded-content-length", data.len().to_string())
        .header("x-amz-content-sha256", PAYLOAD)
        .header("x-amz-trailer", "x-amz-checksum-sha256")
        .header("content-disposition", disposition)
        .body(body)
        .build()
        .unwrap();
    common::sign::sign_payload(
        &mut req,
        common::sign::Creds {
            key: "fencegate",
            secret: "fencegate-dev-secret",
        },
        PAYLOAD,
    );
    let resp = http.execute(req).await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// Review 51 finding: the 8 KiB check (backend::stored_meta::check_fits) is made before the
/// body, but a checksum sent in the body's trailer is kept with the object only once the body
/// has ended, so metadata just under the cap passed the check and the commit carried more than
/// Azure's 8 KiB (Azure refuses that at the commit, after a large body was stored; Azurite
/// takes it). Now the check leaves room for a kept checksum: every write either is refused up
/// front with 400 MetadataTooLarge or commits an entry within 8 KiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trailing_checksum_never_takes_the_metadata_past_the_cap() {
    let (_az, script, server, _dir) = scripted("cap", "").await;
    let mut taken = 0;
    for (i, len) in (7700..8100).step_by(10).enumerate() {
        let disposition = "x".repeat(len);
        let (status, text) =
            put_with_trailing_sha256(&server, &format!("k{i}"), &disposition, b"checked").await;
        match status {
            200 => taken += 1,
            400 => assert!(text.contains("MetadataTooLarge"), "{len}: {text}"),
            _ => panic!("{len}: {status} {text}"),
        }
    }
    assert!(taken > 0, "some lengths fit");
    let widest = script.max_meta.load(Ordering::SeqCst);
    assert!(
        widest <= 8192,
        "a commit carried {widest} bytes of metadata, past Azure's 8 KiB"
    );
}

/// Review 51 finding (the azure twin of gcs_faults's
/// `a_part_reuploaded_after_a_block_size_change_completes_whole`): a part uploaded with
/// `block_size_bytes = 1048576` (6 blocks), fencegate restarted with the default 8 MiB block,
/// and the same part uploaded again (a client's retry): the second upload writes block
/// `.00000` only, the first's blocks `.00001`..`.00005` stay under the same name stem, and the
/// completion committed all 6: an acknowledged object that is not the bytes uploaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_reuploaded_after_a_block_size_change_completes_whole() {
    let az = Azurite::start();
    az.create_container("bsize");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let small = config(&az, az.port, "bsize", "block_size_bytes = 1048576");
    let server = Server::start(&data, Some(&small));
    let s3c = s3(&server);
    let id = s3c
        .create_multipart_upload()
        .bucket("default")
        .key("k")
        .send()
        .await
        .unwrap()
        .upload_id()
        .unwrap()
        .to_string();
    let body: Vec<u8> = (0..5 * 1024 * 1024 + 3u32)
        .map(|i| (i % 239) as u8)
        .collect();
    let upload = |s3c: aws_sdk_s3::Client, id: String, body: Vec<u8>| async move {
        s3c.upload_part()
            .bucket("default")
            .key("k")
            .upload_id(&id)
            .part_number(1)
            .body(aws_sdk_s3::primitives::ByteStream::from(body))
            .send()
            .await
            .unwrap()
            .e_tag()
            .unwrap()
            .to_string()
    };
    upload(s3c, id.clone(), body.clone()).await;
    server.kill9();
    let server = Server::start(&data, Some(&config(&az, az.port, "bsize", "")));
    let s3c = s3(&server);
    let etag = upload(s3c.clone(), id.clone(), body.clone()).await;
    let done = s3c
        .complete_multipart_upload()
        .bucket("default")
        .key("k")
        .upload_id(&id)
        .multipart_upload(
            aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .parts(
                    aws_sdk_s3::types::CompletedPart::builder()
                        .part_number(1)
                        .e_tag(etag)
                        .build(),
                )
                .build(),
        )
        .send()
        .await;
    let stored = az.get_behind("bsize", "k").map(|b| b.len());
    assert!(done.is_ok(), "{done:?}");
    assert_eq!(
        stored,
        Some(body.len()),
        "the completion was acknowledged, but the object holds other bytes"
    );
}

/// Review 51 finding (LOW): GetObject `partNumber` on azure (and gcs) judged "a multipart
/// object whose parts were not recorded" on a Get Blob Properties, then read the part from a
/// separate Get Blob. An object replaced in between (here around fencegate, with the metadata
/// an older fencegate leaves: a multipart ETag and no parts; through fencegate, a completion
/// of more than 128 runs of parts does the same) had its whole body passed off as part 1.
/// Now the part is judged on the object the one Get Blob read: its own part 1, or 501.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_is_judged_on_the_object_read() {
    let (_az, script, server, _dir) = scripted("parts", "").await;
    let s3c = s3(&server);
    let id = s3c
        .create_multipart_upload()
        .bucket("default")
        .key("m")
        .send()
        .await
        .unwrap()
        .upload_id()
        .unwrap()
        .to_string();
    let mut done = Vec::new();
    for (n, len) in [(1, 5 << 20), (2, 10)] {
        let etag = s3c
            .upload_part()
            .bucket("default")
            .key("m")
            .upload_id(&id)
            .part_number(n)
            .body(aws_sdk_s3::primitives::ByteStream::from(vec![n as u8; len]))
            .send()
            .await
            .unwrap()
            .e_tag()
            .unwrap()
            .to_string();
        done.push(
            aws_sdk_s3::types::CompletedPart::builder()
                .part_number(n)
                .e_tag(etag)
                .build(),
        );
    }
    s3c.complete_multipart_upload()
        .bucket("default")
        .key("m")
        .upload_id(&id)
        .multipart_upload(
            aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .set_parts(Some(done))
                .build(),
        )
        .send()
        .await
        .unwrap();
    let part = |n: i32| {
        s3c.get_object()
            .bucket("default")
            .key("m")
            .part_number(n)
            .send()
    };
    let p2 = part(2).await.unwrap();
    assert_eq!(p2.content_length(), Some(10), "parts are recorded and read");
    let forged = r#"{"meta":{"content_type":null,"user_meta":{},"token":null},"etag":"\"0123456789abcdef0123456789abcdef-2\"","commit":"older"}"#;
    *script.replace_after_read.lock().unwrap() = Some((
        b"replaced between the two reads".to_vec(),
        forged.to_string(),
    ));
    // Part 1 of the object read (5 MiB of 1s, one of 2 parts), or 501 for the replacement:
    // never the replacement's whole body as its part 1.
    match part(1).await {
        Ok(o) => {
            let count = o.parts_count();
            let bytes = o.body.collect().await.unwrap().into_bytes();
            assert!(
                count == Some(2) && bytes.len() == 5 << 20 && bytes.iter().all(|&b| b == 1),
                "part 1 answered as {} bytes ({:?}), {count:?} parts",
                bytes.len(),
                String::from_utf8_lossy(&bytes[..bytes.len().min(40)])
            );
        }
        Err(e) => {
            let status = e.raw_response().map(|r| r.status().as_u16());
            assert_eq!(status, Some(501), "{e:?}");
        }
    }
    // The replacement itself, read now: refused by part number.
    let status = part(1)
        .await
        .err()
        .and_then(|e| e.raw_response().map(|r| r.status().as_u16()));
    assert_eq!(status, Some(501), "a multipart ETag without recorded parts");
}

/// A proxy in front of Azurite that re-signs every blob SAS it forwards (with the account
/// key) to expire a day later: a blob service that ignores a SAS's expiry, as a gateway that
/// re-authorizes requests, or an emulator that does not check `se`, would.
async fn resigning_proxy(upstream: u16) -> u16 {
    use axum::body::Body;
    use axum::extract::{Request, State};
    use axum::response::Response;
    use base64::Engine as _;
    use percent_encoding::{percent_decode_str, utf8_percent_encode, NON_ALPHANUMERIC};
    const HOP: [&str; 3] = ["content-length", "transfer-encoding", "connection"];
    const QUERY: &percent_encoding::AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    fn resign(path: &str, query: &str) -> String {
        let decode = |v: &str| percent_decode_str(v).decode_utf8_lossy().into_owned();
        let pairs: Vec<(String, String)> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_string(), v.to_string())
            })
            .collect();
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| decode(v));
        let (Some(sp), Some("b"), Some(sv), Some(_)) =
            (get("sp"), get("sr").as_deref(), get("sv"), get("sig"))
        else {
            return query.to_string();
        };
        let mut segs = path.splitn(4, '/');
        let (_, account, container, blob) = (
            segs.next(),
            segs.next().unwrap_or(""),
            segs.next().unwrap_or(""),
            decode(segs.next().unwrap_or("")),
        );
        let se = humantime::format_rfc3339_seconds(
            std::time::SystemTime::now() + Duration::from_secs(86_400),
        )
        .to_string();
        let resource = format!("/blob/{account}/{container}/{blob}");
        let to_sign = format!("{sp}\n\n{se}\n{resource}\n\n\n\n{sv}\nb\n\n\n\n\n\n\n");
        let key = base64::engine::general_purpose::STANDARD
            .decode(common::azurite::KEY)
            .unwrap();
        let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &key);
        let sig = base64::engine::general_purpose::STANDARD
            .encode(aws_lc_rs::hmac::sign(&key, to_sign.as_bytes()).as_ref());
        pairs
            .iter()
            .map(|(k, v)| match k.as_str() {
                "se" => format!("se={}", utf8_percent_encode(&se, QUERY)),
                "sig" => format!("sig={}", utf8_percent_encode(&sig, QUERY)),
                _ => format!("{k}={v}"),
            })
            .collect::<Vec<_>>()
            .join("&")
    }
    async fn relay(State((upstream, c)): State<(u16, reqwest::Client)>, req: Request) -> Response {
        let (parts, body) = req.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        let path = parts.uri.path();
        let query = resign(path, parts.uri.query().unwrap_or(""));
        let url = match query.as_str() {
            "" => format!("http://127.0.0.1:{upstream}{path}"),
            q => format!("http://127.0.0.1:{upstream}{path}?{q}"),
        };
        let mut out = c.request(parts.method.clone(), &url);
        for (name, value) in &parts.headers {
            if !HOP.contains(&name.as_str()) {
                out = out.header(name, value);
            }
        }
        let resp = out.body(body).send().await.unwrap();
        let mut builder = Response::builder().status(resp.status());
        for (name, value) in resp.headers() {
            if !HOP.contains(&name.as_str()) {
                builder = builder.header(name, value);
            }
        }
        let bytes = resp.bytes().await.unwrap();
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

/// Review 51 finding (HIGH on such a service): on one instance the azure probe never tried an
/// expired SAS (only cluster mode did), though the SAS's expiry is all that keeps a commit
/// held in flight past its deadline from landing. A service that ignores it got the strict
/// verdict "safe", and the attack of azure_backend's
/// `a_commit_held_past_its_deadline_never_lands` then succeeded: the held token-5 create
/// landed after token 6's write and token 7's delete. Now the probe's rows include the expiry
/// of a SAS (a Put Blob and a Delete Blob whose SAS had expired must be refused), and serve
/// refuses such a service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_ignores_sas_expiry_is_refused() {
    let az = Azurite::start();
    az.create_container("noexp");
    let proxy = resigning_proxy(az.port).await;
    let relay = Relay::start(([127, 0, 0, 1], proxy).into()).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &az,
        relay.port,
        "noexp",
        "read_timeout_secs = 2\ncall_timeout_secs = 2\ncommit_deadline_secs = 3",
    );
    let data = dir.path().join("data");
    let (up, log) = common::try_start(&data, &cfg, &[]);
    if !up {
        assert!(
            log.contains("the expiry of a SAS"),
            "refused, naming the SAS's expiry: {log}"
        );
        // probe-store says the same: not safe, the row named.
        let file = data.with_extension("try.toml");
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(common::binary())
                .args(["probe-store", "az", "--json", "--config"])
                .arg(&file)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let json = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(1), "{json}");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let row = v[0]["capabilities"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["capability"] == "the expiry of a SAS")
            .unwrap_or_else(|| panic!("no expiry row: {json}"));
        assert_eq!(
            (row["result"].as_str(), row["ok"].as_bool()),
            (Some("ignored"), Some(false)),
            "{json}"
        );
        return;
    }
    // It serves: the held create lands after the key was written and deleted by newer tokens.
    let server = Server::start(&data, Some(&cfg));
    let c = client();
    let url = server.object_url("default", "doc");
    relay.hold.store(true, Ordering::SeqCst);
    let (status, body) = put(&c, &url, Some("5"), b"five").await;
    assert!(status >= 500, "{status} {body}");
    relay.hold.store(false, Ordering::SeqCst);
    let (status, body) =
        past_unresolved(Duration::from_secs(30), || put(&c, &url, Some("6"), b"six")).await;
    assert_eq!(status, 200, "{body}");
    let deleted = c
        .delete(&url)
        .header("Fencing-Token", "7")
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(deleted, 200);
    relay.release.send(true).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        az.get_behind("noexp", "doc"),
        None,
        "a service that ignores a SAS's expiry was served, and the stale token-5 create landed after token 7's delete"
    );
}

/// Review 51 finding: a Copy Blob answered `pending` is waited for by its own `x-ms-copy-id`,
/// but a Set Blob Metadata made around fencegate after the copy ended keeps the copy's id and
/// status (Azure clears them only on Put Blob, Put Block List and Set Blob Properties). Its
/// ETag was then taken for fencegate's commit: the PUT was acknowledged, the object's
/// fencegate entry was gone (its token, content type and ETag with it), and the next write
/// went over the change made around fencegate without a BypassDetected. Now the copied blob
/// must also carry this commit's id in its entry: the PUT is refused as a bypass, and so is
/// the next write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_change_during_a_pending_copy_is_not_taken_for_the_commit() {
    let (_az, script, server, _dir) = scripted("copymeta", "block_size_bytes = 1048576").await;
    let c = client();
    let url = server.object_url("default", "big");
    let big: &'static [u8] = Box::leak(vec![b'c'; (3 << 20) / 2].into_boxed_slice());
    let (status, body) = put(&c, &url, Some("1"), big).await;
    assert_eq!(status, 200, "{body}");
    script.pending_copy_then_meta.store(true, Ordering::SeqCst);
    let (status, body) = put(&c, &url, Some("2"), big).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("BypassDetected")),
        "the metadata change was taken for the commit: {body}"
    );
    let (status, body) = put(&c, &url, Some("3"), b"three").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("BypassDetected")),
        "the change made around fencegate is written over: {body}"
    );
}
