//! Test harness: runs the real `fencegate` binary on a free loopback port with its own data
//! directory, and talks to it over HTTP.
#![allow(dead_code)]

pub mod azurite;
pub mod cluster;
pub mod etcd;
// aws-lc-rs and quick-xml, which the azure and gcs features bring.
#[cfg(any(feature = "azure", feature = "gcs"))]
pub mod gcs_fake;
pub mod ministack;
pub mod moto;
pub mod relay;
pub mod s3proxy;
pub mod sign;
pub mod store;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The fencegate binary the tests run: `FENCEGATE_BIN` (to run a test against another build,
/// an older release say), else the one cargo built for this test.
pub fn binary() -> PathBuf {
    std::env::var_os("FENCEGATE_BIN")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_fencegate")))
}

pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    /// Every log line so far (audit lines are asserted on).
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Server {
    /// Starts fencegate on `data_dir`, with an optional config file's text, on a free port.
    pub fn start(data_dir: &Path, config: Option<&str>) -> Server {
        Server::start_at(data_dir, config, "127.0.0.1:0")
    }

    /// Starts fencegate listening on `listen` (a fixed address survives a restart).
    pub fn start_at(data_dir: &Path, config: Option<&str>, listen: &str) -> Server {
        let mut cmd = Command::new(binary());
        cmd.arg("serve")
            .arg("--listen")
            .arg(listen)
            .arg("--data-dir")
            .arg(data_dir)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(text) = config {
            let path = data_dir.with_extension("toml");
            std::fs::write(&path, text).unwrap();
            cmd.arg("--config").arg(path);
        }
        Server::spawn(cmd, data_dir)
    }

    /// Runs `cmd` (a fencegate command line, stderr piped) and waits until it listens; its
    /// log is kept as it comes. Panics with the log if it exits first.
    pub fn spawn(mut cmd: Command, data_dir: &Path) -> Server {
        cmd.stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("the fencegate binary starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = log.clone();
        // Drain the log (so the pipe never fills) and pick the bound address out of it.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("fencegate is listening") {
                    if let Some(addr) = line
                        .split("addr=")
                        .nth(1)
                        .and_then(|rest| rest.split_whitespace().next())
                    {
                        let _ = tx.send(addr.parse::<SocketAddr>().unwrap());
                    }
                }
                if std::env::var_os("FENCEGATE_TEST_LOG").is_some() {
                    eprintln!("[fencegate] {line}");
                }
                kept.lock().unwrap().push(line);
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|e| {
                panic!(
                    "fencegate printed no listening address within 60 s ({e}); its log:\n{}",
                    log.lock().unwrap().join("\n")
                )
            });
        Server {
            child,
            addr,
            data_dir: data_dir.to_path_buf(),
            log,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn object_url(&self, bucket: &str, key: &str) -> String {
        self.url(&format!("/v1/objects/{bucket}/{key}"))
    }

    /// SIGKILL: no shutdown code runs, as in a crash.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// The log lines so far that contain every one of `parts`.
    pub fn log_lines(&self, parts: &[&str]) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .cloned()
            .collect()
    }

    /// The log lines that contain every one of `parts`, once there are `want` of them: the log
    /// arrives through a pipe and a thread, a moment after the answer it belongs to.
    pub fn awaited_log_lines(&self, parts: &[&str], want: usize) -> Vec<String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let lines = self.log_lines(parts);
            if lines.len() >= want || std::time::Instant::now() > deadline {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits up to `limit` for the process to exit on its own.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Peak resident memory so far (VmHWM), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// The file descriptors the process holds open now (sockets, files, RocksDB's).
    pub fn open_fds(&self) -> u64 {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .unwrap()
            .count() as u64
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `fencegate serve` on `data` with `config` and `extra` arguments: whether it came up
/// (it is stopped again), and its log up to then.
pub fn try_start(data: &Path, config: &str, extra: &[&str]) -> (bool, String) {
    let file = data.with_extension("try.toml");
    std::fs::write(&file, config).unwrap();
    let mut child = Command::new(binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&file)
        .arg("--data-dir")
        .arg(data)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = String::new();
    let mut up = false;
    for line in BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        log += &line;
        log.push('\n');
        if line.contains("fencegate is listening") {
            up = true;
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    (up, log)
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().build().unwrap()
}

/// PUT with a token; returns the status and the body.
pub async fn put(
    c: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    body: &'static [u8],
) -> (u16, serde_json::Value) {
    put_as(c, url, token, body, None).await
}

/// PUT with a token, signed for `creds` when given.
pub async fn put_as(
    c: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    body: &'static [u8],
    creds: Option<sign::Creds>,
) -> (u16, serde_json::Value) {
    let mut req = c.put(url).body(body);
    if let Some(t) = token {
        req = req.header("Fencing-Token", t);
    }
    let resp = sign::send(c, req, creds).await;
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// `GET /v1/fences/{bucket}/{key}`: the key's scope and highest token.
pub async fn fence(c: &reqwest::Client, s: &Server, bucket: &str, key: &str) -> serde_json::Value {
    fence_as(c, s, bucket, key, None).await
}

/// `GET /v1/fences/{bucket}/{key}`, signed for `creds` when given.
pub async fn fence_as(
    c: &reqwest::Client,
    s: &Server,
    bucket: &str,
    key: &str,
    creds: Option<sign::Creds>,
) -> serde_json::Value {
    let req = c.get(s.url(&format!("/v1/fences/{bucket}/{key}")));
    sign::send(c, req, creds).await.json().await.unwrap()
}

pub async fn get_bytes(c: &reqwest::Client, url: &str) -> (u16, Vec<u8>) {
    let resp = c.get(url).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.bytes().await.unwrap().to_vec())
}

/// Every file below `dir`, for before/after comparisons.
pub fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(entries) = std::fs::read_dir(&d) {
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(p);
                }
            }
        }
    }
    out.sort();
    out
}

/// The bytes of every file below `dir` (their lengths, as `du --apparent-size` counts).
pub fn bytes_below(dir: &Path) -> u64 {
    files_below(dir)
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// Sends one request byte for byte (no URL normalisation, unlike an HTTP client library) and
/// returns the status and the body (status 0: the server closed without answering).
pub fn raw_request(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let request = format!(
        "{head}\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // A server refusing the request (a huge header, say) may close before it is all sent;
    // what it answered, if anything, is still read below.
    let _ = stream
        .write_all(request.as_bytes())
        .and_then(|()| stream.write_all(body));
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}
