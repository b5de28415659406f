//! What the S3 gateway costs over the native API: a fenced 4 KiB write sent as a native PUT
//! (plain HTTP with `Fencing-Token`) and as a SigV4-signed PutObject from aws-sdk-s3 (token in
//! `x-amz-meta-fencing-token`), alternating, against one fencegate on the `fs` backend that
//! this example starts in-process. Both go through the same gate, fence table and fsyncs; the
//! difference is SigV4, the S3 protocol layer and the SDK.
//!
//!     cargo run --release --example gateway_latency -- [--n 2000]

use std::time::{Duration, Instant};

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args
        .iter()
        .position(|a| a == "--n")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let dir = std::env::temp_dir().join(format!("fencegate-gwlat-{:016x}", rand::random::<u64>()));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let config = fencegate::config::Config::embedded_default()
        .with_overrides(Some(addr), Some(dir.join("data")));
    tokio::spawn(async move {
        if let Err(e) = fencegate::server::serve(config).await {
            eprintln!("fencegate failed: {e}");
            std::process::exit(2);
        }
    });
    let base = format!("http://{addr}");
    let http = reqwest::Client::new();
    while http.get(format!("{base}/healthz")).send().await.is_err() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::new()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .endpoint_url(&base)
            .force_path_style(true)
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                "fencegate",
                "fencegate-dev-secret",
                None,
                None,
                "bench",
            ))
            .build(),
    );
    let body = bytes::Bytes::from(vec![b'x'; 4096]);
    let (mut native, mut gateway) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n + 100 {
        let token = (i + 1).to_string();
        let started = Instant::now();
        let resp = http
            .put(format!("{base}/v1/objects/default/native-{}", i % 100))
            .header("Fencing-Token", &token)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "native PUT: {}", resp.status());
        let native_took = started.elapsed();
        let started = Instant::now();
        s3.put_object()
            .bucket("default")
            .key(format!("s3-{}", i % 100))
            .metadata("fencing-token", &token)
            .body(aws_sdk_s3::primitives::ByteStream::from(body.clone()))
            .send()
            .await
            .unwrap();
        let gateway_took = started.elapsed();
        // The first 100 of each warm connections and caches up.
        if i >= 100 {
            native.push(native_took);
            gateway.push(gateway_took);
        }
    }
    native.sort();
    gateway.sort();
    println!("fenced 4 KiB writes, {n} of each, alternating, fs backend:");
    for (name, v) in [("native PUT", &native), ("S3 PutObject", &gateway)] {
        println!(
            "  {name:<13} p50 {:.2} ms  p99 {:.2} ms",
            percentile(v, 0.5),
            percentile(v, 0.99)
        );
    }
    println!(
        "  gateway adds p50 {:+.2} ms, p99 {:+.2} ms",
        percentile(&gateway, 0.5) - percentile(&native, 0.5),
        percentile(&gateway, 0.99) - percentile(&native, 0.99)
    );
    std::fs::remove_dir_all(&dir).ok();
}
