//! The torture harness (issue 6, first part): worker processes take leases, fence, read, append
//! their id and write, while the harness pauses them past their lease (SIGSTOP) and kill -9s
//! fencegate. A checker then proves over the whole history that no stale write was accepted,
//! that every acknowledged append survived and no refused one landed, and that after every
//! restart the highest acknowledged token minus one is refused. The negative control runs the
//! same load with fencing off and must be caught.
//!
//! Seeds and length: FENCEGATE_TORTURE_SEED (default: the fixed CI seeds) and
//! FENCEGATE_TORTURE_SECS (default 12); `scripts/torture --minutes N --seed S` sets both.
//!
//! Five more fault classes each target one way the promise was broken (tests/torture/*.rs):
//! `hangup` (a writer resets its connection mid-commit), `deletes` (acknowledged deletes,
//! absent keys included, through the S3 gateway and the native API), `wrap` (tokens at the top
//! of u64), `bound_race` (a bound lease grant racing a foreign writer) and `scope_switch`
//! (header scopes: writing an object under another scope name). Each runs alone
//! (`scripts/torture --class NAME [--backend fs|s3|s3safe|azure|gcs]`), a few seconds in CI (or
//! FENCEGATE_TORTURE_SECS), records a history and has a checker; each checker is fed a
//! synthetic bad history in CI (`checker_self_test_*`) and must flag it. FENCEGATE_BIN runs
//! everything against another fencegate binary; FENCEGATE_TORTURE_HISTORY=DIR keeps the
//! histories of the new classes.
//!
//! `cluster` runs several instances over one store with the fence table on a 3-member etcd
//! (scripts/cluster), with instances paused and killed, the etcd leader killed and quorum lost
//! (tests/torture/cluster.rs).
//!
//! The s3 backend runs on two stores: `s3` is moto with `unsafe_no_conditional_writes` (moto
//! ignores If-Match on CompleteMultipartUpload), `s3safe` is ministack with no opt-in, where
//! every commit is conditional (the mode fencegate is meant to run in). `azure` is the azure
//! backend on Azurite and `gcs` the gcs backend on the GCS double (tests/common/gcs_fake, served
//! from this process), each with lists, deletes, bound_race and scope_switch. The double cannot
//! be stopped with SIGSTOP as the store processes are: its hold knobs stall it instead
//! (`rig::Backing::stall`).

#[path = "torture/bound_race.rs"]
mod bound_race;
#[path = "torture/cluster.rs"]
mod cluster;
mod common;
#[path = "torture/deletes.rs"]
mod deletes;
#[path = "torture/hangup.rs"]
mod hangup;
#[path = "torture/rig.rs"]
mod rig;
#[path = "torture/scope_switch.rs"]
mod scope_switch;
#[path = "torture/wrap.rs"]
mod wrap;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use common::{client, Server};
use futures::StreamExt;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
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
    /// "multipart" for the harness's slow multipart uploads; absent otherwise.
    #[serde(default)]
    via: String,
}

#[derive(Debug, Default)]
struct Report {
    ops: usize,
    accepted: usize,
    stale: usize,
    unknown: usize,
    pauses: usize,
    kills: usize,
    /// The store stopped mid-write, then started again (`rig::Backing::stall`).
    store_stalls: usize,
    /// Slow streaming uploads started by the harness, overtaken by newer tokens or not.
    slow_uploads: usize,
    /// Multipart writes through the gateway (s3 stores), by outcome: acknowledged, refused,
    /// unknown.
    multipart: [usize; 3],
    violations: Vec<String>,
}

/// Where the bytes live during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    Fs,
    /// moto, behind the s3 backend with `unsafe_no_conditional_writes`.
    S3,
    /// ministack, behind the s3 backend in the safe mode (no opt-in: conditional commits).
    S3Safe,
    /// Azurite, behind the azure backend (every commit conditional, by Azure's own headers).
    Azure,
    /// The GCS double (tests/common/gcs_fake), behind the gcs backend (every commit
    /// conditional on the object's generation).
    Gcs,
}

