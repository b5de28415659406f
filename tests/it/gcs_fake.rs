//! The gcs fake (tests/common/gcs_fake) itself, which models GCS's XML API for the gcs
//! backend's tests because no installable emulator honours generation preconditions: its V4
//! check reproduces Google's own library's vector, and it refuses what real GCS refuses
//! (tampered, expired, stale generations, bad digests), unless a knob says to act weak.

use crate::common::gcs_fake::{self, Account, GcsFake, Op, SA_JSON};
use aws_lc_rs::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use axum::http::{HeaderMap, HeaderValue};
use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD as B64URL};
use base64::Engine;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/notes/gcs-vectors");
const B: &str = "fg-bucket";

fn vector(name: &str) -> String {
    std::fs::read_to_string(format!("{VECTORS}/{name}")).unwrap()
}

/// The vector's request as GCS would receive it (Google's URL, host storage.googleapis.com).
fn vector_request() -> (String, String, HeaderMap) {
    let url = vector("signed_put_url.txt");
    let rest = url
        .trim()
        .strip_prefix("https://storage.googleapis.com")
        .unwrap();
    let (path, query) = rest.split_once('?').unwrap();
    let mut h = HeaderMap::new();
    for (k, v) in [
        ("content-md5", "1B2M2Y8AsgTpgAmY7PHvfg=="),
        ("content-type", "application/octet-stream"),
        ("host", "storage.googleapis.com"),
        ("x-goog-if-generation-match", "0"),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
    (path.to_string(), query.to_string(), h)
}

#[test]
fn the_v4_vector_from_googles_library_verifies_and_a_tampered_one_does_not() {
    let (path, query, mut headers) = vector_request();
    let canonical = gcs_fake::canonical_request("PUT", &path, &query, &headers).unwrap();
    assert_eq!(canonical, vector("canonical_request.txt").trim_end());
    let sts = gcs_fake::string_to_sign(
        "20261206T120000Z",
        "20261206/auto/storage/goog4_request",
        &canonical,
    );
    assert_eq!(sts, vector("string_to_sign.txt").trim_end());
    let account = Account::from_json(SA_JSON);
    let at = |s: u64| UNIX_EPOCH + Duration::from_secs(1_796_558_400 + s);
    let verify = |h: &HeaderMap, q: &str, now| {
        gcs_fake::verify_v4("PUT", &path, q, h, now, &account.email, &account.public_key)
    };
    verify(&headers, &query, at(60)).unwrap();
    // Valid from 15 minutes before X-Goog-Date until X-Goog-Date + 900 s.
    assert!(matches!(
        verify(&headers, &query, at(901)),
        Err(gcs_fake::V4Error::Expired(_))
    ));
    verify(&headers, &query, at(0) - Duration::from_secs(899)).unwrap();
    assert!(matches!(
        verify(&headers, &query, at(0) - Duration::from_secs(901)),
        Err(gcs_fake::V4Error::NotYetValid(_))
    ));
    let longer = query.replace("X-Goog-Expires=900", "X-Goog-Expires=901");
    assert!(matches!(
        verify(&headers, &longer, at(60)),
        Err(gcs_fake::V4Error::BadSignature { .. })
    ));
    headers.insert("x-goog-if-generation-match", HeaderValue::from_static("7"));
    assert!(matches!(
        verify(&headers, &query, at(60)),
        Err(gcs_fake::V4Error::BadSignature { .. })
    ));
    headers.remove("content-md5");
    assert!(matches!(
        verify(&headers, &query, at(60)),
        Err(gcs_fake::V4Error::MissingHeader(h)) if h == "content-md5"
    ));
}

const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');
const PATH: &AsciiSet = &UNRESERVED.remove(b'/');

/// A V4 signed URL made here from GCS's documented algorithm (not with the fake's code):
/// `headers` are signed with host, and are to be sent as given.
fn signed_url(
    fake: &GcsFake,
    method: &str,
    key: &str,
    headers: &[(&str, &str)],
    signed_at: SystemTime,
    expires: u64,
) -> String {
    let t = time::OffsetDateTime::from(signed_at);
    let date = format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    let email = Account::from_json(SA_JSON).email;
    let path = format!("/{B}/{}", utf8_percent_encode(key, PATH));
    let host = fake.addr.to_string();
    let mut hs: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .chain([("host".to_string(), host)])
        .collect();
    hs.sort();
    let signed: Vec<&str> = hs.iter().map(|(k, _)| k.as_str()).collect();
    let signed = signed.join(";");
    let scope = format!("{}/auto/storage/goog4_request", &date[..8]);
    let enc = |s: &str| utf8_percent_encode(s, UNRESERVED).to_string();
    let query = [
        ("X-Goog-Algorithm", "GOOG4-RSA-SHA256".to_string()),
        ("X-Goog-Credential", format!("{email}/{scope}")),
        ("X-Goog-Date", date.clone()),
        ("X-Goog-Expires", expires.to_string()),
        ("X-Goog-SignedHeaders", signed.clone()),
    ]
    .iter()
    .map(|(k, v)| format!("{k}={}", enc(v)))
    .collect::<Vec<_>>()
    .join("&");
    let lines: String = hs.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let canonical = format!("{method}\n{path}\n{query}\n{lines}\n{signed}\nUNSIGNED-PAYLOAD");
    let sts = format!(
        "GOOG4-RSA-SHA256\n{date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let sig = rs256(sts.as_bytes());
    format!(
        "{}{path}?{query}&X-Goog-Signature={}",
        fake.url(),
        hex::encode(sig)
    )
}

/// RS256 with sa.json's key, with aws-lc-rs directly.
fn rs256(msg: &[u8]) -> Vec<u8> {
    let sa: serde_json::Value = serde_json::from_str(SA_JSON).unwrap();
    let pem = sa["private_key"].as_str().unwrap();
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let key = RsaKeyPair::from_pkcs8(&B64.decode(b64).unwrap()).unwrap();
    let mut sig = vec![0; key.public_modulus_len()];
    let rng = aws_lc_rs::rand::SystemRandom::new();
    key.sign(&RSA_PKCS1_SHA256, &rng, msg, &mut sig).unwrap();
    sig
}

async fn started() -> (GcsFake, reqwest::Client, String) {
    let fake = GcsFake::start().await;
    fake.create_bucket(B);
    let token = fake.issue_token();
    (fake, reqwest::Client::new(), token)
}

fn obj_url(fake: &GcsFake, key: &str) -> String {
    format!("{}/{B}/{}", fake.url(), utf8_percent_encode(key, PATH))
}

/// A bearer PUT with `x-goog-if-generation-match` when given: status, headers, body.
async fn put(
    c: &reqwest::Client,
    fake: &GcsFake,
    token: &str,
    key: &str,
    body: &'static [u8],
    gen: Option<i64>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut req = c.put(obj_url(fake, key)).bearer_auth(token).body(body);
    if let Some(g) = gen {
        req = req.header("x-goog-if-generation-match", g.to_string());
    }
    let r = req.send().await.unwrap();
    (
        r.status().as_u16(),
        r.headers().clone(),
        r.text().await.unwrap(),
    )
}

fn generation(h: &reqwest::header::HeaderMap) -> i64 {
    h["x-goog-generation"].to_str().unwrap().parse().unwrap()
}

fn hashes(h: &reqwest::header::HeaderMap) -> Vec<String> {
    h.get_all("x-goog-hash")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn signed_requests_are_checked_against_the_request_as_received() {
    let (fake, c, _) = started().await;
    let key = "dir/obj name+1é";
    let md5 = B64.encode(md5::Md5::digest(b"v1"));
    let hs = [
        ("content-md5", md5.as_str()),
        ("x-goog-if-generation-match", "0"),
    ];
    let url = signed_url(&fake, "PUT", key, &hs, fake.now(), 900);
    let send = |url: String, gen: &'static str| {
        c.put(url)
            .header("content-md5", md5.clone())
            .header("x-goog-if-generation-match", gen)
            .body("v1")
            .send()
    };
    // A signed header altered in flight: refused with what the fake signed.
    let r = send(url.clone(), "5").await.unwrap();
    assert_eq!(r.status(), 403);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("<Code>SignatureDoesNotMatch</Code>"),
        "{text}"
    );
    assert!(text.contains("x-goog-if-generation-match:5"), "{text}");
    // A signed header left out.
    let r = c
        .put(url.clone())
        .header("content-md5", md5.clone())
        .body("v1");
    assert_eq!(r.send().await.unwrap().status(), 403);
    // A tampered signature.
    let flipped = if url.ends_with('0') { "1" } else { "0" };
    let r = send(format!("{}{flipped}", &url[..url.len() - 1]), "0")
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(fake.get_direct(B, key).is_none());
    // As signed: stored under the decoded name.
    let r = send(url.clone(), "0").await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(&fake.get_direct(B, key).unwrap().0[..], b"v1");
    // The same request held past its expiry (the fake's clock moved on): 400 ExpiredToken.
    fake.set_clock_offset(901);
    let r = send(url, "0").await.unwrap();
    assert_eq!(r.status(), 400);
    let date = httpdate::parse_http_date(r.headers()["date"].to_str().unwrap()).unwrap();
    assert!(date > SystemTime::now() + Duration::from_secs(890));
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("<Code>ExpiredToken</Code>"));
    // Signed for later than 15 minutes ahead: not valid yet.
    fake.set_clock_offset(0);
    let later = fake.now() + Duration::from_secs(1000);
    let url = signed_url(&fake, "GET", key, &[], later, 900);
    assert_eq!(c.get(url).send().await.unwrap().status(), 400);
    let url = signed_url(&fake, "GET", key, &[], fake.now(), 60);
    let r = c.get(url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "v1");
}

