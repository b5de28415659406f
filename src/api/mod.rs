//! The native HTTP API (README: "The native API"): routes, shared state and the per-request
//! span. Handlers only translate HTTP to gate calls and back; every decision is the gate's.

pub mod admin;
mod error;
mod fences;
mod health;
pub(crate) mod headers;
mod leases;
mod objects;

pub use error::ApiError;

use crate::gate::Gate;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use std::sync::Arc;
use std::time::Duration;
use tower_http::trace::TraceLayer;
use tracing::field::Empty;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub gate: Arc<Gate>,
    pub max_body_bytes: u64,
    pub body_idle_timeout: Duration,
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// The S3 gateway, when it shares this listener: it answers every path not routed here.
    pub s3: Option<s3s::service::S3Service>,
    pub max_header_bytes: usize,
    pub leases: Arc<crate::lease::Leases>,
    /// The key table every `/v1` request authenticates against.
    pub keys: Arc<crate::auth::KeyTable>,
    /// Reloads keys, policies and the TLS certificate, for `POST /admin/reload`.
    pub reloader: Arc<crate::server::reload::Reloader>,
}

/// Where the admin surface is served.
pub enum AdminPlace {
    /// Beside the native API: these routes join its router.
    Here(Router),
    /// On a listener of its own: the native listener points there.
    At(std::net::SocketAddr),
}

impl AppState {
    /// May `who` do `action`? (The refusal is a 403 that says what is missing.)
    pub fn authorize(
        &self,
        who: &crate::auth::Principal,
        action: crate::auth::Action<'_>,
    ) -> Result<(), ApiError> {
        self.keys
            .authorize(who, action)
            .map_err(|e| ApiError(e.into()))
    }
}

/// An authentication or authorization refusal as a JSON response.
pub fn auth_error_response(e: &crate::auth::AuthError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::FORBIDDEN);
    let mut resp = error::plain(status, e.code(), e.to_string());
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("AWS4-HMAC-SHA256"),
        );
    }
    if matches!(e, crate::auth::AuthError::Busy(_)) {
        // The body was left partly unread: the connection cannot carry another request.
        let headers = resp.headers_mut();
        headers.insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
        headers.insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    resp
}

pub fn router(state: AppState, admin: AdminPlace) -> Router {
    let v1 = Router::new()
        .route("/v1/objects/{bucket}", get(objects::list))
        .route(
            "/v1/objects/{bucket}/{*key}",
            get(objects::get)
                .head(objects::head)
                .put(objects::put)
                .delete(objects::delete),
        )
        .route(
            "/v1/fences/{bucket}/{*key}",
            get(fences::show).post(fences::advance),
        )
        .route(
            "/v1/leases/{name}",
            get(leases::show)
                .post(leases::acquire)
                .put(leases::renew)
                .delete(leases::release),
        )
        .route(
            "/v1/leases/{name}/{*rest}",
            axum::routing::any(leases::nested),
        )
        // Only matched routes authenticate: a 404 or 405 needs no credentials.
        .route_layer(axum::middleware::from_fn_with_state(
            state.keys.clone(),
            crate::auth::native::authenticate,
        ));
    let routes = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(health::readyz))
        .merge(v1)
        .fallback(s3_or_no_route)
        .method_not_allowed_fallback(wrong_method);
    let routes = match admin {
        AdminPlace::Here(admin) => routes.with_state(state.clone()).merge(admin),
        AdminPlace::At(addr) => {
            let elsewhere = move || async move {
                error::plain(
                    StatusCode::NOT_FOUND,
                    "NoSuchRoute",
                    format!("/metrics and /admin are served on the admin listener, {addr} ([admin] listen)"),
                )
            };
            routes
                .route("/metrics", axum::routing::any(elsewhere))
                .route("/admin/{*rest}", axum::routing::any(elsewhere))
                .with_state(state.clone())
        }
    };
    with_layers(routes, &state)
}

/// The router of `[admin] listen`: the admin routes and `/healthz`.
pub fn admin_only_router(state: &AppState, admin: Router) -> Router {
    let routes = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(health::readyz))
        .with_state(state.clone())
        .merge(admin)
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method);
    with_layers(routes, state)
}

