//! Added latency of a fenced 4 KiB PUT through fencegate, against the same PUT sent straight to
//! the store, one after the other, alternating, so the comparison is taken within one run. The
//! direct PUT is what a user would send the store (aws-sdk-s3, signed); the fenced one is what a
//! worker sends fencegate (a plain HTTP PUT with a token). Run it with
//! `scripts/bench-s3-latency`, which starts moto and fencegate; or by hand:
//!
//!     cargo run --release --example put_latency -- --store URL --bucket B --fenced URL [--n N]

use std::time::{Duration, Instant};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let store = arg("--store").expect("--store URL");
    let bucket = arg("--bucket").expect("--bucket B");
    let fenced = arg("--fenced").expect("--fenced URL");
    let n: usize = arg("--n").and_then(|s| s.parse().ok()).unwrap_or(2000);
    let body = vec![b'x'; 4096];
    let client = reqwest::Client::new();
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::new()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .endpoint_url(store)
            .force_path_style(true)
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                "bench", "bench", None, None, "bench",
            ))
            .build(),
    );
    let direct = || {
        s3.put_object()
            .bucket(&bucket)
            .key("direct.bin")
            .body(aws_sdk_s3::primitives::ByteStream::from(body.clone()))
            .send()
    };
    let (mut d, mut f) = (Vec::with_capacity(n), Vec::with_capacity(n));
    // Warm up both paths (connections, the store's bucket).
    for i in 0..50u64 {
        direct().await.expect("direct PUT");
        let r = client
            .put(&fenced)
            .header("Fencing-Token", i.to_string())
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let status = r.status();
        assert!(
            status.is_success(),
            "fenced PUT failed: {status} {}",
            r.text().await.unwrap()
        );
    }
    for i in 0..n as u64 {
        let t = Instant::now();
        direct().await.expect("direct PUT");
        d.push(t.elapsed());
        let t = Instant::now();
        let r = client
            .put(&fenced)
            .header("Fencing-Token", (100 + i).to_string())
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        f.push(t.elapsed());
    }
    d.sort();
    f.sort();
    println!("| 4 KiB PUT, n = {n} each, alternating | p50 ms | p99 ms |");
    println!("| --- | ---: | ---: |");
    println!(
        "| straight to the store | {:.2} | {:.2} |",
        percentile(&d, 0.5),
        percentile(&d, 0.99)
    );
    println!(
        "| through fencegate (fenced) | {:.2} | {:.2} |",
        percentile(&f, 0.5),
        percentile(&f, 0.99)
    );
    println!(
        "| added by fencegate | {:.2} | {:.2} |",
        percentile(&f, 0.5) - percentile(&d, 0.5),
        percentile(&f, 0.99) - percentile(&d, 0.99)
    );
}
