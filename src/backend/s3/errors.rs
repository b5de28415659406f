//! aws-sdk-s3 errors as fencegate sees them: absent, precondition failed, or a backend fault
//! of the kind the gate maps to 502 (unreachable), 503 (failing, throttled) or 504 (timeout).

use crate::backend::BackendError;
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

pub fn classify<E>(op: &str, err: SdkError<E, HttpResponse>) -> S3Failure
where
    E: std::error::Error + Send + Sync + 'static,
{
    let text = || format!("{op}: {}", DisplayErrorContext(&err));
    match &err {
        SdkError::TimeoutError(_) => S3Failure::Fault(BackendError::Timeout(text())),
        SdkError::DispatchFailure(d) if d.is_timeout() => {
            S3Failure::Fault(BackendError::Timeout(text()))
        }
        SdkError::DispatchFailure(_) => S3Failure::Fault(BackendError::Unreachable(text())),
        SdkError::ConstructionFailure(_) => S3Failure::Fault(BackendError::Failing(text())),
        _ => match err.raw_response().map(|r| r.status().as_u16()) {
            Some(404) => S3Failure::NotFound,
            Some(412) => S3Failure::Precondition,
            Some(429 | 503) => S3Failure::Fault(BackendError::Throttled(text())),
            Some(408 | 504) => S3Failure::Fault(BackendError::Timeout(text())),
            _ => S3Failure::Fault(BackendError::Failing(text())),
        },
    }
}
