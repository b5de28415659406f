//! Shared pieces of the fault classes that target specific holes (hangup, deletes, wrap,
//! bound_race, scope_switch): a server on any backend and the store behind it (stalled on
//! demand), a history of timed operations, the checkers' common rule, a background disk
//! loader, and the one-line summary.

use super::{monotonic, signal, Store};
use crate::common::{self, Server};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The access key the S3 gateway accepts in these runs.
// Development mode (no [keys], loopback): the torture classes test fencing, not access, so
// the native clients stay unsigned and the S3 clients use the development key.
pub const S3_KEY: &str = "fencegate";
pub const S3_SECRET: &str = "fencegate-dev-secret";
const STORE_BUCKET: &str = "torture-holes";

/// The store behind a run's `[backends.store]`: an S3 store (moto, ministack), Azurite, or
/// the GCS double (in this process, with the directory its service account is written to);
/// stopped when dropped.
pub enum Backing {
    S3(common::store::Store),
    Azure(common::azurite::Azurite),
    Gcs(common::gcs_fake::GcsFake, tempfile::TempDir),
}

impl Backing {
    /// The store `store` runs on, with `bucket` (a store bucket, or a container) made; none
    /// on fs.
    pub async fn start(store: Store, bucket: &str) -> Option<Backing> {
        match store {
            Store::Azure => {
                let az = common::azurite::Azurite::start();
                az.create_container(bucket);
                return Some(Backing::Azure(az));
            }
            Store::Gcs => {
                let fake = common::gcs_fake::GcsFake::start().await;
                fake.create_bucket(bucket);
                return Some(Backing::Gcs(fake, tempfile::tempdir().unwrap()));
            }
            _ => {}
        }
        let kind = store.s3_store()?;
        let s3 = common::store::Store::start(kind);
        s3.create_bucket(bucket).await;
        Some(Backing::S3(s3))
    }

    /// The `[backends.store]` table for it; `timeouts`: short ones, so a stopped store turns
    /// into quick 504s (outcome unknown), and a 5 s commit deadline.
    pub fn backend_config(&self, timeouts: bool) -> String {
        let short = if timeouts {
            "connect_timeout_secs = 1\nread_timeout_secs = 1\nread_attempts = 2\ncommit_deadline_secs = 5\n"
        } else {
            ""
        };
        let table = match self {
            Backing::S3(s3) => format!(
                "[backends.store]\nkind = \"s3\"\nendpoint = \"{}\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\n{}\n",
                s3.endpoint(),
                s3.kind.opt_in()
            ),
            Backing::Azure(az) => az.backend_table("store"),
            Backing::Gcs(fake, dir) => fake.backend_table("store", dir.path()),
        };
        format!("{table}{short}\n")
    }

    /// The store stops mid-write for `length`, then goes on. A store process is stopped with
    /// SIGSTOP. The GCS double lives in this process, so its knobs play the part: a request
    /// that arrives meanwhile waits `length` before the double looks at it, and one it carries
    /// out meanwhile (a body that was still arriving, say) is applied at once and answered
    /// `length` later, a change that landed with its answer still to come.
    pub async fn stall(&self, length: Duration) {
        let pid = match self {
            Backing::S3(s3) => s3.pid(),
            Backing::Azure(az) => az.pid(),
            Backing::Gcs(fake, _) => {
                fake.hold_requests(u32::MAX, length);
                fake.hold_answers(u32::MAX, length);
                tokio::time::sleep(length).await;
                // What was held is looked at after the stall's end (up to `length` after it,
                // where SIGCONT would let it all go at once), and answered at once.
                fake.hold_requests(0, Duration::ZERO);
                fake.hold_answers(0, Duration::ZERO);
                return;
            }
        };
        let pid = pid.expect("the store process runs");
        signal(pid, libc::SIGSTOP);
        tokio::time::sleep(length).await;
        signal(pid, libc::SIGCONT);
    }
}

/// One fencegate (fs backend, s3 backend on moto or, in the safe mode, on ministack, the azure
/// backend on Azurite, or the gcs backend on the GCS double) with the buckets a class asks
/// for.
pub struct Rig {
    _dir: tempfile::TempDir,
    _store: Option<Backing>,
    pub server: Server,
    pub url: String,
    pub data: PathBuf,
}

