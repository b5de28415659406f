//! Translations between S3 shapes and the gate's: errors to S3 XML errors (with
//! `Fencing-Token-Highest`), the token's carriers, user metadata, ETags, times and bodies.

use crate::backend::TOKEN_META;
use crate::backend::{BodyError, ByteStream, ObjectInfo, ObjectMeta};
use crate::gate::{GateError, TokenInput};
use crate::http::headers;
use crate::token::{parse_token, Token, TokenError};
use futures::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode};
use s3s::dto::{ETag, Metadata, StreamingBlob, Timestamp};
use s3s::{S3Error, S3ErrorCode, S3Result};
use std::time::{Duration, UNIX_EPOCH};

/// A gate error as an S3 error: the code and status of the README's error table, the message
/// saying what to do.
pub fn s3_error(e: GateError) -> S3Error {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    if status.is_server_error() {
        tracing::warn!(code = e.code(), error = %e, "request failed");
    } else {
        tracing::debug!(code = e.code(), error = %e, "request refused");
    }
    let code = match &e {
        GateError::InvalidKey { s3_code, .. } => s3_code,
        _ => e.code(),
    };
    let code = match code {
        "NoSuchKey" => S3ErrorCode::NoSuchKey,
        "NoSuchBucket" => S3ErrorCode::NoSuchBucket,
        "NoSuchUpload" => S3ErrorCode::NoSuchUpload,
        "PreconditionFailed" => S3ErrorCode::PreconditionFailed,
        "NotImplemented" => S3ErrorCode::NotImplemented,
        other => S3ErrorCode::from_bytes(other.as_bytes()).unwrap_or(S3ErrorCode::InvalidRequest),
    };
    let mut err = S3Error::with_message(code, e.to_string());
    err.set_status_code(status);
    let mut extra = HeaderMap::new();
    if let Some(h) = e.highest() {
        extra.insert("fencing-token-highest", HeaderValue::from(h));
    }
    if let Some(secs) = e.retry_after() {
        extra.insert("retry-after", HeaderValue::from(secs));
    }
    if !extra.is_empty() {
        err.set_headers(extra);
    }
    err
}

pub fn invalid(code: S3ErrorCode, message: impl Into<String>) -> S3Error {
    let mut err = S3Error::with_message(code, message.into());
    err.set_status_code(StatusCode::BAD_REQUEST);
    err
}

/// The token from its carriers: the `Fencing-Token` header, `x-amz-meta-fencing-token`, and
/// lease-bound credentials (`lease`). Two that disagree are an error, not a choice.
pub fn token(headers: &HeaderMap, metadata: Option<&Metadata>, lease: Option<u64>) -> TokenInput {
    let header = headers::token(headers)?;
    let meta = metadata
        .and_then(|m| m.get(TOKEN_META))
        .map(|v| parse_token(v.as_bytes()))
        .transpose()?;
    match (headers::either_token(header, meta)?, lease) {
        (Some(t), Some(l)) if t.0 != l => Err(TokenError::Disagree {
            first: l,
            other: t.0,
            by: "by the lease these credentials belong to",
            what: "the request",
        }),
        (t, l) => Ok(t.or(l.map(Token))),
    }
}

/// Metadata to store: the system metadata of the request's headers, and the user's, all but
/// the token, which the gate records itself.
pub fn object_meta(
    content_type: Option<String>,
    metadata: Option<&Metadata>,
    headers: &http::HeaderMap,
) -> Result<ObjectMeta, S3Error> {
    let user_meta: std::collections::BTreeMap<String, String> = metadata
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != TOKEN_META)
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect();
    if let Some((name, _)) = user_meta
        .iter()
        .find(|(_, v)| v.chars().any(char::is_control))
    {
        return Err(invalid(
            S3ErrorCode::InvalidArgument,
            format!(
                "x-amz-meta-{name} has a tab or another control character; send printable text"
            ),
        ));
    }
    let size: usize = user_meta.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > 2048 {
        return Err(invalid(
            S3ErrorCode::MetadataTooLarge,
            "user metadata may be at most 2 KB (names and values together)",
        ));
    }
    Ok(ObjectMeta {
        content_type,
        user_meta,
        token: None,
        headers: headers::system_headers(headers)
            .map_err(|m| invalid(S3ErrorCode::InvalidArgument, m))?,
        tags: super::tags::from_headers(headers)?,
        ..Default::default()
    })
}

