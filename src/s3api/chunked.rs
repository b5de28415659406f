//! Request bodies s3s must not read itself.
//!
//! **aws-chunked** (`x-amz-content-sha256: STREAMING-*`, what AWS SDKs send over TLS and Arrow
//! always): s3s 0.14.1 reads each chunk whole before checking it (a chunk may declare 4 GiB),
//! and takes a body cut short at a chunk boundary as complete. So fencegate decodes it itself
//! (`http::aws_chunked`): [`set_aside`] takes the raw body of a PutObject or UploadPart out of
//! the request before s3s sees it (s3s checks the seed signature on the headers alone and is
//! handed an empty body), and [`request_body`] decodes it in the handler, after the signature
//! and the access check. Any other request with such a body is refused: AWS SDKs send
//! aws-chunked only for those two, and s3s would read any other whole.
//!
//! **PutObject with `Transfer-Encoding: chunked` and no `Content-Length`** (`curl -T -`,
//! generator bodies, streaming writers), accepted as RGW, moto and ministack accept it. s3s
//! refuses a header-signed `UNSIGNED-PAYLOAD` request without a length (411) after it has
//! checked the signature, on the header's presence alone; fencegate never needed the length
//! (the body is bounded by the object size limit as it streams, and the s3 backend spools it
//! in parts). So such a request reaches s3s with a stand-in `Content-Length` that nothing reads
//! as a length, and PutObject streams the body as it comes. A stale token is still refused
//! before a byte is read (the gate's early check). A body whose SHA-256 is signed needs its
//! true length in s3s and keeps the 411; UploadPart needs its length, as on AWS.

use crate::backend::{BodyError, ByteStream};
use crate::http::aws_chunked::{self, Payload, Signing, Trailers};
use futures::StreamExt;
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::HeaderValue;
use s3s::{S3Error, S3ErrorCode, S3Result};
use std::sync::{Arc, Mutex};

/// Stands in for the absent Content-Length: larger than any body fencegate takes, so a reader
/// that took it for a bound would never cut a body short.
const STAND_IN: i64 = i64::MAX;

/// Gives a chunked PutObject without a length the stand-in (see the module header).
pub fn stand_in_length(parts: &mut http::request::Parts) {
    let h = &parts.headers;
    let chunked = h
        .get_all(TRANSFER_ENCODING)
        .iter()
        .any(|v| v.as_bytes().to_ascii_lowercase().ends_with(b"chunked"));
    let unsigned = h
        .get("x-amz-content-sha256")
        .is_some_and(|v| v.as_bytes() == b"UNSIGNED-PAYLOAD");
    let part = super::refusals::query_names(&parts.uri)
        .iter()
        .any(|n| matches!(*n, "uploadId" | "partNumber"));
    if parts.method == http::Method::PUT
        && chunked
        && unsigned
        && !part
        && !h.contains_key(CONTENT_LENGTH)
        && !h.contains_key("x-amz-decoded-content-length")
        && !h.contains_key("x-amz-copy-source")
    {
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(STAND_IN));
    }
}

/// An aws-chunked body taken out of its request before s3s ([`set_aside`]), for the handler.
#[derive(Clone)]
pub struct SetAside(Arc<Mutex<Option<Raw>>>);

struct Raw {
    body: axum::body::Body,
    payload: Payload,
    declared: u64,
}

/// The query parameters a PutObject or UploadPart may carry besides its own.
const OBJECT_PUT_PARAMS: [&str; 3] = ["uploadId", "partNumber", "x-id"];

/// Takes an aws-chunked body out of its request (see the module header), or refuses the
/// request where fencegate does not take one; any other body is handed back as it was.
pub fn set_aside(
    parts: &mut http::request::Parts,
    body: axum::body::Body,
) -> Result<axum::body::Body, (http::StatusCode, &'static str, String)> {
    let bad = |code, message: String| Err((http::StatusCode::BAD_REQUEST, code, message));
    if let Some(problem) = steering_header_problem(&parts.headers) {
        return bad("InvalidRequest", problem);
    }
    let payload = match parts
        .headers
        .get("x-amz-content-sha256")
        .map(|v| Payload::of(v.as_bytes()))
    {
        None | Some(None) => return Ok(body),
        Some(Some(Err(message))) => return bad("InvalidRequest", message),
        Some(Some(Ok(p))) => p,
    };
    let names = super::refusals::query_names(&parts.uri);
    let part = names.contains(&"uploadId");
    let object_put = parts.method == http::Method::PUT
        && !parts.headers.contains_key("x-amz-copy-source")
        && names.iter().all(|n| OBJECT_PUT_PARAMS.contains(n))
        && part == names.contains(&"partNumber");
    if !object_put {
        return bad(
            "InvalidRequest",
            "an aws-chunked body (x-amz-content-sha256: STREAMING-*) is taken for PutObject and UploadPart only; send this request's body plain, with a Content-Length".into(),
        );
    }
    // Sent once at most: steering_header_problem refused a second line above.
    let declared = match parts.headers.get("x-amz-decoded-content-length") {
        Some(v) => match std::str::from_utf8(v.as_bytes())
            .ok()
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|t| t.parse::<u64>().ok())
        {
            Some(n) => n,
            None => {
                return bad(
                    "InvalidArgument",
                    "x-amz-decoded-content-length is not a number of bytes".into(),
                )
            }
        },
        None => {
            return Err((
                http::StatusCode::LENGTH_REQUIRED,
                "MissingContentLength",
                "an aws-chunked body needs x-amz-decoded-content-length, the number of bytes it decodes to".into(),
            ))
        }
    };
    parts
        .extensions
        .insert(SetAside(Arc::new(Mutex::new(Some(Raw {
            body,
            payload,
            declared,
        })))));
    Ok(axum::body::Body::empty())
}

