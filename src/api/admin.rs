//! The admin surface: `/metrics`, the instance's status (`status.rs`), live leases (list,
//! show, revoke), fences (show, list a bucket's, advance, reset) and reloads. It is served on `[admin] listen` when set, else beside the
//! native API, and always behind [`crate::auth::admin`]. Every change here is an audit line
//! naming the principal. `fencegate fences ...` and `fencegate leases ...` (src/admin_client.rs)
//! are its command line.

use super::{ApiError, AppState};
use crate::auth::Principal;
use crate::gate::GateError;
use crate::gate::MAX_FENCE_PAGE;
use crate::lease::{LeaseListing, ListedLease};
use axum::extract::rejection::{PathRejection, QueryRejection};
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
        .route("/admin/leases/{name}", get(show_lease).delete(revoke_lease))
        .route("/admin/status", get(super::status::status))
        .route("/admin/fences/{bucket}", get(list_fences))
        .route(
            "/admin/fences/{bucket}/{*key}",
            get(show_fence).post(change_fence),
        )
        .route("/admin/reload", post(reload))
        .route_layer(axum::middleware::from_fn_with_state(auth, authenticate))
        .with_state(state)
}

async fn metrics(State(state): State<AppState>) -> Response {
    match &state.metrics {
        Some(handle) => {
            crate::metrics::collect_process();
            handle.render().into_response()
        }
        None => (StatusCode::NOT_FOUND, "metrics are not enabled\n").into_response(),
    }
}

async fn list_leases(State(state): State<AppState>) -> Response {
    let listed = match state.leases.list().await {
        Ok(l) => l,
        Err(e) => return super::leases::LeaseApiError::from(e).into_response(),
    };
    let credentials_in_grace = match state.leases.credentials_in_grace().await {
        Ok(c) => c,
        Err(e) => return super::leases::LeaseApiError::from(e).into_response(),
    };
    Json(LeaseListing {
        leases: listed
            .into_iter()
            .map(|(grant, principal)| ListedLease { grant, principal })
            .collect(),
        credentials_in_grace,
    })
    .into_response()
}

/// The operator's refusal for a name with neither a live lease nor a working credential.
fn no_such_lease(name: &str, what: &str) -> Response {
    super::error::plain(
        StatusCode::NOT_FOUND,
        "NoSuchLease",
        format!("no live lease and no working S3 credential is named {name:?}{what}; GET /admin/leases (fencegate leases list) shows the live leases and the credentials in their grace"),
    )
}

fn bad_lease_name() -> Response {
    super::error::plain(
        StatusCode::BAD_REQUEST,
        "InvalidLeaseName",
        "the lease name in the path is not valid UTF-8".into(),
    )
}

async fn show_lease(
    State(state): State<AppState>,
    name: Result<Path<String>, PathRejection>,
) -> Response {
    let Ok(Path(name)) = name else {
        return bad_lease_name();
    };
    match state.leases.admin_show(&name).await {
        Ok(shown) => Json(shown).into_response(),
        Err(crate::lease::LeaseError::NotHeld { name }) => no_such_lease(&name, ""),
        Err(e) => super::leases::LeaseApiError::from(e).into_response(),
    }
}

async fn revoke_lease(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    name: Result<Path<String>, PathRejection>,
) -> Response {
    let Ok(Path(name)) = name else {
        return bad_lease_name();
    };
    match state.leases.revoke(&name, &who.name()).await {
        Ok(revoked) => Json(revoked).into_response(),
        // An operator's answer, not a worker's ("acquire it again").
        Err(crate::lease::LeaseError::NotHeld { name }) => {
            no_such_lease(&name, ": nothing was revoked")
        }
        Err(e) => super::leases::LeaseApiError::from(e).into_response(),
    }
}

#[derive(Deserialize)]
struct ChangeQuery {
    reset_to: Option<String>,
    advance_to: Option<String>,
}

