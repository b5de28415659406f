//! `/v1/fences`: show a key's scope and highest token, or advance it without writing.

use super::objects::target;
use super::{headers, ApiError, AppState};
use crate::auth::{Action, Principal};
use crate::config::Permission;
use crate::gate::GateError;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Extension, Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;

pub async fn show(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    path: Result<Path<(String, String)>, PathRejection>,
    h: HeaderMap,
) -> Result<Response, ApiError> {
    let (bucket, key) = target(path)?;
    state.authorize(&who, Action::Read { bucket: &bucket })?;
    let scope = headers::scope(&h)?;
    let info = state
        .gate
        .fence_info(&bucket, &key, scope.as_deref())
        .await?;
    Ok(Json(info).into_response())
}

pub async fn advance(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    path: Result<Path<(String, String)>, PathRejection>,
    h: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (bucket, key) = target(path)?;
    state.authorize(
        &who,
        Action::Bucket {
            perm: Permission::Fence,
            bucket: &bucket,
        },
    )?;
    let has_body = h
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v != "0")
        || h.contains_key("transfer-encoding");
    drop(body);
    if has_body {
        return Err(GateError::InvalidArgument(
            "advancing a fence takes no body; to write, PUT /v1/objects/{bucket}/{key}".into(),
        )
        .into());
    }
    let scope = headers::scope(&h)?;
    let info = state
        .gate
        .advance(&bucket, &key, headers::token(&h), scope.as_deref())
        .await?;
    Ok(Json(info).into_response())
}
