//! `fencegate healthcheck`: asks an instance's `/readyz` whether it can serve writes, for a
//! container's HEALTHCHECK or a Kubernetes exec probe, so an image needs no curl. Exits 0 when
//! the instance answers 200, and 1 with each failing check (or why it could not be reached).

use super::connection::{error_chain, http_client};
use super::AdminError;
use crate::health::Check;
use std::path::Path;
use std::time::Duration;

/// `/readyz`'s answer: the status and, on a 503, the checks with their errors.
#[derive(serde::Deserialize)]
struct Readiness {
    #[serde(default)]
    checks: Vec<Check>,
}

/// Ok when `url` answers 200; otherwise what failed.
pub async fn healthcheck(
    url: &str,
    ca_file: Option<&Path>,
    timeout: Duration,
) -> Result<(), AdminError> {
    let agent = concat!("fencegate-healthcheck/", env!("CARGO_PKG_VERSION"));
    let http = http_client(ca_file, agent, timeout)?;
    let answer = http
        .get(url)
        .send()
        .await
        .map_err(|e| AdminError::Unreachable {
            url: url.to_string(),
            detail: error_chain(&e),
            hint: "check that fencegate runs and listens there ([server] listen), and that --url names its /readyz".into(),
        })?;
    let status = answer.status().as_u16();
    let body = answer.text().await.unwrap_or_default();
    if status == 200 {
        println!("ready");
        return Ok(());
    }
    let failing: Vec<String> = serde_json::from_str::<Readiness>(&body)
        .map(|r| r.checks)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| !c.ok)
        .map(|c| {
            let backend = c
                .backend
                .map(|b| format!(" (backend {b})"))
                .unwrap_or_default();
            let error = c.error.unwrap_or_else(|| "failed".into());
            format!("{}{backend}: {error}", c.check)
        })
        .collect();
    if failing.is_empty() {
        return Err(AdminError::NotReady(format!(
            "not ready: {url} answered {status}: {}",
            body.trim()
        )));
    }
    Err(AdminError::NotReady(format!(
        "not ready ({status}): {}",
        failing.join("; ")
    )))
}
