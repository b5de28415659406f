//! Multipart uploads over S3: the token comes with CreateMultipartUpload and is kept with the
//! upload; the completion is the fenced commit. Part numbers and counts are bounded.

use super::convert::{self, s3_error, ReadConditions};
use super::copy::copy_source;
use super::{part_checksums, S3Gateway};
use crate::backend::PartChecksum;
use crate::gate::WriteRequest;
use crate::http::headers;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

fn note(bucket: &str, key: &str) {
    let span = tracing::Span::current();
    span.record("bucket", bucket);
    span.record("key", key);
}

fn check_part_number(gw: &S3Gateway, number: i32) -> S3Result<()> {
    if number < 1 || number as i64 > i64::from(gw.max_parts) {
        return Err(convert::invalid(
            S3ErrorCode::InvalidArgument,
            format!(
                "part number {number} is outside 1..={}; split the object into fewer, larger parts",
                gw.max_parts
            ),
        ));
    }
    Ok(())
}

pub async fn create(
    gw: &S3Gateway,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    super::unkept::refuse_on_write(&req.headers)?;
    let owner = super::objects::principal(gw, &req)?.owner();
    let input = req.input;
    note(&input.bucket, &input.key);
    crate::http::digests::Declared::refuse_on(&req.headers, "CreateMultipartUpload")?;
    let write = WriteRequest {
        bucket: input.bucket.clone(),
        key: input.key.clone(),
        token: convert::token(
            &req.headers,
            input.metadata.as_ref(),
            super::access::lease_token(&req.extensions),
        ),
        scope_header: headers::scope(&req.headers).map_err(s3_error)?,
        scope_takeover: headers::scope_takeover(&req.headers).map_err(s3_error)?,
        // S3 takes an upload's conditions at its completion.
        conditions: Default::default(),
        meta: convert::object_meta(
            input.content_type.clone(),
            input.metadata.as_ref(),
            &req.headers,
        )?,
        idempotency: None,
    };
    let upload = gw
        .gate
        .create_upload(write, &owner)
        .await
        .map_err(s3_error)?;
    Ok(S3Response::new(CreateMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(upload.id),
        ..Default::default()
    }))
}

pub async fn upload_part(
    gw: &S3Gateway,
    req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    super::unkept::refuse_on_part(&req.headers)?;
    let input = req.input;
    note(&input.bucket, &input.key);
    check_part_number(gw, input.part_number)?;
    let signed = super::chunked::Signed {
        extensions: &req.extensions,
        headers: &req.headers,
        credentials: req.credentials.as_ref(),
    };
    let source = super::chunked::request_body(signed, input.body, gw.max_body_bytes)?;
    // An aws-chunked part's length is the one it declared it decodes to.
    let Some(size) = source
        .length
        .or(input.content_length.map(|n| n.max(0) as u64))
    else {
        let mut err = S3Error::with_message(
            S3ErrorCode::MissingContentLength,
            "UploadPart needs a Content-Length (or, for an aws-chunked body, x-amz-decoded-content-length)",
        );
        err.set_status_code(http::StatusCode::LENGTH_REQUIRED);
        return Err(err);
    };
    let declared = crate::http::digests::Declared::of(
        &req.headers,
        source.trailers,
        input.content_md5.as_deref(),
    )?;
    let verified = declared.verified();
    let body = convert::body(
        source.stream,
        gw.max_body_bytes,
        gw.body_idle_timeout,
        declared,
    )?;
    let part = gw
        .gate
        .upload_part(
            &input.bucket,
            &input.key,
            &input.upload_id,
            input.part_number,
            convert::token(
                &req.headers,
                None,
                super::access::lease_token(&req.extensions),
            ),
            body,
            Some(size),
            move || {
                verified.checksum().map(|(algorithm, value)| PartChecksum {
                    algorithm: algorithm.to_string(),
                    value,
                })
            },
        )
        .await
        .map_err(s3_error)?;
    let [crc32, crc32c, crc64nvme, sha1, sha256] = part_checksums::fields(part.checksum.as_ref());
    Ok(S3Response::new(UploadPartOutput {
        e_tag: Some(convert::etag(&part.etag)),
        checksum_crc32: crc32,
        checksum_crc32c: crc32c,
        checksum_crc64nvme: crc64nvme,
        checksum_sha1: sha1,
        checksum_sha256: sha256,
        ..Default::default()
    }))
}

/// `bytes=first-last` of a copy source, both required (S3's rule for UploadPartCopy).
fn source_range(range: Option<&str>, size: u64) -> S3Result<Option<(u64, u64)>> {
    let Some(range) = range else {
        return Ok(None);
    };
    let parsed = range
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)));
    match parsed {
        Some((first, last)) if first <= last && last < size => Ok(Some((first, last))),
        // Well formed but outside the source: S3's 416.
        Some((first, last)) if first <= last => {
            let mut err = convert::invalid(
                S3ErrorCode::InvalidRange,
                format!("x-amz-copy-source-range {range:?} is outside the source's {size} bytes"),
            );
            err.set_status_code(http::StatusCode::RANGE_NOT_SATISFIABLE);
            Err(err)
        }
        _ => Err(convert::invalid(
            S3ErrorCode::InvalidArgument,
            format!("x-amz-copy-source-range {range:?} must be bytes=first-last within the source's {size} bytes"),
        )),
    }
}

