//! The gcs store's rows: what `backend::gcs::probe` found (each condition alone, an expired
//! signed URL, the race of writers creating one object) and the clock compared with the
//! service's, as `serve` checks them at start-up. There is no opt-in on gcs: a service that
//! fails any row is refused.

use super::{strict, Verdict};
use crate::backend::gcs::{GcsBackend, GcsClient};
use crate::backend::strict::StrictStore;
use crate::config::{Config, GcsBackendConfig};
use std::sync::Arc;

/// What fencegate does with a condition the service honours.
fn action(condition: &str) -> &'static str {
    if condition.contains("DELETE") {
        "deletes conditionally"
    } else if condition.starts_with("Content-MD5") {
        "sends each body with its MD5: the service keeps exactly the bytes sent"
    } else if condition.contains("source's Generation") {
        "composes staged pieces only at the generations staged"
    } else if condition.contains("expiry") {
        "sends each commit by a signed URL that expires at its deadline: a commit held in flight cannot land late"
    } else {
        "commits conditionally: a write made around fencegate is never overwritten"
    }
}

/// `probe-store` on gcs backend `name`: each of `targets` (bucket, prefix) probed with
/// `writers` in the race, else as many as `serve` races at start-up.
pub(super) async fn probe_store(
    config: &Config,
    cfg: &GcsBackendConfig,
    name: &str,
    targets: Vec<(String, String)>,
    writers: Option<usize>,
) -> Result<Vec<Verdict>, String> {
    let client = Arc::new(GcsClient::build(cfg).map_err(|e| format!("backend {name}: {e}"))?);
    let make = |bucket: &str, prefix: &str| {
        GcsBackend::new(client.clone(), bucket, prefix, cfg.block_size_bytes)
    };
    let writers = writers.unwrap_or(GcsBackend::RACERS);
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
