//! A store's probe as fencegate acts on it, one row per capability: `serve` starts or refuses
//! by these rows, and `fencegate probe-store` prints them before any data goes through the
//! store. The rows of each kind of store are built in `s3.rs`, `azure.rs` and `gcs.rs` (the
//! last two through `strict.rs`, as neither has an opt-in); the verdict, its table and the
//! choice of the store buckets to probe are shared here.

#[cfg(feature = "azure")]
mod azure;
#[cfg(feature = "gcs")]
mod gcs;
#[cfg(feature = "s3")]
mod s3;
#[cfg(any(feature = "azure", feature = "gcs"))]
mod strict;

#[cfg(feature = "s3")]
pub use s3::{probe, RACE_WRITERS};

use crate::backend::probe_race::Race;
use crate::config::{BackendConfig, Config};

/// One capability, what the probe found, and what fencegate does about it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub capability: String,
    pub result: String,
    /// Honoured, or not needed for safety.
    pub ok: bool,
    pub action: String,
}

/// Everything the probe found, as rows, and what stops `serve` with this configuration.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verdict {
    pub backend: String,
    pub store_bucket: String,
    pub prefix: String,
    /// Every condition fencegate relies on is honoured, alone and under concurrency.
    pub safe: bool,
    /// `serve` starts on this store with the backend's settings (`conditional_writes =
    /// "fencegate"` or `unsafe_unconditional_deletes` can start it on a store that ignores
    /// conditions).
    pub starts: bool,
    /// The store's ETags are MD5s of the bytes it kept, so each answer is checked (never on
    /// azure, whose ETags are versions: the service checks each body's Content-MD5 instead).
    pub etags_are_md5: bool,
    pub capabilities: Vec<Row>,
    pub races: Vec<Race>,
    /// Why `serve` refuses to start, each with its fix.
    pub refusals: Vec<String>,
    /// Unsafe conditions an opt-in accepts: `serve` logs each at ERROR.
    pub accepted: Vec<String>,
    /// What fencegate promises on this store with the backend's settings, each a sentence.
    pub guarantees: Vec<String>,
}

fn honoured(ok: bool) -> String {
    if ok { "honoured" } else { "ignored" }.to_string()
}

/// `fencegate probe-store BACKEND`: the store buckets the configuration puts on `name` (or
/// `store_bucket`), each probed on a scratch prefix that is removed afterwards; `writers` in
/// each race, else as many as `serve` races at start-up on that kind of store.
pub async fn probe_store(
    config: &Config,
    name: &str,
    store_bucket: Option<&str>,
    writers: Option<usize>,
) -> Result<Vec<Verdict>, String> {
    let Some(backend) = config.backends.get(name) else {
        let names: Vec<&str> = config.backends.keys().map(String::as_str).collect();
        return Err(format!(
            "the configuration has no backend {name} (it has: {})",
            names.join(", ")
        ));
    };
    let targets = || targets(config, name, store_bucket);
    match backend {
        #[cfg(feature = "s3")]
        BackendConfig::S3(cfg) => {
            s3::probe_store(cfg, name, targets()?, writers.unwrap_or(RACE_WRITERS)).await
        }
        #[cfg(feature = "azure")]
        BackendConfig::Azure(cfg) => {
            azure::probe_store(config, cfg, name, targets()?, writers).await
        }
        #[cfg(feature = "gcs")]
        BackendConfig::Gcs(cfg) => {
            gcs::probe_store(config, cfg, name, targets()?, writers).await
        }
        BackendConfig::Fs { .. } => Err(format!("backend {name} is an fs backend, a directory fencegate alone writes: it needs no probe")),
        #[allow(unreachable_patterns)]
        _ => Err(format!("backend {name} is of a kind this fencegate was built without")),
    }
}

/// The (store bucket, prefix) pairs the configuration puts on backend `name`, or the one
/// store bucket named.
fn targets(
    config: &Config,
    name: &str,
    store_bucket: Option<&str>,
) -> Result<Vec<(String, String)>, String> {
    let mut targets: Vec<(String, String)> = match store_bucket {
        Some(b) => vec![(b.to_string(), String::new())],
        None => config
            .buckets
            .iter()
            .filter(|(_, p)| p.backend == name)
            .map(|(bucket, p)| {
                (
                    p.backend_bucket.clone().unwrap_or_else(|| bucket.clone()),
                    p.backend_prefix.clone(),
                )
            })
            .collect(),
    };
    targets.sort();
    targets.dedup();
    if targets.is_empty() {
        return Err(format!("no bucket in the configuration is on backend {name}: name the store's bucket with --bucket"));
    }
    Ok(targets)
}

/// The verdicts as `probe-store` prints them: per store bucket, a table of capability, result
/// and what fencegate will do, then whether `serve` starts.
pub fn table(verdicts: &[Verdict]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for v in verdicts {
        let _ = writeln!(
            out,
            "backend {}, store bucket {}{}:",
            v.backend,
            v.store_bucket,
            if v.prefix.is_empty() {
                String::new()
            } else {
                format!(", prefix {}", v.prefix)
            }
        );
        // A capability that is not honoured is marked with `!`.
        let result = |r: &Row| {
            if r.ok {
                r.result.clone()
            } else {
                format!("{} !", r.result)
            }
        };
        let width = v.capabilities.iter().map(|r| r.capability.len()).max();
        let width = width.unwrap_or(0);
        let rw = v.capabilities.iter().map(|r| result(r).len()).max();
        let rw = rw.unwrap_or(0);
        let _ = writeln!(
            out,
            "  {:width$}  {:rw$}  WHAT FENCEGATE WILL DO",
            "CAPABILITY", "RESULT"
        );
        for r in &v.capabilities {
            let _ = writeln!(
                out,
                "  {:width$}  {:rw$}  {}",
                r.capability,
                result(r),
                r.action
            );
        }
        let summary = match (v.safe, v.starts) {
            (true, _) => "SAFE: fencegate serves this store in safe mode".to_string(),
            (false, true) => format!(
                "NOT SAFE: serve starts only because of the backend's settings (conditional_writes = \"fencegate\", unsafe_unconditional_deletes):\n    {}",
                v.accepted.join("\n    ")
            ),
            (false, false) => format!(
                "NOT SAFE: serve refuses to start on it:\n    {}",
                v.refusals.join("\n    ")
            ),
        };
        let _ = writeln!(out, "  {summary}");
        let _ = writeln!(out, "  WHAT CLIENTS OF FENCEGATE GET:");
        for g in &v.guarantees {
            let _ = writeln!(out, "    - {g}");
        }
        let _ = writeln!(out);
    }
    out
}
