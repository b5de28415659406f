//! Cluster mode's start-up check of this instance's clock against a store's: its deadlines are
//! judged by both clocks (docs/design.md, "Bounded intents").

use std::time::Duration;

/// Refuses a clock that runs ahead of the store's by more than `skew` (other instances could
/// decide before the store stops applying a commit), or behind it by `ttl` or more (the store
/// would refuse every commit as expired). `ahead` is (at least, at most) in ms.
pub fn check_offset(ahead: (i64, i64), ttl: Duration, skew: Duration) -> Result<(), String> {
    let (ahead_min, ahead_max) = ahead;
    if ahead_min > skew.as_millis() as i64 {
        return Err(format!(
            "this instance's clock runs at least {ahead_min} ms ahead of the store's, more than max_clock_skew_ms = {}; other instances could decide before the store stops applying a commit. Synchronise the clocks (NTP)",
            skew.as_millis()
        ));
    }
    if -ahead_max >= ttl.as_millis() as i64 {
        return Err(format!(
            "this instance's clock runs at least {} ms behind the store's, as long as intent_ttl_secs = {}: the store would refuse every commit as expired. Synchronise the clocks (NTP)",
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
