//! Building aws-sdk-s3 clients from an `[backends.NAME]` table of kind `s3`: endpoint, region,
//! credentials (static, or the SDK's environment/profile chain), path style, timeouts, and
//! for an https endpoint the system roots plus an optional CA file.
//!
//! Two clients share one configuration: `reads` retries with backoff; `writes` never retries,
//! because a conditional commit whose outcome is unknown must be read back, not re-sent.

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
}

pub async fn build(cfg: &S3BackendConfig) -> Result<S3Clients, String> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(cfg.region.clone()))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(cfg.connect_timeout_secs))
                .read_timeout(Duration::from_secs(cfg.read_timeout_secs))
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
    Ok(S3Clients {
        reads: client(
            RetryConfig::standard()
                .with_max_attempts(cfg.read_attempts)
                .with_initial_backoff(Duration::from_millis(100)),
        ),
        writes: client(RetryConfig::disabled()),
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
