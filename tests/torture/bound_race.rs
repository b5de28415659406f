//! Class `bound_race`: a bound lease grant races a foreign writer. A scope stands at highest H;
//! a writer holding a token from another source writes (or advances the fence) with H+1 (or
//! H+2) while a lease bound to that scope is acquired, the two sent 0-4 ms apart in either
//! order (or one after the other), often with the disk busy so that every fsync is slow.
//!
//! The promise: a bound grant fences out whoever wrote before it. Its token must be strictly
//! greater than every token acknowledged on the scope
//! * whose acknowledgement arrived before the grant request was sent (`definite`), and
//! * whose request was sent before the grant request and whose acknowledgement arrived before
//!   the grant's (`raced-ahead`): the foreign write was in before the grant. (Were the grant
//!   first, the foreign write would need the scope's lock after the grant released it plus a
//!   synced record, so its answer could not beat the grant's, which is sent at once.)

use super::rig::{by_target, timed, ClassReport, DiskLoad, Ev, Rig};
use super::Store;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};

const BUCKET: &str = "race";

async fn foreign(c: &reqwest::Client, rig: &Rig, key: &str, token: u64, advance: bool) -> Ev {
    let req = if advance {
        c.post(format!("{}/v1/fences/{BUCKET}/{key}", rig.url))
    } else {
        c.put(rig.object_url(BUCKET, key))
            .body(format!("foreign token {token}"))
    };
    let (t0, t1, r) = timed(req.header("Fencing-Token", token.to_string()).send()).await;
    let status = r.ok().map(|r| r.status().as_u16());
    Ev {
        who: "foreign".into(),
        op: if advance { "advance" } else { "put" },
        via: "native",
        target: format!("{BUCKET}/{key}"),
        scope: format!("{BUCKET}/{key}"),
        token: Some(token),
        t0,
        t1,
        status,
        acked: status == Some(200),
        ..Ev::default()
    }
}

async fn grant(c: &reqwest::Client, rig: &Rig, lease: &str, holder: &str, key: &str) -> Ev {
    let body = serde_json::json!({"holder": holder, "ttl_ms": 60_000, "wait_ms": 2000, "bucket": BUCKET, "key": key});
    let (t0, t1, r) = timed(
        c.post(format!("{}/v1/leases/{lease}", rig.url))
            .json(&body)
            .send(),
    )
    .await;
    let mut ev = Ev {
        who: holder.into(),
        op: "acquire-bound",
        via: "native",
        target: lease.into(),
        scope: format!("{BUCKET}/{key}"),
        t0,
        t1,
        ..Ev::default()
    };
    if let Ok(r) = r {
        ev.status = Some(r.status().as_u16());
        let v: serde_json::Value = r.json().await.unwrap_or_default();
        ev.acked = ev.status == Some(200);
        ev.token = v["token"].as_u64();
        if !ev.acked {
            ev.note = v["error"].as_str().unwrap_or_default().to_string();
        }
    }
    ev
}

