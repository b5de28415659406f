//! Authentication on the native API: SigV4 from curl (`--aws-sigv4`, which signs the body's
//! hash without sending it) and from aws-sigv4 (the AWS SDKs' signer), hostile
//! authentication input (each a 4xx that writes nothing), and protected mode.

use crate::common;
use common::sign::{sign_at, BodyHash, Creds};
use common::{get_bytes, Server};
use std::process::Command;
use std::time::{Duration, SystemTime};

const CONFIG: &str = r#"
[keys.worker]
access_key_id = "worker-key"
secret_access_key = "worker-secret-0123456"
buckets = { "default" = ["read", "write", "delete", "fence"] }
"#;

const WORKER: Creds = Creds {
    key: "worker-key",
    secret: "worker-secret-0123456",
};

fn curl(args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/stderr", "-w", "%{http_code}"])
        .args(args)
        .output()
        .expect("curl runs");
    (
        String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The highest token of default/`key`, read as the worker.
async fn highest(c: &reqwest::Client, s: &Server, key: &str) -> serde_json::Value {
    common::fence_as(c, s, "default", key, Some(WORKER)).await["highest"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_and_sdk_signatures_work_and_forgeries_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), Some(CONFIG));
    let c = common::client();
    let url = s.url("/v1/objects/default/a%20b%2Bc~d.txt");
    let sig = [
        "--aws-sigv4",
        "aws:amz:us-east-1:s3",
        "--user",
        "worker-key:worker-secret-0123456",
    ];

    // curl signs the body's hash inside the signature only: checked as the body ends.
    let mut args = sig.to_vec();
    args.extend([
        "-X",
        "PUT",
        "-H",
        "Fencing-Token: 3",
        "--data-binary",
        "by curl",
        &url,
    ]);
    let (status, body) = curl(&args);
    assert_eq!(status, 200, "{body}");
    let mut args = sig.to_vec();
    args.push(&url);
    let (status, body) = curl(&args);
    assert_eq!((status, body.as_str()), (200, "by curl"));
    let list = s.url("/v1/objects/default?prefix=a%20b&max_keys=5");
    let mut args = sig.to_vec();
    args.push(&list);
    assert_eq!(curl(&args).0, 200);
    // Without credentials, or with the wrong secret: refused, nothing written.
    let (status, body) = curl(&[
        "-X",
        "PUT",
        "-H",
        "Fencing-Token: 4",
        "--data-binary",
        "anon",
        &url,
    ]);
    assert_eq!(status, 401, "{body}");
    assert!(
        body.contains("MissingCredentials") && body.contains("--aws-sigv4"),
        "{body}"
    );
    let (status, body) = curl(&[
        "--aws-sigv4",
        "aws:amz:us-east-1:s3",
        "--user",
        "worker-key:wrong",
        "-X",
        "PUT",
        "-H",
        "Fencing-Token: 4",
        "--data-binary",
        "forged",
        &url,
    ]);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("SignatureDoesNotMatch"), "{body}");
    assert_eq!(highest(&c, &s, "a b+c~d.txt").await, 3);

    // The SDK signer, both ways of covering the body.
    for (mode, token) in [(BodyHash::Header, "5"), (BodyHash::SignatureOnly, "6")] {
        let mut req = c
            .put(&url)
            .header("Fencing-Token", token)
            .body(format!("by sdk {token}"))
            .build()
            .unwrap();
        sign_at(&mut req, WORKER, SystemTime::now(), mode);
        let resp = c.execute(req).await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{mode:?}");
    }

    // A body changed after signing (the signature covers its hash): refused at its end, and
    // the write never commits.
    for mode in [BodyHash::Header, BodyHash::SignatureOnly] {
        let mut req = c
            .put(&url)
            .header("Fencing-Token", "9")
            .body("original")
            .build()
            .unwrap();
        sign_at(&mut req, WORKER, SystemTime::now(), mode);
        *req.body_mut() = Some("tampered".into());
        let resp = c.execute(req).await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        assert!(matches!(status, 400 | 403), "{mode:?}: {status} {text}");
        assert!(
            text.contains("SignatureDoesNotMatch") || text.contains("x-amz-content-sha256"),
            "{text}"
        );
    }
    assert_eq!(highest(&c, &s, "a b+c~d.txt").await, 6);
    // A signed header changed after signing.
    let mut req = c
        .put(&url)
        .header("Fencing-Token", "7")
        .body("x")
        .build()
        .unwrap();
    sign_at(&mut req, WORKER, SystemTime::now(), BodyHash::Header);
    req.headers_mut()
        .insert("fencing-token", "8".parse().unwrap());
    let resp = c.execute(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    assert_eq!(highest(&c, &s, "a b+c~d.txt").await, 6);

    // A signature from far in the past or the future (a replay, a bad clock).
    for skew in [-1, 1] {
        let when = if skew < 0 {
            SystemTime::now() - Duration::from_secs(3600)
        } else {
            SystemTime::now() + Duration::from_secs(3600)
        };
        let mut req = c
            .put(&url)
            .header("Fencing-Token", "10")
            .body("x")
            .build()
            .unwrap();
        sign_at(&mut req, WORKER, when, BodyHash::Header);
        let resp = c.execute(req).await.unwrap();
        assert_eq!(resp.status().as_u16(), 403);
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["error"], "RequestTimeTooSkewed");
    }
    assert_eq!(highest(&c, &s, "a b+c~d.txt").await, 6);

    // Malformed Authorization headers: 400, nothing written.
    for auth in [
        "Basic d29ya2VyLWtleTp3b3JrZXItc2VjcmV0",
        "AWS4-HMAC-SHA256 Credential=worker-key",
        "AWS4-HMAC-SHA256 Credential=worker-key/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=nothex",
        "AWS4-HMAC-SHA256 Credential=worker-key/20260101/us-east-1/s3/aws4_request, SignedHeaders=Host;X, Signature=0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        let head = format!(
            "PUT /v1/objects/default/k HTTP/1.1\r\nAuthorization: {auth}\r\nX-Amz-Date: 20260101T000000Z\r\nFencing-Token: 11"
        );
        let (status, body) = common::raw_request(s.addr, &head, b"x");
        assert_eq!(status, 400, "{auth}: {body}");
        assert!(body.contains("AuthorizationHeaderMalformed"), "{body}");
    }
    // A huge header: 431 before any authentication.
    let head = format!(
        "PUT /v1/objects/default/k HTTP/1.1\r\nAuthorization: AWS4-HMAC-SHA256 {}",
        "x".repeat(100_000)
    );
    let (status, _) = common::raw_request(s.addr, &head, b"x");
    assert!(matches!(status, 400 | 431), "{status}");
    assert!(highest(&c, &s, "k").await.is_null());
    assert_eq!(get_bytes(&c, &s.object_url("default", "k")).await.0, 401);
}

