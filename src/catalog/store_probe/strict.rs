//! The verdict of a store with no opt-in (azure, gcs): one row per condition the probe tried
//! alone, the race, and the clock compared with the service's, whose clock expires each commit's
//! credential (a SAS, a signed URL). A store that fails any row is refused.

use super::{honoured, Row, Verdict};
use crate::backend::clock::{check_offset, Guarding};
use crate::backend::probe_race::Race;
use crate::backend::strict::{random_id, StrictStore};
use crate::config::Config;
use std::time::Duration;

/// `probe-store` on strict backend `name`: each of `targets` (bucket, prefix) as `make` builds
/// its backend, probed with `writers` in the race. `action`: what fencegate does with a
/// condition the service honours.
pub async fn probe_store<B: StrictStore>(
    config: &Config,
    name: &str,
    targets: Vec<(String, String)>,
    writers: usize,
    (make, commit_deadline_secs): (impl Fn(&str, &str) -> B, u64),
    action: fn(&str) -> &'static str,
) -> Result<Vec<Verdict>, String> {
    let mut verdicts = Vec::new();
    for (bucket, prefix) in targets {
        let backend = make(&bucket, &prefix);
        let fail = |e: String| format!("{} {bucket}: {e}", B::BUCKET_WORD);
        backend
            .check_exists()
            .await
            .map_err(|e| fail(e.to_string()))?;
        // Interrupted (Ctrl-C), the probe stops where it is and removes what it wrote.
        let run = random_id();
        let report = tokio::select! {
            report = backend.probe_run(&run, writers) => report,
            _ = tokio::signal::ctrl_c() => {
                backend.remove_run(&run).await;
                Err("interrupted; the probe's scratch objects are removed".into())
            }
        };
        let report = report.map_err(|e| fail(format!("the probe failed: {e}")))?;
        let offset = backend.clock_offset_now().await.map_err(fail)?;
        let clock = clock(
            offset,
            config,
            Duration::from_secs(commit_deadline_secs),
            B::CLOCK_MARGIN,
        );
        verdicts.push(verdict(Probed {
            backend: name,
            store_bucket: backend.store_bucket().to_string(),
            prefix: backend.prefix().to_string(),
            conditions: B::CONDITIONS,
            ignored: &report.ignored,
            action,
            race: &report.race,
            race_result: report.race.result(),
            refusal: (!report.safe()).then(|| backend.refusal(&report)),
            clock,
            credential: B::CREDENTIAL,
        }));
    }
    Ok(verdicts)
}

/// What a strict store's probe found, and how to tell it.
struct Probed<'a> {
    backend: &'a str,
    store_bucket: String,
    prefix: String,
    conditions: &'a [&'static str],
    ignored: &'a [&'static str],
    /// What fencegate does with a condition the service honours.
    action: fn(&str) -> &'static str,
    race: &'a Race,
    race_result: String,
    /// Why the service is refused, when it is.
    refusal: Option<String>,
    /// What the clock check found, and its refusal.
    clock: (String, Result<(), String>),
    /// The credential each commit carries, which expires by the service's clock.
    credential: &'static str,
}

/// The rows and guarantees of `p`.
fn verdict(p: Probed) -> Verdict {
    let refuse = "refuses to start: a stale write could overwrite a newer one";
    let mut rows: Vec<Row> = p
        .conditions
        .iter()
        .map(|condition| {
            let ok = !p.ignored.contains(condition);
            Row {
                capability: condition.to_string(),
                result: honoured(ok),
                ok,
                action: if ok { (p.action)(condition) } else { refuse }.into(),
            }
        })
        .collect();
    rows.push(Row {
        capability: format!("{} writers race with {}", p.race.writers, p.race.names()),
        result: p.race_result,
        ok: p.race.held(),
        action: if p.race.held() {
            "nothing more: the condition holds under concurrency".into()
        } else {
            refuse.into()
        },
    });
    let mut refusals: Vec<String> = p.refusal.into_iter().collect();
    let (offset, clock) = p.clock;
    rows.push(Row {
        capability: "clock against the service's".into(),
        result: offset,
        ok: clock.is_ok(),
        action: match &clock {
            Ok(()) => format!("holds an object whose commit's answer was lost until its {} has expired by the service's clock", p.credential),
            Err(_) => format!("refuses to start: a commit's {} expires by the service's clock", p.credential),
        },
    });
    if let Err(e) = clock {
        refusals.push(e);
    }
    let safe = refusals.is_empty();
    let guarantees = if safe {
        vec![
            "fencing: no write or delete with a token below one recorded for its scope ever lands".into(),
            "conditional requests through fencegate (If-Match, If-None-Match on PutObject, CopyObject and CompleteMultipartUpload) are decided atomically: of writers racing with If-None-Match: *, exactly one wins".into(),
            "writes made around fencegate are never overwritten: the service checks every commit's condition, and fencegate reports them (BypassDetected)".into(),
            "deletes are conditional on the version fencegate committed".into(),
            format!("cluster mode (several instances on one etcd table) may serve this store: each commit's {} expires at its intent's deadline", p.credential),
        ]
    } else {
        vec!["none: serve refuses to start on this store".into()]
    };
    Verdict {
        backend: p.backend.to_string(),
        store_bucket: p.store_bucket,
        prefix: p.prefix,
        safe,
        starts: safe,
        etags_are_md5: false,
        capabilities: rows,
        races: vec![p.race.clone()],
        refusals,
        accepted: Vec::new(),
        guarantees,
    }
}

/// The clock check `serve` makes with this configuration: `margin` for one instance (its
/// commit deadline `deadline`), or the cluster's `max_clock_skew_ms` on a shared table.
fn clock(
    offset: (i64, i64),
    config: &Config,
    deadline: Duration,
    margin: Duration,
) -> (String, Result<(), String>) {
    let checked = match &config.etcd {
        Some(etcd) => check_offset(
            offset,
            Duration::from_secs(etcd.intent_ttl_secs),
            Duration::from_millis(etcd.max_clock_skew_ms),
            Guarding::Cluster,
        ),
        None => check_offset(offset, deadline, margin, Guarding::OneInstance),
    };
    (format!("ahead by {}..{} ms", offset.0, offset.1), checked)
}
