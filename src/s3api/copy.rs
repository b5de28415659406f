//! CopyObject: the source read through the gate, written to the target as a fenced PutObject
//! with the request's own token; and the copy source both CopyObject and UploadPartCopy read.

use super::convert::{self, s3_error, ReadConditions};
use super::objects::{note, principal_name, replayed, write_request};
use super::S3Gateway;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

/// The source of a copy: bucket and key, readable by the requester.
pub fn copy_source<'a>(
    gw: &S3Gateway,
    source: &'a CopySource,
    credentials: Option<&s3s::auth::Credentials>,
) -> S3Result<(&'a str, &'a str)> {
    match source {
        CopySource::Bucket {
            bucket,
            key,
            version_id: None,
        } => {
            gw.keys
                .s3_authorize(credentials, crate::auth::Action::Read { bucket })?;
            Ok((bucket, key))
        }
        _ => Err(S3Error::with_message(
            S3ErrorCode::NotImplemented,
            "copying from an access point or a version is not supported",
        )),
    }
}

pub async fn copy_object(
    gw: &S3Gateway,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    super::unkept::refuse_on_write(&req.headers)?;
    let who = principal_name(gw, &req)?;
    let input = req.input;
    note(&input.bucket, &input.key);
    crate::http::digests::Declared::refuse_on(&req.headers, "CopyObject")?;
    let (src_bucket, src_key) = copy_source(gw, &input.copy_source, req.credentials.as_ref())?;
    let replace = input
        .metadata_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
    let changes = replace
        || input.storage_class.is_some()
        || input.server_side_encryption.is_some()
        || input.website_redirect_location.is_some();
    if (src_bucket, src_key) == (input.bucket.as_str(), input.key.as_str()) && !changes {
        return Err(convert::invalid(
            S3ErrorCode::InvalidRequest,
            "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes; send x-amz-metadata-directive: REPLACE to rewrite it",
        ));
    }
    let (info, body) = gw.gate.get(src_bucket, src_key).await.map_err(s3_error)?;
    ReadConditions {
        if_match: input.copy_source_if_match.as_ref(),
        if_none_match: input.copy_source_if_none_match.as_ref(),
        if_modified_since: input.copy_source_if_modified_since.as_ref(),
        if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
    }
    .check(&info, true)?;
    // The token is the request's own, never the source object's.
    let token = convert::token(
        &req.headers,
        input.metadata.as_ref(),
        super::access::lease_token(&req.extensions),
    );
    let mut meta = if replace {
        convert::object_meta(
            input.content_type.clone(),
            input.metadata.as_ref(),
            &req.headers,
        )?
    } else {
        crate::backend::ObjectMeta {
            token: None,
            ..info.meta.clone()
        }
    };
    // Tags: the source's, unless the request replaces them (x-amz-tagging-directive).
    let replace_tags = input
        .tagging_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == TaggingDirective::REPLACE);
    meta.tags = match replace_tags {
        true => super::tags::from_headers(&req.headers)?,
        false if req.headers.contains_key("x-amz-tagging") => {
            return Err(convert::invalid(
                S3ErrorCode::InvalidRequest,
                "x-amz-tagging on a copy takes effect only with x-amz-tagging-directive: REPLACE; send both, or neither to keep the source's tags",
            ))
        }
        false => info.meta.tags.clone(),
    };
    // The copy has the source's bytes, so a checksum of the whole object still holds; one
    // made of the source's parts does not (the copy is written whole).
    meta.checksum = info
        .meta
        .checksum
        .clone()
        .filter(|c| c.kind == "FULL_OBJECT");
    let write = write_request(&req.headers, (&input.bucket, &input.key, &who), token, meta)?;
    let written = gw.gate.put(write, body).await.map_err(s3_error)?;
    let resp = S3Response::new(CopyObjectOutput {
        copy_object_result: Some(CopyObjectResult {
            e_tag: written.etag.as_deref().map(convert::etag),
            last_modified: Some(convert::timestamp(crate::wall_clock::now_ms())),
            ..Default::default()
        }),
        ..Default::default()
    });
    Ok(replayed(resp, written.replayed))
}
