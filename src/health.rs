//! Readiness (`GET /readyz`, on the main and the admin listener, without credentials, like
//! `/healthz`). `/healthz` says the process answers; `/readyz` says it can serve writes now:
//! the fence table answers a real read, every bucket's backend is reachable (fs: its directory
//! and the staging area are usable; s3: HeadBucket), and in cluster mode the clock watch
//! trusts this instance's clock. Each check has a short timeout, so a hung store makes the
//! answer a prompt 503 rather than a hung probe. The same checks run every 10 s to keep the
//! `fencegate_ready{check}` gauges current for alerting. The route is `api/health.rs`'s.

use crate::gate::Gate;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// How long one check may take before it counts as failed.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the gauges are refreshed without a probe asking.
const WATCH_EVERY: Duration = Duration::from_secs(10);
/// The row the fence-table check reads: never written, so the read is cheap and harmless.
const PROBE_ROW: &str = "readyz:probe";

/// One check's result.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Check {
    /// `fence_table`, `clock`, or `bucket:NAME`.
    pub check: String,
    pub ok: bool,
    /// The bucket's backend (its name in the configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// Why it failed. Error texts name paths and stores, never credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Check {
    fn of(check: String, backend: Option<String>, result: Result<(), String>) -> Check {
        Check {
            check,
            ok: result.is_ok(),
            backend,
            error: result.err(),
        }
    }
}

async fn timed<E: std::fmt::Display>(
    call: impl std::future::Future<Output = Result<(), E>>,
) -> Result<(), String> {
    timed_out(call).await.map_err(|(message, _)| message)
}

/// [`timed`], also telling whether the call was abandoned at the deadline.
async fn timed_out<E: std::fmt::Display>(
    call: impl std::future::Future<Output = Result<(), E>>,
) -> Result<(), (String, bool)> {
    match tokio::time::timeout(CHECK_TIMEOUT, call).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err((e.to_string(), false)),
        Err(_) => Err((
            format!("no answer within {} s", CHECK_TIMEOUT.as_secs_f64()),
            true,
        )),
    }
}

/// Runs every check (concurrently) and records each in `fencegate_ready{check}`.
pub async fn check(gate: &Gate) -> Vec<Check> {
    check_buckets(gate, None).await
}

/// The checks one bucket's writes need: the fence table, the clock and that bucket's backend
/// (`None` when fencegate serves no such bucket).
pub async fn check_bucket(gate: &Gate, bucket: &str) -> Option<Vec<Check>> {
    let served = gate.bucket_backends().iter().any(|(b, _, _)| b == bucket);
    if !served {
        return None;
    }
    Some(check_buckets(gate, Some(bucket)).await)
}

async fn check_buckets(gate: &Gate, only: Option<&str>) -> Vec<Check> {
    let store = Arc::clone(gate.fence_store());
    let fence = async move {
        let read = timed(async { store.get(PROBE_ROW).await.map(|_| ()) }).await;
        Check::of("fence_table".into(), None, read)
    };
    let buckets = gate
        .bucket_backends()
        .into_iter()
        .filter(|(bucket, _, _)| only.is_none_or(|o| o == bucket))
        .map(|(bucket, name, backend)| async move {
            let started = std::time::Instant::now();
            let result = timed_out(backend.check_ready(&bucket)).await;
            if let Err((_, true)) = &result {
                // The call was dropped at the deadline, before the backend's own metrics
                // could record it: a hung store would otherwise leave no trace there.
                crate::backend::instrumented::abandoned(&name, "check_ready", started.elapsed());
            }
            Check::of(
                format!("bucket:{bucket}"),
                Some(name),
                result.map_err(|(message, _)| message),
            )
        });
    let (fence, buckets) = futures::join!(fence, futures::future::join_all(buckets));
    let mut checks = vec![fence];
    checks.extend(buckets);
    // Only cluster mode watches the clock; elsewhere this check always passes.
    let clock = gate.clock_verdict().map_or(Ok(()), Err);
    checks.push(Check::of("clock".into(), None, clock));
    for c in &checks {
        crate::metrics::ready_check(&c.check, c.ok);
    }
    checks
}

/// Keeps the readiness gauges current while nobody probes.
pub fn watch(gate: Arc<Gate>, shutdown: &crate::shutdown::Shutdown) {
    shutdown.spawn_background(async move {
        // Logged when the set of failing checks (or their errors) changes, not every round:
        // an outage is one line when it starts, one per change, and one when it ends.
        let mut last: Vec<Check> = Vec::new();
        loop {
            let failed: Vec<Check> = check(&gate).await.into_iter().filter(|c| !c.ok).collect();
            let same = failed.len() == last.len()
                && failed
                    .iter()
                    .zip(&last)
                    .all(|(a, b)| a.check == b.check && a.error == b.error);
            if !same {
                if failed.is_empty() {
                    tracing::info!("ready again: every check passes");
                } else {
                    tracing::warn!(failed = %serde_json::to_string(&failed).unwrap_or_default(), "not ready");
                }
                last = failed;
            }
            tokio::time::sleep(WATCH_EVERY).await;
        }
    });
}
