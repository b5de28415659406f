//! The digests a client declares for a PUT body (Content-MD5, and `x-amz-checksum-*` as a
//! header or as an aws-chunked trailer that `x-amz-trailer` names), checked against the bytes
//! as they stream: the last chunk goes on only once every digest matches, so a body whose
//! bytes changed on the way is never committed (400 BadDigest) and a part streamed to the
//! store is cut short before the store has all of it.

use crate::backend::{BodyChecksums, BodyError, ByteStream};
use futures::StreamExt;
use md5::{Digest, Md5};
use s3s::checksum::ChecksumHasher;
use s3s::crypto::Checksum as _;
use s3s::{S3Error, S3ErrorCode, S3Result};

/// Standard base64 with padding, as S3's digest headers carry it.
pub fn base64_decode(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(text)
}

pub fn base64_encode(bytes: impl AsRef<[u8]>) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The algorithms S3 defines, by the suffix of their header (`x-amz-checksum-crc32`, ...).
const ALGORITHMS: [&str; 5] = ["crc32", "crc32c", "sha1", "sha256", "crc64nvme"];

/// What the body must hash to.
#[derive(Default)]
pub struct Declared {
    md5: Option<Vec<u8>>,
    /// (algorithm, base64 value) from headers.
    checksums: Vec<(&'static str, String)>,
    /// The algorithm `x-amz-trailer` names, whose value arrives in the aws-chunked trailer.
    named: Option<&'static str>,
    /// The aws-chunked trailer, when the body has one: every checksum in it is judged, named
    /// or not (otherwise one named among others would go unchecked).
    trailers: Option<super::aws_chunked::Trailers>,
    /// The checksums the body was found to have, once its last byte passed (for UploadPart
    /// to record and answer).
    verified: BodyChecksums,
}

fn invalid_request(message: String) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidRequest, message)
}

/// The algorithm of a checksum header name (`x-amz-checksum-crc32` is `crc32`).
fn algorithm_of(name: &str) -> Option<&'static str> {
    let suffix = name.strip_prefix("x-amz-checksum-")?;
    ALGORITHMS.iter().find(|a| **a == suffix).copied()
}

/// `x-amz-checksum-*` headers that carry no value to check.
const CHECKSUM_SETTINGS: [&str; 3] = [
    "x-amz-checksum-algorithm",
    "x-amz-checksum-type",
    "x-amz-checksum-mode",
];

