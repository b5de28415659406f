//! Class `scope_switch`: header-scoped buckets (`scope = "header"`), where the client names the
//! lock in `Fencing-Scope`. The lock holder writes an object under its scope; zombies then try
//! the same object under the same scope with an older token, under a look-alike scope
//! (`lockA-x`) or an unrelated one with an older token, delete it and re-create it that way;
//! new holders go on under the bound scope or take the object over explicitly
//! (`Fencing-Scope-Takeover: <bound scope>` with a token above everything written).
//!
//! The promise: once a write or delete with token T under scope S is acknowledged for an object
//! a lock owns (every round's object, from its first write on), no write or delete with a lower
//! token under ANY scope is acknowledged for that object afterwards, unless it is an explicit
//! takeover.

use super::rig::{ack_order, timed, ClassReport, Ev, Rig};
use super::Store;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};

const BUCKET: &str = "hdr";

#[allow(clippy::too_many_arguments)]
async fn op(
    c: &reqwest::Client,
    rig: &Rig,
    who: &str,
    delete: bool,
    key: &str,
    scope: &str,
    token: u64,
    takeover: Option<&str>,
) -> Ev {
    let url = rig.object_url(BUCKET, key);
    let mut req = if delete {
        c.delete(url)
    } else {
        c.put(url).body(format!("{who} {scope} {token}"))
    };
    req = req
        .header("Fencing-Token", token.to_string())
        .header("Fencing-Scope", scope);
    if let Some(bound) = takeover {
        req = req.header("Fencing-Scope-Takeover", bound);
    }
    let (t0, t1, r) = timed(req.send()).await;
    let mut ev = Ev {
        who: who.into(),
        op: if delete { "delete" } else { "put" },
        via: "native",
        target: format!("{BUCKET}/{key}"),
        scope: scope.into(),
        token: Some(token),
        takeover: takeover.is_some(),
        t0,
        t1,
        ..Ev::default()
    };
    if let Ok(r) = r {
        let status = r.status().as_u16();
        ev.status = Some(status);
        ev.acked = status == 200 || (delete && status == 204);
        if !ev.acked {
            let v: serde_json::Value = r.json().await.unwrap_or_default();
            ev.note = v["error"].as_str().unwrap_or_default().to_string();
        }
    }
    ev
}

fn lower(rng: &mut StdRng, top: u64) -> u64 {
    top.saturating_sub(rng.random_range(1..=5))
}

pub async fn run(seed: u64, secs: f64, store: Store, fencing: &str) -> (ClassReport, Vec<Ev>) {
    let rig = Rig::start(
        store,
        &[(
            BUCKET,
            format!("scope = \"header\"\nfencing = \"{fencing}\"\nfenced_deletes = true"),
        )],
    )
    .await;
    let c = crate::common::client();
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5c0e);
    let mut report = ClassReport::new("scope_switch");
    let mut history: Vec<Ev> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut round = 0;
    while Instant::now() < deadline {
        round += 1;
        let key = format!("o{round}/{}", rng.random_range(0..100));
        let first = format!("lock{round}");
        let mut bound = first.clone();
        let mut top: u64 = rng.random_range(100..1_000_000);
        let e = op(&c, &rig, "holder", false, &key, &bound, top, None).await;
        report.stat(if e.acked {
            "bound"
        } else {
            "first write refused"
        });
        let bound_now = e.acked;
        history.push(e);
        if !bound_now {
            // The promise is about an object a lock owns; a delete of a key no lock owns
            // binds nothing, so another lock may write it next with any token.
            continue;
        }
        for i in 0..rng.random_range(4..=9) {
            let alt = match rng.random_range(0..3) {
                0 => format!("{bound}-x"),
                1 => format!("{first}-{i}"),
                _ => format!("other{round}-{}", rng.random_range(0..1000)),
            };
            let roll = rng.random_range(0..100);
            let e = if roll < 15 {
                report.stat("stale, same scope");
                let t = lower(&mut rng, top);
                op(
                    &c,
                    &rig,
                    "zombie",
                    rng.random_bool(0.3),
                    &key,
                    &bound,
                    t,
                    None,
                )
                .await
            } else if roll < 45 {
                report.stat("stale, other scope");
                let t = lower(&mut rng, top);
                op(&c, &rig, "zombie", false, &key, &alt, t, None).await
            } else if roll < 55 {
                report.stat("stale delete, other scope");
                let t = lower(&mut rng, top);
                op(&c, &rig, "zombie", true, &key, &alt, t, None).await
            } else if roll < 70 {
                // The holder deletes; a zombie re-creates it under another scope.
                report.stat("delete then re-create");
                top += rng.random_range(0..=2);
                let d = op(&c, &rig, "holder", true, &key, &bound, top, None).await;
                history.push(d);
                let t = lower(&mut rng, top);
                op(&c, &rig, "zombie", false, &key, &alt, t, None).await
            } else if roll < 85 {
                report.stat("holder writes on");
                top += rng.random_range(0..=3);
                op(&c, &rig, "holder", false, &key, &bound, top, None).await
            } else {
                report.stat("takeover");
                top += rng.random_range(1..=3);
                let e = op(&c, &rig, "taker", false, &key, &alt, top, Some(&bound)).await;
                if e.acked {
                    bound = alt;
                }
                e
            };
            history.push(e);
        }
        report.rounds += 1;
    }
    report.violations = check(&history);
    report.tally(&history);
    (report, history)
}

pub fn check(history: &[Ev]) -> Vec<String> {
    ack_order(history, |e| e.takeover)
}
