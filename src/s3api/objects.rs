//! Object operations: PutObject, DeleteObject and DeleteObjects go through the gate's fenced
//! write path; GetObject and HeadObject pass through with ranges and the conditional headers.
//! CopyObject is in `copy.rs`.

use super::convert::{self, s3_error, ReadConditions};
use super::S3Gateway;
use crate::gate::{GateError, WriteRequest};
use crate::http::headers;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

pub(super) fn note(bucket: &str, key: &str) {
    let span = tracing::Span::current();
    span.record("bucket", bucket);
    span.record("key", key);
}

/// The name of the principal an S3 request was authenticated as (an `Idempotency-Key` is
/// scoped to it).
/// Who sent the request: the principal the access check found, or the one its credentials name.
pub(super) fn principal<T>(gw: &S3Gateway, req: &S3Request<T>) -> S3Result<crate::auth::Principal> {
    Ok(match req.extensions.get::<crate::auth::Principal>() {
        Some(p) => p.clone(),
        None => gw.keys.s3_principal(req.credentials.as_ref())?,
    })
}

pub(super) fn principal_name<T>(gw: &S3Gateway, req: &S3Request<T>) -> S3Result<String> {
    Ok(principal(gw, req)?.name())
}

/// `Idempotent-Replayed: true` on an S3 answer replayed from an earlier request.
pub(super) fn replayed<T>(mut resp: S3Response<T>, replayed: bool) -> S3Response<T> {
    headers::mark_replayed(&mut resp.headers, replayed);
    resp
}

pub(super) fn write_request(
    req_headers: &http::HeaderMap,
    (bucket, key, who): (&str, &str, &str),
    token: crate::gate::TokenInput,
    meta: crate::backend::ObjectMeta,
) -> S3Result<WriteRequest> {
    headers::write_request(req_headers, (bucket, key), who, token, || Ok(meta)).map_err(s3_error)
}

pub async fn put_object(
    gw: &S3Gateway,
    req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    super::unkept::refuse_on_write(&req.headers)?;
    let who = principal_name(gw, &req)?;
    let input = req.input;
    note(&input.bucket, &input.key);
    // No length is needed: the body streams, bounded by the object size limit (chunked.rs).
    let token = convert::token(
        &req.headers,
        input.metadata.as_ref(),
        super::access::lease_token(&req.extensions),
    );
    let mut meta = convert::object_meta(
        input.content_type.clone(),
        input.metadata.as_ref(),
        &req.headers,
    )?;
    let signed = super::chunked::Signed {
        extensions: &req.extensions,
        headers: &req.headers,
        credentials: req.credentials.as_ref(),
    };
    let source = super::chunked::request_body(signed, input.body, gw.max_body_bytes)?;
    let declared = crate::http::digests::Declared::of(
        &req.headers,
        source.trailers,
        input.content_md5.as_deref(),
    )?;
    // The checksum the body proves to have is kept with the object, as S3 keeps it: known now
    // when a header declares it (a store upload made before the body ends carries it too),
    // once the body has ended when a trailer does.
    meta.checksum = declared
        .up_front()
        .map(|(algorithm, value)| crate::backend::KeptChecksum {
            algorithm: algorithm.into(),
            value,
            kind: "FULL_OBJECT".into(),
        });
    meta.checksum_at_end = Some(declared.verified());
    let write = write_request(&req.headers, (&input.bucket, &input.key, &who), token, meta)?;
    let body = convert::body(
        source.stream,
        gw.max_body_bytes,
        gw.body_idle_timeout,
        declared,
    )?;
    let written = gw.gate.put(write, body).await.map_err(s3_error)?;
    let resp = S3Response::new(PutObjectOutput {
        e_tag: written.etag.as_deref().map(convert::etag),
        size: Some(written.size as i64),
        ..Default::default()
    });
    Ok(replayed(resp, written.replayed))
}

