//! What fencegate refuses or checks before s3s reads a request: a URI s3s would refuse less
//! clearly, a credential scoped to another service, an expected bucket owner that is not
//! fencegate's account, POSTs it does not serve (s3s would read their bodies before any
//! signature check), and the declared digest and the size of a POST's XML body.

use super::answer;
use crate::backend::BodyError;
use crate::http::digests;
use std::sync::Arc;

/// The POSTs fencegate serves, by the query parameter that names them: DeleteObjects
/// (`?delete`), CreateMultipartUpload (`?uploads`), CompleteMultipartUpload (`?uploadId=`).
const SERVED_POSTS: [&str; 3] = ["delete", "uploads", "uploadId"];

/// An expected bucket owner other than fencegate's one account: AWS's 403, as the bucket is
/// not that account's (never ignored: the client asked to be stopped).
pub(super) fn foreign_owner(headers: &http::HeaderMap) -> Option<String> {
    let owner = super::listing::owner().id.unwrap_or_default();
    ["x-amz-expected-bucket-owner", "x-amz-source-expected-bucket-owner"]
        .iter()
        .flat_map(|name| headers.get_all(*name).iter().map(move |v| (name, v)))
        .find(|(_, v)| v.as_bytes() != owner.as_bytes())
        .map(|(name, v)| {
            format!(
                "{name}: {:?} does not own this bucket: every bucket here belongs to fencegate's one account, id {owner:?}; send that id, or leave the header out",
                String::from_utf8_lossy(v.as_bytes())
            )
        })
}

/// Requests refused before s3s sees them, because s3s would read their bodies before any
/// signature or access check:
/// - browser-form uploads (POST object), which fencegate does not implement. Decided on raw
///   bytes and by what is served rather than by what is not (a Content-Type with a non-ASCII
///   byte is no form to `to_str`, and still one to s3s): a POST must name served operations
///   only (besides `x-id`, which AWS SDKs add, and a presigned URL's `X-Amz-*`), and never be
///   a form (so that `?restore&uploadId=1` does not reach s3s);
/// - a SigV4 credential scoped to another service than `s3` (s3s reads up to 8 KiB of such a
///   request's body, with no deadline, before checking its signature).
pub fn refused_before_s3s(req: &axum::extract::Request) -> Option<axum::response::Response> {
    if let Some((status, code, message)) = malformed_uri(req.uri()) {
        return Some(refusal(status, code, message));
    }
    if let Some(service) = foreign_service(req) {
        let message = if service == "unparsed" {
            "the Authorization header is not a SigV4 one (AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/s3/aws4_request, SignedHeaders=..., Signature=...)".to_string()
        } else {
            format!("the credential is scoped to service {service:?}; fencegate is an S3 endpoint: sign for service \"s3\"")
        };
        return Some(refusal(
            http::StatusCode::FORBIDDEN,
            "AccessDenied",
            &message,
        ));
    }
    if let Some(message) = foreign_owner(req.headers()) {
        return Some(refusal(
            http::StatusCode::FORBIDDEN,
            "AccessDenied",
            &message,
        ));
    }
    if req.method() != http::Method::POST {
        return None;
    }
    let form = req
        .headers()
        .get_all(http::header::CONTENT_TYPE)
        .iter()
        .any(|v| {
            let trimmed = v.as_bytes().trim_ascii_start();
            trimmed.len() >= 19 && trimmed[..19].eq_ignore_ascii_case(b"multipart/form-data")
        });
    let names = query_names(req.uri());
    let served = names.iter().any(|k| SERVED_POSTS.contains(k))
        && names
            .iter()
            .all(|k| SERVED_POSTS.contains(k) || *k == "x-id" || k.starts_with("X-Amz-"));
    // WriteGetObjectResponse is routed by these headers on any POST.
    let object_lambda = ["x-amz-request-route", "x-amz-request-token"]
        .iter()
        .any(|h| req.headers().contains_key(*h));
    if served && !form && !object_lambda {
        return None;
    }
    Some(refusal(
        http::StatusCode::NOT_IMPLEMENTED,
        "NotImplemented",
        "this POST is not supported: fencegate serves DeleteObjects (?delete), CreateMultipartUpload (?uploads) and CompleteMultipartUpload (?uploadId=); POST object (browser form uploads) is not supported, so upload with PutObject or a multipart upload",
    ))
}

/// The names of a request's query parameters as sent (not percent-decoded), by which fencegate
/// tells operations apart before s3s routes them.
pub(super) fn query_names(uri: &http::Uri) -> Vec<&str> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').map_or(p, |(k, _)| k))
        .collect()
}