#[test]
fn protected_mode_refuses_a_public_address_without_keys() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(common::binary())
        .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("development mode")
            && err.contains("[keys.NAME]")
            && err.contains("protected_mode = false"),
        "{err}"
    );
    // With keys, or with the explicit opt-out, it starts (and says so loudly in the latter).
    for config in [CONFIG, "[server]\nprotected_mode = false\n"] {
        let data = dir.path().join(format!("d{}", config.len()));
        std::fs::create_dir_all(&data).unwrap();
        let path = data.join("c.toml");
        std::fs::write(&path, config).unwrap();
        let mut child = Command::new(common::binary())
            .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
            .arg(&data)
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "info")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines: Vec<String> = std::io::BufRead::lines(std::io::BufReader::new(stderr))
            .map_while(Result::ok)
            .take_while(|l| !l.contains("fencegate is listening"))
            .collect();
        let _ = child.kill();
        let _ = child.wait();
        let log = lines.join("\n");
        assert!(
            !log.contains("ERROR") || log.contains("UNPROTECTED"),
            "{log}"
        );
        if config.contains("protected_mode") {
            assert!(log.contains("UNPROTECTED"), "{log}");
        }
    }
}

/// Review round 4: lease credentials carry their token only on S3, so the native API refuses
/// them; the fencing headers must be signed; a body signed over its own hash is checked before
/// anything runs; SigV2 and presigned URLs longer than 7 days are refused on S3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_4_holes_stay_closed() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{CONFIG}\n[keys.holder]\naccess_key_id = \"holder-key\"\nsecret_access_key = \"holder-secret-0123456\"\nbuckets = {{ \"default\" = [\"read\", \"write\", \"lease\"] }}\nlease_names = [\"job\"]\n"
    );
    let s = Server::start(&dir.path().join("data"), Some(&config));
    let c = common::client();
    let holder = Creds {
        key: "holder-key",
        secret: "holder-secret-0123456",
    };
    let acquire = c.post(s.url("/v1/leases/job")).json(&serde_json::json!({
        "holder": "h", "ttl_ms": 60000, "bucket": "default", "key": "leased", "s3_credentials": true
    }));
    let grant: serde_json::Value = common::sign::send(&c, acquire, Some(holder))
        .await
        .json()
        .await
        .unwrap();
    let lease = common::sign::lease_creds(&grant);
    let url = s.object_url("default", "leased");
    let (status, body) =
        common::put_as(&c, &url, Some("18446744073709551615"), b"x", Some(lease)).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (403, Some("AccessDenied")),
        "{body}"
    );
    assert_eq!(highest(&c, &s, "leased").await, grant["token"]);

    // A Fencing-Token added after signing (not in SignedHeaders) is refused.
    let mut req = c.put(&url).body("x").build().unwrap();
    sign_at(&mut req, WORKER, SystemTime::now(), BodyHash::Header);
    req.headers_mut()
        .insert("fencing-token", "99".parse().unwrap());
    let resp = c.execute(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 400);

    // A forged body signature is refused before the gate sees the request: no stale-token
    // answer, no bucket check, only SignatureDoesNotMatch.
    let forged = Creds {
        key: "worker-key",
        secret: "guess",
    };
    for (bucket, token) in [("default", "1"), ("nope", "1")] {
        let mut req = c
            .put(s.object_url(bucket, "leased"))
            .header("Fencing-Token", token)
            .body("x")
            .build()
            .unwrap();
        sign_at(&mut req, forged, SystemTime::now(), BodyHash::SignatureOnly);
        let resp = c.execute(req).await.unwrap();
        assert_eq!(resp.status().as_u16(), 403);
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["error"], "SignatureDoesNotMatch");
    }
    // Such bodies are bounded; a larger one must declare its hash or UNSIGNED-PAYLOAD.
    let mut req = c
        .put(&url)
        .header("Fencing-Token", "50")
        .body(vec![b'x'; 2 << 20])
        .build()
        .unwrap();
    sign_at(&mut req, WORKER, SystemTime::now(), BodyHash::SignatureOnly);
    let resp = c.execute(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert!(resp.text().await.unwrap().contains("UNSIGNED-PAYLOAD"));

    // S3: SigV2 and over-long presigned URLs.
    let head = "GET /default/leased HTTP/1.1\r\nDate: Mon, 01 Jan 2001 00:00:00 GMT\r\nAuthorization: AWS worker-key:c2lnbmF0dXJl";
    let (status, body) = common::raw_request(s.addr, head, b"");
    assert_eq!(status, 403, "{body}");
    let long = common::sign::presign(
        &s.url("/default/leased"),
        WORKER,
        Duration::from_secs(8 * 24 * 3600),
    );
    let resp = c.get(&long).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    assert!(resp.text().await.unwrap().contains("7 days"));
    let short = common::sign::presign(&s.url("/default/leased"), WORKER, Duration::from_secs(60));
    assert_eq!(c.get(&short).send().await.unwrap().status().as_u16(), 404);
    // Round 5: on S3 too, a Fencing-Token the signature does not cover is refused (a presigned
    // URL's bearer, or whoever captured a signed request, would otherwise pick the token).
    let resp = c
        .get(&short)
        .header("Fencing-Token", "18446744073709551615")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    let mut req = c
        .put(s.url("/default/s3-unsigned"))
        .body("x")
        .build()
        .unwrap();
    sign_at(&mut req, WORKER, SystemTime::now(), BodyHash::Header);
    req.headers_mut()
        .insert("fencing-token", "18446744073709551615".parse().unwrap());
    let resp = c.execute(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    assert!(highest(&c, &s, "s3-unsigned").await.is_null());

    // Round 6: what a signature covers is decided as s3s verifies it. A presigned PUT with a
    // decoy Authorization header claiming to sign the token, and a signed request whose
    // algorithm word was rewritten (s3s accepts any word), are refused with the added token.
    let url = common::sign::presign_method(
        "PUT",
        &s.url("/default/s3-decoy"),
        WORKER,
        Duration::from_secs(60),
    );
    let decoy = "AWS4-HMAC-SHA256 Credential=x/20260101/us-east-1/s3/aws4_request, SignedHeaders=fencing-token;host, Signature=00";
    let resp = c
        .put(&url)
        .header("Authorization", decoy)
        .header("Fencing-Token", "18446744073709551615")
        .body("bearer's bytes")
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        403,
        "{}",
        resp.text().await.unwrap()
    );
    // The URL itself still works, without a token of its bearer's choosing.
    let resp = c.put(&url).body("x").send().await.unwrap();
    assert_ne!(resp.status().as_u16(), 403);
    for word in ["AWS4-HMAC-SHA256\t", "X "] {
        let mut req = c
            .put(s.url("/default/s3-rewritten"))
            .body("x")
            .build()
            .unwrap();
        sign_at(&mut req, WORKER, SystemTime::now(), BodyHash::Header);
        let auth = req.headers()["authorization"].to_str().unwrap().to_string();
        let rewritten = auth.replacen("AWS4-HMAC-SHA256 ", word, 1);
        req.headers_mut()
            .insert("authorization", rewritten.parse().unwrap());
        req.headers_mut()
            .insert("fencing-token", "18446744073709551615".parse().unwrap());
        let resp = c.execute(req).await.unwrap();
        assert_eq!(resp.status().as_u16(), 403, "{word:?}");
    }
    assert!(highest(&c, &s, "s3-decoy").await.as_u64() != Some(u64::MAX));
    assert!(highest(&c, &s, "s3-rewritten").await.is_null());
}

