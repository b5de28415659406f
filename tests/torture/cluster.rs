//! Class `cluster`: several fencegate instances over one store (ministack, or `store()`), the fence table
//! shared on a 3-member etcd cluster (scripts/cluster). Each round, a lock service hands out
//! tokens for a few keys; the holders write through random instances, and some holders turn
//! zombie (they wait, as a paused process would, then write with their old token, or hang up
//! mid-request). Now and then a newer holder rewrites bytes it read back (the identical-bytes
//! case), deletes the key, or only advances its fence (as a bound lease grant does): the
//! decisions that do not change the version an older commit in flight expects (review round
//! 12, F1 and F3). Meanwhile a chaos task SIGSTOPs instances past every timeout, kill -9s and restarts
//! them, kills the etcd leader, and takes two of the three members down (quorum loss, where
//! every write must be refused). Readers read every key through random instances.
//!
//! The promise, checked on the history: no write is acknowledged after a higher token's write
//! to the same key was (`ack_order`); a read never shows an older token than one acknowledged
//! before the read began, nor an object after an acknowledged delete with a higher token; after
//! an acknowledged fence advance, the object does not change until an operation with a higher
//! token is sent; nothing is acknowledged while etcd has no quorum. A read that shows a
//! zombie's bytes after a newer write of identical bytes was acknowledged (the ETag ABA, which
//! bounded intents close, docs/design.md) is a violation like any other; it is also counted
//! apart (`aba`), to say which kind it was.

use super::rig::{by_target, timed, ClassReport, Ev};
use crate::common::cluster::Cluster;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const INSTANCES: usize = 3;
const KEYS: usize = 4;

/// Quorum-loss windows: (start, end) on the monotonic clock, from the moment both members
/// are dead until they are started again.
type Windows = Arc<parking_lot::Mutex<Vec<(f64, f64)>>>;

async fn write(
    c: &reqwest::Client,
    url: &str,
    who: String,
    key: &str,
    token: u64,
    body: Vec<u8>,
    hang_up: bool,
) -> Ev {
    let req = c
        .put(url)
        .header("Fencing-Token", token.to_string())
        .body(body.clone());
    let (t0, t1, r) = if hang_up {
        // Gone after 0-40 ms: whatever the instance does next, nobody hears it.
        let limit = Duration::from_millis(token % 40);
        timed(async move {
            tokio::time::timeout(limit, req.send())
                .await
                .ok()
                .and_then(Result::ok)
        })
        .await
    } else {
        timed(async move { req.send().await.ok() }).await
    };
    let status = r.as_ref().map(|r| r.status().as_u16());
    Ev {
        who,
        op: "put",
        via: "native",
        target: key.to_string(),
        token: Some(token),
        t0,
        t1,
        status,
        acked: status == Some(200),
        note: String::from_utf8_lossy(&body).into_owned(),
        ..Ev::default()
    }
}

/// A holder's delete, or its fence advance (`POST /v1/fences`, what a bound lease grant does).
async fn decide(c: &reqwest::Client, url: &str, op: &'static str, key: &str, token: u64) -> Ev {
    let req = match op {
        "delete" => c.delete(url),
        _ => c.post(url),
    }
    .header("Fencing-Token", token.to_string());
    let (t0, t1, r) = timed(async move { req.send().await.ok() }).await;
    let status = r.as_ref().map(|r| r.status().as_u16());
    Ev {
        who: "holder".into(),
        op,
        via: "native",
        target: key.to_string(),
        token: Some(token),
        t0,
        t1,
        status,
        acked: status == Some(200),
        ..Ev::default()
    }
}

async fn read(c: &reqwest::Client, url: &str, key: &str) -> Ev {
    let (t0, t1, r) = timed(async { c.get(url).send().await.ok() }).await;
    let mut ev = Ev {
        who: "reader".into(),
        op: "get",
        via: "native",
        target: key.to_string(),
        t0,
        t1,
        ..Ev::default()
    };
    if let Some(r) = r {
        ev.status = Some(r.status().as_u16());
        ev.token = r
            .headers()
            .get("fencing-token")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        // A body cut off (an instance killed or stalled mid-answer) is no read of the object:
        // recorded as an empty body, it would look like an object that changed.
        match r.bytes().await {
            Ok(body) => {
                ev.note = String::from_utf8_lossy(&body).into_owned();
                ev.acked = ev.status == Some(200);
            }
            Err(_) => ev.status = None,
        }
    }
    ev
}