pub async fn upload_part_copy(
    gw: &S3Gateway,
    req: S3Request<UploadPartCopyInput>,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
    super::unkept::refuse_on_part(&req.headers)?;
    let input = req.input;
    note(&input.bucket, &input.key);
    check_part_number(gw, input.part_number)?;
    crate::http::digests::Declared::refuse_on(&req.headers, "UploadPartCopy")?;
    let (src_bucket, src_key) = copy_source(gw, &input.copy_source, req.credentials.as_ref())?;
    let head = gw.gate.head(src_bucket, src_key).await.map_err(s3_error)?;
    ReadConditions {
        if_match: input.copy_source_if_match.as_ref(),
        if_none_match: input.copy_source_if_none_match.as_ref(),
        if_modified_since: input.copy_source_if_modified_since.as_ref(),
        if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
    }
    .check(&head, true)?;
    let range = source_range(input.copy_source_range.as_deref(), head.size)?;
    let (first, last) = range.unwrap_or((0, head.size.saturating_sub(1)));
    let (info, body) = if head.size == 0 {
        gw.gate.get(src_bucket, src_key).await.map_err(s3_error)?
    } else {
        gw.gate
            .get_range(src_bucket, src_key, first, last)
            .await
            .map_err(s3_error)?
    };
    if info.etag != head.etag {
        // Changed between the check and the read: the conditions were judged on another version.
        return Err(S3Error::with_message(
            S3ErrorCode::PreconditionFailed,
            "the copy source changed while it was read; retry",
        ));
    }
    let size = if head.size == 0 { 0 } else { last + 1 - first };
    let part = gw
        .gate
        .upload_part(
            &input.bucket,
            &input.key,
            &input.upload_id,
            input.part_number,
            convert::token(
                &req.headers,
                None,
                super::access::lease_token(&req.extensions),
            ),
            body,
            Some(size),
            || None,
        )
        .await
        .map_err(s3_error)?;
    Ok(S3Response::new(UploadPartCopyOutput {
        copy_part_result: Some(CopyPartResult {
            e_tag: Some(convert::etag(&part.etag)),
            last_modified: Some(convert::timestamp(part.last_modified_ms)),
            ..Default::default()
        }),
        ..Default::default()
    }))
}

pub async fn complete(
    gw: &S3Gateway,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    // What the upload's object is (its tags, class, encryption) was fixed at its creation.
    super::unkept::refuse_on_part(&req.headers)?;
    let input = req.input;
    note(&input.bucket, &input.key);
    let listed = input
        .multipart_upload
        .and_then(|m| m.parts)
        .unwrap_or_default();
    if listed.len() > gw.max_parts as usize {
        return Err(convert::invalid(
            S3ErrorCode::InvalidArgument,
            format!(
                "{} parts listed; at most {} are allowed",
                listed.len(),
                gw.max_parts
            ),
        ));
    }
    let mut parts = Vec::with_capacity(listed.len());
    let mut checksums = Vec::with_capacity(listed.len());
    for p in listed {
        let checksum = part_checksums::one_of(
            [
                p.checksum_crc32.as_ref(),
                p.checksum_crc32c.as_ref(),
                p.checksum_crc64nvme.as_ref(),
                p.checksum_sha1.as_ref(),
                p.checksum_sha256.as_ref(),
            ],
            "a Part",
        )?;
        match (p.part_number, p.e_tag) {
            (Some(n), Some(e)) => {
                parts.push((n, e.value().to_string()));
                checksums.push((n, checksum));
            }
            _ => {
                return Err(convert::invalid(
                    S3ErrorCode::MalformedXML,
                    "every Part needs a PartNumber and an ETag",
                ))
            }
        }
    }
    let whole = part_checksums::one_of(
        [
            input.checksum_crc32.as_ref(),
            input.checksum_crc32c.as_ref(),
            input.checksum_crc64nvme.as_ref(),
            input.checksum_sha1.as_ref(),
            input.checksum_sha256.as_ref(),
        ],
        "the completion",
    )?;
    let kind = input.checksum_type.as_ref().map(|t| t.as_str());
    // What the answer vouches for is in the completion's fingerprint: a repeated completion
    // (the upload gone) is answered as the first only if it declares the same checksums,
    // which the first completion judged.
    let declared = part_checksums::declared(&checksums, whole.as_ref(), kind);
    // Judged before anything is assembled. An upload that is gone is the gate's to answer
    // (a completion answered before is answered again).
    let checked = match gw
        .gate
        .upload(&input.bucket, &input.key, &input.upload_id)
        .await
    {
        Ok(upload) => part_checksums::check(&checksums, &upload.parts, whole, kind)?,
        Err(_) => part_checksums::as_judged(whole, kind),
    };
    let write = WriteRequest {
        bucket: input.bucket.clone(),
        key: input.key.clone(),
        token: convert::token(
            &req.headers,
            None,
            super::access::lease_token(&req.extensions),
        ),
        // The scope was fixed when the upload was created.
        scope_header: None,
        scope_takeover: headers::scope_takeover(&req.headers).map_err(s3_error)?,
        conditions: headers::conditions(&req.headers).map_err(s3_error)?,
        // The object's checksum, judged above, kept with it; the rest is the upload's.
        meta: crate::backend::ObjectMeta {
            checksum: checked
                .as_ref()
                .map(|(c, kind)| crate::backend::KeptChecksum {
                    algorithm: c.algorithm.clone(),
                    value: c.value.clone(),
                    kind: kind.to_string(),
                }),
            ..Default::default()
        },
        // Keyed by its upload id in the gate, whatever the client sends.
        idempotency: None,
    };
    let written = gw
        .gate
        .complete_upload(write, &input.upload_id, &parts, &declared)
        .await
        .map_err(s3_error)?;
    let [crc32, crc32c, crc64nvme, sha1, sha256] =
        part_checksums::fields(checked.as_ref().map(|(c, _)| c));
    let resp = S3Response::new(CompleteMultipartUploadOutput {
        bucket: Some(input.bucket.clone()),
        key: Some(input.key.clone()),
        e_tag: written.etag.as_deref().map(convert::etag),
        location: Some(format!("/{}/{}", input.bucket, input.key)),
        checksum_crc32: crc32,
        checksum_crc32c: crc32c,
        checksum_crc64nvme: crc64nvme,
        checksum_sha1: sha1,
        checksum_sha256: sha256,
        checksum_type: checked.map(|(_, kind)| ChecksumType::from_static(kind)),
        ..Default::default()
    });
    Ok(super::objects::replayed(resp, written.replayed))
}

