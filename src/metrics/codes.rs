//! The `code` label of `fencegate_http_requests_total`: the error code an answer carries, from a
//! fixed list, so that the label stays bounded whatever clients send. The list is fencegate's
//! own codes (docs/reference.md, "Reference: errors") and the codes S3 defines (as `s3s` knows them); any other code,
//! such as one a store invented, counts as `other`, and an answer without one as `none`.
//!
//! The surfaces' error writers mark an answer with [`ErrorCode`]; the request tracker reads it.

use metrics::SharedString;

/// The error code of an answer, put in its extensions by the writer of its error body.
#[derive(Debug, Clone)]
pub struct ErrorCode(pub String);

impl ErrorCode {
    /// Marks `resp` as an error answer with `code`.
    pub fn mark<B>(resp: &mut http::Response<B>, code: &str) {
        resp.extensions_mut().insert(ErrorCode(code.to_string()));
    }
}

/// The codes fencegate answers that S3 does not define (and a few it shares, for clarity).
pub const FENCEGATE_CODES: &[&str] = &[
    "StaleFencingToken",
    "FencingTokenRequired",
    "InvalidFencingToken",
    "InvalidFencingScope",
    "FencingScopeMismatch",
    "TokenSpaceExhausted",
    "TokenJumpTooLarge",
    "BypassDetected",
    "InvalidKey",
    "CommitUnresolved",
    "CommitInProgress",
    "ClockSkewed",
    "InvalidIdempotencyKey",
    "IdempotencyKeyInUse",
    "IdempotencyKeyMismatch",
    "BackendUnavailable",
    "StoreRefusedRequest",
    "StoreKeptDifferentBytes",
    "FenceStoreUnavailable",
    "IncompleteBody",
    "MissingCredentials",
    "LeaseHeld",
    "NotLeaseHolder",
    "NoSuchLease",
    "TooManyLeases",
    "InvalidLeaseName",
    "InvalidTtl",
    "TlsRequired",
    "TlsReloadFailed",
    "InvalidConfiguration",
    "ReloadFailed",
    "ScopeChangeRefused",
    "RestartRequired",
    "RequestHeaderSectionTooLarge",
    "NoSuchRoute",
    "MethodNotAllowed",
    "TooManyUploads",
    "SlowDown",
];

/// The label for an answer's code: the code itself when it is one of the fixed list, `other`
/// when it is not, `none` when the answer named none.
pub fn label(code: Option<&str>) -> SharedString {
    let Some(code) = code else {
        return SharedString::const_str("none");
    };
    if let Some(known) = FENCEGATE_CODES.iter().find(|c| **c == code) {
        return SharedString::const_str(known);
    }
    match s3s::S3ErrorCode::from_bytes(code.as_bytes()) {
        Some(s3s::S3ErrorCode::Custom(_)) | None => SharedString::const_str("other"),
        Some(_) => SharedString::from(code.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_outside_the_lists_count_as_other() {
        assert_eq!(&*label(Some("StaleFencingToken")), "StaleFencingToken");
        assert_eq!(&*label(Some("NoSuchKey")), "NoSuchKey");
        assert_eq!(
            &*label(Some("ServerSideEncryptionConfigurationNotFoundError")),
            "ServerSideEncryptionConfigurationNotFoundError"
        );
        assert_eq!(&*label(Some("MadeUpByAStore")), "other");
        assert_eq!(&*label(Some("")), "other");
        assert_eq!(&*label(None), "none");
    }
}
