//! The HTTP kit every surface shares (native API, S3 gateway, admin), as garage's `api/common`
//! serves its APIs: fencegate's request headers read into the gate's types (`headers.rs`),
//! declared digests checked as a body streams (`digests.rs`), aws-chunked bodies decoded as
//! they stream with their chunk signatures checked (`aws_chunked.rs`, `chunk_signatures.rs`),
//! the listener's stalled-body cut-off (`stall.rs`), what becomes of a body a handler did not
//! read (`unread.rs`), body-stream errors told apart (`body.rs`), JSON error answers
//! (`error.rs`) and request ids. It names no surface: the surfaces import it.

pub mod aws_chunked;
#[cfg(test)]
mod aws_chunked_tests;
pub mod body;
mod chunk_signatures;
pub mod digests;
pub mod error;
pub mod headers;
pub mod stall;
pub mod unread;

pub use stall::{bound_bodies, StalledBody};

/// The SHA-256 of an empty body, as SigV4 writes it (the payload hash of a bodiless request,
/// and a line of every aws-chunked chunk's string to sign).
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// An `x-amz-date` (`20130524T000000Z`), as both SigV4 checks read it: the native API's
/// (`auth::sigv4`) and the aws-chunked chain (`chunk_signatures.rs`).
pub fn parse_amz_date(s: &str) -> Option<std::time::SystemTime> {
    let format = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let t = time::PrimitiveDateTime::parse(s, format).ok()?.assume_utc();
    let secs = u64::try_from(t.unix_timestamp()).ok()?;
    Some(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// A new request id: 16 upper-case hex digits, as S3's are.
pub fn request_id() -> String {
    format!("{:016X}", rand::random::<u64>())
}

/// The one id of a request, given as it arrives ([`assign_request_id`]): its log span's
/// `request_id`, and the S3 gateway's `x-amz-request-id`.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

impl RequestId {
    /// The id given to `req`, or a new one where no layer gave one (a handler called alone).
    pub fn of(extensions: &http::Extensions) -> String {
        extensions
            .get::<RequestId>()
            .map_or_else(request_id, |id| id.0.clone())
    }
}

/// The address of the client a request came from, as the listener accepted its connection.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub std::net::SocketAddr);

/// Gives each request its id, before its span is made.
pub async fn assign_request_id(
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    req.extensions_mut().insert(RequestId(request_id()));
    next.run(req).await
}

/// The access key id a request's signature names (SigV4 or SigV2, in the `Authorization`
/// header or a presigned URL's query), whether or not the signature holds: the access line's
/// `access_key`, so that an operator sees which key bad signatures claim. At most 128 of its
/// characters, anything but letters, digits and `-_.` shown as `?`.
pub fn claimed_access_key(headers: &http::HeaderMap, query: Option<&str>) -> Option<String> {
    let from_header = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|auth| {
            if let Some((_, rest)) = auth.split_once("Credential=") {
                rest.split('/').next()
            } else {
                auth.strip_prefix("AWS ")?.split(':').next()
            }
        })
        .map(str::to_string);
    let from_query = || {
        query?.split('&').find_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
            match name {
                "X-Amz-Credential" => value.split('/').next().map(str::to_string),
                "AWSAccessKeyId" => Some(value.into_owned()),
                _ => None,
            }
        })
    };
    let key = from_header.or_else(from_query)?;
    Some(
        key.chars()
            .take(128)
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '?'
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claimed_key_is_read_from_every_signature_form() {
        let mut h = http::HeaderMap::new();
        assert_eq!(claimed_access_key(&h, None), None);
        h.insert(
            http::header::AUTHORIZATION,
            "AWS4-HMAC-SHA256 Credential=AKID1/20261203/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"
                .parse()
                .unwrap(),
        );
        assert_eq!(claimed_access_key(&h, None).as_deref(), Some("AKID1"));
        h.insert(
            http::header::AUTHORIZATION,
            "AWS AKID2:c2ln".parse().unwrap(),
        );
        assert_eq!(claimed_access_key(&h, None).as_deref(), Some("AKID2"));
        let none = http::HeaderMap::new();
        let q = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID3%2F20261203%2Fus-east-1%2Fs3%2Faws4_request";
        assert_eq!(claimed_access_key(&none, Some(q)).as_deref(), Some("AKID3"));
        let q = "AWSAccessKeyId=AKID4&Expires=1&Signature=x";
        assert_eq!(claimed_access_key(&none, Some(q)).as_deref(), Some("AKID4"));
        let q = "AWSAccessKeyId=%1B%5B31mred";
        assert_eq!(
            claimed_access_key(&none, Some(q)).as_deref(),
            Some("??31mred")
        );
        let long = format!("AWSAccessKeyId={}", "k".repeat(500));
        assert_eq!(claimed_access_key(&none, Some(&long)).unwrap().len(), 128);
    }
}
