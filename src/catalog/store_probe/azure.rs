//! The azure store's rows: what `backend::azure::probe` found (each condition alone, the race
//! of writers creating one blob) and the clock compared with the service's, as `serve` checks
//! them at start-up. There is no opt-in on azure: a service that fails any row is refused.

use super::{honoured, Row, Verdict};
use crate::backend::azure::probe::{self, AzureProbe, CONDITIONS};
use crate::backend::azure::{self as az, AzureBackend, AzureClient};
use crate::backend::clock::{check_offset, Guarding};
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
    let refuse = "refuses to start: a stale write could overwrite a newer one";
    let mut rows: Vec<Row> = CONDITIONS
        .iter()
        .map(|condition| {
            let ok = !report.ignored.contains(condition);
            Row {
                capability: condition.to_string(),
                result: honoured(ok),
                ok,
                action: if ok { action(condition) } else { refuse }.into(),
            }
        })
        .collect();
    let race = &report.race;
    rows.push(Row {
        capability: format!("{} writers race with {}", race.writers, race.names()),
        result: report.race_result(),
        ok: race.held(),
        action: if race.held() {
            "nothing more: the condition holds under concurrency".into()
        } else {
            refuse.into()
        },
    });
    let mut refusals = Vec::new();
    if !report.safe() {
        refusals.push(report.refusal(&backend.location()));
    }
    let (offset, clock) = clock;
    rows.push(Row {
        capability: "clock against the service's".into(),
        result: offset,
        ok: clock.is_ok(),
        action: match &clock {
            Ok(()) => "holds an object whose commit's answer was lost until its SAS has expired by the service's clock".into(),
            Err(_) => "refuses to start: a commit's SAS expires by the service's clock".into(),
        },
    });
    if let Err(e) = clock {
        refusals.push(e);
    }
    let safe = refusals.is_empty();
    let guarantees = if safe {
        vec![
            "fencing: no write or delete with a token below one recorded for its scope ever lands".into(),
            "conditional requests through fencegate (If-Match, If-None-Match on PutObject, CopyObject and CompleteMultipartUpload) are decided atomically: of writers racing with If-None-Match: *, exactly one wins".into(),
            "writes made around fencegate are never overwritten: the service checks every commit's condition, and fencegate reports them (BypassDetected)".into(),
            "deletes are conditional on the version fencegate committed".into(),
            "cluster mode (several instances on one etcd table) may serve this store if the service refuses a request whose SAS has expired, which a cluster instance probes at start-up".into(),
        ]
    } else {
        vec!["none: serve refuses to start on this store".into()]
    };
    Verdict {
        backend: name.to_string(),
        store_bucket: backend.container().to_string(),
        prefix: backend.prefix().to_string(),
        safe,
        starts: safe,
        etags_are_md5: false,
        capabilities: rows,
        races: vec![race.clone()],
        refusals,
        accepted: Vec::new(),
        guarantees,
    }
}

/// The clock check `serve` makes with this configuration: the margin of one instance, or the
/// cluster's `max_clock_skew_ms` on a shared table.
async fn clock(
    backend: &AzureBackend,
    config: &Config,
    cfg: &AzureBackendConfig,
) -> Result<(String, Result<(), String>), String> {
    let offset = backend.clock_offset_now().await?;
    let checked = match &config.etcd {
        Some(etcd) => check_offset(
            offset,
            Duration::from_secs(etcd.intent_ttl_secs),
            Duration::from_millis(etcd.max_clock_skew_ms),
            Guarding::Cluster,
        ),
        None => check_offset(
            offset,
            Duration::from_secs(cfg.commit_deadline_secs),
            az::CLOCK_MARGIN,
            Guarding::OneInstance,
        ),
    };
    Ok((format!("ahead by {}..{} ms", offset.0, offset.1), checked))
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
        let clock = clock(&backend, config, cfg)
            .await
            .map_err(|e| format!("container {container}: {e}"))?;
        verdicts.push(verdict(&report, clock, name, &backend));
    }
    Ok(verdicts)
}
