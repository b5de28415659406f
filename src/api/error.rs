//! Gate errors as native-API responses: the status and code of the README's error table, a
//! JSON body that says what to do, and `Fencing-Token-Highest` on stale tokens.

use crate::gate::GateError;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

/// A native-API error response.
pub struct ApiError(pub GateError);

impl From<GateError> for ApiError {
    fn from(e: GateError) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let e = self.0;
        let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
        if status.is_server_error() {
            tracing::warn!(code = e.code(), error = %e, "request failed");
        } else {
            tracing::debug!(code = e.code(), error = %e, "request refused");
        }
        let mut body = serde_json::json!({ "error": e.code(), "message": e.to_string() });
        if let GateError::StaleFencingToken { scope, .. }
        | GateError::TokenNotIncreasing { scope, .. } = &e
        {
            body["scope"] = scope.clone().into();
        }
        if let Some(h) = e.highest() {
            body["highest"] = h.into();
        }
        let mut resp = (status, Json(body)).into_response();
        if let Some(h) = e.highest() {
            resp.headers_mut()
                .insert("fencing-token-highest", HeaderValue::from(h));
        }
        if let Some(secs) = e.retry_after() {
            resp.headers_mut()
                .insert("retry-after", HeaderValue::from(secs));
        }
        resp
    }
}

/// A 4xx for requests that match no route or use the wrong method.
pub fn plain(status: StatusCode, code: &str, message: String) -> Response {
    (
        status,
        Json(serde_json::json!({ "error": code, "message": message })),
    )
        .into_response()
}
