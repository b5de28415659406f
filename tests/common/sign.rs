//! SigV4 signing of native-API requests with `aws-sigv4`, the AWS SDKs' own signer: an
//! independent implementation from the verifier in `src/auth/sigv4.rs`.

use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use std::time::SystemTime;

/// An access key and its secret.
#[derive(Debug, Clone, Copy)]
pub struct Creds {
    pub key: &'static str,
    pub secret: &'static str,
}

/// How the body is covered: as S3 clients do (`x-amz-content-sha256` with its hash), or as
/// curl does (no header, the body's hash only inside the signature).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyHash {
    Header,
    SignatureOnly,
}

/// Signs `req` (its body must be in memory) for `creds` at `time`.
pub fn sign_at(req: &mut reqwest::Request, creds: Creds, time: SystemTime, mode: BodyHash) {
    sign_as(req, creds, time, mode, None)
}

/// Signs `req` for `creds` now with `payload` as its `x-amz-content-sha256` (which the request
/// must carry), as aws-chunked uploads do (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`).
pub fn sign_payload(req: &mut reqwest::Request, creds: Creds, payload: &str) {
    sign_as(
        req,
        creds,
        SystemTime::now(),
        BodyHash::Header,
        Some(payload),
    )
}

fn sign_as(
    req: &mut reqwest::Request,
    creds: Creds,
    time: SystemTime,
    mode: BodyHash,
    payload: Option<&str>,
) {
    let identity =
        aws_credential_types::Credentials::new(creds.key, creds.secret, None, None, "test").into();
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.payload_checksum_kind = match mode {
        BodyHash::Header => PayloadChecksumKind::XAmzSha256,
        BodyHash::SignatureOnly => PayloadChecksumKind::NoHeader,
    };
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("s3")
        .time(time)
        .settings(settings)
        .build()
        .unwrap()
        .into();
    // A streamed body cannot be hashed before it is sent: it goes UNSIGNED-PAYLOAD.
    let streamed = req.body().is_some_and(|b| b.as_bytes().is_none());
    let body = req
        .body()
        .and_then(|b| b.as_bytes())
        .unwrap_or(&[])
        .to_vec();
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap().to_string()))
        .collect();
    let signable = SignableRequest::new(
        req.method().as_str(),
        req.url().as_str(),
        headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        if let Some(p) = payload {
            SignableBody::Precomputed(p.to_string())
        } else if streamed {
            SignableBody::UnsignedPayload
        } else {
            SignableBody::Bytes(&body)
        },
    )
    .unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    for (name, value) in instructions.headers() {
        req.headers_mut().insert(
            reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            reqwest::header::HeaderValue::from_str(value).unwrap(),
        );
    }
}

/// A presigned GET URL for `url`, valid for `expires`.
pub fn presign(url: &str, creds: Creds, expires: std::time::Duration) -> String {
    presign_method("GET", url, creds, expires)
}

/// A presigned URL for `method` on `url`, valid for `expires`.
pub fn presign_method(
    method: &str,
    url: &str,
    creds: Creds,
    expires: std::time::Duration,
) -> String {
    let identity =
        aws_credential_types::Credentials::new(creds.key, creds.secret, None, None, "test").into();
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.signature_location = aws_sigv4::http_request::SignatureLocation::QueryParams;
    settings.expires_in = Some(expires);
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("s3")
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .unwrap()
        .into();
    let signable = SignableRequest::new(
        method,
        url,
        std::iter::empty(),
        SignableBody::UnsignedPayload,
    )
    .unwrap();
    let (instructions, _) = sign(signable, &params).unwrap().into_parts();
    let mut out = reqwest::Url::parse(url).unwrap();
    for (k, v) in instructions.params() {
        out.query_pairs_mut().append_pair(k, v);
    }
    out.to_string()
}

/// Builds `req`, signed for `creds` when given, and sends it.
pub async fn send(
    c: &reqwest::Client,
    req: reqwest::RequestBuilder,
    creds: Option<Creds>,
) -> reqwest::Response {
    let mut req = req.build().unwrap();
    if let Some(creds) = creds {
        sign_at(&mut req, creds, SystemTime::now(), BodyHash::Header);
    }
    c.execute(req).await.unwrap()
}