/// The chaos task: one fault every 0.5-2 s until `stop`.
async fn chaos(
    cluster: Arc<Cluster>,
    seed: u64,
    stop: Arc<AtomicBool>,
    windows: Windows,
    counts: Arc<[AtomicU64; 4]>,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0xc4a0);
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..2000))).await;
        let fault = rng.random_range(0..10);
        let cluster = cluster.clone();
        let instance = format!("fg{}", rng.random_range(1..=INSTANCES));
        let pause = Duration::from_millis(rng.random_range(300..2600));
        let windows = windows.clone();
        tokio::task::spawn_blocking(move || match fault {
            // An instance paused past its timeouts (etcd's are 2 s), then woken.
            0..=3 => {
                cluster.signal(&instance, "STOP");
                std::thread::sleep(pause);
                cluster.signal(&instance, "CONT");
                0
            }
            // kill -9, restarted.
            4..=6 => {
                cluster.signal(&instance, "KILL");
                std::thread::sleep(Duration::from_millis(300));
                cluster.start(&instance);
                1
            }
            // The etcd leader killed, restarted after the election.
            7 | 8 => {
                let leader = cluster.leader();
                cluster.signal(&leader, "KILL");
                std::thread::sleep(pause);
                cluster.start(&leader);
                2
            }
            // Two of three members down: no quorum.
            _ => {
                let leader = cluster.leader();
                let down: Vec<String> = ["etcd1", "etcd2", "etcd3"]
                    .iter()
                    .filter(|m| **m != leader)
                    .map(|m| m.to_string())
                    .collect();
                for m in &down {
                    cluster.signal(m, "KILL");
                }
                let from = super::monotonic();
                std::thread::sleep(Duration::from_millis(2500));
                windows.lock().push((from, super::monotonic()));
                for m in &down {
                    cluster.start(m);
                }
                3
            }
        })
        .await
        .map(|i| counts[i].fetch_add(1, Ordering::SeqCst))
        .ok();
    }
}

/// The store behind the cluster (`scripts/cluster up --store`): ministack, unless
/// FENCEGATE_TORTURE_CLUSTER_STORE names another, e.g. `ministack-nc` (a store that ignores
/// conditional writes; `scripts/torture --cluster-store`).
fn store() -> String {
    std::env::var("FENCEGATE_TORTURE_CLUSTER_STORE")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "ministack".into())
}

pub async fn run(seed: u64, secs: f64, fencing: &str) -> (ClassReport, Vec<Ev>) {
    let store = store();
    eprintln!("class cluster: {INSTANCES} instances over {store}");
    let cluster = Arc::new(Cluster::up(INSTANCES, &store));
    if fencing != "required" {
        for n in 1..=INSTANCES {
            let path = cluster.dir.path().join(format!("fg{n}.toml"));
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(
                &path,
                text.replace(
                    "[buckets.default]\n",
                    &format!("[buckets.default]\nfencing = \"{fencing}\"\n"),
                ),
            )
            .unwrap();
            cluster.signal(&format!("fg{n}"), "KILL");
            cluster.start(&format!("fg{n}"));
        }
    }
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0xc1a5);
    let mut report = ClassReport::new("cluster");
    let history = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let windows: Windows = Arc::default();
    let counts: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    let chaos = tokio::spawn(chaos(
        cluster.clone(),
        seed,
        stop.clone(),
        windows.clone(),
        counts.clone(),
    ));
    let next = AtomicU64::new(0);
    // The last bytes a reader saw per key, which a newer holder may write back.
    let mut seen: HashMap<String, Vec<u8>> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    // Zombies outlive their round: their late writes meet the next rounds' holders.
    let mut zombies = Vec::new();
    while Instant::now() < deadline {
        report.rounds += 1;
        let mut tasks = Vec::new();
        for k in 0..KEYS {
            let key = format!("k{k}");
            let t = next.fetch_add(1, Ordering::SeqCst) + 1;
            let n = rng.random_range(1..=INSTANCES);
            let url = cluster.object(n, &key);
            let zombie = rng.random_bool(0.3);
            // A holder that deletes, or only advances its fence, instead of writing.
            let other = match rng.random_range(0..20) {
                _ if zombie => None,
                0..=1 => Some("delete"),
                2..=3 => Some("advance"),
                _ => None,
            };
            if let Some(op) = other {
                report.stat(if op == "delete" {
                    "deletes"
                } else {
                    "advances"
                });
                let url = match op {
                    "delete" => url,
                    _ => cluster.url(n, &format!("/v1/fences/default/{key}")),
                };
                let (c, history) = (c.clone(), history.clone());
                tasks.push(tokio::spawn(async move {
                    let ev = decide(&c, &url, op, &key, t).await;
                    history.lock().push(ev);
                }));
                continue;
            }
            let identical = !zombie && rng.random_bool(0.15);
            let body = match seen.get(&key) {
                Some(b) if identical => {
                    report.stat("identical");
                    b.clone()
                }
                _ => format!("{key} token {t} round {}", report.rounds).into_bytes(),
            };
            let hang_up = rng.random_bool(0.05);
            let wait = Duration::from_millis(if zombie { rng.random_range(50..600) } else { 0 });
            let (c, history) = (c.clone(), history.clone());
            let who = if zombie { "zombie" } else { "holder" }.to_string();
            if zombie {
                report.stat("zombies");
            }
            let task = tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                let ev = write(&c, &url, who, &key, t, body, hang_up).await;
                history.lock().push(ev);
            });
            if zombie {
                zombies.push(task);
            } else {
                tasks.push(task);
            }
        }
        // Readers, while the round's writes are in flight and after.
        for _ in 0..KEYS {
            let key = format!("k{}", rng.random_range(0..KEYS));
            let url = cluster.object(rng.random_range(1..=INSTANCES), &key);
            let ev = read(&c, &url, &key).await;
            if ev.acked {
                seen.insert(key, ev.note.clone().into_bytes());
            }
            history.lock().push(ev);
        }
        for t in tasks {
            let _ = t.await;
        }
    }
    for z in zombies {
        let _ = z.await;
    }
    stop.store(true, Ordering::SeqCst);
    let _ = chaos.await;
    // Let any write still in the instances finish, then read every key once more.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for k in 0..KEYS {
        let key = format!("k{k}");
        for n in 1..=INSTANCES {
            let ev = read(&c, &cluster.object(n, &key), &key).await;
            history.lock().push(ev);
        }
    }
    let history = std::mem::take(&mut *history.lock());
    for (name, i) in [
        ("pauses", 0),
        ("kills", 1),
        ("leader kills", 2),
        ("quorum losses", 3),
    ] {
        for _ in 0..counts[i].load(Ordering::SeqCst) {
            report.stat(name);
        }
    }
    let (violations, aba) = check(&history, &windows.lock());
    report.violations = violations;
    for _ in 0..aba.len() {
        report.stat("aba");
    }
    report.tally(&history);
    (report, history)
}

