//! The native HTTP API (README: "The native API") and the admin surface: their routes, the
//! state every handler reaches, and authentication refusals as JSON. Handlers only translate
//! HTTP to gate, lease and auth calls and back; every decision is theirs. `server::routes` puts
//! these routes on listeners, beside the S3 gateway.

pub mod admin;
mod error;
mod fences;
mod health;
mod leases;
mod objects;
pub mod status;

pub use error::ApiError;

use crate::gate::Gate;
use crate::http::headers;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::Arc;
use std::time::Duration;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub gate: Arc<Gate>,
    pub max_body_bytes: u64,
    pub body_idle_timeout: Duration,
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    pub max_header_bytes: usize,
    pub leases: Arc<crate::lease::Leases>,
    /// The key table every `/v1` request authenticates against.
    pub keys: Arc<crate::auth::KeyTable>,
    /// Reloads keys, policies and the TLS certificate, for `POST /admin/reload`.
    pub reloader: Arc<dyn Reload>,
    /// What `GET /admin/status` reports of the start-up.
    pub about: Arc<status::About>,
}

/// What `POST /admin/reload` runs: the server's reloader, which swaps keys, bucket policies and
/// the TLS certificate together or not at all.
#[async_trait::async_trait]
pub trait Reload: Send + Sync {
    /// What changed, as the answer's JSON text; or why nothing did.
    async fn reload(&self, principal: &str) -> Result<String, ReloadRefused>;
}

/// A reload refused: nothing changed.
pub struct ReloadRefused {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl AppState {
    /// May `who` do `action`? (The refusal is a 403 that says what is missing.)
    pub fn authorize(
        &self,
        who: &crate::auth::Principal,
        action: crate::auth::Action<'_>,
    ) -> Result<(), ApiError> {
        self.keys.authorize(who, action).map_err(ApiError::Auth)
    }
}

/// The native API's routes (`/v1/...`, `/healthz`, `/readyz`), each `/v1` route behind
/// [`authenticate`]. `server::routes` puts them on a listener.
pub fn routes(state: &AppState) -> Router<AppState> {
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
                .delete(leases::release)
                .layer(axum::extract::DefaultBodyLimit::max(leases::MAX_LEASE_BODY)),
        )
        .route(
            "/v1/leases/{name}/{*rest}",
            axum::routing::any(leases::nested),
        )
        // Only matched routes authenticate: a 404 or 405 needs no credentials.
        .route_layer(axum::middleware::from_fn_with_state(
            state.keys.clone(),
            authenticate,
        ));
    health_routes().merge(v1)
}

/// `/healthz` and `/readyz`, on every listener that serves the native API or the admin surface.
pub fn health_routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(health::readyz))
}

/// The native API's authentication layer: the request goes on with its [`Principal`] as an
/// extension, or is refused here.
///
/// [`Principal`]: crate::auth::Principal
pub async fn authenticate(
    State(keys): State<Arc<crate::auth::KeyTable>>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    match crate::auth::native::principal_of(&keys, req).await {
        Ok(req) => next.run(req).await,
        Err(e) => {
            tracing::info!(target: "fencegate::audit", code = e.code(), error = %e, "authentication failed");
            e.into_response()
        }
    }
}

/// Records the bucket and key on the request span.
fn note_target(bucket: &str, key: &str) {
    let span = tracing::Span::current();
    span.record("bucket", bucket);
    span.record("key", key);
}
