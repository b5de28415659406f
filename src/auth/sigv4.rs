//! AWS Signature Version 4 verification for the native API (docs/security.md, "Signing").
//!
//! `s3s` verifies the S3 surface, but its verifier is private to the crate, and `aws-sigv4` is
//! a signer that chooses the headers it signs; a verifier must use the client's own
//! `SignedHeaders`. So the canonical request is built here, and the key derivation and HMAC
//! are `aws-sigv4`'s. Clients: `curl --aws-sigv4 "aws:amz:REGION:s3" --user AK:SK` and any
//! AWS SDK signer.
//!
//! The payload hash is the `x-amz-content-sha256` header when sent (`UNSIGNED-PAYLOAD`, or a
//! hex SHA-256 that the body must then match), else the SHA-256 of the body, as curl signs it:
//! then the signature can only be checked at the end of the body, before anything commits.

use crate::http::parse_amz_date;
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime};

/// How far a request's `X-Amz-Date` may be from the server's clock (AWS's own limit).
pub const MAX_SKEW: Duration = Duration::from_secs(15 * 60);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigError {
    #[error("{0}")]
    Malformed(String),
    #[error("the request's X-Amz-Date {0} is more than 15 minutes from the server's time; check the client's clock")]
    Skewed(String),
}

/// What the body hash in the canonical request is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// `UNSIGNED-PAYLOAD`: the body is not covered.
    Unsigned,
    /// A hex SHA-256 the client declared; the body must hash to it.
    Declared(String),
    /// No header: the hash of the body itself, known only once the body is read.
    Body,
}

/// A parsed `Authorization: AWS4-HMAC-SHA256 ...` request, ready to verify.
#[derive(Debug, Clone)]
pub struct SignedRequest {
    pub access_key: String,
    pub payload: Payload,
    signature: String,
    time: SystemTime,
    scope: String,
    region: String,
    service: String,
    amz_date: String,
    signed_headers: Vec<String>,
    /// The canonical request without its payload hash line, for each way of writing the URI
    /// that clients use (path and query re-encoded as S3 does, and as sent).
    prefixes: Vec<String>,
}

fn malformed(what: impl Into<String>) -> SigError {
    SigError::Malformed(what.into())
}

