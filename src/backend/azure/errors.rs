//! The Blob service's answers as fencegate sees them: absent, a condition not met, or a fault
//! of the kind the gate maps to 502 (unreachable), 503 (failing, throttled) or 504 (timeout).

use crate::backend::BackendError;

/// What one failed call means.
#[derive(Debug)]
pub enum AzFailure {
    /// 404: no such blob (or container).
    NotFound,
    /// 412 `ConditionNotMet`, or 409 `BlobAlreadyExists` (`If-None-Match: *` on a blob that
    /// exists): the condition did not hold.
    Precondition,
    Fault(BackendError),
}

impl AzFailure {
    /// Did the request maybe reach the store (so a write may have been applied)?
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            AzFailure::Fault(BackendError::Timeout(_) | BackendError::Unreachable(_))
        )
    }

    pub fn into_backend(self, op: &str) -> BackendError {
        match self {
            AzFailure::NotFound => BackendError::Failing(format!("{op}: not found")),
            AzFailure::Precondition => BackendError::Conflict {
                expected: None,
                found: None,
            },
            AzFailure::Fault(e) => e,
        }
    }
}

/// What an answer with `status` and `x-ms-error-code` means. A 4xx other than the conditions'
/// is a refusal: nothing of the request was written. A 5xx is the store failing, as on s3.
pub fn answered(op: &str, status: u16, code: &str, message: &str) -> AzFailure {
    let short = format!("{op}: {status} {code} {message}");
    match (status, code) {
        // The copy's source is not at the version staged: fencegate's own staging blob changed
        // (a late assembly of the same upload), not the object.
        (412, "SourceConditionNotMet") => AzFailure::Fault(BackendError::Failing(format!(
            "{short}; the staged body changed before its commit: complete the upload again"
        ))),
        (404, _) => AzFailure::NotFound,
        (412, _) | (409, "BlobAlreadyExists") => AzFailure::Precondition,
        // The service's own throttling (its answer names an error code: `ServerBusy`, or a
        // 429's): the request was refused before it was applied, so the key is not held as if
        // the write might still land. A 503 without the code may come from an intermediary
        // that forwarded the request: its outcome stays unknown.
        (429, c) | (503, c @ "ServerBusy") if !c.is_empty() => {
            AzFailure::Fault(BackendError::Refused {
                status: 429,
                code: c.to_string(),
                message: format!("{short}; nothing was written, retry"),
            })
        }
        (429 | 503, _) => AzFailure::Fault(BackendError::Throttled(short)),
        (408 | 504, _) => AzFailure::Fault(BackendError::Timeout(short)),
        (400..=499, _) => AzFailure::Fault(BackendError::Refused {
            status,
            code: code.to_string(),
            message: short,
        }),
        _ => AzFailure::Fault(BackendError::Failing(short)),
    }
}

/// A request that got no answer: a timeout or a broken connection (either may have reached
/// the store), or one that could not be built (it was not sent).
pub fn unanswered(op: &str, err: reqwest::Error) -> AzFailure {
    // Without the URL: a SAS token's signature rides in its query.
    let err = err.without_url();
    tracing::debug!(error = ?err, operation = op, "the store call failed");
    if err.is_timeout() {
        AzFailure::Fault(BackendError::Timeout(format!(
            "{op}: no answer within connect_timeout_secs, read_timeout_secs or call_timeout_secs"
        )))
    } else if err.is_builder() {
        AzFailure::Fault(BackendError::Refused {
            status: 0,
            code: "NotSent".into(),
            message: format!("{op}: {err}"),
        })
    } else {
        AzFailure::Fault(BackendError::Unreachable(format!(
            "{op}: the connection to the store failed or broke"
        )))
    }
}
