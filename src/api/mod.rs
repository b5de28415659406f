//! The native HTTP API (DESIGN.md §4): routes, shared state and the per-request span. Handlers
//! only translate HTTP to gate calls and back; every decision is the gate's.

mod error;
mod fences;
mod headers;
mod objects;

pub use error::ApiError;

use crate::gate::Gate;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
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
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
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
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request| {
                    tracing::info_span!(
                        "request",
                        method = %req.method(),
                        path = %req.uri().path(),
                        bucket = Empty,
                        key = Empty,
                        scope = Empty,
                        token = Empty,
                        outcome = Empty,
                    )
                })
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
        .with_state(state)
}

async fn metrics(State(state): State<AppState>) -> Response {
    match &state.metrics {
        Some(handle) => handle.render().into_response(),
        None => (StatusCode::NOT_FOUND, "metrics are not enabled\n").into_response(),
    }
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
