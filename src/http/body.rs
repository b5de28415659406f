//! Errors a request body's stream can end with that a later reader must tell apart: a body
//! that did not match what was signed becomes the authentication refusal it is, with the
//! status and code the authentication layer gave it.

/// The error a body stream ends with when its bytes do not match what was signed.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct BodyMismatch {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

/// The [`BodyMismatch`] a body stream's error carries, if it is one: used by the body reader
/// to turn the stream's error back into the authentication refusal.
pub fn body_mismatch(e: axum::Error) -> Result<BodyMismatch, axum::Error> {
    // The body layers wrap the stream's error once per layer.
    let mut inner = e.into_inner();
    loop {
        inner = match inner.downcast::<BodyMismatch>() {
            Ok(m) => return Ok(*m),
            Err(other) => match other.downcast::<axum::Error>() {
                Ok(wrapped) => wrapped.into_inner(),
                Err(other) => return Err(axum::Error::new(other)),
            },
        };
    }
}