impl Store {
    /// The S3 store process this run needs, if any.
    fn s3_store(self) -> Option<common::store::StoreKind> {
        match self {
            Store::Fs | Store::Azure | Store::Gcs => None,
            Store::S3 => Some(common::store::StoreKind::Moto),
            Store::S3Safe => Some(common::store::StoreKind::Ministack),
        }
    }
}

/// CLOCK_MONOTONIC in seconds: the clock Python's `time.monotonic()` reads, so the harness's
/// own operations order against the workers'.
fn monotonic() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec it is given.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// A lock holder whose upload is slow: it takes the lease, fences, reads the list, lets the
/// lease go (as a paused holder would lose it), then streams its write over about a second.
/// Newer holders usually overtake it; then the write must be refused and leave no trace.
/// `multipart`: the holder keeps its lease instead and writes at once, as an S3 multipart
/// upload through the gateway (token fixed at creation, one part, then the completion), so that
/// on the s3 backend the commit is the store's CompleteMultipartUpload: the commit the safe
/// mode makes conditional and moto's unsafe mode reads before. Most are acknowledged; a paused
/// store or a kill -9 makes some overrun the 200 ms lease and be overtaken.
async fn slow_upload(
    gate: String,
    lease: String,
    key: &'static str,
    n: usize,
    history: PathBuf,
    multipart: bool,
) {
    let c = client();
    let holder = format!("{}-{n}", if multipart { "multipart" } else { "slow" });
    // The workers hold the leases nearly all the time: a single try would seldom get one, and
    // the fault would seldom happen. Waiting as a worker's lease expires (200 ms) gets one.
    let mut resp = None;
    for _ in 0..50 {
        let Ok(r) = c
            .post(format!("{lease}/acquire?name={key}&holder={holder}"))
            .send()
            .await
        else {
            return;
        };
        if r.status() == 200 {
            resp = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let Some(resp) = resp else {
        return;
    };
    let token = resp.json::<serde_json::Value>().await.unwrap()["token"]
        .as_u64()
        .unwrap();
    let fenced = c
        .post(format!("{gate}/v1/fences/torture/{key}"))
        .header("Fencing-Token", token.to_string())
        .send()
        .await;
    let items: Vec<String> = match c
        .get(format!("{gate}/v1/objects/torture/{key}"))
        .send()
        .await
    {
        Ok(r) if r.status() == 200 && fenced.is_ok_and(|f| f.status() == 200) => {
            r.json().await.unwrap_or_default()
        }
        Ok(r) if r.status() == 404 => Vec::new(),
        _ => {
            let _ = c
                .post(format!("{lease}/release?name={key}&holder={holder}"))
                .send()
                .await;
            return;
        }
    };
    let release = || {
        c.post(format!("{lease}/release?name={key}&holder={holder}"))
            .send()
    };
    let item = format!("{holder}-{token}");
    let mut list = items;
    list.push(item.clone());
    let body = serde_json::to_vec(&list).unwrap();
    if multipart {
        let t0 = monotonic();
        let status = multipart_write(&gate, key, token, body).await;
        let t1 = monotonic();
        let _ = release().await;
        record(&history, key, token, &item, (t0, t1), status, "multipart");
        return;
    }
    let _ = release().await;
    let chunks: Vec<Vec<u8>> = body
        .chunks(body.len().div_ceil(4))
        .map(<[u8]>::to_vec)
        .collect();
    let stream = futures::stream::iter(chunks).then(|chunk| async move {
        tokio::time::sleep(Duration::from_millis(250)).await;
        Ok::<_, std::io::Error>(chunk)
    });
    let t0 = monotonic();
    let status = c
        .put(format!("{gate}/v1/objects/torture/{key}"))
        .header("Fencing-Token", token.to_string())
        .header("Content-Length", body.len().to_string())
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .ok();
    let t1 = monotonic();
    record(&history, key, token, &item, (t0, t1), status, "stream");
}

/// A write as a multipart upload through the S3 gateway: the status of the first step that
/// failed (None: no answer), or 200 once the completion was acknowledged.
async fn multipart_write(gate: &str, key: &str, token: u64, body: Vec<u8>) -> Option<u16> {
    use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
    fn status<T, E>(
        r: &Result<
            T,
            aws_sdk_s3::error::SdkError<
                E,
                aws_smithy_runtime_api::client::orchestrator::HttpResponse,
            >,
        >,
    ) -> Option<u16> {
        r.as_ref()
            .err()
            .and_then(|e| e.raw_response().map(|r| r.status().as_u16()))
    }
    let s3 = common::moto::client_with(gate, "fencegate", "fencegate-dev-secret");
    let tok = token.to_string();
    let created = s3
        .create_multipart_upload()
        .bucket("torture")
        .key(key)
        .customize()
        .mutate_request(move |req| {
            req.headers_mut().insert("fencing-token", tok.clone());
        })
        .send()
        .await;
    let Ok(created) = created else {
        return status(&created);
    };
    let id = created.upload_id().unwrap_or_default().to_string();
    let part = s3
        .upload_part()
        .bucket("torture")
        .key(key)
        .upload_id(&id)
        .part_number(1)
        .body(body.into())
        .send()
        .await;
    let Ok(part) = part else {
        return status(&part);
    };
    let parts = CompletedMultipartUpload::builder()
        .parts(
            CompletedPart::builder()
                .part_number(1)
                .e_tag(part.e_tag().unwrap_or_default())
                .build(),
        )
        .build();
    let done = s3
        .complete_multipart_upload()
        .bucket("torture")
        .key(key)
        .upload_id(&id)
        .multipart_upload(parts)
        .send()
        .await;
    match done {
        Ok(_) => Some(200),
        Err(_) => status(&done),
    }
}

/// Appends one slow write's outcome to the history: 200 acknowledged; 409, 428 or 400
/// refused (it must not land); anything else, or no answer, may have landed.
fn record(
    history: &std::path::Path,
    key: &str,
    token: u64,
    item: &str,
    (t0, t1): (f64, f64),
    status: Option<u16>,
    via: &str,
) {
    let result = match status {
        Some(200) => "ok",
        Some(409 | 428 | 400) => "fail",
        _ => "unknown",
    };
    let line = serde_json::json!({"key": key, "token": token, "item": item, "t0": t0, "t1": t1, "result": result, "status": status, "via": via});
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(history)
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

fn histories(dir: &std::path::Path) -> Vec<Op> {
    let mut ops = Vec::new();
    let files = (0..WORKERS)
        .map(|w| format!("history-{w}.jsonl"))
        .chain(["history-slow.jsonl".to_string()]);
    for file in files {
        let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
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

async fn torture(seed: u64, secs: f64, fencing: &str, store: Store) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let listen = format!("127.0.0.1:{}", common::moto::free_port());
    let s3_store = rig::Backing::start(store, "torture-store").await;
    let config = match &s3_store {
        None => format!("[buckets.torture]\nfencing = \"{fencing}\"\n"),
        // moto ignores If-Match only on CompleteMultipartUpload; these bodies are single PUTs.
        Some(b) => format!(
            "{}[buckets.torture]\nbackend = \"store\"\nbackend_bucket = \"torture-store\"\nfencing = \"{fencing}\"\n",
            b.backend_config(true)
        ),
    };
    let mut server = Some(Server::start_at(&data, Some(&config), &listen));
    if store == Store::S3Safe {
        common::store::assert_safe_mode(server.as_ref().unwrap());
    }
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
    let mut slow = Vec::new();
    if s3_store.is_some() {
        // Beside the workers' PutObjects, a holder whose writes are multipart uploads (their
        // commit is another request to the store), from its own seeded choice of keys.
        let (gate, lease, history) = (
            gate_url.clone(),
            lease_url.clone(),
            dir.path().join("history-slow.jsonl"),
        );
        slow.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x6d70);
            let mut n = 0;
            while Instant::now() < deadline {
                n += 1;
                let key = KEYS[rng.random_range(0..KEYS.len())];
                slow_upload(gate.clone(), lease.clone(), key, n, history.clone(), true).await;
                tokio::time::sleep(Duration::from_millis(rng.random_range(50..250))).await;
            }
        }));
    }
    // The first rounds inject each kind of fault once (a pause, a store stall, a kill -9, a
    // slow upload), so a slow machine that fits only a few rounds in still exercises them all;
    // the seed decides the rest.
    let opening = [0.5, 0.25, 0.9, 0.1];
    let mut round = 0;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..400))).await;
        let drawn: f64 = rng.random();
        let roll = opening.get(round).copied().unwrap_or(drawn);
        round += 1;
        if roll < 0.2 {
            let key = KEYS[rng.random_range(0..KEYS.len())];
            report.slow_uploads += 1;
            slow.push(tokio::spawn(slow_upload(
                gate_url.clone(),
                lease_url.clone(),
                key,
                report.slow_uploads,
                dir.path().join("history-slow.jsonl"),
                false,
            )));
        } else if roll < 0.30 && s3_store.is_some() {
            // The store stops mid-write and starts again.
            let length = Duration::from_millis(rng.random_range(300..1500));
            s3_store.as_ref().unwrap().stall(length).await;
            report.store_stalls += 1;
        } else if roll < 0.80 {
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
    for s in slow {
        s.await.unwrap();
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
    for (i, result) in ["ok", "fail", "unknown"].into_iter().enumerate() {
        report.multipart[i] = ops
            .iter()
            .filter(|o| o.via == "multipart" && o.result == result)
            .count();
    }
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
        "torture seed={seed} store={store:?} fencing={fencing}: operations {}, accepted {}, rejected as stale {}, unknown {}, faults injected {} (pauses {}, kill -9 {}, store stalls {}, slow uploads {}; multipart acknowledged {}, refused {}, unknown {}), violations {}",
        report.ops, report.accepted, report.stale, report.unknown,
        report.pauses + report.kills + report.store_stalls + report.slow_uploads,
        report.pauses, report.kills, report.store_stalls, report.slow_uploads,
        report.multipart[0], report.multipart[1], report.multipart[2], report.violations.len()
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
        let r = torture(seed, secs(), "required", Store::Fs).await;
        assert!(r.violations.is_empty(), "seed {seed}: {:#?}", r.violations);
        assert!(
            r.accepted > 0 && r.pauses > 0 && r.kills > 0,
            "the run exercised nothing: {r:?}"
        );
    }
}