/// Buckets are unversioned: the one version of an object is `null`, and asking for another is
/// AWS's 400, never the current object passed off as that version.
pub(super) fn unversioned(version_id: Option<&str>) -> S3Result<()> {
    match version_id {
        None | Some("null") => Ok(()),
        Some(_) => Err(convert::invalid(
            S3ErrorCode::InvalidArgument,
            "Invalid version id specified: this bucket is not versioned, so the only version id is \"null\"",
        )),
    }
}

/// The range asked for, checked against the object's size: (first, last) inclusive.
fn byte_range(range: Option<&Range>, size: u64) -> S3Result<Option<(u64, u64)>> {
    let Some(range) = range else {
        return Ok(None);
    };
    match range.check(size) {
        Ok(r) if r.start < r.end => Ok(Some((r.start, r.end - 1))),
        _ => {
            let mut err = S3Error::with_message(
                S3ErrorCode::InvalidRange,
                format!("the range is not satisfiable for an object of {size} bytes"),
            );
            err.set_status_code(http::StatusCode::RANGE_NOT_SATISFIABLE);
            Err(err)
        }
    }
}

pub async fn get_object(
    gw: &S3Gateway,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    super::unkept::refuse_on_read(&req.headers)?;
    let input = req.input;
    note(&input.bucket, &input.key);
    unversioned(input.version_id.as_deref())?;
    let conditions = ReadConditions {
        if_match: input.if_match.as_ref(),
        if_none_match: input.if_none_match.as_ref(),
        if_modified_since: input.if_modified_since.as_ref(),
        if_unmodified_since: input.if_unmodified_since.as_ref(),
    };
    if let Some(number) = input.part_number {
        let number = part_number(number, input.range.is_some())?;
        let part = gw
            .gate
            .get_part(&input.bucket, &input.key, number, true)
            .await
            .map_err(s3_error)?;
        conditions.check(&part.info, false)?;
        let range = part_range(&part);
        let body = part.body.expect("the part's bytes were asked for");
        // 206, as s3s answers any GetObject with a Content-Range (and answer::finish a HEAD).
        return Ok(S3Response::new(GetObjectOutput {
            parts_count: part.span.count.map(|c| c as i32),
            ..object_output(&part.info, body, part.span.len, range)
        }));
    }
    let (info, body, range) = match &input.range {
        None => {
            let (info, body) = gw
                .gate
                .get(&input.bucket, &input.key)
                .await
                .map_err(s3_error)?;
            (info, body, None)
        }
        Some(_) => {
            // The range is judged on the version the HEAD saw; a write landing before the read
            // opens the object changes its size, so the read must be of that same version
            // (a shrunk object would make `last + 1 - first` underflow).
            let mut attempt = 0;
            loop {
                let head = gw
                    .gate
                    .head(&input.bucket, &input.key)
                    .await
                    .map_err(s3_error)?;
                conditions.check(&head, false)?;
                let (first, last) =
                    byte_range(input.range.as_ref(), head.size)?.expect("a range was given");
                let (info, body) = gw
                    .gate
                    .get_range(&input.bucket, &input.key, first, last)
                    .await
                    .map_err(s3_error)?;
                if info.etag == head.etag && info.size == head.size {
                    break (info, body, Some((first, last)));
                }
                attempt += 1;
                if attempt == 3 {
                    let mut err = S3Error::with_message(
                        S3ErrorCode::SlowDown,
                        "the object changed three times while its range was read; retry",
                    );
                    err.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
                    return Err(err);
                }
            }
        }
    };
    conditions.check(&info, false)?;
    let length = range.map_or(info.size, |(f, l)| (l - f).saturating_add(1));
    let content_range = range.map(|(f, l)| format!("bytes {f}-{l}/{}", info.size));
    let ([crc32, crc32c, crc64nvme, sha1, sha256], kind) = super::checksums::given(
        info.meta.checksum.as_ref(),
        range.is_none() && super::checksums::asked(input.checksum_mode.as_ref()),
    );
    Ok(S3Response::new(GetObjectOutput {
        checksum_crc32: crc32,
        checksum_crc32c: crc32c,
        checksum_crc64nvme: crc64nvme,
        checksum_sha1: sha1,
        checksum_sha256: sha256,
        checksum_type: kind,
        ..object_output(&info, body, length, content_range)
    }))
}

