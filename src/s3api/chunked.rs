//! PutObject with `Transfer-Encoding: chunked` and no `Content-Length` (`curl -T -`, generator
//! bodies, streaming writers), accepted as RGW, moto and ministack accept it. s3s refuses a
//! header-signed `UNSIGNED-PAYLOAD` request without a length (411) after it has checked the
//! signature, on the header's presence alone; fencegate never needed the length (the body is
//! bounded by the object size limit as it streams, and the s3 backend spools it in parts). So
//! such a request reaches s3s with a stand-in `Content-Length` that nothing reads as a length,
//! and PutObject streams the body as it comes. A stale token is still refused before a byte is
//! read (the gate's early check). A body whose SHA-256 is signed needs its true length in s3s
//! and keeps the 411; UploadPart needs its length, as on AWS.

use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::HeaderValue;

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
    let query = parts.uri.query().unwrap_or("");
    let part = query
        .split('&')
        .any(|p| matches!(p.split('=').next(), Some("uploadId" | "partNumber")));
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
