//! GCS's answers as fencegate sees them: absent, a condition not met, a signed URL that arrived
//! after it expired (nothing was written), or a fault of the kind the gate maps to 502
//! (unreachable), 503 (failing, throttled) or 504 (timeout).

use crate::backend::BackendError;

/// What one failed call means.
#[derive(Debug)]
pub enum GcsFailure {
    /// 404: no such object (or bucket).
    NotFound,
    /// 412 `PreconditionFailed` (XML) or `conditionNotMet` (JSON): the condition did not hold.
    Precondition,
    Fault(BackendError),
}

impl GcsFailure {
    /// Did the request maybe reach the store (so a write may have been applied)?
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            GcsFailure::Fault(BackendError::Timeout(_) | BackendError::Unreachable(_))
        )
    }

    pub fn into_backend(self, op: &str) -> BackendError {
        match self {
            GcsFailure::NotFound => BackendError::Failing(format!("{op}: not found")),
            GcsFailure::Precondition => BackendError::Conflict {
                expected: None,
                found: None,
            },
            GcsFailure::Fault(e) => e,
        }
    }
}

/// What an answer with `status` and error `code` means. A 4xx other than the conditions' is a
/// refusal: nothing of the request was written. A 5xx is the store failing, as on s3.
pub fn answered(op: &str, status: u16, code: &str, message: &str) -> GcsFailure {
    let short = format!("{op}: {status} {code} {message}");
    match (status, code) {
        // The signed URL's time was up when it arrived: the service applied nothing.
        (400, "ExpiredToken") => GcsFailure::Fault(BackendError::Expired(short)),
        (404, _) => GcsFailure::NotFound,
        (412, _) => GcsFailure::Precondition,
        // GCS's own answer (its error body names a code): the request was not applied. GCS
        // throttles more than about one write a second to one object name, and a hot key must
        // not be held as if the write might still land.
        (429, c) if !c.is_empty() => GcsFailure::Fault(BackendError::Refused {
            status: 429,
            code: c.to_string(),
            message: format!("{short}; nothing was written, retry"),
        }),
        (429 | 503, _) => GcsFailure::Fault(BackendError::Throttled(short)),
        (408 | 504, _) => GcsFailure::Fault(BackendError::Timeout(short)),
        (400..=499, _) => GcsFailure::Fault(BackendError::Refused {
            status,
            code: code.to_string(),
            message: short,
        }),
        _ => GcsFailure::Fault(BackendError::Failing(short)),
    }
}

/// A request that got no answer: a timeout or a broken connection (either may have reached the
/// store), or one that could not be built (it was not sent).
pub fn unanswered(op: &str, err: reqwest::Error) -> GcsFailure {
    // Without the URL: a signed URL's signature rides in its query.
    let err = err.without_url();
    tracing::debug!(error = ?err, operation = op, "the store call failed");
    if err.is_timeout() {
        GcsFailure::Fault(BackendError::Timeout(format!(
            "{op}: no answer within connect_timeout_secs, read_timeout_secs or call_timeout_secs"
        )))
    } else if err.is_builder() {
        GcsFailure::Fault(BackendError::Refused {
            status: 0,
            code: "NotSent".into(),
            message: format!("{op}: {err}"),
        })
    } else {
        GcsFailure::Fault(BackendError::Unreachable(format!(
            "{op}: the connection to the store failed or broke"
        )))
    }
}
