//! The benchmark's store-alone baseline for the `fs` backend: what a durable file store must do
//! for each write, with nothing in front of it. Each of `--concurrency` threads loops: create a
//! staging file, write the body (plus a trailer of the size fencegate appends), fsync it,
//! rename it over its own object file (`w{i}`, as bench_load's `distinct` mode writes), fsync
//! the directory. Plain threads and std::fs, so its own overhead is not the limit.
//!
//!     cargo run --release --example bench_store_alone -- --dir DIR [--concurrency 64] \
//!         [--secs 10] [--size 4096]
//!
//! It prints the same JSON line as bench_load: requests/s and latency percentiles in ms.

use hdrhistogram::Histogram;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// A JSON trailer about as long as the one fencegate appends to each object file.
const TRAILER: usize = 120;

fn main() {
    let dir = PathBuf::from(arg("--dir").expect("--dir DIR"));
    let concurrency: usize = arg("--concurrency")
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    let secs: f64 = arg("--secs").and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let size: usize = arg("--size").and_then(|s| s.parse().ok()).unwrap_or(4096);
    let (staging, objects) = (dir.join("staging"), dir.join("bucket"));
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::create_dir_all(&objects).unwrap();
    let body = vec![b'x'; size + TRAILER];
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(secs);
    let workers: Vec<_> = (0..concurrency)
        .map(|w| {
            let (staging, objects, body) = (staging.clone(), objects.clone(), body.clone());
            std::thread::spawn(move || {
                let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
                let target = objects.join(format!("w{w}"));
                let mut n = 0u64;
                while Instant::now() < deadline {
                    n += 1;
                    let t = Instant::now();
                    let temp = staging.join(format!("{w}-{n}.tmp"));
                    let mut f = std::fs::File::create(&temp).unwrap();
                    f.write_all(&body).unwrap();
                    f.sync_all().unwrap();
                    std::fs::rename(&temp, &target).unwrap();
                    std::fs::File::open(&objects).unwrap().sync_all().unwrap();
                    hist.record(t.elapsed().as_micros().max(1) as u64).unwrap();
                }
                hist
            })
        })
        .collect();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    for w in workers {
        hist.add(w.join().unwrap()).unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "{{\"rps\": {:.1}, \"p50_ms\": {:.3}, \"p99_ms\": {:.3}, \"p999_ms\": {:.3}, \"ok\": {}, \"rejected\": 0, \"errors\": 0}}",
        hist.len() as f64 / elapsed,
        ms(0.5),
        ms(0.99),
        ms(0.999),
        hist.len(),
    );
}
