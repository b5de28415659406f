//! Object listings: ListObjects (v1), ListObjectsV2 and ListObjectVersions (an unversioned
//! bucket's current objects, each `VersionId` `null`, as AWS lists them), with delimiters,
//! markers, continuation tokens and `EncodingType=url`. The paging itself is paging.rs.

use super::convert::{self, s3_error};
use super::paging::Listing;
use super::S3Gateway;
use crate::backend::ObjectInfo;
use crate::gate::GateError;
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};

/// One page of a listing of `bucket`, as S3 lists: keys and common prefixes (paging.rs).
async fn list(
    gw: &S3Gateway,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<String>,
    max: usize,
) -> Result<Listing, GateError> {
    let fetch = |start: Option<String>, n: usize| async move {
        gw.gate.list(bucket, prefix, start.as_deref(), n).await
    };
    super::paging::page(fetch, prefix, delimiter, after, max).await
}

fn object(o: &ObjectInfo) -> Object {
    Object {
        key: Some(o.key.clone()),
        e_tag: Some(convert::etag(&o.etag)),
        size: Some(o.size as i64),
        last_modified: Some(convert::timestamp(o.last_modified_ms)),
        storage_class: Some(ObjectStorageClass::from_static(
            ObjectStorageClass::STANDARD,
        )),
        ..Default::default()
    }
}

/// The owner of every bucket and object: fencegate has one account.
pub fn owner() -> Owner {
    Owner {
        display_name: Some("fencegate".into()),
        id: Some("fencegate".into()),
    }
}

/// Everything but RFC 3986's unreserved characters and `/` is percent-encoded.
const URL_ENCODED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// `EncodingType=url`: keys, prefixes, delimiters and markers go out percent-encoded, so a
/// key with characters XML cannot carry survives, and clients that ask for it by default
/// (botocore does) decode `+` and `%20` back to what was written.
struct Encoding(bool);

impl Encoding {
    /// `url`, or none; any other value is AWS's 400.
    fn of(requested: Option<&EncodingType>) -> S3Result<Encoding> {
        match requested.map(|e| e.as_str()) {
            None => Ok(Encoding(false)),
            Some(EncodingType::URL) => Ok(Encoding(true)),
            Some(other) => Err(convert::invalid(
                S3ErrorCode::InvalidArgument,
                format!("Invalid Encoding Method specified in Request: {other:?}; the only encoding is \"url\""),
            )),
        }
    }

    fn apply(&self, text: String) -> String {
        if self.0 {
            percent_encoding::utf8_percent_encode(&text, URL_ENCODED).to_string()
        } else {
            text
        }
    }

    fn opt(&self, text: Option<String>) -> Option<String> {
        text.map(|t| self.apply(t))
    }

    /// A page's objects and common prefixes, encoded.
    fn entries(&self, listing: Listing, with_owner: bool) -> (Vec<Object>, Vec<CommonPrefix>) {
        let objects = listing
            .objects
            .iter()
            .map(|o| Object {
                key: Some(self.apply(o.key.clone())),
                owner: with_owner.then(owner),
                ..object(o)
            })
            .collect();
        let prefixes = listing
            .prefixes
            .into_iter()
            .map(|p| CommonPrefix {
                prefix: Some(self.apply(p)),
            })
            .collect();
        (objects, prefixes)
    }
}

fn max_keys(requested: Option<i32>) -> S3Result<usize> {
    match requested {
        None => Ok(1000),
        Some(n) if n < 0 => Err(convert::invalid(
            S3ErrorCode::InvalidArgument,
            "max-keys must not be negative",
        )),
        Some(n) => Ok((n as usize).min(1000)),
    }
}

/// Continuation tokens are the hex of the last entry returned: opaque, and no key escapes.
pub fn decode_token(token: &str) -> S3Result<String> {
    hex::decode(token)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| {
            convert::invalid(
                S3ErrorCode::InvalidArgument,
                "the continuation token is not one this server issued",
            )
        })
}

