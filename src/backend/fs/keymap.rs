//! Object key -> relative file path, for the fs backend. The mapping is injective and can never
//! leave the bucket directory, whatever the key holds (`..`, `.`, empty segments, `\`, NUL,
//! very long segments):
//!
//! * each `/`-separated segment is percent-encoded, keeping only `A-Z a-z 0-9 - _` and a `.`
//!   that is not the first byte; an empty segment becomes `%`;
//! * inner segments become directories with the suffix `.d`, the last one a file with `.o`,
//!   so `a` (`a.o`) and `a/b` (`a.d/b.o`) coexist;
//! * a key whose encoding would make a name over 200 bytes or a path over 2048 bytes is stored
//!   flat as `_long/<sha256 of the key>.o`; the file's trailer holds the real key.

use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// Names of entries in a bucket directory that are not part of the key space.
pub const LONG_DIR: &str = "_long";
const MAX_NAME: usize = 200;
const MAX_PATH: usize = 2048;

fn encode_segment(seg: &str, out: &mut String) {
    if seg.is_empty() {
        out.push('%');
        return;
    }
    for (i, b) in seg.bytes().enumerate() {
        let keep = b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && i > 0);
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// The file for `key`, relative to the bucket directory.
pub fn object_path(key: &str) -> PathBuf {
    let mut path = String::with_capacity(key.len() + 16);
    let segments: Vec<&str> = key.split('/').collect();
    for (i, seg) in segments.iter().enumerate() {
        let start = path.len();
        encode_segment(seg, &mut path);
        if path.len() - start > MAX_NAME {
            return long_path(key);
        }
        path.push_str(if i + 1 == segments.len() { ".o" } else { ".d/" });
    }
    if path.len() > MAX_PATH {
        return long_path(key);
    }
    PathBuf::from(path)
}

fn long_path(key: &str) -> PathBuf {
    let digest = Sha256::digest(key.as_bytes());
    PathBuf::from(LONG_DIR).join(format!("{}.o", hex::encode(digest)))
}

/// The key segment a directory or file name stands for; `None` for names fencegate did not make.
pub fn decode_name(name: &str) -> Option<(String, bool)> {
    let (stem, is_dir) = if let Some(s) = name.strip_suffix(".d") {
        (s, true)
    } else if let Some(s) = name.strip_suffix(".o") {
        (s, false)
    } else {
        return None;
    };
    if stem == "%" {
        return Some((String::new(), is_dir));
    }
    let bytes = stem.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = stem.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some((String::from_utf8(out).ok()?, is_dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Component;

    fn assert_contained(key: &str) {
        let p = object_path(key);
        assert!(p.is_relative(), "{key:?} -> {p:?}");
        for c in p.components() {
            match c {
                Component::Normal(n) => {
                    let n = n.to_str().unwrap();
                    assert!(n.len() <= 255, "{key:?}: name too long");
                    assert!(!n.starts_with('.'), "{key:?} -> hidden name {n}");
                    assert!(!n.contains('\\') && !n.contains('\0'));
                }
                other => panic!("{key:?} -> {p:?} has {other:?}"),
            }
        }
        assert!(p.as_os_str().len() <= MAX_PATH + 80);
    }

    #[test]
    fn hostile_keys_stay_inside() {
        let long = "x".repeat(1024);
        let slashes = "/".repeat(1024);
        let many = "a/".repeat(512);
        for key in [
            "..",
            ".",
            "../../etc/passwd",
            "a/../../b",
            "/abs",
            "a//b",
            "",
            "\\..\\x",
            "a\0b",
            "./.",
            "...",
            ".hidden",
            "%2e%2e",
            "a/b/",
            long.as_str(),
            slashes.as_str(),
            many.as_str(),
            "日本/語",
            "🦀",
        ] {
            assert_contained(key);
        }
    }

    #[test]
    fn a_and_a_slash_b_coexist() {
        assert_eq!(object_path("a"), PathBuf::from("a.o"));
        assert_eq!(object_path("a/b"), PathBuf::from("a.d/b.o"));
        assert_eq!(object_path("a.d/b"), PathBuf::from("a.d.d/b.o"));
        assert_ne!(object_path("a.o"), object_path("a"));
    }

    #[test]
    fn mapping_is_injective_and_decodes_back() {
        let keys = [
            "a", "a/b", "a.o", "a.d", "a/", "/a", "a//b", "%", "%25", "", "-", ".x", "a.b.c",
            "sp ace", "é", "a%2Fb",
        ];
        let mut seen = std::collections::HashSet::new();
        for key in keys {
            let p = object_path(key);
            assert!(seen.insert(p.clone()), "collision on {key:?}");
            let decoded: Vec<String> = p
                .components()
                .map(|c| decode_name(c.as_os_str().to_str().unwrap()).unwrap().0)
                .collect();
            assert_eq!(decoded.join("/"), key);
        }
    }

    #[test]
    fn long_keys_go_flat_and_distinct() {
        let a = "y".repeat(300);
        let b = format!("{a}z");
        assert!(object_path(&a).starts_with(LONG_DIR));
        assert_ne!(object_path(&a), object_path(&b));
        assert!(decode_name(LONG_DIR).is_none());
    }
}
