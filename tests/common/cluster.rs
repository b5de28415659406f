//! A fencegate cluster for tests, started by `scripts/cluster` (3 etcd members, one store,
//! N fencegate instances sharing the fence table on etcd) in a temporary directory, and
//! stopped on drop.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

pub struct Cluster {
    pub dir: tempfile::TempDir,
    env: HashMap<String, String>,
}

fn script() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/cluster"))
}

impl Cluster {
    /// `scripts/cluster up` with `instances` fencegates in front of `store` (ministack or
    /// moto), running this test's fencegate binary.
    pub fn up(instances: usize, store: &str) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(script())
            .arg("up")
            .arg(dir.path())
            .args(["--instances", &instances.to_string(), "--store", store])
            .arg("--bin")
            .arg(super::binary())
            .output()
            .expect("scripts/cluster runs");
        let cluster = Cluster {
            env: parse_env(&String::from_utf8_lossy(&out.stdout)),
            dir,
        };
        assert!(
            out.status.success(),
            "scripts/cluster up failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            cluster.logs()
        );
        cluster
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new(script())
            .arg(args[0])
            .arg(self.dir.path())
            .args(&args[1..])
            .output()
            .expect("scripts/cluster runs")
    }

    /// Sends `signal` (KILL, STOP, CONT, TERM) to a member: etcd1..3, fg1..N, store.
    pub fn signal(&self, name: &str, signal: &str) {
        let out = self.run(&["kill", name, signal]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts a stopped member again.
    pub fn start(&self, name: &str) {
        let out = self.run(&["start", name]);
        assert!(
            out.status.success(),
            "scripts/cluster start {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The etcd member leading now.
    pub fn leader(&self) -> String {
        let out = self.run(&["leader"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn var(&self, name: &str) -> &str {
        &self.env[name]
    }

    /// Instance `n`'s base URL (1-based).
    pub fn url(&self, n: usize, path: &str) -> String {
        format!(
            "http://127.0.0.1:{}{path}",
            self.var(&format!("FG{n}_PORT"))
        )
    }

    pub fn object(&self, n: usize, key: &str) -> String {
        self.url(n, &format!("/v1/objects/default/{key}"))
    }

    pub fn store_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.var("STORE_PORT"))
    }

    /// `[fence_store]` for another instance of this cluster.
    pub fn fence_store_toml(&self) -> String {
        let endpoints: Vec<String> = self
            .var("ETCD_ENDPOINTS_CSV")
            .split(',')
            .map(|e| format!("{e:?}"))
            .collect();
        format!(
            "[fence_store]\nkind = \"etcd\"\nendpoints = [{}]\nprefix = \"fencegate/\"\ntimeout_ms = 2000\nintent_ttl_secs = 3\nstore_apply_secs = 2\nmax_clock_skew_ms = 500\n",
            endpoints.join(", ")
        )
    }

    /// Every member's log, for a failure message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        if let Ok(entries) = std::fs::read_dir(self.dir.path()) {
            for e in entries.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "log") {
                    let text = std::fs::read_to_string(&p).unwrap_or_default();
                    let tail: Vec<&str> = text.lines().rev().take(15).collect();
                    out += &format!("--- {} (last lines)\n", p.display());
                    for l in tail.into_iter().rev() {
                        out += l;
                        out.push('\n');
                    }
                }
            }
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.run(&["down"]);
    }
}

fn parse_env(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}
