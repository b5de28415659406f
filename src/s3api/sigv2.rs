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
//! the signature. A SigV4 presigned URL's are lifted the same way (its signature covers its
//! whole query; the JavaScript SDK's presigner puts metadata and checksums there), so that S3
//! applies none of them as a header fencegate would drop.

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

/// Is this a SigV2 presigned URL? Exactly as s3s decides which signature it verifies: a
/// parameter named `Signature` (s3s checks SigV2 before SigV4). Only then do the SigV2 rules
/// here apply; any other request is judged by what its SigV4 signature covers.
pub fn presigned(params: &[(String, String)]) -> bool {
    params.iter().any(|(k, _)| k == "Signature")
}

/// The parameters a SigV2 presigned URL may carry: its own three, the `x-amz-*` headers it
/// signs, and GetObject's `response-*` overrides (which SigV2 signs). No other subresource, so
/// that a URL signed for one operation cannot be steered to another by a parameter its string
/// to sign leaves out (s3s signs a fixed list, and a repeated one not at all).
fn allowed(name: &str) -> bool {
    matches!(name, "AWSAccessKeyId" | "Expires" | "Signature")
        || covers(name)
        || name.starts_with("response-")
}

/// Why a URL that names SigV2's parameters is not a well-formed SigV2 presigned URL, if so:
/// a spelling s3s does not read as SigV2 (it would verify something else), a parameter twice,
/// or one outside [`allowed`].
fn malformed(params: &[(String, String)]) -> Option<String> {
    let v2_name =
        |k: &str| k.eq_ignore_ascii_case("AWSAccessKeyId") || k.eq_ignore_ascii_case("Signature");
    if !params.iter().any(|(k, _)| v2_name(k)) {
        return None;
    }
    let exact = |want: &str| params.iter().any(|(k, _)| k == want);
    if !exact("Signature") || !exact("AWSAccessKeyId") || !exact("Expires") {
        return Some("a Signature Version 2 presigned URL carries exactly AWSAccessKeyId, Expires and Signature: presign it again (or with SigV4)".into());
    }
    let mut seen = std::collections::HashSet::new();
    for (k, _) in params {
        if !seen.insert(k.to_ascii_lowercase()) {
            return Some(format!(
                "{k} appears twice in a Signature Version 2 presigned URL; send it once"
            ));
        }
        if !allowed(k) {
            return Some(format!("a Signature Version 2 presigned URL may not carry {k:?} (its signature would not cover it): presign with SigV4 for this request"));
        }
    }
    None
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
    if let Some(why) = malformed(params) {
        return Some(why);
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

/// A SigV4 presigned URL's own parameters, which are the signature, not headers it carries.
const SIGV4_OWN: [&str; 8] = [
    "x-amz-algorithm",
    "x-amz-credential",
    "x-amz-date",
    "x-amz-expires",
    "x-amz-signedheaders",
    "x-amz-signature",
    "x-amz-security-token",
    "x-amz-content-sha256",
];

/// Is this `x-amz-*` query parameter of a presigned URL a header the URL carries (which S3
/// applies as that header), rather than a part of the signature itself?
pub fn carried(name: &str, sigv4: bool) -> bool {
    covers(name) && !(sigv4 && SIGV4_OWN.iter().any(|own| own.eq_ignore_ascii_case(name)))
}

/// Is this a SigV4 presigned URL (as s3s decides: a parameter named exactly `X-Amz-Signature`)?
pub fn presigned_v4(params: &[(String, String)]) -> bool {
    params.iter().any(|(k, _)| k == "X-Amz-Signature")
}

/// Lifts a presigned URL's `x-amz-*` query parameters into headers, as S3 applies them (see the
/// module header): SigV2 signs them as headers; a SigV4 URL signs them in its query (the AWS
/// SDK for JavaScript's presigner puts metadata, the fencing token among it, and checksums
/// there). Lifted, each is honoured or refused as the header would be, never dropped. A
/// parameter that is also sent as a header, or twice, or that is no valid header, is refused:
/// the signature can cover only one value.
pub fn lift_signed_headers(
    uri: &http::Uri,
    headers: &mut HeaderMap,
) -> Result<(), (StatusCode, &'static str, String)> {
    let params = query_params(uri);
    let sigv4 = !presigned(&params) && presigned_v4(&params);
    if !presigned(&params) && !sigv4 {
        return Ok(());
    }
    let mut lifted = HeaderMap::new();
    for (k, v) in &params {
        let name = k.to_ascii_lowercase();
        if !carried(&name, sigv4) {
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
        // A SigV4 URL: what it carries is lifted, its own parameters are not.
        let mut v4 = HeaderMap::new();
        lift_signed_headers(
            &uri("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=c&X-Amz-Date=d&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Content-Sha256=UNSIGNED-PAYLOAD&X-Amz-Signature=00&x-amz-meta-a=1&x-amz-acl=public-read"),
            &mut v4,
        )
        .unwrap();
        let mut names: Vec<&str> = v4.keys().map(|k| k.as_str()).collect();
        names.sort();
        assert_eq!(names, ["x-amz-acl", "x-amz-meta-a"]);
        // Not presigned: nothing is lifted.
        let mut none = HeaderMap::new();
        lift_signed_headers(&uri("x-amz-meta-a=1"), &mut none).unwrap();
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
        // Not SigV2 to s3s, or not all of it: refused, never judged by the SigV2 rule (a SigV4
        // request with an `AWSAccessKeyId` parameter kept its x-amz-* headers unsigned).
        for q in [
            "X-Amz-Signature=00&X-Amz-SignedHeaders=host&AWSAccessKeyId=",
            "awsaccesskeyid",
            "AWSAccessKeyId=AK&Expires=1&signature=x",
            "AWSAccessKeyId=AK&Signature=x",
            "AWSAccessKeyId=AK&Expires=1&Signature=x&acl&acl",
            "AWSAccessKeyId=AK&Expires=1&Signature=x&tagging",
            "AWSAccessKeyId=AK&Expires=1&Signature=x&x-amz-meta-a=1&X-Amz-Meta-A=2",
        ] {
            assert!(
                refused(&Method::GET, &none, &query_params(&uri(q))).is_some(),
                "{q}"
            );
        }
        let ok = format!("AWSAccessKeyId=AK&Expires={}&Signature=x&response-content-type=a&x-amz-meta-fencing-token=3", now + 60);
        assert_eq!(refused(&Method::PUT, &none, &query_params(&uri(&ok))), None);
        assert!(!covers("fencing-token") && !covers("fencing-scope"));
    }
}