/// The same harness on the s3 backend (moto), with the store stopped mid-write as a fault too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_backend_histories_have_no_violations() {
    s3_histories(Store::S3).await
}

/// The same again on ministack, in the safe mode: every commit conditional, none read first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3safe_backend_histories_have_no_violations() {
    s3_histories(Store::S3Safe).await
}

/// The same on the azure backend over Azurite, Azurite stopped mid-write as the s3 stores are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_backend_histories_have_no_violations() {
    s3_histories(Store::Azure).await
}

/// The same on the gcs backend over the GCS double, its requests and answers held mid-write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcs_backend_histories_have_no_violations() {
    s3_histories(Store::Gcs).await
}

async fn s3_histories(store: Store) {
    let seed = seeds()[0];
    let r = torture(seed, secs(), "required", store).await;
    assert!(r.violations.is_empty(), "seed {seed}: {:#?}", r.violations);
    assert!(
        r.accepted > 0 && r.store_stalls > 0 && r.kills > 0,
        "the run exercised nothing: {r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_control_with_fencing_off_is_caught() {
    let r = torture(seeds()[0], secs(), "off", Store::Fs).await;
    assert!(
        !r.violations.is_empty(),
        "with fencing off the checker must find violations: {r:?}"
    );
}

// ---- The classes that target specific holes -------------------------------------------------

/// Runs one class (CI: the first fixed seed only, to stay short; FENCEGATE_TORTURE_SEED picks
/// another) and fails on any violation (the summary and the violations are printed either way).
macro_rules! no_violations {
    ($run:expr) => {{
        for seed in seeds().into_iter().take(1) {
            let (report, history) = $run(seed).await;
            assert!(report.rounds > 0, "the run exercised nothing: {report:?}");
            assert!(
                report.violations.is_empty(),
                "class {} seed {seed}: {} violations, first: {:#?}",
                report.class,
                report.violations.len(),
                &report.violations[..report.violations.len().min(5)]
            );
            drop(history);
        }
    }};
}

/// Runs a class, prints its summary, returns what it found.
async fn class<F, Fut>(
    seed: u64,
    store: Store,
    fencing: &str,
    run: F,
) -> (rig::ClassReport, Vec<rig::Ev>)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = (rig::ClassReport, Vec<rig::Ev>)>,
{
    let (report, history) = run().await;
    report.print(seed, store, fencing, &history);
    (report, history)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hangup_fs_histories_have_no_violations() {
    no_violations!(
        |seed| class(seed, Store::Fs, "required", move || hangup::run(
            seed,
            rig::class_secs(5.0)
        ))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrap_fs_histories_have_no_violations() {
    no_violations!(|seed| class(seed, Store::Fs, "required", move || wrap::run(
        seed,
        rig::class_secs(2.0)
    )))
}

/// One class that takes a backend, on one backend: a CI test of `secs` seconds by default
/// (`scripts/torture` picks them by name).
macro_rules! class_on {
    ($name:ident, $class:ident, $store:ident, $secs:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            no_violations!(|seed| class(seed, Store::$store, "required", move || {
                $class::run(seed, rig::class_secs($secs), Store::$store, "required")
            }))
        }
    };
}

class_on!(deletes_fs_histories_have_no_violations, deletes, Fs, 3.0);
class_on!(deletes_s3_histories_have_no_violations, deletes, S3, 3.0);
class_on!(
    deletes_s3safe_histories_have_no_violations,
    deletes,
    S3Safe,
    3.0
);
class_on!(
    deletes_azure_histories_have_no_violations,
    deletes,
    Azure,
    3.0
);
class_on!(deletes_gcs_histories_have_no_violations, deletes, Gcs, 3.0);
class_on!(
    bound_race_fs_histories_have_no_violations,
    bound_race,
    Fs,
    3.0
);
class_on!(
    bound_race_s3_histories_have_no_violations,
    bound_race,
    S3,
    3.0
);
class_on!(
    bound_race_s3safe_histories_have_no_violations,
    bound_race,
    S3Safe,
    3.0
);
class_on!(
    bound_race_azure_histories_have_no_violations,
    bound_race,
    Azure,
    3.0
);
class_on!(
    bound_race_gcs_histories_have_no_violations,
    bound_race,
    Gcs,
    3.0
);
class_on!(
    scope_switch_fs_histories_have_no_violations,
    scope_switch,
    Fs,
    2.0
);
class_on!(
    scope_switch_s3_histories_have_no_violations,
    scope_switch,
    S3,
    2.0
);
class_on!(
    scope_switch_s3safe_histories_have_no_violations,
    scope_switch,
    S3Safe,
    2.0
);
class_on!(
    scope_switch_azure_histories_have_no_violations,
    scope_switch,
    Azure,
    2.0
);
class_on!(
    scope_switch_gcs_histories_have_no_violations,
    scope_switch,
    Gcs,
    2.0
);

// ---- Negative controls that need no old binary ----------------------------------------------

/// Several instances, the fence table on etcd, the store ministack (a few seconds in CI;
/// `scripts/torture --class cluster --minutes 10` for a campaign).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_histories_have_no_violations() {
    for seed in seeds().into_iter().take(1) {
        let (report, _) = class(seed, Store::S3Safe, "required", move || {
            cluster::run(seed, rig::class_secs(10.0), "required")
        })
        .await;
        assert!(report.acked > 0, "the run exercised nothing: {report:?}");
        assert!(
            report.violations.is_empty(),
            "class cluster seed {seed}: {} violations, first: {:#?}",
            report.violations.len(),
            &report.violations[..report.violations.len().min(5)]
        );
    }
}

/// The cluster class's negative control: with fencing off, its zombies land and the checker
/// sees them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_with_fencing_off_is_caught() {
    let seed = seeds()[0];
    let (r, _) = class(seed, Store::S3Safe, "off", || {
        cluster::run(seed, 6.0, "off")
    })
    .await;
    assert!(
        !r.violations.is_empty(),
        "class cluster with fencing off: the checker found nothing: {r:?}"
    );
}

/// With fencing off the same loads must be caught: the checkers see the zombies land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole_classes_with_fencing_off_are_caught() {
    let seed = seeds()[0];
    let (d, _) = class(seed, Store::Fs, "off", || {
        deletes::run(seed, 2.0, Store::Fs, "off")
    })
    .await;
    let (s, _) = class(seed, Store::Fs, "off", || {
        scope_switch::run(seed, 1.5, Store::Fs, "off")
    })
    .await;
    let (b, _) = class(seed, Store::Fs, "off", || {
        bound_race::run(seed, 2.0, Store::Fs, "off")
    })
    .await;
    for r in [d, s, b] {
        assert!(
            !r.violations.is_empty(),
            "class {} with fencing off: the checker found nothing: {r:?}",
            r.class
        );
    }
}

