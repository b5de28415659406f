//! The failure fencing exists for, replayed twice side by side (README, "Quick start"):
//!
//! 1. worker A takes the lease and writes;
//! 2. A is paused past its TTL (a GC pause, here a sleep with its renewals stopped);
//! 3. worker B takes the lease and writes the complete report;
//! 4. A wakes up, still believing it holds the lock, and writes its stale version.
//!
//! Left column: writes go through fencegate with the lease's token; A's late write is refused
//! and B's report is intact. Right column: the same lease service, but writes go straight to
//! the store, which cannot check tokens; A's late write silently destroys B's report.
//!
//! Run, from the checkout, after `cargo build --release`:
//! `cargo run --release -p fencegate-client --example zombie`. It starts the fencegate binary
//! (`$FENCEGATE_BIN`, else the one built beside it, else `fencegate` on the PATH) on a free
//! port, with its data in a temporary directory. Exits 0 when both outcomes are as described.

use fencegate_client::{AcquireOptions, Client, Error};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_millis(1000);
const PAUSE: Duration = Duration::from_millis(1600);

struct Timeline {
    start: Instant,
}

impl Timeline {
    fn row(&self, step: &str, fenced: &str, direct: &str) {
        println!(
            "{:>6} ms  {:<34} | {:<44} | {}",
            self.start.elapsed().as_millis(),
            step,
            fenced,
            direct
        );
    }
}

fn write_direct(store: &Path, body: &str) {
    std::fs::write(store.join("report.csv"), body).expect("the store directory is writable");
}

/// The fencegate the demo runs against, stopped when the demo ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `$FENCEGATE_BIN`, else `target/<profile>/fencegate` beside `target/<profile>/examples/`,
/// else `fencegate` on the PATH.
fn server_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("FENCEGATE_BIN") {
        return bin.into();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("fencegate")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| "fencegate".into())
}

fn start_server(dir: &Path, addr: &str) -> Server {
    let bin = server_binary();
    let child = Command::new(&bin)
        .args(["serve", "--listen", addr, "--data-dir"])
        .arg(dir.join("data"))
        // Its start-up notes (development mode) would land under the table: errors only.
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            eprintln!(
                "cannot start {}: {e}. Build the server first (cargo build --release), or set \
                 FENCEGATE_BIN to its path",
                bin.display()
            );
            std::process::exit(2);
        });
    Server(child)
}

#[tokio::main]
async fn main() {
    let dir = tempfile_dir();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let server = start_server(&dir, &addr);
    let base = format!("http://{addr}");
    if !wait_ready(&base).await {
        eprintln!("fencegate did not start within 30 s");
        drop(server);
        std::process::exit(2);
    }
    let store = dir.join("plain-store");
    std::fs::create_dir_all(&store).unwrap();
    let fg = Client::new(&base);

    println!(
        "{:>9}  {:<34} | {:<44} | straight to the store (no fence)",
        "time", "step", "through fencegate"
    );
    println!("{}", "-".repeat(140));
    let t = Timeline {
        start: Instant::now(),
    };

    let opts = AcquireOptions::default().bind("default", "report.csv");
    let a = fg
        .acquire("report", "worker-A", TTL, opts.clone())
        .await
        .expect("A acquires");
    let a_direct = fg
        .acquire("report-direct", "worker-A", TTL, AcquireOptions::default())
        .await
        .expect("A acquires");
    t.row(
        "A takes the lease",
        &format!("token {}", a.token()),
        &format!("token {} (the store ignores it)", a_direct.token()),
    );

    a.put("default", "report.csv", "A: partial report")
        .await
        .expect("A's first write");
    write_direct(&store, "A: partial report");
    t.row("A writes", "accepted", "written");

    a.stop_renewing();
    a_direct.stop_renewing();
    t.row(
        "A pauses (GC) past its TTL",
        "renewals stop",
        "renewals stop",
    );
    tokio::time::sleep(PAUSE).await;

    let b = fg
        .acquire(
            "report",
            "worker-B",
            TTL,
            opts.clone().wait(Duration::from_secs(5)),
        )
        .await
        .expect("B acquires once A's lease expired");
    let b_direct = fg
        .acquire(
            "report-direct",
            "worker-B",
            TTL,
            AcquireOptions::default().wait(Duration::from_secs(5)),
        )
        .await
        .expect("B acquires");
    t.row(
        "A's lease expired; B takes it",
        &format!("token {} (fence advanced)", b.token()),
        &format!("token {}", b_direct.token()),
    );

    b.put("default", "report.csv", "B: complete report")
        .await
        .expect("B writes");
    write_direct(&store, "B: complete report");
    t.row("B writes the complete report", "accepted", "written");

    // A checked its lease before the pause and writes straight after it, as a zombie does: the
    // write goes out with the raw token (`Lease::put` would see the loss and not send at all,
    // but no check can close the gap between checking and sending; the fence does).
    let late = fg
        .put("default", "report.csv", a.token(), "A: stale report")
        .await
        .map(|_| ());
    write_direct(&store, "A: stale report");
    let fenced_outcome = match &late {
        Err(Error::Stale { token, highest }) => {
            format!("REFUSED: 409 token {token} < {highest}")
        }
        Ok(()) => "accepted (!)".to_string(),
        Err(e) => format!("error: {e}"),
    };
    t.row(
        "A wakes up and writes",
        &fenced_outcome,
        "written over B's report",
    );

    let fenced = fg.get("default", "report.csv").await.expect("read back");
    let direct = std::fs::read_to_string(store.join("report.csv")).unwrap();
    t.row(
        "final content",
        &format!("{:?}", String::from_utf8_lossy(&fenced)),
        &format!("{direct:?}"),
    );
    println!();
    let intact = fenced.as_ref() == b"B: complete report";
    let corrupted = direct == "A: stale report";
    println!(
        "RESULT through fencegate:      B's report {}",
        if intact {
            "INTACT (the zombie was fenced out)"
        } else {
            "LOST"
        }
    );
    println!(
        "RESULT straight to the store:  B's report {}",
        if corrupted {
            "CORRUPTED by the zombie's late write"
        } else {
            "unexpectedly intact"
        }
    );
    let _ = b.release().await;
    let _ = b_direct.release().await;
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
    if !(intact && corrupted && matches!(late, Err(Error::Stale { .. }))) {
        std::process::exit(1);
    }
}

fn tempfile_dir() -> std::path::PathBuf {
    let unique = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir =
        std::env::temp_dir().join(format!("fencegate-zombie-{}-{unique}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

async fn wait_ready(base: &str) -> bool {
    let http = reqwest::Client::new();
    for _ in 0..300 {
        if http
            .get(format!("{base}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}