pub async fn list_objects_v2(
    gw: &S3Gateway,
    req: S3Request<ListObjectsV2Input>,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let input = req.input;
    let prefix = input.prefix.clone().unwrap_or_default();
    let max = max_keys(input.max_keys)?;
    let after = match &input.continuation_token {
        Some(t) => Some(decode_token(t)?),
        None => input.start_after.clone(),
    };
    let listing = list(
        gw,
        &input.bucket,
        &prefix,
        input.delimiter.as_deref(),
        after,
        max,
    )
    .await
    .map_err(s3_error)?;
    let encoding = Encoding::of(input.encoding_type.as_ref())?;
    let next = listing.next.clone();
    let (objects, prefixes) = encoding.entries(listing, input.fetch_owner == Some(true));
    Ok(S3Response::new(ListObjectsV2Output {
        name: Some(input.bucket),
        prefix: Some(encoding.apply(prefix)),
        // S3 echoes no empty delimiter.
        delimiter: encoding.opt(input.delimiter.filter(|d| !d.is_empty())),
        max_keys: Some(max as i32),
        key_count: Some((objects.len() + prefixes.len()) as i32),
        continuation_token: input.continuation_token,
        start_after: encoding.opt(input.start_after),
        is_truncated: Some(next.is_some()),
        next_continuation_token: next.map(hex::encode),
        contents: Some(objects),
        common_prefixes: Some(prefixes),
        encoding_type: input.encoding_type,
        ..Default::default()
    }))
}

pub async fn list_objects(
    gw: &S3Gateway,
    req: S3Request<ListObjectsInput>,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let input = req.input;
    let prefix = input.prefix.clone().unwrap_or_default();
    let max = max_keys(input.max_keys)?;
    let listing = list(
        gw,
        &input.bucket,
        &prefix,
        input.delimiter.as_deref(),
        input.marker.clone(),
        max,
    )
    .await
    .map_err(s3_error)?;
    let encoding = Encoding::of(input.encoding_type.as_ref())?;
    let next = listing.next.clone();
    // v1 always names each object's owner.
    let (objects, prefixes) = encoding.entries(listing, true);
    Ok(S3Response::new(ListObjectsOutput {
        name: Some(input.bucket),
        prefix: Some(encoding.apply(prefix)),
        delimiter: encoding.opt(input.delimiter.filter(|d| !d.is_empty())),
        // Always present in v1 answers, empty when none was sent.
        marker: Some(encoding.apply(input.marker.unwrap_or_default())),
        max_keys: Some(max as i32),
        is_truncated: Some(next.is_some()),
        next_marker: encoding.opt(next),
        contents: Some(objects),
        common_prefixes: Some(prefixes),
        encoding_type: input.encoding_type,
        ..Default::default()
    }))
}

/// ListObjectVersions of an unversioned bucket, as AWS answers it: each current object once,
/// latest, with `VersionId` `null` (cleanup scripts and terraform's `force_destroy` delete by
/// this listing). The key marker pages; a version-id marker can only be `null`.
pub async fn list_object_versions(
    gw: &S3Gateway,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let input = req.input;
    let prefix = input.prefix.clone().unwrap_or_default();
    let max = max_keys(input.max_keys)?;
    let version_marker = input.version_id_marker.as_deref().filter(|v| !v.is_empty());
    if version_marker.is_some() && input.key_marker.as_deref().is_none_or(str::is_empty) {
        return Err(convert::invalid(
            S3ErrorCode::InvalidArgument,
            "A version-id marker cannot be specified without a key marker.",
        ));
    }
    if version_marker.is_some_and(|v| v != "null") {
        return Err(convert::invalid(
            S3ErrorCode::InvalidArgument,
            "this bucket is not versioned: the only version id is \"null\"",
        ));
    }
    let listing = list(
        gw,
        &input.bucket,
        &prefix,
        input.delimiter.as_deref(),
        input.key_marker.clone().filter(|m| !m.is_empty()),
        max,
    )
    .await
    .map_err(s3_error)?;
    let encoding = Encoding::of(input.encoding_type.as_ref())?;
    let next = listing.next.clone();
    let (objects, prefixes) = encoding.entries(listing, true);
    let versions = objects
        .into_iter()
        .map(|o| ObjectVersion {
            e_tag: o.e_tag,
            is_latest: Some(true),
            key: o.key,
            last_modified: o.last_modified,
            owner: o.owner,
            size: o.size,
            storage_class: Some(ObjectVersionStorageClass::from_static(
                ObjectVersionStorageClass::STANDARD,
            )),
            version_id: Some("null".into()),
            ..Default::default()
        })
        .collect();
    Ok(S3Response::new(ListObjectVersionsOutput {
        name: Some(input.bucket),
        prefix: Some(encoding.apply(prefix)),
        delimiter: encoding.opt(input.delimiter.filter(|d| !d.is_empty())),
        key_marker: Some(encoding.apply(input.key_marker.unwrap_or_default())),
        version_id_marker: Some(input.version_id_marker.unwrap_or_default()),
        max_keys: Some(max as i32),
        is_truncated: Some(next.is_some()),
        next_version_id_marker: next.as_ref().map(|_| "null".to_string()),
        next_key_marker: encoding.opt(next),
        versions: Some(versions),
        common_prefixes: Some(prefixes),
        encoding_type: input.encoding_type,
        ..Default::default()
    }))
}