#[tokio::test]
async fn the_jwt_grant_gives_a_token_that_lists_and_bad_ones_are_refused() {
    let fake = GcsFake::start().await;
    fake.create_bucket(B);
    let c = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let sa: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fake.write_service_account(dir.path())).unwrap())
            .unwrap();
    assert_eq!(sa["token_uri"], fake.token_uri());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let jwt = |aud: &str, iat: i64, exp: i64| {
        let h = B64URL.encode(r#"{"alg":"RS256","typ":"JWT","kid":"0123456789abcdef"}"#);
        let claims = serde_json::json!({"iss": sa["client_email"], "aud": aud, "iat": iat,
            "exp": exp, "scope": "https://www.googleapis.com/auth/devstorage.read_write"});
        let body = format!("{h}.{}", B64URL.encode(claims.to_string()));
        format!("{body}.{}", B64URL.encode(rs256(body.as_bytes())))
    };
    let grant = |assertion: String| {
        let form = [
            (
                "grant_type",
                "urn:ietf:params:oauth:grant-type:jwt-bearer".to_string(),
            ),
            ("assertion", assertion),
        ];
        c.post(fake.token_uri()).form(&form).send()
    };
    let list = |token: String| {
        c.get(format!("{}/{B}?list-type=2", fake.url()))
            .bearer_auth(token)
            .send()
    };
    assert_eq!(list("nope".into()).await.unwrap().status(), 401);
    let r = c.get(format!("{}/{B}", fake.url())).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = grant(jwt(&fake.token_uri(), now, now + 3600))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (body["expires_in"].as_i64(), body["token_type"].as_str()),
        (Some(3599), Some("Bearer"))
    );
    let r = list(body["access_token"].as_str().unwrap().into())
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("<KeyCount>0</KeyCount>"));
    // google-auth's aud is Google's endpoint: accepted too.
    let r = grant(jwt("https://oauth2.googleapis.com/token", now, now + 60))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for (bad, why) in [
        (jwt(&fake.token_uri(), now - 7200, now - 3600), "expired"),
        (
            jwt(&fake.token_uri(), now, now + 3601),
            "longer than an hour",
        ),
        (
            jwt("https://example.com/token", now, now + 60),
            "another audience",
        ),
        (
            jwt(&fake.token_uri(), now, now + 60).replace(".ey", ".eyJ"),
            "tampered",
        ),
    ] {
        let r = grant(bad).await.unwrap();
        assert_eq!(r.status(), 400, "{why}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"], "invalid_grant", "{why}");
    }
    // A token that lives 5 s, once the fake's clock passes it.
    fake.token_lifetime(5);
    let body: serde_json::Value = grant(jwt(&fake.token_uri(), now, now + 3600))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["expires_in"], 5);
    let token = body["access_token"].as_str().unwrap().to_string();
    assert_eq!(list(token.clone()).await.unwrap().status(), 200);
    fake.set_clock_offset(6);
    assert_eq!(list(token).await.unwrap().status(), 401);
    assert_eq!(fake.requests("POST", "token"), 7);
}

