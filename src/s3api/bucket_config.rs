//! Bucket configurations, which fencegate does not keep: each getter answers as AWS answers for
//! a bucket where nothing is configured (tools read them when they open a bucket: terraform,
//! rclone's purge, backup tools, S3 browsers), deleting one is the no-op it is on AWS, and
//! setting one is 501 with a message naming what fencegate does not keep. Objects' ACLs are
//! answered the same way: read as the owner's FULL_CONTROL (s3cmd reads one on every copy and
//! `info`), set refused; so are their tags: read as none, deleted as a no-op, set refused (400).
//! CORS is the one bucket configuration fencegate keeps, from its configuration file (`cors.rs`).

use super::convert::s3_error;
use super::listing::owner;
use super::S3Gateway;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Result};

/// The bucket must exist, as on AWS: 404 `NoSuchBucket` before anything else.
pub fn existing(gw: &S3Gateway, bucket: &str) -> S3Result<()> {
    gw.gate.bucket(bucket).map(|_| ()).map_err(s3_error)
}

/// AWS's 404 for a configuration that was never set, with its own code.
pub fn not_configured(code: &'static str, what: &str, bucket: &str) -> S3Error {
    let code = S3ErrorCode::from_bytes(code.as_bytes()).unwrap_or(S3ErrorCode::NoSuchKey);
    let mut err = S3Error::with_message(
        code,
        format!("bucket {bucket} has no {what}: fencegate keeps none"),
    );
    err.set_status_code(http::StatusCode::NOT_FOUND);
    err
}

/// 501 for setting a configuration fencegate does not keep.
pub fn not_kept(op: &str, what: &str) -> S3Error {
    let of = if op.contains("Object") {
        "an object"
    } else {
        "a bucket"
    };
    let reading = if op.ends_with("Acl") {
        "reading it answers the owner's FULL_CONTROL"
    } else {
        "reading it answers that none is set"
    };
    let mut err = S3Error::with_message(
        S3ErrorCode::NotImplemented,
        format!("{op} is not supported: fencegate keeps no {what} for {of} ({reading})"),
    );
    err.set_status_code(http::StatusCode::NOT_IMPLEMENTED);
    err
}

/// The one grant every bucket has: its owner, FULL_CONTROL.
pub fn owner_acl() -> GetBucketAclOutput {
    let me = owner();
    GetBucketAclOutput {
        grants: Some(vec![Grant {
            grantee: Some(Grantee {
                display_name: me.display_name.clone(),
                id: me.id.clone(),
                type_: Type::from_static(Type::CANONICAL_USER),
                email_address: None,
                uri: None,
            }),
            permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
        }]),
        owner: Some(me),
    }
}

/// GetObjectAcl: the object must exist (404 `NoSuchKey` otherwise); its one grant is its
/// owner's FULL_CONTROL, as every bucket's.
pub async fn object_acl(gw: &S3Gateway, bucket: &str, key: &str) -> S3Result<GetObjectAclOutput> {
    gw.gate.head(bucket, key).await.map_err(s3_error)?;
    let acl = owner_acl();
    Ok(GetObjectAclOutput {
        grants: acl.grants,
        owner: acl.owner,
        request_charged: None,
    })
}

/// Trait methods of `s3s::S3`, for the `impl` in mod.rs: getters that answer "not configured"
/// (`missing`), getters with an empty answer (`empty`, the output given), deletes that have
/// nothing to delete (`delete`), and setters refused (`refuse`). Written out as
/// `#[async_trait]` writes an `async fn`, since the attribute runs before this expands.
macro_rules! bucket_config_methods {
    (@method $m:ident($i:ident, $o:ident) |$gw:ident, $req:ident| $body:expr) => {
        fn $m<'life0, 'async_trait>(
            &'life0 self,
            $req: s3s::S3Request<s3s::dto::$i>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = s3s::S3Result<s3s::S3Response<s3s::dto::$o>>> + Send + 'async_trait>>
        where
            'life0: 'async_trait,
            Self: 'async_trait,
        {
            let $gw = self;
            Box::pin(async move {
                bucket_config::existing($gw, &$req.input.bucket)?;
                $body
            })
        }
    };
    (missing: $($m:ident($i:ident, $o:ident) => $code:literal, $what:literal;)*) => {$(
        bucket_config_methods!(@method $m($i, $o) |gw, req| {
            let _ = gw;
            Err(bucket_config::not_configured($code, $what, &req.input.bucket))
        });
    )*};
    (empty: $($m:ident($i:ident, $o:ident) => $answer:expr;)*) => {$(
        bucket_config_methods!(@method $m($i, $o) |gw, req| {
            let _ = (gw, req);
            Ok(s3s::S3Response::new($answer))
        });
    )*};
    (delete: $($m:ident($i:ident, $o:ident);)*) => {$(
        bucket_config_methods!(@method $m($i, $o) |gw, req| {
            let _ = (gw, req);
            let mut resp = s3s::S3Response::new(s3s::dto::$o::default());
            resp.status = Some(http::StatusCode::NO_CONTENT);
            Ok(resp)
        });
    )*};
    (refuse: $($m:ident($i:ident, $o:ident) => $op:literal, $what:literal;)*) => {$(
        bucket_config_methods!(@method $m($i, $o) |gw, req| {
            let _ = (gw, req);
            Err(bucket_config::not_kept($op, $what))
        });
    )*};
}