impl Rig {
    /// `buckets`: (name, policy lines such as `scope = "header"`).
    pub async fn start(store: Store, buckets: &[(&str, String)]) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut config = String::new();
        let s3_store = Backing::start(store, STORE_BUCKET).await;
        if let Some(b) = &s3_store {
            config.push_str(&b.backend_config(false));
        }
        for (name, policy) in buckets {
            config.push_str(&format!("[buckets.{name}]\n{policy}\n"));
            if s3_store.is_some() {
                config.push_str(&format!(
                    "backend = \"store\"\nbackend_bucket = \"{STORE_BUCKET}\"\nbackend_prefix = \"{name}/\"\n"
                ));
            }
            config.push('\n');
        }
        let server = Server::start(&data, Some(&config));
        if store == Store::S3Safe {
            common::store::assert_safe_mode(&server);
        }
        let url = server.url("");
        Rig {
            _dir: dir,
            _store: s3_store,
            server,
            url,
            data,
        }
    }

    /// An aws-sdk-s3 client for the gateway.
    pub fn s3(&self) -> aws_sdk_s3::Client {
        common::moto::client_with(&self.url, S3_KEY, S3_SECRET)
    }

    pub fn object_url(&self, bucket: &str, key: &str) -> String {
        format!("{}/v1/objects/{bucket}/{key}", self.url)
    }
}

/// One operation of a history: who did what to which object or lease, with which token, when
/// (CLOCK_MONOTONIC, request sent .. answer read) and with what outcome.
#[derive(Debug, Clone, Default)]
pub struct Ev {
    /// Which actor (writer A, the zombie, the lease grant, ...).
    pub who: String,
    /// put, delete, advance, acquire, acquire-bound, get, fence-read.
    pub op: &'static str,
    /// native, s3, s3-batch, raw-rst, ...
    pub via: &'static str,
    /// `bucket/key` for objects; the lease name for leases.
    pub target: String,
    /// The fence scope the request names (a header scope, or the bound scope).
    pub scope: String,
    pub token: Option<u64>,
    /// A write that names the bound scope in `Fencing-Scope-Takeover`.
    pub takeover: bool,
    pub t0: f64,
    pub t1: f64,
    /// `None`: no answer (connection reset, timeout): outcome unknown.
    pub status: Option<u16>,
    /// The server acknowledged it (the write or delete happened, the grant is held).
    pub acked: bool,
    /// Anything else worth showing (observed bytes, error code).
    pub note: String,
}

impl fmt::Display for Ev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.who, self.op, self.target)?;
        if !self.scope.is_empty() {
            write!(f, " scope={}", self.scope)?;
        }
        if let Some(t) = self.token {
            write!(f, " token={t}")?;
        }
        if self.takeover {
            write!(f, " takeover")?;
        }
        write!(
            f,
            " via {} [{:.4}..{:.4}] -> {}",
            self.via,
            self.t0,
            self.t1,
            self.status
                .map_or("no answer".to_string(), |s| s.to_string())
        )?;
        if !self.note.is_empty() {
            write!(f, " ({})", self.note)?;
        }
        Ok(())
    }
}

/// Times an operation: fills `t0` and `t1` around `f`.
pub async fn timed<F, T>(f: F) -> (f64, f64, T)
where
    F: std::future::Future<Output = T>,
{
    let t0 = monotonic();
    let out = f.await;
    (t0, monotonic(), out)
}

/// The promise, over writes and deletes of one object: once an operation with token T is
/// acknowledged, no operation with a lower token is acknowledged after it (an operation that
/// started after the acknowledgement arrived). `exempt` names operations allowed to break it
/// (an explicit scope takeover).
pub fn ack_order(history: &[Ev], exempt: impl Fn(&Ev) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    let acked: Vec<&Ev> = history
        .iter()
        .filter(|e| e.acked && e.token.is_some() && matches!(e.op, "put" | "delete" | "advance"))
        .collect();
    let groups = by_target(acked.iter().copied(), |e| &e.target);
    // One line per offending operation, against the highest token acknowledged before it.
    for b in acked
        .iter()
        .filter(|b| matches!(b.op, "put" | "delete") && !exempt(b))
    {
        let above = groups[b.target.as_str()]
            .iter()
            .filter(|a| b.t0 > a.t1 && b.token < a.token)
            .max_by_key(|a| a.token);
        if let Some(a) = above {
            out.push(format!(
                "{}: [{}] was acknowledged after [{}] had been acknowledged",
                b.target, b, a
            ));
        }
    }
    out
}

