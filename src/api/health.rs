//! `GET /readyz` over HTTP: the checks of `crate::health`, answered 200 or 503 with them.

use super::AppState;
use crate::health::{check, Check};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// `GET /readyz`: 200 `ok`, or 503 with the checks as JSON, the failed ones first named.
pub async fn readyz(State(state): State<AppState>) -> Response {
    let checks = check(&state.gate).await;
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