#[tokio::test]
async fn generation_preconditions_hold_and_a_race_of_creators_has_one_winner() {
    let (fake, c, token) = started().await;
    let (s, h, _) = put(&c, &fake, &token, "k", b"v1", Some(0)).await;
    assert_eq!(s, 200);
    let g1 = generation(&h);
    assert_eq!(h["x-goog-metageneration"], "1");
    assert_eq!(
        h["etag"],
        format!("\"{}\"", hex::encode(md5::Md5::digest(b"v1")))
    );
    let md5 = B64.encode(md5::Md5::digest(b"v1"));
    let crc = B64.encode(gcs_fake::crc32c(b"v1").to_be_bytes());
    assert_eq!(hashes(&h), [format!("crc32c={crc}"), format!("md5={md5}")]);
    assert_eq!(h["x-goog-stored-content-length"], "2");
    let (s, _, body) = put(&c, &fake, &token, "k", b"v2", Some(0)).await;
    assert_eq!(s, 412);
    assert!(body.contains("<Code>PreconditionFailed</Code>"), "{body}");
    assert_eq!(
        put(&c, &fake, &token, "k", b"v2", Some(g1 + 1)).await.0,
        412
    );
    let (s, h, _) = put(&c, &fake, &token, "k", b"v2", Some(g1)).await;
    assert_eq!(s, 200);
    let g2 = generation(&h);
    assert!(g2 > g1);
    // Delete: a stale generation is refused, the live one goes, then 404.
    let del = |g: i64| {
        c.delete(obj_url(&fake, "k"))
            .bearer_auth(&token)
            .header("x-goog-if-generation-match", g.to_string())
            .send()
    };
    assert_eq!(del(g1).await.unwrap().status(), 412);
    assert_eq!(del(g2).await.unwrap().status(), 204);
    let r = del(g2).await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("<Code>NoSuchKey</Code>"));
    // Eight creators at once: one 200, seven 412.
    let racers = (0..8).map(|_| {
        let (c, url, token) = (c.clone(), obj_url(&fake, "race"), token.clone());
        tokio::spawn(async move {
            let r = c
                .put(url)
                .bearer_auth(token)
                .header("x-goog-if-generation-match", "0");
            r.body("x").send().await.unwrap().status().as_u16()
        })
    });
    let mut statuses = Vec::new();
    for r in racers.collect::<Vec<_>>() {
        statuses.push(r.await.unwrap());
    }
    statuses.sort();
    assert_eq!(statuses, [200, 412, 412, 412, 412, 412, 412, 412]);
    assert_eq!(fake.requests("PUT", "object"), 12);
    // An unknown bucket.
    let r = c
        .get(format!("{}/nope/k", fake.url()))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("<Code>NoSuchBucket</Code>"));
}

