//! The token grammar: never panics; accepts exactly 1-20 ASCII digits whose value fits in a
//! u64, and then the value is the decimal number.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src/token.rs"]
mod token;

fuzz_target!(|data: &[u8]| {
    let parsed = token::parse_token(data);
    let digits = !data.is_empty() && data.len() <= 20 && data.iter().all(u8::is_ascii_digit);
    let value = std::str::from_utf8(data).ok().and_then(|s| s.parse::<u64>().ok());
    match parsed {
        Ok(t) => {
            assert!(digits, "accepted a non-token {data:?}");
            assert_eq!(Some(t.0), value, "wrong value for {data:?}");
        }
        Err(_) => assert!(!digits || value.is_none(), "refused a valid token {data:?}"),
    }
});
