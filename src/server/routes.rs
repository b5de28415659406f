//! Which surface answers what, on each listener: the native API's and the admin surface's
//! routes (`crate::api`), the S3 gateway for every path they do not route, and the layers
//! every request crosses (metrics, the request span, the header-size guard, the stalled-body
//! backstop).

use crate::api::{self, AppState};
use crate::http::error::{no_route, wrong_method};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Router;
use std::time::Duration;
use tower_http::trace::TraceLayer;
use tracing::field::Empty;

/// The S3 gateway, when it shares a listener: it answers every path not routed there.
pub type S3 = Option<crate::s3api::Endpoint>;

/// Where the admin surface is served.
pub enum AdminPlace {
    /// Beside the native API: these routes join its router.
    Here(Router),
    /// On a listener of its own: the native listener points there.
    At(std::net::SocketAddr),
}

/// The native listener: the native API, the admin surface or a pointer to its listener, and
/// the S3 gateway for the rest when it is on.
pub fn router(state: AppState, s3: S3, admin: AdminPlace) -> Router {
    let routes = api::routes(&state)
        .fallback(move |req: Request| s3_or_no_route(s3.clone(), req))
        .method_not_allowed_fallback(wrong_method);
    let routes = match admin {
        // The fallback again after the merge: it reaches only the routes already there.
        AdminPlace::Here(admin) => routes
            .with_state(state.clone())
            .merge(admin)
            .method_not_allowed_fallback(wrong_method),
        AdminPlace::At(addr) => {
            let elsewhere = move || async move {
                crate::http::error::plain(
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

/// The router of `[admin] listen`: the admin routes, `/healthz` and `/readyz`.
pub fn admin_only_router(state: &AppState, admin: Router) -> Router {
    let routes = api::health_routes()
        .with_state(state.clone())
        .merge(admin)
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method);
    with_layers(routes, state)
}

/// A router that serves only the S3 API, for `[s3] listen`.
pub fn s3_only_router(state: &AppState, s3: S3) -> Router {
    let routes = Router::new().fallback(move |req: Request| s3_or_no_route(s3.clone(), req));
    with_layers(routes, state)
}

/// Past this much longer than `body_idle_timeout`, any stalled body is cut off at the
/// listener, read by a handler or not (`http::stall`).
const BODY_BACKSTOP_MARGIN: Duration = Duration::from_secs(5);

/// The header-size guard, the stalled-body backstop, the settling of unread bodies and the
/// per-request span with its closing log line.
fn with_layers(routes: Router, state: &AppState) -> Router {
    routes
        .layer(axum::middleware::from_fn_with_state(
            state.body_idle_timeout + BODY_BACKSTOP_MARGIN,
            crate::http::bound_bodies,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.max_header_bytes,
            limit_headers,
        ))
        // Outside every layer that may answer before a body is read, so that it sees the
        // body as hyper hands it over.
        .layer(axum::middleware::from_fn(
            crate::http::unread::settle_unread_bodies,
        ))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_request(())
                // The `served` access line carries every status, and fencegate logs its own
                // faults where they happen: only a 500 (a bug) is an ERROR here, not a 501 a
                // client asked for nor a 503 the store's outage already explained.
                .on_failure(
                    |class: tower_http::classify::ServerErrorsFailureClass,
                     _latency: Duration,
                     _span: &tracing::Span| {
                        use tower_http::classify::ServerErrorsFailureClass as Class;
                        match class {
                            Class::StatusCode(s) if s != StatusCode::INTERNAL_SERVER_ERROR => {}
                            other => tracing::error!(failure = %other, "the request failed inside fencegate; please report it with this line"),
                        }
                    },
                )
                // The access line is written by the request tracker, once the answer's last
                // byte has left, with the bytes each way (`metrics::http`).
                .on_response(()),
        )
        // Before the span is made, which logs it.
        .layer(axum::middleware::from_fn(crate::http::assign_request_id))
        // Outermost, so that what the layers above refuse is timed and counted too.
        .layer(axum::middleware::from_fn(crate::metrics::http::track))
}

fn request_span(req: &Request) -> tracing::Span {
    let user_agent: String = req
        .headers()
        .get(http::header::USER_AGENT)
        .map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .chars()
                .take(200)
                .collect()
        })
        .unwrap_or_default();
    let client = req
        .extensions()
        .get::<crate::http::ClientAddr>()
        .map(|a| a.0.to_string())
        .unwrap_or_default();
    let span = tracing::info_span!(
        "request",
        client = %client,
        method = %req.method(),
        path = %req.uri().path(),
        bucket = Empty,
        key = Empty,
        lease = Empty,
        scope = Empty,
        token = Empty,
        outcome = Empty,
        // One id: the S3 gateway answers it as x-amz-request-id.
        request_id = %crate::http::RequestId::of(req.extensions()),
        access_key = Empty,
        principal = Empty,
        // A string value: the text log quotes and escapes it, so no client can forge fields.
        user_agent = user_agent.as_str(),
    );
    if let Some(key) = crate::http::claimed_access_key(req.headers(), req.uri().query()) {
        span.record("access_key", key.as_str());
    }
    crate::metrics::http::AccessSpan::keep(req.extensions(), &span);
    span
}

/// Refuses a request whose header block is larger than configured, or whose body comes in a
/// transfer coding other than chunked, before any handler runs.
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
        return crate::http::error::plain(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "RequestHeaderSectionTooLarge",
            format!("the request line and headers take {size} bytes; the limit is {max} ([server] max_header_bytes)"),
        );
    }
    // hyper undoes only `chunked`: a body sent with another transfer coding (gzip, chunked)
    // would reach the handlers, and be stored, still encoded.
    let other_coding = req
        .headers()
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(',')
                .map(|c| c.trim().to_string())
                .collect::<Vec<_>>()
        })
        .find(|c| !c.eq_ignore_ascii_case("chunked"));
    if let Some(coding) = other_coding {
        return crate::http::error::plain(
            StatusCode::NOT_IMPLEMENTED,
            "NotImplemented",
            format!("Transfer-Encoding {coding:?}: fencegate decodes only chunked request bodies; send the body without another transfer coding (a Content-Encoding is kept as the object's metadata)"),
        );
    }
    next.run(req).await
}

/// Hands everything the native API does not route to the S3 gateway, if it is on.
async fn s3_or_no_route(s3: S3, req: Request) -> Response {
    // `v1` is too short to be an S3 bucket name, so /v1/... is always the native API's.
    let native = req.uri().path() == "/v1" || req.uri().path().starts_with("/v1/");
    let Some(s3) = s3.filter(|_| !native) else {
        return no_route(req).await;
    };
    crate::s3api::serve(&s3, req).await
}
