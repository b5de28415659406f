//! The S3 gateway surface (README: "Use it as an S3 endpoint"): the S3 REST API, parsed and
//! signed by `s3s`, turned into gate calls. Like the native API it decides nothing: tokens, scopes and commits are the
//! gate's. One file per group of operations, over the helpers here.

mod access;
pub mod answer;
#[macro_use]
mod bucket_config;
mod buckets;
mod checksums;
mod chunked;
mod convert;
mod copy;
mod cors;
mod listing;
mod lost_lease;
mod multipart;
mod objects;
mod paging;
mod part_checksums;
mod refusals;
mod sigv2;
mod tags;
mod unkept;

pub use crate::auth::KeyTable;
use refusals::refusal;
pub use refusals::{post_body_checked, refused_before_s3s, PostBodyVerdict};

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

/// The S3 endpoint: the `s3s` service, and the buckets' CORS rules answered around it.
#[derive(Clone)]
pub struct Endpoint {
    service: S3Service,
    cors: cors::Cors,
}

/// Builds the S3 endpoint: SigV4 against the configured keys, access rules per key, and
/// virtual-host-style addressing when a domain is configured.
pub fn service(gateway: S3Gateway, cfg: &S3GatewayConfig) -> Result<Endpoint, String> {
    let keys = gateway.keys.clone();
    let gateway_catalog = gateway.catalog.clone();
    let cors = cors::Cors::new(
        gateway.gate.clone(),
        gateway.catalog.clone(),
        cfg.domain.clone(),
    );
    let mut builder = S3ServiceBuilder::new(gateway);
    builder.set_auth(access::Auth(keys.clone()));
    builder.set_access(access::Access(keys, gateway_catalog));
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
    Ok(Endpoint {
        service: builder.build(),
        cors,
    })
}

/// What s3s may buffer before fencegate's access check runs. Its defaults allow a 5 GiB
/// browser-form upload and 20 MB XML bodies, all in memory. fencegate serves no POST object
/// (refused before s3s, [`refused_before_s3s`]); the largest XML it takes is a
/// CompleteMultipartUpload of 10000 parts or a DeleteObjects of 1000 keys, about 1 MiB.
fn s3s_limits() -> s3s::config::S3Config {
    let mut config = s3s::config::S3Config::default();
    config.xml_max_body_size = refusals::MAX_XML_BODY as usize;
    config.post_object_max_file_size = 0;
    config.form_max_field_size = 64 * 1024;
    config.form_max_fields_size = 256 * 1024;
    config.form_max_parts = 64;
    config
}

/// Virtual-host-style addressing: `bucket.domain[:port]` names the bucket; any other host
/// (the domain itself, an IP address, localhost) is path-style.
struct VirtualHosts {
    domain: String,
}

impl s3s::host::S3Host for VirtualHosts {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> s3s::S3Result<s3s::host::VirtualHost<'a>> {
        let vh = s3s::host::VirtualHost::new(self.domain.as_str());
        Ok(match host_bucket(&self.domain, host) {
            Some(b) => vh.with_bucket(b),
            None => vh,
        })
    }
}

