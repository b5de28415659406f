//! Authentication of the native API (`/v1/...`): finds the request's [`Principal`] from its
//! SigV4 signature (or none, in development mode) and hands it to the handlers as a request
//! extension. Handlers then ask [`KeyTable::authorize`] for the action they serve.
//!
//! The signature is checked before anything runs as the key it claims. A declared
//! `x-amz-content-sha256` (covered by the signature) is checked against the body as its last
//! bytes pass, so a large body is never held whole; a mismatch fails the body stream, and the
//! write fails before its commit. A signature over the body's own hash (curl without that
//! header) needs the body first: such bodies are read whole, up to 1 MiB each and within one
//! process-wide budget (`unverified.rs`).

use super::sigv4::{Payload, SignedRequest};
use super::{AuthError, KeyTable, Principal};
use crate::http::body::BodyMismatch;
use crate::http::headers::unsigned_fencing_header;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use futures::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::SystemTime;

/// The request with its principal as an extension, once its signature is checked (the body's
/// too, where the signature covers it); the refusal otherwise.
pub async fn principal_of(keys: &KeyTable, req: Request) -> Result<Request, AuthError> {
    let signed = SignedRequest::parse(req.method(), req.uri(), req.headers(), SystemTime::now())?;
    let Some(signed) = signed else {
        let who = keys.anonymous()?;
        return Ok(with_principal(req, who));
    };
    let (secret, who) = keys.lookup(&signed.access_key)?;
    if matches!(who, Principal::Lease(_)) {
        // They carry their lease's token only on the S3 API; here the token is a header the
        // holder of stale credentials could set to anything.
        return Err(AuthError::Denied(
            "lease credentials are for S3 clients; on the native API sign with a key from [keys] and send the lease's token in Fencing-Token".into(),
        ));
    }
    if let Some(name) = unsigned_fencing_header(req.headers(), |h| signed.signs(h)) {
        return Err(AuthError::Malformed(format!(
            "the {name} header must be signed (add it to SignedHeaders)"
        )));
    }
    if let Some(hash) = signed.payload_hash() {
        if !signed.verify(&secret, hash) {
            return Err(AuthError::BadSignature);
        }
    }
    let (parts, body) = req.into_parts();
    let body = match &signed.payload {
        Payload::Unsigned => body,
        // The signature, checked above, covers the declared hash: the caller is known, and the
        // body is checked against the hash as it streams.
        Payload::Declared(h) => verified(body, Check::Declared(h.clone())),
        // A signature over the body's own hash (curl): nothing may run as the claimed key until
        // it is checked, so the body is read first, within the unverified-body budget.
        Payload::Body => {
            // The length as hyper frames the body: 0 for a request without one (a GET), the
            // Content-Length, or unknown for a chunked body.
            let declared = http_body::Body::size_hint(&body).exact();
            let bytes = keys.unverified.read(body, declared).await?;
            let hash = hex::encode(Sha256::digest(&bytes));
            if !signed.verify(&secret, &hash) {
                return Err(AuthError::BadSignature);
            }
            Body::from(bytes)
        }
    };
    Ok(with_principal(Request::from_parts(parts, body), who))
}

/// The request, known to come from `who` (its signature checked, or anonymous where that is
/// allowed): the access line names it from here on, never before.
fn with_principal(mut req: Request, who: Principal) -> Request {
    tracing::Span::current().record("principal", who.name().as_str());
    req.extensions_mut().insert(who);
    req
}

enum Check {
    Declared(String),
}

fn verified(body: Body, check: Check) -> Body {
    Body::from_stream(Verified {
        inner: body.into_data_stream().boxed(),
        hasher: Some(Sha256::new()),
        check,
    })
}

struct Verified {
    inner: Pin<Box<dyn Stream<Item = Result<Bytes, axum::Error>> + Send>>,
    hasher: Option<Sha256>,
    check: Check,
}

impl Stream for Verified {
    type Item = Result<Bytes, axum::BoxError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.inner.as_mut().poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(chunk))) => {
                if let Some(h) = self.hasher.as_mut() {
                    h.update(&chunk);
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => {
                let Some(hasher) = self.hasher.take() else {
                    return Poll::Ready(None);
                };
                let hash = hex::encode(hasher.finalize());
                let error = match &self.check {
                    Check::Declared(d) if *d != hash => Some(AuthError::Malformed(
                        "the body does not match its x-amz-content-sha256".into(),
                    )),
                    Check::Declared(_) => None,
                };
                Poll::Ready(error.map(|e| {
                    tracing::info!(target: "fencegate::audit", code = e.code(), "a signed body did not match its signature");
                    Err(BodyMismatch {
                        status: e.status(),
                        code: e.code(),
                        message: e.to_string(),
                    }
                    .into())
                }))
            }
        }
    }
}