/// A `partNumber` as S3 takes it: 1 to 10,000, and never with a Range.
fn part_number(number: i32, with_range: bool) -> S3Result<u32> {
    if with_range {
        return Err(convert::invalid(
            S3ErrorCode::InvalidRequest,
            "Cannot specify both Range header and partNumber query parameter; send one of them",
        ));
    }
    match u32::try_from(number) {
        Ok(n @ 1..=10_000) => Ok(n),
        _ => Err(convert::invalid(
            S3ErrorCode::InvalidArgument,
            format!("Part number must be an integer between 1 and 10000, inclusive (got {number})"),
        )),
    }
}

/// The Content-Range of a part (none for an empty one, which has no byte to name).
fn part_range(part: &crate::backend::ObjectPart) -> Option<String> {
    let span = part.span;
    (span.len > 0).then(|| {
        format!(
            "bytes {}-{}/{}",
            span.offset,
            span.offset + span.len - 1,
            part.info.size
        )
    })
}

/// The stored Content-Type, or AWS's `binary/octet-stream` for an object written without one.
fn content_type(info: &crate::backend::ObjectInfo) -> String {
    info.meta
        .content_type
        .clone()
        .unwrap_or_else(|| "binary/octet-stream".into())
}

/// A GetObject answer of `length` bytes of the object `info` describes.
fn object_output(
    info: &crate::backend::ObjectInfo,
    body: crate::backend::ByteStream,
    length: u64,
    content_range: Option<String>,
) -> GetObjectOutput {
    GetObjectOutput {
        body: Some(convert::blob(body)),
        content_length: Some(length as i64),
        content_range,
        content_type: Some(content_type(info)),
        e_tag: Some(convert::etag(&info.etag)),
        last_modified: Some(convert::timestamp(info.last_modified_ms)),
        metadata: convert::metadata_of(&info.meta),
        cache_control: info.meta.header("cache-control"),
        content_disposition: info.meta.header("content-disposition"),
        content_encoding: info.meta.header("content-encoding"),
        content_language: info.meta.header("content-language"),
        expires: convert::expires(&info.meta),
        accept_ranges: Some("bytes".into()),
        tag_count: (!info.meta.tags.is_empty()).then_some(info.meta.tags.len() as i32),
        ..Default::default()
    }
}

pub async fn head_object(
    gw: &S3Gateway,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    super::unkept::refuse_on_read(&req.headers)?;
    let input = req.input;
    note(&input.bucket, &input.key);
    unversioned(input.version_id.as_deref())?;
    let part = match input.part_number {
        Some(number) => Some(
            gw.gate
                .get_part(
                    &input.bucket,
                    &input.key,
                    part_number(number, input.range.is_some())?,
                    false,
                )
                .await
                .map_err(s3_error)?,
        ),
        None => None,
    };
    let info = match &part {
        Some(part) => part.info.clone(),
        None => gw
            .gate
            .head(&input.bucket, &input.key)
            .await
            .map_err(s3_error)?,
    };
    ReadConditions {
        if_match: input.if_match.as_ref(),
        if_none_match: input.if_none_match.as_ref(),
        if_modified_since: input.if_modified_since.as_ref(),
        if_unmodified_since: input.if_unmodified_since.as_ref(),
    }
    .check(&info, false)?;
    let ([crc32, crc32c, crc64nvme, sha1, sha256], kind) = super::checksums::given(
        info.meta.checksum.as_ref(),
        part.is_none() && super::checksums::asked(input.checksum_mode.as_ref()),
    );
    Ok(S3Response::new(HeadObjectOutput {
        checksum_crc32: crc32,
        checksum_crc32c: crc32c,
        checksum_crc64nvme: crc64nvme,
        checksum_sha1: sha1,
        checksum_sha256: sha256,
        checksum_type: kind,
        content_length: Some(part.as_ref().map_or(info.size, |p| p.span.len) as i64),
        content_range: part.as_ref().and_then(part_range),
        parts_count: part.as_ref().and_then(|p| p.span.count).map(|c| c as i32),
        content_type: Some(content_type(&info)),
        e_tag: Some(convert::etag(&info.etag)),
        last_modified: Some(convert::timestamp(info.last_modified_ms)),
        metadata: convert::metadata_of(&info.meta),
        cache_control: info.meta.header("cache-control"),
        content_disposition: info.meta.header("content-disposition"),
        content_encoding: info.meta.header("content-encoding"),
        content_language: info.meta.header("content-language"),
        expires: convert::expires(&info.meta),
        accept_ranges: Some("bytes".into()),
        ..Default::default()
    }))
}

