//! Keys and scopes: which keys are acceptable, and which fence-table row a key's token is
//! compared against under a bucket's policy.

use super::GateError;
use crate::config::{BucketPolicy, ScopeKind};

/// The longest key S3 allows, in bytes of UTF-8.
pub const MAX_KEY_BYTES: usize = 1024;
const MAX_SCOPE_NAME: usize = 256;

/// The first segment of the keys fencegate keeps for itself in each store place: the probes'
/// scratch objects and the place's claim (`backend::s3::claim`).
pub const RESERVED: &str = ".fencegate-probe/";

/// Whether `key` lies in fencegate's own space ([`RESERVED`]), hidden from listings.
pub fn reserved(key: &str) -> bool {
    key.starts_with(RESERVED) || key == RESERVED.trim_end_matches('/')
}

/// Refuses keys no client should send: empty, over 1024 bytes, control characters (NUL
/// included), `.` or `..` segments, which mean directory traversal to every file tool, and
/// keys in fencegate's own space, where a client could overwrite or delete the place's claim.
pub fn validate_key(key: &str) -> Result<(), GateError> {
    if key.is_empty() {
        return Err(invalid_key("the key is empty".into(), "InvalidArgument"));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(invalid_key(
            format!(
                "the key is {} bytes long; the limit is {MAX_KEY_BYTES}",
                key.len()
            ),
            "KeyTooLongError",
        ));
    }
    if key.chars().any(char::is_control) {
        return Err(invalid_key(
            "the key contains a control character (such as NUL)".into(),
            "InvalidURI",
        ));
    }
    if key.split('/').any(|s| s == "." || s == "..") {
        // S3 takes these; fencegate does not (docs/s3.md, "Where fencegate answers as AWS does").
        return Err(invalid_key(
            "the key has a `.` or `..` segment".into(),
            "InvalidArgument",
        ));
    }
    if reserved(key) {
        return Err(invalid_key(
            format!("keys under {RESERVED} are fencegate's own (its store probes and the claim that ties the store place to one fence table); use another key"),
            "InvalidArgument",
        ));
    }
    Ok(())
}

fn invalid_key(message: String, s3_code: &'static str) -> GateError {
    GateError::InvalidKey { message, s3_code }
}

/// The fence-table row name of one object; also its scope under `scope = "object"`.
pub fn object_row(bucket: &str, key: &str) -> String {
    format!("object:{bucket}/{key}")
}

/// The scope row a write to `key` is fenced by.
pub fn resolve(
    policy: &BucketPolicy,
    bucket: &str,
    key: &str,
    scope_header: Option<&[u8]>,
) -> Result<String, GateError> {
    if policy.scope != ScopeKind::Header && scope_header.is_some() {
        return Err(GateError::InvalidFencingScope(format!(
            "bucket {bucket} fences by {:?} scope and does not accept a Fencing-Scope header; remove it, or set scope = \"header\" for the bucket",
            policy.scope
        )
        .to_lowercase()));
    }
    Ok(match policy.scope {
        ScopeKind::Object => object_row(bucket, key),
        ScopeKind::Bucket => format!("bucket:{bucket}"),
        ScopeKind::Prefix => {
            let n = policy.prefix_segments as usize;
            let prefix: Vec<&str> = key.split('/').take(n).collect();
            format!("prefix:{bucket}/{}", prefix.join("/"))
        }
        ScopeKind::Header => {
            let raw = scope_header.ok_or_else(|| {
                GateError::InvalidFencingScope(format!(
                    "bucket {bucket} needs a Fencing-Scope header naming the lock that issued the token"
                ))
            })?;
            let name = std::str::from_utf8(raw)
                .ok()
                .filter(|n| !n.is_empty() && n.len() <= MAX_SCOPE_NAME)
                .filter(|n| !n.chars().any(char::is_control))
                .filter(|n| spaced_once(n))
                .ok_or_else(|| {
                    GateError::InvalidFencingScope(format!(
                        "the scope name must be 1 to {MAX_SCOPE_NAME} bytes of UTF-8 without control characters, with single spaces only between words"
                    ))
                })?;
            format!("header:{bucket}#{name}")
        }
    })
}