/// S3's URI encoding: everything but unreserved characters, and `/` when `path`.
fn encode(s: &[u8], path: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || (path && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn decode(s: &str) -> Vec<u8> {
    percent_encoding::percent_decode_str(s).collect()
}

fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (encode(&decode(k), false), encode(&decode(v), false))
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

impl SignedRequest {
    /// Parses the signature parts of a request. `Ok(None)`: it carries no SigV4 at all.
    pub fn parse(
        method: &http::Method,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        now: SystemTime,
    ) -> Result<Option<SignedRequest>, SigError> {
        let Some(auth) = headers.get(http::header::AUTHORIZATION) else {
            return Ok(None);
        };
        let auth = auth
            .to_str()
            .map_err(|_| malformed("the Authorization header is not ASCII"))?;
        let Some(rest) = auth.strip_prefix("AWS4-HMAC-SHA256 ") else {
            return Err(malformed(
                "the Authorization header is not AWS4-HMAC-SHA256; sign with SigV4 (curl --aws-sigv4 \"aws:amz:us-east-1:s3\" --user KEY:SECRET)",
            ));
        };
        let (mut credential, mut signed, mut signature) = (None, None, None);
        for part in rest.split(',') {
            let (k, v) = part
                .trim()
                .split_once('=')
                .ok_or_else(|| malformed(format!("bad Authorization component {part:?}")))?;
            let slot = match k {
                "Credential" => &mut credential,
                "SignedHeaders" => &mut signed,
                "Signature" => &mut signature,
                _ => return Err(malformed(format!("unknown Authorization component {k:?}"))),
            };
            if slot.replace(v).is_some() {
                return Err(malformed(format!("Authorization repeats {k}")));
            }
        }
        let (Some(credential), Some(signed), Some(signature)) = (credential, signed, signature)
        else {
            return Err(malformed(
                "Authorization needs Credential, SignedHeaders and Signature",
            ));
        };
        let cred: Vec<&str> = credential.split('/').collect();
        let [access_key, date, region, service, "aws4_request"] = cred[..] else {
            return Err(malformed(
                "Credential must be KEY/YYYYMMDD/REGION/SERVICE/aws4_request",
            ));
        };
        if signature.len() != 64 || !signature.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(malformed("Signature must be 64 hex digits"));
        }
        let names: Vec<&str> = signed.split(';').collect();
        if names.is_empty()
            || !names.contains(&"host")
            || names.windows(2).any(|w| w[0] >= w[1])
            || names
                .iter()
                .any(|n| n.is_empty() || n.bytes().any(|b| b.is_ascii_uppercase()))
        {
            return Err(malformed(
                "SignedHeaders must be lower-case, sorted, unique, and include host",
            ));
        }
        let amz_date = headers
            .get("x-amz-date")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| malformed("a signed request needs an X-Amz-Date header"))?;
        let time = parse_amz_date(amz_date)
            .ok_or_else(|| malformed("X-Amz-Date must look like 20260101T000000Z"))?;
        if !amz_date.starts_with(date) || date.len() != 8 {
            return Err(malformed(
                "the Credential's date is not the day of X-Amz-Date",
            ));
        }
        let skew = now.duration_since(time).unwrap_or_else(|e| e.duration());
        if skew > MAX_SKEW {
            return Err(SigError::Skewed(amz_date.to_string()));
        }
        let mut canonical_headers = String::new();
        for name in &names {
            let values: Vec<String> = headers
                .get_all(*name)
                .iter()
                .map(|v| {
                    String::from_utf8_lossy(v.as_bytes())
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect();
            if values.is_empty() {
                return Err(malformed(format!("signed header {name:?} is missing")));
            }
            canonical_headers.push_str(&format!("{name}:{}\n", values.join(",")));
        }
        let payload = match headers
            .get("x-amz-content-sha256")
            .map(|v| v.to_str().unwrap_or(""))
        {
            None => Payload::Body,
            Some("UNSIGNED-PAYLOAD") => Payload::Unsigned,
            Some(h) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Payload::Declared(h.to_ascii_lowercase())
            }
            Some(other) => {
                return Err(malformed(format!(
                    "x-amz-content-sha256 {other:?} is not supported here: send UNSIGNED-PAYLOAD, the body's SHA-256, or no header (chunked signing is for the S3 API)"
                )))
            }
        };
        let raw_path = uri.path();
        let mut paths = vec![encode(&decode(raw_path), true)];
        if paths[0] != raw_path {
            paths.push(raw_path.to_string());
        }
        // Older curl (before 8.x) signs the query as sent, unsorted: accepted too.
        let raw_query = uri.query().unwrap_or("");
        let mut queries = vec![canonical_query(raw_query)];
        if queries[0] != raw_query {
            queries.push(raw_query.to_string());
        }
        let prefixes = paths
            .iter()
            .flat_map(|p| queries.iter().map(move |q| (p, q)))
            .map(|(p, q)| format!("{method}\n{p}\n{q}\n{canonical_headers}\n{signed}\n"))
            .collect();
        Ok(Some(SignedRequest {
            access_key: access_key.to_string(),
            payload,
            signature: signature.to_ascii_lowercase(),
            time,
            scope: format!("{date}/{region}/{service}/aws4_request"),
            region: region.to_string(),
            service: service.to_string(),
            amz_date: amz_date.to_string(),
            signed_headers: names.iter().map(|n| n.to_string()).collect(),
            prefixes,
        }))
    }

    /// Does the signature cover header `name` (lower-case)?
    pub fn signs(&self, name: &str) -> bool {
        self.signed_headers.iter().any(|h| h == name)
    }

    /// The payload hash line to verify with, when it is known before the body is read.
    pub fn payload_hash(&self) -> Option<&str> {
        match &self.payload {
            Payload::Unsigned => Some("UNSIGNED-PAYLOAD"),
            Payload::Declared(h) => Some(h),
            Payload::Body => None,
        }
    }

    /// Does the signature hold for `secret`, with `payload_hash` as the canonical request's
    /// last line? Compared in constant time.
    pub fn verify(&self, secret: &str, payload_hash: &str) -> bool {
        let key = aws_sigv4::sign::v4::generate_signing_key(
            secret,
            self.time,
            &self.region,
            &self.service,
        );
        self.prefixes.iter().any(|prefix| {
            let canonical = format!("{prefix}{payload_hash}");
            let to_sign = format!(
                "AWS4-HMAC-SHA256\n{}\n{}\n{}",
                self.amz_date,
                self.scope,
                hex::encode(Sha256::digest(canonical.as_bytes()))
            );
            let ours = aws_sigv4::sign::v4::calculate_signature(key.as_ref(), to_sign.as_bytes());
            subtle::ConstantTimeEq::ct_eq(ours.as_bytes(), self.signature.as_bytes()).into()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::EMPTY_SHA256;

    /// AWS's documented example (GET object, s3 service), from the SigV4 documentation's
    /// "Example: GET Object" with its published signature.
    #[test]
    fn verifies_the_documented_example() {
        let mut headers = http::HeaderMap::new();
        headers.insert("host", "examplebucket.s3.amazonaws.com".parse().unwrap());
        headers.insert("range", "bytes=0-9".parse().unwrap());
        headers.insert("x-amz-content-sha256", EMPTY_SHA256.parse().unwrap());
        headers.insert("x-amz-date", "20130524T000000Z".parse().unwrap());
        headers.insert(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
                .parse()
                .unwrap(),
        );
        let uri: http::Uri = "/test.txt".parse().unwrap();
        let now = parse_amz_date("20130524T000500Z").unwrap();
        let req = SignedRequest::parse(&http::Method::GET, &uri, &headers, now)
            .unwrap()
            .unwrap();
        assert_eq!(req.access_key, "AKIAIOSFODNN7EXAMPLE");
        let hash = req.payload_hash().unwrap().to_string();
        assert!(req.verify("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", &hash));
        assert!(!req.verify("wrong", &hash));
        // The clock matters.
        let late = parse_amz_date("20130524T010000Z").unwrap();
        assert!(matches!(
            SignedRequest::parse(&http::Method::GET, &uri, &headers, late),
            Err(SigError::Skewed(_))
        ));
    }

    #[test]
    fn malformed_headers_are_refused() {
        let now = SystemTime::now();
        let uri: http::Uri = "/v1/objects/b/k".parse().unwrap();
        for auth in [
            "Basic Zm9vOmJhcg==",
            "AWS4-HMAC-SHA256 ",
            "AWS4-HMAC-SHA256 Credential=AK/20260101/us-east-1/s3/aws4_request",
            "AWS4-HMAC-SHA256 Credential=AK, SignedHeaders=host, Signature=00",
            "AWS4-HMAC-SHA256 Credential=AK/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=zz",
        ] {
            let mut headers = http::HeaderMap::new();
            headers.insert("authorization", auth.parse().unwrap());
            headers.insert("x-amz-date", "20260101T000000Z".parse().unwrap());
            assert!(
                matches!(
                    SignedRequest::parse(&http::Method::GET, &uri, &headers, now),
                    Err(SigError::Malformed(_))
                ),
                "{auth}"
            );
        }
    }

    #[test]
    fn canonical_queries_are_sorted_and_encoded() {
        assert_eq!(canonical_query("b=2&a=1&c"), "a=1&b=2&c=");
        assert_eq!(
            canonical_query("prefix=a%2Fb&x=a b"),
            "prefix=a%2Fb&x=a%20b"
        );
        assert_eq!(encode("a b+c/d~".as_bytes(), true), "a%20b%2Bc/d~");
    }
}