fn ev(who: &str, op: &'static str, target: &str, token: u64, t0: f64, t1: f64) -> rig::Ev {
    rig::Ev {
        who: who.into(),
        op,
        via: "synthetic",
        target: target.into(),
        scope: target.into(),
        token: Some(token),
        t0,
        t1,
        status: Some(200),
        acked: true,
        ..rig::Ev::default()
    }
}

#[test]
fn checker_self_test_hangup() {
    let b = ev("B", "put", "hang/k", 6, 1.0, 1.1);
    let mut a = ev("A", "put", "hang/k", 5, 0.9, 0.95);
    (a.status, a.acked) = (None, false);
    let good = ev("reader", "get", "hang/k", 6, 1.2, 1.3);
    let bad = ev("reader", "get", "hang/k", 5, 1.4, 1.5);
    assert!(hangup::check(&[a.clone(), b.clone(), good.clone()]).is_empty());
    let v = hangup::check(&[a, b, good, bad]);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(v[0].contains("token 5"), "{v:#?}");
}

#[test]
fn checker_self_test_deletes() {
    let del = ev("new-holder", "delete", "del/k", 7, 1.0, 1.1);
    let zombie = ev("zombie", "put", "del/k", 6, 1.2, 1.3);
    assert_eq!(deletes::check(&[del.clone(), zombie.clone()]).len(), 1);
    // A 404 of the native API acknowledges nothing; a refused zombie is fine.
    let mut unacked = del.clone();
    (unacked.status, unacked.acked) = (Some(404), false);
    assert!(deletes::check(&[unacked, zombie.clone()]).is_empty());
    let mut refused = zombie;
    (refused.status, refused.acked) = (Some(409), false);
    assert!(deletes::check(&[del, refused]).is_empty());
}

