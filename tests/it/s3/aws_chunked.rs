//! aws-chunked bodies (`x-amz-content-sha256: STREAMING-*`) on both backends: signed chunks,
//! signed and unsigned trailers, with and without a Content-Length, for PutObject and
//! UploadPart; and every way of lying in one refused with nothing stored.

use super::fixture::{Fx, Kind};
use crate::common;
use common::sign::{sign_payload, signed_chunks, Creds};

const CREDS: Creds = Creds {
    key: "fencegate",
    secret: "fencegate-dev-secret",
};
const SIGNED: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
const SIGNED_TRAILER: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
const UNSIGNED_TRAILER: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";

/// CRC-32 (IEEE), base64 of its big-endian bytes, as `x-amz-checksum-crc32` carries it.
fn crc32(data: &[u8]) -> String {
    use base64::Engine as _;
    let mut crc = 0xFFFF_FFFFu32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    base64::engine::general_purpose::STANDARD.encode((!crc).to_be_bytes())
}

/// botocore's unsigned-trailer body: `hex\r\ndata\r\n`, `0\r\n`, the checksum line, `\r\n`.
fn unsigned_body(chunks: &[&[u8]], data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for c in chunks {
        body.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        body.extend_from_slice(c);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("0\r\nx-amz-checksum-crc32:{}\r\n\r\n", crc32(data)).as_bytes());
    body
}

/// One aws-chunked request: signed with `payload`, its body made by `body` from the signed
/// request (a signed body chains from the request's signature); `streamed`: sent with
/// `Transfer-Encoding: chunked` and no Content-Length, as botocore does over TLS.
async fn send(
    url: &str,
    payload: &str,
    decoded: usize,
    trailer: Option<&str>,
    streamed: bool,
    body: impl FnOnce(&reqwest::Request) -> Vec<u8>,
) -> (u16, String) {
    let http = reqwest::Client::new();
    let mut builder = http
        .put(url)
        .header("content-encoding", "aws-chunked")
        .header("x-amz-decoded-content-length", decoded.to_string())
        .header("x-amz-content-sha256", payload);
    if let Some(t) = trailer {
        builder = builder.header("x-amz-trailer", t);
    }
    let mut req = builder.body(Vec::new()).build().unwrap();
    sign_payload(&mut req, CREDS, payload);
    let bytes = body(&req);
    *req.body_mut() = Some(if streamed {
        let pieces: Vec<Result<Vec<u8>, std::io::Error>> =
            bytes.chunks(10_000).map(|c| Ok(c.to_vec())).collect();
        reqwest::Body::wrap_stream(futures::stream::iter(pieces))
    } else {
        reqwest::Body::from(bytes)
    });
    let resp = http.execute(req).await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let code = super::fixture::error_code(&text);
    (status, if code.is_empty() { text } else { code })
}

