//! Reading fencegate's request headers into the gate's types: the token, the scope, the
//! conditions, the content type, user and system metadata, and the request body as a bounded
//! stream.

use crate::backend::{BodyError, ByteStream, ObjectMeta};
use crate::gate::{Conditions, EtagMatch, GateError, TokenInput, WriteRequest};
use crate::token::{parse_token, Token, TokenError};
use axum::body::Body;
use axum::http::HeaderMap;
use futures::StreamExt;
use std::collections::BTreeMap;
use std::time::Duration;

pub const FENCING_TOKEN: &str = "fencing-token";
pub const FENCING_SCOPE: &str = "fencing-scope";
pub const FENCING_SCOPE_TAKEOVER: &str = "fencing-scope-takeover";
/// The token as S3 metadata, which both surfaces honour.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
pub const META_FENCING_TOKEN: &str = "x-amz-meta-fencing-token";

/// Headers that steer the fence: a signature that does not cover them would let whoever
/// holds a signed request (a presigned URL, a captured request) change them.
pub const FENCING_HEADERS: [&str; 4] = [
    FENCING_TOKEN,
    FENCING_SCOPE,
    FENCING_SCOPE_TAKEOVER,
    META_FENCING_TOKEN,
];

/// The first fencing header in `headers` that `signed` (is this header name signed?) does not
/// cover: the one rule of both surfaces.
pub fn unsigned_fencing_header(
    headers: &HeaderMap,
    signed: impl Fn(&str) -> bool,
) -> Option<&'static str> {
    FENCING_HEADERS
        .into_iter()
        .find(|name| headers.contains_key(*name) && !signed(name))
}
const USER_META_PREFIX: &str = "x-amz-meta-";
/// S3's limit on user metadata, names and values together.
const MAX_USER_META: usize = 2048;

/// The `Fencing-Token` header: absent, malformed (or repeated), or a token.
pub fn token(headers: &HeaderMap) -> TokenInput {
    let mut values = headers.get_all(FENCING_TOKEN).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(TokenError::Repeated);
    }
    parse_token(first.as_bytes()).map(Some)
}

/// The token of a write or delete: `Fencing-Token`, or `x-amz-meta-fencing-token`, the S3
/// carrier, honoured here too so that a token sent that way is never silently dropped. Two
/// that disagree are an error, as on the S3 API.
pub fn write_token(headers: &HeaderMap) -> TokenInput {
    let header = token(headers)?;
    let mut metas = headers.get_all(META_FENCING_TOKEN).iter();
    let meta = match metas.next() {
        None => None,
        Some(_) if metas.next().is_some() => return Err(TokenError::Repeated),
        Some(v) => Some(parse_token(v.as_bytes())?),
    };
    either_token(header, meta)
}

/// The token from `Fencing-Token` and from `x-amz-meta-fencing-token`, both surfaces' rule:
/// either may carry it, and two that disagree are an error, not a choice.
pub fn either_token(header: Option<Token>, meta: Option<Token>) -> TokenInput {
    match (header, meta) {
        (Some(h), Some(m)) if h != m => Err(TokenError::Disagree {
            first: h.0,
            other: m.0,
            by: "in the Fencing-Token header",
            what: META_FENCING_TOKEN,
        }),
        (h, m) => Ok(h.or(m)),
    }
}

pub fn scope(headers: &HeaderMap) -> Result<Option<Vec<u8>>, GateError> {
    single(headers, FENCING_SCOPE)
}

/// `Fencing-Scope-Takeover`: the scope a header-scoped write takes an object over from.
pub fn scope_takeover(headers: &HeaderMap) -> Result<Option<Vec<u8>>, GateError> {
    single(headers, FENCING_SCOPE_TAKEOVER)
}

