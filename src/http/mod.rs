//! The HTTP kit every surface shares (native API, S3 gateway, admin), as garage's `api/common`
//! serves its APIs: fencegate's request headers read into the gate's types (`headers.rs`),
//! declared digests checked as a body streams (`digests.rs`), the listener's stalled-body
//! cut-off (`stall.rs`), what becomes of a body a handler did not read (`unread.rs`),
//! body-stream errors told apart (`body.rs`), JSON error answers (`error.rs`) and request ids. It names no surface: the surfaces import it.

pub mod body;
pub mod digests;
pub mod error;
pub mod headers;
pub mod stall;
pub mod unread;

pub use stall::{bound_bodies, StalledBody};

/// A new request id: 16 upper-case hex digits, as S3's are.
pub fn request_id() -> String {
    format!("{:016X}", rand::random::<u64>())
}

/// The one id of a request, given as it arrives ([`assign_request_id`]): its log span's
/// `request_id`, and the S3 gateway's `x-amz-request-id`.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

impl RequestId {
    /// The id given to `req`, or a new one where no layer gave one (a handler called alone).
    pub fn of(extensions: &http::Extensions) -> String {
        extensions
            .get::<RequestId>()
            .map_or_else(request_id, |id| id.0.clone())
    }
}

/// Gives each request its id, before its span is made.
pub async fn assign_request_id(
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    req.extensions_mut().insert(RequestId(request_id()));
    next.run(req).await
}
