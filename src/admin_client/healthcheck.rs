//! `fencegate healthcheck`: asks an instance's `/readyz` whether it can serve writes, for a
//! container's HEALTHCHECK or a Kubernetes exec probe, so an image needs no curl. Exits 0 when
//! the instance answers 200 with `/readyz`'s own body, and 1 with each failing check (or why
//! it could not be reached, or what answered instead).

use super::connection::error_chain;
use super::trust::http_client;
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

/// Ok when `url` answers 200 with `ok`, as `/readyz` does; otherwise what failed.
pub async fn healthcheck(
    url: &str,
    ca_file: Option<&Path>,
    timeout: Duration,
) -> Result<(), AdminError> {
    // `/healthz` answers `ok` too, also while the instance cannot serve writes: a probe must
    // name the readiness route.
    let path = reqwest::Url::parse(url)
        .map_err(|e| AdminError::Usage(format!("--url {url}: {e}")))?
        .path()
        .to_string();
    if !path.ends_with("/readyz") {
        return Err(AdminError::Usage(format!(
            "--url {url} does not name /readyz (path {path}); a healthcheck asks /readyz, such as http://127.0.0.1:8080/readyz, or /readyz?bucket=NAME for one bucket"
        )));
    }
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
    let body = answer.text().await.map_err(|e| {
        AdminError::NotReady(format!(
            "not ready: {url} answered {status}, but its body could not be read: {}",
            error_chain(&e)
        ))
    })?;
    // `ok`, or with `?verbose` the checks with `"status": "ready"`.
    let ready_json = || {
        serde_json::from_str::<serde_json::Value>(&body)
            .is_ok_and(|v| v["status"].as_str() == Some("ready"))
    };
    if status == 200 && (body.trim() == "ok" || ready_json()) {
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