/// `Idempotency-Key`, scoped to the principal that sends it (docs/design.md, "Idempotent
/// retries"). Sent twice, it is refused: a retry must be recognisable as one.
pub fn idempotency(
    headers: &HeaderMap,
    principal: &str,
) -> Result<Option<crate::gate::Idempotency>, GateError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(GateError::InvalidIdempotencyKey(
            "the Idempotency-Key header was sent more than once".into(),
        ));
    }
    crate::gate::Idempotency::from_header(principal, first.as_bytes()).map(Some)
}

/// The one builder of a [`WriteRequest`] from a request's headers, for both surfaces: the
/// `Idempotency-Key` (kept per `principal`), `Fencing-Scope`, `Fencing-Scope-Takeover` and
/// the conditions, read in that order, then `meta`. The token and the metadata are the
/// surface's own (the S3 gateway also reads them from `x-amz-meta-*`). Three S3 requests take
/// less from their headers, as S3 defines them (DeleteObjects, CreateMultipartUpload and
/// CompleteMultipartUpload, in `s3api`).
pub fn write_request(
    headers: &HeaderMap,
    (bucket, key): (&str, &str),
    principal: &str,
    token: TokenInput,
    meta: impl FnOnce() -> Result<ObjectMeta, GateError>,
) -> Result<WriteRequest, GateError> {
    Ok(WriteRequest {
        idempotency: idempotency(headers, principal)?,
        bucket: bucket.to_string(),
        key: key.to_string(),
        token,
        scope_header: scope(headers)?,
        scope_takeover: scope_takeover(headers)?,
        conditions: conditions(headers)?,
        meta: meta()?,
    })
}

/// `Idempotent-Replayed: true` on an answer replayed from an earlier request (as Stripe does).
pub fn mark_replayed(headers: &mut HeaderMap, replayed: bool) {
    if replayed {
        headers.insert(
            IDEMPOTENT_REPLAYED,
            axum::http::HeaderValue::from_static("true"),
        );
    }
}

fn single(headers: &HeaderMap, name: &str) -> Result<Option<Vec<u8>>, GateError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next().map(|v| v.as_bytes().to_vec());
    if values.next().is_some() {
        return Err(GateError::InvalidFencingScope(format!(
            "the {name} header was sent more than once"
        )));
    }
    Ok(first)
}

/// Repeated lines of a list header are one list (RFC 9110 §5.3), so every line is judged,
/// not only the first.
fn etag_match(headers: &HeaderMap, name: &str) -> Result<Option<EtagMatch>, GateError> {
    let lines: Option<Vec<&str>> = headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().ok())
        .collect();
    let joined = match lines {
        Some(lines) if lines.is_empty() => return Ok(None),
        Some(lines) => Some(lines.join(",")),
        None => None,
    };
    joined
        .as_deref()
        .and_then(EtagMatch::parse)
        .map(Some)
        .ok_or_else(|| {
            GateError::InvalidArgument(format!(
                "{name} must be `*` or a list of quoted ETags such as \"9a0364b9e99bb480dd25e1f0284c8555\""
            ))
        })
}

pub fn conditions(headers: &HeaderMap) -> Result<Conditions, GateError> {
    Ok(Conditions {
        if_match: etag_match(headers, "if-match")?,
        if_none_match: etag_match(headers, "if-none-match")?,
        if_unchanged: None,
    })
}

/// Content type, system metadata (Cache-Control, ...) and `x-amz-meta-*` user metadata.
pub fn object_meta(headers: &HeaderMap) -> Result<ObjectMeta, GateError> {
    let mut meta = ObjectMeta {
        content_type: headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        headers: system_headers(headers).map_err(GateError::InvalidArgument)?,
        ..ObjectMeta::default()
    };
    let mut total = 0;
    for (name, value) in headers {
        if let Some(short) = name.as_str().strip_prefix(USER_META_PREFIX) {
            let value = value
                .to_str()
                .ok()
                .filter(|v| crate::backend::printable(v))
                .ok_or_else(|| {
                    GateError::InvalidArgument(format!(
                        "metadata header {name} must be printable ASCII, without tabs"
                    ))
                })?;
            total += short.len() + value.len();
            meta.user_meta.insert(short.to_string(), value.to_string());
        }
    }
    if total > MAX_USER_META {
        return Err(GateError::InvalidArgument(format!(
            "user metadata is {total} bytes; the limit is {MAX_USER_META}"
        )));
    }
    Ok(meta)
}

