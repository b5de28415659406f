//! The checksums kept with an object, given back as S3 gives them: on HEAD and GET when the
//! client asks (`x-amz-checksum-mode: ENABLED`, which the SDKs send to validate what they
//! read), and in GetObjectAttributes. A checksum is kept when the write declared one and the
//! body was proved to have it (a header, an aws-chunked trailer, or a multipart completion's
//! full-object or composite checksum).

use super::convert::{self, s3_error};
use super::part_checksums;
use super::S3Gateway;
use crate::backend::{KeptChecksum, ObjectInfo, PartChecksum};
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};

/// What an answer carries of `kept`, nothing unless the client asked for it: the five
/// `x-amz-checksum-*` fields in [`part_checksums::fields`]' order (one set at most), and the
/// checksum's type.
pub fn given(
    kept: Option<&KeptChecksum>,
    asked: bool,
) -> ([Option<String>; 5], Option<ChecksumType>) {
    let kept = kept.filter(|_| asked);
    let as_part = kept.map(|k| PartChecksum {
        algorithm: k.algorithm.clone(),
        value: k.value.clone(),
    });
    (
        part_checksums::fields(as_part.as_ref()),
        kept.map(|k| ChecksumType::from(k.kind.clone())),
    )
}

/// Whether a HEAD or GET asked for the checksum.
pub fn asked(mode: Option<&ChecksumMode>) -> bool {
    mode.is_some_and(|m| m.as_str().eq_ignore_ascii_case(ChecksumMode::ENABLED))
}

/// GetObjectAttributes: the object's ETag, size, checksum, storage class and part count, as
/// many of them as were asked for.
pub async fn attributes(
    gw: &S3Gateway,
    req: S3Request<GetObjectAttributesInput>,
) -> S3Result<S3Response<GetObjectAttributesOutput>> {
    super::unkept::refuse_on_read(&req.headers)?;
    let input = req.input;
    super::objects::unversioned(input.version_id.as_deref())?;
    let info = gw
        .gate
        .head(&input.bucket, &input.key)
        .await
        .map_err(s3_error)?;
    // One header, or several: each a comma-separated list of names.
    let asked: Vec<&str> = input
        .object_attributes
        .iter()
        .flat_map(|a| a.as_str().split(','))
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect();
    const KNOWN: [&str; 5] = [
        ObjectAttributes::ETAG,
        ObjectAttributes::CHECKSUM,
        ObjectAttributes::OBJECT_PARTS,
        ObjectAttributes::STORAGE_CLASS,
        ObjectAttributes::OBJECT_SIZE,
    ];
    if let Some(unknown) = asked.iter().find(|a| !KNOWN.contains(a)) {
        return Err(convert::invalid(
            S3ErrorCode::InvalidArgument,
            format!("Invalid attribute name specified: {unknown:?}; ask for ETag, Checksum, ObjectParts, StorageClass or ObjectSize"),
        ));
    }
    if asked.is_empty() {
        return Err(convert::invalid(
            S3ErrorCode::InvalidArgument,
            "x-amz-object-attributes names no attribute; ask for ETag, Checksum, ObjectParts, StorageClass or ObjectSize",
        ));
    }
    let wants = |name: &str| asked.contains(&name);
    Ok(S3Response::new(GetObjectAttributesOutput {
        e_tag: wants(ObjectAttributes::ETAG).then(|| convert::etag(&info.etag)),
        object_size: wants(ObjectAttributes::OBJECT_SIZE).then_some(info.size as i64),
        storage_class: wants(ObjectAttributes::STORAGE_CLASS)
            .then(|| StorageClass::from_static(StorageClass::STANDARD)),
        checksum: wants(ObjectAttributes::CHECKSUM)
            .then(|| checksum_of(&info))
            .flatten(),
        object_parts: wants(ObjectAttributes::OBJECT_PARTS)
            .then(|| parts_of(&info))
            .flatten(),
        last_modified: Some(convert::timestamp(info.last_modified_ms)),
        ..Default::default()
    }))
}

fn checksum_of(info: &ObjectInfo) -> Option<Checksum> {
    let ([crc32, crc32c, crc64nvme, sha1, sha256], kind) = given(info.meta.checksum.as_ref(), true);
    kind.as_ref()?;
    Some(Checksum {
        checksum_crc32: crc32,
        checksum_crc32c: crc32c,
        checksum_crc64nvme: crc64nvme,
        checksum_sha1: sha1,
        checksum_sha256: sha256,
        checksum_type: kind,
    })
}

/// The part count of an object completed from parts (its ETag says how many: `"…-N"`).
fn parts_of(info: &ObjectInfo) -> Option<GetObjectAttributesParts> {
    let count = info
        .etag
        .trim_matches('"')
        .rsplit_once('-')
        .and_then(|(_, n)| n.parse::<i32>().ok())?;
    Some(GetObjectAttributesParts {
        total_parts_count: Some(count),
        ..Default::default()
    })
}
