//! The etcd recipe (examples/etcd) against a real etcd-server that this test starts on loopback
//! ports: tokens are the lock key's create_revision, and fed to fencegate they fence a stale
//! holder. `scripts/test` installs etcd-server (Debian's package).

use crate::common;
use common::etcd::Etcd;
use common::Server;
use std::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_create_revisions_fence_a_stale_holder() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(&dir.path().join("etcd"));
    let server = Server::start(&dir.path().join("data"), None);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/etcd/zombie.sh");
    let out = Command::new("bash")
        .arg(script)
        .env("ETCDCTL_API", "3")
        .env("ETCDCTL_ENDPOINTS", &etcd.endpoint)
        .env("FENCEGATE", server.addr.to_string())
        .env("BUCKET", "default")
        .env("KEY", "etcd-demo.txt")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}{stderr}");
    assert!(out.status.success(), "the etcd recipe failed");
    assert!(
        stdout.contains("409"),
        "the stale holder's refusal is shown"
    );
    // The fence recorded an etcd revision: a token, not a lease id.
    let fence = common::fence(&common::client(), &server, "default", "etcd-demo.txt").await;
    let highest = fence["highest"].as_u64().expect("a token was recorded");
    assert!(
        highest > 1 && highest < 1_000_000,
        "a create_revision, got {highest}"
    );
}