pub async fn delete_object(
    gw: &S3Gateway,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let who = principal_name(gw, &req)?;
    let input = req.input;
    note(&input.bucket, &input.key);
    let token = convert::token(
        &req.headers,
        None,
        super::access::lease_token(&req.extensions),
    );
    let write = write_request(
        &req.headers,
        (&input.bucket, &input.key, &who),
        token,
        Default::default(),
    )?;
    match gw.gate.delete(write).await {
        // S3 answers 204 for a key that is already gone; nothing was recorded for it.
        Ok(w) => Ok(replayed(
            S3Response::new(DeleteObjectOutput::default()),
            w.replayed,
        )),
        Err(GateError::NoSuchKey { .. }) => Ok(S3Response::new(DeleteObjectOutput::default())),
        Err(e) => Err(s3_error(e)),
    }
}

pub async fn delete_objects(
    gw: &S3Gateway,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    let input = req.input;
    // A bucket that does not exist is the request's 404, as on AWS (not a NoSuchBucket per key
    // inside a 200, which object_store and others read as a generic failure).
    super::bucket_config::existing(gw, &input.bucket)?;
    let quiet = input.delete.quiet.unwrap_or(false);
    if input.delete.objects.len() > 1000 {
        return Err(convert::invalid(
            S3ErrorCode::MalformedXML,
            "DeleteObjects takes at most 1000 keys",
        ));
    }
    let token = convert::token(
        &req.headers,
        None,
        super::access::lease_token(&req.extensions),
    );
    gw.gate
        .admit_batch_delete(&input.bucket, &token)
        .map_err(s3_error)?;
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    let who = match req.extensions.get::<crate::auth::Principal>() {
        Some(p) => p.clone(),
        None => gw.keys.s3_principal(req.credentials.as_ref())?,
    };
    let scope_header = headers::scope(&req.headers).map_err(s3_error)?;
    // Key by key: each is authorized and fenced on its own scope, and each failure is
    // reported on its own.
    for object in input.delete.objects {
        let allowed = gw.keys.authorize(
            &who,
            crate::auth::Action::Object {
                perm: crate::config::Permission::Delete,
                bucket: &input.bucket,
                key: &object.key,
                scope_header: scope_header.as_deref(),
            },
        );
        if let Err(e) = allowed {
            errors.push(s3s::dto::Error {
                key: Some(object.key),
                code: Some(e.code().to_string()),
                message: Some(e.to_string()),
                ..Default::default()
            });
            continue;
        }
        let write = WriteRequest {
            bucket: input.bucket.clone(),
            key: object.key.clone(),
            token: token.clone(),
            scope_header: headers::scope(&req.headers).map_err(s3_error)?,
            scope_takeover: headers::scope_takeover(&req.headers).map_err(s3_error)?,
            conditions: Default::default(),
            meta: Default::default(),
            // One key per request: a batch's keys would all share it.
            idempotency: None,
        };
        match gw.gate.delete(write).await {
            Ok(_) | Err(GateError::NoSuchKey { .. }) => {
                if !quiet {
                    deleted.push(DeletedObject {
                        key: Some(object.key),
                        ..Default::default()
                    });
                }
            }
            Err(e) => errors.push(Error {
                code: Some(e.code().to_string()),
                key: Some(object.key),
                message: Some(e.to_string()),
                version_id: None,
            }),
        }
    }
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted: Some(deleted),
        errors: (!errors.is_empty()).then_some(errors),
        ..Default::default()
    }))
}
