//! The command line: --help teaches, check-config validates and names the line of a mistake.

use std::process::Command;

fn fencegate(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fencegate"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_explains_the_tool() {
    let (ok, out, _) = fencegate(&["--help"]);
    assert!(ok);
    for needle in [
        "fencing token",
        "check-config",
        "--data-dir",
        "--listen",
        "RUST_LOG",
        "Fencing-Token",
    ] {
        assert!(out.contains(needle), "--help lacks {needle}:\n{out}");
    }
}

#[test]
fn check_config_prints_the_effective_policies() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/config/prefix-scoped.toml");
    let (ok, out, err) = fencegate(&["check-config", file]);
    assert!(ok, "{err}");
    assert!(
        out.contains(
            "bucket tenants: backend=local fencing=required scope=prefix (first 1 segments) tokens=non-decreasing"
        ),
        "{out}"
    );
    assert!(out.contains("bucket jobs:"), "{out}");
    // Settings as the file spells them, not as Rust names them.
    assert!(
        !out.contains("Required") && !out.contains("Refuse"),
        "{out}"
    );
}

#[test]
fn a_bad_file_names_the_file_the_line_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        "[buckets.logs]\nfencing = \"required\"\nbackend = \"nas\"\n",
    )
    .unwrap();
    let (ok, _, err) = fencegate(&["check-config", file.to_str().unwrap()]);
    assert!(!ok);
    // The line and column of the value that names it.
    assert!(err.contains("bad.toml:3:11:"), "{err}");
    assert!(err.contains("fix:"), "{err}");
    // serve refuses to start on it too.
    let (ok, _, err) = fencegate(&[
        "serve",
        "--config",
        file.to_str().unwrap(),
        "--data-dir",
        dir.path().join("d").to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("nas"), "{err}");
    assert!(
        !dir.path().join("d").exists(),
        "nothing was created by a refused start"
    );
}
