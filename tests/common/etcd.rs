//! One real etcd member (Debian's etcd-server, which `scripts/test` installs) on free loopback
//! ports, stopped on drop.

use super::moto::free_port;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Etcd {
    child: Child,
    pub endpoint: String,
}

impl Etcd {
    pub fn start(dir: &std::path::Path) -> Etcd {
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

impl Etcd {
    /// Kills the member (its data stays on disk).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
