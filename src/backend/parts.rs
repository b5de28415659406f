//! Multipart uploads and parts, as every backend keeps them to S3's rules: a completion's part
//! list checked against the parts uploaded, the multipart ETag, and where a part lies in an
//! object for GetObject and HeadObject `partNumber`. Also reads for a backend that can only
//! read whole objects.

#[cfg(test)]
use super::BodyError;
use super::{Backend, BackendError, ByteStream, ObjectInfo};
#[cfg(test)]
use bytes::Bytes;
use serde::Serialize;

/// Where one part of an object lies, for GetObject and HeadObject `partNumber`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartSpan {
    /// The part's first byte in the object.
    pub offset: u64,
    pub len: u64,
    /// The object's part count (`x-amz-mp-parts-count`) when it was completed from parts;
    /// `None` for an object written whole, whose only part is the object itself.
    pub count: Option<u32>,
}

impl PartSpan {
    /// Part `number` of an object of `size` bytes completed from `parts` (number uploaded
    /// with, size; empty: written whole). A part is asked for by the number it was uploaded
    /// with, as the store serves it (ministack), so that an upload completed from parts 1, 3
    /// and 5 reads alike on fs and on s3 (counted in order, it would not). An object written
    /// whole has the one part 1.
    pub fn of(parts: &[(u32, u64)], size: u64, number: u32) -> Result<PartSpan, BackendError> {
        let missing = || BackendError::NoSuchPart {
            number,
            count: parts.len().max(1) as u32,
        };
        if parts.is_empty() {
            return match number {
                1 => Ok(PartSpan {
                    offset: 0,
                    len: size,
                    count: None,
                }),
                _ => Err(missing()),
            };
        }
        let index = parts
            .iter()
            .position(|(n, _)| *n == number)
            .ok_or_else(missing)?;
        Ok(PartSpan {
            offset: parts[..index].iter().map(|(_, s)| s).sum(),
            len: parts[index].1,
            count: Some(parts.len() as u32),
        })
    }

    /// The part's bytes out of the whole object's stream.
    pub fn slice(&self, body: ByteStream) -> ByteStream {
        match self.len {
            0 => Box::pin(futures::stream::empty()),
            len => slice_stream(body, self.offset, self.offset + len - 1),
        }
    }
}

/// One part of an object (GetObject / HeadObject `partNumber`), all of one version.
pub struct ObjectPart {
    /// The whole object.
    pub info: ObjectInfo,
    pub span: PartSpan,
    /// The part's bytes, when they were asked for.
    pub body: Option<ByteStream>,
}

/// One uploaded part of a multipart upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PartInfo {
    pub number: i32,
    /// Quoted, as S3 answers it.
    pub etag: String,
    pub size: u64,
    pub last_modified_ms: u64,
    /// The `x-amz-checksum-*` the part was uploaded with and proved to have, if any: what a
    /// completion's checksums are judged by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<PartChecksum>,
}

/// A checksum of a part's bytes: S3's algorithm name (`crc32`, `crc32c`, `sha1`, `sha256`,
/// `crc64nvme`) and the base64 value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PartChecksum {
    pub algorithm: String,
    pub value: String,
}

/// The S3 ETag of a multipart object: the MD5 of the parts' MD5s, then `-` and the count.
pub fn multipart_etag(part_etags: &[&str]) -> String {
    use md5::{Digest, Md5};
    let mut md5 = Md5::new();
    for etag in part_etags {
        let hexed = etag.trim_matches('"');
        match hex::decode(hexed) {
            Ok(raw) => md5.update(raw),
            // Not an MD5 (some stores use other ETags): still deterministic.
            Err(_) => md5.update(hexed.as_bytes()),
        }
    }
    format!("\"{}-{}\"", hex::encode(md5.finalize()), part_etags.len())
}

