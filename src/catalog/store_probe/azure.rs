//! The azure store's rows: what `backend::azure::probe` found (each condition alone, the race
//! of writers creating one blob) and the clock compared with the service's, as `serve` checks
//! them at start-up. There is no opt-in on azure: a service that fails any row is refused.

use super::{strict, Verdict};
use crate::backend::azure::{AzureBackend, AzureClient};
use crate::backend::strict::StrictStore;
use crate::config::{AzureBackendConfig, Config};
use std::sync::Arc;

/// What fencegate does with a condition the service honours.
fn action(condition: &str) -> &'static str {
    if condition.contains("Delete Blob") {
        "deletes conditionally"
    } else if condition.starts_with("Content-MD5") {
        "sends each body with its MD5: the service keeps exactly the bytes sent"
    } else if condition.starts_with("x-ms-source-if-match") {
        "copies a staged body only at the version staged"
    } else if condition.contains("expiry") {
        "authorizes each commit by a SAS that expires at its deadline: a commit held in flight cannot land late"
    } else {
        "commits conditionally: a write made around fencegate is never overwritten"
    }
}

/// `probe-store` on azure backend `name`: each of `targets` (bucket, prefix) probed with
/// `writers` in the race, else as many as `serve` races at start-up.
pub(super) async fn probe_store(
    config: &Config,
    cfg: &AzureBackendConfig,
    name: &str,
    targets: Vec<(String, String)>,
    writers: Option<usize>,
) -> Result<Vec<Verdict>, String> {
    let client = Arc::new(AzureClient::build(cfg).map_err(|e| format!("backend {name}: {e}"))?);
    let make = |bucket: &str, prefix: &str| {
        AzureBackend::new(client.clone(), bucket, prefix, cfg.block_size_bytes)
    };
    let writers = writers.unwrap_or(AzureBackend::RACERS);
    strict::probe_store(
        config,
        name,
        targets,
        writers,
        (make, cfg.commit_deadline_secs),
        action,
    )
    .await
}
