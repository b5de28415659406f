//! Gate errors as native-API responses: the status and code of the README's error table, a
//! JSON body that says what to do, and `Fencing-Token-Highest` on stale tokens.

use crate::auth::AuthError;
use crate::gate::GateError;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

pub use crate::http::error::plain;

/// A native-API or admin error response: the gate's refusals, and authorization's (a key
/// without the permission), each with the status and code of the README's error table.
pub enum ApiError {
    Gate(GateError),
    Auth(AuthError),
}

impl From<GateError> for ApiError {
    fn from(e: GateError) -> Self {
        ApiError::Gate(e)
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        ApiError::Auth(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let e = match self {
            ApiError::Gate(e) => e,
            ApiError::Auth(a) => return a.into_response(),
        };
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
        let mut resp = crate::http::error::json(status, e.code(), body);
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

/// An authentication or authorization refusal: the one rendering of an [`AuthError`], for the
/// middlewares and the handlers alike.
impl IntoResponse for AuthError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status()).unwrap_or(StatusCode::FORBIDDEN);
        tracing::debug!(code = self.code(), error = %self, "request refused");
        let mut resp = plain(status, self.code(), self.to_string());
        let headers = resp.headers_mut();
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(
                axum::http::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("AWS4-HMAC-SHA256"),
            );
        }
        if matches!(self, AuthError::Busy(_)) {
            // The body was left partly unread: the connection cannot carry another request.
            headers.insert(
                axum::http::header::RETRY_AFTER,
                HeaderValue::from_static("1"),
            );
            headers.insert(
                axum::http::header::CONNECTION,
                HeaderValue::from_static("close"),
            );
        }
        resp
    }
}
