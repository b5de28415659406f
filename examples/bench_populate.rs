//! Fills a fence table with N scopes, for the growth scenario (S7) of scripts/bench:
//! rows `object:fenced/p0` .. `object:fenced/p{N-1}`, each with a highest token equal to its
//! number. Written in large unsynced batches, then one synced put and a compaction, so the
//! table on disk is what a long-running fencegate would have.
//!
//!     cargo run --release --example bench_populate -- --dir DATA/fences --rows 1000000

use fencegate::fence::rocks::RocksFenceStore;
use fencegate::fence::{Durability, FenceRow, FenceStore};
use std::time::Instant;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let dir = arg("--dir").expect("--dir DIR");
    let rows: u64 = arg("--rows")
        .and_then(|s| s.parse().ok())
        .expect("--rows N");
    let store = RocksFenceStore::open(std::path::Path::new(&dir)).unwrap();
    let started = Instant::now();
    let mut batch = Vec::with_capacity(100_000);
    for i in 0..rows {
        let row = FenceRow {
            highest: Some(i),
            ..FenceRow::default()
        };
        batch.push((format!("object:fenced/p{i}"), row));
        if batch.len() == 100_000 {
            store
                .put(std::mem::take(&mut batch), Durability::Lazy)
                .await
                .unwrap();
            eprint!("\rpopulated {} rows", i + 1);
        }
    }
    batch.push(("bench:populated".into(), FenceRow::default()));
    store.put(batch, Durability::Synced).await.unwrap();
    store.compact();
    eprintln!(
        "\rpopulated {rows} rows in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
