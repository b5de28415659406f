//! SigV2, accepted in one form: a presigned URL (`AWSAccessKeyId`, `Expires`, `Signature` in
//! the query) for GET, HEAD and PUT, which boto3's `generate_presigned_url` and `aws s3 presign`
//! make by default against a custom endpoint. s3s verifies its HMAC-SHA1 and its expiry with
//! the one key table. SigV2 in an Authorization header stays refused: s3s never checks such a
//! request's date, so a captured request would replay forever, and every SDK signs headers with
//! SigV4.
//!
//! A presigned URL carries the `x-amz-*` headers it signed in its own query (botocore puts
//! them there, `x-amz-meta-fencing-token` among them). They are lifted into headers before s3s
//! reads the request, which is where SigV2's string to sign takes them from, so a token in the
//! URL is signed and honoured, and a token added to the URL or as a header by its bearer fails
//! the signature.

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};

/// AWS's longest presigned-URL lifetime, for SigV2 as for SigV4.
pub const MAX_PRESIGNED_SECS: u64 = 7 * 24 * 3600;

/// The decoded query parameters of `uri`, `+` as a space, as s3s decodes them.
pub fn query_params(uri: &http::Uri) -> Vec<(String, String)> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (decode(k), decode(v))
        })
        .collect()
}

/// Is this a SigV2 presigned URL, as s3s decides (a parameter named `Signature`)? Any
/// spelling of `AWSAccessKeyId` counts too, so that no SigV2 request escapes these rules.
pub fn presigned(params: &[(String, String)]) -> bool {
    params
        .iter()
        .any(|(k, _)| k == "Signature" || k.eq_ignore_ascii_case("AWSAccessKeyId"))
}

/// A SigV2 Authorization header (`AWS AccessKey:Signature`).
pub fn header_signed(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::AUTHORIZATION)
        .is_some_and(|v| v.as_bytes().starts_with(b"AWS "))
}

/// Does a SigV2 signature cover header `name`? Its string to sign has every `x-amz-*` header.
pub fn covers(name: &str) -> bool {
    name.len() > 6 && name[..6].eq_ignore_ascii_case("x-amz-")
}

/// Why a SigV2 request is refused, if it is: a header signature, a method other than GET,
/// HEAD and PUT, or a URL valid for longer than 7 days from now.
pub fn refused(
    method: &Method,
    headers: &HeaderMap,
    params: &[(String, String)],
) -> Option<String> {
    if header_signed(headers) {
        return Some("Signature Version 2 is accepted only in presigned URLs (GET, HEAD and PUT): sign requests with SigV4, as every current SDK and CLI does".into());
    }
    if !presigned(params) {
        return None;
    }
    if ![Method::GET, Method::HEAD, Method::PUT].contains(method) {
        return Some(format!("a Signature Version 2 presigned URL is accepted for GET, HEAD and PUT, not {method}: presign with SigV4 (botocore: Config(signature_version=\"s3v4\"))"));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let too_long = params.iter().filter(|(k, _)| k == "Expires").any(|(_, v)| {
        v.trim()
            .parse::<u64>()
            .is_ok_and(|e| e > now + MAX_PRESIGNED_SECS)
    });
    too_long.then(|| format!("a presigned URL may be valid for at most {MAX_PRESIGNED_SECS} seconds (7 days), as on AWS"))
}

/// Lifts a SigV2 presigned URL's `x-amz-*` query parameters into headers (see the module
/// header). A parameter that is also sent as a header, or twice, or that is no valid header, is
/// refused: the signature can cover only one value.
pub fn lift_signed_headers(
    uri: &http::Uri,
    headers: &mut HeaderMap,
) -> Result<(), (StatusCode, &'static str, String)> {
    let params = query_params(uri);
    if !params.iter().any(|(k, _)| k == "Signature") {
        return Ok(());
    }
    let mut lifted = HeaderMap::new();
    for (k, v) in &params {
        let name = k.to_ascii_lowercase();
        if !covers(&name) {
            continue;
        }
        let bad = || {
            (
                StatusCode::BAD_REQUEST,
                "InvalidArgument",
                format!("{name} appears in the presigned URL and again (in the URL or as a header); send it once"),
            )
        };
        let (Ok(header), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(v),
        ) else {
            return Err((
                StatusCode::BAD_REQUEST,
                "InvalidArgument",
                format!("{name} in the presigned URL is not a valid header"),
            ));
        };
        if headers.contains_key(&header) || lifted.contains_key(&header) {
            return Err(bad());
        }
        lifted.insert(header, value);
    }
    headers.extend(lifted);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(q: &str) -> http::Uri {
        format!("/b/k?{q}").parse().unwrap()
    }

    #[test]
    fn a_presigned_urls_amz_parameters_become_headers() {
        let mut headers = HeaderMap::new();
        lift_signed_headers(
            &uri("AWSAccessKeyId=AK&Expires=1&Signature=x&x-amz-meta-fencing-token=7&X-Amz-Meta-Other=a%20b"),
            &mut headers,
        )
        .unwrap();
        assert_eq!(headers["x-amz-meta-fencing-token"], "7");
        assert_eq!(headers["x-amz-meta-other"], "a b");
        // The same name in the URL and as a header: refused, whichever the signature covers.
        let mut both = HeaderMap::new();
        both.insert("x-amz-meta-fencing-token", "9".parse().unwrap());
        let e = lift_signed_headers(
            &uri("AWSAccessKeyId=AK&Expires=1&Signature=x&x-amz-meta-fencing-token=7"),
            &mut both,
        )
        .unwrap_err();
        assert_eq!(e.0, StatusCode::BAD_REQUEST);
        let twice = lift_signed_headers(
            &uri("Signature=x&x-amz-meta-a=1&X-AMZ-META-A=2"),
            &mut HeaderMap::new(),
        );
        assert!(twice.is_err());
        // Not a SigV2 URL: nothing is lifted.
        let mut none = HeaderMap::new();
        lift_signed_headers(&uri("X-Amz-Signature=00&x-amz-meta-a=1"), &mut none).unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn only_presigned_get_head_and_put_within_7_days() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let params = |expires: u64| {
            query_params(&uri(&format!(
                "AWSAccessKeyId=AK&Expires={expires}&Signature=x"
            )))
        };
        let none = HeaderMap::new();
        for m in [Method::GET, Method::HEAD, Method::PUT] {
            assert_eq!(refused(&m, &none, &params(now + 3600)), None, "{m}");
        }
        assert!(refused(&Method::DELETE, &none, &params(now + 3600)).is_some());
        assert!(refused(&Method::POST, &none, &params(now + 3600)).is_some());
        assert!(refused(&Method::GET, &none, &params(now + 8 * 24 * 3600)).is_some());
        let mut header = HeaderMap::new();
        header.insert("authorization", "AWS AK:c2ln".parse().unwrap());
        assert!(refused(&Method::GET, &header, &[]).is_some());
        assert!(covers("x-amz-meta-fencing-token") && covers("X-Amz-Meta-Fencing-Token"));
        assert!(!covers("fencing-token") && !covers("fencing-scope"));
    }
}