/// Checks a CompleteMultipartUpload part list against the parts uploaded: ascending numbers,
/// each one uploaded with that ETag. Returns the matching parts in order.
pub fn match_parts(
    requested: &[(i32, String)],
    uploaded: &[PartInfo],
) -> Result<Vec<PartInfo>, BackendError> {
    if requested.is_empty() {
        return Err(BackendError::Invalid {
            code: "MalformedXML",
            message: "CompleteMultipartUpload lists no parts".into(),
        });
    }
    let mut out = Vec::with_capacity(requested.len());
    let mut last = 0;
    for (number, etag) in requested {
        if *number <= last {
            return Err(BackendError::Invalid {
                code: "InvalidPartOrder",
                message: format!("part {number} is listed after part {last}; list parts in ascending order, each once"),
            });
        }
        last = *number;
        let want = etag.trim_matches('"');
        match uploaded.iter().find(|p| p.number == *number) {
            Some(p) if p.etag.trim_matches('"') == want => out.push(p.clone()),
            _ => {
                return Err(BackendError::Invalid {
                    code: "InvalidPart",
                    message: format!("part {number} with ETag {etag} was not uploaded; list the ETags UploadPart returned"),
                })
            }
        }
    }
    if let Some(small) = out[..out.len() - 1]
        .iter()
        .find(|p| p.size < MIN_PART_BYTES)
    {
        return Err(BackendError::Invalid {
            code: "EntityTooSmall",
            message: format!(
                "part {} is {} bytes; every part but the last must be at least 5 MiB, as on S3",
                small.number, small.size
            ),
        });
    }
    Ok(out)
}

/// S3's smallest part, but for the last.
pub const MIN_PART_BYTES: u64 = 5 * 1024 * 1024;

/// [`Backend::get_range`] for a backend that can only read whole objects: the whole object,
/// sliced.
pub async fn range_of_whole(
    backend: &dyn Backend,
    bucket: &str,
    key: &str,
    start: u64,
    end: u64,
) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
    let Some((info, body)) = backend.get(bucket, key).await? else {
        return Ok(None);
    };
    Ok(Some((info, slice_stream(body, start, end))))
}

/// [`Backend::get_part`] for a backend that can only read whole objects: the whole object
/// read once and sliced by [`ObjectInfo::parts`].
pub async fn part_of_whole(
    backend: &dyn Backend,
    bucket: &str,
    key: &str,
    number: u32,
    body: bool,
) -> Result<Option<ObjectPart>, BackendError> {
    let Some((info, stream)) = backend.get(bucket, key).await? else {
        return Ok(None);
    };
    let span = PartSpan::of(&info.parts, info.size, number)?;
    Ok(Some(ObjectPart {
        info,
        span,
        body: body.then(|| span.slice(stream)),
    }))
}