/// The bucket a `Host` names in virtual-host style, `bucket.domain[:port]` (`domain`
/// lowercase); `None` for any other host.
fn host_bucket<'a>(domain: &str, host: &'a str) -> Option<&'a str> {
    let name = host.rsplit_once(':').map_or(host, |(h, port)| {
        if port.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            host
        }
    });
    name.strip_suffix(domain)
        .and_then(|rest| rest.strip_suffix('.'))
        .filter(|b| !b.is_empty())
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

    async fn get_object_attributes(
        &self,
        req: s3s::S3Request<s3s::dto::GetObjectAttributesInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::GetObjectAttributesOutput>> {
        checksums::attributes(self, req).await
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
        copy::copy_object(self, req).await
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

    async fn get_object_acl(
        &self,
        req: s3s::S3Request<s3s::dto::GetObjectAclInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::GetObjectAclOutput>> {
        objects::unversioned(req.input.version_id.as_deref())?;
        let acl = bucket_config::object_acl(self, &req.input.bucket, &req.input.key).await?;
        Ok(s3s::S3Response::new(acl))
    }

    async fn get_object_tagging(
        &self,
        req: s3s::S3Request<s3s::dto::GetObjectTaggingInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::GetObjectTaggingOutput>> {
        tags::get(self, req).await
    }

    async fn delete_object_tagging(
        &self,
        req: s3s::S3Request<s3s::dto::DeleteObjectTaggingInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::DeleteObjectTaggingOutput>> {
        tags::delete(self, req).await
    }

    async fn put_object_tagging(
        &self,
        req: s3s::S3Request<s3s::dto::PutObjectTaggingInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::PutObjectTaggingOutput>> {
        tags::put(self, req).await
    }

    async fn get_bucket_acl(
        &self,
        req: s3s::S3Request<s3s::dto::GetBucketAclInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::GetBucketAclOutput>> {
        bucket_config::existing(self, &req.input.bucket)?;
        Ok(s3s::S3Response::new(bucket_config::owner_acl()))
    }

    async fn get_bucket_cors(
        &self,
        req: s3s::S3Request<s3s::dto::GetBucketCorsInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::GetBucketCorsOutput>> {
        Ok(s3s::S3Response::new(cors::configured(
            self,
            &req.input.bucket,
        )?))
    }

    async fn put_bucket_cors(
        &self,
        req: s3s::S3Request<s3s::dto::PutBucketCorsInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::PutBucketCorsOutput>> {
        bucket_config::existing(self, &req.input.bucket)?;
        Err(cors::set_in_file("PutBucketCors", &req.input.bucket))
    }

    async fn delete_bucket_cors(
        &self,
        req: s3s::S3Request<s3s::dto::DeleteBucketCorsInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::DeleteBucketCorsOutput>> {
        cors::delete(self, &req.input.bucket)?;
        let mut resp = s3s::S3Response::new(s3s::dto::DeleteBucketCorsOutput::default());
        resp.status = Some(http::StatusCode::NO_CONTENT);
        Ok(resp)
    }

    bucket_config_methods!(missing:
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
        put_object_acl(PutObjectAclInput, PutObjectAclOutput) => "PutObjectAcl", "ACLs (access is the key table's, config/keys)";
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
/// Answers one request with the S3 gateway: a CORS preflight by the bucket's rules, else
/// fencegate's own refusals first (those it must make before s3s reads a body), then s3s; the
/// request id on whatever answers, and the CORS headers of a request a rule allows.
pub async fn serve(s3: &Endpoint, req: axum::extract::Request) -> axum::response::Response {
    crate::metrics::http::S3Op::handed(req.extensions());
    let id = crate::http::RequestId::of(req.extensions());
    if req.method() == http::Method::OPTIONS {
        crate::metrics::http::S3Op::resolved(req.extensions(), "PreflightRequest");
        let preflight = s3.cors.preflight(req.uri(), req.headers()).await;
        return answer::finish(preflight, &id).await;
    }
    let allowed = s3
        .cors
        .allowed(req.method(), req.uri(), req.headers())
        .await;
    cors::apply(answered(&s3.service, req, &id).await, allowed)
}

async fn answered(
    s3: &s3s::service::S3Service,
    req: axum::extract::Request,
    id: &str,
) -> axum::response::Response {
    if let Some(refusal) = refused_before_s3s(&req) {
        return answer::finish(refusal, id).await;
    }
    let (mut parts, body) = req.into_parts();
    if let Err((status, code, message)) = sigv2::lift_signed_headers(&parts.uri, &mut parts.headers)
    {
        return answer::finish(refusal(status, code, &message), id).await;
    }
    // Again once a presigned URL's parameters are headers.
    if let Some(message) = refusals::foreign_owner(&parts.headers) {
        let denied = refusal(http::StatusCode::FORBIDDEN, "AccessDenied", &message);
        return answer::finish(denied, id).await;
    }
    chunked::stand_in_length(&mut parts);
    let body = match chunked::set_aside(&mut parts, body) {
        Ok(body) => body,
        Err((status, code, message)) => {
            return answer::finish(refusal(status, code, &message), id).await
        }
    };
    let signed_by_lease = lost_lease::SignedByLease::default();
    parts.extensions.insert(signed_by_lease.clone());
    let req = axum::extract::Request::from_parts(parts, body);
    let (req, verdict) = match post_body_checked(req) {
        Ok(checked) => checked,
        Err(refusal) => return answer::finish(*refusal, id).await,
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
    // A body that did not match its digest, or ran past the limit, was cut short, so s3s
    // refused it as incomplete: the client hears why.
    let resp = match verdict.and_then(|v| v.refusal()) {
        Some(refusal) => refusal,
        None => resp,
    };
    let resp = signed_by_lease.answer(answer::finish(resp, id).await);
    audit_signature_refusal(&resp);
    resp
}

/// s3s checks signatures and dates itself, after the key lookup (which audits an unknown key):
/// its refusals are audited here, as the native API's are, with the access key the request
/// claimed (the span's `access_key`).
fn audit_signature_refusal(resp: &axum::response::Response) {
    let code = resp
        .extensions()
        .get::<crate::metrics::codes::ErrorCode>()
        .map(|c| c.0.as_str());
    if let Some(code @ ("SignatureDoesNotMatch" | "RequestTimeTooSkewed")) = code {
        tracing::info!(target: "fencegate::audit", code, status = resp.status().as_u16(), "S3 authentication failed");
    }
}