/// Operations grouped by object, lease or scope, so that checkers stay linear-ish over long
/// runs.
pub fn by_target<'a>(
    evs: impl Iterator<Item = &'a Ev>,
    key: impl Fn(&'a Ev) -> &'a String,
) -> std::collections::HashMap<&'a str, Vec<&'a Ev>> {
    let mut out: std::collections::HashMap<&str, Vec<&Ev>> = std::collections::HashMap::new();
    for e in evs {
        out.entry(key(e).as_str()).or_default().push(e);
    }
    out
}

/// What one run of a class found.
#[derive(Debug, Default)]
pub struct ClassReport {
    pub class: &'static str,
    pub rounds: usize,
    pub ops: usize,
    pub acked: usize,
    /// Class-specific counters, for the summary line.
    pub stats: Vec<(&'static str, usize)>,
    pub violations: Vec<String>,
}

impl ClassReport {
    pub fn new(class: &'static str) -> ClassReport {
        ClassReport {
            class,
            ..ClassReport::default()
        }
    }

    pub fn stat(&mut self, name: &'static str) {
        match self.stats.iter_mut().find(|(n, _)| *n == name) {
            Some((_, n)) => *n += 1,
            None => self.stats.push((name, 1)),
        }
    }

    /// Prints the summary line and the first violations, past libtest's capture.
    pub fn print(&self, seed: u64, store: Store, fencing: &str, history: &[Ev]) {
        let stats: Vec<String> = self.stats.iter().map(|(n, c)| format!("{n} {c}")).collect();
        let mut err = std::io::stderr();
        let _ = writeln!(
            err,
            "torture class={} seed={seed} store={store:?} fencing={fencing} bin={}: rounds {}, operations {}, acknowledged {}, {}, violations {}",
            self.class,
            common::binary().display(),
            self.rounds,
            self.ops,
            self.acked,
            stats.join(", "),
            self.violations.len()
        );
        for v in self.violations.iter().take(12) {
            let _ = writeln!(err, "  VIOLATION {v}");
        }
        if self.violations.len() > 12 {
            let _ = writeln!(err, "  ... and {} more", self.violations.len() - 12);
        }
        if let Some(path) = std::env::var_os("FENCEGATE_TORTURE_HISTORY") {
            // The whole history, one operation a line, for post-mortems.
            let path = Path::new(&path).join(format!("{}-{seed}-{store:?}.log", self.class));
            if let Ok(mut f) = std::fs::File::create(path) {
                for e in history {
                    let _ = writeln!(f, "{e}");
                }
            }
        }
    }

    pub fn tally(&mut self, history: &[Ev]) {
        self.ops = history.len();
        self.acked = history.iter().filter(|e| e.acked).count();
    }
}

/// A background thread that keeps the disk busy with fsync-heavy writes in `dir` until
/// dropped: it widens every window that an fsync opens.
pub struct DiskLoad {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DiskLoad {
    pub fn start(dir: &Path) -> DiskLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let dir = dir.join("disk-load");
        std::fs::create_dir_all(&dir).unwrap();
        let thread = std::thread::spawn(move || {
            let chunk = vec![0x5au8; 256 * 1024];
            let mut i = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let path = dir.join(format!("f{}", i % 8));
                if let Ok(mut f) = std::fs::File::create(&path) {
                    let _ = f.write_all(&chunk);
                    let _ = f.sync_all();
                }
                if let Ok(d) = std::fs::File::open(&dir) {
                    let _ = d.sync_all();
                }
                i += 1;
            }
        });
        DiskLoad {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for DiskLoad {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How long each of these classes runs: FENCEGATE_TORTURE_SECS, else a few seconds for CI.
pub fn class_secs(default: f64) -> f64 {
    std::env::var("FENCEGATE_TORTURE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