/// The headers that decide how a request's body is read and what its signature covers. s3s
/// reads each as text and drops a value that is not UTF-8, so a second line of one, with a
/// first line s3s drops, would have s3s and fencegate read different requests (s3s decoding an
/// aws-chunked body fencegate took for plain).
const STEERING: [&str; 5] = [
    "x-amz-content-sha256",
    "x-amz-decoded-content-length",
    "x-amz-trailer",
    "x-amz-date",
    "authorization",
];

/// Why the request's steering headers cannot be read one way only, if they cannot: one sent
/// twice, or one that is not visible ASCII.
pub fn steering_header_problem(headers: &http::HeaderMap) -> Option<String> {
    STEERING.iter().find_map(|name| {
        let mut values = headers.get_all(*name).iter();
        let first = values.next()?;
        if values.next().is_some() {
            return Some(format!("{name} is sent more than once; send it once"));
        }
        first
            .to_str()
            .is_err()
            .then(|| format!("{name} is not visible ASCII; send it as AWS documents it"))
    })
}

/// Was this request's body set aside (so that s3s saw none)?
pub fn was_set_aside(extensions: &http::Extensions) -> bool {
    extensions.get::<SetAside>().is_some()
}

/// A handler's request body: the decoded aws-chunked one where [`set_aside`] took it, else
/// what s3s hands over.
pub struct RequestBody {
    pub stream: ByteStream,
    /// The aws-chunked trailer (its checksum), once read.
    pub trailers: Option<Trailers>,
    /// The length an aws-chunked body declared it decodes to.
    pub length: Option<u64>,
}

/// What of a request [`request_body`] reads: what s3s checked the signature of.
#[derive(Clone, Copy)]
pub struct Signed<'a> {
    pub extensions: &'a http::Extensions,
    pub headers: &'a http::HeaderMap,
    pub credentials: Option<&'a s3s::auth::Credentials>,
}

/// The body of a PutObject or UploadPart (see [`RequestBody`]). `limit`: the largest body
/// taken; an aws-chunked one declared larger is refused before a byte is read.
pub fn request_body(
    req: Signed<'_>,
    blob: Option<s3s::dto::StreamingBlob>,
    limit: u64,
) -> S3Result<RequestBody> {
    let raw = req
        .extensions
        .get::<SetAside>()
        .and_then(|s| s.0.lock().unwrap_or_else(|p| p.into_inner()).take());
    let Some(raw) = raw else {
        let stream = match blob {
            None => futures::stream::empty().boxed(),
            Some(blob) => blob
                .map(|r| r.map_err(|e| BodyError::Broken(e.to_string())))
                .boxed(),
        };
        return Ok(RequestBody {
            stream,
            trailers: None,
            length: None,
        });
    };
    if raw.declared > limit {
        let mut err = S3Error::with_message(
            S3ErrorCode::EntityTooLarge,
            format!(
                "x-amz-decoded-content-length {} is over this gateway's limit of {limit} bytes per body (limits.max_body_bytes)",
                raw.declared
            ),
        );
        err.set_status_code(http::StatusCode::PAYLOAD_TOO_LARGE);
        return Err(err);
    }
    let signing = if raw.payload.signed() {
        Some(signing(req)?)
    } else {
        None
    };
    let stream = raw
        .body
        .into_data_stream()
        .map(|r| r.map_err(|e| BodyError::Broken(e.to_string())))
        .boxed();
    let (stream, trailers) = aws_chunked::decode(stream, raw.payload, signing, raw.declared);
    Ok(RequestBody {
        stream,
        trailers: raw.payload.has_trailer().then_some(trailers),
        length: Some(raw.declared),
    })
}