#[test]
fn checker_self_test_wrap() {
    let g = |token, t0| {
        let mut e = ev("w", "acquire", "L", token, t0, t0 + 0.01);
        e.scope.clear();
        e
    };
    let good = [g(1, 1.0), g(2, 2.0), g(3, 3.0)];
    assert!(wrap::check(&good).is_empty());
    let mut bad = good.to_vec();
    bad.push(g(1, 4.0));
    assert_eq!(wrap::check(&bad).len(), 1);
    let mut five = g(4, 5.0);
    five.status = Some(500);
    assert_eq!(wrap::check(&[five]).len(), 1);
    let top = ev("setup", "advance", "default/ov", u64::MAX, 0.0, 0.1);
    let mut read = ev("reader", "fence-read", "default/ov", 0, 1.0, 1.1);
    read.acked = false;
    assert_eq!(wrap::check(&[top, read]).len(), 1);
}

#[test]
fn checker_self_test_bound_race() {
    let foreign = ev("foreign", "put", "race/s0", 11, 1.0, 1.1);
    let mut grant = ev("h1", "acquire-bound", "race-0", 11, 1.2, 1.3);
    grant.scope = "race/s0".into();
    assert_eq!(
        bound_race::check(&[foreign.clone(), grant.clone()]).len(),
        1
    );
    // Raced ahead: sent first, answered before the grant.
    let mut raced = grant.clone();
    raced.t0 = 1.05;
    assert_eq!(bound_race::check(&[foreign.clone(), raced]).len(), 1);
    // The grant answered first: the foreign write came after it (equal tokens are allowed).
    let mut after = grant.clone();
    (after.t0, after.t1) = (0.9, 1.05);
    assert!(bound_race::check(&[foreign.clone(), after]).is_empty());
    let mut above = grant;
    above.token = Some(12);
    assert!(bound_race::check(&[foreign, above]).is_empty());
}

