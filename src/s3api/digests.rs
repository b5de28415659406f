//! The digests a client declares for a PUT body (Content-MD5, and `x-amz-checksum-*` as a
//! header or as an aws-chunked trailer that `x-amz-trailer` names), checked against the bytes
//! as they stream: the last chunk goes on only once every digest matches, so a body whose
//! bytes changed on the way is never committed (400 BadDigest) and a part streamed to the
//! store is cut short before the store has all of it.

use crate::backend::{BodyError, ByteStream};
use futures::StreamExt;
use md5::{Digest, Md5};
use s3s::checksum::ChecksumHasher;
use s3s::crypto::Checksum as _;
use s3s::{S3Error, S3ErrorCode, S3Result};

/// The algorithms S3 defines, by the suffix of their header (`x-amz-checksum-crc32`, ...).
const ALGORITHMS: [&str; 5] = ["crc32", "crc32c", "sha1", "sha256", "crc64nvme"];

/// What the body must hash to.
#[derive(Default)]
pub struct Declared {
    md5: Option<Vec<u8>>,
    /// (algorithm, base64 value) from headers.
    checksums: Vec<(&'static str, String)>,
    /// An algorithm whose value arrives in the aws-chunked trailer.
    trailer: Option<(&'static str, s3s::TrailingHeaders)>,
}

impl Declared {
    /// The request's declarations. A malformed Content-MD5 is InvalidDigest; a trailer named
    /// without an aws-chunked body to carry it is InvalidRequest.
    pub fn of(
        headers: &http::HeaderMap,
        trailers: Option<s3s::TrailingHeaders>,
        content_md5: Option<&str>,
    ) -> S3Result<Declared> {
        let md5 = match content_md5 {
            None => None,
            Some(b64) => match aws_smithy_types::base64::decode(b64.trim()) {
                Ok(digest) if digest.len() == 16 => Some(digest),
                _ => {
                    return Err(S3Error::with_message(
                        S3ErrorCode::InvalidDigest,
                        "Content-MD5 must be the base64 of the body's 16-byte MD5",
                    ))
                }
            },
        };
        let checksums = ALGORITHMS
            .iter()
            .filter_map(|a| {
                let value = headers.get(format!("x-amz-checksum-{a}"))?;
                Some((
                    *a,
                    String::from_utf8_lossy(value.as_bytes()).trim().to_string(),
                ))
            })
            .collect();
        let named = headers
            .get("x-amz-trailer")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let name = v.trim().to_ascii_lowercase();
                ALGORITHMS
                    .iter()
                    .find(|a| name == format!("x-amz-checksum-{a}"))
                    .copied()
            });
        let trailer = match (named, trailers) {
            (None, _) => None,
            (Some(a), Some(t)) => Some((a, t)),
            (Some(a), None) => {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidRequest,
                    format!("x-amz-trailer names x-amz-checksum-{a}, but the body is not aws-chunked with a trailer"),
                ))
            }
        };
        Ok(Declared {
            md5,
            checksums,
            trailer,
        })
    }

    fn is_empty(&self) -> bool {
        self.md5.is_none() && self.checksums.is_empty() && self.trailer.is_none()
    }

    fn hasher(&self) -> ChecksumHasher {
        let mut h = ChecksumHasher::default();
        let algorithms = self
            .checksums
            .iter()
            .map(|(a, _)| *a)
            .chain(self.trailer.as_ref().map(|(a, _)| *a));
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
    fn mismatch(&self, md5: Md5, hasher: ChecksumHasher) -> Option<BodyError> {
        if self
            .md5
            .as_deref()
            .is_some_and(|want| *want != *md5.finalize())
        {
            return Some(BodyError::BadDigest(
                "the body's MD5 is not the Content-MD5 the request declared; nothing was written (send the body again, or check what alters it on the way)".into(),
            ));
        }
        let sums = hasher.finalize();
        let computed = |a: &str| match a {
            "crc32" => sums.checksum_crc32.clone(),
            "crc32c" => sums.checksum_crc32c.clone(),
            "sha1" => sums.checksum_sha1.clone(),
            "sha256" => sums.checksum_sha256.clone(),
            _ => sums.checksum_crc64nvme.clone(),
        };
        let trailed = self.trailer.as_ref().map(|(a, t)| {
            let value = t
                .read(|h| {
                    h.get(format!("x-amz-checksum-{a}"))
                        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_string())
                })
                .flatten();
            (*a, value)
        });
        let declared = self
            .checksums
            .iter()
            .map(|(a, v)| (*a, Some(v.clone())))
            .chain(trailed);
        for (a, want) in declared {
            let Some(want) = want else {
                return Some(BadDigestFor::missing(a));
            };
            if computed(a).as_deref() != Some(want.as_str()) {
                return Some(BadDigestFor::differs(a));
            }
        }
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
        hashers: Option<(Md5, ChecksumHasher)>,
        held: Option<bytes::Bytes>,
        declared: Declared,
    }
    let start = State {
        body,
        hashers: Some((Md5::new(), declared.hasher())),
        held: None,
        declared,
    };
    futures::stream::unfold(start, |mut st| async move {
        loop {
            let (md5, sums) = st.hashers.as_mut()?;
            match st.body.next().await {
                Some(Ok(chunk)) => {
                    md5.update(&chunk);
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
}
