//! Class `wrap`: the top of the token space. A scope is advanced to within a few tokens of
//! u64::MAX; a lease is acquired unbound a few times (small tokens), then bound to that scope
//! again and again (each grant must be above the scope's highest, until nothing is left),
//! interleaved with more unbound acquires. Tokens are checked after every step.
//!
//! The promise: for each lease name, every grant's token is above every token granted before
//! (never equal, never wrapped back to a small number); no 5xx; a scope's highest never goes
//! down. An acquire that cannot grow the token must be refused (a 4xx), not granted.

use super::rig::{by_target, timed, ClassReport, Ev, Rig};
use super::Store;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};

const BUCKET: &str = "default";

async fn acquire(
    c: &reqwest::Client,
    rig: &Rig,
    lease: &str,
    holder: &str,
    bind: Option<&str>,
) -> Ev {
    let mut body = serde_json::json!({"holder": holder, "ttl_ms": 60_000});
    if let Some(key) = bind {
        body["bucket"] = BUCKET.into();
        body["key"] = key.into();
    }
    let (t0, t1, r) = timed(
        c.post(format!("{}/v1/leases/{lease}", rig.url))
            .json(&body)
            .send(),
    )
    .await;
    let mut ev = Ev {
        who: holder.into(),
        op: if bind.is_some() {
            "acquire-bound"
        } else {
            "acquire"
        },
        via: "native",
        target: lease.into(),
        scope: bind.map(|k| format!("{BUCKET}/{k}")).unwrap_or_default(),
        t0,
        t1,
        ..Ev::default()
    };
    if let Ok(r) = r {
        ev.status = Some(r.status().as_u16());
        let v: serde_json::Value = r.json().await.unwrap_or_default();
        ev.acked = ev.status == Some(200);
        if ev.acked {
            ev.token = v["token"].as_u64();
        } else {
            ev.note = v["error"].as_str().unwrap_or_default().to_string();
        }
    }
    ev
}

async fn release(c: &reqwest::Client, rig: &Rig, lease: &str, ev: &Ev) {
    if let Some(token) = ev.token {
        let _ = c
            .delete(format!("{}/v1/leases/{lease}", rig.url))
            .json(&serde_json::json!({"holder": ev.who, "token": token}))
            .send()
            .await;
    }
}

async fn fence_read(c: &reqwest::Client, rig: &Rig, key: &str) -> Ev {
    let (t0, t1, r) = timed(
        c.get(format!("{}/v1/fences/{BUCKET}/{key}", rig.url))
            .send(),
    )
    .await;
    let mut ev = Ev {
        who: "reader".into(),
        op: "fence-read",
        via: "native",
        target: format!("{BUCKET}/{key}"),
        t0,
        t1,
        ..Ev::default()
    };
    if let Ok(r) = r {
        ev.status = Some(r.status().as_u16());
        let v: serde_json::Value = r.json().await.unwrap_or_default();
        ev.token = v["highest"].as_u64();
        ev.note = format!("highest {}", v["highest"]);
    }
    ev
}

pub async fn run(seed: u64, secs: f64) -> (ClassReport, Vec<Ev>) {
    let rig = Rig::start(Store::Fs, &[(BUCKET, String::new())]).await;
    let c = crate::common::client();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x3a7a);
    let mut report = ClassReport::new("wrap");
    let mut history = Vec::new();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut round = 0;
    while Instant::now() < deadline {
        round += 1;
        let lease = format!("L{round}");
        let key = format!("ov{round}");
        let gap: u64 = rng.random_range(0..=2);
        let top = u64::MAX - gap;
        let (t0, t1, r) = timed(
            c.post(format!("{}/v1/fences/{BUCKET}/{key}", rig.url))
                .header("Fencing-Token", top.to_string())
                .send(),
        )
        .await;
        let status = r.ok().map(|r| r.status().as_u16());
        history.push(Ev {
            who: "setup".into(),
            op: "advance",
            via: "native",
            target: format!("{BUCKET}/{key}"),
            token: Some(top),
            t0,
            t1,
            status,
            acked: status == Some(200),
            ..Ev::default()
        });
        // A plan: a few unbound grants, then bound grants (more than the space left) mixed
        // with unbound ones, ending unbound.
        let mut plan: Vec<bool> = vec![false; rng.random_range(1..=3)];
        let bound = gap as usize + 1 + rng.random_range(0..=1);
        let mut rest: Vec<bool> = (0..bound)
            .map(|_| true)
            .chain((0..rng.random_range(0..=2)).map(|_| false))
            .collect();
        use rand::seq::SliceRandom;
        rest.shuffle(&mut rng);
        plan.push(true);
        plan.extend(rest);
        plan.push(false);
        for (i, bind) in plan.into_iter().enumerate() {
            let holder = format!("w{i}");
            let ev = acquire(&c, &rig, &lease, &holder, bind.then_some(key.as_str())).await;
            report.stat(match (bind, ev.acked) {
                (true, true) => "bound granted",
                (true, false) => "bound refused",
                (false, true) => "unbound granted",
                (false, false) => "unbound refused",
            });
            release(&c, &rig, &lease, &ev).await;
            history.push(ev);
            if bind {
                history.push(fence_read(&c, &rig, &key).await);
            }
        }
        report.rounds += 1;
    }
    report.violations = check(&history);
    report.tally(&history);
    (report, history)
}

/// Grants of one lease name strictly increase over time; no 5xx anywhere; a scope's highest
/// never goes down (advances and reads of it, in time order).
pub fn check(history: &[Ev]) -> Vec<String> {
    let mut out = Vec::new();
    for e in history {
        if e.status.is_some_and(|s| s >= 500) {
            out.push(format!("{}: [{}] answered a 5xx", e.target, e));
        }
    }
    let grants: Vec<&Ev> = history
        .iter()
        .filter(|e| e.op.starts_with("acquire") && e.acked)
        .collect();
    let by_lease = by_target(grants.iter().copied(), |e| &e.target);
    for b in &grants {
        // The highest grant that was answered before this one was asked for.
        let before = by_lease[b.target.as_str()]
            .iter()
            .filter(|a| a.t1 < b.t0)
            .max_by_key(|a| a.token);
        if let Some(a) = before {
            if b.token <= a.token {
                out.push(format!(
                    "lease {}: [{}] granted a token not above [{}] granted before",
                    b.target, b, a
                ));
            }
        }
    }
    let fences: Vec<&Ev> = history
        .iter()
        .filter(|e| {
            (e.op == "fence-read" || (e.op == "advance" && e.acked)) && e.status == Some(200)
        })
        .collect();
    let by_scope = by_target(fences.iter().copied(), |e| &e.target);
    for b in &fences {
        let before = by_scope[b.target.as_str()]
            .iter()
            .filter(|a| a.t1 < b.t0)
            .max_by_key(|a| a.token);
        if let Some(a) = before {
            if b.token < a.token {
                out.push(format!(
                    "scope {}: [{}] shows a highest below [{}]",
                    b.target, b, a
                ));
            }
        }
    }
    out
}