/// What AWS answers, in its words, for a URI s3s would refuse less clearly: a path that is not
/// UTF-8 once decoded (s3s answers a bare `InvalidURI`), and a presigned URL whose
/// `X-Amz-Expires` is negative (s3s answers 400 "missing fields"; AWS, that it has expired).
fn malformed_uri(uri: &http::Uri) -> Option<(http::StatusCode, &'static str, &'static str)> {
    if std::str::from_utf8(&percent_encoding::percent_decode_str(uri.path()).collect::<Vec<u8>>())
        .is_err()
    {
        return Some((
            http::StatusCode::BAD_REQUEST,
            "InvalidURI",
            "Couldn't parse the specified URI.",
        ));
    }
    let negative = uri.query().unwrap_or("").split('&').any(|p| {
        p.split_once('=').is_some_and(|(k, v)| {
            k.eq_ignore_ascii_case("X-Amz-Expires") && v.trim().starts_with('-')
        })
    });
    negative.then_some((
        http::StatusCode::FORBIDDEN,
        "AccessDenied",
        "Request has expired",
    ))
}

/// The largest XML body fencegate takes (as [`s3s_limits`]).
pub(super) const MAX_XML_BODY: u64 = 4 * 1024 * 1024;

/// What a POST's XML body turned out to be as s3s read it ([`post_body_checked`]).
#[derive(Clone, Default)]
pub struct PostBodyVerdict {
    /// It did not have the digest it declared.
    mismatch: Arc<std::sync::atomic::AtomicBool>,
    /// It ran past [`MAX_XML_BODY`].
    too_large: Arc<std::sync::atomic::AtomicBool>,
}

impl PostBodyVerdict {
    /// The refusal to answer instead of s3s's, when the body was cut short for either.
    pub fn refusal(&self) -> Option<axum::response::Response> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.mismatch.load(SeqCst) {
            return Some(refusal(
                http::StatusCode::BAD_REQUEST,
                "BadDigest",
                "the request body's digest is not the Content-MD5 or x-amz-checksum-* it declared; nothing was done (send it again, or check what alters it on the way)",
            ));
        }
        self.too_large.load(SeqCst).then(|| {
            refusal(
                http::StatusCode::BAD_REQUEST,
                "MaxMessageLengthExceeded",
                &format!("the XML body is over {MAX_XML_BODY} bytes, the most fencegate reads of one (a CompleteMultipartUpload of 10000 parts or a DeleteObjects of 1000 keys takes about 1 MiB); nothing was done"),
            )
        })
    }
}

