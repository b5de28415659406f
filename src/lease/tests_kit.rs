//! What the lease tests share: an acquire request of the principal `test`, and the proof a
//! renewal or a release shows.

use super::{AcquireRequest, Grant, Proof};
use std::time::Duration;

pub(super) fn acquire(name: &str, holder: &str, ttl_ms: u64) -> AcquireRequest {
    AcquireRequest {
        name: name.into(),
        holder: holder.into(),
        ttl: Duration::from_millis(ttl_ms),
        wait: Duration::ZERO,
        bind: None,
        s3_credentials: false,
        owner: "test".into(),
    }
}

/// What renew and release show: `holder`, and the token and secret of grant `g`.
pub(super) fn proof<'a>(holder: &'a str, g: &'a Grant) -> Proof<'a> {
    Proof {
        holder,
        token: g.token,
        secret: g
            .lease_secret
            .as_deref()
            .expect("an acquire shows the secret"),
    }
}
