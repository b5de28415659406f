//! A multipart upload's checksums, judged so that a completion with a wrong one is never
//! acknowledged. Each part keeps the `x-amz-checksum-*` it was uploaded with once its bytes
//! proved to have it ([`crate::backend::PartInfo::checksum`]), and answers it as S3 does, so
//! clients list it back. A completion is judged by those alone, before anything is assembled:
//! each part's listed checksum must be the one it was uploaded with, and the object's
//! (COMPOSITE: the checksum of the parts' checksums, `-N`; FULL_OBJECT: the parts' CRCs
//! combined) must be what they make. What fencegate cannot judge (a part uploaded without that
//! checksum) is refused, never passed.

use super::convert;
use crate::backend::{PartChecksum, PartInfo};
use crate::http::digests::{base64_decode, base64_encode};
use s3s::{S3Error, S3ErrorCode, S3Result};
use std::collections::BTreeMap;

/// One checksum as the S3 types carry them, by algorithm: (crc32, crc32c, crc64nvme, sha1,
/// sha256).
pub type Fields<'a> = [Option<&'a String>; 5];

const NAMES: [&str; 5] = ["crc32", "crc32c", "crc64nvme", "sha1", "sha256"];

/// The one checksum among `fields`, if any; more than one is InvalidRequest, as on S3.
pub fn one_of(fields: Fields<'_>, what: &str) -> S3Result<Option<PartChecksum>> {
    let mut given = NAMES
        .iter()
        .zip(fields)
        .filter_map(|(name, value)| Some((*name, value?)));
    let first = given.next().map(|(name, value)| PartChecksum {
        algorithm: name.to_string(),
        value: value.trim().to_string(),
    });
    if given.next().is_some() {
        return Err(convert::invalid(
            S3ErrorCode::InvalidRequest,
            format!("{what} carries more than one checksum; send one x-amz-checksum-* algorithm"),
        ));
    }
    Ok(first)
}

/// A checksum's value in the field of its algorithm, for an answer.
pub fn fields(checksum: Option<&PartChecksum>) -> [Option<String>; 5] {
    NAMES.map(|name| {
        checksum
            .filter(|c| c.algorithm == name)
            .map(|c| c.value.clone())
    })
}

/// The checksums a completion declares, as text for its fingerprint (empty when none).
pub fn declared(
    listed: &[(i32, Option<PartChecksum>)],
    whole: Option<&PartChecksum>,
    kind: Option<&str>,
) -> String {
    let mut out: String = listed
        .iter()
        .filter_map(|(n, c)| {
            Some(format!(
                "{n}:{}={}\n",
                c.as_ref()?.algorithm,
                c.as_ref()?.value
            ))
        })
        .collect();
    if let Some(w) = whole {
        out.push_str(&format!(
            "object:{}={}:{}\n",
            w.algorithm,
            w.value,
            kind.unwrap_or("")
        ));
    }
    out
}

/// The object's checksum to answer a repeated completion with: the one it declares, which the
/// first completion judged (the fingerprint holds them equal).
pub fn as_judged(
    whole: Option<PartChecksum>,
    kind: Option<&str>,
) -> Option<(PartChecksum, &'static str)> {
    let whole = whole?;
    let composite = match kind.map(str::to_ascii_uppercase).as_deref() {
        Some("COMPOSITE") => true,
        Some("FULL_OBJECT") => false,
        _ => whole.value.contains('-'),
    };
    Some((
        whole,
        if composite {
            "COMPOSITE"
        } else {
            "FULL_OBJECT"
        },
    ))
}

fn bad_digest(message: String) -> S3Error {
    S3Error::with_message(S3ErrorCode::BadDigest, message)
}

fn invalid_part(message: String) -> S3Error {
    convert::invalid(S3ErrorCode::InvalidPart, message)
}