/// The checker (see the module header). Returns the violations, and among them, apart, the
/// reads that show the ETag ABA (a zombie's write landing after identical bytes).
pub fn check(history: &[Ev], no_quorum: &[(f64, f64)]) -> (Vec<String>, Vec<String>) {
    let mut violations = super::rig::ack_order(history, |_| false);
    let mut aba = Vec::new();
    // Nothing is acknowledged by a request sent and answered while etcd had no quorum.
    for e in history
        .iter()
        .filter(|e| e.acked && matches!(e.op, "put" | "delete" | "advance"))
    {
        if no_quorum
            .iter()
            .any(|(from, to)| e.t0 > *from && e.t1 < *to)
        {
            violations.push(format!("[{e}] was acknowledged while etcd had no quorum"));
        }
    }
    let groups = by_target(history.iter(), |e| &e.target);
    for evs in groups.values() {
        let changes: Vec<&&Ev> = evs
            .iter()
            .filter(|e| matches!(e.op, "put" | "delete"))
            .collect();
        let mut reads: Vec<&&Ev> = evs
            .iter()
            .filter(|e| e.op == "get" && matches!(e.status, Some(200 | 404)))
            .collect();
        reads.sort_by(|a, b| a.t0.total_cmp(&b.t0));
        for r in &reads {
            // The highest-token write or delete acknowledged before this read began.
            let Some(w) = changes
                .iter()
                .filter(|w| w.acked && w.t1 < r.t0)
                .max_by_key(|w| w.token)
            else {
                continue;
            };
            let shown = if r.acked { r.token } else { None };
            if shown >= w.token || (w.op == "delete" && r.status == Some(404)) {
                continue;
            }
            // No object, when a newer delete was sent before the read ended: it may have
            // taken effect.
            let newer_delete = changes
                .iter()
                .any(|d| d.op == "delete" && d.token > w.token && d.t0 < r.t1);
            if r.status == Some(404) && newer_delete {
                continue;
            }
            let what = if r.status == Some(404) {
                "no object"
            } else {
                "token"
            };
            let line = format!("[{r}] shows {what} {shown:?} after [{w}] was acknowledged");
            // Identical bytes: the newer holder wrote back bytes an earlier write had written.
            if w.op == "put" && shown.is_some() {
                let earlier_same = changes
                    .iter()
                    .any(|x| x.op == "put" && x.token < w.token && x.note == w.note);
                if earlier_same {
                    aba.push(line.clone());
                }
            }
            violations.push(line);
        }
        // After an acknowledged advance to T, only an operation with a token above T may
        // change the object: every read between the advance's acknowledgement and the first
        // such operation sent shows the same thing (F1: an older commit in flight landing).
        for w in evs.iter().filter(|e| e.op == "advance" && e.acked) {
            let until = changes
                .iter()
                .filter(|e| e.token > w.token)
                .map(|e| e.t0)
                .fold(f64::INFINITY, f64::min);
            let mut window = reads.iter().filter(|r| r.t0 > w.t1 && r.t1 < until);
            let Some(first) = window.next() else {
                continue;
            };
            if let Some(r) = window.find(|r| (r.status, &r.note) != (first.status, &first.note)) {
                violations.push(format!(
                    "[{r}] differs from [{first}], both read after [{w}] was acknowledged and before any newer operation"
                ));
            }
        }
    }
    (violations, aba)
}
