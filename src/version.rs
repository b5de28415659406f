//! Object versions: the identity of what a backend holds under a key, as the fence table
//! records it and the backends report it. Below both, so that neither names the other.

/// Is `found` (the backend's current version) the version fencegate `recorded`?
///
/// Equal strings match. So does an fs version recorded without its ctime (`base`) against one
/// found with it (`base~ctime`): the ctime is only known after the rename that publishes the
/// file (a rename changes it), so a pending intent records the staged file's version without
/// it, and rows written before versions carried the ctime have none. Every version recorded
/// after a commit carries it, which is what catches an in-place rewrite that restores the mtime.
/// The pending version of a write whose store assigns the version only when it applies it
/// (azure's ETag, gcs's generation): no store version equals it, so such a write whose answer
/// was lost is never taken as landed by a version the store shows, an absent object least of
/// all (a pending `None` means a delete).
pub const UNKNOWN_UNTIL_APPLIED: &str = "fencegate:unknown-until-applied";

pub fn same_version(recorded: Option<&str>, found: Option<&str>) -> bool {
    match (recorded, found) {
        (Some(r), Some(f)) if r != f => {
            !r.contains('~')
                && f.split_once('~')
                    .is_some_and(|(base, ctime)| base == r && is_fs_ctime(ctime))
        }
        (r, f) => r == f,
    }
}

fn is_fs_ctime(s: &str) -> bool {
    s.split_once('.').is_some_and(|(secs, nsec)| {
        [secs, nsec]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_hexdigit()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_version_only_widens_for_a_missing_fs_ctime() {
        assert!(same_version(None, None));
        assert!(same_version(Some("\"e\""), Some("\"e\"")));
        assert!(!same_version(Some("\"e\""), None));
        assert!(!same_version(None, Some("a-1-2.3~4.5")));
        assert!(same_version(Some("a-1-2.3"), Some("a-1-2.3~4.5")));
        assert!(!same_version(Some("a-1-2.3~4.6"), Some("a-1-2.3~4.5")));
        assert!(!same_version(Some("a-1-2.3~4.5"), Some("a-1-2.3")));
        assert!(!same_version(Some("a-1-2.4"), Some("a-1-2.3~4.5")));
        // Only a ctime-shaped suffix counts: a store's opaque version is compared whole.
        assert!(!same_version(Some("v1"), Some("v1~x")));
        assert!(!same_version(Some("v1"), Some("v1~")));
        assert!(!same_version(Some("v1"), Some("v1~1.")));
    }
}
