//! The config loader: any text either loads or is refused with a located message and a fix;
//! it never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[allow(dead_code, unused_imports)]
#[path = "../../src/config/mod.rs"]
mod config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match config::parse(text, "fuzz.toml") {
        Ok(c) => assert!(!c.buckets.is_empty() && !c.backends.is_empty()),
        Err(e) => {
            let shown = e.to_string();
            assert!(shown.starts_with("fuzz.toml"), "{shown}");
            assert!(shown.contains("fix:"), "{shown}");
        }
    }
});
