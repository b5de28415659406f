//! The native API's request handling, fuzzed end to end against the real binary: seeded random
//! methods, paths (hostile key bytes, percent-escapes, traversal), token and condition headers,
//! and bodies, sent byte for byte. Every answer is a 2xx, 3xx or 4xx (never a 5xx, never a
//! dropped connection), the process stays up, and nothing appears outside the data directory.
//! A failure prints the seed and the request; rerun with FENCEGATE_FUZZ_SEED=<seed>.

use crate::common;
use common::{raw_request, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const METHODS: &[&str] = &["GET", "HEAD", "PUT", "POST", "DELETE", "PATCH", "OPTIONS"];
const PREFIXES: &[&str] = &[
    "/v1/objects/default/",
    "/v1/objects/default",
    "/v1/objects/nope/",
    "/v1/fences/default/",
    "/v1/leases/",
    "/v1/",
    "/v1/objects/",
];
const FRAGMENTS: &[&str] = &[
    "a",
    "b/c",
    "..",
    ".",
    "%2e%2e",
    "%2F",
    "%00",
    "%ff%fe",
    "%",
    "%zz",
    "//",
    "~",
    "key.o",
    "_long",
    "%E2%82%AC",
    "x?prefix=a",
    "y?max_keys=-1",
    "z?start_after=%ff",
    "&",
    "#frag",
];
const TOKENS: &[&str] = &[
    "1",
    "7",
    "007",
    "18446744073709551615",
    "18446744073709551616",
    "-1",
    "0x10",
    "5,6",
    "",
    "9999999999999999999999",
    "1e3",
    "\u{0}",
];

fn request(rng: &mut StdRng) -> (String, Vec<u8>) {
    let method = METHODS[rng.random_range(0..METHODS.len())];
    let mut path = PREFIXES[rng.random_range(0..PREFIXES.len())].to_string();
    for _ in 0..rng.random_range(0..4) {
        path.push_str(FRAGMENTS[rng.random_range(0..FRAGMENTS.len())]);
        if rng.random_bool(0.3) {
            path.push('/');
        }
    }
    if rng.random_bool(0.1) {
        path.push_str(&"k".repeat(rng.random_range(1000..1200)));
    }
    let mut head = format!("{method} {path} HTTP/1.1");
    for _ in 0..rng.random_range(0..3) {
        let t = TOKENS[rng.random_range(0..TOKENS.len())];
        if !t.contains('\u{0}') {
            head.push_str(&format!("\r\nFencing-Token: {t}"));
        }
    }
    if rng.random_bool(0.2) {
        head.push_str("\r\nIf-Match: \"abc\"");
    }
    if rng.random_bool(0.2) {
        head.push_str("\r\nIf-None-Match: *");
    }
    if rng.random_bool(0.1) {
        head.push_str("\r\nFencing-Scope: lock-1");
    }
    if rng.random_bool(0.1) {
        head.push_str("\r\nx-amz-meta-owner: fuzz");
    }
    let body: Vec<u8> = if path.starts_with("/v1/leases") && rng.random_bool(0.7) {
        let bodies = [
            r#"{"holder":"h","ttl_ms":1000}"#,
            r#"{"holder":"h","ttl_ms":0}"#,
            r#"{"holder":"h","token":1}"#,
            r#"{"holder":"","ttl_ms":-1}"#,
            r#"{"holder":"h","ttl_ms":1000,"bucket":"default","key":"k"}"#,
            "{",
            "null",
        ];
        bodies[rng.random_range(0..bodies.len())]
            .as_bytes()
            .to_vec()
    } else {
        (0..rng.random_range(0..64)).map(|_| rng.random()).collect()
    };
    (head, body)
}

#[test]
fn random_native_requests_never_get_a_5xx() {
    let seed: u64 = std::env::var("FENCEGATE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261130);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, None);
    let mut by_status = std::collections::BTreeMap::new();
    // Four seeds in a row on one server, so later requests meet the state earlier ones left.
    for (seed, i) in (seed..seed + 4).flat_map(|s| (0..1500).map(move |i| (s, i))) {
        let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(1_000_003) + i);
        let (head, body) = request(&mut rng);
        let (status, answer) = raw_request(server.addr, &head, &body);
        assert!(
            (200..500).contains(&status),
            "seed {seed}, request {i}: {head:?} with {} body bytes got {status}: {answer}",
            body.len()
        );
        *by_status.entry(status).or_insert(0) += 1;
    }
    eprintln!(
        "seeds {seed}..{}: answers by status {by_status:?}",
        seed + 4
    );
    // Still up, and everything it wrote is below its data directory.
    let (status, _) = raw_request(server.addr, "GET /healthz HTTP/1.1", b"");
    assert_eq!(status, 200);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let name = entry.unwrap().file_name();
        assert!(
            name == "data" || name == "data.toml",
            "something was written beside the data directory: {name:?}"
        );
    }
    assert!(
        by_status.keys().any(|s| *s < 300),
        "some requests succeeded"
    );
    assert!(by_status.keys().any(|s| *s >= 400), "some were refused");
}
