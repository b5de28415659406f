//! The azure store's rows: what `backend::azure::probe` found (each condition alone, the race
//! of writers creating one blob) and the clock compared with the service's, as `serve` checks
//! them at start-up. There is no opt-in on azure: a service that fails any row is refused.

use super::{strict, Verdict};
use crate::backend::azure::probe::{self, AzureProbe, CONDITIONS};
use crate::backend::azure::{self as az, AzureBackend, AzureClient};
use crate::config::{AzureBackendConfig, Config};
use std::sync::Arc;
use std::time::Duration;

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

/// The rows of `report` and of the clock check (`clock`: what it found, and its refusal).
pub fn verdict(
    report: &AzureProbe,
    clock: (String, Result<(), String>),
    name: &str,
    backend: &AzureBackend,
) -> Verdict {
    strict::verdict(strict::Probed {
        backend: name,
        store_bucket: backend.container().to_string(),
        prefix: backend.prefix().to_string(),
        conditions: &CONDITIONS,
        ignored: &report.ignored,
        action,
        race: &report.race,
        race_result: report.race_result(),
        refusal: (!report.safe()).then(|| report.refusal(&backend.location())),
        clock,
        credential: "SAS",
    })
}

/// `probe-store` on azure backend `name`: each of `targets` (container, prefix) probed with
/// `writers` in the race.
pub(super) async fn probe_store(
    config: &Config,
    cfg: &AzureBackendConfig,
    name: &str,
    targets: Vec<(String, String)>,
    writers: usize,
) -> Result<Vec<Verdict>, String> {
    let client = Arc::new(AzureClient::build(cfg).map_err(|e| format!("backend {name}: {e}"))?);
    let mut verdicts = Vec::new();
    for (container, prefix) in targets {
        let backend = AzureBackend::new(client.clone(), &container, &prefix, cfg.block_size_bytes);
        backend
            .check_container()
            .await
            .map_err(|e| format!("container {container}: {e}"))?;
        // Interrupted (Ctrl-C), the probe stops where it is and removes what it wrote.
        let run = probe::new_run();
        let report = tokio::select! {
            report = probe::probe_run(&backend, &run, writers) => report,
            _ = tokio::signal::ctrl_c() => {
                probe::remove_run(&backend, &run).await;
                Err("interrupted; the probe's scratch blobs are removed".into())
            }
        };
        let report = report.map_err(|e| format!("container {container}: the probe failed: {e}"))?;
        let offset = backend
            .clock_offset_now()
            .await
            .map_err(|e| format!("container {container}: {e}"))?;
        let clock = strict::clock(
            offset,
            config,
            Duration::from_secs(cfg.commit_deadline_secs),
            az::CLOCK_MARGIN,
        );
        verdicts.push(verdict(&report, clock, name, &backend));
    }
    Ok(verdicts)
}
