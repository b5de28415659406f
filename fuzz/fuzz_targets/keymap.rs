//! The fs key mapping: never panics, never leaves the bucket directory (no absolute path, no
//! `..` or `.` component, no NUL), names stay within filesystem limits, and distinct keys map
//! to distinct paths (checked on pairs cut from the input).
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Component;

#[allow(dead_code)]
#[path = "../../src/backend/fs/keymap.rs"]
mod keymap;

fn check(key: &str) -> std::path::PathBuf {
    let path = keymap::object_path(key);
    assert!(path.is_relative(), "{key:?} -> {path:?}");
    for c in path.components() {
        match c {
            Component::Normal(name) => {
                let name = name.to_str().expect("names are ASCII");
                assert!(!name.is_empty() && name.len() <= 255, "{key:?} -> {path:?}");
                assert!(!name.contains('\0') && !name.contains('/'), "{key:?} -> {path:?}");
            }
            other => panic!("{key:?} -> {path:?} has component {other:?}"),
        }
    }
    assert!(path.as_os_str().len() <= 4096);
    path
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = check(text);
    // Injective: cut the input in two keys; different keys, different paths.
    if let Some(mid) = (1..text.len()).find(|i| text.is_char_boundary(*i)) {
        let (a, b) = text.split_at(mid);
        if a != b {
            assert_ne!(check(a), check(b), "{a:?} and {b:?} collide");
        }
    }
    // The last name decodes back to the key's last segment (short keys only).
    if !path.starts_with(keymap::LONG_DIR) {
        let last = path.file_name().unwrap().to_str().unwrap();
        let (segment, is_dir) = keymap::decode_name(last).expect("our own names decode");
        assert!(!is_dir);
        assert_eq!(segment, text.rsplit('/').next().unwrap());
    }
});
