//! Errors as JSON answers, `{"error": CODE, "message": ...}`, for the native API, the admin
//! surface and the listener's own refusals (no route, wrong method, headers too large).

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// An answer with `status`, its `code` and a message that says what to do.
pub fn plain(status: StatusCode, code: &str, message: String) -> Response {
    json(
        status,
        code,
        serde_json::json!({ "error": code, "message": message }),
    )
}

/// An error answer with `status` and a JSON `body` whose `error` is `code`, marked with the
/// code for the request counter.
pub fn json(status: StatusCode, code: &str, body: serde_json::Value) -> Response {
    let mut resp = (status, Json(body)).into_response();
    crate::metrics::codes::ErrorCode::mark(&mut resp, code);
    resp
}

/// 404 for a path no surface serves.
pub async fn no_route(req: Request) -> Response {
    crate::http::error::plain(
        StatusCode::NOT_FOUND,
        "NoSuchRoute",
        format!(
            "no route for {} {}; objects live under /v1/objects/{{bucket}}/{{key}} and fences under /v1/fences/{{bucket}}/{{key}}",
            req.method(),
            req.uri().path()
        ),
    )
}

/// 405 for a routed path asked with a method it does not take.
pub async fn wrong_method(req: Request) -> Response {
    crate::http::error::plain(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        format!("{} is not allowed on {}", req.method(), req.uri().path()),
    )
}
