//! The s3 store's rows: what the probe of `backend::s3::probe` found, what fencegate does
//! about each condition with the backend's settings (`conditional_writes`,
//! `unsafe_unconditional_deletes`), and what its clients are promised.

use super::{honoured, Row, Verdict};
use crate::backend::s3::probe::ProbeReport;
use crate::backend::s3::{self, S3Backend};
use crate::config::S3BackendConfig;

/// Concurrent writers in each race, at start-up and by default in `probe-store`.
pub const RACE_WRITERS: usize = 16;

/// The rows of `report` for backend `name` configured as `cfg`.
pub fn verdict(
    report: &ProbeReport,
    cfg: &S3BackendConfig,
    name: &str,
    backend: &S3Backend,
) -> Verdict {
    let mut rows = Vec::new();
    let mut refusals = Vec::new();
    let mut accepted = Vec::new();
    let writes_opt_in = cfg.conditional_writes() == crate::config::ConditionalWrites::Fencegate;
    for condition in s3::probe::CONDITIONS {
        let ok = !report.ignored.contains(&condition);
        // Honoured one request at a time, but not by writers racing (the race rows below).
        let raced = !report.ignored_alone.contains(&condition);
        let action = if ok {
            "commits conditionally: a write made around fencegate is never overwritten".to_string()
        } else if writes_opt_in {
            "decides the condition itself under the scope's lock, reading the version just before the commit (conditional_writes = \"fencegate\"): a write made around fencegate in between can be overwritten".to_string()
        } else {
            "refuses to start (conditional_writes = \"fencegate\" would start it: fencegate decides conditions alone)"
                .to_string()
        };
        rows.push(Row {
            capability: condition.to_string(),
            result: if raced && !ok {
                "ignored by racing writers".into()
            } else {
                honoured(ok)
            },
            ok,
            action,
        });
    }
    if !report.safe() {
        let ignored = report.ignored.join(", ");
        if writes_opt_in {
            accepted.push(format!("the store ignores {ignored} and conditional_writes = \"fencegate\": fencegate decides every condition alone, under the scope's lock; a write made around fencegate while fencegate commits the same key can be silently overwritten"));
        } else {
            refusals.push(format!(
                "the store ignores {ignored}, so fencegate cannot guarantee that writes around it are never overwritten; use a store that honours conditional writes (AWS S3, MinIO, Ceph RGW), or set conditional_writes = \"fencegate\" on backend {name}: every conditional request through fencegate is still decided atomically, only writes made around it can go undetected (docs/backends.md, \"Stores without conditional writes\")"
            ));
        }
    }
    let deletes = report.conditional_delete;
    rows.push(Row {
        capability: "If-Match on DeleteObject".into(),
        result: honoured(deletes),
        ok: deletes,
        action: if deletes {
            "deletes conditionally".into()
        } else if cfg.unsafe_unconditional_deletes {
            "checks the ETag, then deletes unconditionally (unsafe_unconditional_deletes = true): a late DELETE can remove a newer write".into()
        } else {
            "refuses to start (unsafe_unconditional_deletes = true would start it, unsafely)".into()
        },
    });
    if !deletes {
        if cfg.unsafe_unconditional_deletes {
            accepted.push("UNSAFE: the store ignores If-Match on DeleteObject and unsafe_unconditional_deletes = true; deletes check the ETag and then delete unconditionally, so a delete that times out and lands late can remove an object a newer token wrote".into());
        } else {
            refusals.push(format!(
                "the store ignores If-Match on DeleteObject, so a delete is a check followed by an unconditional DELETE, and a DELETE that times out and lands late can remove an object a newer token wrote in between; use a store that honours If-Match on DeleteObject, or set unsafe_unconditional_deletes = true on backend {name} to start anyway"
            ));
        }
    }
    rows.push(Row {
        capability: "ETags are MD5s of the bytes".into(),
        result: if report.etags_are_md5 { "yes" } else { "no" }.into(),
        // Integrity, not fencing: the store's own Content-MD5 check still applies.
        ok: true,
        action: if report.etags_are_md5 {
            "compares each ETag the store answers with the MD5 of the bytes sent".into()
        } else {
            "cannot compare ETags with the bytes sent (SSE-KMS?); relies on the store's Content-MD5 check, and warns".into()
        },
    });
    for race in &report.races {
        let result = match race.kept_winner {
            Some(false) => format!(
                "{} of {} won, but another writer's bytes were kept",
                race.won, race.writers
            ),
            _ => format!("{} of {} won", race.won, race.writers),
        };
        rows.push(Row {
            capability: format!("{} writers race with {}", race.writers, race.names()),
            result,
            ok: race.held(),
            action: if race.held() {
                "nothing more: the condition holds under concurrency".into()
            } else {
                format!("treats {} as ignored (above)", race.names())
            },
        });
    }
    let guarantees = guarantees(report, cfg);
    Verdict {
        guarantees,
        backend: name.to_string(),
        store_bucket: backend.store_bucket().to_string(),
        prefix: backend.store_prefix().to_string(),
        safe: rows.iter().all(|r| r.ok),
        starts: refusals.is_empty(),
        etags_are_md5: report.etags_are_md5,
        capabilities: rows,
        races: report.races.clone(),
        refusals,
        accepted,
    }
}