/// The chain of chunk signatures of a signed aws-chunked request: its seed is the signature
/// of the request's one SigV4 `Authorization` header, which s3s has checked.
fn signing(req: Signed<'_>) -> S3Result<Signing> {
    let denied = |why: &str| {
        S3Error::with_message(
            S3ErrorCode::AccessDenied,
            format!("a signed aws-chunked body needs a SigV4 Authorization header: {why}"),
        )
    };
    let Some(credentials) = req.credentials else {
        return Err(denied("the request is not signed"));
    };
    // One line at most: set_aside refused a request that sent it twice.
    let auth = req
        .headers
        .get(http::header::AUTHORIZATION)
        .ok_or_else(|| denied("there is none"))?;
    let auth = auth.to_str().map_err(|_| denied("it is not ASCII"))?;
    let rest = auth
        .strip_prefix("AWS4-HMAC-SHA256")
        .ok_or_else(|| denied("it is not AWS4-HMAC-SHA256"))?;
    let field = |name: &str| {
        rest.split(',')
            .find_map(|p| p.trim().strip_prefix(name))
            .map(str::trim)
    };
    let credential = field("Credential=").ok_or_else(|| denied("it has no Credential"))?;
    let seed = field("Signature=").ok_or_else(|| denied("it has no Signature"))?;
    let scope: Vec<&str> = credential.split('/').collect();
    let [_, _, region, service, "aws4_request"] = scope.as_slice() else {
        return Err(denied(
            "its Credential is not KEY/DATE/REGION/SERVICE/aws4_request",
        ));
    };
    let amz_date = req
        .headers
        .get("x-amz-date")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| denied("x-amz-date is missing"))?;
    Signing::new(
        credentials.secret_key.expose(),
        amz_date,
        region,
        service,
        seed,
    )
    .map_err(|m| denied(&m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: &str, uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
        let mut b = http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    /// A steering header sent twice, or not visible ASCII, is refused before anything reads
    /// it: s3s drops a non-UTF-8 line and would read the other one alone (a junk first line
    /// of x-amz-content-sha256 would send an aws-chunked body to s3s's own decoder).
    #[test]
    fn steering_headers_are_read_one_way_only() {
        let mut twice = http::HeaderMap::new();
        twice.append(
            "x-amz-content-sha256",
            HeaderValue::from_bytes(b"\xff").unwrap(),
        );
        twice.append(
            "x-amz-content-sha256",
            HeaderValue::from_static("STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
        );
        assert!(steering_header_problem(&twice).is_some());
        for name in STEERING {
            let mut one = http::HeaderMap::new();
            one.insert(name, HeaderValue::from_bytes(b"a\xe9").unwrap());
            assert!(steering_header_problem(&one).is_some(), "{name}");
            let mut two = http::HeaderMap::new();
            two.append(name, HeaderValue::from_static("a"));
            two.append(name, HeaderValue::from_static("a"));
            assert!(steering_header_problem(&two).is_some(), "{name}");
        }
        let mut fine = http::HeaderMap::new();
        fine.insert(
            "x-amz-content-sha256",
            HeaderValue::from_static("UNSIGNED-PAYLOAD"),
        );
        fine.append("content-encoding", HeaderValue::from_static("gzip"));
        assert!(steering_header_problem(&fine).is_none());
        let mut p = parts(
            "PUT",
            "/b/k",
            &[
                ("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
                ("x-amz-decoded-content-length", "+150"),
            ],
        );
        let refused = set_aside(&mut p, axum::body::Body::empty()).unwrap_err();
        assert_eq!(refused.1, "InvalidArgument");
    }

    #[test]
    fn only_a_chunked_unsigned_put_object_gets_the_stand_in() {
        let chunked = [
            ("transfer-encoding", "chunked"),
            ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
        ];
        let mut p = parts("PUT", "/b/k", &chunked);
        stand_in_length(&mut p);
        assert_eq!(p.headers[CONTENT_LENGTH], i64::MAX.to_string().as_str());
        for mut p in [
            parts("PUT", "/b/k?partNumber=1&uploadId=x", &chunked),
            parts("POST", "/b/k", &chunked),
            parts(
                "PUT",
                "/b/k",
                &[
                    ("transfer-encoding", "chunked"),
                    ("x-amz-content-sha256", "e3b0"),
                ],
            ),
            parts(
                "PUT",
                "/b/k",
                &[
                    ("transfer-encoding", "chunked"),
                    ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
                    ("x-amz-copy-source", "/b/o"),
                ],
            ),
            parts(
                "PUT",
                "/b/k",
                &[
                    ("content-length", "3"),
                    ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
                ],
            ),
        ] {
            let before = p.headers.get(CONTENT_LENGTH).cloned();
            stand_in_length(&mut p);
            assert_eq!(
                p.headers.get(CONTENT_LENGTH).cloned(),
                before,
                "{:?}",
                p.uri
            );
        }
    }
}
