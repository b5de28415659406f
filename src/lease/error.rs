//! Every way a lease request can fail, with its status and code.

use crate::gate::GateError;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lease is held by {holder:?}; retry after it expires or is released, or acquire with wait_ms")]
    Held {
        holder: String,
        retry_after: Duration,
    },
    #[error("lease names are 1-200 characters of letters, digits, `.`, `_`, `-`, `:` and `/` (no `..`); got {0:?}")]
    InvalidName(String),
    #[error("ttl_ms must be between 1 and 86400000 (24 h); got {0}")]
    InvalidTtl(u64),
    #[error("wait_ms may be at most 60000; got {0}")]
    InvalidWait(u64),
    #[error("holder must be 1-200 characters without control characters")]
    InvalidHolder,
    #[error("lease {name} is held by someone else, or with another token; acquire it again")]
    NotHolder { name: String },
    #[error("lease {name} is not held (it expired, was released, or fencegate restarted); acquire it again")]
    NotHeld { name: String },
    #[error("{0}")]
    Invalid(String),
    #[error("{owner} holds {limit} live leases, the most [leases] max_live_per_key allows: release some, or wait until they expire")]
    TooManyLeases { owner: String, limit: usize },
    #[error(transparent)]
    Gate(#[from] GateError),
}

impl LeaseError {
    pub fn status(&self) -> u16 {
        match self {
            LeaseError::Held { .. } | LeaseError::NotHolder { .. } => 409,
            LeaseError::NotHeld { .. } => 404,
            LeaseError::TooManyLeases { .. } => 429,
            LeaseError::Gate(e) => e.status(),
            _ => 400,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            LeaseError::Held { .. } => "LeaseHeld",
            LeaseError::InvalidName(_) => "InvalidLeaseName",
            LeaseError::InvalidTtl(_) => "InvalidTtl",
            LeaseError::InvalidWait(_) | LeaseError::InvalidHolder | LeaseError::Invalid(_) => {
                "InvalidArgument"
            }
            LeaseError::NotHolder { .. } => "NotLeaseHolder",
            LeaseError::NotHeld { .. } => "NoSuchLease",
            LeaseError::TooManyLeases { .. } => "TooManyLeases",
            LeaseError::Gate(e) => e.code(),
        }
    }

    /// Seconds until a held lease frees up, rounded up, for `Retry-After`.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            LeaseError::Held { retry_after, .. } => {
                Some(retry_after.as_millis().div_ceil(1000).max(1) as u64)
            }
            LeaseError::TooManyLeases { .. } => Some(1),
            _ => None,
        }
    }
}