/// A POST's XML body (DeleteObjects: Content-MD5 or `x-amz-checksum-*`; CompleteMultipartUpload:
/// Content-MD5) judged against the digest it declares: s3s does not check them, so a wrong one
/// would be answered 200 and its keys deleted; and counted, so that one past [`MAX_XML_BODY`]
/// is refused 400 (s3s, reading a streamed body past its limit, answers 500 InternalError).
/// Judged as s3s reads the body, which it does only once the signature and the access check
/// passed (a check that read the body first would let anyone make fencegate hold bodies). A
/// body that does not match, or runs past the limit, ends there, so s3s refuses it as
/// incomplete and nothing is done; the caller answers [`PostBodyVerdict::refusal`] instead.
pub fn post_body_checked(
    req: axum::extract::Request,
) -> Result<(axum::extract::Request, Option<PostBodyVerdict>), Box<axum::response::Response>> {
    use futures::StreamExt;
    let names = query_names(req.uri());
    let op = |name: &str| names.contains(&name);
    // s3s routes a POST naming `delete` to DeleteObjects whatever else it names.
    let (delete, complete) = (op("delete"), !op("delete") && op("uploadId"));
    if req.method() != http::Method::POST || !(delete || complete) {
        return Ok((req, None));
    }
    let md5 = req
        .headers()
        .get("content-md5")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    // A completion's x-amz-checksum-* is the object's, judged by its parts'
    // (`part_checksums`); only its Content-MD5 is the XML body's.
    let mut headers = req.headers().clone();
    if complete {
        let object_checksums: Vec<http::HeaderName> = headers
            .keys()
            .filter(|k| k.as_str().starts_with("x-amz-checksum-"))
            .cloned()
            .collect();
        for name in object_checksums {
            headers.remove(name);
        }
    }
    let refuse = |status, code: &str, message: &str| Err(Box::new(refusal(status, code, message)));
    let declared = match digests::Declared::of(&headers, None, md5.as_deref()) {
        Ok(d) => d,
        Err(e) => {
            return refuse(
                e.status_code().unwrap_or(http::StatusCode::BAD_REQUEST),
                e.code().as_str(),
                e.message().unwrap_or_default(),
            )
        }
    };
    let streaming = req
        .headers()
        .get("x-amz-content-sha256")
        .is_some_and(|v| v.as_bytes().starts_with(b"STREAMING-"));
    if streaming && !declared.is_empty() {
        // Its digest would be of the aws-chunked framing, not of the XML.
        return refuse(
            http::StatusCode::BAD_REQUEST,
            "InvalidRequest",
            "an aws-chunked XML body cannot have its Content-MD5 or checksum checked here; send the body plain",
        );
    }
    let verdict = PostBodyVerdict::default();
    let seen = verdict.clone();
    let (parts, body) = req.into_parts();
    let stream = body
        .into_data_stream()
        .map(|r| r.map_err(|e| BodyError::Broken(e.to_string())))
        .boxed();
    let checked = digests::verify(stream, declared).scan(0u64, move |read, chunk| {
        use std::sync::atomic::Ordering::SeqCst;
        futures::future::ready(match chunk {
            Ok(bytes) => {
                *read += bytes.len() as u64;
                if *read > MAX_XML_BODY {
                    seen.too_large.store(true, SeqCst);
                    None
                } else {
                    Some(Ok(bytes))
                }
            }
            Err(BodyError::BadDigest(_)) => {
                seen.mismatch.store(true, SeqCst);
                None
            }
            Err(e) => Some(Err(std::io::Error::other(e.to_string()))),
        })
    });
    Ok((
        axum::extract::Request::from_parts(parts, axum::body::Body::from_stream(checked)),
        Some(verdict),
    ))
}

/// The service a SigV4 credential (Authorization header or `X-Amz-Credential`) is scoped to,
/// when it is not `s3`. Unparseable credentials are left to s3s, which refuses them.
fn foreign_service(req: &axum::extract::Request) -> Option<String> {
    let from_header = req
        .headers()
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .map(|v| {
            // Read as s3s reads it (sig_v4/authorization_v4.rs): the first word, whatever it
            // is, then whitespace, then `Credential=`. Not the first `Credential=` anywhere:
            // a decoy one inside the first word would hide the real one. A header
            // that is not of this shape counts as a foreign credential: s3s would only refuse
            // it, and nothing of it should reach s3s's body reads.
            let text = String::from_utf8_lossy(v.as_bytes()).into_owned();
            let credential = text
                .split_once(|c: char| c.is_ascii_whitespace())
                .and_then(|(_, rest)| rest.trim_start().strip_prefix("Credential="))
                .map(|rest| rest[..rest.find([',', ' ']).unwrap_or(rest.len())].to_string());
            match credential {
                Some(c) => c,
                None if text.starts_with("AWS ") => "SigV2/-/-/s3/aws4_request".to_string(),
                None => "unparsed/-/-/unparsed/-".to_string(),
            }
        });
    let from_query = req.uri().query().into_iter().flat_map(|q| {
        q.split('&').filter_map(|p| {
            let (k, v) = p.split_once('=')?;
            let k = percent_encoding::percent_decode_str(k).decode_utf8_lossy();
            (k == "X-Amz-Credential").then(|| {
                percent_encoding::percent_decode_str(v)
                    .decode_utf8_lossy()
                    .into_owned()
            })
        })
    });
    from_header.chain(from_query).find_map(|credential| {
        // access-key/date/region/service/aws4_request. Anything else is refused as unparsed,
        // never let through (a credential cut short at a ',' in the key id would otherwise
        // read as "not foreign").
        let parts: Vec<&str> = credential.rsplitn(3, '/').collect();
        let service = match parts.as_slice() {
            ["aws4_request", service, rest] if rest.split('/').count() == 3 => *service,
            _ => "unparsed",
        };
        // Shown in the refusal: letters, digits and '-' only.
        (service != "s3").then(|| {
            service
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .take(32)
                .collect()
        })
    })
}

/// A refusal before s3s: its error document, and the connection closed, since the request's
/// body was not read.
pub(super) fn refusal(
    status: http::StatusCode,
    code: &str,
    message: &str,
) -> axum::response::Response {
    let mut resp = answer::error(status, code, message);
    resp.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    resp
}
