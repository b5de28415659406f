//! The gcs store's rows: what `backend::gcs::probe` found (each condition alone, an expired
//! signed URL, the race of writers creating one object) and the clock compared with the
//! service's, as `serve` checks them at start-up. There is no opt-in on gcs: a service that
//! fails any row is refused.

use super::{strict, Verdict};
use crate::backend::gcs::probe::{self, CONDITIONS};
use crate::backend::gcs::{self, GcsBackend, GcsClient};
use crate::config::{Config, GcsBackendConfig};
use std::sync::Arc;
use std::time::Duration;

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
/// `writers` in the race.
pub(super) async fn probe_store(
    config: &Config,
    cfg: &GcsBackendConfig,
    name: &str,
    targets: Vec<(String, String)>,
    writers: usize,
) -> Result<Vec<Verdict>, String> {
    let client = Arc::new(GcsClient::build(cfg).map_err(|e| format!("backend {name}: {e}"))?);
    let mut verdicts = Vec::new();
    for (bucket, prefix) in targets {
        let backend = GcsBackend::new(client.clone(), &bucket, &prefix, cfg.block_size_bytes);
        backend
            .check_bucket()
            .await
            .map_err(|e| format!("bucket {bucket}: {e}"))?;
        // Interrupted (Ctrl-C), the probe stops where it is and removes what it wrote.
        let run = probe::new_run();
        let report = tokio::select! {
            report = probe::probe_run(&backend, &run, writers) => report,
            _ = tokio::signal::ctrl_c() => {
                probe::remove_run(&backend, &run).await;
                Err("interrupted; the probe's scratch objects are removed".into())
            }
        };
        let report = report.map_err(|e| format!("bucket {bucket}: the probe failed: {e}"))?;
        let offset = backend
            .clock_offset_now()
            .await
            .map_err(|e| format!("bucket {bucket}: {e}"))?;
        let clock = strict::clock(
            offset,
            config,
            Duration::from_secs(cfg.commit_deadline_secs),
            gcs::CLOCK_MARGIN,
        );
        verdicts.push(strict::verdict(strict::Probed {
            backend: name,
            store_bucket: backend.bucket().to_string(),
            prefix: backend.prefix().to_string(),
            conditions: &CONDITIONS,
            ignored: &report.ignored,
            action,
            race: &report.race,
            race_result: report.race.result(),
            refusal: (!report.safe()).then(|| report.refusal(&backend.location())),
            clock,
            credential: "signed URL",
        }));
    }
    Ok(verdicts)
}