/// Bytes `start..=end` of a stream, dropping the rest as it passes.
pub fn slice_stream(body: ByteStream, start: u64, end: u64) -> ByteStream {
    use futures::StreamExt;
    // Stop reading at the chunk past `end`, then trim the chunks kept to the range.
    let mut read = 0u64;
    let mut offset = 0u64;
    body.take_while(move |chunk| {
        let go = read <= end;
        if let Ok(b) = chunk {
            read += b.len() as u64;
        }
        futures::future::ready(go)
    })
    .filter_map(move |chunk| {
        let out = match chunk {
            Err(e) => Some(Err(e)),
            Ok(bytes) => {
                let from = offset;
                let to = offset + bytes.len() as u64;
                offset = to;
                let lo = start.max(from);
                let hi = end.saturating_add(1).min(to);
                (lo < hi).then(|| Ok(bytes.slice((lo - from) as usize..(hi - from) as usize)))
            }
        };
        futures::future::ready(out)
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn slices_across_chunks() {
        let chunks: Vec<Result<Bytes, BodyError>> = vec![
            Ok(Bytes::from_static(b"0123")),
            Ok(Bytes::from_static(b"4567")),
            Ok(Bytes::from_static(b"89")),
        ];
        for (start, end, want) in [
            (0, 9, "0123456789"),
            (2, 5, "2345"),
            (4, 4, "4"),
            (8, 20, "89"),
        ] {
            let body = futures::stream::iter(chunks.clone()).boxed();
            let got: Vec<u8> = slice_stream(body, start, end)
                .map(|c| c.unwrap().to_vec())
                .concat()
                .await;
            assert_eq!(String::from_utf8(got).unwrap(), want, "{start}..={end}");
        }
    }

    #[test]
    fn part_lists_are_checked() {
        let uploaded = vec![
            PartInfo {
                number: 1,
                etag: "\"aa\"".into(),
                size: MIN_PART_BYTES,
                last_modified_ms: 0,
                checksum: None,
            },
            PartInfo {
                number: 2,
                etag: "\"bb\"".into(),
                size: 1,
                last_modified_ms: 0,
                checksum: None,
            },
        ];
        assert!(match_parts(&[(1, "aa".into()), (2, "\"bb\"".into())], &uploaded).is_ok());
        let code = |r: Result<Vec<PartInfo>, BackendError>| match r {
            Err(BackendError::Invalid { code, .. }) => code,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            code(match_parts(
                &[(2, "bb".into()), (1, "aa".into())],
                &uploaded
            )),
            "InvalidPartOrder"
        );
        assert_eq!(
            code(match_parts(&[(1, "zz".into())], &uploaded)),
            "InvalidPart"
        );
        assert_eq!(
            code(match_parts(&[(3, "aa".into())], &uploaded)),
            "InvalidPart"
        );
        assert_eq!(code(match_parts(&[], &uploaded)), "MalformedXML");
        // Every part but the last is at least 5 MiB; the last may be anything.
        let mut small = uploaded.clone();
        small[0].size = MIN_PART_BYTES - 1;
        assert_eq!(
            code(match_parts(&[(1, "aa".into()), (2, "bb".into())], &small)),
            "EntityTooSmall"
        );
        assert!(match_parts(&[(1, "aa".into())], &small).is_ok());
    }

    #[tokio::test]
    async fn parts_are_numbered_in_order_and_a_whole_object_is_part_one() {
        // Uploaded as parts 1, 3 and 5: asked for by those numbers.
        let sizes = [(1, MIN_PART_BYTES), (3, MIN_PART_BYTES), (5, 3)];
        let total = 2 * MIN_PART_BYTES + 3;
        assert_eq!(
            PartSpan::of(&sizes, total, 3).unwrap(),
            PartSpan {
                offset: MIN_PART_BYTES,
                len: MIN_PART_BYTES,
                count: Some(3)
            }
        );
        assert_eq!(PartSpan::of(&sizes, total, 5).unwrap().offset, total - 3);
        for number in [0, 2, 4, 6, u32::MAX] {
            match PartSpan::of(&sizes, total, number) {
                Err(BackendError::NoSuchPart { count: 3, .. }) => {}
                other => panic!("part {number}: {other:?}"),
            }
        }
        assert_eq!(
            PartSpan::of(&[], 10, 1).unwrap(),
            PartSpan {
                offset: 0,
                len: 10,
                count: None
            }
        );
        assert!(matches!(
            PartSpan::of(&[], 10, 2),
            Err(BackendError::NoSuchPart { count: 1, .. })
        ));
        // The slice is the part's bytes, an empty part none.
        let body = || -> ByteStream {
            Box::pin(futures::stream::iter(vec![
                Ok(Bytes::from_static(b"abc")),
                Ok(Bytes::from_static(b"defg")),
            ]))
        };
        let parts = [(1, 2), (2, 4), (3, 0), (4, 1)];
        let span = PartSpan::of(&parts, 7, 2).unwrap();
        let got: Vec<u8> = span
            .slice(body())
            .map(|c| c.unwrap().to_vec())
            .concat()
            .await;
        assert_eq!(got, b"cdef");
        let empty = PartSpan::of(&parts, 7, 3).unwrap();
        assert_eq!(empty.slice(body()).count().await, 0);
    }

    #[test]
    fn multipart_etag_is_md5_of_md5s() {
        // Two parts "a" and "b": md5("a") = 0cc175b9..., md5("b") = 92eb5ffe...
        let etag = multipart_etag(&[
            "\"0cc175b9c0f1b6a831c399e269772661\"",
            "\"92eb5ffee6ae2fec3ad71c777531578f\"",
        ]);
        assert!(etag.ends_with("-2\""), "{etag}");
    }
}
