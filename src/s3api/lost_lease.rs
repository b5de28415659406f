//! How a write signed with lease-bound credentials hears that its lease was lost: a stale
//! token is 403 `StaleFencingToken` there, where a token sent in a header gets 409.
//!
//! The clients that sign with lease credentials are the ones that cannot send a token: table
//! formats and other object_store-based libraries. object_store reads a 409 as
//! `AlreadyExists`, which delta-rs and Lance take for a lost race on a version and retry at
//! the next version, for ever with the same stale credentials; a 403 is `PermissionDenied`,
//! which they (and botocore, Arrow, rclone) report and stop on. For them the write is not in
//! conflict: its writer is no longer allowed to write, and must acquire the lease again.

use http::StatusCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Set by the access check when the request's principal is a lease's credentials; present in
/// every request the gateway hands to s3s.
#[derive(Clone, Default)]
pub struct SignedByLease(Arc<AtomicBool>);

impl SignedByLease {
    /// Notes, in the request's slot, that its principal is a lease's credentials.
    pub fn mark(extensions: &http::Extensions) {
        if let Some(slot) = extensions.get::<SignedByLease>() {
            slot.0.store(true, Ordering::Relaxed);
        }
    }

    /// The answer as a lease-signed request gets it: a fencing refusal becomes 403.
    pub fn answer(&self, mut resp: axum::response::Response) -> axum::response::Response {
        let fenced = resp.status() == StatusCode::CONFLICT
            && resp.headers().contains_key("fencing-token-highest")
            && matches!(
                resp.extensions()
                    .get::<crate::metrics::codes::ErrorCode>()
                    .map(|c| c.0.as_str()),
                Some("StaleFencingToken" | "TokenNotIncreasing")
            );
        if fenced && self.0.load(Ordering::Relaxed) {
            *resp.status_mut() = StatusCode::FORBIDDEN;
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn refusal(status: u16, code: &str, highest: bool) -> axum::response::Response {
        let mut resp =
            crate::s3api::answer::error(StatusCode::from_u16(status).unwrap(), code, "m");
        if highest {
            resp.headers_mut()
                .insert("fencing-token-highest", http::HeaderValue::from(9));
        }
        resp
    }

    #[test]
    fn only_a_fencing_refusal_of_a_lease_signed_request_becomes_403() {
        let lease = SignedByLease::default();
        let mut ext = http::Extensions::new();
        ext.insert(lease.clone());
        // Before the access check marks it, nothing changes.
        let before = lease.answer(refusal(409, "StaleFencingToken", true));
        assert_eq!(before.status(), 409);
        SignedByLease::mark(&ext);
        for code in ["StaleFencingToken", "TokenNotIncreasing"] {
            assert_eq!(
                lease.answer(refusal(409, code, true)).status(),
                403,
                "{code}"
            );
        }
        // Other conflicts keep their status: they are not about the lease.
        assert_eq!(
            lease.answer(refusal(409, "BucketNotEmpty", false)).status(),
            409
        );
        assert_eq!(
            lease
                .answer(refusal(412, "PreconditionFailed", false))
                .status(),
            412
        );
        let ok = lease.answer(axum::response::Response::new(Body::empty()));
        assert_eq!(ok.status(), 200);
    }
}