/// A token named in a query: the native API's token grammar (1 to 20 digits, at most
/// u64::MAX), refused as `InvalidArgument` naming the parameter.
fn token_param(name: &str, raw: &str) -> Result<u64, GateError> {
    crate::token::parse_token(raw.as_bytes())
        .map(|t| t.0)
        .map_err(|e| {
            GateError::InvalidArgument(format!(
                "{name}={raw:?} is not a token from 0 to 18446744073709551615: {e}"
            ))
        })
}

async fn show_fence(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    h: HeaderMap,
) -> Result<Response, ApiError> {
    let (bucket, key) = super::objects::target(path)?;
    let scope = super::headers::scope(&h)?;
    let info = state
        .gate
        .fence_info(&bucket, &key, scope.as_deref())
        .await?;
    Ok(Json(info).into_response())
}

/// `?advance_to=N` raises the fence (never lowers it), `?reset_to=N` lowers it: exactly one.
async fn change_fence(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<ChangeQuery>, QueryRejection>,
    h: HeaderMap,
) -> Result<Response, ApiError> {
    let (bucket, key) = super::objects::target(path)?;
    let Query(q) = query.map_err(|e| GateError::InvalidArgument(format!("bad query: {e}")))?;
    let scope = super::headers::scope(&h)?;
    match (q.advance_to, q.reset_to) {
        (Some(to), None) => {
            let to = token_param("advance_to", &to)?;
            let done = state
                .gate
                .admin_advance(&bucket, &key, scope.as_deref(), to, &who.name())
                .await?;
            Ok(Json(done).into_response())
        }
        (None, Some(to)) => {
            let to = token_param("reset_to", &to)?;
            let reset = state
                .gate
                .reset_fence(&bucket, &key, scope.as_deref(), to, who.name())
                .await?;
            Ok(Json(reset).into_response())
        }
        _ => Err(GateError::InvalidArgument(
            "name exactly one of advance_to=N (raise the highest token to N; never lowers) and reset_to=N (lower it to N): POST /admin/fences/{bucket}/{key}?advance_to=N".into(),
        )
        .into()),
    }
}

#[derive(Deserialize)]
struct ListQuery {
    prefix: Option<String>,
    continuation_token: Option<String>,
    max_rows: Option<String>,
}

async fn list_fences(
    State(state): State<AppState>,
    bucket: Result<Path<String>, PathRejection>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path(bucket) = bucket.map_err(|e| {
        GateError::InvalidArgument(format!("the bucket in the path could not be decoded: {e}"))
    })?;
    let Query(q) = query.map_err(|e| GateError::InvalidArgument(format!("bad query: {e}")))?;
    let limit = match q.max_rows.as_deref() {
        None => MAX_FENCE_PAGE,
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_FENCE_PAGE).contains(n))
            .ok_or_else(|| {
                GateError::InvalidArgument(format!(
                    "max_rows={raw:?} is not a number from 1 to {MAX_FENCE_PAGE}"
                ))
            })?,
    };
    let listing = state
        .gate
        .list_fences(
            &bucket,
            q.prefix.as_deref().unwrap_or(""),
            q.continuation_token.as_deref(),
            limit,
        )
        .await?;
    Ok(Json(listing).into_response())
}

/// Reloads keys, bucket policies and the TLS certificate from the sources the process started
/// with, all or nothing; the answer says what changed, or why nothing did.
async fn reload(State(state): State<AppState>, Extension(who): Extension<Principal>) -> Response {
    match state.reloader.reload(&who.name()).await {
        Ok(report) => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            report,
        )
            .into_response(),
        Err(e) => super::error::plain(
            StatusCode::from_u16(e.status).unwrap_or(StatusCode::UNPROCESSABLE_ENTITY),
            e.code,
            format!("{}; the configuration in use stays", e.message),
        ),
    }
}

/// The admin surface's authentication layer.
async fn authenticate(
    State(auth): State<Arc<crate::auth::admin::AdminAuth>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match auth.admit(req).await {
        Ok(req) => next.run(req).await,
        Err(e) => {
            tracing::info!(target: "fencegate::audit", code = e.code(), error = %e, "admin authentication failed");
            e.into_response()
        }
    }
}