/// Checks a completion: `listed` (part number and the checksum the client listed for it)
/// against the parts `uploaded`, and the object's checksum `whole` of type `kind`
/// (`COMPOSITE` or `FULL_OBJECT`; `None`: as its value's shape says). Returns the object's
/// checksum and type to answer with.
pub fn check(
    listed: &[(i32, Option<PartChecksum>)],
    uploaded: &BTreeMap<i32, PartInfo>,
    whole: Option<PartChecksum>,
    kind: Option<&str>,
) -> S3Result<Option<(PartChecksum, &'static str)>> {
    for (number, want) in listed {
        let Some(want) = want else { continue };
        // A part that is not there is the gate's InvalidPart, with the ETags.
        let Some(part) = uploaded.get(number) else {
            continue;
        };
        match &part.checksum {
            Some(have) if have == want => {}
            Some(have) if have.algorithm == want.algorithm => {
                return Err(invalid_part(format!(
                    "part {number} is listed with x-amz-checksum-{} {}, but it was uploaded with {}; list the checksum UploadPart answered",
                    want.algorithm, want.value, have.value
                )))
            }
            _ => {
                return Err(invalid_part(format!(
                    "part {number} is listed with x-amz-checksum-{}, but it was not uploaded with one; upload it with that checksum, or list it without",
                    want.algorithm
                )))
            }
        }
    }
    let kind = match kind.map(str::to_ascii_uppercase).as_deref() {
        None => None,
        Some("COMPOSITE") => Some(true),
        Some("FULL_OBJECT") => Some(false),
        Some(other) => {
            return Err(convert::invalid(
                S3ErrorCode::InvalidRequest,
                format!("x-amz-checksum-type {other:?} is neither COMPOSITE nor FULL_OBJECT"),
            ))
        }
    };
    let Some(whole) = whole else {
        return Ok(made_of_parts(listed, uploaded, kind));
    };
    let composite = kind.unwrap_or_else(|| whole.value.contains('-'));
    let mut sums = Vec::with_capacity(listed.len());
    for (number, _) in listed {
        let Some(part) = uploaded.get(number) else {
            continue;
        };
        match &part.checksum {
            Some(c) if c.algorithm == whole.algorithm => sums.push((c, part.size)),
            _ => {
                return Err(convert::invalid(
                    S3ErrorCode::InvalidRequest,
                    format!(
                        "the object's x-amz-checksum-{} cannot be checked: part {number} was uploaded without one; upload every part with x-amz-checksum-{}, or complete without the object's checksum",
                        whole.algorithm, whole.algorithm
                    ),
                ))
            }
        }
    }
    let (made, kind) = if composite {
        (composite_of(&whole.algorithm, &sums)?, "COMPOSITE")
    } else {
        (full_object_of(&whole.algorithm, &sums)?, "FULL_OBJECT")
    };
    if made != whole.value {
        return Err(bad_digest(format!(
            "the object's x-amz-checksum-{} ({kind}) is {made} by its parts' checksums, not {}; nothing was written",
            whole.algorithm, whole.value
        )));
    }
    Ok(Some((whole, kind)))
}

/// The object's checksum when the completion declares none but every part was uploaded with
/// one of the same algorithm, as S3 makes it then: COMPOSITE, or FULL_OBJECT for CRC64NVME
/// (which has no composite form) or when the completion asks for it.
fn made_of_parts(
    listed: &[(i32, Option<PartChecksum>)],
    uploaded: &BTreeMap<i32, PartInfo>,
    composite: Option<bool>,
) -> Option<(PartChecksum, &'static str)> {
    let mut sums = Vec::with_capacity(listed.len());
    for (number, _) in listed {
        let part = uploaded.get(number)?;
        sums.push((part.checksum.as_ref()?, part.size));
    }
    let algorithm = sums.first()?.0.algorithm.clone();
    if sums.iter().any(|(c, _)| c.algorithm != algorithm) {
        return None;
    }
    let composite = composite.unwrap_or(algorithm != "crc64nvme");
    let (value, kind) = match composite {
        true => (composite_of(&algorithm, &sums).ok()?, "COMPOSITE"),
        false => (full_object_of(&algorithm, &sums).ok()?, "FULL_OBJECT"),
    };
    Some((PartChecksum { algorithm, value }, kind))
}