/// What a client of fencegate is promised on a store that proved `report`, with `cfg`.
fn guarantees(report: &ProbeReport, cfg: &S3BackendConfig) -> Vec<String> {
    let conditions = report.safe();
    let deletes = report.conditional_delete;
    let decides = cfg.conditional_writes() == crate::config::ConditionalWrites::Fencegate;
    if !conditions && !decides {
        return vec!["none: serve refuses to start on this store as configured".into()];
    }
    let mut g = vec![
        "fencing: no write or delete with a token below one recorded for its scope ever lands".into(),
        "conditional requests through fencegate (If-Match, If-None-Match on PutObject, CopyObject and CompleteMultipartUpload) are decided atomically: of writers racing with If-None-Match: *, exactly one wins".into(),
    ];
    g.push(if conditions {
        "writes made around fencegate are never overwritten: the store checks every commit's condition, and fencegate reports them (BypassDetected)".into()
    } else {
        "writes made around fencegate are detected when they land before fencegate reads the version for a commit; one that lands between that read and the commit is overwritten undetected (the store ignores conditions)".into()
    });
    g.push(if deletes {
        "deletes are conditional on the version fencegate committed".into()
    } else {
        "deletes check the version, then delete unconditionally: a DELETE that times out and lands late can remove a newer write".into()
    });
    g.push(if conditions && deletes && !decides {
        "cluster mode (several instances on one etcd table) may serve this store if it refuses expired presigned requests, which a cluster instance probes at start-up".into()
    } else {
        "cluster mode is refused on this store as configured (docs/design.md, \"Cluster mode on stores without conditions\")".into()
    });
    g
}

/// Probes `backend` and applies what it proved to the backend's commits; the verdict says
/// whether it may serve.
pub async fn probe(
    backend: &S3Backend,
    cfg: &S3BackendConfig,
    name: &str,
    writers: usize,
) -> Result<Verdict, String> {
    probe_as(backend, cfg, name, writers, &s3::scratch::new_run()).await
}

/// [`probe`] in scratch run `run`.
async fn probe_as(
    backend: &S3Backend,
    cfg: &S3BackendConfig,
    name: &str,
    writers: usize,
    run: &str,
) -> Result<Verdict, String> {
    let report = backend.probe_as(run, writers).await?;
    backend.set_conditional_delete(report.conditional_delete);
    backend.set_etags_are_md5(report.etags_are_md5);
    // Where the store ignores conditions, the version is read before each such commit instead.
    backend.set_conditional_commits(report.puts_safe(), report.completes_safe());
    Ok(verdict(&report, cfg, name, backend))
}

/// `probe-store` on s3 backend `name`: each of `targets` (store bucket, prefix) probed.
pub(super) async fn probe_store(
    cfg: &S3BackendConfig,
    name: &str,
    targets: Vec<(String, String)>,
    writers: usize,
) -> Result<Vec<Verdict>, String> {
    let clients = s3::build_clients(cfg)
        .await
        .map_err(|e| format!("backend {name}: {e}"))?;
    let mut verdicts = Vec::new();
    for (bucket, prefix) in targets {
        let backend = S3Backend::new(
            clients.clone(),
            &bucket,
            &prefix,
            cfg.multipart_threshold_bytes,
        );
        backend
            .check_bucket()
            .await
            .map_err(|e| format!("store bucket {bucket}: {e}"))?;
        // Interrupted (Ctrl-C), the probe stops where it is and removes what it wrote.
        let run = s3::scratch::new_run();
        let verdict = tokio::select! {
            verdict = probe_as(&backend, cfg, name, writers, &run) => verdict,
            _ = tokio::signal::ctrl_c() => {
                backend.remove_run(&run).await;
                Err("interrupted; the probe's scratch objects and uploads are removed".into())
            }
        };
        let verdict =
            verdict.map_err(|e| format!("store bucket {bucket}: the probe failed: {e}"))?;
        verdicts.push(verdict);
    }
    Ok(verdicts)
}