pub async fn run(seed: u64, secs: f64, store: Store, fencing: &str) -> (ClassReport, Vec<Ev>) {
    let rig = Rig::start(store, &[(BUCKET, format!("fencing = \"{fencing}\""))]).await;
    let c = crate::common::client();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0xb0_0d);
    let mut report = ClassReport::new("bound_race");
    let mut history = Vec::new();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut round = 0;
    let mut load = None;
    while Instant::now() < deadline {
        round += 1;
        if round % 8 == 1 {
            drop(load.take());
            load = rng.random_bool(0.6).then(|| DiskLoad::start(&rig.data));
        }
        let key = format!("s{}", rng.random_range(0..4));
        let lease = format!("race-{}", rng.random_range(0..3));
        // The scope jumps well above anything the lease granted, so the grant's token comes
        // from the scope's highest.
        let h = 1_000_000 * round as u64 + rng.random_range(0..1000);
        let (t0, t1, r) = timed(
            c.post(format!("{}/v1/fences/{BUCKET}/{key}", rig.url))
                .header("Fencing-Token", h.to_string())
                .send(),
        )
        .await;
        let status = r.ok().map(|r| r.status().as_u16());
        history.push(Ev {
            who: "setup".into(),
            op: "advance",
            via: "native",
            target: format!("{BUCKET}/{key}"),
            scope: format!("{BUCKET}/{key}"),
            token: Some(h),
            t0,
            t1,
            status,
            acked: status == Some(200),
            ..Ev::default()
        });
        let t = h + if rng.random_bool(0.85) { 1 } else { 2 };
        let advance = rng.random_bool(0.4);
        let gap = Duration::from_micros(rng.random_range(0..4000));
        let foreign_first = rng.random_bool(0.75);
        let holder = format!("h{round}");
        let (f, g) = if rng.random_bool(0.2) {
            // No race at all: the foreign write is answered, then the grant is asked for.
            report.stat("sequential");
            let f = foreign(&c, &rig, &key, t, advance).await;
            (f, grant(&c, &rig, &lease, &holder, &key).await)
        } else if foreign_first {
            tokio::join!(foreign(&c, &rig, &key, t, advance), async {
                tokio::time::sleep(gap).await;
                grant(&c, &rig, &lease, &holder, &key).await
            })
        } else {
            let (g, f) = tokio::join!(grant(&c, &rig, &lease, &holder, &key), async {
                tokio::time::sleep(gap).await;
                foreign(&c, &rig, &key, t, advance).await
            });
            (f, g)
        };
        report.stat(if g.acked { "granted" } else { "not granted" });
        if let (Some(gt), true) = (g.token, f.acked && g.acked) {
            if gt <= t {
                report.stat("grant not above the foreign token");
            }
        }
        if let Some(token) = g.token.filter(|_| g.acked) {
            let _ = c
                .delete(format!("{}/v1/leases/{lease}", rig.url))
                .json(&serde_json::json!({"holder": holder, "token": token}))
                .send()
                .await;
        }
        history.extend([f, g]);
        report.rounds += 1;
    }
    drop(load);
    report.violations = check(&history);
    report.tally(&history);
    (report, history)
}

pub fn check(history: &[Ev]) -> Vec<String> {
    let mut out = Vec::new();
    for e in history {
        if e.status.is_some_and(|s| s >= 500) {
            out.push(format!("{}: [{}] answered a 5xx", e.target, e));
        }
    }
    // Per scope, the acknowledged writes and advances in order of their answers, with the
    // running maximum of their tokens: each grant then costs a binary search plus a look at
    // the answers that arrived while it was in flight.
    let mut ops = by_target(
        history
            .iter()
            .filter(|f| f.acked && matches!(f.op, "put" | "advance" | "delete")),
        |e| &e.scope,
    );
    let mut top = std::collections::HashMap::new();
    for (scope, v) in ops.iter_mut() {
        v.sort_by(|a, b| a.t1.total_cmp(&b.t1));
        let mut best = 0;
        let running: Vec<usize> = (0..v.len())
            .map(|i| {
                if v[i].token > v[best].token {
                    best = i;
                }
                best
            })
            .collect();
        top.insert(*scope, running);
    }
    // One line per grant, against the highest foreign token that should have been below it.
    for g in history
        .iter()
        .filter(|e| e.op == "acquire-bound" && e.acked)
    {
        let Some(v) = ops.get(g.scope.as_str()) else {
            continue;
        };
        // Answered before the grant was asked for.
        let n = v.partition_point(|f| f.t1 < g.t0);
        let definite = n
            .checked_sub(1)
            .map(|i| v[top[g.scope.as_str()][i]])
            .filter(|f| f.token >= g.token);
        // Asked for before the grant, answered while it was in flight.
        let m = v.partition_point(|f| f.t1 < g.t1);
        let raced = v[n..m]
            .iter()
            .filter(|f| f.t0 < g.t0 && f.token >= g.token)
            .max_by_key(|f| f.token);
        let (kind, f) = match (definite, raced) {
            (Some(f), _) => ("definite", f),
            (None, Some(f)) => ("raced-ahead", *f),
            (None, None) => continue,
        };
        out.push(format!(
            "scope {} ({kind}): [{}] is not above [{}] acknowledged before it",
            g.scope, g, f
        ));
    }
    out
}
