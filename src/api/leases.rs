//! `/v1/leases/{name}`: acquire (POST), renew (PUT), release (DELETE) and show (GET) a lease.
//! Bodies are JSON; any malformed body is a 400 with the fields expected, never a 422.

use super::{error, AppState};
use crate::auth::{Action, Principal};
use crate::lease::{AcquireRequest, Binding, LeaseError, Proof};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::rejection::PathRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::time::Duration;

/// A lease error as a JSON response (with `Retry-After` when the lease is held), or the
/// refusal of a key that may not hold the lease.
pub enum LeaseApiError {
    Lease(LeaseError),
    Auth(crate::auth::AuthError),
}

impl From<LeaseError> for LeaseApiError {
    fn from(e: LeaseError) -> Self {
        LeaseApiError::Lease(e)
    }
}

impl IntoResponse for LeaseApiError {
    fn into_response(self) -> Response {
        let e = match self {
            LeaseApiError::Lease(e) => e,
            LeaseApiError::Auth(a) => return super::ApiError::Auth(a).into_response(),
        };
        if let LeaseError::Gate(g) = e {
            return super::ApiError::Gate(g).into_response();
        }
        let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
        let mut body = serde_json::json!({ "error": e.code(), "message": e.to_string() });
        if let LeaseError::Held { holder, .. } = &e {
            body["holder"] = holder.clone().into();
        }
        let mut resp = crate::http::error::json(status, e.code(), body);
        if let Some(secs) = e.retry_after() {
            resp.headers_mut()
                .insert("retry-after", HeaderValue::from(secs));
        }
        resp
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AcquireBody {
    holder: String,
    ttl_ms: u64,
    #[serde(default)]
    wait_ms: u64,
    bucket: Option<String>,
    key: Option<String>,
    #[serde(default)]
    s3_credentials: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HolderBody {
    holder: String,
    token: u64,
    /// The `lease_secret` the acquire answered with.
    secret: String,
    ttl_ms: Option<u64>,
}

impl HolderBody {
    fn proof(&self) -> Proof<'_> {
        Proof {
            holder: &self.holder,
            token: self.token,
            secret: &self.secret,
        }
    }
}

fn authorize(
    state: &AppState,
    who: &Principal,
    name: &str,
    bucket: Option<&str>,
) -> Result<(), LeaseApiError> {
    state
        .keys
        .authorize(who, Action::Lease { name, bucket })
        .map_err(LeaseApiError::Auth)
}

/// Lease credentials do no more than the key that acquired the lease (checked at each of
/// their requests, `auth`), and they exist to write the bound key: a key that may not write
/// there is told so at the acquire, not handed credentials every write of which is refused.
fn credentials_worth_minting(
    state: &AppState,
    who: &Principal,
    bind: &Binding,
) -> Result<(), LeaseApiError> {
    let write = Action::Object {
        perm: crate::config::Permission::Write,
        bucket: &bind.bucket,
        key: &bind.key,
        scope_header: None,
    };
    state.keys.authorize(who, write).map_err(|e| {
        LeaseApiError::Auth(crate::auth::AuthError::Denied(format!(
            "{e}: \"s3_credentials\": true mints credentials that do no more than the key acquiring the lease, and this key may not write there; grant it \"write\" on the bucket, or acquire without s3_credentials"
        )))
    })
}

/// The most a lease request's JSON body may hold: a few hundred bytes in practice, so a larger
/// one is refused before it is buffered whole (413 `EntityTooLarge`, as every body limit).
pub const MAX_LEASE_BODY: usize = 64 * 1024;

fn parse<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    expected: &str,
) -> Result<T, LeaseError> {
    use crate::backend::BodyError;
    let body = body.map_err(|e| {
        let error = match e.status() {
            StatusCode::PAYLOAD_TOO_LARGE => BodyError::TooLarge {
                limit: MAX_LEASE_BODY as u64,
            },
            _ => BodyError::Broken(e.body_text()),
        };
        LeaseError::Gate(crate::gate::GateError::Body(error))
    })?;
    serde_json::from_slice(&body)
        .map_err(|e| LeaseError::Invalid(format!("the body is not {expected}: {e}")))
}

fn name_of(path: Result<Path<String>, PathRejection>) -> Result<String, LeaseError> {
    let Path(name) = path.map_err(|e| LeaseError::Invalid(format!("bad lease path: {e}")))?;
    tracing::Span::current().record("lease", name.as_str());
    Ok(name)
}

const ACQUIRE: &str = r#"JSON like {"holder": "worker-1", "ttl_ms": 10000} (optional: "wait_ms", "bucket" + "key" to bind a fence, "s3_credentials": true)"#;
const HOLDER: &str = r#"JSON like {"holder": "worker-1", "token": 7, "secret": "<lease_secret from the acquire>"} (renew also takes "ttl_ms")"#;

pub async fn acquire(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, LeaseApiError> {
    // The grant's TTL runs from its end; `waited_ms` tells the holder how long after its
    // request that was, so its own count of the TTL starts no later than the server's.
    let received = std::time::Instant::now();
    let name = name_of(path)?;
    let b: AcquireBody = parse(body, ACQUIRE)?;
    authorize(&state, &who, &name, b.bucket.as_deref())?;
    let bind = match (b.bucket, b.key) {
        (Some(bucket), Some(key)) => Some(Binding { bucket, key }),
        (None, None) => None,
        _ => {
            return Err(LeaseError::Invalid(
                "bind a lease with both \"bucket\" and \"key\", or neither".into(),
            )
            .into())
        }
    };
    if let (true, Some(bind)) = (b.s3_credentials, &bind) {
        credentials_worth_minting(&state, &who, bind)?;
    }
    let grant = state
        .leases
        .acquire(AcquireRequest {
            name,
            holder: b.holder,
            ttl: Duration::from_millis(b.ttl_ms),
            wait: Duration::from_millis(b.wait_ms),
            bind,
            s3_credentials: b.s3_credentials,
            owner: who.name(),
        })
        .await?;
    tracing::Span::current().record("token", grant.token);
    Ok(Json(Acquired {
        waited_ms: received.elapsed().as_millis() as u64,
        grant,
    })
    .into_response())
}

/// The acquire's answer: the grant, and how long the server took from the request to the
/// grant (a wait for the holder, the token's sync).
#[derive(serde::Serialize)]
struct Acquired {
    #[serde(flatten)]
    grant: crate::lease::Grant,
    waited_ms: u64,
}

pub async fn renew(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, LeaseApiError> {
    let name = name_of(path)?;
    authorize(&state, &who, &name, None)?;
    let b: HolderBody = parse(body, HOLDER)?;
    let Some(ttl_ms) = b.ttl_ms else {
        return Err(LeaseError::Invalid("renew needs \"ttl_ms\"".into()).into());
    };
    let grant = state
        .leases
        .renew(&name, &b.proof(), Duration::from_millis(ttl_ms))
        .await?;
    Ok(Json(grant).into_response())
}

pub async fn release(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, LeaseApiError> {
    let name = name_of(path)?;
    authorize(&state, &who, &name, None)?;
    let b: HolderBody = parse(body, HOLDER)?;
    state.leases.release(&name, &b.proof()).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn show(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, LeaseApiError> {
    let name = name_of(path)?;
    authorize(&state, &who, &name, None)?;
    Ok(Json(state.leases.show(&name).await?).into_response())
}

/// Lease names are one path segment; anything deeper is a 400, not a 404.
pub async fn nested(uri: axum::http::Uri) -> Response {
    error::plain(
        StatusCode::BAD_REQUEST,
        "InvalidLeaseName",
        format!(
            "{} is not a lease: a lease name is one path segment (send `/` inside a name as %2F)",
            uri.path()
        ),
    )
}