/// Metadata to answer with: the user's, plus the token that wrote the object.
pub fn metadata_of(meta: &ObjectMeta) -> Option<Metadata> {
    let mut out: Metadata = meta
        .user_meta
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(t) = meta.token {
        out.insert(TOKEN_META.to_string(), t.to_string());
    }
    (!out.is_empty()).then_some(out)
}

/// The stored Expires header, if it is an HTTP date (S3 answers nothing for one that is not).
pub fn expires(meta: &ObjectMeta) -> Option<Timestamp> {
    let text = meta.headers.get("expires")?;
    Timestamp::parse(s3s::dto::TimestampFormat::HttpDate, text).ok()
}

pub fn etag(quoted: &str) -> ETag {
    ETag::Strong(quoted.trim_matches('"').to_string())
}

pub fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms))
}

pub fn millis(t: &Timestamp) -> u64 {
    let t: time::OffsetDateTime = t.clone().into();
    (t.unix_timestamp_nanos() / 1_000_000).max(0) as u64
}

/// A PUT body, bounded by size and idle time, and checked against every digest the request
/// declared ([`crate::http::digests`]).
pub fn body(
    source: ByteStream,
    limit: u64,
    idle: Duration,
    declared: crate::http::digests::Declared,
) -> S3Result<ByteStream> {
    let body = headers::bound(source, limit, idle);
    Ok(crate::http::digests::verify(body, declared))
}

/// An object's body for the client.
pub fn blob(stream: ByteStream) -> StreamingBlob {
    StreamingBlob::wrap(SyncStream(std::sync::Mutex::new(stream)))
}

/// `s3s` wants a Sync body stream; a Mutex makes it so, and `get_mut` never locks.
struct SyncStream(std::sync::Mutex<ByteStream>);

impl futures::Stream for SyncStream {
    type Item = Result<bytes::Bytes, BodyError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        match self.0.get_mut() {
            Ok(s) => s.poll_next_unpin(cx),
            Err(poisoned) => poisoned.into_inner().poll_next_unpin(cx),
        }
    }
}

/// The ETag conditions of a request, judged against an object (S3's rules for GET and HEAD:
/// If-Match / If-Unmodified-Since fail with 412, If-None-Match / If-Modified-Since with 304).
pub struct ReadConditions<'a> {
    pub if_match: Option<&'a s3s::dto::ETagCondition>,
    pub if_none_match: Option<&'a s3s::dto::ETagCondition>,
    pub if_modified_since: Option<&'a Timestamp>,
    pub if_unmodified_since: Option<&'a Timestamp>,
}

fn condition_matches(c: &s3s::dto::ETagCondition, etag: &str) -> bool {
    match c.as_etag() {
        None => true,
        Some(e) => e.value() == etag.trim_matches('"'),
    }
}

impl ReadConditions<'_> {
    /// `copy`: a copy's source conditions fail with 412 even where a GET would get 304.
    pub fn check(&self, info: &ObjectInfo, copy: bool) -> Result<(), S3Error> {
        let modified_s = info.last_modified_ms / 1000;
        if let Some(c) = self.if_match {
            if !condition_matches(c, &info.etag) {
                return Err(failed("If-Match"));
            }
        } else if let Some(t) = self.if_unmodified_since {
            if modified_s > millis(t) / 1000 {
                return Err(failed("If-Unmodified-Since"));
            }
        }
        if let Some(c) = self.if_none_match {
            if condition_matches(c, &info.etag) {
                return Err(not_modified(copy, info));
            }
        } else if let Some(t) = self.if_modified_since {
            if modified_s <= millis(t) / 1000 {
                return Err(not_modified(copy, info));
            }
        }
        Ok(())
    }
}

fn failed(which: &str) -> S3Error {
    let mut err = S3Error::with_message(
        S3ErrorCode::PreconditionFailed,
        format!("{which} is not met by the object"),
    );
    err.set_status_code(StatusCode::PRECONDITION_FAILED);
    err
}

/// 304 carries the object's ETag and Last-Modified, as S3's does, so a cache can revalidate.
fn not_modified(copy: bool, info: &ObjectInfo) -> S3Error {
    if copy {
        return failed("the copy source condition");
    }
    let mut err = S3Error::new(S3ErrorCode::NotModified);
    err.set_status_code(StatusCode::NOT_MODIFIED);
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&info.etag) {
        headers.insert(http::header::ETAG, v);
    }
    let modified = std::time::UNIX_EPOCH + std::time::Duration::from_millis(info.last_modified_ms);
    if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(modified)) {
        headers.insert(http::header::LAST_MODIFIED, v);
    }
    err.set_headers(headers);
    err
}