#[tokio::test]
async fn digests_are_checked_and_a_refused_upload_stores_nothing() {
    let (fake, c, token) = started().await;
    let up = |md5: &str| {
        c.put(obj_url(&fake, "m"))
            .bearer_auth(&token)
            .header("content-md5", md5)
            .body("data")
            .send()
    };
    let wrong = B64.encode(md5::Md5::digest(b"other"));
    let r = up(&wrong).await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("<Code>BadDigest</Code>"));
    let r = up("not-base64!").await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("<Code>InvalidDigest</Code>"));
    let r = c
        .put(obj_url(&fake, "m"))
        .bearer_auth(&token)
        .header("x-goog-hash", "crc32c=AAAAAA==");
    assert_eq!(r.body("data").send().await.unwrap().status(), 400);
    let r = c.put(obj_url(&fake, "m")).bearer_auth(&token);
    let r = r.header(
        "x-goog-content-sha256",
        hex::encode(Sha256::digest(b"other")),
    );
    assert_eq!(r.body("data").send().await.unwrap().status(), 400);
    assert!(fake.get_direct(B, "m").is_none());
    assert_eq!(
        up(&B64.encode(md5::Md5::digest(b"data")))
            .await
            .unwrap()
            .status(),
        200
    );
    // ignore_md5: a wrong digest is stored anyway, as weak emulators do.
    fake.ignore_md5();
    assert_eq!(up(&wrong).await.unwrap().status(), 200);
}