/// The system metadata of a write's headers, one rule for both surfaces: each header once,
/// printable, an Expires that is an HTTP date. `aws-chunked` names the transfer, not the
/// object, and is dropped from Content-Encoding as S3 drops it; a coding that only contains
/// it is refused, since stores take it for aws-chunked.
pub fn system_headers(headers: &http::HeaderMap) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for name in crate::backend::SYSTEM_HEADERS {
        let mut values = headers.get_all(name).iter();
        let Some(value) = values.next() else { continue };
        if values.next().is_some() {
            return Err(format!("{name} is sent more than once; send it once"));
        }
        let value = String::from_utf8_lossy(value.as_bytes());
        let value = value.trim();
        if !crate::backend::printable(value) {
            return Err(format!(
                "{name} must be printable ASCII without tabs or other control characters"
            ));
        }
        let value = match name {
            "content-encoding" => {
                let mut kept = Vec::new();
                for coding in value.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                    let lower = coding.to_ascii_lowercase();
                    if lower == "aws-chunked" {
                        continue;
                    }
                    if lower.contains("aws-chunked") {
                        return Err(format!(
                            "Content-Encoding {coding:?} is not a content coding; send aws-chunked for an aws-chunked body, or the object's own coding"
                        ));
                    }
                    kept.push(coding);
                }
                // Kept byte for byte unless aws-chunked had to come out.
                if kept.len() == value.split(',').filter(|c| !c.trim().is_empty()).count() {
                    value.to_string()
                } else {
                    kept.join(", ")
                }
            }
            "expires" if httpdate::parse_http_date(value).is_err() => {
                return Err(format!(
                "Expires {value:?} is not an HTTP date such as \"Wed, 21 Oct 2026 07:28:00 GMT\""
            ))
            }
            _ => value.to_string(),
        };
        if !value.is_empty() {
            out.insert(name.to_string(), value);
        }
    }
    Ok(out)
}

/// The request body as a stream that stops at `limit` bytes and at `idle` without data.
pub fn body_stream(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    idle: Duration,
) -> Result<ByteStream, GateError> {
    let declared = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(BodyError::TooLarge { limit }.into());
    }
    Ok(bound(
        body.into_data_stream().map(|r| {
            r.map_err(|e| match super::body::body_mismatch(e) {
                Ok(m) => BodyError::Unauthenticated {
                    status: m.status,
                    code: m.code,
                    message: m.message,
                },
                Err(e) => BodyError::Broken(e.to_string()),
            })
        }),
        limit,
        idle,
    ))
}

/// A body stream that stops at `limit` bytes and after `idle` without data (slowloris guard).
pub fn bound<S>(inner: S, limit: u64, idle: Duration) -> ByteStream
where
    S: futures::Stream<Item = Result<bytes::Bytes, BodyError>> + Send + 'static,
{
    let secs = idle.as_secs();
    let stream = futures::stream::unfold(
        (Box::pin(inner), 0u64, false),
        move |(mut inner, seen, done)| async move {
            if done {
                return None;
            }
            match tokio::time::timeout(idle, inner.next()).await {
                Err(_) => Some((Err(BodyError::Idle { secs }), (inner, seen, true))),
                Ok(None) => None,
                Ok(Some(Err(e))) => Some((Err(e), (inner, seen, true))),
                Ok(Some(Ok(chunk))) => {
                    let seen = seen + chunk.len() as u64;
                    if seen > limit {
                        Some((Err(BodyError::TooLarge { limit }), (inner, seen, true)))
                    } else {
                        Some((Ok(chunk), (inner, seen, false)))
                    }
                }
            }
        },
    );
    Box::pin(stream)
}
