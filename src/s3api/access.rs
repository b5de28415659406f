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

/// The token a request signed with lease credentials carries implicitly, from the principal
/// the access check authorized.
pub fn lease_token(extensions: &http::Extensions) -> Option<u64> {
    match extensions.get::<Principal>() {
        Some(Principal::Lease(l)) => Some(l.token),
        _ => None,
    }
}

impl KeyTable {
    /// The principal of an S3 request `s3s` authenticated.
    pub fn s3_principal(
        &self,
        credentials: Option<&s3s::auth::Credentials>,
    ) -> S3Result<Principal> {
        self.principal(credentials.map(|c| c.access_key.as_str()))
            .map_err(|e| {
                // S3 answers an unsigned request AccessDenied, as a key's missing permission;
                // the audit line tells them apart.
                if matches!(e, AuthError::Missing) {
                    tracing::info!(target: "fencegate::audit", code = "AccessDenied", "S3 request without credentials refused");
                }
                s3_auth_error(&e)
            })
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
        AuthError::Stalled(_) => S3ErrorCode::RequestTimeout,
        AuthError::Malformed(_) => S3ErrorCode::AuthorizationHeaderMalformed,
        AuthError::Skewed(_) => S3ErrorCode::RequestTimeTooSkewed,
        AuthError::Busy(_) => S3ErrorCode::SlowDown,
        AuthError::Unavailable(_) => S3ErrorCode::ServiceUnavailable,
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
    // Changing an object's tags is a write on AWS, even where (as here) there are none to
    // delete.
    if op == "DeleteObjectTagging" {
        return Some(Permission::Write);
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
        match self.0.lookup_fresh(access_key).await {
            Ok((secret, _)) => Ok(SecretKey::from(secret.as_str())),
            Err(e) => {
                tracing::info!(target: "fencegate::audit", access_key, code = e.code(), "S3 authentication failed");
                Err(s3_auth_error(&e))
            }
        }
    }
}

use super::sigv2::MAX_PRESIGNED_SECS;

/// Signatures fencegate does not accept although `s3s` verifies them: SigV2 but in a presigned
/// GET, HEAD or PUT (sigv2.rs) and presigned URLs valid for longer than AWS allows.
/// Also a signed request that does not sign the fencing headers it carries. `authenticated`:
/// s3s verified a signature on this request.
fn refused_signature(
    method: &http::Method,
    headers: &http::HeaderMap,
    uri: &http::Uri,
    authenticated: bool,
) -> Option<String> {
    let auth = headers
        .get(http::header::AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    // Names compared as s3s reads them: percent-decoded, so that an encoded spelling of a
    // name is judged as the name s3s sees.
    let params = super::sigv2::query_params(uri);
    if let Some(why) = super::sigv2::refused(method, headers, &params) {
        return Some(why);
    }
    if super::sigv2::presigned(&params) {
        // SigV2 signs every x-amz-* header (the URL's own lifted into headers), no other.
        return crate::http::headers::unsigned_fencing_header(headers, super::sigv2::covers).map(|name| format!(
            "the {name} header is not covered by a Signature Version 2 presigned URL: carry the token as x-amz-meta-fencing-token in the URL you presign"
        ));
    }
    let too_long = params
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("X-Amz-Expires"))
        .any(|(_, v)| {
            v.trim()
                .parse::<u64>()
                .map_or(true, |e| e > MAX_PRESIGNED_SECS)
        });
    if too_long {
        return Some(format!(
            "a presigned URL may be valid for at most {MAX_PRESIGNED_SECS} seconds (7 days), as on AWS"
        ));
    }
    // A signed request must sign the headers that steer the fence; otherwise whoever holds
    // it (a presigned URL, a captured request) can add or change them.
    let signed = match signed_headers(auth.as_deref(), &params) {
        Some(list) => list,
        // Signed, but fencegate cannot tell what the signature covers: assume nothing, never
        // "anonymous".
        None if authenticated => Vec::new(),
        None => return None,
    };
    // A SigV4 presigned URL signs its whole query: the x-amz-* parameters it carries, lifted
    // into headers before s3s (sigv2::lift_signed_headers), are signed with it.
    let in_query = |name: &str| {
        super::sigv2::presigned_v4(&params)
            && params.iter().any(|(k, _)| {
                k.eq_ignore_ascii_case(name) && super::sigv2::carried(&k.to_ascii_lowercase(), true)
            })
    };
    let covered =
        |name: &str| signed.iter().any(|h| h.eq_ignore_ascii_case(name)) || in_query(name);
    if let Some(name) = crate::http::headers::unsigned_fencing_header(headers, covered) {
        return Some(format!(
            "the {name} header must be signed: add it to the signed headers (a presigned URL carries a token only as x-amz-meta-fencing-token in the URL it signs; or write with lease-bound credentials)"
        ));
    }
    // Nor any other x-amz-* header, as AWS refuses them (HeadersNotSigned): whoever holds a
    // presigned PUT could otherwise add x-amz-copy-source and have it copy, with the signer's
    // rights, an object the holder may not read. x-amz-content-sha256 describes the body, and
    // a presigned URL's bearer sends it unsigned.
    headers
        .keys()
        .map(|name| name.as_str())
        .find(|name| {
            super::sigv2::covers(name) && *name != "x-amz-content-sha256" && !covered(name)
        })
        .map(|name| format!(
            "There were headers present in the request which were not signed: {name}; sign every x-amz-* header sent (a presigned URL signs none its bearer adds)"
        ))
}

/// The headers a SigV4 request signs, decided as s3s decides which signature to verify
/// (s3s 0.14.1, ops/signature.rs `v4_check`): a decoded query parameter named exactly
/// `X-Amz-Signature` makes it a presigned URL, whose `X-Amz-SignedHeaders` count, whatever
/// Authorization header comes with it (a decoy one included). Otherwise the Authorization
/// header, whose first word s3s never compares, so any word followed by any whitespace.
/// `None`: no SigV4 signature (anonymous).
fn signed_headers(auth: Option<&str>, params: &[(String, String)]) -> Option<Vec<String>> {
    let split = |list: &str| list.split(';').map(str::to_string).collect();
    if params.iter().any(|(k, _)| k == "X-Amz-Signature") {
        return Some(
            params
                .iter()
                .find(|(k, _)| k == "X-Amz-SignedHeaders")
                .map_or_else(Vec::new, |(_, v)| split(v)),
        );
    }
    let auth = auth?;
    let Some((_, rest)) = auth.split_once(|c: char| c.is_ascii_whitespace()) else {
        return Some(Vec::new());
    };
    let list = rest
        .split(',')
        .find_map(|p| p.trim().strip_prefix("SignedHeaders="))
        .map_or_else(Vec::new, split);
    Some(list)
}

/// The access check, and (on a shared fence table) the first look for a bucket another
/// instance created.
pub struct Access(pub Arc<KeyTable>, pub Arc<crate::catalog::Catalog>);

#[async_trait::async_trait]
impl S3Access for Access {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        // The operation label of the request's metrics (first: refusals below count too).
        let op_name = cx.s3_op().name().to_string();
        crate::metrics::http::S3Op::resolved(cx.extensions_mut(), &op_name);
        if let Some(why) = refused_signature(
            cx.method(),
            cx.headers(),
            cx.uri(),
            cx.credentials().is_some(),
        ) {
            tracing::info!(target: "fencegate::audit", reason = %why, "S3 request refused");
            return Err(S3Error::with_message(S3ErrorCode::AccessDenied, why));
        }
        let who = self.0.s3_principal(cx.credentials())?;
        // Audit lines name the principal through the request's span (s3s's own spans are at
        // debug, which main.rs keeps off, so this is the request's span).
        tracing::Span::current().record("principal", who.name().as_str());
        // Handed to the operation, so that it never looks the credentials up again (they can
        // expire in between, and a lease's token would silently be lost).
        cx.extensions_mut().insert(who.clone());
        if matches!(who, Principal::Lease(_)) {
            super::lost_lease::SignedByLease::mark(cx.extensions_mut());
        }
        if let S3Path::Bucket { bucket } | S3Path::Object { bucket, .. } = cx.s3_path() {
            // A failure here leaves the request to be answered as this instance knows it.
            if let Err(e) = self.1.discover(bucket).await {
                tracing::warn!(bucket = %bucket, error = %e, "could not look for a bucket created through another instance");
            }
        }
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
        // DeleteObjects is let in by a key that may delete in the bucket, or read it (lease
        // credentials, whose deletes reach their scope only): each key of the batch is then
        // authorized for its delete on its own.
        if let ("DeleteObjects", S3Path::Bucket { bucket }) = (op, cx.s3_path()) {
            let deletes = Action::Bucket {
                perm: Permission::Delete,
                bucket,
            };
            if matches!(who, Principal::Key(_)) && self.0.authorize(&who, deletes).is_ok() {
                return Ok(());
            }
        }
        self.0
            .authorize(&who, action)
            .map_err(|e| s3_auth_error(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(auth: &str, query: &str, fencing: bool) -> bool {
        refused_as(
            auth,
            query,
            fencing,
            !auth.is_empty() || query.contains("X-Amz-Signature"),
        )
    }

    fn refused_as(auth: &str, query: &str, fencing: bool, authenticated: bool) -> bool {
        let mut headers = http::HeaderMap::new();
        if !auth.is_empty() {
            headers.insert(http::header::AUTHORIZATION, auth.parse().unwrap());
        }
        if fencing {
            headers.insert("fencing-token", "18446744073709551615".parse().unwrap());
        }
        let uri: http::Uri = format!("/b/k?{query}").parse().unwrap();
        refused_signature(&http::Method::GET, &headers, &uri, authenticated).is_some()
    }

    /// SigV2 in every spelling, presigned URLs over 7 days however the parameter is encoded,
    /// and fencing headers a signature does not cover.
    #[test]
    fn signatures_fencegate_refuses() {
        assert!(refused("AWS AK:c2ln", "", false));
        // A SigV2 presigned GET is taken (s3s checks its expiry), in every spelling, but never
        // with a fencing header its signature does not cover.
        for q in [
            "AWSAccessKeyId=AK&Expires=1&Signature=x",
            "%41WSAccessKeyId=AK&Expires=1&Signature=x",
            "AWSAccessKey%49d=AK&Expires=1&Signature=x",
        ] {
            assert!(!refused("", q, false), "{q}");
            assert!(refused("", q, true), "{q}");
        }
        for q in [
            "X-Amz-Expires=604801",
            "X-Amz-Expire%73=4000000000",
            "%58-Amz-Expires=4000000000",
            "X-Amz-Expires=60&X-Amz-Expires=4000000000",
            "X-Amz-Expires=not-a-number",
        ] {
            assert!(refused("", q, false), "{q}");
        }
        assert!(!refused(
            "",
            "X-Amz-Expires=604800&X-Amz-SignedHeaders=host",
            false
        ));
        // A presigned URL signs only host: a Fencing-Token added by its bearer is refused.
        assert!(refused(
            "",
            "X-Amz-Signature=00&X-Amz-Expires=60&X-Amz-SignedHeaders=host",
            true
        ));
        assert!(!refused(
            "",
            "X-Amz-Signature=00&X-Amz-Expires=60&X-Amz-SignedHeaders=fencing-token%3Bhost",
            true
        ));
        let v4 = |signed: &str| {
            format!("AWS4-HMAC-SHA256 Credential=AK/20260101/us-east-1/s3/aws4_request, SignedHeaders={signed}, Signature=00")
        };
        assert!(refused(&v4("host;x-amz-date"), "", true));
        assert!(!refused(&v4("fencing-token;host;x-amz-date"), "", true));
        // Anonymous requests (development mode) carry no signature to cover anything.
        assert!(!refused("", "", true));
        // A presigned URL is judged by its query, as s3s verifies it: a decoy Authorization
        // header claiming to sign the token changes nothing.
        let url = "X-Amz-Signature=00&X-Amz-Expires=60&X-Amz-SignedHeaders=host";
        assert!(refused(&v4("fencing-token;host"), url, true));
        assert!(refused("", url, true));
        // s3s accepts any first word and any whitespace after it: a rewritten algorithm word
        // still verifies, so it is read the same way.
        for algorithm in ["AWS4-HMAC-SHA256\t", "X ", "AWS4-HMAC-SHA256  "] {
            let auth = format!("{algorithm}Credential=AK/20260101/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=00");
            assert!(refused(&auth, "", true), "{auth:?}");
        }
        // Any x-amz-* header the SigV4 signature does not cover: a presigned PUT turned into
        // a CopyObject by its bearer, say.
        let mut copy = http::HeaderMap::new();
        copy.insert("x-amz-copy-source", "secret/s".parse().unwrap());
        let presigned: http::Uri =
            "/b/k?X-Amz-Signature=00&X-Amz-Expires=60&X-Amz-SignedHeaders=host"
                .parse()
                .unwrap();
        assert!(refused_signature(&http::Method::PUT, &copy, &presigned, true).is_some());
        let signed: http::Uri =
            "/b/k?X-Amz-Signature=00&X-Amz-Expires=60&X-Amz-SignedHeaders=host%3Bx-amz-copy-source"
                .parse()
                .unwrap();
        assert!(refused_signature(&http::Method::PUT, &copy, &signed, true).is_none());
        let mut sha = http::HeaderMap::new();
        sha.insert("x-amz-content-sha256", "UNSIGNED-PAYLOAD".parse().unwrap());
        assert!(refused_signature(&http::Method::PUT, &sha, &presigned, true).is_none());
        // Authenticated, but no signed-header list to be found: nothing is covered.
        assert!(refused_as("garbage", "", true, true));
        assert!(refused_as("", "", true, true));
    }
}
