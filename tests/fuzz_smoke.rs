//! A short run of every cargo-fuzz target (fuzz/README.md) from its committed seeds: 10 s each.
//! `scripts/test` installs cargo-fuzz.

use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn fuzz_targets_survive_a_short_run() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let installed = Command::new(&cargo)
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        installed,
        "cargo-fuzz is not installed: run scripts/test, which installs it (cargo install cargo-fuzz --locked)"
    );
    // Its own target directory: fuzz builds use other compiler flags than the main build.
    let target_dir = std::env::var("CARGO_TARGET_DIR")
        .map(|d| format!("{d}-fuzz"))
        .unwrap_or_else(|_| format!("{ROOT}/fuzz/target"));
    for target in ["token", "keymap", "config"] {
        let corpus = tempfile::tempdir().unwrap();
        let out = Command::new(&cargo)
            .current_dir(format!("{ROOT}/fuzz"))
            .env("CARGO_TARGET_DIR", &target_dir)
            .args(["fuzz", "run", target, "-O", "-a", "--sanitizer", "none"])
            .arg(corpus.path())
            .arg(format!("{ROOT}/fuzz/seeds/{target}"))
            .args(["--", "-max_total_time=10"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let summary = stderr
            .lines()
            .filter(|l| l.starts_with("Done ") || l.contains("ERROR") || l.contains("panicked"))
            .collect::<Vec<_>>()
            .join("\n");
        eprintln!("fuzz {target}: {summary}");
        assert!(
            out.status.success(),
            "fuzz target {target} failed:\n{}",
            &stderr[stderr.len().saturating_sub(4000)..]
        );
    }
}
