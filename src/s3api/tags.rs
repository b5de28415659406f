//! Object tags, kept with the object's metadata on every backend: set by a write's
//! `x-amz-tagging` (PutObject, CreateMultipartUpload, CopyObject per its tagging directive),
//! read by GetObjectTagging, and changed by PutObjectTagging and DeleteObjectTagging.
//!
//! Tags live where the metadata lives, so changing them rewrites the object: the version
//! read is written again with the new tags, as a fenced write (the request's token, the
//! key's write permission), conditional on that version still being there. A write landing
//! in between makes the tag change fail (412), never undoes the write.

use super::convert::{self, s3_error};
use super::objects::{note, principal_name, replayed, write_request};
use super::S3Gateway;
use crate::gate::EtagMatch;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};
use std::collections::BTreeMap;

/// S3's limits: 10 tags an object, keys of 1 to 128 characters, values of up to 256.
const MAX_TAGS: usize = 10;
const MAX_KEY_CHARS: usize = 128;
const MAX_VALUE_CHARS: usize = 256;

fn invalid_tag(message: String) -> S3Error {
    let mut err = S3Error::with_message(S3ErrorCode::InvalidTag, message);
    err.set_status_code(http::StatusCode::BAD_REQUEST);
    err
}

/// Letters, digits, spaces and `_ . : / = + - @`, as S3 takes in tags. A space is U+0020 only:
/// a tab, a line break or another control character would not survive every store's headers.
fn allowed(text: &str) -> bool {
    text.chars()
        .all(|c| c.is_alphanumeric() || c == ' ' || "_.:/=+-@".contains(c))
}

/// A tag set as S3 takes it, or 400 `InvalidTag` naming what is wrong.
pub fn checked(pairs: Vec<(String, String)>) -> S3Result<BTreeMap<String, String>> {
    if pairs.len() > MAX_TAGS {
        return Err(invalid_tag(format!(
            "Object tags cannot be greater than {MAX_TAGS} ({} sent)",
            pairs.len()
        )));
    }
    let mut tags = BTreeMap::new();
    for (key, value) in pairs {
        let chars = key.chars().count();
        if chars == 0 || chars > MAX_KEY_CHARS || !allowed(&key) {
            return Err(invalid_tag(format!(
                "The TagKey you have provided is invalid ({key:?}): 1 to {MAX_KEY_CHARS} letters, digits, spaces or _ . : / = + - @"
            )));
        }
        if key.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("aws:")) {
            return Err(invalid_tag(format!(
                "Your TagKey cannot be prefixed with aws: ({key:?})"
            )));
        }
        if value.chars().count() > MAX_VALUE_CHARS || !allowed(&value) {
            return Err(invalid_tag(format!(
                "The TagValue you have provided is invalid (of {key:?}): up to {MAX_VALUE_CHARS} letters, digits, spaces or _ . : / = + - @"
            )));
        }
        if tags.insert(key.clone(), value).is_some() {
            return Err(invalid_tag(format!(
                "Cannot provide multiple Tags with the same key ({key:?})"
            )));
        }
    }
    Ok(tags)
}

/// The tags a write's `x-amz-tagging` sets (none without the header).
pub fn from_headers(headers: &http::HeaderMap) -> S3Result<BTreeMap<String, String>> {
    let mut values = headers.get_all("x-amz-tagging").iter();
    let Some(value) = values.next() else {
        return Ok(BTreeMap::new());
    };
    if values.next().is_some() {
        return Err(invalid_tag(
            "x-amz-tagging is sent twice; send the tags once, as k1=v1&k2=v2".into(),
        ));
    }
    let text = value
        .to_str()
        .map_err(|_| invalid_tag("x-amz-tagging is not URL-encoded ASCII".into()))?;
    checked(crate::backend::decode_tags(text))
}

/// GetObjectTagging: the tags kept with the object.
pub async fn get(
    gw: &S3Gateway,
    req: S3Request<GetObjectTaggingInput>,
) -> S3Result<S3Response<GetObjectTaggingOutput>> {
    let input = req.input;
    super::objects::unversioned(input.version_id.as_deref())?;
    let info = gw
        .gate
        .head(&input.bucket, &input.key)
        .await
        .map_err(s3_error)?;
    Ok(S3Response::new(GetObjectTaggingOutput {
        tag_set: info
            .meta
            .tags
            .into_iter()
            .map(|(key, value)| Tag {
                key: Some(key),
                value: Some(value),
            })
            .collect(),
        version_id: None,
    }))
}

/// PutObjectTagging: the object rewritten with these tags in place of its own.
pub async fn put(
    gw: &S3Gateway,
    req: S3Request<PutObjectTaggingInput>,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    super::objects::unversioned(req.input.version_id.as_deref())?;
    let pairs = req
        .input
        .tagging
        .tag_set
        .iter()
        .map(|t| {
            (
                t.key.clone().unwrap_or_default(),
                t.value.clone().unwrap_or_default(),
            )
        })
        .collect();
    let tags = checked(pairs)?;
    let replayed_answer = retag(gw, &req, &req.input.bucket, &req.input.key, tags).await?;
    Ok(replayed(
        S3Response::new(PutObjectTaggingOutput::default()),
        replayed_answer,
    ))
}

/// DeleteObjectTagging: the object rewritten without tags.
pub async fn delete(
    gw: &S3Gateway,
    req: S3Request<DeleteObjectTaggingInput>,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    super::objects::unversioned(req.input.version_id.as_deref())?;
    let replayed_answer =
        retag(gw, &req, &req.input.bucket, &req.input.key, BTreeMap::new()).await?;
    Ok(replayed(
        S3Response::new(DeleteObjectTaggingOutput::default()),
        replayed_answer,
    ))
}

/// Writes the object again with `tags`, through the gate; whether the answer was a replay.
async fn retag<T>(
    gw: &S3Gateway,
    req: &S3Request<T>,
    bucket: &str,
    key: &str,
    tags: BTreeMap<String, String>,
) -> S3Result<bool> {
    note(bucket, key);
    let who = principal_name(gw, req)?;
    let (info, body) = gw.gate.get(bucket, key).await.map_err(s3_error)?;
    let token = convert::token(
        &req.headers,
        None,
        super::access::lease_token(&req.extensions),
    );
    let mut meta = crate::backend::ObjectMeta {
        token: None,
        tags,
        ..info.meta.clone()
    };
    // The object is written whole again: a checksum of its parts no longer describes it.
    meta.checksum = meta.checksum.filter(|c| c.kind == "FULL_OBJECT");
    // Written even when the tags are the object's own: an acknowledged tag change is a write
    // like any other, whose token fences out every lower one, whose Idempotency-Key is kept,
    // and which is refused outside the object's scope.
    let mut write = write_request(&req.headers, (bucket, key, &who), token, meta)?;
    write.conditions.if_match = Some(EtagMatch::Tags(vec![info
        .etag
        .trim_matches('"')
        .to_string()]));
    write.conditions.if_unchanged = Some(Box::new(info));
    let written = gw.gate.put(write, body).await.map_err(s3_error)?;
    Ok(written.replayed)
}