/// The Rust client (`clients/rust`) signs every request with its key: leases, fenced
/// writes (the `Fencing-Token` among the signed headers), reads and release; without a key, a
/// keyed server refuses it with the error that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_signs_its_requests() {
    use fencegate_client::{AcquireOptions, Client, Error as ClientError};
    let dir = tempfile::tempdir().unwrap();
    let config = CONFIG.replace(
        r#""default" = ["read", "write", "delete", "fence"] }"#,
        "\"default\" = [\"read\", \"write\", \"lease\"] }\nlease_names = [\"job\"]",
    );
    let s = Server::start(&dir.path().join("data"), Some(&config));
    let base = s.url("");
    let anonymous = Client::new(&base);
    match anonymous
        .acquire(
            "job",
            "w",
            Duration::from_secs(10),
            AcquireOptions::default(),
        )
        .await
    {
        Err(ClientError::Denied { status, code, .. }) => {
            assert_eq!((status, code.as_str()), (401, "MissingCredentials"))
        }
        other => panic!("{:?}", other.map(|l| l.token())),
    }
    let wrong = Client::new(&base).with_key(WORKER.key, "not-the-secret");
    assert!(matches!(
        wrong.get("default", "x").await,
        Err(ClientError::Denied { status: 403, .. })
    ));

    let fg = Client::new(&base).with_key(WORKER.key, WORKER.secret);
    let lease = fg
        .acquire(
            "job",
            "w",
            Duration::from_secs(10),
            AcquireOptions::default().bind("default", "dir/client.txt"),
        )
        .await
        .unwrap();
    lease
        .put("default", "dir/client.txt", "signed")
        .await
        .unwrap();
    // A streamed body goes UNSIGNED-PAYLOAD, still under the signature.
    let stream = futures::stream::iter(vec![Ok::<_, std::io::Error>(bytes::Bytes::from(
        "streamed",
    ))]);
    fg.put(
        "default",
        "dir/streamed.txt",
        lease.token(),
        reqwest::Body::wrap_stream(stream),
    )
    .await
    .unwrap();
    assert_eq!(
        &fg.get("default", "dir/client.txt").await.unwrap()[..],
        b"signed"
    );
    assert_eq!(
        &fg.get("default", "dir/streamed.txt").await.unwrap()[..],
        b"streamed"
    );
    assert!(matches!(
        fg.put("default", "dir/client.txt", lease.token() - 1, "stale")
            .await,
        Err(ClientError::Stale { .. })
    ));
    lease.release().await.unwrap();
}