async fn stored(fx: &Fx, key: &str) -> Option<Vec<u8>> {
    let c = fx.client();
    match c.get_object().bucket("bkt").key(key).send().await {
        Ok(o) => Some(o.body.collect().await.unwrap().into_bytes().to_vec()),
        Err(_) => None,
    }
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

async fn put_object_forms(kind: Kind) {
    let fx = Fx::start(kind).await;
    let url = |k: &str| fx.server.url(&format!("/bkt/{k}"));
    let d = data(140_000, 1);
    let chunks: [&[u8]; 3] = [&d[..65_536], &d[65_536..131_072], &d[131_072..]];

    for (key, streamed) in [("signed", false), ("signed-te", true)] {
        let r = send(&url(key), SIGNED, d.len(), None, streamed, |req| {
            signed_chunks(req, CREDS, &chunks, None)
        })
        .await;
        assert_eq!(r.0, 200, "{key}: {}", r.1);
        assert_eq!(stored(&fx, key).await.as_deref(), Some(&d[..]), "{key}");
    }
    let line = format!("x-amz-checksum-crc32:{}", crc32(&d));
    let r = send(
        &url("signed-trailer"),
        SIGNED_TRAILER,
        d.len(),
        Some("x-amz-checksum-crc32"),
        true,
        |req| signed_chunks(req, CREDS, &chunks, Some(&line)),
    )
    .await;
    assert_eq!(r.0, 200, "signed trailer: {}", r.1);
    assert_eq!(stored(&fx, "signed-trailer").await.as_deref(), Some(&d[..]));
    let r = send(
        &url("unsigned"),
        UNSIGNED_TRAILER,
        d.len(),
        Some("x-amz-checksum-crc32"),
        true,
        |_| unsigned_body(&chunks, &d),
    )
    .await;
    assert_eq!(r.0, 200, "unsigned trailer: {}", r.1);
    assert_eq!(stored(&fx, "unsigned").await.as_deref(), Some(&d[..]));
    // The checksum a trailer carried is kept, as one sent in a header is (checksums.rs).
    for key in ["signed-trailer", "unsigned"] {
        let head = fx
            .client()
            .head_object()
            .bucket("bkt")
            .key(key)
            .checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled)
            .send()
            .await
            .unwrap();
        assert_eq!(head.checksum_crc32(), Some(crc32(&d).as_str()), "{key}");
    }

    // Lies, each refused with nothing stored. The key was never written, so it stays absent.
    let cut = |b: Vec<u8>| {
        // Cut after chunk 1's CRLF: at a chunk boundary, where s3s took the body as whole.
        let end = b.windows(2).position(|w| w == b"\r\n").unwrap() + 2 + 65_536 + 2;
        b[..end].to_vec()
    };
    for streamed in [false, true] {
        let r = send(&url("cut"), SIGNED, d.len(), None, streamed, |req| {
            cut(signed_chunks(req, CREDS, &chunks, None))
        })
        .await;
        assert_eq!(
            (r.0, r.1.as_str()),
            (400, "IncompleteBody"),
            "cut, streamed {streamed}"
        );
        let r = send(
            &url("cut"),
            UNSIGNED_TRAILER,
            d.len(),
            Some("x-amz-checksum-crc32"),
            streamed,
            |_| cut(unsigned_body(&chunks, &d)),
        )
        .await;
        assert_eq!(
            (r.0, r.1.as_str()),
            (400, "IncompleteBody"),
            "cut unsigned, streamed {streamed}"
        );
    }
    let r = send(&url("tampered"), SIGNED, d.len(), None, false, |req| {
        let mut b = signed_chunks(req, CREDS, &chunks, None);
        b[70_000] ^= 0x20;
        b
    })
    .await;
    assert_eq!((r.0, r.1.as_str()), (403, "SignatureDoesNotMatch"));
    for declared in [d.len() - 1, d.len() + 1] {
        let r = send(&url("length"), SIGNED, declared, None, false, |req| {
            signed_chunks(req, CREDS, &chunks, None)
        })
        .await;
        assert!(r.0 == 400, "declared {declared}: {r:?}");
    }
    let other = Creds {
        key: "fencegate",
        secret: "another-secret",
    };
    let r = send(&url("forged"), SIGNED, d.len(), None, false, |req| {
        signed_chunks(req, other, &chunks, None)
    })
    .await;
    assert_eq!((r.0, r.1.as_str()), (403, "SignatureDoesNotMatch"));
    let r = send(
        &url("bad-crc"),
        UNSIGNED_TRAILER,
        d.len(),
        Some("x-amz-checksum-crc32"),
        false,
        |_| unsigned_body(&chunks, b"other bytes"),
    )
    .await;
    assert_eq!((r.0, r.1.as_str()), (400, "BadDigest"));
    for key in ["cut", "tampered", "length", "forged", "bad-crc"] {
        assert_eq!(stored(&fx, key).await, None, "{key} was stored");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_object_aws_chunked_on_fs() {
    put_object_forms(Kind::Fs).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_object_aws_chunked_on_s3() {
    put_object_forms(Kind::S3Safe).await
}

/// UploadPart in the form botocore sends over TLS and Arrow always: no Content-Length, the
/// length in `x-amz-decoded-content-length`, a CRC trailer (it answered 411).
async fn upload_parts(kind: Kind) {
    let fx = Fx::start(kind).await;
    let c = fx.client();
    let up = c
        .create_multipart_upload()
        .bucket("bkt")
        .key("mp")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap().to_string();
    let whole = data(super::fixture::PART + 300_000, 7);
    let parts: [&[u8]; 2] = [
        &whole[..super::fixture::PART],
        &whole[super::fixture::PART..],
    ];
    let mut done = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let n = i + 1;
        let url = fx
            .server
            .url(&format!("/bkt/mp?partNumber={n}&uploadId={id}"));
        let pieces: Vec<&[u8]> = part.chunks(65_536).collect();
        let (status, text) = if n == 1 {
            send(
                &url,
                UNSIGNED_TRAILER,
                part.len(),
                Some("x-amz-checksum-crc32"),
                true,
                |_| unsigned_body(&pieces, part),
            )
            .await
        } else {
            send(&url, SIGNED, part.len(), None, true, |req| {
                signed_chunks(req, CREDS, &pieces, None)
            })
            .await
        };
        assert_eq!(status, 200, "part {n}: {text}");
        done.push(n as i32);
    }
    // A part cut short at a chunk boundary is refused, and the upload's part 2 is the good one.
    let url = fx
        .server
        .url(&format!("/bkt/mp?partNumber=2&uploadId={id}"));
    let pieces: Vec<&[u8]> = parts[1].chunks(65_536).collect();
    let r = send(&url, SIGNED, parts[1].len(), None, true, |req| {
        let b = signed_chunks(req, CREDS, &pieces, None);
        let first = b.windows(2).position(|w| w == b"\r\n").unwrap() + 2 + 65_536 + 2;
        b[..first].to_vec()
    })
    .await;
    assert_eq!((r.0, r.1.as_str()), (400, "IncompleteBody"));
    let listed = c
        .list_parts()
        .bucket("bkt")
        .key("mp")
        .upload_id(&id)
        .send()
        .await
        .unwrap();
    let mut completed = Vec::new();
    for p in listed.parts() {
        completed.push(
            aws_sdk_s3::types::CompletedPart::builder()
                .part_number(p.part_number().unwrap())
                .e_tag(p.e_tag().unwrap())
                .build(),
        );
    }
    assert_eq!(completed.len(), 2);
    assert_eq!(listed.parts()[1].size(), Some(parts[1].len() as i64));
    c.complete_multipart_upload()
        .bucket("bkt")
        .key("mp")
        .upload_id(&id)
        .multipart_upload(
            aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .set_parts(Some(completed))
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(stored(&fx, "mp").await.as_deref(), Some(&whole[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_part_aws_chunked_on_fs() {
    upload_parts(Kind::Fs).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_part_aws_chunked_on_s3() {
    upload_parts(Kind::S3Safe).await
}

/// aws-chunked is taken for PutObject and UploadPart only: any other request with such a body
/// (which s3s would read whole) is refused before its body is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_requests_with_aws_chunked_bodies_are_refused() {
    let fx = Fx::start(Kind::Fs).await;
    let xml = b"<Delete><Object><Key>a</Key></Object></Delete>";
    for (method, path) in [
        ("POST", "/bkt?delete"),
        ("PUT", "/bkt/k?tagging"),
        ("PUT", "/newbucket"),
        ("POST", "/bkt/k?uploads"),
    ] {
        let http = reqwest::Client::new();
        let mut req = http
            .request(method.parse().unwrap(), fx.server.url(path))
            .header("x-amz-decoded-content-length", xml.len().to_string())
            .header("x-amz-content-sha256", UNSIGNED_TRAILER)
            .header("x-amz-trailer", "x-amz-checksum-crc32")
            .body(unsigned_body(&[xml], xml))
            .build()
            .unwrap();
        sign_payload(&mut req, CREDS, UNSIGNED_TRAILER);
        let resp = http.execute(req).await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        assert_eq!(status, 400, "{method} {path}: {text}");
        assert!(text.contains("InvalidRequest"), "{method} {path}: {text}");
    }
    assert!(fx
        .client()
        .head_bucket()
        .bucket("newbucket")
        .send()
        .await
        .is_err());
    // The ECDSA payloads are not decoded: refused, not passed on.
    let r = send(
        &fx.server.url("/bkt/ecdsa"),
        "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD",
        2,
        None,
        false,
        |_| b"2\r\nab\r\n0\r\n\r\n".to_vec(),
    )
    .await;
    assert_eq!((r.0, r.1.as_str()), (400, "InvalidRequest"));
}

/// boto3, the aws cli and the other clients of tests/e2e/tls_clients.py, and fsspec
/// (tests/e2e/fsspec_client.py), over https with their default settings: 20 MB multipart
/// uploads whose parts go aws-chunked without a Content-Length (411 before), small aws-chunked
/// puts, a stale one refused (409 by header, 403 StaleFencingToken through an old lease's
/// credentials), keys under .fencegate-probe/ refused 400; on fs, on s3 over ministack and on
/// azure over Azurite.
async fn tls_clients(kind: Kind) {
    let root = env!("CARGO_MANIFEST_DIR");
    let python = format!("{root}/.venv/bin/python");
    assert!(
        std::path::Path::new(root).join(".venv/bin/aws").exists(),
        "the aws cli is missing: run scripts/test, which installs it"
    );
    let fsspec = format!("{root}/.venv-fsspec/bin/python3");
    assert!(
        std::path::Path::new(&fsspec).exists(),
        "s3fs (fsspec) is missing: run scripts/test, which installs it in .venv-fsspec"
    );
    let fx = Fx::start_configured(kind, &[("req", "")], true).await;
    let endpoint = format!("https://localhost:{}", fx.server.addr.port());
    let client = |python: &str, script: &str| {
        let mut cmd = tokio::process::Command::new(python);
        cmd.arg(format!("{root}/tests/e2e/{script}"))
            .env("FG_ENDPOINT", &endpoint)
            .env("FG_FENCED_BUCKET", "req")
            .env("AWS_CA_BUNDLE", fx.ca_file())
            .env("AWS_ACCESS_KEY_ID", CREDS.key)
            .env("AWS_SECRET_ACCESS_KEY", CREDS.secret)
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
            .env_remove("AWS_REQUEST_CHECKSUM_CALCULATION")
            .env_remove("AWS_RESPONSE_CHECKSUM_VALIDATION");
        cmd
    };
    super::fixture::run_script(
        &mut client(&python, "tls_clients.py"),
        "every tls client passed",
    )
    .await;
    // fsspec's s3fs pins its own botocore (through aiobotocore), so it runs from its own venv.
    super::fixture::run_script(&mut client(&fsspec, "fsspec_client.py"), "fsspec passed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_and_aws_cli_over_tls_on_fs() {
    tls_clients(Kind::Fs).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_and_aws_cli_over_tls_on_s3() {
    tls_clients(Kind::S3Safe).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_and_aws_cli_over_tls_on_azure() {
    tls_clients(Kind::Azure).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_and_aws_cli_over_tls_on_gcs() {
    tls_clients(Kind::Gcs).await
}

/// `x-amz-content-sha256` sent twice, a line s3s drops (not UTF-8) first, would make
/// fencegate take the body for plain while s3s decoded it as aws-chunked itself (whole chunks in
/// memory, a cut-short body stored as complete). Every header that steers the body or the
/// signature is read one way only: sent twice, or not ASCII, it is refused before anything
/// reads the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steering_header_sent_twice_is_refused() {
    let fx = Fx::start(Kind::Fs).await;
    let http = reqwest::Client::new();
    let d = data(150, 3);
    let mut req = http
        .put(fx.server.url("/bkt/dup"))
        .header("x-amz-decoded-content-length", "150")
        .header("x-amz-content-sha256", SIGNED)
        .body(Vec::new())
        .build()
        .unwrap();
    sign_payload(&mut req, CREDS, SIGNED);
    // Only the first chunk, signed: cut short before the second and the final one.
    let whole = signed_chunks(&req, CREDS, &[&d[..100], &d[100..]], None);
    let first = whole.windows(2).position(|w| w == b"\r\n").unwrap() + 2 + 100 + 2;
    *req.body_mut() = Some(whole[..first].to_vec().into());
    let headers = req.headers_mut();
    let valid = headers.remove("x-amz-content-sha256").unwrap();
    headers.append(
        "x-amz-content-sha256",
        reqwest::header::HeaderValue::from_bytes(b"\xff").unwrap(),
    );
    headers.append("x-amz-content-sha256", valid);
    let resp = http.execute(req).await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("more than once"), "{text}");
    assert_eq!(stored(&fx, "dup").await, None);
}