#[test]
fn checker_self_test_scope_switch() {
    let mut a = ev("holder", "put", "hdr/o", 10, 1.0, 1.1);
    a.scope = "lockA".into();
    let mut z = ev("zombie", "put", "hdr/o", 9, 1.2, 1.3);
    z.scope = "lockA-x".into();
    assert_eq!(scope_switch::check(&[a.clone(), z.clone()]).len(), 1);
    let mut d = ev("holder", "delete", "hdr/o", 10, 1.0, 1.1);
    d.scope = "lockA".into();
    assert_eq!(scope_switch::check(&[d, z.clone()]).len(), 1);
    let mut t = z;
    (t.token, t.takeover) = (Some(11), true);
    assert!(scope_switch::check(&[a, t]).is_empty());
}

#[test]
fn checker_self_test_cluster() {
    let put = |who: &str, token: u64, t0: f64, t1: f64, body: &str| rig::Ev {
        note: body.into(),
        ..ev(who, "put", "k0", token, t0, t1)
    };
    let get = |token: u64, t0: f64, t1: f64, body: &str| rig::Ev {
        note: body.into(),
        ..ev("reader", "get", "k0", token, t0, t1)
    };
    let a = put("holder", 1, 0.0, 1.0, "one");
    let b = put("holder", 3, 2.0, 3.0, "three");
    let z = put("zombie", 2, 0.5, 4.0, "two");
    // A read after token 3's acknowledgement that shows the zombie's token 2: caught.
    let (v, aba) = cluster::check(
        &[a.clone(), b.clone(), z.clone(), get(2, 5.0, 5.1, "two")],
        &[],
    );
    assert_eq!((v.len(), aba.len()), (1, 0), "{v:?}");
    // The same when token 3 rewrote token 1's bytes (the ETag ABA, which bounded intents
    // close): a violation, also counted apart.
    let b_same = put("holder", 3, 2.0, 3.0, "one");
    let (v, aba) = cluster::check(
        &[a.clone(), b_same, z.clone(), get(2, 5.0, 5.1, "two")],
        &[],
    );
    assert_eq!((v.len(), aba.len()), (1, 1));
    // After an acknowledged delete with token 3, a read that shows token 2's object: caught
    // (F3); a 404 is fine.
    let d = rig::Ev {
        note: String::new(),
        ..ev("holder", "delete", "k0", 3, 2.0, 3.0)
    };
    let (v, _) = cluster::check(&[a.clone(), d.clone(), get(2, 5.0, 5.1, "two")], &[]);
    assert_eq!(v.len(), 1, "{v:?}");
    let mut gone = get(0, 5.0, 5.1, "");
    (gone.token, gone.status, gone.acked) = (None, Some(404), false);
    let (v, _) = cluster::check(&[a.clone(), d, gone], &[]);
    assert!(v.is_empty(), "{v:?}");
    // After an acknowledged advance to 3, the object changes from token 1's bytes to the
    // zombie's token 2 before anything newer was sent: caught (F1). Unchanged: fine.
    let adv = ev("holder", "advance", "k0", 3, 2.0, 3.0);
    let (v, _) = cluster::check(
        &[
            a.clone(),
            adv.clone(),
            z.clone(),
            get(1, 3.5, 3.6, "one"),
            get(2, 5.0, 5.1, "two"),
        ],
        &[],
    );
    assert_eq!(v.len(), 1, "{v:?}");
    let (v, _) = cluster::check(
        &[
            a.clone(),
            adv,
            get(1, 3.5, 3.6, "one"),
            get(1, 5.0, 5.1, "one"),
        ],
        &[],
    );
    assert!(v.is_empty(), "{v:?}");
    // A read of token 3: fine. An acknowledgement inside a quorum loss: caught.
    let (v, _) = cluster::check(&[a.clone(), b.clone(), get(3, 5.0, 5.1, "three")], &[]);
    assert!(v.is_empty(), "{v:?}");
    let (v, _) = cluster::check(&[a, b], &[(1.5, 3.5)]);
    assert_eq!(v.len(), 1, "{v:?}");
}
