//! The Rust client's `zombie` example (clients/rust/examples) runs in CI: through fencegate the zombie's late write is refused and B's
//! data is intact; straight to the store, the same timeline corrupts it. It runs on the fs
//! backend (the default configuration), on the azure backend over Azurite and on the gcs
//! backend over the GCS double (the server it starts reads `FENCEGATE_CONFIG`, as every
//! `fencegate serve` does).

use crate::common;
use std::process::{Command, Output};

/// Runs the demo, its server configured by `config` (a file) or by default, and checks both
/// outcomes in what it printed.
fn run_demo(config: Option<&std::path::Path>) -> Output {
    // Examples are built next to the test binaries' directory: target/<profile>/examples.
    let exe = std::env::current_exe().unwrap();
    let demo = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("examples/zombie"))
        .unwrap();
    assert!(
        demo.exists(),
        "{} is missing: `cargo test --workspace` builds the client's examples; run scripts/test",
        demo.display()
    );
    let mut cmd = Command::new(&demo);
    cmd.env("RUST_LOG", "warn")
        .env("FENCEGATE_BIN", env!("CARGO_BIN_EXE_fencegate"))
        .env_remove("FENCEGATE_CONFIG");
    if let Some(config) = config {
        cmd.env("FENCEGATE_CONFIG", config);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the demo failed");
    assert!(stdout.contains("REFUSED: 409"));
    assert!(stdout.contains("B's report INTACT"));
    assert!(stdout.contains("B's report CORRUPTED"));
    out
}

#[test]
fn the_zombie_demo_shows_both_outcomes() {
    run_demo(None);
}

/// Runs the demo with fencegate's `default` bucket in the store bucket (or container)
/// `zombie` of the backend `table` describes (a `[backends.store]` table).
fn run_demo_on(table: String) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("store.toml");
    let buckets = "[buckets.default]\nbackend = \"store\"\nbackend_bucket = \"zombie\"\n";
    std::fs::write(&config, format!("{table}\n{buckets}")).unwrap();
    run_demo(Some(&config));
}

/// The same timeline with fencegate's bucket on Azurite: A's late write is refused by the
/// gate, and the blob in the container holds B's report, read around fencegate.
#[test]
fn the_zombie_demo_shows_both_outcomes_on_azure() {
    let az = common::azurite::Azurite::start();
    az.create_container("zombie");
    run_demo_on(az.backend_table("store"));
    assert_eq!(
        az.get_behind("zombie", "report.csv").as_deref(),
        Some(&b"B: complete report"[..]),
        "the object in the container is B's"
    );
}

/// The same on the GCS double: the object in the bucket, read from the double directly, is
/// B's report.
#[test]
fn the_zombie_demo_shows_both_outcomes_on_gcs() {
    let fake = common::gcs_fake::GcsFake::start_blocking();
    fake.create_bucket("zombie");
    let dir = tempfile::tempdir().unwrap();
    run_demo_on(fake.backend_table("store", dir.path()));
    let (body, _, _) = fake
        .get_direct("zombie", "report.csv")
        .expect("the report is in the bucket");
    assert_eq!(
        &body[..],
        b"B: complete report",
        "the object in the bucket is B's"
    );
}
