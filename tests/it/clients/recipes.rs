//! The lock-service recipes (examples/recipes, examples/etcd) against the real services:
//! tests/e2e/recipes.sh starts redis-server, PostgreSQL and etcd on loopback ports, and each
//! recipe shows its zombie refused with 409 StaleFencingToken and the new holder's data kept.

use crate::common::Server;
use std::process::Command;

#[test]
fn redis_postgres_etcd_and_lease_recipes_fence_their_zombies() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), None);
    let out = Command::new("bash")
        .arg(format!("{root}/tests/e2e/recipes.sh"))
        .current_dir(root)
        .env("FENCEGATE", server.addr.to_string())
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the recipes failed (exit 2: a service is missing; scripts/test installs them):\n{stdout}\n{stderr}"
    );
    for recipe in ["redis", "postgres", "etcd", "lease"] {
        assert!(
            stdout.contains(&format!("== {recipe}: passed")),
            "{recipe} did not pass:\n{stdout}\n{stderr}"
        );
    }
    assert!(stdout.contains("4 passed, 0 failed"), "{stdout}");
    assert!(stdout.contains("StaleFencingToken"), "{stdout}");
}
