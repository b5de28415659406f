//! The start-up check of this instance's clock against a store's: deadlines sent with commits
//! expire by the store's clock, and fencegate stops waiting for them by its own
//! (docs/design.md, "Bounded intents").

use std::time::Duration;

/// Which deadline the check guards, for its messages.
#[derive(Clone, Copy)]
pub enum Guarding {
    /// Cluster mode: `max_clock_skew_ms` and `intent_ttl_secs`.
    Cluster,
    /// One instance whose commits carry their own expiry (azure): a fixed margin and
    /// `commit_deadline_secs`.
    OneInstance,
}

/// Refuses a clock that runs ahead of the store's by more than `skew` (a commit could still be
/// applied after fencegate stopped waiting for it), or behind it by `ttl` or more (the store
/// would refuse every commit as expired). `ahead` is (at least, at most) in ms.
pub fn check_offset(
    ahead: (i64, i64),
    ttl: Duration,
    skew: Duration,
    guarding: Guarding,
) -> Result<(), String> {
    let (ahead_min, ahead_max) = ahead;
    let (skew_name, ttl_name, late) = match guarding {
        Guarding::Cluster => (
            "max_clock_skew_ms",
            "intent_ttl_secs",
            "other instances could decide before the store stops applying a commit",
        ),
        Guarding::OneInstance => (
            "the margin fencegate allows (ms)",
            "commit_deadline_secs",
            "a commit whose answer was lost could land after fencegate gave its object to a newer token",
        ),
    };
    if ahead_min > skew.as_millis() as i64 {
        return Err(format!(
            "this instance's clock runs at least {ahead_min} ms ahead of the store's, more than {skew_name} = {}; {late}. Synchronise the clocks (NTP)",
            skew.as_millis()
        ));
    }
    if -ahead_max >= ttl.as_millis() as i64 {
        return Err(format!(
            "this instance's clock runs at least {} ms behind the store's, as long as {ttl_name} = {}: the store would refuse every commit as expired. Synchronise the clocks (NTP)",
            -ahead_max,
            ttl.as_secs()
        ));
    }
    tracing::info!(
        ahead_min_ms = ahead_min,
        ahead_max_ms = ahead_max,
        "clock compared with the store's"
    );
    Ok(())
}
