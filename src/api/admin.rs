//! The admin surface: `/metrics`, live leases (list, revoke), fence resets and reloads. It is
//! served on `[admin] listen` when set, else beside the native API, and always behind
//! [`crate::auth::admin`]. Every change here is an audit line naming the principal.

use super::{ApiError, AppState};
use crate::auth::Principal;
use crate::gate::GateError;
use axum::extract::rejection::PathRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use std::sync::Arc;

/// The admin routes, authenticated by `auth`.
pub fn routes(state: AppState, auth: Arc<crate::auth::admin::AdminAuth>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/admin/leases", get(list_leases))
        .route("/admin/leases/{name}", axum::routing::delete(revoke_lease))
        .route("/admin/fences/{bucket}/{*key}", post(reset_fence))
        .route("/admin/reload", post(reload))
        .route_layer(axum::middleware::from_fn_with_state(
            auth,
            crate::auth::admin::authenticate,
        ))
        .with_state(state)
}

async fn metrics(State(state): State<AppState>) -> Response {
    match &state.metrics {
        Some(handle) => handle.render().into_response(),
        None => (StatusCode::NOT_FOUND, "metrics are not enabled\n").into_response(),
    }
}

async fn list_leases(State(state): State<AppState>) -> Response {
    let listed = match state.leases.list().await {
        Ok(l) => l,
        Err(e) => return super::leases::LeaseApiError::from(e).into_response(),
    };
    let leases: Vec<_> = listed
        .into_iter()
        .map(|(grant, owner)| {
            let mut v = serde_json::to_value(grant).unwrap_or_default();
            v["principal"] = owner.into();
            v
        })
        .collect();
    Json(serde_json::json!({
        "leases": leases,
        "credentials_in_grace": state.leases.credentials_in_grace(),
    }))
    .into_response()
}

async fn revoke_lease(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    name: Result<Path<String>, PathRejection>,
) -> Response {
    let Ok(Path(name)) = name else {
        return super::error::plain(
            StatusCode::BAD_REQUEST,
            "InvalidLeaseName",
            "the lease name in the path is not valid UTF-8".into(),
        );
    };
    match state.leases.revoke(&name, &who.name()).await {
        Ok(revoked) => Json(revoked).into_response(),
        Err(e) => super::leases::LeaseApiError::from(e).into_response(),
    }
}

#[derive(Deserialize)]
struct ResetQuery {
    reset_to: Option<String>,
}

async fn reset_fence(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<ResetQuery>, axum::extract::rejection::QueryRejection>,
    h: HeaderMap,
) -> Result<Response, ApiError> {
    let (bucket, key) = super::objects::target(path)?;
    let to = query
        .ok()
        .and_then(|Query(q)| q.reset_to)
        .ok_or_else(|| GateError::InvalidArgument(
            "name the new highest token: POST /admin/fences/{bucket}/{key}?reset_to=N (N below the current highest)".into(),
        ))?;
    let to = to.parse::<u64>().map_err(|_| {
        GateError::InvalidArgument(format!(
            "reset_to={to:?} is not a number from 0 to 18446744073709551615"
        ))
    })?;
    let scope = super::headers::scope(&h)?;
    let (was, info) = state
        .gate
        .reset_fence(&bucket, &key, scope.as_deref(), to, who.name())
        .await?;
    Ok(Json(serde_json::json!({ "was": was, "fence": info })).into_response())
}

/// Reloads keys, bucket policies and the TLS certificate from the sources the process started
/// with, all or nothing; the answer says what changed, or why nothing did.
async fn reload(State(state): State<AppState>, Extension(who): Extension<Principal>) -> Response {
    match state.reloader.reload(&who.name()).await {
        Ok(report) => Json(report).into_response(),
        Err(e) => super::error::plain(
            StatusCode::from_u16(e.status()).unwrap_or(StatusCode::UNPROCESSABLE_ENTITY),
            e.code(),
            format!("{e}; the configuration in use stays"),
        ),
    }
}
