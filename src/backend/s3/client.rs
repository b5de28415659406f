//! Building aws-sdk-s3 clients from an `[backends.NAME]` table of kind `s3`: endpoint, region,
//! credentials (static, or the SDK's environment/profile chain), path style and timeouts.
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

pub async fn build(cfg: &S3BackendConfig) -> S3Clients {
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
    S3Clients {
        reads: client(
            RetryConfig::standard()
                .with_max_attempts(cfg.read_attempts)
                .with_initial_backoff(Duration::from_millis(100)),
        ),
        writes: client(RetryConfig::disabled()),
    }
}
