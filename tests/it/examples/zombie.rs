//! The Rust client's `zombie` example (clients/rust/examples) runs in CI: through fencegate the zombie's late write is refused and B's
//! data is intact; straight to the store, the same timeline corrupts it.

use std::process::Command;

#[test]
fn the_zombie_demo_shows_both_outcomes() {
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
    let out = Command::new(&demo)
        .env("RUST_LOG", "warn")
        .env("FENCEGATE_BIN", env!("CARGO_BIN_EXE_fencegate"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the demo failed");
    assert!(stdout.contains("REFUSED: 409"));
    assert!(stdout.contains("B's report INTACT"));
    assert!(stdout.contains("B's report CORRUPTED"));
}
