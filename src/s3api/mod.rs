//! The S3 gateway surface (README: "Use it as an S3 endpoint"): the S3 REST API, parsed and
//! signed by `s3s`, turned into gate calls. Like the native API it decides nothing: tokens, scopes and commits are the
//! gate's. One file per group of operations, over the helpers here.

mod access;
pub mod answer;
#[macro_use]
mod bucket_config;
mod buckets;
mod chunked;
mod convert;
mod listing;
mod paging;
use crate::http::digests;
mod multipart;
mod objects;
mod part_checksums;
mod sigv2;

pub use crate::auth::KeyTable;

use crate::backend::BodyError;
use crate::config::S3GatewayConfig;
use crate::gate::Gate;
use s3s::service::{S3Service, S3ServiceBuilder};
use std::sync::Arc;
use std::time::Duration;

/// What every S3 operation can reach.
#[derive(Clone)]
pub struct S3Gateway {
    pub gate: Arc<Gate>,
    /// Creates and deletes buckets (CreateBucket, DeleteBucket).
    pub catalog: Arc<crate::catalog::Catalog>,
    pub keys: Arc<KeyTable>,
    pub max_body_bytes: u64,
    pub body_idle_timeout: Duration,
    pub max_parts: u32,
    pub region: String,
}

/// Builds the `s3s` service: SigV4 against the configured keys, access
/// rules per key, and virtual-host-style addressing when a domain is configured.
pub fn service(gateway: S3Gateway, cfg: &S3GatewayConfig) -> Result<S3Service, String> {
    let keys = gateway.keys.clone();
    let mut builder = S3ServiceBuilder::new(gateway);
    builder.set_auth(access::Auth(keys.clone()));
    builder.set_access(access::Access(keys));
    builder.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(
        s3s_limits(),
    ))));
    if let Some(domain) = &cfg.domain {
        // Also checked with the rest of the configuration (check-config); kept here for a
        // gateway built from a configuration that did not come through it.
        if let Some(problem) = crate::config::s3_domain_problem(domain) {
            return Err(format!(
                "[s3] domain = {domain:?} {problem}; write it like \"s3.example.com\""
            ));
        }
        builder.set_host(VirtualHosts {
            domain: domain.to_ascii_lowercase(),
        });
    }
    Ok(builder.build())
}

/// What s3s may buffer before fencegate's access check runs. Its defaults allow a 5 GiB
/// browser-form upload and 20 MB XML bodies, all in memory. fencegate serves no POST object
/// (refused before s3s, [`refused_before_s3s`]); the largest XML it takes is a
/// CompleteMultipartUpload of 10000 parts or a DeleteObjects of 1000 keys, about 1 MiB.
fn s3s_limits() -> s3s::config::S3Config {
    let mut config = s3s::config::S3Config::default();
    config.xml_max_body_size = MAX_XML_BODY as usize;
    config.post_object_max_file_size = 0;
    config.form_max_field_size = 64 * 1024;
    config.form_max_fields_size = 256 * 1024;
    config.form_max_parts = 64;
    config
}

/// The POSTs fencegate serves, by the query parameter that names them: DeleteObjects
/// (`?delete`), CreateMultipartUpload (`?uploads`), CompleteMultipartUpload (`?uploadId=`).
const SERVED_POSTS: [&str; 3] = ["delete", "uploads", "uploadId"];

