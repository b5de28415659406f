//! The torture harness (issue 6, first part): worker processes take leases, fence, read, append
//! their id and write, while the harness pauses them past their lease (SIGSTOP) and kill -9s
//! fencegate. A checker then proves over the whole history that no stale write was accepted,
//! that every acknowledged append survived and no refused one landed, and that after every
//! restart the highest acknowledged token minus one is refused. The negative control runs the
//! same load with fencing off and must be caught.
//!
//! Seeds and length: FENCEGATE_TORTURE_SEED (default: the fixed CI seeds) and
//! FENCEGATE_TORTURE_SECS (default 12); `scripts/torture --minutes N --seed S` sets both.

mod common;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use common::{client, Server};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEYS: [&str; 3] = ["list-a", "list-b", "list-c"];
const WORKERS: usize = 4;
const TTL: Duration = Duration::from_millis(200);

/// A minimal lease service: one holder per name until its lease expires; tokens only grow.
#[derive(Default)]
struct Leases {
    held: Mutex<HashMap<String, (String, Instant)>>,
    next: AtomicU64,
}

#[derive(serde::Deserialize)]
struct LeaseQuery {
    name: String,
    holder: String,
}

async fn acquire(State(l): State<Arc<Leases>>, Query(q): Query<LeaseQuery>) -> Response {
    let mut held = l.held.lock();
    let now = Instant::now();
    match held.get(&q.name) {
        Some((holder, until)) if *until > now && *holder != q.holder => {
            StatusCode::CONFLICT.into_response()
        }
        _ => {
            held.insert(q.name, (q.holder, now + TTL));
            let token = l.next.fetch_add(1, Ordering::SeqCst) + 1;
            axum::Json(serde_json::json!({ "token": token })).into_response()
        }
    }
}

async fn release(State(l): State<Arc<Leases>>, Query(q): Query<LeaseQuery>) -> StatusCode {
    let mut held = l.held.lock();
    if held.get(&q.name).is_some_and(|(h, _)| *h == q.holder) {
        held.remove(&q.name);
    }
    StatusCode::OK
}

#[derive(Debug, serde::Deserialize)]
struct Op {
    key: String,
    token: u64,
    item: String,
    t0: f64,
    t1: f64,
    result: String,
}

#[derive(Debug, Default)]
struct Report {
    ops: usize,
    accepted: usize,
    stale: usize,
    unknown: usize,
    pauses: usize,
    kills: usize,
    violations: Vec<String>,
}