pub async fn abort(
    gw: &S3Gateway,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let input = req.input;
    note(&input.bucket, &input.key);
    gw.gate
        .abort_upload(
            &input.bucket,
            &input.key,
            &input.upload_id,
            convert::token(
                &req.headers,
                None,
                super::access::lease_token(&req.extensions),
            ),
        )
        .await
        .map_err(s3_error)?;
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

pub async fn list_uploads(
    gw: &S3Gateway,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let input = req.input;
    let prefix = input.prefix.clone().unwrap_or_default();
    let max = input.max_uploads.unwrap_or(1000).clamp(0, 1000) as usize;
    let marker = input.key_marker.clone();
    let mut uploads: Vec<_> = gw
        .gate
        .uploads(&input.bucket, &prefix)
        .await
        .map_err(s3_error)?
        .into_iter()
        .filter(|u| marker.as_deref().is_none_or(|m| u.key.as_str() > m))
        .collect();
    let truncated = uploads.len() > max;
    uploads.truncate(max);
    let next_key = truncated
        .then(|| uploads.last().map(|u| u.key.clone()))
        .flatten();
    Ok(S3Response::new(ListMultipartUploadsOutput {
        bucket: Some(input.bucket),
        prefix: Some(prefix),
        key_marker: input.key_marker,
        max_uploads: Some(max as i32),
        is_truncated: Some(truncated),
        next_key_marker: next_key,
        uploads: Some(
            uploads
                .into_iter()
                .map(|u| MultipartUpload {
                    key: Some(u.key),
                    upload_id: Some(u.id),
                    initiated: Some(convert::timestamp(u.initiated_ms)),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    }))
}

pub async fn list_parts(
    gw: &S3Gateway,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let input = req.input;
    note(&input.bucket, &input.key);
    let after: i32 = input.part_number_marker.unwrap_or(0);
    let max = input.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
    let mut parts: Vec<_> = gw
        .gate
        .list_parts(&input.bucket, &input.key, &input.upload_id)
        .await
        .map_err(s3_error)?
        .into_iter()
        .filter(|p| p.number > after)
        .collect();
    let truncated = parts.len() > max;
    parts.truncate(max);
    let next = truncated.then(|| parts.last().map(|p| p.number)).flatten();
    Ok(S3Response::new(ListPartsOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(input.upload_id),
        max_parts: Some(max as i32),
        is_truncated: Some(truncated),
        part_number_marker: input.part_number_marker,
        next_part_number_marker: next,
        parts: Some(
            parts
                .into_iter()
                .map(|p| {
                    let [crc32, crc32c, crc64nvme, sha1, sha256] =
                        part_checksums::fields(p.checksum.as_ref());
                    Part {
                        part_number: Some(p.number),
                        e_tag: Some(convert::etag(&p.etag)),
                        size: Some(p.size as i64),
                        last_modified: Some(convert::timestamp(p.last_modified_ms)),
                        checksum_crc32: crc32,
                        checksum_crc32c: crc32c,
                        checksum_crc64nvme: crc64nvme,
                        checksum_sha1: sha1,
                        checksum_sha256: sha256,
                    }
                })
                .collect(),
        ),
        ..Default::default()
    }))
}
