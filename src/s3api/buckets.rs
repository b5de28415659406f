//! Bucket operations: listing (v1 and v2, with delimiters and continuation), ListBuckets,
//! HeadBucket, GetBucketLocation, and CreateBucket / DeleteBucket through the catalog (buckets
//! created with the `[bucket_defaults]` policy; configured buckets are never deleted here).

use super::convert::{self, s3_error};
use super::S3Gateway;
use crate::catalog::CatalogError;
use crate::gate::GateError;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

/// One page of keys and common prefixes, in key order.
struct Listing {
    objects: Vec<Object>,
    prefixes: Vec<String>,
    /// The last key or prefix returned, when more follow.
    next: Option<String>,
}

/// Lists like S3: keys under `prefix` after `after`; with a delimiter, keys sharing the next
/// delimited segment fold into one common prefix. At most `max` entries (keys + prefixes).
async fn list(
    gw: &S3Gateway,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<String>,
    max: usize,
) -> Result<Listing, GateError> {
    let mut out = Listing {
        objects: Vec::new(),
        prefixes: Vec::new(),
        next: None,
    };
    let mut cursor = after;
    let mut last_entry: Option<String> = None;
    loop {
        let page = gw
            .gate
            .list(bucket, prefix, cursor.as_deref(), 1000)
            .await?;
        let more = page.next_start_after.is_some();
        let mut skip_to: Option<String> = None;
        for o in page.objects {
            if skip_to.as_deref().is_some_and(|s| o.key.as_str() < s) {
                continue;
            }
            let folded = delimiter.filter(|d| !d.is_empty()).and_then(|d| {
                o.key[prefix.len()..]
                    .find(d)
                    .map(|i| o.key[..prefix.len() + i + d.len()].to_string())
            });
            let entry = folded.clone().unwrap_or_else(|| o.key.clone());
            if out.objects.len() + out.prefixes.len() == max {
                out.next = last_entry;
                return Ok(out);
            }
            last_entry = Some(entry.clone());
            match folded {
                Some(p) => {
                    // Everything under this prefix sorts before prefix + U+10FFFF.
                    skip_to = Some(format!("{p}\u{10FFFF}"));
                    out.prefixes.push(p);
                }
                None => out.objects.push(Object {
                    key: Some(o.key.clone()),
                    e_tag: Some(convert::etag(&o.etag)),
                    size: Some(o.size as i64),
                    last_modified: Some(convert::timestamp(o.last_modified_ms)),
                    storage_class: Some(ObjectStorageClass::from_static(
                        ObjectStorageClass::STANDARD,
                    )),
                    ..Default::default()
                }),
            }
        }
        if !more {
            return Ok(out);
        }
        cursor = match skip_to {
            Some(s) => Some(s),
            None => page.next_start_after,
        };
    }
}

fn common_prefixes(prefixes: Vec<String>) -> Vec<CommonPrefix> {
    prefixes
        .into_iter()
        .map(|p| CommonPrefix { prefix: Some(p) })
        .collect()
}

