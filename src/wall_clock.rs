//! Wall-clock time, for what fencegate shows (Last-Modified, upload and lease expiry dates).
//! No accept/reject decision reads it (docs/threat-model.md): lease expiry uses the monotonic
//! clock, and fencing uses tokens only.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 for a clock set before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
