//! `GET /readyz` over HTTP: the checks of `crate::health`, answered 200 or 503 with them.
//! `/readyz` is all or nothing, for a load balancer in front of one instance's every bucket;
//! `/readyz?bucket=NAME` answers for one bucket's writes only, and `/readyz?verbose` lists
//! every check. Those two are unauthenticated, so their bodies carry check names and
//! outcomes, never the errors, which name paths and stores (`/readyz`'s 503 and the log do).
//! A query, not a path: `/readyz/NAME` would hide the S3 objects of a bucket named readyz.

use super::AppState;
use crate::health::{check, check_bucket, Check};
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// `GET /readyz`: 200 `ok`, or 503 with the checks as JSON, the failed ones first named.
/// With `?verbose`, every check's name and outcome, whatever they are.
pub async fn readyz(State(state): State<AppState>, RawQuery(query): RawQuery) -> Response {
    let query = query.unwrap_or_default();
    let param = |name: &str| {
        query.split('&').find_map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k == name).then(|| {
                percent_encoding::percent_decode_str(v)
                    .decode_utf8_lossy()
                    .into_owned()
            })
        })
    };
    if let Some(bucket) = param("bucket") {
        return readyz_bucket(&state, &bucket).await;
    }
    let checks = check(&state.gate).await;
    if param("verbose").is_some() {
        return outcomes(&checks);
    }
    let failed: Vec<&Check> = checks.iter().filter(|c| !c.ok).collect();
    if failed.is_empty() {
        return "ok\n".into_response();
    }
    let body = serde_json::json!({
        "status": "unready",
        "failed": failed,
        "checks": checks,
    });
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
}

/// `GET /readyz?bucket=NAME`: 200 `ok` when the bucket can take writes now (the fence table,
/// the clock and its backend pass), else 503 with the checks' outcomes; 404 for a bucket
/// fencegate does not serve.
async fn readyz_bucket(state: &AppState, bucket: &str) -> Response {
    let Some(checks) = check_bucket(&state.gate, bucket).await else {
        return crate::http::error::plain(
            StatusCode::NOT_FOUND,
            "NoSuchBucket",
            "fencegate serves no bucket of that name; GET /readyz?verbose lists the checks of those it serves".into(),
        );
    };
    if checks.iter().all(|c| c.ok) {
        return "ok\n".into_response();
    }
    outcomes(&checks)
}

/// The checks' names and outcomes, without their errors: 200 when all pass, else 503.
fn outcomes(checks: &[Check]) -> Response {
    let ready = checks.iter().all(|c| c.ok);
    let listed: Vec<serde_json::Value> = checks
        .iter()
        .map(|c| {
            let mut v = serde_json::json!({ "check": c.check, "ok": c.ok });
            if let Some(b) = &c.backend {
                v["backend"] = b.clone().into();
            }
            v
        })
        .collect();
    let body = serde_json::json!({
        "status": if ready { "ready" } else { "unready" },
        "checks": listed,
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}
