//! The real aws cli and boto3 against the gateway (tests/e2e/s3_clients.py), with the
//! configuration of docs/s3.md. Both come from PyPI into `.venv` (scripts/test).

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
        // docs/s3.md's configuration, with a short idle timeout for the stalled-body step.
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

/// The Python lease example (requests + boto3) runs as docs/native-api.md's link promises.
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

/// boto3, the aws cli, rclone, s5cmd and s3cmd through the same list (tests/e2e/clients.py): put and
/// get, a multipart upload, a paged listing whose page ends on a prefix, a presigned GET made
/// with the client's defaults, a stale write refused in one request, and a lease-bound delete
/// on a `required` bucket; on the fs backend and on the s3 backend over ministack, over http
/// and over https (each client trusting the certificate, with its default settings), and over
/// https on the azure backend (Azurite) and the gcs backend (the GCS double).
async fn every_client_through_the_list(kind: super::fixture::Kind, tls: bool) {
    let root = env!("CARGO_MANIFEST_DIR");
    let python = format!("{root}/.venv/bin/python");
    for tool in [".venv/bin/aws", ".venv/bin/s5cmd", ".venv/bin/s3cmd"] {
        assert!(
            std::path::Path::new(root).join(tool).exists(),
            "{tool} is missing: run scripts/test, which installs it"
        );
    }
    let fx = super::fixture::Fx::start_configured(
        kind,
        &[("open", "fencing = \"optional\""), ("req", "")],
        tls,
    )
    .await;
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(format!("{root}/tests/e2e/clients.py"));
    if tls {
        // As deployed: https, each client trusting the certificate, with its default settings
        // (over TLS the AWS SDKs send aws-chunked bodies).
        cmd.env(
            "FG_ENDPOINT",
            format!("https://localhost:{}", fx.server.addr.port()),
        )
        .env("AWS_CA_BUNDLE", fx.ca_file());
    } else {
        cmd.env("FG_ENDPOINT", fx.server.url(""));
    }
    cmd.env_remove("AWS_REQUEST_CHECKSUM_CALCULATION");
    super::fixture::run_script(
        &mut cmd,
        "every client passed: boto3, aws, rclone, s5cmd, s3cmd",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_on_fs() {
    every_client_through_the_list(super::fixture::Kind::Fs, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_on_s3_over_ministack() {
    every_client_through_the_list(super::fixture::Kind::S3Safe, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_over_tls_on_fs() {
    every_client_through_the_list(super::fixture::Kind::Fs, true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_over_tls_on_s3_over_ministack() {
    every_client_through_the_list(super::fixture::Kind::S3Safe, true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_over_tls_on_azure() {
    every_client_through_the_list(super::fixture::Kind::Azure, true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_over_tls_on_gcs() {
    every_client_through_the_list(super::fixture::Kind::Gcs, true).await
}
