//! What one etcd round trip costs, through the client the instances use (etcd-client over
//! gRPC, one connection, `require_leader` as `fence/etcd.rs` sets it): a linearizable range
//! of one key, a put, and a compare-and-swap Txn shaped like an intent (a compare on the
//! key's mod_revision, a put), each timed one after another on one connection. A read-only
//! Txn of two keys (the object's row and its bucket's floor in one request) is timed too.
//! It prints one JSON line: p50 and p99 in ms of each kind.
//!
//!     cargo run --release --example etcd_rtt -- --endpoint http://127.0.0.1:2379 [--n 2000]

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, Txn, TxnOp};
use hdrhistogram::Histogram;
use std::time::{Duration, Instant};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

struct Timings {
    name: &'static str,
    hist: Histogram<u64>,
}

impl Timings {
    fn new(name: &'static str) -> Timings {
        Timings {
            name,
            hist: Histogram::new(3).expect("histogram"),
        }
    }

    fn record(&mut self, since: Instant) {
        let us = since.elapsed().as_micros() as u64;
        self.hist.record(us.max(1)).expect("in range");
    }

    fn json(&self) -> String {
        let ms = |q: f64| self.hist.value_at_quantile(q) as f64 / 1000.0;
        format!(
            "\"{}\": {{\"p50_ms\": {:.3}, \"p99_ms\": {:.3}}}",
            self.name,
            ms(0.5),
            ms(0.99)
        )
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), etcd_client::Error> {
    let endpoint = arg("--endpoint").unwrap_or_else(|| "http://127.0.0.1:2379".into());
    let n: usize = arg("--n").and_then(|s| s.parse().ok()).unwrap_or(2000);
    let options = ConnectOptions::new()
        .with_timeout(Duration::from_secs(5))
        .with_require_leader(true);
    let client = Client::connect([endpoint.as_str()], Some(options)).await?;
    let mut kv = client.kv_client();
    let key = format!("bench-rtt/{}", std::process::id());
    let floor = format!("{key}-floor");
    let value = vec![b'x'; 200];
    kv.put(key.clone(), value.clone(), None).await?;
    let mut range = Timings::new("range");
    let mut put = Timings::new("put");
    let mut cas = Timings::new("txn_cas_put");
    let mut pair = Timings::new("txn_two_ranges");
    for _ in 0..n {
        let t = Instant::now();
        let got = kv.get(key.clone(), None).await?;
        range.record(t);
        let rev = got.kvs().first().map_or(0, |k| k.mod_revision());

        let t = Instant::now();
        let txn = Txn::new()
            .when([Compare::mod_revision(key.clone(), CompareOp::Equal, rev)])
            .and_then([TxnOp::put(key.clone(), value.clone(), None)]);
        kv.txn(txn).await?;
        cas.record(t);

        let t = Instant::now();
        kv.put(key.clone(), value.clone(), None).await?;
        put.record(t);

        let t = Instant::now();
        let txn = Txn::new().and_then([
            TxnOp::get(key.clone(), None),
            TxnOp::get(floor.clone(), None),
        ]);
        kv.txn(txn).await?;
        pair.record(t);
    }
    kv.delete(key, None).await?;
    println!(
        "{{\"n\": {n}, {}, {}, {}, {}}}",
        range.json(),
        put.json(),
        cas.json(),
        pair.json()
    );
    Ok(())
}
