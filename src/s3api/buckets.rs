//! Buckets: ListBuckets, HeadBucket, GetBucketLocation, and CreateBucket / DeleteBucket
//! through the catalog (buckets created with the `[bucket_defaults]` policy; configured
//! buckets are never deleted here).

use super::convert::{self, s3_error};
use super::listing::{decode_token, owner};
use super::S3Gateway;
use crate::catalog::CatalogError;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

pub async fn list_buckets(
    gw: &S3Gateway,
    req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    let who = gw.keys.s3_principal(req.credentials.as_ref())?;
    // On a shared table: also the buckets other instances created or deleted just now.
    if let Err(e) = gw.catalog.sync().await {
        tracing::warn!(error = %e, "could not read the buckets created through other instances");
    }
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

/// CreateBucket as AWS answers it: a bucket one already owns is 200 in us-east-1 (kept there
/// for compatibility, so a start-up "ensure the bucket" step works) and 409
/// `BucketAlreadyOwnedByYou` elsewhere. Either way nothing about the bucket changes, its fences
/// least of all. Lease credentials reach here only for their own bucket, and only ensure it.
pub async fn create_bucket(
    gw: &S3Gateway,
    req: S3Request<CreateBucketInput>,
) -> S3Result<S3Response<CreateBucketOutput>> {
    // A PUT to a bucket is routed here by its path alone, after its aws-chunked body was set
    // aside for PutObject (chunked.rs): s3s saw no configuration, so none is taken as absent.
    if super::chunked::was_set_aside(&req.extensions) {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidRequest,
            "an aws-chunked body (x-amz-content-sha256: STREAMING-*) is taken for PutObject and UploadPart only; send CreateBucket's body plain, with a Content-Length",
        ));
    }
    let bucket = req.input.bucket;
    let asked = req
        .input
        .create_bucket_configuration
        .as_ref()
        .and_then(|c| c.location_constraint.as_ref())
        .map(|l| l.as_str().to_string())
        .filter(|l| !l.is_empty());
    // No constraint means this endpoint's one region (as MinIO reads it; AWS would take it for
    // us-east-1), so clients that send none work whatever the region is.
    if asked.as_deref().is_some_and(|a| a != gw.region) {
        let mut err =
            S3Error::with_message(
                S3ErrorCode::IllegalLocationConstraintException,
                format!(
                "this endpoint serves region {}; create the bucket with that LocationConstraint, or none",
                gw.region
            ),
            );
        err.set_status_code(http::StatusCode::BAD_REQUEST);
        return Err(err);
    }
    let who = gw.keys.s3_principal(req.credentials.as_ref())?;
    let created = if matches!(who, crate::auth::Principal::Lease(_)) {
        match gw.gate.bucket(&bucket) {
            Ok(_) => Err(CatalogError::Exists(bucket.clone())),
            Err(_) => {
                return Err(S3Error::with_message(
                    S3ErrorCode::AccessDenied,
                    format!("lease credentials never create buckets, and {bucket} does not exist"),
                ))
            }
        }
    } else {
        gw.catalog.create(&bucket).await
    };
    match created {
        Err(CatalogError::Exists(_)) if gw.region == "us-east-1" => {}
        other => other.map_err(catalog_error)?,
    }
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