/// Sends `req` (signed for `creds` when given); the status and the body as JSON (or as a
/// JSON string when it is not JSON).
pub async fn send_json(
    c: &reqwest::Client,
    req: reqwest::RequestBuilder,
    creds: Option<Creds>,
) -> (u16, serde_json::Value) {
    let resp = send(c, req, creds).await;
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// The lease-bound S3 credentials of a grant (the acquire's answer). Leaked, as tests keep
/// their credentials for the whole run.
pub fn lease_creds(grant: &serde_json::Value) -> Creds {
    let leak = |field: &str| -> &'static str {
        Box::leak(
            grant["s3_credentials"][field]
                .as_str()
                .unwrap_or_else(|| panic!("no s3_credentials.{field} in {grant}"))
                .to_string()
                .into_boxed_str(),
        )
    };
    Creds {
        key: leak("access_key_id"),
        secret: leak("secret_access_key"),
    }
}

/// The head of a raw `PUT path` of `len` body bytes, signed for `creds` over the body's own
/// hash (as curl signs): fencegate must read the whole body before it can check the signature.
/// The hash signed is that of an empty body, so the signature never matches a real body.
pub fn body_hash_signed_head(
    addr: std::net::SocketAddr,
    path: &str,
    creds: Creds,
    len: usize,
) -> String {
    let mut req = reqwest::Client::new()
        .put(format!("http://{addr}{path}"))
        .body("")
        .build()
        .unwrap();
    sign_at(&mut req, creds, SystemTime::now(), BodyHash::SignatureOnly);
    let header = |name: &str| req.headers()[name].to_str().unwrap().to_string();
    format!(
        "PUT {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {}\r\nx-amz-date: {}\r\nContent-Length: {len}\r\n\r\n",
        header("authorization"),
        header("x-amz-date"),
    )
}

/// The head of a raw `PUT path` of `len` body bytes, signed for `creds` with
/// `x-amz-content-sha256: UNSIGNED-PAYLOAD`: its signature is checked before the body, which
/// then streams to a handler.
pub fn unsigned_payload_head(
    addr: std::net::SocketAddr,
    path: &str,
    creds: Creds,
    len: usize,
) -> String {
    let mut req = reqwest::Client::new()
        .put(format!("http://{addr}{path}"))
        .header("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
        .body("")
        .build()
        .unwrap();
    sign_payload(&mut req, creds, "UNSIGNED-PAYLOAD");
    let header = |name: &str| req.headers()[name].to_str().unwrap().to_string();
    format!(
        "PUT {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {}\r\nx-amz-date: {}\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\nContent-Length: {len}\r\n\r\n",
        header("authorization"),
        header("x-amz-date"),
    )
}

/// The aws-chunked body of a request signed by [`sign_payload`] with
/// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD` (or `-TRAILER`, when `trailer` is a `name:value` line):
/// each chunk signed in a chain from the request's own signature, as the AWS SDKs for Java and
/// Go write it. Written out here from AWS's documentation, apart from fencegate's decoder.
pub fn signed_chunks(
    req: &reqwest::Request,
    creds: Creds,
    chunks: &[&[u8]],
    trailer: Option<&str>,
) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let auth = req.headers()["authorization"].to_str().unwrap();
    let mut previous = auth.rsplit_once("Signature=").unwrap().1.to_string();
    let amz_date = req.headers()["x-amz-date"].to_str().unwrap().to_string();
    let format = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let when: SystemTime = time::PrimitiveDateTime::parse(&amz_date, format)
        .unwrap()
        .assume_utc()
        .into();
    let key = v4::generate_signing_key(creds.secret, when, "us-east-1", "s3");
    let scope = format!("{}/us-east-1/s3/aws4_request", &amz_date[..8]);
    let empty = hex::encode(Sha256::digest(b""));
    let mut body = Vec::new();
    for chunk in chunks.iter().copied().chain([&b""[..]]) {
        let to_sign = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{amz_date}\n{scope}\n{previous}\n{empty}\n{}",
            hex::encode(Sha256::digest(chunk))
        );
        previous = v4::calculate_signature(key.as_ref(), to_sign.as_bytes());
        body.extend_from_slice(
            format!("{:x};chunk-signature={previous}\r\n", chunk.len()).as_bytes(),
        );
        body.extend_from_slice(chunk);
        if !chunk.is_empty() || trailer.is_none() {
            body.extend_from_slice(b"\r\n");
        }
    }
    if let Some(line) = trailer {
        let canonical = format!("{}\n", line.replace(": ", ":"));
        let to_sign = format!(
            "AWS4-HMAC-SHA256-TRAILER\n{amz_date}\n{scope}\n{previous}\n{}",
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
        let signature = v4::calculate_signature(key.as_ref(), to_sign.as_bytes());
        body.extend_from_slice(
            format!("{line}\r\nx-amz-trailer-signature:{signature}\r\n\r\n").as_bytes(),
        );
    }
    body
}
