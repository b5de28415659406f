//! aws-sdk-s3 errors as fencegate sees them: absent, precondition failed, or a backend fault
//! of the kind the gate maps to 502 (unreachable), 503 (failing, throttled) or 504 (timeout).

use crate::backend::BackendError;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::display::DisplayErrorContext;

/// What one failed S3 call means.
#[derive(Debug)]
pub enum S3Failure {
    /// 404: no such key (or no such upload).
    NotFound,
    /// 412: the condition (`If-Match` / `If-None-Match`) was not met.
    Precondition,
    Fault(BackendError),
}

impl S3Failure {
    /// Did the request maybe reach the store (so a write may have been applied)?
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            S3Failure::Fault(BackendError::Timeout(_) | BackendError::Unreachable(_))
        )
    }

    pub fn into_backend(self, op: &str) -> BackendError {
        match self {
            S3Failure::NotFound => BackendError::Failing(format!("{op}: not found")),
            S3Failure::Precondition => BackendError::Conflict {
                expected: None,
                found: None,
            },
            S3Failure::Fault(e) => e,
        }
    }
}

/// What a store's answer (or its absence) means. A 4xx other than the conditions' is a
/// refusal: nothing of the request was written (counted as an outcome unknown, it would hold
/// the object for `commit_deadline_secs`). The message names the store's status, code and
/// message, not the SDK's dump of the whole answer, which is logged.
pub fn classify<E>(op: &str, err: SdkError<E, HttpResponse>) -> S3Failure
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
{
    let text = || format!("{op}: {}", DisplayErrorContext(&err));
    // The SDK's dump of a failed dispatch goes to the debug log; the client is told what
    // happened, in a line.
    let logged = |short: String| {
        tracing::debug!(error = %text(), "the store call failed");
        short
    };
    match &err {
        SdkError::TimeoutError(_) => S3Failure::Fault(BackendError::Timeout(logged(format!(
            "{op}: no answer within the call's deadline"
        )))),
        SdkError::DispatchFailure(d) if d.is_timeout() => {
            S3Failure::Fault(BackendError::Timeout(logged(format!(
                "{op}: no answer within connect_timeout_secs or read_timeout_secs"
            ))))
        }
        SdkError::DispatchFailure(d) => {
            let what = if d.is_io() {
                "the connection to the store failed or broke"
            } else {
                "the request could not be sent to the store"
            };
            S3Failure::Fault(BackendError::Unreachable(logged(format!("{op}: {what}"))))
        }
        SdkError::ConstructionFailure(_) => S3Failure::Fault(BackendError::Refused {
            status: 0,
            code: "NotSent".into(),
            message: text(),
        }),
        _ => {
            let status = err.raw_response().map(|r| r.status().as_u16());
            tracing::debug!(answer = %text(), "the store's answer");
            answered(
                op,
                status,
                err.code().unwrap_or(""),
                err.message().unwrap_or(""),
            )
        }
    }
}

/// What a store's answer with `status` (and the XML error's code and message, where it has
/// one) means; the rule [`classify`] applies to the SDK's answers, and `direct.rs` to its own.
pub fn answered(op: &str, status: Option<u16>, code: &str, message: &str) -> S3Failure {
    let short = format!(
        "{op}: {} {code} {message}",
        status.map_or("-".into(), |s| s.to_string())
    );
    match status {
        Some(404) => S3Failure::NotFound,
        Some(412) => S3Failure::Precondition,
        Some(429 | 503) => S3Failure::Fault(BackendError::Throttled(short)),
        Some(408 | 504) => S3Failure::Fault(BackendError::Timeout(short)),
        Some(status @ 400..=499) => S3Failure::Fault(BackendError::Refused {
            status,
            code: code.to_string(),
            message: short,
        }),
        _ => S3Failure::Fault(BackendError::Failing(short)),
    }
}

/// What a request that got no answer means, as [`classify`] reads the SDK's dispatch
/// failures: a timeout, a connection that failed or broke (either may have reached the
/// store), or a request that could not be built (it was not sent).
pub fn unanswered(op: &str, err: &reqwest::Error) -> S3Failure {
    tracing::debug!(error = ?err, operation = op, "the store call failed");
    if err.is_timeout() {
        S3Failure::Fault(BackendError::Timeout(format!(
            "{op}: no answer within connect_timeout_secs, read_timeout_secs or call_timeout_secs"
        )))
    } else if err.is_builder() {
        S3Failure::Fault(BackendError::Refused {
            status: 0,
            code: "NotSent".into(),
            message: format!("{op}: {err}"),
        })
    } else {
        S3Failure::Fault(BackendError::Unreachable(format!(
            "{op}: the connection to the store failed or broke"
        )))
    }
}

/// [`classify`]'s rule for an answer read by hand (a presigned request's).
pub fn refusal(status: u16, code: Option<&str>, message: String) -> BackendError {
    match status {
        400..=499 => BackendError::Refused {
            status,
            code: code.unwrap_or("").to_string(),
            message,
        },
        _ => BackendError::Failing(message),
    }
}