/// Requests refused before s3s sees them, because s3s would read their bodies before any
/// signature or access check:
/// - browser-form uploads (POST object), which fencegate does not implement. Decided on raw
///   bytes and by what is served rather than by what is not (a Content-Type with a non-ASCII
///   byte is no form to `to_str`, and still one to s3s): a POST must name served operations
///   only (besides `x-id`, which AWS SDKs add, and a presigned URL's `X-Amz-*`), and never be
///   a form (so that `?restore&uploadId=1` does not reach s3s);
/// - a SigV4 credential scoped to another service than `s3` (s3s reads up to 8 KiB of such a
///   request's body, with no deadline, before checking its signature).
pub fn refused_before_s3s(req: &axum::extract::Request) -> Option<axum::response::Response> {
    if let Some((status, code, message)) = malformed_uri(req.uri()) {
        return Some(refusal(status, code, message));
    }
    if let Some(service) = foreign_service(req) {
        let message = if service == "unparsed" {
            "the Authorization header is not a SigV4 one (AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/s3/aws4_request, SignedHeaders=..., Signature=...)".to_string()
        } else {
            format!("the credential is scoped to service {service:?}; fencegate is an S3 endpoint: sign for service \"s3\"")
        };
        return Some(refusal(
            http::StatusCode::FORBIDDEN,
            "AccessDenied",
            &message,
        ));
    }
    if req.method() != http::Method::POST {
        return None;
    }
    let form = req
        .headers()
        .get_all(http::header::CONTENT_TYPE)
        .iter()
        .any(|v| {
            let trimmed = v.as_bytes().trim_ascii_start();
            trimmed.len() >= 19 && trimmed[..19].eq_ignore_ascii_case(b"multipart/form-data")
        });
    let names: Vec<&str> = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').map_or(p, |(k, _)| k))
        .collect();
    let served = names.iter().any(|k| SERVED_POSTS.contains(k))
        && names
            .iter()
            .all(|k| SERVED_POSTS.contains(k) || *k == "x-id" || k.starts_with("X-Amz-"));
    // WriteGetObjectResponse is routed by these headers on any POST.
    let object_lambda = ["x-amz-request-route", "x-amz-request-token"]
        .iter()
        .any(|h| req.headers().contains_key(*h));
    if served && !form && !object_lambda {
        return None;
    }
    Some(refusal(
        http::StatusCode::NOT_IMPLEMENTED,
        "NotImplemented",
        "this POST is not supported: fencegate serves DeleteObjects (?delete), CreateMultipartUpload (?uploads) and CompleteMultipartUpload (?uploadId=); POST object (browser form uploads) is not supported, so upload with PutObject or a multipart upload",
    ))
}

/// What AWS answers, in its words, for a URI s3s would refuse less clearly: a path that is not
/// UTF-8 once decoded (s3s answers a bare `InvalidURI`), and a presigned URL whose
/// `X-Amz-Expires` is negative (s3s answers 400 "missing fields"; AWS, that it has expired).
fn malformed_uri(uri: &http::Uri) -> Option<(http::StatusCode, &'static str, &'static str)> {
    if std::str::from_utf8(&percent_encoding::percent_decode_str(uri.path()).collect::<Vec<u8>>())
        .is_err()
    {
        return Some((
            http::StatusCode::BAD_REQUEST,
            "InvalidURI",
            "Couldn't parse the specified URI.",
        ));
    }
    let negative = uri.query().unwrap_or("").split('&').any(|p| {
        p.split_once('=').is_some_and(|(k, v)| {
            k.eq_ignore_ascii_case("X-Amz-Expires") && v.trim().starts_with('-')
        })
    });
    negative.then_some((
        http::StatusCode::FORBIDDEN,
        "AccessDenied",
        "Request has expired",
    ))
}

/// The largest XML body fencegate takes (as [`s3s_limits`]).
const MAX_XML_BODY: u64 = 4 * 1024 * 1024;

/// Set when a POST's XML body did not have the digest it declared ([`post_body_checked`]).
#[derive(Clone, Default)]
pub struct DigestMismatch(Arc<std::sync::atomic::AtomicBool>);

impl DigestMismatch {
    /// The refusal to answer instead of s3s's, when the body did not match.
    pub fn refusal(&self) -> Option<axum::response::Response> {
        self.0.load(std::sync::atomic::Ordering::SeqCst).then(|| {
            refusal(
                http::StatusCode::BAD_REQUEST,
                "BadDigest",
                "the request body's digest is not the Content-MD5 or x-amz-checksum-* it declared; nothing was done (send it again, or check what alters it on the way)",
            )
        })
    }
}