/// Review round 7: bodies read before any signature is checked. A browser-form POST (which s3s
/// would buffer whole, up to 5 GiB, before the access check) is refused before it is read; a
/// body trickled into the native API's signature check is cut off; and a shutdown waits for a
/// trickling client only `shutdown_grace_secs`.
#[test]
fn bodies_read_before_authentication_are_bounded() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let config =
        format!("{CONFIG}\n[server]\nbody_idle_timeout_secs = 1\nshutdown_grace_secs = 2\n");
    let mut s = Server::start(&dir.path().join("data"), Some(&config));
    let rss_before = s.peak_rss_kib();

    // 1. A form upload claiming 1 GiB: 501 at once, nothing buffered.
    let mut conn = std::net::TcpStream::connect(s.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let head = format!(
        "POST /default HTTP/1.1\r\nHost: {}\r\nContent-Type: multipart/form-data; boundary=xyz\r\nContent-Length: {}\r\n\r\n",
        s.addr,
        1u64 << 30
    );
    conn.write_all(head.as_bytes()).unwrap();
    let chunk = vec![b'a'; 1 << 20];
    for _ in 0..32 {
        if conn.write_all(&chunk).is_err() {
            break;
        }
    }
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 501"), "{answer}");
    assert!(answer.contains("NotImplemented"), "{answer}");
    assert!(
        s.peak_rss_kib() < rss_before + 64 * 1024,
        "the form's body was not buffered"
    );
    // Review round 8: a form whose Content-Type has a non-ASCII byte, and any POST that names
    // no operation fencegate serves, are refused the same way, whatever their body.
    for head in [
        "POST /default/obj HTTP/1.1\r\nContent-Type: multipart/form-data; boundary=B; x=\"\u{e9}\"",
        "POST /default/obj HTTP/1.1\r\nContent-Type: text/plain",
        "POST /default HTTP/1.1\r\nContent-Type: MULTIPART/FORM-DATA; boundary=B",
        "POST /default?uploads HTTP/1.1\r\nContent-Type: multipart/form-data; boundary=B",
        // Round 9: a served operation named beside an unserved one.
        "POST /default/obj?restore&uploadId=1 HTTP/1.1\r\nContent-Type: application/xml",
    ] {
        let (status, body) = common::raw_request(s.addr, head, b"--B\r\n");
        assert_eq!(status, 501, "{head}: {body}");
        assert!(body.contains("NotImplemented"), "{body}");
    }
    // Round 9: a credential scoped to another service (s3s would read its body before the
    // signature) is refused before s3s, with no secret needed to be refused.
    let (status, body) = common::raw_request(
        s.addr,
        "PUT /default/obj HTTP/1.1\r\nAuthorization: AWS4-HMAC-SHA256 Credential=worker-key/20260101/us-east-1/sts/aws4_request, SignedHeaders=host, Signature=00",
        b"x",
    );
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("sts") && body.contains("AccessDenied"),
        "{body}"
    );
    // Round 10: a decoy `Credential=` inside the first word (s3s takes the whole word for the
    // algorithm and reads the second), and WriteGetObjectResponse's routing headers on a
    // served POST.
    let (status, body) = common::raw_request(
        s.addr,
        "PUT /default/obj HTTP/1.1\r\nAuthorization: XCredential=worker-key/20260101/us-east-1/s3/aws4_request Credential=worker-key/20260101/us-east-1/sts/aws4_request, SignedHeaders=host, Signature=00",
        b"x",
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("sts"), "{body}");
    let (status, body) = common::raw_request(
        s.addr,
        "POST /default?uploads HTTP/1.1\r\nx-amz-request-route: r\r\nx-amz-request-token: t",
        b"",
    );
    assert_eq!(status, 501, "{body}");
    // Round 11: a credential of any other shape than KEY/DATE/REGION/SERVICE/aws4_request is
    // refused, never taken for "not foreign" (a ',' in a key id cut it short).
    let (status, body) = common::raw_request(
        s.addr,
        "PUT /default/obj HTTP/1.1\r\nAuthorization: AWS4-HMAC-SHA256 Credential=AK,X/20260101/us-east-1/sts/aws4_request, SignedHeaders=host, Signature=00",
        b"x",
    );
    assert_eq!(status, 403, "{body}");

    // 2. A native PUT signed over its body's hash, which must be read before the signature is
    // checked, trickled and then stalled: cut off (408) after the idle timeout plus the
    // listener's margin, without the secret ever being needed.
    let now = time::OffsetDateTime::now_utc();
    let date = format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        now.year(),
        now.month() as u8,
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    );
    let auth = format!(
        "AWS4-HMAC-SHA256 Credential=worker-key/{}/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature={}",
        &date[..8],
        "0".repeat(64)
    );
    let mut conn = std::net::TcpStream::connect(s.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head = format!(
        "PUT /v1/objects/default/trickled HTTP/1.1\r\nHost: {}\r\nx-amz-date: {date}\r\nAuthorization: {auth}\r\nContent-Length: 100\r\n\r\n0123456789",
        s.addr
    );
    let started = std::time::Instant::now();
    conn.write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(20));

    // 3. A client trickling a byte every 500 ms keeps its body alive; SIGTERM still ends the
    // process within the grace (2 s), not when the client gives up.
    let mut conn = std::net::TcpStream::connect(s.addr).unwrap();
    let head = format!(
        "PUT /v1/objects/default/slow HTTP/1.1\r\nHost: {}\r\nx-amz-date: {date}\r\nAuthorization: {auth}\r\nContent-Length: 100000\r\n\r\n",
        s.addr
    );
    conn.write_all(head.as_bytes()).unwrap();
    let trickler = std::thread::spawn(move || {
        for _ in 0..40 {
            if conn.write_all(b"x").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(s.pid() as i32, libc::SIGTERM) };
    let exited = s.wait_exit(Duration::from_secs(10));
    assert!(
        exited.is_some(),
        "fencegate exited within the shutdown grace"
    );
    assert!(!s.log_lines(&["shutdown grace"]).is_empty());
    trickler.join().unwrap();
}

/// A raw connection that sent the head of a body-hash-signed PUT and `sent` of its body bytes.
async fn held_body(
    addr: std::net::SocketAddr,
    creds: Creds,
    len: usize,
    sent: usize,
) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = common::sign::body_hash_signed_head(addr, "/v1/objects/default/held", creds, len);
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(&vec![b'x'; sent]).await.unwrap();
    conn
}

