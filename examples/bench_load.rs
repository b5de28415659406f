//! The benchmark's load generator: a closed-loop HTTP client (each of `--concurrency` workers
//! sends its next request when the previous one is answered) with an HDR latency histogram.
//! It prints one JSON line: requests/s, p50/p99/p99.9 in ms, and counts of outcomes.
//!
//!     cargo run --release --example bench_load -- --url URL --mode distinct \
//!         [--concurrency 64] [--secs 10] [--size 4096]
//!
//! Modes (URL is an object URL prefix such as http://127.0.0.1:8080/v1/objects/default):
//! - `distinct`: worker i writes key `w{i}` with increasing tokens (fenced, accepted);
//! - `hot`: every worker writes key `hot` with tokens from one shared, increasing counter;
//! - `stale`: every worker writes key `stale` with token 1 after the fence was advanced to
//!   the largest token: every write is rejected (409);
//! - `unfenced`: like `distinct`, without a token (for a bucket with fencing off);
//! - `spread`: keys `p0`..`p{--keys}` at random (scopes a populated table already holds, see
//!   the bench_populate example), with tokens above every populated one;
//!
//! Tokens are microseconds since the epoch plus a counter, so they keep growing across runs.
//! - `healthz`: GET the URL (fencegate's `/healthz`), the rate a request costs with no work;
//! - `s3`: like `unfenced`, as an S3 PutObject (URL is `http://store/bucket`); the signature is
//!   a placeholder, which moto does not check;
//! - `azure`: like `unfenced`, as an Azure Put Blob (URL is `http://host/account/container`),
//!   authorized by the container SAS `--sas` (query string, without `?`).

use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    rejected: AtomicU64,
    errors: AtomicU64,
}

#[tokio::main]
async fn main() {
    let url = arg("--url").expect("--url URL");
    let mode = arg("--mode").unwrap_or_else(|| "distinct".into());
    let concurrency: usize = arg("--concurrency")
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    let secs: f64 = arg("--secs").and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let size: usize = arg("--size").and_then(|s| s.parse().ok()).unwrap_or(4096);
    let keys: u64 = arg("--keys").and_then(|s| s.parse().ok()).unwrap_or(1);
    let sas = arg("--sas").unwrap_or_default();
    let body = bytes::Bytes::from(vec![b'x'; size]);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()
        .unwrap();
    if mode == "stale" {
        let r = client
            .post(url.replace("/v1/objects/", "/v1/fences/") + "/stale")
            .header("Fencing-Token", "1000000")
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "advancing the fence failed: {}",
            r.status()
        );
    }
    // Tokens grow across runs too (microseconds since the epoch, then +1 per request), so a
    // second run against the same fencegate is not refused as stale.
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let shared = Arc::new(AtomicU64::new(base));
    let counts = Arc::new(Counts::default());
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(secs);
    let mut workers = Vec::new();
    for w in 0..concurrency {
        let (client, url, mode, body, shared, counts, sas) = (
            client.clone(),
            url.clone(),
            mode.clone(),
            body.clone(),
            shared.clone(),
            counts.clone(),
            sas.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
            let mut n = 0u64;
            while Instant::now() < deadline {
                n += 1;
                let req = match mode.as_str() {
                    "distinct" => client.put(format!("{url}/w{w}")).header("Fencing-Token", (base + n).to_string()),
                    "hot" => client.put(format!("{url}/hot")).header("Fencing-Token", shared.fetch_add(1, Ordering::Relaxed).to_string()),
                    "stale" => client.put(format!("{url}/stale")).header("Fencing-Token", "1"),
                    "healthz" => client.get(url.as_str()),
                    "unfenced" => client.put(format!("{url}/w{w}")),
                    "spread" => client
                        .put(format!("{url}/p{}", rand::random::<u64>() % keys))
                        .header("Fencing-Token", (base + n).to_string()),
                    "s3" => client
                        .put(format!("{url}/w{w}"))
                        .header("authorization", "AWS4-HMAC-SHA256 Credential=bench/20261130/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=00")
                        .header("x-amz-date", "20261130T000000Z")
                        .header("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
                        .header("content-type", "application/octet-stream"),
                    "azure" => client
                        .put(format!("{url}/w{w}?{sas}"))
                        .header("x-ms-blob-type", "BlockBlob")
                        .header("x-ms-version", "2021-08-06")
                        .header("content-type", "application/octet-stream"),
                    other => panic!("unknown mode {other}"),
                };
                let t = Instant::now();
                let req = if mode == "healthz" { req } else { req.body(body.clone()) };
                match req.send().await {
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        let _ = resp.bytes().await;
                        hist.record(t.elapsed().as_micros().max(1) as u64).unwrap();
                        match status {
                            200..=299 => counts.ok.fetch_add(1, Ordering::Relaxed),
                            409 => counts.rejected.fetch_add(1, Ordering::Relaxed),
                            _ => counts.errors.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                    Err(_) => {
                        counts.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            hist
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    for w in workers {
        hist.add(w.await.unwrap()).unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "{{\"rps\": {:.1}, \"p50_ms\": {:.3}, \"p99_ms\": {:.3}, \"p999_ms\": {:.3}, \"ok\": {}, \"rejected\": {}, \"errors\": {}}}",
        hist.len() as f64 / elapsed,
        ms(0.5),
        ms(0.99),
        ms(0.999),
        counts.ok.load(Ordering::Relaxed),
        counts.rejected.load(Ordering::Relaxed),
        counts.errors.load(Ordering::Relaxed),
    );
}