/// A POST's XML body (DeleteObjects: Content-MD5 or `x-amz-checksum-*`; CompleteMultipartUpload:
/// Content-MD5) judged against the digest it declares: s3s does not check them, so a wrong one
/// would be answered 200 and its keys deleted. Judged as s3s reads the body, which it does only
/// once the signature and the access check passed (a check that read the body first would let
/// anyone make fencegate hold bodies). A body that does not match ends before its last chunk,
/// so s3s refuses it as incomplete and nothing is done; the caller answers
/// [`DigestMismatch::refusal`] instead.
pub fn post_body_checked(
    req: axum::extract::Request,
) -> Result<(axum::extract::Request, Option<DigestMismatch>), Box<axum::response::Response>> {
    use futures::StreamExt;
    let query = req.uri().query().unwrap_or("");
    let op = |name: &str| {
        query
            .split('&')
            .any(|p| p.split_once('=').map_or(p, |(k, _)| k) == name)
    };
    // s3s routes a POST naming `delete` to DeleteObjects whatever else it names.
    let (delete, complete) = (op("delete"), !op("delete") && op("uploadId"));
    if req.method() != http::Method::POST || !(delete || complete) {
        return Ok((req, None));
    }
    let md5 = req
        .headers()
        .get("content-md5")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    // A completion's x-amz-checksum-* is the object's, judged by its parts'
    // (`part_checksums`); only its Content-MD5 is the XML body's.
    let mut headers = req.headers().clone();
    if complete {
        let object_checksums: Vec<http::HeaderName> = headers
            .keys()
            .filter(|k| k.as_str().starts_with("x-amz-checksum-"))
            .cloned()
            .collect();
        for name in object_checksums {
            headers.remove(name);
        }
    }
    let refuse = |status, code: &str, message: &str| Err(Box::new(refusal(status, code, message)));
    let declared = match digests::Declared::of(&headers, None, md5.as_deref()) {
        Ok(d) => d,
        Err(e) => {
            return refuse(
                e.status_code().unwrap_or(http::StatusCode::BAD_REQUEST),
                e.code().as_str(),
                e.message().unwrap_or_default(),
            )
        }
    };
    if declared.is_empty() {
        return Ok((req, None));
    }
    let streaming = req
        .headers()
        .get("x-amz-content-sha256")
        .is_some_and(|v| v.as_bytes().starts_with(b"STREAMING-"));
    if streaming {
        // Its digest would be of the aws-chunked framing, not of the XML.
        return refuse(
            http::StatusCode::BAD_REQUEST,
            "InvalidRequest",
            "an aws-chunked XML body cannot have its Content-MD5 or checksum checked here; send the body plain",
        );
    }
    let mismatch = DigestMismatch::default();
    let seen = mismatch.clone();
    let (parts, body) = req.into_parts();
    let stream = body
        .into_data_stream()
        .map(|r| r.map_err(|e| BodyError::Broken(e.to_string())))
        .boxed();
    let checked = digests::verify(stream, declared).scan((), move |_, chunk| {
        futures::future::ready(match chunk {
            Ok(bytes) => Some(Ok(bytes)),
            Err(BodyError::BadDigest(_)) => {
                seen.0.store(true, std::sync::atomic::Ordering::SeqCst);
                None
            }
            Err(e) => Some(Err(std::io::Error::other(e.to_string()))),
        })
    });
    Ok((
        axum::extract::Request::from_parts(parts, axum::body::Body::from_stream(checked)),
        Some(mismatch),
    ))
}