impl Declared {
    /// The request's declarations. A malformed Content-MD5 is InvalidDigest; a trailer named
    /// without an aws-chunked body to carry it is InvalidRequest.
    pub fn of(
        headers: &http::HeaderMap,
        trailers: Option<super::aws_chunked::Trailers>,
        content_md5: Option<&str>,
    ) -> S3Result<Declared> {
        let md5 = match content_md5 {
            None => None,
            Some(b64) => match base64_decode(b64.trim()) {
                Ok(digest) if digest.len() == 16 => Some(digest),
                _ => {
                    return Err(S3Error::with_message(
                        S3ErrorCode::InvalidDigest,
                        "Content-MD5 must be the base64 of the body's 16-byte MD5",
                    ))
                }
            },
        };
        // A checksum header fencegate cannot check is refused, never ignored; so is one sent
        // twice, which only its first line would otherwise judge.
        for name in headers.keys() {
            let digest_header = name.as_str().starts_with("x-amz-checksum-")
                || name == "content-md5"
                || name == "x-amz-trailer";
            if digest_header && headers.get_all(name).iter().count() > 1 {
                return Err(invalid_request(format!(
                    "{name} is sent more than once; send it once"
                )));
            }
        }
        Self::refuse_unknown(headers)?;
        let checksums: Vec<(&'static str, String)> = ALGORITHMS
            .iter()
            .filter_map(|a| {
                let value = headers.get(format!("x-amz-checksum-{a}"))?;
                Some((
                    *a,
                    String::from_utf8_lossy(value.as_bytes()).trim().to_string(),
                ))
            })
            .collect();
        let named = match headers.get("x-amz-trailer") {
            None => None,
            Some(v) => {
                let text = String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase();
                let names: Vec<&str> = text.split(',').map(str::trim).collect();
                match names.as_slice() {
                    [one] => Some(algorithm_of(one).ok_or_else(|| {
                        invalid_request(format!(
                            "x-amz-trailer names {one:?}, which is not a checksum fencegate can check; name one of x-amz-checksum-crc32, -crc32c, -sha1, -sha256 or -crc64nvme"
                        ))
                    })?),
                    _ => {
                        return Err(invalid_request(format!(
                            "x-amz-trailer names {} trailers; S3 takes a single x-amz-checksum-* trailer",
                            names.len()
                        )))
                    }
                }
            }
        };
        if let (Some(a), None) = (named, &trailers) {
            return Err(invalid_request(format!(
                "x-amz-trailer names x-amz-checksum-{a}, but the body is not aws-chunked with a trailer"
            )));
        }
        // The SDKs name the algorithm they send: its checksum must come, or the body would be
        // taken as checked with it when it was not (AWS refuses this as well).
        if let Some(v) = headers.get("x-amz-sdk-checksum-algorithm") {
            let text = String::from_utf8_lossy(v.as_bytes())
                .trim()
                .to_ascii_lowercase();
            let sent = checksums.iter().any(|(a, _): &(&str, String)| *a == text)
                || named.is_some_and(|a| a == text);
            if !sent {
                return Err(invalid_request(format!(
                    "x-amz-sdk-checksum-algorithm names {text}, but no x-amz-checksum-{text} header or x-amz-trailer came with it; send that checksum, or leave the setting out"
                )));
            }
        }
        Ok(Declared {
            md5,
            checksums,
            named,
            trailers,
            verified: Default::default(),
        })
    }

    /// Refuses an `x-amz-checksum-*` header that is neither a checksum fencegate computes nor a
    /// setting (algorithm, type, mode).
    fn refuse_unknown(headers: &http::HeaderMap) -> S3Result<()> {
        for name in headers.keys() {
            let name = name.as_str();
            if name.starts_with("x-amz-checksum-")
                && algorithm_of(name).is_none()
                && !CHECKSUM_SETTINGS.contains(&name)
            {
                return Err(invalid_request(format!(
                    "{name} is not a checksum fencegate can check; send one of x-amz-checksum-crc32, -crc32c, -sha1, -sha256 or -crc64nvme"
                )));
            }
        }
        Ok(())
    }

    /// For an operation whose request has no body of the object's to check (CopyObject,
    /// UploadPartCopy, CreateMultipartUpload): a checksum or Content-MD5 it declares cannot be
    /// judged, so it is refused rather than ignored. The settings (`x-amz-checksum-algorithm`,
    /// `-type`) are taken.
    pub fn refuse_on(headers: &http::HeaderMap, operation: &str) -> S3Result<()> {
        Self::refuse_unknown(headers)?;
        let declared = ALGORITHMS
            .iter()
            .map(|a| format!("x-amz-checksum-{a}"))
            .chain(["content-md5".to_string(), "x-amz-trailer".to_string()])
            .find(|name| headers.contains_key(name.as_str()));
        match declared {
            Some(name) => Err(invalid_request(format!(
                "{operation} does not take {name}: the bytes it writes are not in its request, so nothing could check them; leave it out"
            ))),
            None => Ok(()),
        }
    }

    /// The checksums the body proved to have, by algorithm (base64), once it has streamed to
    /// its end; empty before, or when none was declared.
    pub fn verified(&self) -> BodyChecksums {
        self.verified.clone()
    }

    /// The checksum declared in a header, known before the body (which must then prove it, or
    /// nothing is written).
    pub fn up_front(&self) -> Option<(&'static str, String)> {
        self.checksums.first().cloned()
    }

    pub fn is_empty(&self) -> bool {
        self.md5.is_none() && self.checksums.is_empty() && self.trailers.is_none()
    }

    fn hasher(&self) -> ChecksumHasher {
        let mut h = ChecksumHasher::default();
        let algorithms = self.checksums.iter().map(|(a, _)| *a).chain(self.named);
        for a in algorithms {
            match a {
                "crc32" => h.crc32 = Some(s3s::crypto::Crc32::new()),
                "crc32c" => h.crc32c = Some(s3s::crypto::Crc32c::new()),
                "sha1" => h.sha1 = Some(s3s::crypto::Sha1::new()),
                "sha256" => h.sha256 = Some(s3s::crypto::Sha256::new()),
                _ => h.crc64nvme = Some(s3s::crypto::Crc64Nvme::new()),
            }
        }
        h
    }

    /// The first declared digest the body does not have, as the error to answer.
    fn mismatch(&self, md5: Option<Md5>, hasher: ChecksumHasher) -> Option<BodyError> {
        match (self.md5.as_deref(), md5.map(Md5::finalize)) {
            (Some(want), Some(md5)) if *want == *md5 => {}
            // Declared and not computed counts as differing: never passed unchecked.
            (Some(_), _) => {
                return Some(BodyError::BadDigest(
                    "the body's MD5 is not the Content-MD5 the request declared; nothing was written (send the body again, or check what alters it on the way)".into(),
                ))
            }
            (None, _) => {}
        }
        self.checksum_mismatch(hasher)
    }

    /// The first declared checksum the body does not have.
    fn checksum_mismatch(&self, hasher: ChecksumHasher) -> Option<BodyError> {
        let sums = hasher.finalize();
        let computed = |a: &str| match a {
            "crc32" => sums.checksum_crc32.clone(),
            "crc32c" => sums.checksum_crc32c.clone(),
            "sha1" => sums.checksum_sha1.clone(),
            "sha256" => sums.checksum_sha256.clone(),
            _ => sums.checksum_crc64nvme.clone(),
        };
        // Every checksum the trailer carries: each named by x-amz-trailer, and once.
        let trailed: Vec<(String, String)> = self
            .trailers
            .as_ref()
            .and_then(|t| {
                t.read(|h| {
                    h.iter()
                        .filter(|(k, _)| k.as_str().starts_with("x-amz-checksum-"))
                        .map(|(k, v)| {
                            let v = String::from_utf8_lossy(v.as_bytes()).trim().to_string();
                            (k.as_str().to_string(), v)
                        })
                        .collect()
                })
            })
            .unwrap_or_default();
        for (name, _) in &trailed {
            if algorithm_of(name).is_none() || algorithm_of(name) != self.named {
                return Some(BodyError::BadDigest(format!(
                    "the body's trailer carries {name}, which x-amz-trailer did not name; nothing was written"
                )));
            }
        }
        if trailed.len() > 1 {
            return Some(BodyError::BadDigest(
                "the body's trailer carries its checksum more than once; nothing was written"
                    .into(),
            ));
        }
        let from_trailer = self
            .named
            .map(|a| (a, trailed.into_iter().next().map(|(_, v)| v)));
        let declared: Vec<(&'static str, Option<String>)> = self
            .checksums
            .iter()
            .map(|(a, v)| (*a, Some(v.clone())))
            .chain(from_trailer)
            .collect();
        for (a, want) in &declared {
            let Some(want) = want else {
                return Some(BadDigestFor::missing(a));
            };
            if computed(a).as_deref() != Some(want.as_str()) {
                return Some(BadDigestFor::differs(a));
            }
        }
        self.verified.set(
            declared
                .into_iter()
                .filter_map(|(a, v)| Some((a, v?)))
                .collect(),
        );
        None
    }
}

struct BadDigestFor;

impl BadDigestFor {
    fn missing(a: &str) -> BodyError {
        BodyError::BadDigest(format!(
            "the request named x-amz-checksum-{a} as its trailer but the body ended without it; nothing was written"
        ))
    }

    fn differs(a: &str) -> BodyError {
        BodyError::BadDigest(format!(
            "the body's {} is not the x-amz-checksum-{a} the request declared; nothing was written (send the body again, or check what alters it on the way)",
            a.to_ascii_uppercase()
        ))
    }
}

/// Passes the body through, one chunk behind: the last chunk goes only once every declared
/// digest is known to match, else an error goes in its place.
pub fn verify(body: ByteStream, declared: Declared) -> ByteStream {
    if declared.is_empty() {
        return body;
    }
    struct State {
        body: ByteStream,
        // The MD5 only where a Content-MD5 was declared: the backend hashes the body for its
        // ETag anyway, and a large body's MD5 is most of its CPU.
        hashers: Option<(Option<Md5>, ChecksumHasher)>,
        held: Option<bytes::Bytes>,
        declared: Declared,
    }
    let start = State {
        body,
        hashers: Some((declared.md5.is_some().then(Md5::new), declared.hasher())),
        held: None,
        declared,
    };
    futures::stream::unfold(start, |mut st| async move {
        loop {
            let (md5, sums) = st.hashers.as_mut()?;
            match st.body.next().await {
                Some(Ok(chunk)) => {
                    if let Some(md5) = md5 {
                        md5.update(&chunk);
                    }
                    sums.update(&chunk);
                    if let Some(prev) = st.held.replace(chunk) {
                        return Some((Ok(prev), st));
                    }
                }
                Some(Err(e)) => {
                    st.hashers = None;
                    return Some((Err(e), st));
                }
                None => {
                    let (md5, sums) = st.hashers.take()?;
                    if let Some(err) = st.declared.mismatch(md5, sums) {
                        return Some((Err(err), st));
                    }
                    let last = st.held.take()?;
                    return Some((Ok(last), st));
                }
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn body(parts: &[&'static [u8]]) -> ByteStream {
        futures::stream::iter(
            parts
                .iter()
                .map(|p| Ok(Bytes::from_static(p)))
                .collect::<Vec<_>>(),
        )
        .boxed()
    }

    async fn drain(s: ByteStream) -> Result<Vec<u8>, BodyError> {
        let mut out = Vec::new();
        let mut s = s;
        while let Some(c) = s.next().await {
            out.extend_from_slice(&c?);
        }
        Ok(out)
    }

    fn declared(name: &str, value: &str) -> Declared {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
        Declared::of(&h, None, None).unwrap()
    }

    #[tokio::test]
    async fn checksums_in_headers_are_checked() {
        // CRC32 of "hello world" is 0x0d4a1185; SHA-256 as S3 shows it, base64.
        let ok = declared("x-amz-checksum-crc32", "DUoRhQ==");
        assert_eq!(
            drain(verify(body(&[b"hello ", b"world"]), ok))
                .await
                .unwrap(),
            b"hello world"
        );
        let bad = declared("x-amz-checksum-crc32", "AAAAAA==");
        let e = drain(verify(body(&[b"hello ", b"world"]), bad))
            .await
            .unwrap_err();
        assert!(
            matches!(e, BodyError::BadDigest(ref m) if m.contains("x-amz-checksum-crc32")),
            "{e:?}"
        );
        let sha = declared(
            "x-amz-checksum-sha256",
            "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek=",
        );
        assert!(drain(verify(body(&[b"hello world"]), sha)).await.is_ok());
    }

    #[tokio::test]
    async fn nothing_declared_passes_the_body_as_it_is() {
        let d = Declared::of(&http::HeaderMap::new(), None, None).unwrap();
        assert_eq!(drain(verify(body(&[b"a", b"b"]), d)).await.unwrap(), b"ab");
    }

    #[test]
    fn a_trailer_without_an_aws_chunked_body_is_refused() {
        let mut h = http::HeaderMap::new();
        h.insert("x-amz-trailer", "x-amz-checksum-crc32".parse().unwrap());
        assert!(Declared::of(&h, None, None).is_err());
    }

    #[test]
    fn a_digest_header_sent_twice_is_refused() {
        for name in ["x-amz-checksum-crc32", "content-md5"] {
            let mut h = http::HeaderMap::new();
            h.append(name, "DUoRhQ==".parse().unwrap());
            h.append(name, "AAAAAA==".parse().unwrap());
            assert!(Declared::of(&h, None, None).is_err(), "{name}");
        }
        let mut h = http::HeaderMap::new();
        h.insert("x-amz-checksum-algorithm", "CRC32".parse().unwrap());
        assert!(Declared::refuse_on(&h, "CopyObject").is_ok());
        h.insert("content-md5", "AAAA".parse().unwrap());
        assert!(Declared::refuse_on(&h, "CopyObject").is_err());
    }

    /// What fencegate cannot check is refused, not ignored.
    #[test]
    fn checksums_fencegate_cannot_check_are_refused() {
        for (name, value) in [
            (
                "x-amz-trailer",
                "x-amz-checksum-crc32,x-amz-checksum-sha256",
            ),
            ("x-amz-trailer", "x-amz-checksum-md5"),
            ("x-amz-trailer", "x-amz-checksum-crc32,"),
            ("x-amz-trailer", ""),
            ("x-amz-checksum-md5", "AAAA"),
        ] {
            let mut h = http::HeaderMap::new();
            h.insert(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
            match Declared::of(&h, None, None) {
                Err(e) => assert_eq!(*e.code(), S3ErrorCode::InvalidRequest, "{name}: {value}"),
                Ok(_) => panic!("{name}: {value} was taken"),
            }
        }
        let mut h = http::HeaderMap::new();
        h.insert("x-amz-checksum-algorithm", "CRC32".parse().unwrap());
        h.insert("x-amz-checksum-type", "FULL_OBJECT".parse().unwrap());
        assert!(Declared::of(&h, None, None).is_ok());
    }
}
