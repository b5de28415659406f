//! `/v1/objects`: write, read, delete and list objects.

use super::{headers, note_target, ApiError, AppState};
use crate::auth::{Action, Principal};
use crate::backend::ObjectInfo;
use crate::config::Permission;
use crate::gate::{GateError, WriteRequest};
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::time::{Duration, UNIX_EPOCH};

const MAX_LIST: usize = 1000;

/// The bucket and key from the path; a key that is not UTF-8 after decoding is refused here.
pub(super) fn target(
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<(String, String), ApiError> {
    let Path((bucket, key)) = path.map_err(|e| GateError::InvalidKey {
        message: format!(
            "the path could not be decoded ({e}); keys must be UTF-8, percent-encoded in the URL"
        ),
        s3_code: "InvalidURI",
    })?;
    note_target(&bucket, &key);
    Ok((bucket, key))
}

fn write_request(
    bucket: String,
    key: String,
    h: &HeaderMap,
    who: &Principal,
) -> Result<WriteRequest, GateError> {
    headers::write_request(
        h,
        (&bucket, &key),
        &who.name(),
        headers::write_token(h),
        || headers::object_meta(h),
    )
}

/// May `who` change this object (`perm`: write or delete)?
fn authorize_change(
    state: &AppState,
    who: &Principal,
    perm: Permission,
    req: &WriteRequest,
) -> Result<(), ApiError> {
    state.authorize(
        who,
        Action::Object {
            perm,
            bucket: &req.bucket,
            key: &req.key,
            scope_header: req.scope_header.as_deref(),
        },
    )
}

pub async fn put(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    path: Result<Path<(String, String)>, PathRejection>,
    h: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (bucket, key) = target(path)?;
    let req = write_request(bucket, key, &h, &who)?;
    authorize_change(&state, &who, Permission::Write, &req)?;
    // Content-MD5 and x-amz-checksum-* are checked as on the S3 gateway, never ignored.
    let declared = crate::http::digests::Declared::of(
        &h,
        None,
        h.get("content-md5")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .as_deref(),
    )
    .map_err(|e| GateError::InvalidArgument(e.message().unwrap_or_default().to_string()))?;
    let stream = headers::body_stream(&h, body, state.max_body_bytes, state.body_idle_timeout)?;
    let stream = crate::http::digests::verify(stream, declared);
    let written = state.gate.put(req, stream).await?;
    let mut resp = Json(&written).into_response();
    headers::mark_replayed(resp.headers_mut(), written.replayed);
    if let Some(etag) = written
        .etag
        .as_deref()
        .and_then(|e| HeaderValue::from_str(e).ok())
    {
        resp.headers_mut().insert("etag", etag);
    }
    if let Some(t) = written.token {
        resp.headers_mut()
            .insert(headers::FENCING_TOKEN, HeaderValue::from(t));
    }
    Ok(resp)
}

pub async fn delete(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    path: Result<Path<(String, String)>, PathRejection>,
    h: HeaderMap,
) -> Result<Response, ApiError> {
    let (bucket, key) = target(path)?;
    let req = write_request(bucket, key, &h, &who)?;
    authorize_change(&state, &who, Permission::Delete, &req)?;
    let deleted = state.gate.delete(req).await?;
    let mut resp = Json(&deleted).into_response();
    headers::mark_replayed(resp.headers_mut(), deleted.replayed);
    Ok(resp)
}

/// Response headers that describe an object.
fn object_headers(info: &ObjectInfo) -> HeaderMap {
    let mut h = HeaderMap::new();
    let mut set = |name: &str, value: &str| {
        if let (Ok(n), Ok(v)) = (
            axum::http::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            h.insert(n, v);
        }
    };
    set("etag", &info.etag);
    set("content-length", &info.size.to_string());
    set(
        "content-type",
        info.meta
            .content_type
            .as_deref()
            .unwrap_or("application/octet-stream"),
    );
    let modified = UNIX_EPOCH + Duration::from_millis(info.last_modified_ms);
    set("last-modified", &httpdate::fmt_http_date(modified));
    if let Some(t) = info.meta.token {
        set(headers::FENCING_TOKEN, &t.to_string());
    }
    for (k, v) in &info.meta.user_meta {
        set(&format!("x-amz-meta-{k}"), v);
    }
    for (k, v) in &info.meta.headers {
        set(k, v);
    }
    h
}

pub async fn get(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (bucket, key) = target(path)?;
    state.authorize(&who, Action::Read { bucket: &bucket })?;
    let (info, stream) = state.gate.get(&bucket, &key).await?;
    Ok((object_headers(&info), Body::from_stream(stream)).into_response())
}

pub async fn head(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (bucket, key) = target(path)?;
    state.authorize(&who, Action::Read { bucket: &bucket })?;
    let info = state.gate.head(&bucket, &key).await?;
    Ok((StatusCode::OK, object_headers(&info)).into_response())
}

#[derive(Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    prefix: String,
    start_after: Option<String>,
    max_keys: Option<usize>,
}

pub async fn list(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path(bucket) = path.map_err(|e| GateError::InvalidArgument(e.to_string()))?;
    state.authorize(&who, Action::Read { bucket: &bucket })?;
    let Query(q) = query.map_err(|e| {
        GateError::InvalidArgument(format!("{e}; use ?prefix=P&start_after=K&max_keys=N"))
    })?;
    note_target(&bucket, &q.prefix);
    let max = q.max_keys.unwrap_or(MAX_LIST).clamp(1, MAX_LIST);
    let page = state
        .gate
        .list(&bucket, &q.prefix, q.start_after.as_deref(), max)
        .await?;
    Ok(Json(serde_json::json!({
        "bucket": bucket,
        "prefix": q.prefix,
        "objects": page.objects,
        "next_start_after": page.next_start_after,
    }))
    .into_response())
}