/// Whitespace only as single spaces between other characters. A SigV4 signature covers a
/// header value with its whitespace runs collapsed and its ends trimmed, so `a b` and `a  b`
/// sign alike: were they two scopes, a captured request could be replayed under the other
/// one.
fn spaced_once(name: &str) -> bool {
    !name.starts_with(' ')
        && !name.ends_with(' ')
        && !name.contains("  ")
        && !name.chars().any(|c| c.is_whitespace() && c != ' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_names_sign_unambiguously() {
        let p = BucketPolicy {
            scope: ScopeKind::Header,
            ..BucketPolicy::default()
        };
        assert!(resolve(&p, "b", "k", Some(b"nightly report")).is_ok());
        for bad in [
            &b"a  b"[..],
            b" a",
            b"a ",
            "a\u{a0}b".as_bytes(),
            "a\u{3000}b".as_bytes(),
        ] {
            assert!(resolve(&p, "b", "k", Some(bad)).is_err(), "{bad:?}");
        }
    }

    fn policy(scope: ScopeKind, n: u32) -> BucketPolicy {
        BucketPolicy {
            scope,
            prefix_segments: n,
            ..BucketPolicy::default()
        }
    }

    #[test]
    fn scopes_by_kind() {
        let p = policy(ScopeKind::Object, 1);
        assert_eq!(resolve(&p, "b", "x/y", None).unwrap(), "object:b/x/y");
        let p = policy(ScopeKind::Prefix, 2);
        assert_eq!(
            resolve(&p, "b", "t/acme/f", None).unwrap(),
            "prefix:b/t/acme"
        );
        assert_eq!(
            resolve(&p, "b", "t/acme/g/h", None).unwrap(),
            "prefix:b/t/acme"
        );
        assert_eq!(resolve(&p, "b", "t", None).unwrap(), "prefix:b/t");
        let p = policy(ScopeKind::Bucket, 1);
        assert_eq!(resolve(&p, "b", "anything", None).unwrap(), "bucket:b");
        let p = policy(ScopeKind::Header, 1);
        assert_eq!(
            resolve(&p, "b", "k", Some(b"jobs/42")).unwrap(),
            "header:b#jobs/42"
        );
        assert!(resolve(&p, "b", "k", None).is_err());
        assert!(resolve(&p, "b", "k", Some(b"")).is_err());
        assert!(resolve(&p, "b", "k", Some(b"\xff")).is_err());
    }

    #[test]
    fn a_scope_header_where_none_is_allowed_is_refused() {
        let p = policy(ScopeKind::Object, 1);
        let e = resolve(&p, "b", "k", Some(b"mine")).unwrap_err();
        assert_eq!(e.code(), "InvalidFencingScope");
    }

    #[test]
    fn keys() {
        assert!(validate_key("a/b/c.txt").is_ok());
        assert!(validate_key("a//b/").is_ok());
        assert!(validate_key("...").is_ok());
        for bad in ["", "..", "a/../b", "./a", "a/.", "a\0b", "a\nb"] {
            assert!(validate_key(bad).is_err(), "{bad:?}");
        }
        assert!(validate_key(&"k".repeat(1024)).is_ok());
        assert!(validate_key(&"k".repeat(1025)).is_err());
        for own in [
            ".fencegate-probe/claim",
            ".fencegate-probe",
            ".fencegate-probe/r/x",
        ] {
            assert!(validate_key(own).is_err(), "{own:?}");
        }
        assert!(validate_key("a/.fencegate-probe/claim").is_ok());
        assert!(validate_key(".fencegate-probex").is_ok());
    }
}