fn histories(dir: &std::path::Path) -> Vec<Op> {
    let mut ops = Vec::new();
    for w in 0..WORKERS {
        let text =
            std::fs::read_to_string(dir.join(format!("history-{w}.jsonl"))).unwrap_or_default();
        // The last line may be half-written if the worker is mid-write.
        ops.extend(
            text.lines()
                .filter_map(|l| serde_json::from_str::<Op>(l).ok()),
        );
    }
    ops
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: sends a signal to a child process this test started.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

async fn torture(seed: u64, secs: f64, fencing: &str) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let listen = format!("127.0.0.1:{}", common::moto::free_port());
    let config = format!("[buckets.torture]\nfencing = \"{fencing}\"\n");
    let mut server = Some(Server::start_at(&data, Some(&config), &listen));
    let gate_url = server.as_ref().unwrap().url("");

    let leases = Arc::new(Leases::default());
    let app = axum::Router::new()
        .route("/acquire", axum::routing::post(acquire))
        .route("/release", axum::routing::post(release))
        .with_state(leases);
    let lease_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let lease_url = format!("http://{}", lease_listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(lease_listener, app).await.unwrap() });

    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python");
    let python = if std::path::Path::new(python).exists() {
        python
    } else {
        "python3"
    };
    let mut workers: Vec<std::process::Child> = (0..WORKERS)
        .map(|w| {
            std::process::Command::new(python)
                .arg(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/torture/worker.py"
                ))
                .args([
                    &gate_url,
                    &lease_url,
                    "torture",
                    &w.to_string(),
                    &KEYS.join(","),
                    &secs.to_string(),
                ])
                .arg(dir.path().join(format!("history-{w}.jsonl")))
                .arg((seed * 100 + w as u64).to_string())
                .spawn()
                .expect("python3 runs the torture worker")
        })
        .collect();

    let mut report = Report::default();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let c = client();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..400))).await;
        if rng.random_bool(0.75) {
            // A paused lock holder: stopped well past its lease, then let go.
            let w = rng.random_range(0..WORKERS);
            signal(workers[w].id(), libc::SIGSTOP);
            tokio::time::sleep(Duration::from_millis(rng.random_range(300..700))).await;
            signal(workers[w].id(), libc::SIGCONT);
            report.pauses += 1;
        } else {
            server.take().unwrap().kill9();
            server = Some(Server::start_at(&data, Some(&config), &listen));
            report.kills += 1;
            if fencing == "required" {
                // After a restart, the highest acknowledged token minus one is refused.
                let mut top: BTreeMap<String, u64> = BTreeMap::new();
                for op in histories(dir.path()).iter().filter(|o| o.result == "ok") {
                    let t = top.entry(op.key.clone()).or_default();
                    *t = (*t).max(op.token);
                }
                for (key, token) in top {
                    let resp = c
                        .put(format!("{gate_url}/v1/objects/torture/{key}"))
                        .header("Fencing-Token", (token - 1).to_string())
                        .body("[\"probe\"]")
                        .send()
                        .await
                        .unwrap();
                    if resp.status().as_u16() != 409 {
                        report.violations.push(format!(
                            "after restart {}: {key} accepted {} below acknowledged {token}",
                            report.kills,
                            token - 1
                        ));
                    }
                }
            }
        }
    }
    for w in &mut workers {
        let started = Instant::now();
        while w.try_wait().unwrap().is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "a worker did not finish"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    let ops = histories(dir.path());
    report.ops = ops.len();
    report.accepted = ops.iter().filter(|o| o.result == "ok").count();
    report.stale = ops.iter().filter(|o| o.result == "fail").count();
    report.unknown = ops.iter().filter(|o| o.result == "unknown").count();
    for key in KEYS {
        let resp = c
            .get(format!("{gate_url}/v1/objects/torture/{key}"))
            .send()
            .await
            .unwrap();
        let last: Vec<String> = if resp.status().as_u16() == 200 {
            resp.json().await.unwrap()
        } else {
            Vec::new()
        };
        let acked: Vec<&Op> = ops
            .iter()
            .filter(|o| o.key == key && o.result == "ok")
            .collect();
        for a in &acked {
            for b in &acked {
                if b.t0 > a.t1 && b.token < a.token {
                    report.violations.push(format!(
                        "{key}: token {} accepted after {} was acknowledged",
                        b.token, a.token
                    ));
                }
            }
            if !last.contains(&a.item) {
                report.violations.push(format!(
                    "{key}: acknowledged append {} (token {}) is lost",
                    a.item, a.token
                ));
            }
        }
        for f in ops.iter().filter(|o| o.key == key && o.result == "fail") {
            if last.contains(&f.item) {
                report.violations.push(format!(
                    "{key}: refused append {} (token {}) landed",
                    f.item, f.token
                ));
            }
        }
    }
    // Written to stderr directly, past libtest's capture, so CI logs show the summary.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "torture seed={seed} fencing={fencing}: operations {}, accepted {}, rejected as stale {}, unknown {}, faults injected {} (pauses {}, kill -9 {}), violations {}",
        report.ops, report.accepted, report.stale, report.unknown, report.pauses + report.kills, report.pauses, report.kills, report.violations.len()
    );
    report
}

fn seeds() -> Vec<u64> {
    match std::env::var("FENCEGATE_TORTURE_SEED") {
        Ok(s) => vec![s.parse().expect("FENCEGATE_TORTURE_SEED is a number")],
        Err(_) => vec![1, 2],
    }
}

fn secs() -> f64 {
    std::env::var("FENCEGATE_TORTURE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_histories_have_no_violations() {
    for seed in seeds() {
        let r = torture(seed, secs(), "required").await;
        assert!(r.violations.is_empty(), "seed {seed}: {:#?}", r.violations);
        assert!(
            r.accepted > 0 && r.pauses > 0 && r.kills > 0,
            "the run exercised nothing: {r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_with_fencing_off_is_caught() {
    let r = torture(seeds()[0], secs(), "off").await;
    assert!(
        !r.violations.is_empty(),
        "with fencing off the checker must find violations: {r:?}"
    );
}