/// A router that serves only the S3 API, for `[s3] listen`.
pub fn s3_only_router(state: AppState) -> Router {
    let routes = Router::new()
        .fallback(s3_or_no_route)
        .with_state(state.clone());
    with_layers(routes, &state)
}

/// Past this much longer than `body_idle_timeout`, any stalled body is cut off at the
/// listener, read by a handler or not (`server::stall`).
const BODY_BACKSTOP_MARGIN: Duration = Duration::from_secs(5);

/// The header-size guard, the stalled-body backstop and the per-request span with its
/// closing log line.
fn with_layers(routes: Router, state: &AppState) -> Router {
    routes
        .layer(axum::middleware::from_fn_with_state(
            state.body_idle_timeout + BODY_BACKSTOP_MARGIN,
            crate::server::bound_bodies,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.max_header_bytes,
            limit_headers,
        ))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_request(())
                .on_response(
                    |resp: &Response, latency: Duration, _span: &tracing::Span| {
                        tracing::info!(
                            status = resp.status().as_u16(),
                            latency_ms = latency.as_secs_f64() * 1000.0,
                            "served"
                        );
                    },
                ),
        )
        // Outermost, so that what the layers above refuse is timed and counted too.
        .layer(axum::middleware::from_fn(crate::metrics::http::track))
}

fn request_span(req: &Request) -> tracing::Span {
    tracing::info_span!(
        "request",
        method = %req.method(),
        path = %req.uri().path(),
        bucket = Empty,
        key = Empty,
        scope = Empty,
        token = Empty,
        outcome = Empty,
        // The S3 gateway replaces it with the x-amz-request-id it answers with.
        request_id = %crate::s3api::answer::request_id(),
        principal = Empty,
    )
}

/// Refuses a request whose header block is larger than configured, before any handler runs.
async fn limit_headers(
    State(max): State<usize>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let size: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum::<usize>()
        + req.uri().to_string().len();
    if size > max {
        return error::plain(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "RequestHeaderSectionTooLarge",
            format!("the request line and headers take {size} bytes; the limit is {max} ([server] max_header_bytes)"),
        );
    }
    next.run(req).await
}

/// Hands everything the native API does not route to the S3 gateway, if it is on.
async fn s3_or_no_route(State(state): State<AppState>, req: Request) -> Response {
    // `v1` is too short to be an S3 bucket name, so /v1/... is always the native API's.
    let native = req.uri().path() == "/v1" || req.uri().path().starts_with("/v1/");
    let Some(s3) = state.s3.clone().filter(|_| !native) else {
        return no_route(req).await;
    };
    crate::metrics::http::S3Op::handed(req.extensions());
    let id = crate::s3api::answer::request_id();
    tracing::Span::current().record("request_id", id.as_str());
    if let Some(refusal) = crate::s3api::refused_before_s3s(&req) {
        return crate::s3api::answer::finish(refusal, &id).await;
    }
    let (req, mismatch) = match crate::s3api::post_body_checked(req) {
        Ok(checked) => checked,
        Err(refusal) => return crate::s3api::answer::finish(*refusal, &id).await,
    };
    let req = req.map(s3s::Body::http_body_unsync);
    let resp = match s3.call(req).await {
        Ok(resp) => resp.map(axum::body::Body::new),
        Err(e) => {
            tracing::error!(error = ?e, "the S3 layer failed");
            error::plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "the S3 layer failed; see the server log".into(),
            )
        }
    };
    // A body that did not match its digest was cut short, so s3s refused it as incomplete:
    // the client hears why.
    let resp = match mismatch.and_then(|m| m.refusal()) {
        Some(refusal) => refusal,
        None => resp,
    };
    crate::s3api::answer::finish(resp, &id).await
}

async fn no_route(req: Request) -> Response {
    error::plain(
        StatusCode::NOT_FOUND,
        "NoSuchRoute",
        format!(
            "no route for {} {}; objects live under /v1/objects/{{bucket}}/{{key}} and fences under /v1/fences/{{bucket}}/{{key}}",
            req.method(),
            req.uri().path()
        ),
    )
}

async fn wrong_method(req: Request) -> Response {
    error::plain(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        format!("{} is not allowed on {}", req.method(), req.uri().path()),
    )
}

/// Records the bucket and key on the request span.
fn note_target(bucket: &str, key: &str) {
    let span = tracing::Span::current();
    span.record("bucket", bucket);
    span.record("key", key);
}