#[tokio::test]
async fn compose_makes_a_composite_with_a_crc32c_only() {
    let (fake, c, token) = started().await;
    let ga = fake.put_direct(B, "p/a", &b"hello "[..], &[]);
    fake.put_direct(B, "p/b", &b"world"[..], &[]);
    let compose = |dest: &str, parts: &[(&str, Option<i64>)], gen: Option<i64>| {
        let body: String = parts
            .iter()
            .map(|(n, g)| {
                let g = g
                    .map(|g| format!("<Generation>{g}</Generation>"))
                    .unwrap_or_default();
                format!("<Component><Name>{n}</Name>{g}</Component>")
            })
            .collect();
        let mut r = c
            .put(format!("{}?compose", obj_url(&fake, dest)))
            .bearer_auth(&token)
            .header("content-type", "text/plain")
            .header("x-goog-meta-fencegate", "{\"t\":1}")
            .body(format!("<ComposeRequest>{body}</ComposeRequest>"));
        if let Some(g) = gen {
            r = r.header("x-goog-if-generation-match", g.to_string());
        }
        r.send()
    };
    let r = compose("whole", &[("p/a", Some(ga)), ("p/b", None)], Some(0))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    let crc = B64.encode(gcs_fake::crc32c(b"hello world").to_be_bytes());
    assert_eq!(hashes(&h), [format!("crc32c={crc}")]);
    assert_eq!(h["x-goog-component-count"], "2");
    assert_ne!(
        h["etag"],
        format!("\"{}\"", hex::encode(md5::Md5::digest(b"hello world")))
    );
    let r = c
        .get(obj_url(&fake, "whole"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        (
            r.headers()["content-type"].to_str().unwrap(),
            r.headers()["x-goog-meta-fencegate"].to_str().unwrap()
        ),
        ("text/plain", "{\"t\":1}")
    );
    assert_eq!(r.text().await.unwrap(), "hello world");
    let o = fake.stat_direct(B, "whole").unwrap();
    assert_eq!((o.md5, o.component_count), (None, Some(2)));
    // A composite of a composite counts its components.
    let r = compose("more", &[("whole", None), ("p/a", None)], None)
        .await
        .unwrap();
    assert_eq!(r.headers()["x-goog-component-count"], "3");
    // The destination's precondition, a pinned source generation, a missing source, 33 parts.
    assert_eq!(
        compose("whole", &[("p/a", None)], Some(0))
            .await
            .unwrap()
            .status(),
        412
    );
    assert_eq!(
        compose("x", &[("p/a", Some(ga + 1))], None)
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        compose("x", &[("p/none", None)], None)
            .await
            .unwrap()
            .status(),
        404
    );
    let many = vec![("p/a", None); 33];
    let r = compose("x", &many, None).await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("<Code>InvalidArgument</Code>"));
    assert_eq!(compose("x", &many[..32], None).await.unwrap().status(), 200);
    assert!(fake.get_direct(B, "x").is_some());
    // ignore_conditions(Compose): the destination's precondition no longer holds anything.
    fake.ignore_conditions(Op::Compose);
    assert_eq!(
        compose("whole", &[("p/a", None)], Some(0))
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(fake.requests("PUT", "compose"), 8);
}

/// Every `<tag>…</tag>` text in `xml`.
fn texts(xml: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    xml.split(&open)
        .skip(1)
        .map(|s| s.split(&close).next().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn listings_page_in_byte_order_without_repeating_prefixes() {
    let (fake, c, token) = started().await;
    let names = [
        "l/%", "l/10", "l/B", "l/a", "l/a/x", "l/a/y", "l/b/z", "l/b/zz", "l/~", "m",
    ];
    for n in names.iter().rev() {
        fake.put_direct(B, n, &b"x"[..], &[]);
    }
    let mut got = Vec::new();
    let mut token_param = String::new();
    let mut pages = 0;
    loop {
        let url = format!(
            "{}/{B}?list-type=2&prefix=l/&delimiter=/&max-keys=2{token_param}",
            fake.url()
        );
        let xml = c
            .get(url)
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        pages += 1;
        for block in texts(&xml, "Contents") {
            got.push(texts(&block, "Key")[0].clone());
            assert_eq!(texts(&block, "MetaGeneration"), ["1"]);
        }
        for block in texts(&xml, "CommonPrefixes") {
            got.push(texts(&block, "Prefix")[0].clone());
        }
        let kc: usize = texts(&xml, "KeyCount")[0].parse().unwrap();
        assert!(kc <= 2, "{xml}");
        match texts(&xml, "NextContinuationToken").first() {
            Some(t) => {
                assert_eq!(texts(&xml, "IsTruncated"), ["true"]);
                token_param = format!("&continuation-token={t}");
            }
            None => break,
        }
    }
    got.sort();
    let want = ["l/%", "l/10", "l/B", "l/a", "l/a/", "l/b/", "l/~"];
    assert_eq!(got, want);
    assert_eq!(pages, 4);
    // start-after, and a bucket GET without list-type (the older form) lists too.
    let url = format!("{}/{B}?list-type=2&prefix=l/&start-after=l/a/x", fake.url());
    let xml = c
        .get(url)
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(texts(&xml, "Key"), ["l/a/y", "l/b/z", "l/b/zz", "l/~"]);
    let xml = c
        .get(format!("{}/{B}", fake.url()))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(texts(&xml.text().await.unwrap(), "Key").len(), names.len());
    let head = c
        .head(format!("{}/{B}", fake.url()))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(fake.list_direct(B, "l/a").len(), 3);
}

#[tokio::test]
async fn reads_ranges_generations_and_outages() {
    let (fake, c, token) = started().await;
    let g = fake.put_direct(B, "r", &b"0123456789"[..], &[("fencegate", "v")]);
    let get = |range: Option<&str>, query: &str| {
        let mut r = c
            .get(format!("{}{query}", obj_url(&fake, "r")))
            .bearer_auth(&token);
        if let Some(range) = range {
            r = r.header("range", range);
        }
        r.send()
    };
    let r = get(Some("bytes=2-4"), "").await.unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(r.headers()["content-range"], "bytes 2-4/10");
    assert_eq!(r.headers()["x-goog-meta-fencegate"], "v");
    assert_eq!(r.text().await.unwrap(), "234");
    assert_eq!(
        get(Some("bytes=-3"), "")
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "789"
    );
    let r = get(Some("bytes=10-"), "").await.unwrap();
    assert_eq!(r.status(), 416);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("<Code>InvalidRange</Code>"));
    assert_eq!(
        get(None, &format!("?generation={g}"))
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        get(None, &format!("?generation={}", g - 1))
            .await
            .unwrap()
            .status(),
        404
    );
    let head = c
        .head(obj_url(&fake, "r"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        (
            head.status().as_u16(),
            head.headers()["content-length"].to_str().unwrap()
        ),
        (200, "10")
    );
    assert_eq!(generation(head.headers()), g);
    assert!(head.headers().contains_key("last-modified"));
    fake.fail_next(2, 503);
    for _ in 0..2 {
        let r = get(None, "").await.unwrap();
        assert_eq!(r.status(), 503);
        assert!(r
            .text()
            .await
            .unwrap()
            .contains("<Code>ServiceUnavailable</Code>"));
    }
    assert_eq!(get(None, "").await.unwrap().status(), 200);
    assert_eq!(fake.requests("GET", "object"), 8);
    assert_eq!(fake.requests("HEAD", "object"), 1);
}

#[tokio::test]
async fn the_ignore_knobs_make_the_fake_as_weak_as_the_emulators() {
    let (fake, c, token) = started().await;
    let del = |g: &str| {
        c.delete(obj_url(&fake, "k"))
            .bearer_auth(&token)
            .header("x-goog-if-generation-match", g)
            .send()
    };
    let g = fake.put_direct(B, "k", &b"v"[..], &[]);
    assert_eq!(del(&(g + 1).to_string()).await.unwrap().status(), 412);
    fake.ignore_conditions(Op::Delete);
    assert_eq!(del(&(g + 1).to_string()).await.unwrap().status(), 204);
    assert!(fake.get_direct(B, "k").is_none());
    assert_eq!(put(&c, &fake, &token, "k", b"1", Some(0)).await.0, 200);
    assert_eq!(put(&c, &fake, &token, "k", b"2", Some(0)).await.0, 412);
    fake.ignore_conditions(Op::Put);
    assert_eq!(put(&c, &fake, &token, "k", b"2", Some(0)).await.0, 200);
    assert_eq!(&fake.get_direct(B, "k").unwrap().0[..], b"2");
    assert!(fake.delete_direct(B, "k"));
}

#[tokio::test]
async fn held_requests_land_late_and_held_answers_lose_a_change_that_landed() {
    let (fake, c, token) = started().await;
    // An answer held past the client's timeout: the upload is there all the same.
    fake.hold_answers(1, Duration::from_secs(3));
    let quick = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let r = quick
        .put(obj_url(&fake, "h"))
        .bearer_auth(&token)
        .header("x-goog-if-generation-match", "0");
    assert!(r.body("landed").send().await.unwrap_err().is_timeout());
    assert_eq!(&fake.get_direct(B, "h").unwrap().0[..], b"landed");
    // A signed request held in flight past its expiry is refused when it lands.
    let url = signed_url(&fake, "GET", "h", &[], fake.now(), 2);
    assert_eq!(c.get(&url).send().await.unwrap().status(), 200);
    fake.hold_requests(1, Duration::from_secs(3));
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("<Code>ExpiredToken</Code>"));
}

#[tokio::test]
async fn what_the_fake_does_not_model_is_refused_not_ignored() {
    let (fake, c, token) = started().await;
    let g = fake.put_direct(B, "k", &b"v"[..], &[]);
    let url = obj_url(&fake, "k");
    let refused = [
        c.put(&url).header("x-goog-copy-source", format!("{B}/k")),
        c.put(&url).header("x-goog-if-metageneration-match", "1"),
        c.get(&url).header("if-none-match", "\"x\""),
        c.put(format!("{url}?partNumber=1&uploadId=u")),
        c.post(format!("{url}?uploads")),
        c.delete(format!("{url}?generation={g}")),
        c.post(format!(
            "{}/upload/storage/v1/b/{B}/o?uploadType=media&name=k",
            fake.url()
        )),
    ];
    for r in refused {
        let r = r.bearer_auth(&token).send().await.unwrap();
        assert_eq!(r.status(), 501);
        assert!(r
            .text()
            .await
            .unwrap()
            .contains("<Code>NotImplemented</Code>"));
    }
    assert_eq!(fake.get_direct(B, "k").unwrap().1, g);
}
