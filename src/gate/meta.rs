//! The metadata a write stores: the client's, with the entries only fencegate writes
//! (`fencing-token`, `fencing-scope`, `fencegate-split`) reserved, within S3's 2 KB.

use super::checks::header_scope_name;
use super::GateError;
use crate::config::ScopeKind;

/// `fencing-token`, `fencing-scope`, `fencegate-split`, `fencegate-checksum` and
/// `fencegate-tags` in an object's metadata are written by fencegate only: a client's own values would pass for the token or lock that wrote the
/// object, or for fencegate's own parts (dropped on every backend alike).
pub(super) fn reserve_meta(meta: &mut crate::backend::ObjectMeta) {
    meta.user_meta.remove("fencing-token");
    meta.user_meta.remove("fencing-scope");
    meta.user_meta.remove("fencegate-split");
    meta.user_meta.remove(crate::backend::CHECKSUM_META);
    meta.user_meta.remove(crate::backend::TAGS_META);
}

/// S3 keeps at most 2 KB of user metadata, names and values.
const MAX_STORED_META: usize = 2048;

/// The metadata a write stores: the client's, the token, and in a header-scoped bucket the
/// lock's name. S3's 2 KB limit counts fencegate's entries too, so a write that would not fit
/// is refused here, before any intent, never by the store after it.
pub(super) fn own_meta(
    meta: &mut crate::backend::ObjectMeta,
    token: Option<u64>,
    entry: &super::BucketEntry,
    scope: &str,
) -> Result<(), GateError> {
    meta.token = token;
    reserve_meta(meta);
    if entry.policy.scope == ScopeKind::Header {
        // The object's metadata names its lock too, for whoever reads the store directly.
        meta.user_meta
            .insert("fencing-scope".into(), header_scope_name(scope).into());
    }
    let bytes = meta.user_meta_bytes();
    if bytes > MAX_STORED_META {
        return Err(GateError::InvalidArgument(format!(
            "the object's user metadata and tags would be {bytes} bytes as a store counts them, with the room fencegate keeps for its own fencing-token{} and fencegate-split entries (and non-ASCII values encoded); S3 keeps at most {MAX_STORED_META}: send less",
            if entry.policy.scope == ScopeKind::Header { ", fencing-scope" } else { "" }
        )));
    }
    Ok(())
}