/// The service a SigV4 credential (Authorization header or `X-Amz-Credential`) is scoped to,
/// when it is not `s3`. Unparseable credentials are left to s3s, which refuses them.
fn foreign_service(req: &axum::extract::Request) -> Option<String> {
    let from_header = req
        .headers()
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .map(|v| {
            // Read as s3s reads it (sig_v4/authorization_v4.rs): the first word, whatever it
            // is, then whitespace, then `Credential=`. Not the first `Credential=` anywhere:
            // a decoy one inside the first word would hide the real one. A header
            // that is not of this shape counts as a foreign credential: s3s would only refuse
            // it, and nothing of it should reach s3s's body reads.
            let text = String::from_utf8_lossy(v.as_bytes()).into_owned();
            let credential = text
                .split_once(|c: char| c.is_ascii_whitespace())
                .and_then(|(_, rest)| rest.trim_start().strip_prefix("Credential="))
                .map(|rest| rest[..rest.find([',', ' ']).unwrap_or(rest.len())].to_string());
            match credential {
                Some(c) => c,
                None if text.starts_with("AWS ") => "SigV2/-/-/s3/aws4_request".to_string(),
                None => "unparsed/-/-/unparsed/-".to_string(),
            }
        });
    let from_query = req.uri().query().into_iter().flat_map(|q| {
        q.split('&').filter_map(|p| {
            let (k, v) = p.split_once('=')?;
            let k = percent_encoding::percent_decode_str(k).decode_utf8_lossy();
            (k == "X-Amz-Credential").then(|| {
                percent_encoding::percent_decode_str(v)
                    .decode_utf8_lossy()
                    .into_owned()
            })
        })
    });
    from_header.chain(from_query).find_map(|credential| {
        // access-key/date/region/service/aws4_request. Anything else is refused as unparsed,
        // never let through (a credential cut short at a ',' in the key id would otherwise
        // read as "not foreign").
        let parts: Vec<&str> = credential.rsplitn(3, '/').collect();
        let service = match parts.as_slice() {
            ["aws4_request", service, rest] if rest.split('/').count() == 3 => *service,
            _ => "unparsed",
        };
        // Shown in the refusal: letters, digits and '-' only.
        (service != "s3").then(|| {
            service
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .take(32)
                .collect()
        })
    })
}

/// A refusal before s3s: its error document, and the connection closed, since the request's
/// body was not read.
fn refusal(status: http::StatusCode, code: &str, message: &str) -> axum::response::Response {
    let mut resp = answer::error(status, code, message);
    resp.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    resp
}

/// Virtual-host-style addressing: `bucket.domain[:port]` names the bucket; any other host
/// (the domain itself, an IP address, localhost) is path-style.
struct VirtualHosts {
    domain: String,
}

impl s3s::host::S3Host for VirtualHosts {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> s3s::S3Result<s3s::host::VirtualHost<'a>> {
        let name = host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        });
        let bucket = name
            .strip_suffix(self.domain.as_str())
            .and_then(|rest| rest.strip_suffix('.'))
            .filter(|b| !b.is_empty());
        let vh = s3s::host::VirtualHost::new(self.domain.as_str());
        Ok(match bucket {
            Some(b) => vh.with_bucket(b),
            None => vh,
        })
    }
}