fn decoded(value: &str) -> S3Result<Vec<u8>> {
    base64_decode(value).map_err(|_| {
        convert::invalid(
            S3ErrorCode::InvalidRequest,
            format!("{value:?} is not a base64 checksum"),
        )
    })
}

/// S3's COMPOSITE checksum: the checksum of the parts' raw checksums, then `-` and the count.
fn composite_of(algorithm: &str, sums: &[(&PartChecksum, u64)]) -> S3Result<String> {
    let mut raw = Vec::new();
    for (c, _) in sums {
        raw.extend(decoded(&c.value)?);
    }
    let digest: Vec<u8> =
        match algorithm {
            "crc32" => hash::<s3s::crypto::Crc32>(&raw),
            "crc32c" => hash::<s3s::crypto::Crc32c>(&raw),
            "sha1" => hash::<s3s::crypto::Sha1>(&raw),
            "sha256" => hash::<s3s::crypto::Sha256>(&raw),
            _ => return Err(convert::invalid(
                S3ErrorCode::InvalidRequest,
                "CRC64NVME is a FULL_OBJECT checksum only; send x-amz-checksum-type: FULL_OBJECT",
            )),
        };
    Ok(format!("{}-{}", base64_encode(digest), sums.len()))
}

fn hash<C: s3s::crypto::Checksum>(raw: &[u8]) -> Vec<u8> {
    let mut c = C::new();
    c.update(raw);
    c.finalize().as_ref().to_vec()
}

