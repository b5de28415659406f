//! The Python package (clients/python) against the real binary: its unittest suite (acquire,
//! renew, release, a zombie whose renewals are paused, a stale boto3 write, every error code of
//! docs/reference.md mapped to its class) and the lease example it powers.

use crate::common::Server;
use std::process::Command;

/// The server the suite expects (clients/python/tests/test_fencegate.py says why each part).
const CONFIG: &str = r#"
[buckets.default]

[buckets.capped]
max_token_jump = 1000

[keys.admin]
access_key_id = "fgpy-admin"
secret_access_key = "fgpy-admin-secret-0123456789"
admin = true

[keys.reader]
access_key_id = "fgpy-reader"
secret_access_key = "fgpy-reader-secret-0123456789"
buckets = { "default" = ["read"] }
"#;

#[test]
fn the_python_package_passes_its_suite() {
    let root = env!("CARGO_MANIFEST_DIR");
    let python = format!("{root}/.venv/bin/python");
    assert!(
        std::path::Path::new(&python).exists(),
        "no .venv: run scripts/test, which installs boto3 and the package there"
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), Some(CONFIG));
    let out = Command::new(&python)
        .args([
            "-m",
            "unittest",
            "discover",
            "-s",
            "clients/python/tests",
            "-v",
        ])
        .current_dir(root)
        .env("FENCEGATE_URL", server.url(""))
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python suite failed:\n{stdout}\n{stderr}"
    );
    // unittest reports on stderr: a suite that found no tests would pass too.
    let ran = stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("Ran ")?
                .split(' ')
                .next()?
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(0);
    assert!(ran >= 20, "only {ran} Python tests ran:\n{stderr}");
    assert!(
        stderr.lines().any(|l| l
            .starts_with("test_a_paused_holder_is_stopped_locally_and_by_the_fence ")
            && l.ends_with("... ok")),
        "the zombie test ran:\n{stderr}"
    );
}