#[async_trait::async_trait]
impl s3s::S3 for S3Gateway {
    async fn put_object(
        &self,
        req: s3s::S3Request<s3s::dto::PutObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::PutObjectOutput>> {
        objects::put_object(self, req).await
    }

    async fn get_object(
        &self,
        req: s3s::S3Request<s3s::dto::GetObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::GetObjectOutput>> {
        objects::get_object(self, req).await
    }

    async fn head_object(
        &self,
        req: s3s::S3Request<s3s::dto::HeadObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::HeadObjectOutput>> {
        objects::head_object(self, req).await
    }

    async fn delete_object(
        &self,
        req: s3s::S3Request<s3s::dto::DeleteObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::DeleteObjectOutput>> {
        objects::delete_object(self, req).await
    }

    async fn delete_objects(
        &self,
        req: s3s::S3Request<s3s::dto::DeleteObjectsInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::DeleteObjectsOutput>> {
        objects::delete_objects(self, req).await
    }

    async fn copy_object(
        &self,
        req: s3s::S3Request<s3s::dto::CopyObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::CopyObjectOutput>> {
        objects::copy_object(self, req).await
    }

    async fn list_objects_v2(
        &self,
        req: s3s::S3Request<s3s::dto::ListObjectsV2Input>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::ListObjectsV2Output>> {
        listing::list_objects_v2(self, req).await
    }

    async fn list_objects(
        &self,
        req: s3s::S3Request<s3s::dto::ListObjectsInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::ListObjectsOutput>> {
        listing::list_objects(self, req).await
    }

    async fn list_buckets(
        &self,
        req: s3s::S3Request<s3s::dto::ListBucketsInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::ListBucketsOutput>> {
        buckets::list_buckets(self, req).await
    }

    async fn head_bucket(
        &self,
        req: s3s::S3Request<s3s::dto::HeadBucketInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::HeadBucketOutput>> {
        buckets::head_bucket(self, req).await
    }

    async fn get_bucket_location(
        &self,
        req: s3s::S3Request<s3s::dto::GetBucketLocationInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::GetBucketLocationOutput>> {
        buckets::get_bucket_location(self, req).await
    }

    async fn create_bucket(
        &self,
        req: s3s::S3Request<s3s::dto::CreateBucketInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::CreateBucketOutput>> {
        buckets::create_bucket(self, req).await
    }

    async fn delete_bucket(
        &self,
        req: s3s::S3Request<s3s::dto::DeleteBucketInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::DeleteBucketOutput>> {
        buckets::delete_bucket(self, req).await
    }

    async fn list_object_versions(
        &self,
        req: s3s::S3Request<s3s::dto::ListObjectVersionsInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::ListObjectVersionsOutput>> {
        listing::list_object_versions(self, req).await
    }

    async fn get_bucket_acl(
        &self,
        req: s3s::S3Request<s3s::dto::GetBucketAclInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::GetBucketAclOutput>> {
        bucket_config::existing(self, &req.input.bucket)?;
        Ok(s3s::S3Response::new(bucket_config::owner_acl()))
    }

    bucket_config_methods!(missing:
        get_bucket_cors(GetBucketCorsInput, GetBucketCorsOutput) => "NoSuchCORSConfiguration", "CORS configuration";
        get_bucket_lifecycle_configuration(GetBucketLifecycleConfigurationInput, GetBucketLifecycleConfigurationOutput) => "NoSuchLifecycleConfiguration", "lifecycle configuration";
        get_bucket_policy(GetBucketPolicyInput, GetBucketPolicyOutput) => "NoSuchBucketPolicy", "bucket policy";
        get_bucket_policy_status(GetBucketPolicyStatusInput, GetBucketPolicyStatusOutput) => "NoSuchBucketPolicy", "bucket policy";
        get_bucket_tagging(GetBucketTaggingInput, GetBucketTaggingOutput) => "NoSuchTagSet", "tag set";
        get_bucket_website(GetBucketWebsiteInput, GetBucketWebsiteOutput) => "NoSuchWebsiteConfiguration", "website configuration";
        get_bucket_replication(GetBucketReplicationInput, GetBucketReplicationOutput) => "ReplicationConfigurationNotFoundError", "replication configuration";
        get_bucket_encryption(GetBucketEncryptionInput, GetBucketEncryptionOutput) => "ServerSideEncryptionConfigurationNotFoundError", "server-side encryption configuration";
        get_object_lock_configuration(GetObjectLockConfigurationInput, GetObjectLockConfigurationOutput) => "ObjectLockConfigurationNotFoundError", "object lock configuration";
        get_bucket_ownership_controls(GetBucketOwnershipControlsInput, GetBucketOwnershipControlsOutput) => "OwnershipControlsNotFoundError", "ownership controls";
        get_public_access_block(GetPublicAccessBlockInput, GetPublicAccessBlockOutput) => "NoSuchPublicAccessBlockConfiguration", "public access block configuration";
    );

    bucket_config_methods!(empty:
        get_bucket_versioning(GetBucketVersioningInput, GetBucketVersioningOutput) => s3s::dto::GetBucketVersioningOutput::default();
        get_bucket_logging(GetBucketLoggingInput, GetBucketLoggingOutput) => s3s::dto::GetBucketLoggingOutput::default();
        get_bucket_accelerate_configuration(GetBucketAccelerateConfigurationInput, GetBucketAccelerateConfigurationOutput) => s3s::dto::GetBucketAccelerateConfigurationOutput::default();
        get_bucket_notification_configuration(GetBucketNotificationConfigurationInput, GetBucketNotificationConfigurationOutput) => s3s::dto::GetBucketNotificationConfigurationOutput::default();
        get_bucket_request_payment(GetBucketRequestPaymentInput, GetBucketRequestPaymentOutput) => s3s::dto::GetBucketRequestPaymentOutput {
            payer: Some(s3s::dto::Payer::from_static(s3s::dto::Payer::BUCKET_OWNER)),
        };
    );

    bucket_config_methods!(delete:
        delete_bucket_cors(DeleteBucketCorsInput, DeleteBucketCorsOutput);
        delete_bucket_lifecycle(DeleteBucketLifecycleInput, DeleteBucketLifecycleOutput);
        delete_bucket_policy(DeleteBucketPolicyInput, DeleteBucketPolicyOutput);
        delete_bucket_tagging(DeleteBucketTaggingInput, DeleteBucketTaggingOutput);
        delete_bucket_website(DeleteBucketWebsiteInput, DeleteBucketWebsiteOutput);
        delete_bucket_replication(DeleteBucketReplicationInput, DeleteBucketReplicationOutput);
        delete_bucket_encryption(DeleteBucketEncryptionInput, DeleteBucketEncryptionOutput);
        delete_bucket_ownership_controls(DeleteBucketOwnershipControlsInput, DeleteBucketOwnershipControlsOutput);
        delete_public_access_block(DeletePublicAccessBlockInput, DeletePublicAccessBlockOutput);
    );

    bucket_config_methods!(refuse:
        put_bucket_versioning(PutBucketVersioningInput, PutBucketVersioningOutput) => "PutBucketVersioning", "versioning (every bucket is unversioned)";
        put_bucket_acl(PutBucketAclInput, PutBucketAclOutput) => "PutBucketAcl", "ACLs (access is the key table's, config/keys)";
        put_bucket_cors(PutBucketCorsInput, PutBucketCorsOutput) => "PutBucketCors", "CORS configuration";
        put_bucket_lifecycle_configuration(PutBucketLifecycleConfigurationInput, PutBucketLifecycleConfigurationOutput) => "PutBucketLifecycleConfiguration", "lifecycle configuration";
        put_bucket_policy(PutBucketPolicyInput, PutBucketPolicyOutput) => "PutBucketPolicy", "bucket policy (access is the key table's)";
        put_bucket_tagging(PutBucketTaggingInput, PutBucketTaggingOutput) => "PutBucketTagging", "tag set";
        put_bucket_website(PutBucketWebsiteInput, PutBucketWebsiteOutput) => "PutBucketWebsite", "website configuration";
        put_bucket_replication(PutBucketReplicationInput, PutBucketReplicationOutput) => "PutBucketReplication", "replication configuration";
        put_bucket_encryption(PutBucketEncryptionInput, PutBucketEncryptionOutput) => "PutBucketEncryption", "server-side encryption configuration";
        put_object_lock_configuration(PutObjectLockConfigurationInput, PutObjectLockConfigurationOutput) => "PutObjectLockConfiguration", "object lock configuration";
        put_bucket_logging(PutBucketLoggingInput, PutBucketLoggingOutput) => "PutBucketLogging", "access logging configuration";
        put_bucket_request_payment(PutBucketRequestPaymentInput, PutBucketRequestPaymentOutput) => "PutBucketRequestPayment", "request payment configuration";
        put_bucket_accelerate_configuration(PutBucketAccelerateConfigurationInput, PutBucketAccelerateConfigurationOutput) => "PutBucketAccelerateConfiguration", "transfer acceleration";
        put_bucket_ownership_controls(PutBucketOwnershipControlsInput, PutBucketOwnershipControlsOutput) => "PutBucketOwnershipControls", "ownership controls";
        put_public_access_block(PutPublicAccessBlockInput, PutPublicAccessBlockOutput) => "PutPublicAccessBlock", "public access block configuration";
        put_bucket_notification_configuration(PutBucketNotificationConfigurationInput, PutBucketNotificationConfigurationOutput) => "PutBucketNotificationConfiguration", "event notifications";
    );

    async fn create_multipart_upload(
        &self,
        req: s3s::S3Request<s3s::dto::CreateMultipartUploadInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::CreateMultipartUploadOutput>> {
        multipart::create(self, req).await
    }

    async fn upload_part(
        &self,
        req: s3s::S3Request<s3s::dto::UploadPartInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::UploadPartOutput>> {
        multipart::upload_part(self, req).await
    }

    async fn upload_part_copy(
        &self,
        req: s3s::S3Request<s3s::dto::UploadPartCopyInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::UploadPartCopyOutput>> {
        multipart::upload_part_copy(self, req).await
    }

    async fn complete_multipart_upload(
        &self,
        req: s3s::S3Request<s3s::dto::CompleteMultipartUploadInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::CompleteMultipartUploadOutput>> {
        multipart::complete(self, req).await
    }

    async fn abort_multipart_upload(
        &self,
        req: s3s::S3Request<s3s::dto::AbortMultipartUploadInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::AbortMultipartUploadOutput>> {
        multipart::abort(self, req).await
    }

    async fn list_multipart_uploads(
        &self,
        req: s3s::S3Request<s3s::dto::ListMultipartUploadsInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::ListMultipartUploadsOutput>> {
        multipart::list_uploads(self, req).await
    }

    async fn list_parts(
        &self,
        req: s3s::S3Request<s3s::dto::ListPartsInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::ListPartsOutput>> {
        multipart::list_parts(self, req).await
    }
}
/// Answers one request with the S3 gateway: fencegate's own refusals first (those it must
/// make before s3s reads a body), then s3s, then the request id on whatever answers.
pub async fn serve(
    s3: &s3s::service::S3Service,
    req: axum::extract::Request,
) -> axum::response::Response {
    crate::metrics::http::S3Op::handed(req.extensions());
    let id = crate::http::RequestId::of(req.extensions());
    if let Some(refusal) = refused_before_s3s(&req) {
        return answer::finish(refusal, &id).await;
    }
    let (mut parts, body) = req.into_parts();
    if let Err((status, code, message)) = sigv2::lift_signed_headers(&parts.uri, &mut parts.headers)
    {
        return answer::finish(refusal(status, code, &message), &id).await;
    }
    chunked::stand_in_length(&mut parts);
    let req = axum::extract::Request::from_parts(parts, body);
    let (req, mismatch) = match post_body_checked(req) {
        Ok(checked) => checked,
        Err(refusal) => return answer::finish(*refusal, &id).await,
    };
    let req = req.map(s3s::Body::http_body_unsync);
    let resp = match s3.call(req).await {
        Ok(resp) => resp.map(axum::body::Body::new),
        Err(e) => {
            tracing::error!(error = ?e, "the S3 layer failed");
            answer::error(
                http::StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "the S3 layer failed; see the server log",
            )
        }
    };
    // A body that did not match its digest was cut short, so s3s refused it as incomplete:
    // the client hears why.
    let resp = match mismatch.and_then(|m| m.refusal()) {
        Some(refusal) => refusal,
        None => resp,
    };
    answer::finish(resp, &id).await
}