/// The owner of every bucket and object: fencegate has one account.
fn owner() -> Owner {
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
    fn of(requested: Option<&EncodingType>) -> Encoding {
        Encoding(requested.is_some_and(|e| e.as_str() == EncodingType::URL))
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

    fn listing(&self, listing: &mut Listing, with_owner: bool) {
        for o in &mut listing.objects {
            o.key = self.opt(o.key.take());
            if with_owner {
                o.owner = Some(owner());
            }
        }
        for p in &mut listing.prefixes {
            *p = self.apply(std::mem::take(p));
        }
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
fn decode_token(token: &str) -> S3Result<String> {
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
    let mut listing = list(
        gw,
        &input.bucket,
        &prefix,
        input.delimiter.as_deref(),
        after,
        max,
    )
    .await
    .map_err(s3_error)?;
    let encoding = Encoding::of(input.encoding_type.as_ref());
    encoding.listing(&mut listing, input.fetch_owner == Some(true));
    Ok(S3Response::new(ListObjectsV2Output {
        name: Some(input.bucket),
        prefix: Some(encoding.apply(prefix)),
        // S3 echoes no empty delimiter.
        delimiter: encoding.opt(input.delimiter.filter(|d| !d.is_empty())),
        max_keys: Some(max as i32),
        key_count: Some((listing.objects.len() + listing.prefixes.len()) as i32),
        continuation_token: input.continuation_token,
        start_after: encoding.opt(input.start_after),
        is_truncated: Some(listing.next.is_some()),
        next_continuation_token: listing.next.map(hex::encode),
        contents: Some(listing.objects),
        common_prefixes: Some(common_prefixes(listing.prefixes)),
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
    let mut listing = list(
        gw,
        &input.bucket,
        &prefix,
        input.delimiter.as_deref(),
        input.marker.clone(),
        max,
    )
    .await
    .map_err(s3_error)?;
    let encoding = Encoding::of(input.encoding_type.as_ref());
    // v1 always names each object's owner.
    encoding.listing(&mut listing, true);
    Ok(S3Response::new(ListObjectsOutput {
        name: Some(input.bucket),
        prefix: Some(encoding.apply(prefix)),
        delimiter: encoding.opt(input.delimiter.filter(|d| !d.is_empty())),
        // Always present in v1 answers, empty when none was sent.
        marker: Some(encoding.apply(input.marker.unwrap_or_default())),
        max_keys: Some(max as i32),
        is_truncated: Some(listing.next.is_some()),
        next_marker: encoding.opt(listing.next),
        contents: Some(listing.objects),
        common_prefixes: Some(common_prefixes(listing.prefixes)),
        encoding_type: input.encoding_type,
        ..Default::default()
    }))
}

pub async fn list_buckets(
    gw: &S3Gateway,
    req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    let who = gw.keys.s3_principal(req.credentials.as_ref())?;
    let input = &req.input;
    let max = match input.max_buckets {
        None => usize::MAX,
        Some(n) if (1..=10_000).contains(&n) => n as usize,
        Some(_) => {
            return Err(convert::invalid(
                S3ErrorCode::InvalidArgument,
                "max-buckets must be between 1 and 10000",
            ))
        }
    };
    let after = input
        .continuation_token
        .as_deref()
        .map(decode_token)
        .transpose()?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let mut names: Vec<String> = gw
        .gate
        .bucket_names()
        .into_iter()
        .filter(|b| b.starts_with(&prefix) && after.as_ref().is_none_or(|a| b > a))
        .filter(|b| {
            gw.keys
                .authorize(&who, crate::auth::Action::Read { bucket: b })
                .is_ok()
        })
        .collect();
    names.sort();
    let next = (names.len() > max).then(|| hex::encode(&names[max - 1]));
    names.truncate(max);
    let buckets = names
        .into_iter()
        .map(|name| Bucket {
            creation_date: Some(convert::timestamp(gw.gate.bucket_created_ms(&name))),
            name: Some(name),
            bucket_region: Some(gw.region.clone()),
        })
        .collect();
    Ok(S3Response::new(ListBucketsOutput {
        buckets: Some(buckets),
        continuation_token: next,
        prefix: input.prefix.clone(),
        owner: Some(owner()),
    }))
}

pub async fn head_bucket(
    gw: &S3Gateway,
    req: S3Request<HeadBucketInput>,
) -> S3Result<S3Response<HeadBucketOutput>> {
    gw.gate.bucket(&req.input.bucket).map_err(s3_error)?;
    Ok(S3Response::new(HeadBucketOutput {
        bucket_region: Some(gw.region.clone()),
        ..Default::default()
    }))
}

pub async fn get_bucket_location(
    gw: &S3Gateway,
    req: S3Request<GetBucketLocationInput>,
) -> S3Result<S3Response<GetBucketLocationOutput>> {
    gw.gate.bucket(&req.input.bucket).map_err(s3_error)?;
    // us-east-1 is reported as no constraint, as AWS does.
    let location =
        (gw.region != "us-east-1").then(|| BucketLocationConstraint::from(gw.region.clone()));
    Ok(S3Response::new(GetBucketLocationOutput {
        location_constraint: location,
    }))
}

pub async fn create_bucket(
    gw: &S3Gateway,
    req: S3Request<CreateBucketInput>,
) -> S3Result<S3Response<CreateBucketOutput>> {
    let bucket = req.input.bucket;
    gw.catalog.create(&bucket).await.map_err(catalog_error)?;
    Ok(S3Response::new(CreateBucketOutput {
        location: Some(format!("/{bucket}")),
    }))
}

pub async fn delete_bucket(
    gw: &S3Gateway,
    req: S3Request<DeleteBucketInput>,
) -> S3Result<S3Response<DeleteBucketOutput>> {
    gw.catalog
        .delete(&req.input.bucket)
        .await
        .map_err(catalog_error)?;
    Ok(S3Response::new(DeleteBucketOutput {}))
}

fn catalog_error(e: CatalogError) -> S3Error {
    let (code, status) = match &e {
        CatalogError::Exists(_) => (S3ErrorCode::BucketAlreadyOwnedByYou, 409),
        CatalogError::InvalidName { .. } => (S3ErrorCode::InvalidBucketName, 400),
        CatalogError::NoTemplate(_) => (S3ErrorCode::NotImplemented, 501),
        CatalogError::Configured(_) => (S3ErrorCode::MethodNotAllowed, 405),
        CatalogError::NoSuchBucket(_) => (S3ErrorCode::NoSuchBucket, 404),
        CatalogError::NotEmpty(_) => (S3ErrorCode::BucketNotEmpty, 409),
        CatalogError::Busy(_) => (S3ErrorCode::OperationAborted, 409),
        CatalogError::ScopeChanged { .. } => (S3ErrorCode::InvalidBucketState, 409),
        CatalogError::Failed(_) => (S3ErrorCode::ServiceUnavailable, 503),
    };
    let mut err = S3Error::with_message(code, e.to_string());
    err.set_status_code(
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_REQUEST),
    );
    err
}
