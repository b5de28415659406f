//! Every way the gate can refuse or fail a request, with the status and the error code of
//! the README's error table. Surfaces turn these into JSON (native) or XML (S3) without
//! deciding anything.

use crate::backend::{BackendError, BodyError};
use crate::fence::StoreError;
use crate::token::TokenError;

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("token {token} is below the highest token {highest} recorded for scope {scope}{}; a newer lock holder exists, so this writer must stop", floor_note(*floor))]
    StaleFencingToken {
        token: u64,
        highest: u64,
        scope: String,
        /// The scope has no row of its own: `highest` is its bucket's floor (`tombstones.rs`).
        floor: bool,
    },
    #[error("token {token} equals the highest token recorded for scope {scope}{}, and this bucket demands strictly increasing tokens: a token is spent once it is recorded, even by a write that then failed at the backend. Take a new token from your lock service and retry with it", floor_note(*floor))]
    TokenNotIncreasing {
        token: u64,
        scope: String,
        /// The scope has no row of its own: its highest is its bucket's floor (`tombstones.rs`).
        floor: bool,
    },
    #[error("object {key:?} belongs to fencing scope {bound:?}, not {scope:?}: tokens of different locks cannot be compared. Write under Fencing-Scope {bound:?}, or take the object over with Fencing-Scope-Takeover: {bound} and a token above that scope's highest")]
    FencingScopeMismatch {
        key: String,
        bound: String,
        scope: String,
    },
    #[error("scope {scope} is at the largest token (18446744073709551615) and cannot grow; no newer token can fence it. Use another scope (another key or lock name); a token this large was almost certainly sent by mistake")]
    TokenSpaceExhausted { scope: String },
    #[error("an earlier write or delete of {key:?} did not get the store's answer and may still be applied by the store; fencegate refuses this object until the store shows that outcome or the request can no longer land (about {retry_after} s; `commit_deadline_secs`). Retry later")]
    CommitUnresolved { key: String, retry_after: u64 },
    #[error("a commit or delete of {key:?} through this or another instance is in progress, and its store request may still land for about {retry_after} s; fencegate does not decide over it until its outcome shows or it can no longer land. Retry later")]
    CommitInProgress { key: String, retry_after: u64 },
    #[error("internal error: {0}")]
    Internal(String),
    #[error("cluster mode: {0}")]
    ClockSkewed(String),
    #[error("invalid Idempotency-Key: {0}")]
    InvalidIdempotencyKey(String),
    #[error("{0}")]
    IdempotencyKeyInUse(String),
    #[error("{0}")]
    IdempotencyKeyMismatch(String),
    #[error("token {token} is more than {limit} above the highest token {highest} of scope {scope} (the bucket's max_token_jump); a token this far ahead would fence the scope for every real holder. Send the token your lock service issued; an operator can raise max_token_jump if the lock service really skips this far")]
    TokenJumpTooLarge {
        token: u64,
        highest: u64,
        limit: u64,
        scope: String,
    },
    #[error("{0}")]
    TooManyUploads(String),
    #[error("bucket {0} is being deleted; retry, and expect NoSuchBucket if the delete succeeds")]
    BucketClosing(String),
    #[error("bucket {0} has writes in flight; retry DeleteBucket once they have ended")]
    BucketBusy(String),
    #[error("bucket {bucket} requires a Fencing-Token header on writes and deletes (on an S3 PUT, x-amz-meta-fencing-token does too); a client that cannot send one signs with a lease's S3 credentials, which carry its token, or deletes in a bucket with fenced_deletes = false")]
    FencingTokenRequired { bucket: String },
    #[error("invalid Fencing-Token: {0}")]
    InvalidFencingToken(#[from] TokenError),
    #[error("invalid Fencing-Scope: {0}")]
    InvalidFencingScope(String),
    #[error("precondition failed: {0}")]
    PreconditionFailed(String),
    /// `never_recorded`: fencegate holds no record of the key at all (no version, token or
    /// deletion), as for an object that was in the store before fencegate fronted it.
    #[error("{}", bypass_message(bucket, expected, found, *never_recorded))]
    BypassDetected {
        bucket: String,
        expected: String,
        found: String,
        never_recorded: bool,
    },
    #[error("no bucket named {0:?} is configured")]
    NoSuchBucket(String),
    #[error("no object {key:?} in bucket {bucket}")]
    NoSuchKey { bucket: String, key: String },
    /// `s3_code`: what S3 answers for the same key (InvalidURI for a control character,
    /// KeyTooLongError), for the S3 gateway; the native API answers InvalidKey.
    #[error("invalid key: {message}")]
    InvalidKey {
        message: String,
        s3_code: &'static str,
    },
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    Body(#[from] BodyError),
    #[error("{0}")]
    Backend(BackendError),
    #[error("{0}")]
    Store(#[from] StoreError),
}

impl From<BackendError> for GateError {
    fn from(e: BackendError) -> Self {
        match e {
            BackendError::Body(b) => GateError::Body(b),
            other => GateError::Backend(other),
        }
    }
}

/// What a BypassDetected says, and what to do: an object fencegate has no record of at all is
/// most often one that was in the store before fencegate fronted the bucket.
fn bypass_message(bucket: &str, expected: &str, found: &str, never_recorded: bool) -> String {
    if never_recorded {
        format!("the object is in the store (version {found}) but fencegate holds no record of the key: it was written around fencegate, or it was there before fencegate fronted bucket {bucket}; fencegate refuses to change it. For a bucket moved behind fencegate, stop fencegate and run `fencegate fences rebuild --bucket {bucket}` once, which records every object already there (docs/operations.md, \"Moving an existing bucket behind fencegate\"); otherwise inspect the object, then set on_bypass = \"adopt\" for the bucket, or remove it")
    } else {
        format!("the object was changed on the backend behind fencegate's back (expected version {expected}, found {found}); fencegate refuses to change it. Inspect the object, then write with a new token after setting on_bypass = \"adopt\" for the bucket, or restore it")
    }
}

impl GateError {
    /// The HTTP status both surfaces answer with.
    pub fn status(&self) -> u16 {
        match self {
            GateError::StaleFencingToken { .. } | GateError::TokenNotIncreasing { .. } => 409,
            GateError::FencingScopeMismatch { .. } | GateError::TokenSpaceExhausted { .. } => 409,
            GateError::Internal(_) => 500,
            GateError::ClockSkewed(_) => 503,
            GateError::InvalidIdempotencyKey(_) => 400,
            GateError::IdempotencyKeyInUse(_) => 409,
            GateError::IdempotencyKeyMismatch(_) => 422,
            GateError::CommitUnresolved { .. } | GateError::CommitInProgress { .. } => 503,
            GateError::FencingTokenRequired { .. } => 428,
            GateError::InvalidFencingToken(_)
            | GateError::TokenJumpTooLarge { .. }
            | GateError::InvalidFencingScope(_)
            | GateError::InvalidKey { .. }
            | GateError::TooManyUploads(_)
            | GateError::InvalidArgument(_) => 400,
            GateError::PreconditionFailed(_) => 412,
            GateError::BypassDetected { .. } => 409,
            GateError::BucketClosing(_) | GateError::BucketBusy(_) => 409,
            GateError::NoSuchBucket(_) | GateError::NoSuchKey { .. } => 404,
            GateError::Body(BodyError::TooLarge { .. }) => 413,
            GateError::Body(BodyError::Idle { .. }) => 408,
            GateError::Body(BodyError::Broken(_) | BodyError::BadDigest(_)) => 400,
            GateError::Body(BodyError::Unauthenticated { status, .. }) => *status,
            GateError::Backend(BackendError::Timeout(_)) => 504,
            GateError::Backend(
                BackendError::Unreachable(_)
                | BackendError::Corrupt(_)
                | BackendError::KeptDifferentBytes(_),
            ) => 502,
            GateError::Backend(BackendError::Throttled(_)) => 503,
            // A conflict that reaches the client (not caught as a bypass) means the backend
            // changed between our check and the commit: also a write behind our back.
            GateError::Backend(BackendError::Conflict { .. }) => 409,
            GateError::Backend(BackendError::Invalid { .. }) => 400,
            GateError::Backend(BackendError::NoSuchUpload(_)) => 404,
            GateError::Backend(BackendError::NoSuchPart { .. }) => 416,
            GateError::Backend(BackendError::Refused { status, .. }) => match status {
                // What the request carried: its key, metadata, headers or body.
                0 | 400 | 411 | 413 | 414 | 431 => 400,
                // A conflicting request in progress on the store, or the store's own throttling:
                // nothing written, retry.
                409 | 429 => 503,
                // The store refuses fencegate itself: its credentials or settings.
                _ => 502,
            },
            GateError::Backend(BackendError::Unsupported(_)) => 501,
            GateError::Backend(_) | GateError::Store(_) => 503,
        }
    }

    /// The stable error code of the README's error table.
    pub fn code(&self) -> &'static str {
        match self {
            GateError::StaleFencingToken { .. } | GateError::TokenNotIncreasing { .. } => {
                "StaleFencingToken"
            }
            GateError::FencingScopeMismatch { .. } => "FencingScopeMismatch",
            GateError::TokenSpaceExhausted { .. } => "TokenSpaceExhausted",
            GateError::TokenJumpTooLarge { .. } => "TokenJumpTooLarge",
            GateError::Internal(_) => "InternalError",
            GateError::ClockSkewed(_) => "ClockSkewed",
            GateError::InvalidIdempotencyKey(_) => "InvalidIdempotencyKey",
            GateError::IdempotencyKeyInUse(_) => "IdempotencyKeyInUse",
            GateError::IdempotencyKeyMismatch(_) => "IdempotencyKeyMismatch",
            GateError::CommitUnresolved { .. } => "CommitUnresolved",
            GateError::CommitInProgress { .. } => "CommitInProgress",
            GateError::FencingTokenRequired { .. } => "FencingTokenRequired",
            GateError::InvalidFencingToken(_) => "InvalidFencingToken",
            GateError::InvalidFencingScope(_) => "InvalidFencingScope",
            GateError::PreconditionFailed(_) => "PreconditionFailed",
            GateError::BypassDetected { .. }
            | GateError::Backend(BackendError::Conflict { .. }) => "BypassDetected",
            GateError::BucketClosing(_) | GateError::BucketBusy(_) => "OperationAborted",
            GateError::NoSuchBucket(_) => "NoSuchBucket",
            GateError::NoSuchKey { .. } => "NoSuchKey",
            GateError::InvalidKey { .. } => "InvalidKey",
            GateError::InvalidArgument(_) => "InvalidArgument",
            GateError::TooManyUploads(_) => "TooManyUploads",
            GateError::Body(BodyError::TooLarge { .. }) => "EntityTooLarge",
            GateError::Body(BodyError::Idle { .. }) => "RequestTimeout",
            GateError::Body(BodyError::Broken(_)) => "IncompleteBody",
            GateError::Body(BodyError::BadDigest(_)) => "BadDigest",
            GateError::Body(BodyError::Unauthenticated { code, .. }) => code,
            GateError::Backend(BackendError::Invalid { code, .. }) => code,
            GateError::Backend(BackendError::NoSuchUpload(_)) => "NoSuchUpload",
            GateError::Backend(BackendError::NoSuchPart { .. }) => "InvalidPartNumber",
            GateError::Backend(BackendError::Refused { .. }) if self.status() == 400 => {
                "StoreRefusedRequest"
            }
            GateError::Backend(BackendError::Unsupported(_)) => "NotImplemented",
            GateError::Backend(BackendError::KeptDifferentBytes(_)) => "StoreKeptDifferentBytes",
            GateError::Backend(_) => "BackendUnavailable",
            GateError::Store(_) => "FenceStoreUnavailable",
        }
    }

    /// The recorded highest token, for `Fencing-Token-Highest`.
    pub fn highest(&self) -> Option<u64> {
        match self {
            GateError::StaleFencingToken { highest, .. } => Some(*highest),
            GateError::TokenNotIncreasing { token, .. } => Some(*token),
            _ => None,
        }
    }

    /// Seconds a client should wait before retrying, for `Retry-After`.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            GateError::Backend(
                BackendError::Throttled(_) | BackendError::Refused { status: 429, .. },
            ) => Some(1),
            // A store that does not answer: give it a few seconds.
            GateError::Backend(
                BackendError::Timeout(_) | BackendError::Unreachable(_) | BackendError::Failing(_),
            ) => Some(5),
            GateError::CommitUnresolved { retry_after, .. }
            | GateError::CommitInProgress { retry_after, .. } => Some((*retry_after).max(1)),
            GateError::Backend(BackendError::Expired(_)) => Some(1),
            // Unreachable or contended (other instances kept changing the scope): soon.
            GateError::Store(StoreError::Io(_) | StoreError::Conflict(_)) => Some(1),
            GateError::IdempotencyKeyInUse(_) => Some(1),
            GateError::ClockSkewed(_) => Some(10),
            _ => None,
        }
    }

    /// Refused for now, with nothing of the request changed in the store: a commit in
    /// progress, the fence table unavailable, a request that expired on its way. The same
    /// request may succeed when sent again, so a multipart upload is kept for it.
    pub fn for_now(&self) -> bool {
        matches!(
            self,
            GateError::CommitInProgress { .. }
                | GateError::CommitUnresolved { .. }
                | GateError::IdempotencyKeyInUse(_)
                | GateError::ClockSkewed(_)
                | GateError::Store(_)
                | GateError::Backend(BackendError::Expired(_))
                | GateError::Backend(BackendError::Refused { status: 409, .. })
        )
    }

    /// A short word for logs and metrics.
    pub fn outcome(&self) -> &'static str {
        match self {
            GateError::StaleFencingToken { .. }
            | GateError::TokenNotIncreasing { .. }
            | GateError::FencingScopeMismatch { .. }
            | GateError::TokenSpaceExhausted { .. } => "stale",
            GateError::Internal(_)
            | GateError::CommitUnresolved { .. }
            | GateError::ClockSkewed(_) => "failed",
            GateError::CommitInProgress { .. } | GateError::IdempotencyKeyInUse(_) => "busy",
            GateError::BypassDetected { .. }
            | GateError::Backend(BackendError::Conflict { .. }) => "bypass",
            GateError::PreconditionFailed(_) => "precondition",
            GateError::Backend(
                BackendError::Invalid { .. }
                | BackendError::NoSuchUpload(_)
                | BackendError::NoSuchPart { .. }
                | BackendError::Unsupported(_),
            ) => "rejected",
            GateError::Backend(_) | GateError::Store(_) => "failed",
            _ => "rejected",
        }
    }
}

/// What a stale token's message adds when it was judged by its bucket's floor.
fn floor_note(floor: bool) -> &'static str {
    if floor {
        " (the key has no row of its own: that is its bucket's floor, the highest token of the tombstones folded past max_tombstones_per_bucket, which a key without a row needs at least, or above under strictly increasing tokens; docs/design.md, \"Tombstones and the floor\")"
    } else {
        ""
    }
}