/// One whole body-hash-signed PUT of `len` bytes on a keep-alive connection: the answer's
/// head, its body, and whether the server then closed the connection.
async fn whole_body(
    addr: std::net::SocketAddr,
    creds: Creds,
    len: usize,
) -> (String, String, bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = common::sign::body_hash_signed_head(addr, "/v1/objects/default/probe", creds, len);
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(&vec![b'y'; len]).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        let read = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await;
        match read {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            // Still open, answer in hand: the connection was kept alive.
            Err(_) => break false,
        }
    };
    let text = String::from_utf8_lossy(&got).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.to_ascii_lowercase(), body.to_string(), closed)
}

/// `fencegate_unverified_body_bytes` as `/metrics` shows it.
async fn unverified_bytes(c: &reqwest::Client, s: &Server) -> f64 {
    let resp = common::sign::send(c, c.get(s.url("/metrics")), Some(OPS)).await;
    let text = resp.text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("fencegate_unverified_body_bytes "))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or_else(|| panic!("no fencegate_unverified_body_bytes in:\n{text}"))
}

const OPS: Creds = Creds {
    key: "ops-key",
    secret: "ops-secret-0123456",
};

/// Bodies read before their signature is checked share one budget over every connection: once
/// held bodies fill it, the next such body is refused with 503 SlowDown and Retry-After, its
/// connection closed, and nothing is written. Anyone with a key id can send them, so without
/// the budget their number (up to max_connections) was the only bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unverified_bodies_share_one_budget() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nmax_unverified_body_bytes = \"2MiB\"\n{CONFIG}\n[keys.ops]\naccess_key_id = \"ops-key\"\nsecret_access_key = \"ops-secret-0123456\"\nadmin = true\n"
    );
    let s = Server::start(&dir.path().join("data"), Some(&config));
    let c = common::client();
    let forger = Creds {
        key: WORKER.key,
        secret: "not-the-secret",
    };
    assert_eq!(unverified_bytes(&c, &s).await, 0.0);

    // Two connections each hold a 1 MiB - 1 body: one sent all but its last byte, the other a
    // single byte. Each is charged its whole declared length, before it is read: a length that
    // promises more than is sent still holds its share (its buffer is allocated at that size).
    let len = (1 << 20) - 1;
    let a = held_body(s.addr, forger, len, len - 1).await;
    let b = held_body(s.addr, forger, len, 1).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while unverified_bytes(&c, &s).await != 2.0 * len as f64 {
        assert!(
            std::time::Instant::now() < deadline,
            "the held bodies were never charged"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A third, even a small one, finds the budget spent.
    let (head, body, closed) = whole_body(s.addr, forger, 4096).await;
    assert!(head.starts_with("http/1.1 503"), "{head}\n{body}");
    assert!(head.contains("retry-after: 1"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(closed, "the refused connection stays open");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["error"], "SlowDown", "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("max_unverified_body_bytes"),
        "{answer}"
    );
    let refused = s.awaited_log_lines(&["fencegate::audit", "SlowDown"], 1);
    assert_eq!(refused.len(), 1, "{refused:?}");
    // A request without a body, signed the same way (curl's GET), takes nothing of it: the
    // budget spent never locks the rightful key out of reads and fences.
    let mut read = c.get(s.url("/v1/fences/default/held")).build().unwrap();
    sign_at(
        &mut read,
        WORKER,
        SystemTime::now(),
        BodyHash::SignatureOnly,
    );
    assert_eq!(c.execute(read).await.unwrap().status().as_u16(), 200);

    // Once the held bodies go, the budget is whole again: the same request is judged (here,
    // its signature is wrong) and a rightly signed one is written.
    drop((a, b));
    while unverified_bytes(&c, &s).await != 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the budget never came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (head, body, _) = whole_body(s.addr, forger, 4096).await;
    assert!(head.starts_with("http/1.1 403"), "{head}\n{body}");
    assert!(body.contains("SignatureDoesNotMatch"), "{body}");
    let mut req = c
        .put(s.object_url("default", "after"))
        .header("Fencing-Token", "1")
        .body(vec![b'z'; 4096])
        .build()
        .unwrap();
    sign_at(&mut req, WORKER, SystemTime::now(), BodyHash::SignatureOnly);
    assert_eq!(c.execute(req).await.unwrap().status().as_u16(), 200);
    assert_eq!(highest(&c, &s, "held").await, serde_json::Value::Null);
    assert_eq!(highest(&c, &s, "probe").await, serde_json::Value::Null);
}
