//! The S3 gateway's side of the one key table (`crate::auth`): `s3s` checks SigV4 with the
//! secrets looked up here (an unknown key is InvalidAccessKeyId, a bad signature
//! SignatureDoesNotMatch), then each operation is mapped to the action it needs and
//! authorized (AccessDenied otherwise). Lease-bound credentials carry their lease's token
//! into every write they sign, and reach only their lease's scope.

use crate::auth::{Action, AuthError, KeyTable, Principal};
use crate::config::Permission;
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::path::S3Path;
use s3s::{S3Error, S3ErrorCode, S3Result};
use std::sync::Arc;

impl KeyTable {
    /// The token a request signed with lease credentials carries implicitly.
    pub fn lease_token(&self, credentials: Option<&s3s::auth::Credentials>) -> Option<u64> {
        match self.principal(credentials.map(|c| c.access_key.as_str())) {
            Ok(Principal::Lease(l)) => Some(l.token),
            _ => None,
        }
    }

    /// The principal of an S3 request `s3s` authenticated.
    pub fn s3_principal(
        &self,
        credentials: Option<&s3s::auth::Credentials>,
    ) -> S3Result<Principal> {
        self.principal(credentials.map(|c| c.access_key.as_str()))
            .map_err(|e| s3_auth_error(&e))
    }

    /// Authorizes `action` for the request's principal, as an S3 error.
    pub fn s3_authorize(
        &self,
        credentials: Option<&s3s::auth::Credentials>,
        action: Action<'_>,
    ) -> S3Result<()> {
        let who = self.s3_principal(credentials)?;
        self.authorize(&who, action).map_err(|e| s3_auth_error(&e))
    }
}

/// An authentication refusal in S3's terms.
pub fn s3_auth_error(e: &AuthError) -> S3Error {
    let code = match e {
        AuthError::Missing | AuthError::Denied(_) => S3ErrorCode::AccessDenied,
        AuthError::UnknownKey(_) | AuthError::ExpiredLease => S3ErrorCode::InvalidAccessKeyId,
        AuthError::BadSignature => S3ErrorCode::SignatureDoesNotMatch,
        AuthError::Malformed(_) => S3ErrorCode::AuthorizationHeaderMalformed,
        AuthError::Skewed(_) => S3ErrorCode::RequestTimeTooSkewed,
    };
    let mut err = S3Error::with_message(code, e.to_string());
    err.set_status_code(
        http::StatusCode::from_u16(match e {
            AuthError::Missing => 403,
            other => other.status(),
        })
        .unwrap_or(http::StatusCode::FORBIDDEN),
    );
    err
}

/// What an operation on an object needs: reads read; deletes and aborts delete; the rest
/// (put, copy, multipart) write.
fn object_permission(op: &str) -> Option<Permission> {
    if op == "DeleteObject" || op == "AbortMultipartUpload" {
        return Some(Permission::Delete);
    }
    let writes = [
        "Put", "Copy", "Upload", "Create", "Complete", "Restore", "Post",
    ];
    writes
        .iter()
        .any(|p| op.starts_with(p))
        .then_some(Permission::Write)
}

pub struct Auth(pub Arc<KeyTable>);

#[async_trait::async_trait]
impl S3Auth for Auth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.0.lookup(access_key) {
            Ok((secret, _)) => Ok(SecretKey::from(secret.as_str())),
            Err(e) => {
                tracing::info!(target: "fencegate::audit", access_key, code = e.code(), "S3 authentication failed");
                Err(s3_auth_error(&e))
            }
        }
    }
}

/// AWS's longest presigned-URL lifetime.
const MAX_PRESIGNED_SECS: u64 = 7 * 24 * 3600;

/// Signatures fencegate does not accept although `s3s` verifies them: SigV2 (it covers neither
/// the body nor the fencing headers, and its date is never checked, so a request signed once
/// replays forever) and presigned URLs valid for longer than AWS allows (review round 4).
fn refused_signature(headers: &http::HeaderMap, uri: &http::Uri) -> Option<String> {
    let auth = headers
        .get(http::header::AUTHORIZATION)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    let query = uri.query().unwrap_or("");
    let params = || query.split('&').filter_map(|p| p.split_once('='));
    if auth.starts_with(b"AWS ") || params().any(|(k, _)| k == "AWSAccessKeyId") {
        return Some("Signature Version 2 is not accepted: sign requests with SigV4 (every current SDK and CLI does)".into());
    }
    let expires = params()
        .find(|(k, _)| k.eq_ignore_ascii_case("X-Amz-Expires"))
        .map(|(_, v)| v.parse::<u64>().unwrap_or(u64::MAX));
    if expires.is_some_and(|e| e > MAX_PRESIGNED_SECS) {
        return Some(format!(
            "a presigned URL may be valid for at most {MAX_PRESIGNED_SECS} seconds (7 days), as on AWS"
        ));
    }
    None
}

pub struct Access(pub Arc<KeyTable>);

#[async_trait::async_trait]
impl S3Access for Access {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        if let Some(why) = refused_signature(cx.headers(), cx.uri()) {
            tracing::info!(target: "fencegate::audit", reason = %why, "S3 request refused");
            return Err(S3Error::with_message(S3ErrorCode::AccessDenied, why));
        }
        let who = self.0.s3_principal(cx.credentials())?;
        let op = cx.s3_op().name();
        let scope_header = cx.headers().get("fencing-scope").map(|v| v.as_bytes());
        let action = match cx.s3_path() {
            // ListBuckets: every principal sees the buckets it reaches.
            S3Path::Root => return Ok(()),
            S3Path::Bucket { bucket } => match op {
                "CreateBucket" => Action::CreateBucket { bucket },
                "DeleteBucket" => Action::DeleteBucket { bucket },
                // Each key of the batch is authorized on its own (objects::delete_objects).
                "DeleteObjects" => Action::Read { bucket },
                _ if object_permission(op).is_some() || op.starts_with("Delete") => {
                    Action::Bucket {
                        perm: Permission::Write,
                        bucket,
                    }
                }
                _ => Action::Read { bucket },
            },
            S3Path::Object { bucket, key } => match object_permission(op) {
                Some(perm) => Action::Object {
                    perm,
                    bucket,
                    key,
                    scope_header,
                },
                None => Action::Read { bucket },
            },
        };
        self.0
            .authorize(&who, action)
            .map_err(|e| s3_auth_error(&e))
    }
}
