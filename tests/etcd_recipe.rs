//! The etcd recipe (examples/etcd) against a real etcd-server that this test starts on loopback
//! ports: tokens are the lock key's create_revision, and fed to fencegate they fence a stale
//! holder. `scripts/test` installs etcd-server (Debian's package).

mod common;
use common::moto::free_port;
use common::Server;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Etcd {
    child: Child,
    endpoint: String,
}

impl Etcd {
    fn start(dir: &std::path::Path) -> Etcd {
        let client = free_port();
        let peer = free_port();
        let endpoint = format!("http://127.0.0.1:{client}");
        let child = Command::new("etcd")
            .arg("--data-dir")
            .arg(dir)
            .arg("--listen-client-urls")
            .arg(&endpoint)
            .arg("--advertise-client-urls")
            .arg(&endpoint)
            .arg("--listen-peer-urls")
            .arg(format!("http://127.0.0.1:{peer}"))
            .arg("--initial-advertise-peer-urls")
            .arg(format!("http://127.0.0.1:{peer}"))
            .arg("--initial-cluster")
            .arg(format!("default=http://127.0.0.1:{peer}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd is not installed: run scripts/test, which installs etcd-server (apt-get install etcd-server etcd-client)");
        let etcd = Etcd { child, endpoint };
        let started = Instant::now();
        loop {
            let ok = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .arg("--endpoints")
                .arg(&etcd.endpoint)
                .arg("endpoint")
                .arg("health")
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                return etcd;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "etcd did not become healthy within 30 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
