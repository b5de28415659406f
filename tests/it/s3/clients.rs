//! The real aws cli and boto3 against the gateway (tests/e2e/s3_clients.py), with the README's
//! "Use it as an S3 endpoint" configuration. Both come from PyPI into `.venv` (scripts/test).

use crate::common;
use common::Server;
use std::process::Command;

#[test]
fn aws_cli_and_boto3_as_documented() {
    let root = env!("CARGO_MANIFEST_DIR");
    let python = format!("{root}/.venv/bin/python");
    let aws = format!("{root}/.venv/bin/aws");
    assert!(
        std::path::Path::new(&aws).exists(),
        "the aws cli is not in .venv: run scripts/test, which installs awscli and boto3 there"
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        // The README's configuration, with a short idle timeout for the stalled-body step.
        Some("[server]\nbody_idle_timeout_secs = 2\n\n[buckets.default]\n\n[buckets.shared]\nfenced_deletes = false\n"),
    );
    let out = Command::new(&python)
        .arg(format!("{root}/tests/e2e/s3_clients.py"))
        .env("FG_ENDPOINT", server.url(""))
        .env("AWS_ACCESS_KEY_ID", "fencegate")
        .env("AWS_SECRET_ACCESS_KEY", "fencegate-dev-secret")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}{stderr}");
    assert!(
        out.status.success(),
        "the e2e script failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("hostile input refused"));
}

/// The Python lease example (requests + boto3) runs as its README link promises.
#[test]
fn python_lease_example_runs() {
    let root = env!("CARGO_MANIFEST_DIR");
    let python = format!("{root}/.venv/bin/python");
    assert!(
        std::path::Path::new(&python).exists(),
        "no .venv: run scripts/test, which installs boto3 and requests there"
    );
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), None);
    let out = Command::new(&python)
        .arg(format!("{root}/examples/python/lease_client.py"))
        .env("FENCEGATE_URL", server.url(""))
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}{stderr}");
    assert!(
        out.status.success(),
        "the example failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("OK"));
}
