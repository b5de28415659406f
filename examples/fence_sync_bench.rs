//! Group-commit benchmark for the RocksDB fence table: synced token writes per second with one
//! writer, and with N concurrent writers sharing WAL fsyncs.
//!
//!     cargo run --release --example fence_sync_bench -- [--dir DIR] [--secs S]
//!
//! DIR must be on the disk you care about (not tmpfs, where fsync costs nothing); the default
//! is ./target/fence-bench under the current directory.

use fencegate::fence::rocks::RocksFenceStore;
use fencegate::fence::{Durability, FenceRow, FenceStore};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

async fn run(store: Arc<RocksFenceStore>, writers: u64, secs: f64) -> (f64, f64) {
    let syncs_before = store.stats().syncs.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                let row = FenceRow {
                    highest: Some(n),
                    ..FenceRow::default()
                };
                store
                    .put(
                        vec![(format!("object:bench/w{w}"), row)],
                        Durability::Synced,
                    )
                    .await
                    .unwrap();
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let syncs = store.stats().syncs.load(Ordering::Relaxed) - syncs_before;
    (total as f64 / elapsed, total as f64 / syncs.max(1) as f64)
}

#[tokio::main]
async fn main() {
    let dir = arg("--dir").unwrap_or_else(|| "target/fence-bench".into());
    let secs: f64 = arg("--secs").and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let _ = std::fs::remove_dir_all(&dir);
    let store = Arc::new(RocksFenceStore::open(std::path::Path::new(&dir)).unwrap());
    println!("| writers | synced token writes/s | writes per fsync |");
    println!("| ---: | ---: | ---: |");
    for writers in [1u64, 8, 64] {
        let (rate, per_sync) = run(store.clone(), writers, secs).await;
        println!("| {writers} | {rate:.0} | {per_sync:.1} |");
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