/// S3's FULL_OBJECT checksum: the parts' CRCs combined into the whole object's.
fn full_object_of(algorithm: &str, sums: &[(&PartChecksum, u64)]) -> S3Result<String> {
    use crc_fast::CrcAlgorithm;
    let (crc, width) = match algorithm {
        "crc32" => (CrcAlgorithm::Crc32IsoHdlc, 4),
        "crc32c" => (CrcAlgorithm::Crc32Iscsi, 4),
        "crc64nvme" => (CrcAlgorithm::Crc64Nvme, 8),
        other => {
            return Err(convert::invalid(
                S3ErrorCode::InvalidRequest,
                format!("{} is a COMPOSITE checksum only; send x-amz-checksum-type: COMPOSITE with the checksum of the parts' checksums", other.to_ascii_uppercase()),
            ))
        }
    };
    let mut whole: Option<u64> = None;
    for (c, size) in sums {
        let raw = decoded(&c.value)?;
        if raw.len() != width {
            return Err(convert::invalid(
                S3ErrorCode::InvalidRequest,
                format!("{:?} is not a {algorithm} checksum", c.value),
            ));
        }
        let value = raw.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        whole = Some(match whole {
            None => value,
            Some(w) => crc_fast::checksum_combine(crc, w, value, *size),
        });
    }
    let value = whole.unwrap_or(0);
    Ok(base64_encode(&value.to_be_bytes()[8 - width..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64<C: s3s::crypto::Checksum>(data: &[u8]) -> String {
        base64_encode(hash::<C>(data))
    }

    fn part(number: i32, data: &[u8], algorithm: &str) -> PartInfo {
        let value = match algorithm {
            "crc32" => b64::<s3s::crypto::Crc32>(data),
            "crc32c" => b64::<s3s::crypto::Crc32c>(data),
            "crc64nvme" => b64::<s3s::crypto::Crc64Nvme>(data),
            "sha256" => b64::<s3s::crypto::Sha256>(data),
            _ => b64::<s3s::crypto::Sha1>(data),
        };
        PartInfo {
            number,
            etag: String::new(),
            size: data.len() as u64,
            last_modified_ms: 0,
            checksum: Some(PartChecksum {
                algorithm: algorithm.into(),
                value,
            }),
        }
    }

    #[test]
    fn full_object_crcs_are_the_whole_bodys() {
        for (algorithm, whole) in [
            ("crc32", b64::<s3s::crypto::Crc32>(b"hello world, again")),
            ("crc32c", b64::<s3s::crypto::Crc32c>(b"hello world, again")),
            (
                "crc64nvme",
                b64::<s3s::crypto::Crc64Nvme>(b"hello world, again"),
            ),
        ] {
            let uploaded: BTreeMap<i32, PartInfo> = [
                (1, part(1, b"hello ", algorithm)),
                (2, part(2, b"world", algorithm)),
                (3, part(3, b", again", algorithm)),
            ]
            .into();
            let listed: Vec<(i32, Option<PartChecksum>)> = (1..=3)
                .map(|n| (n, uploaded[&n].checksum.clone()))
                .collect();
            let want = PartChecksum {
                algorithm: algorithm.into(),
                value: whole.clone(),
            };
            let got = check(&listed, &uploaded, Some(want.clone()), Some("FULL_OBJECT"))
                .unwrap()
                .unwrap();
            assert_eq!(got, (want, "FULL_OBJECT"), "{algorithm}");
            let wrong = PartChecksum {
                algorithm: algorithm.into(),
                value: b64::<s3s::crypto::Crc64Nvme>(b"other")[..whole.len()].to_string(),
            };
            let e = check(&listed, &uploaded, Some(wrong), None).unwrap_err();
            assert_eq!(*e.code(), S3ErrorCode::BadDigest, "{algorithm}");
        }
    }

    #[test]
    fn composite_checksums_are_of_the_parts_checksums() {
        let uploaded: BTreeMap<i32, PartInfo> =
            [(1, part(1, b"a", "sha256")), (2, part(2, b"b", "sha256"))].into();
        let mut raw = Vec::new();
        for n in [1, 2] {
            let value = &uploaded[&n].checksum.as_ref().unwrap().value;
            raw.extend(base64_decode(value).unwrap());
        }
        let value = format!("{}-2", b64::<s3s::crypto::Sha256>(&raw));
        let listed = vec![(1, None), (2, None)];
        let whole = PartChecksum {
            algorithm: "sha256".into(),
            value,
        };
        assert!(check(&listed, &uploaded, Some(whole.clone()), None).is_ok());
        let mut wrong = whole;
        wrong.value = format!("{}-2", b64::<s3s::crypto::Sha256>(b"x"));
        assert_eq!(
            *check(&listed, &uploaded, Some(wrong), None)
                .unwrap_err()
                .code(),
            S3ErrorCode::BadDigest
        );
    }

    #[test]
    fn what_cannot_be_judged_is_refused() {
        let mut uploaded: BTreeMap<i32, PartInfo> =
            [(1, part(1, b"a", "crc32")), (2, part(2, b"b", "crc32"))].into();
        // A part listed with another value than it was uploaded with.
        let listed = vec![(
            1,
            Some(PartChecksum {
                algorithm: "crc32".into(),
                value: "AAAAAA==".into(),
            }),
        )];
        assert_eq!(
            *check(&listed, &uploaded, None, None).unwrap_err().code(),
            S3ErrorCode::InvalidPart
        );
        // The object's checksum over a part uploaded without one.
        uploaded.get_mut(&2).unwrap().checksum = None;
        let listed = vec![(1, None), (2, None)];
        let whole = PartChecksum {
            algorithm: "crc32".into(),
            value: "AAAAAA==".into(),
        };
        assert_eq!(
            *check(&listed, &uploaded, Some(whole), Some("FULL_OBJECT"))
                .unwrap_err()
                .code(),
            S3ErrorCode::InvalidRequest
        );
        // Two checksums for one thing.
        let a = "x".to_string();
        assert!(one_of([Some(&a), None, None, Some(&a), None], "the part").is_err());
        assert_eq!(
            one_of([None, Some(&a), None, None, None], "the part")
                .unwrap()
                .unwrap()
                .algorithm,
            "crc32c"
        );
    }
}
