//! Class `hangup` (fs backend): a writer hangs up mid-commit. Writer A PUTs a key whose parent
//! directories do not exist yet (a deep key, a few hundred levels, so the commit is slow), then
//! resets its connection (SO_LINGER 0, the response never read) 0-50 ms after the body went
//! out. Writer B PUTs the same key with a higher token around the time of the reset. The
//! harness then reads the key again and again until nothing changes any more.
//!
//! The promise: once B's write is acknowledged, A's (older) bytes never appear again.

use super::rig::{by_target, timed, ClassReport, DiskLoad, Ev, Rig};
use super::{monotonic, Store};
use rand::{Rng, SeedableRng};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const BUCKET: &str = "hang";

/// Sends a whole PUT on a raw socket, waits `hold`, then closes with RST (SO_LINGER 0). Returns
/// (sent, reset, status of an answer that arrived before the reset, if any).
fn put_then_reset(
    addr: SocketAddr,
    path: &str,
    token: u64,
    body: &[u8],
    hold: Duration,
) -> (f64, f64, Option<u16>) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let _ = s.set_nodelay(true);
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: {addr}\r\nFencing-Token: {token}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let t0 = monotonic();
    let _ = s
        .write_all(head.as_bytes())
        .and_then(|()| s.write_all(body));
    std::thread::sleep(hold);
    // An answer that already came back means the write finished before the hang-up.
    let _ = s.set_nonblocking(true);
    let mut buf = [0u8; 64];
    let status = match s.read(&mut buf) {
        Ok(n) if n > 12 => std::str::from_utf8(&buf[9..12])
            .ok()
            .and_then(|c| c.parse().ok()),
        _ => None,
    };
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket this function owns, with a correctly sized linger struct.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(s);
    (t0, monotonic(), status)
}

/// `label`: the key as the history shows it (the real one is ~1000 bytes of `d/`).
async fn observe(c: &reqwest::Client, rig: &Rig, key: &str, label: &str, who: &str) -> Ev {
    let (t0, t1, resp) = timed(c.get(rig.object_url(BUCKET, key)).send()).await;
    let mut ev = Ev {
        who: who.into(),
        op: "get",
        via: "native",
        target: label.to_string(),
        t0,
        t1,
        ..Ev::default()
    };
    if let Ok(r) = resp {
        ev.status = Some(r.status().as_u16());
        ev.token = r
            .headers()
            .get("fencing-token")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        ev.note = r.text().await.unwrap_or_default();
    }
    ev
}

pub async fn run(seed: u64, secs: f64) -> (ClassReport, Vec<Ev>) {
    let rig = Rig::start(Store::Fs, &[(BUCKET, String::new())]).await;
    let c = crate::common::client();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x4a4e_4755);
    let mut report = ClassReport::new("hangup");
    let mut history = Vec::new();
    let mut keys = Vec::new();
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(secs);
    let mut round = 0;
    while Instant::now() < deadline {
        round += 1;
        // Most rounds with the disk busy: every fsync of the commit's new directories is slow.
        let _load = rng.random_bool(0.75).then(|| DiskLoad::start(&rig.data));
        let depth = rng.random_range(250..=480);
        let key = format!("r{round}/{}f", "d/".repeat(depth));
        let label = format!("{BUCKET}/r{round}/(d/ x{depth})f");
        let path = format!("/v1/objects/{BUCKET}/{key}");
        let base: u64 = rng.random_range(1..1_000_000);
        let (ta, tb) = (base, base + rng.random_range(1..=3));
        let body_a = format!("A r{round} token {ta}");
        let hold = Duration::from_millis(rng.random_range(0..=50));
        // B goes out before, at, or just after A's reset.
        let b_after = Duration::from_millis(rng.random_range(0..=hold.as_millis() as u64 + 8));
        let addr = rig.server.addr;
        let (pa, ba) = (path.clone(), body_a.clone());
        let a =
            tokio::task::spawn_blocking(move || put_then_reset(addr, &pa, ta, ba.as_bytes(), hold));
        tokio::time::sleep(b_after).await;
        let body_b = format!("B r{round} token {tb}");
        let (t0, t1, resp) = timed(
            c.put(rig.object_url(BUCKET, &key))
                .header("Fencing-Token", tb.to_string())
                .body(body_b.clone())
                .send(),
        )
        .await;
        let status = resp.ok().map(|r| r.status().as_u16());
        let (a0, a1, a_status) = a.await.unwrap();
        history.push(Ev {
            who: "A".into(),
            op: "put",
            via: "raw-rst",
            target: label.clone(),
            token: Some(ta),
            t0: a0,
            t1: a1,
            status: a_status,
            acked: a_status == Some(200),
            note: format!("hung up after {} ms", hold.as_millis()),
            ..Ev::default()
        });
        history.push(Ev {
            who: "B".into(),
            op: "put",
            via: "native",
            target: label.clone(),
            token: Some(tb),
            t0,
            t1,
            status,
            acked: status == Some(200),
            ..Ev::default()
        });
        report.stat(if a_status.is_some() {
            "A answered before its hang-up"
        } else {
            "A hung up unanswered"
        });
        if status != Some(200) {
            report.stat("B not acknowledged");
        }
        history.push(observe(&c, &rig, &key, &label, "reader").await);
        keys.push((key, label));
        report.rounds += 1;
    }
    report
        .stats
        .push(("ms of rounds", started.elapsed().as_millis() as usize));
    // Let the abandoned commits finish: read every key until two passes in a row agree, for at
    // most as long as the run (5-30 s; most violations show in the read right after B's answer).
    let settle = Instant::now();
    let settle_cap = Duration::from_secs_f64(secs.clamp(5.0, 30.0));
    let mut last: Vec<(Option<u64>, String)> = Vec::new();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut now = Vec::new();
        for (key, label) in &keys {
            let ev = observe(&c, &rig, key, label, "final-reader").await;
            now.push((ev.token, ev.note.clone()));
            history.push(ev);
        }
        if now == last || settle.elapsed() > settle_cap {
            break;
        }
        last = now;
    }
    report
        .stats
        .push(("ms settling", settle.elapsed().as_millis() as usize));
    report.violations = check(&history);
    report.tally(&history);
    (report, history)
}

/// Every read that starts after a write was acknowledged must return that write or a newer
/// one: never bytes written with a lower token, and never nothing. One line per object (the
/// first read that broke it), so the count is the number of objects hit.
pub fn check(history: &[Ev]) -> Vec<String> {
    let mut out = Vec::new();
    let mut hit = std::collections::HashSet::new();
    let puts = by_target(history.iter().filter(|p| p.op == "put" && p.acked), |e| {
        &e.target
    });
    for g in history.iter().filter(|e| e.op == "get") {
        if hit.contains(&g.target) {
            continue;
        }
        let newest = puts
            .get(g.target.as_str())
            .into_iter()
            .flatten()
            .filter(|p| p.t1 < g.t0)
            .max_by_key(|p| p.token);
        let Some(p) = newest else { continue };
        match (g.status, g.token) {
            (Some(200), Some(t)) if Some(t) < p.token => out.push(format!(
                "{}: [{}] returned bytes written with token {t} after [{}] had been acknowledged",
                g.target, g, p
            )),
            (Some(404), _) => out.push(format!(
                "{}: [{}] found nothing after [{}] had been acknowledged",
                g.target, g, p
            )),
            _ => continue,
        }
        hit.insert(g.target.clone());
    }
    out
}
