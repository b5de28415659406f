//! Building aws-sdk-s3 clients from an `[backends.NAME]` table of kind `s3`: endpoint, region,
//! credentials (static, or the SDK's environment/profile chain), path style, timeouts, and
//! for an https endpoint the system roots plus an optional CA file.
//!
//! Two clients share one configuration: `reads` retries with backoff; `writes` never retries,
//! because a conditional commit whose outcome is unknown must be read back, not re-sent. The
//! signer's client (`signer.rs`) has the same timeouts and trust.

use crate::config::S3BackendConfig;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_s3::config::{Credentials, RequestChecksumCalculation, ResponseChecksumValidation};
use aws_sdk_s3::Client;
use std::time::Duration;

#[derive(Clone)]
pub struct S3Clients {
    pub reads: Client,
    pub writes: Client,
    /// The hot calls (`direct.rs`) and cluster mode's presigned commits and deletes, signed
    /// here (`signer.rs`).
    pub signer: std::sync::Arc<super::signer::Signer>,
}

pub async fn build(cfg: &S3BackendConfig) -> Result<S3Clients, String> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(cfg.region.clone()))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(cfg.connect_timeout_secs))
                .read_timeout(Duration::from_secs(cfg.read_timeout_secs))
                .operation_timeout(Duration::from_secs(cfg.call_timeout_secs))
                .build(),
        );
    if let (Some(id), Some(secret)) = (&cfg.access_key_id, &cfg.secret_access_key) {
        loader = loader.credentials_provider(Credentials::new(
            id.clone(),
            secret.clone(),
            None,
            None,
            "fencegate-config",
        ));
    }
    if let Some(endpoint) = &cfg.endpoint {
        loader = loader.endpoint_url(endpoint.clone());
    }
    if let Some(path) = &cfg.ca_file {
        loader = loader.http_client(https_trusting(path)?);
    }
    let shared = loader.load().await;
    let path_style = cfg.path_style.unwrap_or(cfg.endpoint.is_some());
    let client = |retry: RetryConfig| {
        // Checksums only where the API demands them: fencegate computes the MD5 ETag itself,
        // and an aws-chunked body with a trailing CRC costs CPU on both ends of every PUT.
        let conf = aws_sdk_s3::config::Builder::from(&shared)
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .force_path_style(path_style)
            .retry_config(retry)
            .build();
        Client::from_conf(conf)
    };
    let signer = super::signer::Signer {
        http: signing_http(cfg)?,
        credentials: shared.credentials_provider(),
        cached: Default::default(),
        read_attempts: cfg.read_attempts,
        call_timeout: Duration::from_secs(cfg.call_timeout_secs),
        sdk_endpoint: sdk_endpoint(cfg, &shared),
        use_fips: shared.use_fips().unwrap_or(false),
        use_dual_stack: shared.use_dual_stack().unwrap_or(false),
        bases: Default::default(),
        region: cfg.region.clone(),
        endpoint: sdk_endpoint(cfg, &shared)
            .unwrap_or_else(|| format!("https://s3.{}.amazonaws.com", cfg.region)),
        path_style,
    };
    Ok(S3Clients {
        signer: std::sync::Arc::new(signer),
        reads: client(
            RetryConfig::standard()
                .with_max_attempts(cfg.read_attempts)
                .with_initial_backoff(Duration::from_millis(100)),
        ),
        writes: client(RetryConfig::disabled()),
    })
}

/// The endpoint the SDK's S3 clients are given: the configured one, else the environment's or
/// profile's for S3 (`AWS_ENDPOINT_URL_S3`, a profile's `services` section), else the global
/// one (`AWS_ENDPOINT_URL`), as `aws_sdk_s3::config::Builder::from` reads them.
fn sdk_endpoint(cfg: &S3BackendConfig, shared: &aws_config::SdkConfig) -> Option<String> {
    let s3 = aws_types::service_config::ServiceConfigKey::builder()
        .service_id("S3")
        .env("AWS_ENDPOINT_URL")
        .profile("endpoint_url")
        .build()
        .ok();
    cfg.endpoint
        .clone()
        .or_else(|| shared.service_config()?.load_config(s3?))
        .or_else(|| shared.endpoint_url().map(str::to_string))
}

/// The pooled HTTP client of the requests signed here (`signer.rs`): the same timeouts as the
/// SDK's, the system roots and the optional CA file for https; it never retries by itself
/// ([`crate::backend::store_http`]).
fn signing_http(cfg: &S3BackendConfig) -> Result<reqwest::Client, String> {
    crate::backend::store_http::client(&crate::backend::store_http::Settings {
        connect_timeout: Duration::from_secs(cfg.connect_timeout_secs),
        read_timeout: Duration::from_secs(cfg.read_timeout_secs),
        call_timeout: Duration::from_secs(cfg.call_timeout_secs),
        ca_file: cfg.ca_file.as_deref(),
    })
}

/// An HTTPS client that trusts the system roots and the certificates in the PEM file `path`
/// (a private CA in front of MinIO or Ceph, say).
fn https_trusting(
    path: &std::path::Path,
) -> Result<aws_smithy_runtime_api::client::http::SharedHttpClient, String> {
    use aws_smithy_http_client::tls;
    let pem =
        std::fs::read(path).map_err(|e| format!("cannot read ca_file {}: {e}", path.display()))?;
    let context = tls::TlsContext::builder()
        .with_trust_store(tls::TrustStore::default().with_pem_certificate(pem))
        .build()
        .map_err(|e| {
            format!(
                "ca_file {} is not a usable PEM certificate: {e}",
                path.display()
            )
        })?;
    Ok(aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::AwsLc,
        ))
        .tls_context(context)
        .build_https())
}
